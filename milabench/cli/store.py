"""`milabench store`: keep results in a database and look at a benchmark's history.

    milabench store import RUN [RUN...] [--url URL]     (idempotent)
    milabench store history BENCH [--last N] [--machine M] [--k 3] [--url URL] [--check]
    milabench store runs [--url URL]

URL: `sqlite:///path` (default `<base>/results.sqlite`), a bare file path, or any
SQLAlchemy URL such as `postgresql://user@host/db` (needs `milabench[store]`).
"""

from __future__ import annotations

import argparse
import datetime
import math
from pathlib import Path

from milabench.cli.common import add_option, base_path


def _common(p: argparse.ArgumentParser) -> None:
    add_option(
        p,
        "url",
        default=None,
        metavar="URL",
        help="database URL (default: sqlite:///<base>/results.sqlite; env MILABENCH_STORE_URL)",
    )
    add_option(
        p,
        "base",
        default=None,
        metavar="PATH",
        help="base directory (env MILABENCH_BASE; default ./results)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="store_command", metavar="ACTION")
    p = sub.add_parser("import", help="import run folders (a run already stored is skipped)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders")
    add_option(p, "k", type=float, default=3.0, help="flag values k std devs from history")
    _common(p)
    p = sub.add_parser("history", help="recent results of one benchmark, with outlier flags")
    p.add_argument("bench", metavar="BENCH")
    add_option(p, "last", type=int, default=20, metavar="N", help="show the last N results")
    add_option(p, "machine", default=None, help="only results of this machine (hostname)")
    add_option(p, "k", type=float, default=3.0, help="flag values k std devs from history")
    add_option(p, "window", type=int, default=10, help="how many earlier values form the history")
    add_option(p, "check", action="store_true", help="exit 1 when the latest value is flagged")
    _common(p)
    p = sub.add_parser("runs", help="list stored runs")
    _common(p)


def store_url(args: argparse.Namespace) -> str:
    import os

    from milabench.report.store import default_url

    return args.url or os.environ.get("MILABENCH_STORE_URL") or default_url(base_path(args))


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.report.store import Store

    action = getattr(args, "store_command", None)
    if action is None:
        raise UsageError("milabench store: choose an action: import, history or runs")
    with Store(store_url(args)) as store:
        if action == "import":
            for run_dir in args.runs:
                res = store.import_run(Path(run_dir))
                if not res.added:
                    print(f"{res.name}: already stored, nothing added")
                    continue
                print(f"{res.name}: imported {res.benchmarks} benchmark(s)")
                from milabench.report.numbers import fmt_sig

                for bench in _benches(store, res.run_id):
                    row = store.history(bench, last=1, k=args.k)
                    if row and row[-1].flagged:
                        print(f"  ! {bench}: perf {fmt_sig(row[-1].perf)} is {row[-1].zscore:+.1f} "
                              f"std devs from its history")  # fmt: skip
            return 0
        if action == "runs":
            for name in store.run_names():
                print(name)
            return 0
        rows = store.history(args.bench, last=args.last, machine=args.machine, k=args.k,
                             window=args.window)  # fmt: skip
        if not rows:
            raise UsageError(f"no stored result for benchmark '{args.bench}'")
        header = ["run", "date", "machine", "n", "fail", "perf", "std%", "score", "flag"]
        cells = [header] + [
            [
                r.run,
                _when(r.started),
                r.machine or "-",
                str(r.n),
                str(r.fail),
                _num(r.perf, ".2f"),
                _num(r.std, ".1f"),
                _num(r.score, ".2f"),
                (f"OUTLIER ({r.zscore:+.1f} sd)" if r.flagged else ""),
            ]  # fmt: skip
            for r in rows
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
        for c in cells:
            print(" | ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())
        return 1 if args.check and rows[-1].flagged else 0


def _benches(store, run_id: str) -> list[str]:
    with store.db.transaction() as conn:
        rows = store.db.run(conn, "SELECT bench FROM mb_results WHERE run_id = :r", {"r": run_id})
    return [r[0] for r in rows]
