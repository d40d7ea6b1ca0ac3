"""Image classification training example (a small CNN on a synthetic digits-like set).

Written the way public example scripts are: argparse flags, a ``dataloader`` factory,
a ``train`` function with the usual loop. It knows nothing about any benchmark tool:
measurements are attached from outside by ``voirfile.py``.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def dataloader(args):
    """Build the training loader (random 28x28 images with random labels)."""
    generator = torch.Generator().manual_seed(args.seed)
    images = torch.randn(args.num_samples, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (args.num_samples,), generator=generator)
    dataset = TensorDataset(images, labels)
    return DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
    )


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if args.log_interval and batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                f"\tLoss: {loss.item():.6f}"
            )


def main():
    parser = argparse.ArgumentParser(description="CNN training example")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N")
    parser.add_argument("--epochs", type=int, default=10, metavar="N")
    parser.add_argument("--lr", type=float, default=0.01, metavar="LR")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--num-samples", type=int, default=2048, help="training set size")
    parser.add_argument("--workers", type=int, default=0, help="data loading workers")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--log-interval", type=int, default=0, help="batches between log lines")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    train_loader = dataloader(args)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)


if __name__ == "__main__":
    main()
