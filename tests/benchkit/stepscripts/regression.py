"""Fit a linear model to random data, in the style of a small public example.

No loader: ``train`` slices batches out of a tensor over an index range, and top-level
code calls it once per epoch (a fixture of tests/benchkit/test_step_mode_voir.py).
"""

import argparse

parser = argparse.ArgumentParser(description="linear regression on random data")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--n", type=int, default=512)
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()

import torch  # noqa: E402

torch.manual_seed(0)
data = torch.randn(args.n, 8)
target = data @ torch.ones(8, 1)
w = torch.zeros(8, 1, requires_grad=True)


def train(inputs, epoch):
    total = 0.0
    for i in range(0, len(inputs), args.batch_size):
        x = inputs[i : i + args.batch_size]
        y = target[i : i + args.batch_size]

        # one step of gradient descent on this batch
        loss = (x @ w - y).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            w.sub_(0.01 * w.grad)
            w.grad.zero_()
        total += loss.item()
    return total


for epoch in range(args.epochs):
    out = train(data, epoch)
    print(f"epoch {epoch} loss {out:.4f}", flush=True)
print("done training", flush=True)
