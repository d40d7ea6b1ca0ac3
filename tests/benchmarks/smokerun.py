"""The standard smoke suite (`config/standard-smoke.yaml`), installed, prepared and run
once per test session and read by every test that needs an entry run through milabench.

`smoke_run(factory)` makes the run with the real commands a user types (``milabench
install``, ``prepare``, ``run`` in subprocesses, real environments, torchrun with gloo)
the first time a worker asks (`sharedbuild.build_once`), and returns a `SmokeRun` over
its folder: the printed report, ``report.json`` and each entry's records. A test that
checks one benchmark's run (its rates, losses, FLOPs declaration, ranks) reads them
here instead of starting the benchmark again.

``MILABENCH_TEST_SMOKE_BASE=<base>`` reuses a base where the three commands already ran
(run name ``smoke``; its report printed again by ``milabench report``), to work on these
tests without waiting for the run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import clirun
import pytest
from dimenetbases import seed_cache
from sharedbuild import build_once

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "config" / "standard-smoke.yaml"
RUN_NAME = "smoke"
# The three phases and the time each may take on a loaded 2-core machine.
PHASES = (("install", 900), ("prepare", 300), ("run", 1500))


def milabench(*args: str, base: Path, timeout: float) -> subprocess.CompletedProcess:
    """``milabench ARGS`` on the smoke suite and ``base`` (tests/clirun.py)."""
    return clirun.milabench(*args, "--config", str(SMOKE), "--base", str(base), timeout=timeout)


def _build(factory: pytest.TempPathFactory, folder: Path) -> dict[str, Any]:
    base = folder / "base"
    out: dict[str, Any] = {"base": str(base)}
    for phase, limit in PHASES:
        extra = ("--run-name", RUN_NAME) if phase == "run" else ()
        if phase == "run":  # DimeNet's bases, as a second run on this base would find them
            seed_cache(factory, base / "cache")
        done = milabench(phase, *extra, base=base, timeout=limit)
        out[phase] = {"returncode": done.returncode, "stdout": done.stdout,
                      "stderr": done.stderr[-5000:]}  # fmt: skip
        if phase != "run":
            assert done.returncode == 0, (phase, done.stdout[-3000:], done.stderr[-3000:])
    return out


@dataclass
class SmokeRun:
    base: Path
    returncode: int  # of `milabench run`
    stdout: str  # its printed report
    stderr: str

    @property
    def folder(self) -> Path:
        return self.base / "runs" / RUN_NAME

    def report(self) -> dict[str, Any]:
        return json.loads((self.folder / "report.json").read_text())

    def rows(self) -> dict[str, dict[str, Any]]:
        """report.json's rows by entry name."""
        return {row["name"]: row for row in self.report()["benchmarks"]}

    def events(self, entry: str) -> list[dict[str, Any]]:
        """Every event of ``entry``'s run files (all its processes), in file order."""
        files = sorted(self.folder.glob(f"{entry}.data")) + sorted(
            self.folder.glob(f"{entry}.*.data")
        )
        assert files, f"no run file of {entry} in {self.folder}"
        return [json.loads(line) for path in files for line in path.read_text().splitlines()
                if line.strip()]  # fmt: skip

    def data(self, entry: str, task: str = "train") -> list[dict[str, Any]]:
        """The data records of ``entry`` for ``task``."""
        return [e["data"] for e in self.events(entry)
                if e["event"] == "data" and e["data"].get("task") == task]  # fmt: skip

    def rates(self, entry: str) -> list[dict[str, Any]]:
        return [r for r in self.data(entry) if "rate" in r]

    def losses(self, entry: str) -> list[float]:
        return [r["loss"] for r in self.data(entry) if "loss" in r]

    def declared_flops(self, entry: str) -> list[dict[str, Any]]:
        return [r for r in self.data(entry) if "flops_per_item" in r]

    def window(self, entry: str) -> dict[str, Any]:
        windows = [r["window"] for r in self.data(entry) if "window" in r]
        assert len(windows) == 1, (entry, windows)
        return windows[0]

    def stdout_of(self, entry: str) -> str:
        """What ``entry``'s processes printed (every rank's ``.stdout`` file)."""
        paths = sorted(self.folder.glob(f"{entry}.stdout")) + sorted(
            self.folder.glob(f"{entry}.*.stdout")
        )
        return "".join(p.read_text() for p in paths)

    def stderr_of(self, entry: str) -> str:
        """What ``entry``'s processes wrote to standard error (every rank's lines, as
        milabench recorded them in the run file)."""
        return "\n".join(e["data"] for e in self.events(entry)
                         if e["event"] == "line" and e.get("pipe") == "stderr")  # fmt: skip

    def event_data(self, entry: str, event: str) -> list[dict[str, Any]]:
        """The ``data`` of ``entry``'s ``event`` events (``start``, ``stop``, ``end``...)."""
        return [e["data"] for e in self.events(entry) if e["event"] == event]

    def command(self, entry: str) -> list[str]:
        """The command milabench started for ``entry`` (its ``start`` event)."""
        (start,) = self.event_data(entry, "start")
        return start["command"]

    def option(self, entry: str, option: str) -> str:
        """The value ``entry``'s command gives ``option``."""
        command = self.command(entry)
        assert command.count(option) == 1, (option, command)
        return command[command.index(option) + 1]

    def argv(self, entry: str) -> list[str]:
        """The arguments ``entry``'s main.py was given."""
        command = self.command(entry)
        return command[[i for i, a in enumerate(command) if a.endswith("main.py")][0] + 1 :]

    def check_measured(self, entry: str, units: str, *, loss: bool = True) -> None:
        """What a benchmark test checks of a run, on ``entry``'s records: the report counts
        it measured and every process ended with 0 or was ended after its window; rates in ``units``, positive and timed;
        one ``stop`` event. Its window is timed, not a step count: benchkit adds each rate
        record to the window and nothing else, so the stop event's and the window's
        ``observations`` are the number of rate records, and their warm-up observations
        are the warm-up record's. Losses, where it trains, finite and plausible; no
        ``terminate called`` from a rank."""
        row = self.rows()[entry]
        assert row["fail"] == 0 and row["n"] >= 1, row
        ends = self.event_data(entry, "end")  # ended by itself, or by the runner once its
        # window was over (early stop: a late exit gets SIGTERM, not counted as a failure)
        assert ends and all(e["return_code"] == 0 or e.get("early_stop") for e in ends), (
            ends,
            self.stderr_of(entry),
        )
        rates = self.rates(entry)
        assert rates and all(r["units"] == units and r["rate"] > 0 for r in rates), rates[:3]
        assert all(isinstance(r["time"], float) for r in rates)
        (stop,) = self.event_data(entry, "stop")
        window = self.window(entry)
        assert stop["observations"] == window["observations"] == len(rates), (stop, window)
        (warmup,) = [r["warmup"] for r in self.data(entry) if "warmup" in r]
        assert (
            stop["warmup_observations"] == window["warmup_observations"] == warmup["observations"]
        ), (stop, window, warmup)
        if loss:
            losses = self.losses(entry)
            assert losses and all(math.isfinite(x) and 0 < x < 50 for x in losses), losses[:5]
        assert "terminate called" not in self.stderr_of(entry)


def smoke_run(factory: pytest.TempPathFactory) -> SmokeRun:
    """The session's smoke run (made by the first caller, or the reused base)."""
    reuse = os.environ.get("MILABENCH_TEST_SMOKE_BASE")
    if reuse:  # the report printed again from the run's files
        base = Path(reuse)
        folder = base / "runs" / RUN_NAME
        assert (folder / "report.json").is_file(), f"{base}: no smoke run"
        again = milabench("report", "--runs", str(folder), base=base, timeout=300)
        return SmokeRun(base, again.returncode, again.stdout, again.stderr)
    built = build_once(factory, "standard-smoke", lambda folder: _build(factory, folder))
    run = built["run"]
    return SmokeRun(Path(built["base"]), run["returncode"], run["stdout"], run["stderr"])
