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

    dirs = folders(spec)
    if dirs and all(d.is_dir() for d in dirs):
        runs = [r for d in dirs for r in expand_run_folder(d, "compare", phrase="compare uses",
                                                           say=say)]  # fmt: skip
        label = spec if runs == dirs else ",".join(str(r) for r in runs)
        report = build_report(runs)
        resolved = tuple(r.resolve() for r in runs)
        return Side(samples_of(report), label, report.system.get("build"), resolved)
    if store_url is not None and len(dirs) == 1:
        from milabench.history.store import Store

        with Store(store_url) as store:
            return Side(store.samples(spec), f"store:{spec}", None)
    missing = next((d for d in dirs if not d.is_dir()), Path(spec))
    raise UsageError(f"{missing}: no such run folder")
