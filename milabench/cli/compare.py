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

from milabench.cli.common import add_option, add_suite_options, base_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    add_option(parser, "format", default="text", choices=["text", "markdown", "md", "json", "html"])
    add_option(
        parser,
        "output",
        default=None,
        metavar="FILE",
        help="write the comparison to FILE instead of standard output",
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
    from milabench.cli.common import given_config, load_suite_from_args

    if given_config(args) is None:
        return None

    return load_suite_from_args(args).all_entries


def _side(spec: str, args: argparse.Namespace) -> tuple[dict[str, list[float]], str, str | None]:
    """Samples, label and build (`report.build.build_summary`; None from the store)."""
    from milabench.report import build_report
    from milabench.report.compare import samples_of

    dirs = _dirs(spec)
    if all(d.is_dir() for d in dirs):
        from milabench.cli.common import expand_run_folder

        runs = [r for d in dirs for r in expand_run_folder(d, "compare", phrase="compare uses")]
        label = spec if runs == dirs else ",".join(str(r) for r in runs)
        report = build_report(runs)
        return samples_of(report), label, report.system.get("build")
    if args.baseline == spec and len(dirs) == 1:
        from milabench.cli.store import store_url
        from milabench.report.store import Store

        with Store(store_url(args)) as store:
            return store.samples(spec), f"store:{spec}", None
    from milabench.errors import UsageError

    missing = next(d for d in dirs if not d.is_dir())
    raise UsageError(f"{missing}: no such run folder")


def _ab(args: argparse.Namespace, kwargs: dict) -> int:
    from milabench.cli.common import config_path, system_path
    from milabench.errors import UsageError
    from milabench.report.abtest import Arm, ab_compare

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
    _write(render(cmp, args.format), args)
    return cmp.exit_code


def _write(text: str, args: argparse.Namespace) -> None:
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"comparison written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def render(cmp, fmt: str) -> str:
    """The comparison as text, markdown, json (`render_comparison`) or an HTML page."""
    from milabench.report.compare import render_comparison

    return render_html(cmp) if fmt == "html" else render_comparison(cmp, fmt)


def _forest_plot(rows: list) -> str:
    """Ratio B/A of each benchmark with its 95% interval, a line at 1 (inline SVG)."""
    import math
    from html import escape

    pts = [r for r in rows if math.isfinite(r.ratio)]
    if not pts:
        return ""
    lo = min([1.0] + [min(r.ratio, r.ci_low) for r in pts if math.isfinite(r.ci_low)]
             + [r.ratio for r in pts])  # fmt: skip
    hi = max([1.0] + [max(r.ratio, r.ci_high) for r in pts if math.isfinite(r.ci_high)]
             + [r.ratio for r in pts])  # fmt: skip
    pad = (hi - lo) * 0.1
    lo, hi = min(lo - pad, 0.95), max(hi + pad, 1.05)  # at least 1 +/- 5% (the min effect)
    left, width, row_h, top = 170, 440, 22, 30
    height = top + row_h * len(pts) + 30

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * width

    out = [
        f'<svg class="plot plot-ratios" xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}"'
        f' height="{height}" role="img"><title>ratio B/A with 95% interval</title>',
        f'<text x="{left}" y="18" font-size="13" font-weight="bold">ratio B/A (95% interval)</text>',
        f'<line class="one" x1="{x(1.0):.1f}" y1="{top - 6}" x2="{x(1.0):.1f}" '
        f'y2="{height - 24}" stroke="#888" stroke-dasharray="4 3"/>',
        f'<text x="{x(1.0):.1f}" y="{height - 10}" font-size="10" text-anchor="middle">1</text>',
        f'<text x="{left}" y="{height - 10}" font-size="10" text-anchor="middle">{lo:.4g}</text>',
        f'<text x="{left + width}" y="{height - 10}" font-size="10" '
        f'text-anchor="middle">{hi:.4g}</text>',
    ]
    for i, r in enumerate(pts):
        y = top + row_h * i + row_h / 2
        color = "#c62828" if r.regression else ("#1a7f37" if r.label == "faster" else "#1f77b4")
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{escape(r.name)}</text>')  # fmt: skip
        if math.isfinite(r.ci_low) and math.isfinite(r.ci_high):
            out.append(f'<line class="interval" x1="{x(r.ci_low):.1f}" y1="{y:.1f}" '
                       f'x2="{x(r.ci_high):.1f}" y2="{y:.1f}" stroke="{color}" '
                       'stroke-width="2"/>')  # fmt: skip
        out.append(f'<circle class="ratio" cx="{x(r.ratio):.1f}" cy="{y:.1f}" r="4" '
                   f'fill="{color}"/>')  # fmt: skip
    out.append("</svg>")
    return "\n".join(out)


def render_html(cmp) -> str:
    """One self-contained page (the HTML report's style, inline SVG, no script)."""
    from html import escape

    from milabench.report.compare import HEADER, _row_cells
    from milabench.report.render_html import STYLE

    regressions = cmp.regressions
    verdict = (
        f"REGRESSION: {', '.join(regressions)} (exit code 1)"
        if regressions
        else "no regression (exit code 0)"
    )
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>milabench compare: {escape(cmp.b_label)} vs {escape(cmp.a_label)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>milabench compare</h1>",
        f"<p>A: <code>{escape(cmp.a_label)}</code><br>B: <code>{escape(cmp.b_label)}</code></p>",
        f'<p class="verdict {"fail" if regressions else "pass"}"><b>{escape(verdict)}</b></p>',
        "<p>ratio = median(B) / median(A); higher is faster. Significant: p &lt; alpha, the "
        "interval excludes 1 and the effect reaches the minimum effect.</p>",
        '<table class="comparison"><tr>' + "".join(f"<th>{escape(c)}</th>" for c in HEADER),
        "</tr>",
    ]
    for r in cmp.rows:
        cells = _row_cells(r, cmp.confirmed)
        cls = "fail" if cells[-1] == "REGRESSION" else ("pass" if r.label == "faster" else "")
        h.append(
            f'<tr class="{cls}"><td>{escape(cells[0])}</td>'
            + "".join(f'<td class="num">{escape(c)}</td>' for c in cells[1:8])
            + "".join(f"<td>{escape(c)}</td>" for c in cells[8:])
            + "</tr>"
        )
    h.append("</table>")
    plot = _forest_plot(cmp.rows)
    if plot:
        h += ['<div class="plots">', plot, "</div>"]
    h.append(f"<p>Regressions: {escape(', '.join(regressions) or 'none')}</p>")
    h.append("</body></html>")
    return "\n".join(h) + "\n"


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import expand_run_folder, has_run_data, latest_runs
    from milabench.errors import UsageError
    from milabench.report.compare import compare_samples

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
        a_spec, b_spec = (str(p) for p in latest_runs(args, 2, "compare"))
    elif Path(args.runs[0]).is_dir() and not has_run_data(Path(args.runs[0])):
        a_spec, b_spec = (str(p) for p in expand_run_folder(Path(args.runs[0]), "compare", 2))
    else:
        raise UsageError("compare: give two run folders (A B), or --baseline RUN and a run folder")
    a, a_label, a_build = _side(a_spec, args)
    b, b_label, b_build = _side(b_spec, args)
    if a_build and b_build and a_build != b_build:  # never compared silently
        print(
            f"warning: A ran build {a_build} and B build {b_build}: a difference may come "
            "from the CUDA build, not from what you changed",
            file=sys.stderr,
        )
    cmp = compare_samples(a, b, a_label=a_label, b_label=b_label, **kwargs)
    _write(render(cmp, args.format), args)
    return cmp.exit_code
