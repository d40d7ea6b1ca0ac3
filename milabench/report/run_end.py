"""The report at the end of `milabench run`: printed, and written into the run folder.

`milabench run` (cli/run.py) hands `print_run_report` to the executor
(`milabench.execute.session.run_session(report=)`), which calls it once the sinks are
closed: the executor knows nothing of reports (docs/architecture.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

REPORT_FILES = {"report.json": "json", "report.md": "markdown"}


def write_report_files(report: Any, run_dir: Path, render: Callable[[Any, str], str]) -> None:
    """`report.json` and `report.md` in the run folder (what `milabench report --format
    json/markdown` prints for it). Not writing them is a one-line warning, nothing more:
    the run's outcome and exit code stay what the report says."""
    for name, fmt in REPORT_FILES.items():
        try:
            (Path(run_dir) / name).write_text(render(report, fmt), encoding="utf-8")
        except Exception as err:  # a convenience copy never fails the run
            why = err.strerror if isinstance(err, OSError) and err.strerror else err
            print(f"milabench: warning: could not write {Path(run_dir) / name}: {why}",
                  file=sys.stderr)  # fmt: skip


def print_run_report(
    run_dir: Path, out: IO[str], *, entries: Any = None, validations: list[str] | None = None
) -> int:
    """The report of the run folder on ``out``, and its files; returns the exit code of
    the verdict it prints.

    The report is built even when no `.data` file was written (an empty or fully
    excluded selection): it then says that nothing was measured, and why, and fails.
    """
    from milabench.report import build_report, render

    report = build_report([run_dir], entries=entries, validations=validations or None)
    out.write(render(report, "text").rstrip("\n") + "\n")
    write_report_files(report, run_dir, render)
    return report.exit_code
