"""Comparing two sets of results like a statistician, and turning that into a CI verdict.

Per benchmark: both distributions of (trimmed) rate samples, the ratio of medians B/A, a
bootstrap confidence interval of the ratio, and a Mann-Whitney U test. A difference is
*significant* only when p < alpha, the interval excludes 1 and the effect is at least
`min_effect` (samples inside one run are autocorrelated and run-to-run drift on a shared
machine is a few percent, so smaller effects are reported as "not significant").
A *regression* is a significant slowdown beyond every threshold set for the benchmark
(relative and/or absolute); a benchmark measured in A and absent from B is a regression
too. Rates: higher is better.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from milabench.compare.significance import bootstrap_ratio_ci, mann_whitney_u
from milabench.config.entry import Entry, as_entry
from milabench.errors import ConfigError
from milabench.report.stats import median
from milabench.rundata.numbers import fmt_sig

DEFAULT_RELATIVE = 0.05
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT = 0.05


@dataclass(frozen=True)
class Threshold:
    """A regression is a slowdown beyond every limit that is set."""

    relative: float | None = DEFAULT_RELATIVE  # fraction of the baseline median
    absolute: float | None = None  # in the benchmark's units


def parse_relative(value: Any, where: str) -> float | None:
    """`5%` -> 0.05; 0.05 -> 0.05; numbers >= 1 are percents (5 -> 0.05)."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            text = value.strip()
            return (
                float(text[:-1]) / 100 if text.endswith("%") else parse_relative(float(text), where)
            )
        val = float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}: relative threshold must be like 5% or 0.05, not {value!r}"
        ) from None
    return val / 100 if val >= 1 else val


def threshold_from(spec: Any, where: str, default: Threshold) -> Threshold:
    """A `compare:` mapping ({relative, absolute}) or a bare relative value."""
    if spec is None:
        return default
    if not isinstance(spec, dict):
        return Threshold(relative=parse_relative(spec, where), absolute=None)
    unknown = set(spec) - {"relative", "absolute"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} (relative, absolute)"
        )
    rel = parse_relative(spec["relative"], f"{where}.relative") if "relative" in spec else None
    absolute = spec.get("absolute")
    if absolute is not None and not isinstance(absolute, int | float):
        raise ConfigError(f"{where}.absolute: must be a number, not {absolute!r}")
    if rel is None and absolute is None:
        return default
    return Threshold(relative=rel, absolute=float(absolute) if absolute is not None else None)


def thresholds_from_file(path: Path) -> dict[str, Threshold]:
    """YAML file: `default: {relative: 5%}` and `<bench>: {relative: .., absolute: ..}`."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read thresholds file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of benchmark name to thresholds")
    default = threshold_from(data.get("default"), f"{path}: default", Threshold())
    out = {"default": default}
    for name, spec in data.items():
        if name != "default":
            out[str(name)] = threshold_from(spec, f"{path}: {name}", default)
    return out


def thresholds_from_entries(
    entries: Mapping[str, Entry | Mapping[str, Any]], default: Threshold
) -> dict[str, Threshold]:
    """The `compare:` key of suite entries."""
    typed = {name: as_entry(e) for name, e in entries.items()}
    return {
        name: threshold_from(e.compare, f"{e.config_file or 'suite'}: {name}.compare", default)
        for name, e in typed.items()
        if e.compare is not None
    }


@dataclass
class BenchComparison:
    name: str
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool
    label: str  # faster | slower | not significant | missing in A | missing in B
    regression: bool
    threshold: Threshold


def compare_one(
    name: str,
    a: list[float],
    b: list[float],
    *,
    threshold: Threshold,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
    resamples: int = 2000,
    seed: int = 0,
) -> BenchComparison:
    nan = math.nan
    if not a or not b:
        label = "missing in A" if not a else "missing in B"
        return BenchComparison(name, len(a), len(b), median(a) if a else nan,
                               median(b) if b else nan, nan, nan, nan, 1.0, False, label,
                               bool(a) and not b, threshold)  # fmt: skip
    ma, mb = median(a), median(b)
    ratio = mb / ma if ma else nan
    lo, hi = bootstrap_ratio_ci(a, b, resamples=resamples, seed=seed)
    _, p = mann_whitney_u(a, b)
    significant = (
        p < alpha
        and not (lo <= 1.0 <= hi)
        and math.isfinite(ratio)
        and abs(ratio - 1.0) >= min_effect
    )
    label = "not significant" if not significant else ("faster" if ratio > 1 else "slower")
    regression = False
    if significant and ratio < 1:
        checks = []
        if threshold.relative is not None:
            checks.append(ratio < 1.0 - threshold.relative)
        if threshold.absolute is not None:
            checks.append(ma - mb > threshold.absolute)
        regression = bool(checks) and all(checks)
    return BenchComparison(name, len(a), len(b), ma, mb, ratio, lo, hi, p, significant, label,
                           regression, threshold)  # fmt: skip


@dataclass
class Comparison:
    a_label: str
    b_label: str
    rows: list[BenchComparison]
    confirmed: set[str] | None = None  # after A/B re-runs: the regressions that held

    @property
    def regressions(self) -> list[str]:
        names = [r.name for r in self.rows if r.regression]
        if self.confirmed is not None:
            names = [n for n in names if n in self.confirmed]
        return names

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


def compare_samples(
    a: dict[str, list[float]],
    b: dict[str, list[float]],
    *,
    thresholds: dict[str, Threshold] | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
    resamples: int = 2000,
    seed: int = 0,
    a_label: str = "A",
    b_label: str = "B",
) -> Comparison:
    thresholds = thresholds or {}
    default = thresholds.get("default", Threshold())
    names = list(dict.fromkeys([*a, *b]))
    rows = [
        compare_one(
            name,
            a.get(name, []),
            b.get(name, []),
            threshold=thresholds.get(name, default),
            alpha=alpha,
            min_effect=min_effect,
            resamples=resamples,
            seed=seed,
        )  # fmt: skip
        for name in names
    ]
    return Comparison(a_label, b_label, rows)


def samples_of(report) -> dict[str, list[float]]:
    """Trimmed pooled rate samples per benchmark of a `Report` (only those with samples)."""
    return {br.name: list(br.samples) for br in report.benchmarks if br.samples}


def _f(x: float, d: int = 2) -> str:
    """Ratios (around 1) and p-values: fixed decimals. Rates go through `fmt_sig`."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.{d}f}"


def row_cells(r: BenchComparison, confirmed: set[str] | None) -> list[str]:
    """One benchmark's cells under `HEADER`, as every rendering shows them (the verdict
    last: a regression not in `confirmed` reads "not confirmed")."""
    verdict = "ok"
    if r.regression:
        verdict = "REGRESSION" if confirmed is None or r.name in confirmed else "not confirmed"
    elif r.label == "faster":
        verdict = "improvement"
    ci = f"[{_f(r.ci_low, 3)}, {_f(r.ci_high, 3)}]" if math.isfinite(r.ci_low) else "-"
    return [r.name, str(r.n_a), str(r.n_b), fmt_sig(r.median_a), fmt_sig(r.median_b), _f(r.ratio, 3),
            ci, _f(r.p_value, 4), r.label, verdict]  # fmt: skip


HEADER = ["bench", "n_a", "n_b", "median_a", "median_b", "ratio", "95% CI", "p", "label", "verdict"]


def render_comparison(cmp: Comparison, fmt: str = "text") -> str:
    rows = [row_cells(r, cmp.confirmed) for r in cmp.rows]
    if fmt == "json":
        out = {
            "a": cmp.a_label,
            "b": cmp.b_label,
            "benchmarks": [
                {
                    **{
                        k: (v if not (isinstance(v, float) and not math.isfinite(v)) else None)
                        for k, v in asdict(r).items()
                        if k != "threshold"
                    },
                    "threshold": asdict(r.threshold),
                    "verdict": cells[-1],
                }  # fmt: skip
                for r, cells in zip(cmp.rows, rows, strict=True)
            ],
            "regressions": cmp.regressions,
            "exit_code": cmp.exit_code,
        }
        return json.dumps(out, indent=2) + "\n"
    if fmt in ("markdown", "md"):
        lines = [f"### milabench compare: `{cmp.a_label}` (A) vs `{cmp.b_label}` (B)", ""]
        lines.append("| " + " | ".join(HEADER) + " |")
        lines.append("|" + "|".join([":---"] + ["---:"] * 7 + [":---", ":---"]) + "|")
        lines += ["| " + " | ".join(c) + " |" for c in rows]
        lines += ["", f"Regressions: {', '.join(cmp.regressions) or 'none'}"]
        return "\n".join(lines) + "\n"
    cells = [HEADER] + rows
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = [f"A: {cmp.a_label}", f"B: {cmp.b_label}", "ratio = median(B) / median(A)", ""]
    for c in cells:
        lines.append(" | ".join(v.ljust(w) if i in (0, 8, 9) else v.rjust(w)
                                for i, (v, w) in enumerate(zip(c, widths, strict=True))))  # fmt: skip
    lines += ["", f"Regressions: {', '.join(cmp.regressions) or 'none'}"]
    return "\n".join(lines) + "\n"
