"""A/B runs: control and treatment interleaved on the same machine, then confirmation.

Running the two arms back to back in alternating order (A B, B A, A B, ...) makes slow
drift of the machine (thermal state, other tenants, caches) hit both arms alike, so the
comparison measures the change rather than the drift. A benchmark that looks like a
regression is then re-run alone, again interleaved, and only counts as a regression when
the fresh samples confirm it. Each arm is a real `milabench run` subprocess; arms differ by
suite file, overrides, base directory (i.e. another set of environments) or environment
variables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from milabench.compare.comparison import Comparison, compare_samples, samples_of
from milabench.errors import MilabenchError
from milabench.report.build import build_report


@dataclass
class Arm:
    """How to launch one side of the experiment."""

    label: str
    config: Path | None
    base: Path
    overrides: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    system: Path | None = None
    select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    use_current_env: bool = False

    def describe(self) -> str:
        """What distinguishes this arm, for the comparison's header."""
        parts = [str(self.config) if self.config else "default suite", f"base {self.base}"]
        parts += [f"--override {o}" for o in self.overrides]
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        return f"{self.label}: " + ", ".join(parts)

    def command(self, run_name: str, select: list[str] | None = None) -> list[str]:
        argv = [sys.executable, "-m", "milabench", "run", "--run-name", run_name,
                "--base", str(self.base), "--dash", "no"]  # fmt: skip
        if self.config:
            argv += ["--config", str(self.config)]
        if self.system:
            argv += ["--system", str(self.system)]
        for ov in self.overrides:
            argv += ["--override", ov]
        chosen = select if select is not None else self.select
        if chosen:
            argv += ["--select", ",".join(chosen)]
        if self.exclude:
            argv += ["--exclude", ",".join(self.exclude)]
        if self.use_current_env:
            argv.append("--use-current-env")
        return argv


def run_arm(arm: Arm, run_name: str, select: list[str] | None = None, log=None) -> Path:
    """One `milabench run` of this arm; returns its run folder (its exit code is not fatal:
    failures show up in the comparison)."""
    env = {**os.environ, **arm.env}
    started = time.monotonic()
    proc = subprocess.run(
        arm.command(run_name, select),
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    run_dir = arm.base / "runs" / run_name
    if log:
        log(
            f"  {arm.label}: {run_name} exit {proc.returncode} in {time.monotonic() - started:.1f}s"
        )
    if not run_dir.is_dir():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise MilabenchError(
            f"A/B arm {arm.label}: 'milabench run' made no run folder {run_dir}: {tail[0]}"
        )
    return run_dir


def interleave(
    control: Arm,
    treatment: Arm,
    rounds: int,
    prefix: str,
    select: list[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[list[Path], list[Path]]:
    """`rounds` rounds, alternating which arm goes first; returns (A folders, B folders)."""
    a_dirs, b_dirs = [], []
    for k in range(rounds):
        order = [(control, a_dirs), (treatment, b_dirs)]
        if k % 2:
            order.reverse()
        for arm, dirs in order:
            dirs.append(run_arm(arm, f"{prefix}.{arm.label}.r{k}", select, log))
    return a_dirs, b_dirs


def pooled_samples(dirs: list[Path]) -> dict[str, list[float]]:
    return samples_of(build_report(dirs))


def ab_compare(
    control: Arm,
    treatment: Arm,
    *,
    rounds: int = 2,
    confirm_rounds: int | None = None,
    prefix: str | None = None,
    log: Callable[[str], None] | None = print,
    **compare_kwargs,
) -> tuple[Comparison, list[Path], list[Path]]:
    """Interleaved rounds, comparison, then confirmation rounds for the suspects."""
    prefix = prefix or time.strftime("ab.%Y-%m-%d_%H-%M-%S")
    a_dirs, b_dirs = interleave(control, treatment, rounds, prefix, log=log)
    cmp = compare_samples(pooled_samples(a_dirs), pooled_samples(b_dirs),
                          a_label=control.describe(), b_label=treatment.describe(), **compare_kwargs)  # fmt: skip
    suspects = [r.name for r in cmp.rows if r.regression]
    if suspects and (confirm_rounds is None or confirm_rounds > 0):
        if log:
            log(f"confirming suspected regression(s): {', '.join(suspects)}")
        ca, cb = interleave(control, treatment, confirm_rounds or rounds, prefix + ".confirm",
                            select=suspects, log=log)  # fmt: skip
        again = compare_samples(pooled_samples(ca), pooled_samples(cb), **compare_kwargs)
        cmp.confirmed = {r.name for r in again.rows if r.regression}
        a_dirs += ca
        b_dirs += cb
    elif not suspects:
        cmp.confirmed = set()
    return cmp, a_dirs, b_dirs
