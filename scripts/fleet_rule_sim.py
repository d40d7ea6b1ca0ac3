"""Simulate the fleet slow rule: how often a healthy fleet is flagged, how often a slow
node is found, with each node's spread taken from the others (the rule) or from every
node (the rule before it). The figures of docs/fleet.md, "slow".

    python scripts/fleet_rule_sim.py [--fleets 20000] [--seed 1]

Each fleet draws every node's rate from a normal law around 1 (standard deviation `s`),
then divides one node's rate by two for the detection column. The interval condition of
the rule is left out (every check gets no interval), so the false-flag figures are upper
bounds: a real noisy node's own interval usually reaches the median and spares it.
"""

from __future__ import annotations

import argparse
import random
import statistics

from milabench.fleet.report import check_slow, median_abs_deviation, spread_without


def flagged(rates: list[float], *, others: bool) -> list[bool]:
    """The slow verdict of every node, the spread being the others' or everyone's."""
    median = statistics.median(rates)
    named = {f"n{i}": r for i, r in enumerate(rates)}
    out = []
    for name, rate in named.items():
        mad = spread_without(named, name)[0] if others else median_abs_deviation(rates)
        out.append(check_slow(rate, None, median, mad).slow)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(
        "| nodes | s | a healthy fleet flagged (all -> others) | a 0.5x node found (all -> others) |"
    )
    print("|---|---|---|---|")
    for n in (3, 5, 8):
        for s in (0.02, 0.05, 0.10):
            false = {False: 0, True: 0}
            found = {False: 0, True: 0}
            for _ in range(args.fleets):
                rates = [rng.gauss(1.0, s) for _ in range(n)]
                for mode in (False, True):
                    false[mode] += any(flagged(rates, others=mode))
                rates[-1] *= 0.5
                for mode in (False, True):
                    found[mode] += flagged(rates, others=mode)[-1]
            f = {k: 100.0 * v / args.fleets for k, v in false.items()}
            d = {k: 100.0 * v / args.fleets for k, v in found.items()}
            print(
                f"| {n} | {s:.0%} | {f[False]:.1f}% -> {f[True]:.1f}% "
                f"| {d[False]:.0f}% -> {d[True]:.0f}% |"
            )


if __name__ == "__main__":
    main()
