"""A plain training-style script, measured only through probes (it imports nothing of
milabench, benchkit or voir)."""

import time


def make_loader(n):
    return [list(range(8)) for _ in range(n)]


def train_step(batch):
    time.sleep(0.002)
    loss = 1.0 / len(batch)
    return loss


def evaluate(batch):
    """Never called by this script: a probe on it never fires."""
    loss = 0.0
    return loss


def main():
    loader = make_loader(20)
    for _epoch in range(1000):
        for batch in loader:
            train_step(batch)


if __name__ == "__main__":
    main()
