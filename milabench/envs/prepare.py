"""``milabench prepare``: run each selected benchmark's prepare step, once per dataset.

The prepare step is the pack's `build_prepare_plan()` (``python prepare.py <argv>`` by
default) with the same variables and resolved argv a run gets; benchmarks without one
are skipped. Idempotence is the prepare script's job, helped by `benchshared.datasets`
(a ``done`` marker written last): a finished dataset is detected and kept, and the script
says "already prepared". Output streams into ``runs/prepare.<time>/<tag>.*``; the summary
shows the last line each step printed, which by convention says where the data is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from milabench.config.commands import entry_command
from milabench.envs.install import LogFolder
from milabench.envs.steps import run_step

PREPARED = "prepared"
SKIPPED = "skipped"
FAILED = "failed"


@dataclass
class PrepareResult:
    name: str
    status: str
    seconds: float
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def _environment_problem(pack) -> str | None:
    if pack.use_current_env:
        return None
    if not Path(pack.python).exists():
        return (
            f"environment {pack.venv} is missing: run "
            f"`{entry_command('install', pack.entry)}` first"
        )
    return None


def prepare_all(
    entries, system: dict, runs: Path, *, echo: bool = False, say=print
) -> tuple[list[PrepareResult], Path | None]:
    """Prepare every entry in order; a failure does not stop the others."""
    from milabench.pack import load_pack

    values = list(entries.values()) if isinstance(entries, dict) else list(entries)
    logs = LogFolder(runs, "prepare")
    results: list[PrepareResult] = []
    try:
        for entry in values:
            start = time.perf_counter()
            pack = load_pack(entry, system)
            plan = pack.build_prepare_plan()
            if plan is None:
                results.append(PrepareResult(pack.name, SKIPPED, 0.0, "no prepare step"))
                continue
            problem = _environment_problem(pack)
            if problem:
                results.append(PrepareResult(pack.name, FAILED, 0.0, problem))
                continue
            say(f"[{pack.name}] preparing")
            failure, last, missing = "", "", []
            for spec in plan.processes():
                result = run_step(spec, logs.sinks(), echo=echo)
                stdout = [ln for ln in result.stdout if ln.strip()]
                last = stdout[-1].strip() if stdout else last
                missing += missing_inputs(result.lines)
                if not result.ok:
                    failure = result.error
                    break
            seconds = time.perf_counter() - start
            if not echo:  # what an entry will lack is said, not left in its log
                for line in missing:
                    say(line)
            if failure:
                results.append(PrepareResult(pack.name, FAILED, seconds, failure))
            elif missing:
                results.append(PrepareResult(pack.name, PREPARED, seconds, stand_in(missing)))
            else:
                results.append(PrepareResult(pack.name, PREPARED, seconds, last))
    finally:
        logs.close()
    return results, (logs.path if logs.used else None)


# The line `benchshared.inputs.fetch` prints for an input it could not have (docs/inputs.md)
INPUT_LINE = "milabench: input "


def missing_inputs(lines: list[str]) -> list[str]:
    """The step's lines that name an unavailable input, as printed, without repeats."""
    found = [ln.strip() for ln in lines if ln.strip().startswith(INPUT_LINE)]
    return list(dict.fromkeys(ln for ln in found if " unavailable: " in ln))


def stand_in(missing: list[str]) -> str:
    """The summary table's message for an entry prepared without some of its inputs."""
    names = [ln.removeprefix(INPUT_LINE).split(" for ", 1)[0] for ln in missing]
    return (
        f"{len(names)} input(s) unavailable ({', '.join(names)}): it will run its stand-in, "
        "not comparable with upstream (docs/inputs.md)"
    )


def summary_table(results: list[PrepareResult]) -> str:
    """One line per benchmark: status, seconds and the last line its step printed."""
    rows = [("benchmark", "status", "time", "")]
    rows += [(r.name, r.status, f"{r.seconds:.1f} s", r.message) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        ("  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3]).rstrip()
        for row in rows
    )
