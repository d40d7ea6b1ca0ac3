"""One `milabench run` invocation: sinks, signals, the suite, then the report.

Kept out of the command module so that it can be driven from tests and scripts. Ctrl-C
(SIGINT) and SIGTERM set a stop event: running benchmarks are stopped (same path as a
timeout, with a short grace) and recorded as INTERRUPTED, the partial report is printed
and the exit code is 130 (143 for SIGTERM).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import IO

from milabench.execute.suite import BenchmarkResult, run_suite
from milabench.sinks import make_console_sink
from milabench.sinks.runfiles import RunFileSink

EXIT_INTERRUPTED = 130


def _option(system: dict, name: str, default: float) -> float:
    try:
        from milabench.config.options import get_option
    except ImportError:
        return default
    value = get_option(system, name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


async def _run(
    suite, run_dir: Path, sinks: list, *, repeat: int, resume: bool
) -> tuple[list[BenchmarkResult], int]:
    loop = asyncio.get_running_loop()
    stop_event = asyncio.Event()
    interrupted = 0  # the signal number that stopped the run

    def on_signal(signum: int) -> None:
        nonlocal interrupted
        interrupted = interrupted or signum
        stop_event.set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, int(sig))
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        results = await run_suite(
            suite.entries,
            suite.system,
            run_dir,
            sinks,
            repeat=repeat,
            resume=resume,
            stop_event=stop_event,
            grace=_option(suite.system, "run.grace", 5.0),
            early_stop_grace=_option(suite.system, "run.early_stop_grace", 2.0),
        )
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if "milabench.remote.dispatch" in sys.modules:  # close SSH connections, if any
            await sys.modules["milabench.remote.dispatch"].node_launcher(suite.system).close()
    return results, interrupted


def summary_lines(results: list[BenchmarkResult]) -> list[str]:
    """Fallback report: one line per benchmark run."""
    lines = []
    for r in results:
        if r.status == "ran" or r.status == "interrupted":
            codes = ", ".join(
                f"{o.tag}={o.return_code}" + (" (early stop)" if o.early_stop else "")
                for o in r.outcomes
            )
            verdict = "ok" if r.succeeded else "FAILED"
            lines.append(f"{r.tag:<30} {verdict:<8} {codes}")
        else:
            lines.append(f"{r.tag:<30} {r.status:<8} {r.reason or ''}")
    return lines


def print_report(
    suite, run_dir: Path, results: list[BenchmarkResult], validations: list[str], out: IO[str]
) -> int:
    """The report of the run folder (milabench.report), or a plain summary without it."""
    try:
        from milabench.report import build_report, render
    except ImportError:
        build_report = None
    if build_report is not None and any(run_dir.glob("*.data")):
        report = build_report([run_dir], entries=suite.entries, validations=validations or None)
        out.write(render(report, "text").rstrip("\n") + "\n")
        return report.exit_code
    for line in summary_lines(results):
        out.write(line + "\n")
    return 0 if all(r.succeeded for r in results) else 1


def run_session(
    suite,
    run_dir: Path,
    *,
    repeat: int = 1,
    resume: bool = False,
    dash: str = "no",
    validations: list[str] | None = None,
    out: IO[str] | None = None,
) -> int:
    out = out or sys.stdout
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files = RunFileSink(run_dir)
    console = make_console_sink(dash, out, total=len(suite.entries) * repeat)
    sinks = [files] + ([console] if console is not None else [])
    try:
        results, interrupted = asyncio.run(
            _run(suite, run_dir, sinks, repeat=repeat, resume=resume)
        )
    finally:
        for sink in sinks:
            sink.close()
    out.write(f"\nRun folder: {run_dir}\n")
    code = print_report(suite, run_dir, results, validations or [], out)
    out.flush()
    if interrupted:
        print("milabench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted == signal.SIGINT else 128 + interrupted
    return code
