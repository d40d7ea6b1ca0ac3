"""The test files' cost, read from a ``MILABENCH_TEST_CPU_LOG`` folder, printed or
written as the table that orders the test session (tests/file_costs.json).

Usage::

    CI=true MILABENCH_TEST_CPU_LOG=/tmp/cpu python -m pytest -q --system
    python scripts/test_costs.py /tmp/cpu                 # the 25 costliest files
    python scripts/test_costs.py /tmp/cpu --write tests/file_costs.json

A file's cost is the seconds a worker spent on it (``wall``: what the session's order
balances, a file that waits on a daemon's timeout holds its worker though it uses little
CPU) and the CPU seconds of its tests and of the processes they waited for (``cpu``,
tests/cputime.py), rounded to the second. Files under ``--min`` seconds of wall time
(default 10) are left out of the table: the session orders them as collected. Exit
status 2 when the folder holds no log line.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def file_costs(folder: Path) -> dict[str, dict[str, float]]:
    """``wall`` and ``cpu`` seconds per test file (its path as pytest names it), the
    longest first."""
    costs: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"wall": 0, "cpu": 0})
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                cost = costs[record["id"].split("::", 1)[0]]
                cost["wall"] += record["wall"]
                cost["cpu"] += record["self"] + record["children"]
    return dict(sorted(costs.items(), key=lambda kv: -kv[1]["wall"]))


def table(costs: dict[str, dict[str, float]], minimum: float) -> dict[str, dict[str, int]]:
    return {name: {k: round(v) for k, v in cost.items()}
            for name, cost in costs.items() if cost["wall"] >= minimum}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("folder", type=Path, help="the MILABENCH_TEST_CPU_LOG folder")
    parser.add_argument("--write", type=Path, help="write the table (JSON) to this file")
    parser.add_argument("--min", type=float, default=10.0, help="smallest wall time kept (s)")
    args = parser.parse_args(argv)
    costs = file_costs(args.folder)
    if not costs:
        print(f"{args.folder}: no MILABENCH_TEST_CPU_LOG line", file=sys.stderr)
        return 2
    if args.write:
        document = {
            "about": "seconds a worker spent on each test file (wall) and the CPU "
            "seconds of its tests (cpu), scripts/test_costs.py; the session runs the "
            "longest first (tests/concurrency.py)",
            "total": {k: round(sum(c[k] for c in costs.values())) for k in ("wall", "cpu")},
            "files": table(costs, args.min),
        }
        args.write.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        return 0
    print("   wall     cpu  file")
    for name, cost in list(costs.items())[:25]:
        print(f"{cost['wall']:7.1f} {cost['cpu']:7.1f}  {name}")
    walls, cpus = (sum(c[k] for c in costs.values()) for k in ("wall", "cpu"))
    print(f"{walls:7.1f} {cpus:7.1f}  in all, {len(costs)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
