"""What a benchmark process saves by ending with `benchkit.exiting.run_and_exit`.

    python scripts/perf_exit.py                 # 7 interleaved rounds of each stack
    python scripts/perf_exit.py --rounds 3 --stacks torch

For each stack of imports a benchmark carries (``torch``: import torch and one tiny
backward; ``transformers``: a two-layer BERT built and stepped), the same script runs in a
fresh interpreter twice per round, interleaved: ending the usual way (``main()`` returns,
the interpreter frees its modules) and ending with ``run_and_exit(main)``. Prints the
median wall time of each and the difference: the time every benchmark process, and every
rank of a torchrun, stops spending after its measurement is over.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STACKS = {
    "torch": """
import torch
def main():
    model = torch.nn.Linear(8, 8)
    model(torch.randn(4, 8)).sum().backward()
""",
    "transformers": """
import torch
from transformers import BertConfig, BertForMaskedLM
def main():
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=100)
    model = BertForMaskedLM(config)
    out = model(input_ids=torch.randint(0, 100, (2, 16)), labels=torch.randint(0, 100, (2, 16)))
    out.loss.backward()
""",
}
ENDINGS = {
    "interpreter": "\nmain()\n",
    "run_and_exit": "\nfrom benchkit.exiting import run_and_exit\nrun_and_exit(main)\n",
}


def once(source: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", source], check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated")
    args = parser.parse_args()
    print("| stack | interpreter exit | run_and_exit | saved per process |")
    print("|---|---:|---:|---:|")
    for stack in args.stacks.split(","):
        times: dict[str, list[float]] = {name: [] for name in ENDINGS}
        once(STACKS[stack] + ENDINGS["interpreter"])  # warm the page cache
        for _ in range(args.rounds):
            for name, ending in ENDINGS.items():
                times[name].append(once(STACKS[stack] + ending))
        usual, short = (statistics.median(times[n]) for n in ENDINGS)
        print(f"| {stack} | {usual:.2f} s | {short:.2f} s | {usual - short:.2f} s |")


if __name__ == "__main__":
    main()
