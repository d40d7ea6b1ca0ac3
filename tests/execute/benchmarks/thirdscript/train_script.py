"""A third-party training script run as it is: not called main.py, knows nothing of
milabench, benchkit or voir, parses its arguments, writes to a path relative to its
working directory and keeps a counter in ``$MILABENCH_DIR_EXTRA`` without creating it."""

import argparse
import os
import time
from pathlib import Path


def make_loader(n):
    return [list(range(8)) for _ in range(n)]


def train_step(batch):
    time.sleep(0.002)
    loss = 1.0 / len(batch)
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--output", default="outputs/cwd.txt")
    args = parser.parse_args()

    output = Path(args.output)  # relative: lands in the working directory
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(os.getcwd() + "\n")

    counter = Path(os.environ["MILABENCH_DIR_EXTRA"]) / "runs-seen.txt"
    seen = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(f"{seen + 1}\n")

    loader = make_loader(20)
    for _epoch in range(args.epochs):
        for batch in loader:
            train_step(batch)


if __name__ == "__main__":
    main()
