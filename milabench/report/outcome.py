"""Kept for the call sites that import the success rule from here: the rule is
`milabench.rundata.outcome` (docs/architecture.md)."""

from milabench.rundata.outcome import (
    DEFAULT_MAX_FAILURE_RATE,
    ERROR_EVENTS,
    FAIL,
    FAILED,
    INCOMPLETE,
    INTERRUPTED,
    PASS,
    RUNNING,
    SKIPPED,
    SUCCESS,
    TIMED_OUT,
    Facts,
    Verdict,
    detail,
    run_verdict,
    status,
)

__all__ = [
    "DEFAULT_MAX_FAILURE_RATE",
    "ERROR_EVENTS",
    "FAIL",
    "FAILED",
    "INCOMPLETE",
    "INTERRUPTED",
    "PASS",
    "RUNNING",
    "SKIPPED",
    "SUCCESS",
    "TIMED_OUT",
    "Facts",
    "Verdict",
    "detail",
    "run_verdict",
    "status",
]
