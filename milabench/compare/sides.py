"""What one side of a comparison is: run folders (pooled), or a run kept in the store.

A side is written as the command line takes it: a run folder, a comma list of run
folders (their samples pooled), a folder holding runs (its latest, said through `say`),
or, for the baseline only, the name of a run in the results store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from milabench.report.locate import Say, expand_run_folder, to_stderr


@dataclass(frozen=True)
class Side:
    """Rate samples per benchmark, the label shown for them and the CUDA build they ran
    (`report.build.build_summary`; None when unknown, e.g. from the store)."""

    samples: dict[str, list[float]]
    label: str
    build: str | None
    runs: tuple[Path, ...] = ()  # the run folders read (none for a stored run)
    # the weighted entries its score is over (measured), and of upstream's weighted
    # entries those comparable with upstream (`report.upstream`); None when unknown
    scored: frozenset[str] | None = None
    comparable: frozenset[str] | None = None


def folders(spec: str) -> list[Path]:
    """The paths of a comma list (empty items dropped)."""
    return [Path(p) for p in spec.split(",") if p]


def load_side(spec: str, *, store_url: str | None = None, say: Say = to_stderr) -> Side:
    """The samples of `spec`: its run folders when they all exist, else (with `store_url`,
    for a baseline) the stored run of that name; anything else is a usage error naming
    the missing folder."""
    from milabench.compare.comparison import samples_of
    from milabench.errors import UsageError
    from milabench.report import build_report
    from milabench.report.upstream import comparability

    dirs = folders(spec)
    if dirs and all(d.is_dir() for d in dirs):
        runs = [r for d in dirs for r in expand_run_folder(d, "compare", phrase="compare uses",
                                                           say=say)]  # fmt: skip
        label = spec if runs == dirs else ",".join(str(r) for r in runs)
        report = build_report(runs)
        resolved = tuple(r.resolve() for r in runs)
        scored = frozenset(
            br.name for br in report.benchmarks if br.effective_weight > 0 and br.samples
        )
        comp = comparability(report.benchmarks)
        comparable = frozenset(comp.comparable) if comp is not None else None
        build = report.system.get("build")
        return Side(samples_of(report), label, build, resolved, scored, comparable)
    if store_url is not None and len(dirs) == 1:
        from milabench.history.store import Store

        with Store(store_url) as store:
            return Side(store.samples(spec), f"store:{spec}", None)
    missing = next((d for d in dirs if not d.is_dir()), Path(spec))
    raise UsageError(f"{missing}: no such run folder")


def _names(names: frozenset[str]) -> str:
    shown = sorted(names)
    return ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")


def coverage_warnings(a: Side, b: Side) -> list[str]:
    """One line each when the two scores are over different weighted entries, or when the
    two runs are comparable with upstream milabench on different entries; [] when the
    sets agree or a side cannot say (a stored run)."""
    out = []
    if a.scored is not None and b.scored is not None and a.scored != b.scored:
        parts = []
        if a.scored - b.scored:
            parts.append(f"only A measured {_names(a.scored - b.scored)}")
        if b.scored - a.scored:
            parts.append(f"only B measured {_names(b.scored - a.scored)}")
        out.append(
            "warning: the two scores are over different entries ("
            + "; ".join(parts)
            + "): compare the benchmarks they share, not the scores"
        )
    if a.comparable is not None and b.comparable is not None and a.comparable != b.comparable:
        out.append(
            f"warning: A is comparable with upstream milabench on {len(a.comparable)} of its "
            f"weighted entries, B on {len(b.comparable)}: their scores stand next to "
            "upstream's on different entries (docs/parity.md)"
        )
    return out
