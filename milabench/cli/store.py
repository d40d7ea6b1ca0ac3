"""`milabench store`: keep results in a database.

    milabench store import RUN [RUN...] [--url URL] [--k 3]     (idempotent)
    milabench store runs [--url URL]

URL: `sqlite:///path` (default `<base>/results.sqlite`), a bare file path, or any
SQLAlchemy URL such as `postgresql://user@host/db` (needs `milabench[store]`).
`import` says which value it adds is an outlier against its history; `milabench history`
looks at the stored results over time (change points, or `--method outliers`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from milabench.cli.common import add_option, base_path


def add_store_options(p: argparse.ArgumentParser) -> None:
    """--url and --base: which results store (shared with `milabench history`)."""
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
    add_store_options(p)
    p = sub.add_parser("runs", help="list stored runs")
    add_store_options(p)


def store_url(args: argparse.Namespace) -> str:
    """--url, else MILABENCH_STORE_URL, else the SQLite file under the base."""
    import os

    from milabench.history.store import default_url

    return args.url or os.environ.get("MILABENCH_STORE_URL") or default_url(base_path(args))


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.history.outliers import outliers
    from milabench.history.store import Store
    from milabench.report.numbers import fmt_sig

    action = getattr(args, "store_command", None)
    if action is None:
        raise UsageError("milabench store: choose an action: import or runs")
    with Store(store_url(args)) as store:
        if action == "runs":
            for name in store.run_names():
                print(name)
            return 0
        for run_dir in args.runs:
            res = store.import_run(Path(run_dir))
            if not res.added:
                print(f"{res.name}: already stored, nothing added")
                continue
            print(f"{res.name}: imported {res.benchmarks} benchmark(s)")
            for bench in store.run_benchmarks(res.run_id):
                row = outliers(store, bench, last=1, k=args.k)
                if row and row[-1].flagged:
                    print(f"  ! {bench}: perf {fmt_sig(row[-1].result.perf)} is "
                          f"{row[-1].zscore:+.1f} std devs from its history")  # fmt: skip
        return 0
