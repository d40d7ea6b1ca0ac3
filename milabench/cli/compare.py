"""`milabench compare`: is B different from A, beyond the noise? Is it a regression?

    milabench compare                          the two latest runs under <base>/runs
    milabench compare A B                      two run folders (a,b comma lists are pooled)
    milabench compare --baseline A B [B...]    A: a run folder, or a stored run name (--url)
    milabench compare --ab --config A.yaml [--config-b B.yaml] [--override-b K=V]
                      [--env-b K=V] [--base-b DIR] [--rounds N] [--confirm-rounds N]

Thresholds per benchmark: the suite entries' `compare:` key (--config) or --thresholds
FILE (YAML: `default: {relative: 5%}`, `<bench>: {relative: 10%, absolute: 20}`).
Exit code 1 on a confirmed regression (significant and beyond its threshold).
A folder that holds runs (`<base>/runs`, or the base) stands for its latest run (given
alone: its two latest runs); the runs picked are named on stderr. `--format html` writes a
self-contained page (no script, no network); `--output FILE` writes any format to FILE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from milabench.cli.common import (
    add_option,
    add_render_options,
    add_suite_options,
    base_path,
    write_rendered,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from milabench.compare import RENDERERS

    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run folders: A then B (or B... with --baseline); none: the two latest runs "
        "under <base>/runs",
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
    add_render_options(
        parser, RENDERERS, output_help="write the comparison to FILE instead of standard output"
    )
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


def _kwargs(args: argparse.Namespace, entries: dict | None) -> dict:
    from milabench.compare.comparison import (
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
    from milabench.cli.common import given_config, load_suite_from_args

    if given_config(args) is None:
        return None

    return load_suite_from_args(args).all_entries


def _store_url(args: argparse.Namespace) -> str | None:
    """The results store a --baseline name is looked up in (None without --baseline)."""
    from milabench.cli.store import store_url

    return store_url(args) if args.baseline else None


def _ab(args: argparse.Namespace, kwargs: dict) -> int:
    from milabench.cli.common import config_path, system_path
    from milabench.compare import render
    from milabench.compare.abtest import Arm, ab_compare
    from milabench.errors import UsageError

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
    write_rendered(render(cmp, args.format), args.output, "comparison")
    return cmp.exit_code


def run(args: argparse.Namespace) -> int:
    from milabench.compare import render
    from milabench.compare.comparison import compare_samples
    from milabench.compare.sides import coverage_warnings, load_side
    from milabench.errors import UsageError
    from milabench.report.locate import expand_run_folder, has_run_data, latest_runs

    kwargs = _kwargs(args, _entries(args))
    if args.ab:
        return _ab(args, kwargs)
    if args.baseline:
        if not args.runs:
            raise UsageError("compare --baseline RUN: give the run folder(s) to check after it")
        a_spec, b_spec = args.baseline, ",".join(args.runs)
    elif len(args.runs) == 2:
        a_spec, b_spec = args.runs
    elif not args.runs:  # the two latest runs under the base
        a_spec, b_spec = (str(p) for p in latest_runs(base_path(args) / "runs", 2, "compare"))
    elif Path(args.runs[0]).is_dir() and not has_run_data(Path(args.runs[0])):
        a_spec, b_spec = (str(p) for p in expand_run_folder(Path(args.runs[0]), "compare", 2))
    else:
        raise UsageError("compare: give two run folders (A B), or --baseline RUN and a run folder")
    a = load_side(a_spec, store_url=_store_url(args))
    b = load_side(b_spec)
    if a.build and b.build and a.build != b.build:  # never compared silently
        print(
            f"warning: A ran build {a.build} and B build {b.build}: a difference may come "
            "from the CUDA build, not from what you changed",
            file=sys.stderr,
        )
    for line in coverage_warnings(a, b):  # scores over different entries: never silently
        print(line, file=sys.stderr)
    same = [r for r in a.runs if r in b.runs]
    if same:  # never compared silently either: every difference is 0 by construction
        shown = ", ".join(str(r) for r in same)
        both = "A and B are" if set(a.runs) == set(b.runs) else "A and B share"
        print(
            f"warning: {both} the same run folder{'s' * (len(same) > 1)} ({shown}): "
            "a run compared with itself shows no difference; give two different runs",
            file=sys.stderr,
        )
    cmp = compare_samples(a.samples, b.samples, a_label=a.label, b_label=b.label, **kwargs)
    write_rendered(render(cmp, args.format), args.output, "comparison")
    return cmp.exit_code
