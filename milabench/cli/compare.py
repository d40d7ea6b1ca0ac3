"""`milabench compare`: is B different from A, beyond the noise? Is it a regression?

    milabench compare A B                      two run folders (a,b comma lists are pooled)
    milabench compare --baseline A B [B...]    A: a run folder, or a stored run name (--url)
    milabench compare --ab --config A.yaml [--config-b B.yaml] [--override-b K=V]
                      [--env-b K=V] [--base-b DIR] [--rounds N] [--confirm-rounds N]

Thresholds per benchmark: the suite entries' `compare:` key (--config) or --thresholds
FILE (YAML: `default: {relative: 5%}`, `<bench>: {relative: 10%, absolute: 20}`).
Exit code 1 on a confirmed regression (significant and beyond its threshold).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from milabench.cli.common import add_option, add_suite_options, base_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="*", metavar="RUN", help="run folders: A then B (or B... with --baseline)"
    )
    add_option(
        parser,
        "baseline",
        default=None,
        metavar="RUN",
        help="baseline: a run folder, or the name of a run in the store (--url)",
    )
    add_option(parser, "url", default=None, metavar="URL", help="results store for --baseline")
    add_option(parser, "thresholds", default=None, metavar="FILE", help="YAML thresholds file")
    add_option(parser, "format", default="text", choices=["text", "markdown", "md", "json"])
    add_option(parser, "alpha", type=float, default=None, help="significance level (0.05)")
    add_option(
        parser,
        "min-effect",
        type=float,
        default=None,
        help="smallest relative change reported as significant (0.05)",
    )
    add_option(parser, "resamples", type=int, default=2000, help="bootstrap resamples")
    add_option(parser, "seed", type=int, default=0, help="bootstrap seed")
    add_option(
        parser, "ab", action="store_true", help="run control (A) and treatment (B) interleaved"
    )
    add_option(parser, "config-b", default=None, metavar="PATH", help="A/B: treatment suite file")
    add_option(
        parser,
        "override-b",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A/B: overrides for the treatment only (--override applies to both)",
    )
    add_option(
        parser,
        "env-b",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="A/B: environment variables for the treatment's run",
    )
    add_option(
        parser,
        "base-b",
        default=None,
        metavar="PATH",
        help="A/B: treatment base directory (another set of environments)",
    )
    add_option(parser, "rounds", type=int, default=2, help="A/B: interleaved rounds")
    add_option(
        parser,
        "confirm-rounds",
        type=int,
        default=None,
        help="A/B: rounds to confirm a suspected regression (default: --rounds; 0: none)",
    )
    add_suite_options(parser)


def _dirs(spec: str) -> list[Path]:
    return [Path(p) for p in spec.split(",") if p]


def _kwargs(args: argparse.Namespace, entries: dict | None) -> dict:
    from milabench.report.compare import (
        DEFAULT_ALPHA,
        DEFAULT_MIN_EFFECT,
        Threshold,
        thresholds_from_entries,
        thresholds_from_file,
    )

    thresholds: dict = {"default": Threshold()}
    if entries:
        thresholds.update(thresholds_from_entries(entries, thresholds["default"]))
    if args.thresholds:
        thresholds.update(thresholds_from_file(Path(args.thresholds)))
    return {
        "thresholds": thresholds,
        "alpha": DEFAULT_ALPHA if args.alpha is None else args.alpha,
        "min_effect": DEFAULT_MIN_EFFECT if args.min_effect is None else args.min_effect,
        "resamples": args.resamples,
        "seed": args.seed,
    }


def _entries(args: argparse.Namespace) -> dict | None:
    if not args.config:
        return None
    from milabench.cli.common import load_suite_from_args

    return load_suite_from_args(args).all_entries


def _side(spec: str, args: argparse.Namespace) -> tuple[dict[str, list[float]], str]:
    from milabench.report import build_report
    from milabench.report.compare import samples_of

    dirs = _dirs(spec)
    if all(d.is_dir() for d in dirs):
        return samples_of(build_report(dirs)), spec
    if args.baseline == spec and len(dirs) == 1:
        from milabench.cli.store import store_url
        from milabench.report.store import Store

        with Store(store_url(args)) as store:
            return store.samples(spec), f"store:{spec}"
    from milabench.errors import UsageError

    missing = next(d for d in dirs if not d.is_dir())
    raise UsageError(f"{missing}: no such run folder")


def _ab(args: argparse.Namespace, kwargs: dict) -> int:
    from milabench.cli.common import config_path, system_path
    from milabench.errors import UsageError
    from milabench.report.abtest import Arm, ab_compare
    from milabench.report.compare import render_comparison

    env_b = {}
    for item in args.env_b:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env-b: expected NAME=VALUE, got {item!r}")
        env_b[name] = value
    if not (args.config_b or args.override_b or env_b or args.base_b):
        raise UsageError("--ab needs a treatment: --config-b, --override-b, --env-b or --base-b")
    base = base_path(args)
    common = {"system": system_path(args), "use_current_env": args.use_current_env,
              "select": [s for v in args.select for s in v.split(",") if s],
              "exclude": [s for v in args.exclude for s in v.split(",") if s]}  # fmt: skip
    control = Arm("A", config_path(args), base, list(args.override), **common)
    treatment = Arm(
        "B",
        Path(args.config_b) if args.config_b else config_path(args),
        Path(args.base_b).absolute() if args.base_b else base,
        list(args.override) + list(args.override_b),
        env_b,
        **common,
    )
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    cmp, _, _ = ab_compare(control, treatment, rounds=args.rounds,
                           confirm_rounds=args.confirm_rounds, log=log, **kwargs)  # fmt: skip
    sys.stdout.write(render_comparison(cmp, args.format))
    return cmp.exit_code


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.report.compare import compare_samples, render_comparison

    kwargs = _kwargs(args, _entries(args))
    if args.ab:
        return _ab(args, kwargs)
    if args.baseline:
        if not args.runs:
            raise UsageError("compare --baseline RUN: give the run folder(s) to check after it")
        a_spec, b_spec = args.baseline, ",".join(args.runs)
    elif len(args.runs) == 2:
        a_spec, b_spec = args.runs
    else:
        raise UsageError("compare: give two run folders (A B), or --baseline RUN and a run folder")
    a, a_label = _side(a_spec, args)
    b, b_label = _side(b_spec, args)
    cmp = compare_samples(a, b, a_label=a_label, b_label=b_label, **kwargs)
    sys.stdout.write(render_comparison(cmp, args.format))
    return cmp.exit_code
