"""The one success rule: when a benchmark process succeeded, and when a run passes.

Everything that says "passed" or "failed" asks this module: the report's per-file
status and its verdict, the exit code of `milabench run` / `milabench report`, and the
live dashboard, so the printed verdict and the exit code cannot disagree. A process
**succeeds** when it was not skipped (a capability skip is neither success nor failure),
measured at least ``required`` throughput observations, had no NaN or infinite loss
(even when stopped early), recorded no error event (``ERROR_EVENTS``), and ended by
itself with code 0 or by the instrumentation's early stop (`records.Progress.stops`, the
``stop`` event or the runner's ``end``). A run **passes** when
something was measured, the failure rate is at most the allowed one, and every enabled
validation layer passed; the exit code is 0 exactly when the verdict is PASS. The rule
in full: docs/measurement.md section 4. `file_facts` gathers the facts of a run file
(`milabench.rundata.reader.FileResult`); the live dashboard gathers the same facts from
the same decoded events (`milabench.rundata.records`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from milabench.events import RC_INTERRUPTED, RC_TIMEOUT
from milabench.rundata.records import ERROR_EVENTS

if TYPE_CHECKING:
    from milabench.rundata.reader import FileResult

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

DEFAULT_REQUIRED_OBSERVATIONS = 1


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


# -- the rule applied to a run file ----------------------------------------------------------
def measure_setting(measure: Mapping[str, Any] | None, key: str, default: float) -> float:
    """A number of an entry's `measure` block ("2%" accepted), else the default."""
    value = measure.get(key) if isinstance(measure, Mapping) else None
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100.0
        except ValueError:
            return default
    try:
        out = float(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default
    return out if math.isfinite(out) else default


def required_of(measure: Mapping[str, Any] | None) -> int:
    """Fewest rates that count as "measured" (`measure.required_observations`, default 1)."""
    value = measure_setting(measure, "required_observations", DEFAULT_REQUIRED_OBSERVATIONS)
    return max(1, int(value))


def required_observations(fr: FileResult) -> int:
    """`required_of` the file's entry."""
    return required_of(fr.measure)


def file_facts(fr: FileResult, group_has_rates: bool = False) -> Facts:
    """What the success rule needs to know about one file.

    ``group_has_rates``: another file of the same multi-node launch (same tag without the
    node part) reported the rates; only ranks with a node part can rely on it.
    """
    return Facts(
        skipped=fr.skipped,
        early_stop=fr.early_stop,
        has_end=fr.has_end,
        return_code=fr.return_code,
        observations=len(fr.rates),
        nan_loss=fr.nan_loss,
        errors=len(fr.errors),
        # install/prepare logs measure nothing: for them a clean exit is the success.
        rates_elsewhere=(fr.node is not None and group_has_rates) or fr.phase != "run",
        required=required_observations(fr),
    )


def file_status(fr: FileResult, group_has_rates: bool = False) -> str:
    """success | skipped | failed | timed out | interrupted | incomplete (`status`)."""
    return status(file_facts(fr, group_has_rates))


def failure_detail(fr: FileResult, st: str | None = None, group_has_rates: bool = False) -> str:
    """Why a file is not a success, in a few words (`detail`)."""
    return detail(file_facts(fr, group_has_rates), st)


__all__ = [
    "DEFAULT_MAX_FAILURE_RATE",
    "DEFAULT_REQUIRED_OBSERVATIONS",
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
    "failure_detail",
    "file_facts",
    "file_status",
    "measure_setting",
    "required_of",
    "required_observations",
    "run_verdict",
    "status",
]
