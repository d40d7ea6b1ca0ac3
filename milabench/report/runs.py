"""Kept for the many tests and scripts that import the reader from here: the run-folder
reader is `milabench.rundata.reader` (docs/architecture.md)."""

from milabench.rundata.reader import (
    LOG_PHASES,
    SKIPPED,
    FileResult,
    read_file,
    read_run_dir,
    split_tag,
)

__all__ = ["LOG_PHASES", "SKIPPED", "FileResult", "read_file", "read_run_dir", "split_tag"]
