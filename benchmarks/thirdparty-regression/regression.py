"""Polynomial regression with a single linear layer.

A fixed random target function y = W_true . phi(x) + b_true + noise, where phi(x)
stacks the powers x, x^2, ..., x^degree of every input feature (standardised), is
sampled once; a ``nn.Linear`` model is then fitted to it with mini-batch SGD.

    python regression.py --epochs 5 --features 1024 --degree 2
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def make_features(x, degree):
    """Stack x, x^2, ..., x^degree along the feature dimension."""
    return torch.cat([x**i for i in range(1, degree + 1)], dim=1)


def make_dataset(num_samples, features, degree, outputs, noise, generator):
    x = torch.randn(num_samples, features, generator=generator)
    phi = make_features(x, degree)
    phi.sub_(phi.mean(dim=0)).div_(phi.std(dim=0))
    w_true = torch.randn(outputs, phi.size(1), generator=generator) / phi.size(1) ** 0.5
    b_true = torch.randn(outputs, generator=generator)
    y = phi @ w_true.t() + b_true + noise * torch.randn(num_samples, outputs, generator=generator)
    return phi, y, w_true, b_true


def main():
    parser = argparse.ArgumentParser(description="Polynomial regression example")
    parser.add_argument("--batch-size", type=int, default=256, metavar="N")
    parser.add_argument("--epochs", type=int, default=10, metavar="N")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--features", type=int, default=1024, help="input size")
    parser.add_argument("--degree", type=int, default=2, help="polynomial degree")
    parser.add_argument("--outputs", type=int, default=512, help="output size")
    parser.add_argument("--noise", type=float, default=0.1, help="std of the target noise")
    parser.add_argument("--num-samples", type=int, default=8192, help="training set size")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-interval", type=int, default=0, help="batches between log lines")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    generator = torch.Generator().manual_seed(args.seed)
    inputs, targets, w_true, b_true = make_dataset(
        args.num_samples, args.features, args.degree, args.outputs, args.noise, generator
    )
    print(f"{inputs.size(0)} samples, {inputs.size(1)} inputs, {targets.size(1)} outputs")

    loader = DataLoader(
        TensorDataset(inputs, targets), batch_size=args.batch_size, shuffle=True, drop_last=True
    )
    model = nn.Linear(inputs.size(1), targets.size(1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    last_loss = float("nan")
    for epoch in range(1, args.epochs + 1):
        total, count = 0.0, 0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            last_loss = loss.item()
            total += last_loss
            count += 1
            if args.log_interval and count % args.log_interval == 0:
                print(f"epoch {epoch} batch {count} loss {last_loss:.6f}")
        print(f"epoch {epoch}: mean loss {total / max(count, 1):.6f}")

    with torch.no_grad():
        w_err = (model.weight.cpu() - w_true).norm() / w_true.norm()
        b_err = (model.bias.cpu() - b_true).norm() / b_true.norm()
    print(f"relative error of the learned weights: {w_err:.4f}, bias: {b_err:.4f}")
    print(f"final loss {last_loss:.6f}")


if __name__ == "__main__":
    main()
