"""`milabench history`: stored results over time: change points (a site, alerts) or outliers.

    milabench history [--method changepoints] [--output DIR] [--new N] [--notify URL] ...
    milabench history --method outliers [--last N] [--k 3] [--window 10] [--check] ...

`changepoints` (the default) searches every series of the results store for change
points; exit code 1 when a rate-lowering change point is new (its first run among the
last `--new` runs of its series), else 0. `outliers` flags each result more than `--k`
standard deviations from the `--window` results of its machine before it; with `--check`
exit code 1 when a benchmark's latest result is flagged. Exit code 2 on a usage error (an
empty store, an option of the other method). Every option and rule: docs/history.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from milabench.cli.common import add_option, add_render_options
from milabench.cli.store import add_store_options, store_url

METHODS = ("changepoints", "outliers")

# Options of one method only: dest -> (option, method). Their defaults are None or False
# in the parser, so that giving one to the other method is an error, never ignored.
ONLY: dict[str, tuple[str, str]] = {
    "all": ("--all", "changepoints"),
    "output": ("--output", "changepoints"),
    "x": ("--x", "changepoints"),
    "trend": ("--trend", "changepoints"),
    "new": ("--new", "changepoints"),
    "min_effect": ("--min-effect", "changepoints"),
    "alpha": ("--alpha", "changepoints"),
    "suite": ("--suite", "changepoints"),
    "tag": ("--tag", "changepoints"),
    "notify": ("--notify", "changepoints"),
    "notify_always": ("--notify-always", "changepoints"),
    "last": ("--last", "outliers"),
    "k": ("--k", "outliers"),
    "window": ("--window", "outliers"),
    "check": ("--check", "outliers"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from milabench.history import series

    add_option(parser, "method", choices=METHODS, default="changepoints",
               help="changepoints: change points of every series, alerts, site (default); "
                    "outliers: each result against the ones before it (k std devs)")  # fmt: skip
    add_store_options(parser)
    add_render_options(parser, series.RENDERERS,
                       format_help="format of the table printed (default: text)")  # fmt: skip
    add_option(parser, "bench", action="append", default=[], metavar="NAME",
               help="only this benchmark (repeatable; default: all)")  # fmt: skip
    add_option(parser, "machine", default=None, help="only results of this machine (hostname)")
    g = parser.add_argument_group("changepoints")
    add_option(g, "all", action="store_true", default=None,
               help="print every change point, not only regressions")  # fmt: skip
    add_option(g, "output", default=None, metavar="DIR",
               help="write the static site (index.html, one page per benchmark) there")  # fmt: skip
    add_option(g, "x", choices=("date", "commit"), default=None,
               help="x axis of the benchmark charts: run date or commit (default: date)")  # fmt: skip
    add_option(g, "trend", type=int, default=None, metavar="N",
               help="the summary's trend and sparkline cover the last N runs (default 10)")  # fmt: skip
    add_option(g, "new", type=int, default=None, metavar="N",
               help="an alert is new when its first run after the change is among the last "
                    "N runs of its series; exit 1 on a new alert (default 3: a change is "
                    "seen once 3 runs follow it)")  # fmt: skip
    add_option(g, "min-effect", type=float, default=None, metavar="F",
               help="smallest relative change of medians kept (default 0.05 = 5%%)")  # fmt: skip
    add_option(g, "alpha", type=float, default=None,
               help="significance level of the permutation test (default 0.01)")  # fmt: skip
    add_option(g, "suite", default=None, help="only runs of this suite file (e.g. cpu.yaml)")
    add_option(g, "tag", default=None, help="only results of entries with this tag")
    add_option(g, "notify", default=None, metavar="URL",
               help="POST the alerts as JSON to this URL when there is a new one")  # fmt: skip
    add_option(g, "notify-always", action="store_true", default=None,
               help="POST even when no alert is new (a heartbeat)")  # fmt: skip
    g = parser.add_argument_group("outliers")
    add_option(g, "last", type=int, default=None, metavar="N",
               help="show the last N results of each benchmark (default 20; 0: all)")  # fmt: skip
    add_option(g, "k", type=float, default=None,
               help="flag values more than K std devs from the earlier ones (default 3)")  # fmt: skip
    add_option(g, "window", type=int, default=None, metavar="N",
               help="how many earlier results of the machine form the history (default 10)")  # fmt: skip
    add_option(g, "check", action="store_true", default=None,
               help="exit 1 when the latest result of a benchmark is flagged")  # fmt: skip


def _check_method_options(args: argparse.Namespace) -> None:
    from milabench.errors import UsageError

    wrong = [opt for dest, (opt, method) in ONLY.items()
             if method != args.method and getattr(args, dest) is not None]  # fmt: skip
    if wrong:
        raise UsageError(f"{', '.join(wrong)}: only with --method "
                         f"{ONLY[_dest(wrong[0])][1]} (this is --method {args.method})")  # fmt: skip


def _dest(option: str) -> str:
    return next(dest for dest, (opt, _) in ONLY.items() if opt == option)


def _or(value, default):
    return default if value is None else value


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.history.store import Store

    _check_method_options(args)
    with Store(store_url(args)) as store:
        known = store.benchmarks()
        if not known:
            raise UsageError(f"the results store holds no result: {import_hint(args)}")
        missing = [b for b in args.bench if b not in known]
        if missing:
            raise UsageError(f"no stored result for benchmark(s): {', '.join(missing)}")
        if args.method == "outliers":
            return _outliers(store, args.bench or known, args)
        return _changepoints(store, args)


def _outliers(store, benches: list[str], args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.history import outliers as rule

    last, window = _or(args.last, rule.DEFAULT_LAST), _or(args.window, rule.DEFAULT_WINDOW)
    if last < 0 or window < 1:
        raise UsageError("--last must be >= 0 and --window >= 1")
    tables = {}
    for bench in benches:
        rows = rule.outliers(store, bench, last=last, machine=args.machine,
                             k=_or(args.k, rule.DEFAULT_K), window=window)  # fmt: skip
        if rows:
            tables[bench] = rows
    if not tables:
        raise UsageError(f"no stored result of {', '.join(benches)} on machine {args.machine}")
    sys.stdout.write(rule.render(tables, args.format))
    return 1 if args.check and rule.latest_flagged(tables) else 0


def _changepoints(store, args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.history import notify, series, site

    new, trend = _or(args.new, 3), _or(args.trend, 10)
    alpha, min_effect = _or(args.alpha, 0.01), _or(args.min_effect, 0.05)
    if new < 0 or trend < 1:
        raise UsageError("--new must be >= 0 and --trend >= 1")
    if not 0 < alpha < 1 or min_effect < 0:
        raise UsageError("--alpha must be in (0, 1) and --min-effect >= 0")
    data = series.load(store, benches=args.bench or None, machine=args.machine,
                       suite=args.suite, tag=args.tag)  # fmt: skip
    if not data:
        raise UsageError("no stored result matches --machine/--suite/--tag")
    changes = series.analyse(data, min_effect=min_effect, alpha=alpha, new=new)
    alerts = [c for c in changes if c.regression]
    new_alerts = [c for c in alerts if c.new]
    site_dir = None
    if args.output:
        params = f"min effect {min_effect:g}, alpha {alpha:g}, new = last {new} run(s)"
        site.build(Path(args.output), data, changes, x_axis=_or(args.x, "date"), last=trend,
                   params=params)  # fmt: skip
        site_dir = str(Path(args.output).absolute())
    shown = changes if args.all else alerts
    extra = {"series": len(data), "new_alerts": len(new_alerts), "site": site_dir}
    print(series.render(shown, args.format, series=len(data), everything=bool(args.all),
                        extra=extra))  # fmt: skip
    if site_dir:
        print(f"site: {site_dir}/index.html", file=sys.stderr)
    if args.notify and (new_alerts or args.notify_always):
        body = notify.payload([c.as_dict() for c in alerts], site_dir)
        problem = notify.post(args.notify, body)
        if problem:
            print(f"milabench: warning: {problem}", file=sys.stderr)
    return 1 if new_alerts else 0


def import_hint(args: argparse.Namespace) -> str:
    """What fills an empty store, as a command to paste: the import of the latest run
    under the base into this store, or a run to start when there is none."""
    import shlex

    from milabench.cli.common import base_path
    from milabench.config.commands import command_line, shown_path
    from milabench.report.locate import benchmark_runs

    base = base_path(args)
    runs = benchmark_runs(base / "runs")
    if not runs:
        return f"no run under {base / 'runs'} to import: start one with " + (
            f"`{command_line('run', base=base)}`"
        )
    where = ["--url", args.url] if getattr(args, "url", None) else []
    if not where and base.absolute() != Path("results").absolute():
        where = ["--base", shown_path(base)]
    words = ["milabench", "store", "import", shown_path(runs[-1]), *where]
    return f"import the latest run with `{shlex.join(words)}`"
