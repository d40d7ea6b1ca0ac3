"""A third-party style training script: knows nothing about milabench or voir."""

import argparse
import time


def train_step(step):
    total = sum(i * i for i in range(2000))
    loss = 1.0 / (step + 1) + total * 0.0
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    for step in range(args.steps):
        train_step(step)
        time.sleep(0.001)
    print("finished all steps")


if __name__ == "__main__":
    main()
