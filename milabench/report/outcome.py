"""The one success rule: when a benchmark process succeeded, and when a run passes.

Everything that says "passed" or "failed" asks this module: the report's per-file
status and its verdict, the exit code of `milabench run` / `milabench report`, and the
live dashboard, so the printed verdict and the exit code cannot disagree. A process
**succeeds** when it was not skipped (a capability skip is neither success nor failure),
measured at least ``required`` throughput observations, had no NaN or infinite loss
(even when stopped early), recorded no error event (``ERROR_EVENTS``), and ended by
itself with code 0 or by the instrumentation's early stop. A run **passes** when
something was measured, the failure rate is at most the allowed one, and every enabled
validation layer passed; the exit code is 0 exactly when the verdict is PASS. The rule
in full: docs/measurement.md section 4.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from milabench.events import RC_INTERRUPTED, RC_TIMEOUT

SUCCESS = "success"
FAILED = "failed"
SKIPPED = "skipped"
TIMED_OUT = "timed out"
INTERRUPTED = "interrupted"
INCOMPLETE = "incomplete"
RUNNING = "running"

PASS = "PASS"
FAIL = "FAIL"

DEFAULT_MAX_FAILURE_RATE = 0.01

# Events that count as errors of a process: the tool's and benchkit's `error`, and voir's
# `overseer_error` (an instrument that broke, e.g. a probe selector naming a variable that
# does not exist: voir carries on, so without it a run would pass having measured nothing).
ERROR_EVENTS = ("error", "overseer_error")


@dataclass(frozen=True)
class Facts:
    """What the rule needs to know about one process (from a run file or live events)."""

    skipped: bool = False
    early_stop: bool = False
    has_end: bool = True
    return_code: int | str | None = 0
    observations: int = 0  # train rate samples
    nan_loss: bool = False  # a NaN or infinite loss was recorded
    errors: int = 0  # `error` events
    rates_elsewhere: bool = False  # a multi-node rank whose launch reported rates on another node
    required: int = 1  # fewest observations that count as "measured"


def status(f: Facts) -> str:
    """success | skipped | failed | timed out | interrupted | incomplete | running."""
    if f.skipped:
        return SKIPPED
    if f.nan_loss or f.errors:
        return FAILED
    if not f.early_stop:
        if f.return_code == RC_TIMEOUT:
            return TIMED_OUT
        if f.return_code == RC_INTERRUPTED:
            return INTERRUPTED
        if not f.has_end:
            return INCOMPLETE
        if f.return_code != 0:
            return FAILED
    if f.observations >= max(1, f.required) or (f.rates_elsewhere and f.observations == 0):
        return SUCCESS
    return FAILED


def detail(f: Facts, st: str | None = None) -> str:
    """Why a process is not a success, in a few words (``""`` for a success)."""
    st = st or status(f)
    if st == SUCCESS:
        return ""
    if st == SKIPPED:
        return "skipped"
    if st == INCOMPLETE:
        return "incomplete (no end event)"
    if st in (TIMED_OUT, INTERRUPTED):
        return st
    if f.nan_loss:
        return "NaN loss" + (" (then stopped early)" if f.early_stop else "")
    if f.errors:
        return "error event"
    if f.return_code not in (0, None) and not f.early_stop:
        return f"exit code {f.return_code}"
    if f.observations == 0:
        return "no throughput sample"
    return f"{f.observations} observation(s), fewer than the {f.required} required"


@dataclass(frozen=True)
class Verdict:
    """PASS or FAIL, the exit code that goes with it, and every reason for a FAIL."""

    verdict: str
    exit_code: int
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS


def run_verdict(
    *,
    total_n: int,
    total_fail: int,
    failed_layers: Iterable[str] = (),
    nothing_measured_why: str | None = None,
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE,
) -> Verdict:
    """The run's verdict from its counts and validation layers (one rule, one place).

    ``total_n``/``total_fail``: processes that were not skipped, and those that failed.
    ``failed_layers``: the enabled validation layers that did not pass.
    ``nothing_measured_why``: why nothing was run (every entry skipped/excluded/without a
    capability), used when ``total_n`` is 0.
    """
    reasons: list[str] = []
    if total_n == 0:
        reasons.append(
            "nothing was measured" + (f": {nothing_measured_why}" if nothing_measured_why else "")
        )
    else:
        rate = total_fail / total_n
        if rate > max_failure_rate:
            reasons.append(
                f"failure rate {100 * rate:.2f}% > {100 * max_failure_rate:.2f}% "
                f"({total_fail} of {total_n} processes failed)"
            )
    for layer in failed_layers:
        reasons.append(f"validation layer '{layer}' failed")
    if reasons:
        return Verdict(FAIL, 1, tuple(reasons))
    return Verdict(PASS, 0, ())
