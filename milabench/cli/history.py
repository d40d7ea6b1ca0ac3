"""`milabench history`: change points over the stored runs, a static site, alerts.

    milabench history [--url URL] [--base PATH] [--format text|markdown|json] [--all]
                      [--output DIR] [--x date|commit] [--trend N] [--new N]
                      [--min-effect 0.05] [--alpha 0.01]
                      [--bench B] [--machine M] [--suite S] [--tag T]
                      [--notify URL] [--notify-always]

Every series (benchmark x machine x suite file) of the results store is searched for
change points (docs/history.md). A change point that lowers the rate is an alert; the
exit code is 1 when an alert is *new* (its first run after the change is among the last
`--new` runs of its series), else 0; 2 on a usage error (e.g. an empty store).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from milabench.cli.common import add_option
from milabench.cli.store import _common, store_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    add_option(parser, "format", choices=("text", "markdown", "json"), default="text",
               help="format of the alerts table printed (default: text)")  # fmt: skip
    add_option(parser, "all", action="store_true",
               help="print every change point, not only regressions")  # fmt: skip
    add_option(parser, "output", default=None, metavar="DIR",
               help="write the static site (index.html, one page per benchmark) there")  # fmt: skip
    add_option(parser, "x", choices=("date", "commit"), default="date",
               help="x axis of the benchmark charts: run date or commit (default: date)")  # fmt: skip
    add_option(parser, "trend", type=int, default=10, metavar="N",
               help="the summary's trend and sparkline cover the last N runs (default 10)")  # fmt: skip
    add_option(parser, "new", type=int, default=3, metavar="N",
               help="an alert is new when its first run after the change is among the last "
                    "N runs of its series; exit 1 on a new alert (default 3: a change is "
                    "seen once 3 runs follow it)")  # fmt: skip
    add_option(parser, "min-effect", type=float, default=0.05, metavar="F",
               help="smallest relative change of medians kept (default 0.05 = 5%%)")  # fmt: skip
    add_option(parser, "alpha", type=float, default=0.01,
               help="significance level of the permutation test (default 0.01)")  # fmt: skip
    add_option(parser, "bench", action="append", default=[], metavar="NAME",
               help="only this benchmark (repeatable; default: all)")  # fmt: skip
    add_option(parser, "machine", default=None, help="only results of this machine (hostname)")
    add_option(parser, "suite", default=None, help="only runs of this suite file (e.g. cpu.yaml)")
    add_option(parser, "tag", default=None, help="only results of entries with this tag")
    add_option(parser, "notify", default=None, metavar="URL",
               help="POST the alerts as JSON to this URL when there is a new one")  # fmt: skip
    add_option(parser, "notify-always", action="store_true",
               help="POST even when no alert is new (a heartbeat)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.history import notify, series, site
    from milabench.report.store import Store

    if args.new < 0 or args.trend < 1:
        raise UsageError("--new must be >= 0 and --trend >= 1")
    if not 0 < args.alpha < 1 or args.min_effect < 0:
        raise UsageError("--alpha must be in (0, 1) and --min-effect >= 0")
    with Store(store_url(args)) as store:
        known = store.benchmarks()
        if not known:
            raise UsageError("the results store holds no result: `milabench store import RUN`")
        missing = [b for b in args.bench if b not in known]
        if missing:
            raise UsageError(f"no stored result for benchmark(s): {', '.join(missing)}")
        data = series.load(store, benches=args.bench or None, machine=args.machine,
                           suite=args.suite, tag=args.tag)  # fmt: skip
    if not data:
        raise UsageError("no stored result matches --machine/--suite/--tag")
    changes = series.analyse(data, min_effect=args.min_effect, alpha=args.alpha, new=args.new)
    alerts = [c for c in changes if c.regression]
    new_alerts = [c for c in alerts if c.new]
    site_dir = None
    if args.output:
        params = (f"min effect {args.min_effect:g}, alpha {args.alpha:g}, "
                  f"new = last {args.new} run(s)")  # fmt: skip
        site.build(Path(args.output), data, changes, x_axis=args.x, last=args.trend,
                   params=params)  # fmt: skip
        site_dir = str(Path(args.output).absolute())
    shown = changes if args.all else alerts
    extra = {"series": len(data), "new_alerts": len(new_alerts), "site": site_dir}
    print(series.render(shown, args.format, series=len(data), everything=args.all, extra=extra))
    if site_dir:
        print(f"site: {site_dir}/index.html", file=sys.stderr)
    if args.notify and (new_alerts or args.notify_always):
        body = notify.payload([c.as_dict() for c in alerts], site_dir)
        problem = notify.post(args.notify, body)
        if problem:
            print(f"milabench: warning: {problem}", file=sys.stderr)
    return 1 if new_alerts else 0
