"""Running install/prepare commands through the shared runner, and reading their errors.

A pip command is just another process: its `ProcessSpec` goes through
`milabench.execute.runner.run_specs_sync`, which streams its output as events into the
run folder (`RunFileSink`). Here we add a small sink that keeps the lines of the step in
memory, so that a failure can be summarised by the one line that explains it (pip's
``ERROR: ...``, uv's ``× ...`` / ``╰─▶ ...``, or our ``validation: ...``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from milabench.envs.netcause import NetworkCause, classify
from milabench.plan.spec import ProcessSpec


@dataclass
class LineCollector:
    """A sink keeping output lines (and printing them when ``echo`` is set)."""

    echo: bool = False
    lines: list[tuple[str, str]] = field(default_factory=list)

    def on_event(self, tag: str, event: dict) -> None:
        if event.get("event") != "line":
            return
        text = str(event.get("data", "")).rstrip("\n")
        pipe = str(event.get("pipe") or "stdout")
        self.lines.append((pipe, text))
        if self.echo:
            print(f"  [{tag}] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass

    def text(self, pipe: str | None = None) -> list[str]:
        return [t for p, t in self.lines if pipe is None or p == pipe]


@dataclass
class StepResult:
    """How one command ended: ``ok``, its return code and the explaining line."""

    ok: bool
    return_code: object
    seconds: float
    error: str = ""
    lines: list[str] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)
    #: the network cause of a failure, when the output shows one (`netcause.classify`)
    cause: NetworkCause | None = None
    #: the uv attempt this step replaced (a pip fallback's result only)
    first: StepResult | None = None

    def explanation(self) -> str:
        """The one line that says why the step failed: its network cause when it has one
        (after a fallback: uv's cause, and pip's when it differs), else its error line."""
        if self.first is not None:
            uv = self.first.cause
            if self.cause is not None and uv is not None and self.cause.label == uv.label:
                return f"{uv} (uv, then pip)"
            if self.cause is None:  # pip's own words would hide uv's cause
                return f"{uv or self.first.error} (uv; pip failed too)"
            return f"{uv or self.first.error} (uv); pip: {self.cause}"
        return str(self.cause) if self.cause is not None else self.error


def error_line(lines: list[str], limit: int = 400) -> str:
    """The line of a failed step's output that says why (see module docstring).

    uv writes ``error: headline`` followed by ``cause: ...`` lines (``× headline`` and
    ``╰─▶ cause`` on a terminal): the headline and its causes are joined into one line.
    """
    cleaned = [ln.strip() for ln in lines if ln.strip()]
    for ln in cleaned:
        if ln.startswith("validation: import"):
            return ln[:limit]
    for i, ln in enumerate(cleaned):
        if ln.startswith(("×", "error:")):
            parts = [ln.removeprefix("error:").lstrip("× ").strip().rstrip(":")]
            for follow in cleaned[i + 1 : i + 4]:
                if follow[:1] in "╰├│" or follow.startswith("cause:"):
                    parts.append(follow.removeprefix("cause:").lstrip("╰├│─▶ ").strip())
                else:
                    break
            return ("error: " + ": ".join(p for p in parts if p))[:limit]
    for ln in cleaned:
        if ln.startswith("ERROR:"):  # pip
            return ln[:limit]
    return cleaned[-1][:limit] if cleaned else ""


def run_step(spec: ProcessSpec, sinks: list, *, echo: bool = False) -> StepResult:
    """Run one spec to completion, feeding ``sinks`` (the run files) and a collector."""
    from milabench.execute.runner import run_specs_sync

    collector = LineCollector(echo=echo)
    start = time.perf_counter()
    outcomes = run_specs_sync([spec], [*sinks, collector])
    seconds = time.perf_counter() - start
    code = outcomes[0].return_code if outcomes else None
    return _step_result(spec, code, seconds, collector)


def run_steps(
    specs: list[ProcessSpec], sinks: list, *, limit: int, echo: bool = False
) -> list[StepResult]:
    """Run independent specs side by side, at most ``limit`` at a time; results in the
    order of ``specs``.

    Every spec feeds the shared ``sinks`` (the run files: one event loop, one tag per
    spec, so one `RunFileSink` is safe) and a collector of its own, so that each result
    holds only its own lines and error. ``seconds``: each process's own time.
    """
    from milabench.execute.runner import run_each_sync

    collectors = [LineCollector(echo=echo) for _ in specs]
    outcomes = run_each_sync(specs, [[*sinks, c] for c in collectors], limit=limit)
    return [
        _step_result(spec, outcome.return_code, outcome.duration, collector)
        for spec, outcome, collector in zip(specs, outcomes, collectors, strict=True)
    ]


def _step_result(
    spec: ProcessSpec, code: object, seconds: float, collector: LineCollector
) -> StepResult:
    """How ``spec`` ended (return code ``code``), explained from its collected lines."""
    ok = code == 0
    lines = collector.text()
    error = ""
    cause = None
    if not ok:
        error = error_line(collector.text("stderr")) or error_line(lines)
        if not error:
            error = f"{spec.argv[0]} exited with {code}"
        cause = classify(lines)
    return StepResult(
        ok=ok,
        return_code=code,
        seconds=seconds,
        error=error,
        lines=lines,
        stdout=collector.text("stdout"),
        cause=cause,
    )
