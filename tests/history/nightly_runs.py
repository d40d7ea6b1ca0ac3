"""Real stored runs for the history tests, made once per test session and shared by the
workers (`sharedbuild.build_once`; both files that read them are quiet, so the paced runs
are made in the foreground, the other tests taking only what they leave:
tests/concurrency.py).

`nightly_runs(factory)` makes 30 real `milabench run` folders of the paced benchmark in
`benchmarks/paced` (20 steps, 20 ms each, about 0.7 s a run; two at a time,
`_batches`), the last 10 with a step 11.1% longer (rate 10% lower: the planted
regression at run index 20, `night20`), then 10 more at the original speed
(`flat00`..`flat09`). Two SQLite stores, which order runs by their start, are filled
with the real `milabench store import`: `drop.sqlite` (night00..night29) and `flat.sqlite`
(night00..night19 then flat00..flat09: 30 runs, no change).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from clirun import milabench  # noqa: F401 - the tests import it from here
from sharedbuild import build_once

HERE = Path(__file__).resolve().parent
BENCH = HERE / "benchmarks" / "paced"
STEP_MS = 20.0
SLOW_MS = STEP_MS / 0.9  # rate = batch / step: 10% lower
SUITE = f"""
paced:
  definition: {BENCH}
  tags: [nightly, cpu]
  plan:
    method: per_gpu
  argv:
    --steps: 20
    --step-ms: {STEP_MS}
"""


@dataclass
class NightlyRuns:
    base: Path
    suite: Path
    night: list[Path]  # 30 runs, 10% slower from night20 on
    flat: list[Path]  # 10 more runs at the speed of night00..night19
    drop_url: str
    flat_url: str
    seconds: float  # time to make and import them all


def _run(base: Path, suite: Path, name: str, step_ms: float) -> Path:
    # the doctor's look at the machine (half a second of sampling before each run) is not
    # what these runs are for: off, as `run.doctor` allows
    proc = milabench("run", "--config", str(suite), "--base", str(base), "--use-current-env",
                     "--run-name", name, "--override", f"paced.argv.--step-ms={step_ms}",
                     env={"MILABENCH_RUN_DOCTOR": "off"})  # fmt: skip
    run_dir = base / "runs" / name
    if proc.returncode != 0 or not run_dir.is_dir():
        raise AssertionError(f"milabench run {name} failed:\n{proc.stdout[-2000:]}\n"
                             f"{proc.stderr[-2000:]}")  # fmt: skip
    return run_dir


def _import(url: str, runs: list[Path]) -> None:
    proc = milabench("store", "import", *map(str, runs), "--url", url)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("imported 1 benchmark(s)") == len(runs), proc.stdout


def _wait_for_start(run_dir: Path, running: Future, timeout: float = 60) -> None:
    """Until the benchmark of the run in ``run_dir`` has started (its ``start`` event, the
    time the stores order runs by), or its run has ended."""
    deadline = time.monotonic() + timeout
    while not running.done() and time.monotonic() < deadline:
        for data in run_dir.glob("*.data"):
            if '"event": "start"' in data.read_text():
                return
        time.sleep(0.02)


def _batches() -> list[list[tuple[str, float]]]:
    """The 40 runs (name, step in ms) in groups of two made together, each group after the
    one before it and the second run of a group started once the first one's benchmark
    has (`_wait_for_start`): a run mostly sleeps (its steps are paced), so two share the
    machine without slowing each other, and the stores see the runs in their order.
    ``night20``, the first slow night, is alone: every fast night ran before it and
    every other slow one after."""
    night = [(f"night{i:02d}", SLOW_MS if i >= 20 else STEP_MS) for i in range(30)]
    flat = [(f"flat{i:02d}", STEP_MS) for i in range(10)]
    later = night[21:] + flat  # flat00 may run beside night29: no store holds both
    return (
        [night[i : i + 2] for i in range(0, 20, 2)]
        + [[night[20]]]
        + [later[i : i + 2] for i in range(0, len(later), 2)]
    )


def _build(root: Path) -> dict:
    t0 = time.perf_counter()
    suite = root / "suite.yaml"
    suite.write_text(SUITE)
    base = root / "base"
    made: dict[str, Path] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for group in _batches():
            futures = {}
            for name, ms in group:
                if futures:  # its benchmark starts after the one before it: the stores' order
                    _wait_for_start(base / "runs" / group[0][0], futures[group[0][0]])
                futures[name] = pool.submit(_run, base, suite, name, ms)
            made.update((name, future.result()) for name, future in futures.items())
    night = [made[f"night{i:02d}"] for i in range(30)]
    flat = [made[f"flat{i:02d}"] for i in range(10)]
    drop_url = f"sqlite:///{root / 'drop.sqlite'}"
    flat_url = f"sqlite:///{root / 'flat.sqlite'}"
    _import(drop_url, night)
    _import(flat_url, night[:20] + flat)
    made = NightlyRuns(base, suite, night, flat, drop_url, flat_url, time.perf_counter() - t0)
    print(f"\nnightly_runs: 40 real runs made and imported in {made.seconds:.1f} s")
    return json.loads(json.dumps(asdict(made), default=str))


def nightly_runs(factory: pytest.TempPathFactory) -> NightlyRuns:
    """The session's runs (made by the first caller)."""
    made = build_once(factory, "history-nightly", _build)
    return NightlyRuns(
        base=Path(made["base"]),
        suite=Path(made["suite"]),
        night=[Path(p) for p in made["night"]],
        flat=[Path(p) for p in made["flat"]],
        drop_url=made["drop_url"],
        flat_url=made["flat_url"],
        seconds=made["seconds"],
    )
