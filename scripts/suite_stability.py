"""Measure how repeatable each benchmark of a suite is: run it N times, report the RSD.

For every benchmark process of the suite (as `milabench matrix` resolves it: same argv,
same ``MILABENCH_CONFIG`` and thread count as a real run) this script runs the process
``--repeat`` times in a row, reads its ``train`` rate records from a real ``DATA_FD``
pipe (or from standard output for torchrun entries), and takes the mean rate of each
repeat (warm-up excluded: by the measurement window, or by the ``skip`` budget of
benchmarks that still count steps; a benchmark never reports a warm-up rate). The
relative standard deviation (sample std / mean) of those means is the number the CPU
suite promises to keep under 10%. It also reports the wall time of each run (process
start to exit), so the table says what the suite costs.

Each run also states how precise it believes itself to be: the 95% interval of its mean
rate (batch means over its time-ordered rates, `benchkit.window.rate_interval`, the code
the benchmark stops on and the report prints). The **interval coverage** checks that
claim against the next run: for each pair of consecutive repeats (k, k+1), does run k's
interval contain run k+1's median rate? An interval that is honest about the run-to-run
spread contains it most of the time; one that covers only a small share of the pairs is
too narrow for this machine (it describes the noise inside one run, not between runs).
When the benchmark writes a ``window`` record (docs/measurement.md section 3), the
table also says in how many runs the precision target was met.

The machine itself is the other suspect: on a shared virtual machine the host's load
changes the speed of everything. Right before each run the script therefore times a bare
baseline, ``--floor-seconds`` of a fixed pure-Python loop in one process per CPU (no torch,
no memory traffic), and the ``floor RSD`` column is that baseline's RSD over the same
runs. A benchmark whose RSD is close to the floor's is as stable as the machine allows;
one far above it has a variance of its own to hunt.

Usage::

    python scripts/suite_stability.py --config config/cpu.yaml --repeat 3 \
        [--select a,b] [--override '*.measure.max=10s'] [--base /tmp/stab] \
        [--markdown out.md] [--json out.json]

It runs in the current environment (``--use-current-env``): install the benchmarks'
requirements there first. Run ``milabench prepare`` with the same ``--base`` before, or
pass ``--prepare`` to run the prepare scripts here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchkit.channel import SmuggleDecoder  # noqa: E402
from benchkit.window import rate_interval  # noqa: E402


@dataclass
class RunRecord:
    """One run of one benchmark process: its measured rates in time order, and more."""

    rates: list[float]
    wall: float
    rc: int
    window: dict | None = None  # the benchmark's ``window`` record, when it writes one

    @property
    def ok(self) -> bool:
        return self.rc == 0 and bool(self.rates)


def resolved_processes(
    config: str, base: str, select: str | None, overrides: list[str] | None = None
) -> list[tuple[dict, dict]]:
    """(entry, process) pairs from ``milabench matrix --format json``."""
    cmd = [
        sys.executable,
        "-m",
        "milabench",
        "matrix",
        "--config",
        config,
        "--base",
        base,
        "--use-current-env",
        "--format",
        "json",
    ]
    if select:
        cmd += ["--select", select]
    for override in overrides or []:
        cmd += ["--override", override]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    pairs = []
    for entry in json.loads(out.stdout).values():
        if entry.get("skipped"):
            continue
        procs = entry.get("processes") or [
            {
                "tag": entry["name"],
                "command": entry["command"],
                "env": {},
                "data_channel": "smuggle" if entry["plan"]["method"] == "torchrun" else "fd",
            }
        ]
        pairs.append((entry, procs[0]))
    return pairs


def process_env(entry: dict, proc: dict) -> dict[str, str]:
    """The variables a run gets (see milabench.plan.environment), via the real helper."""
    env = dict(os.environ)
    try:
        from milabench.config.system import load_system
        from milabench.plan.environment import benchmark_env

        env.update(benchmark_env(entry, load_system(None)))
    except Exception as exc:  # noqa: BLE001 - fall back to the essentials
        print(f"(benchmark_env unavailable: {exc}; using the essentials)", file=sys.stderr)
        dirs = entry["dirs"]
        env.update(
            MILABENCH_CONFIG=json.dumps(entry),
            MILABENCH_DIR_DATA=dirs["data"],
            MILABENCH_DIR_BASE=dirs["base"],
            OMP_NUM_THREADS=str(os.cpu_count() or 1),
            PYTHONUNBUFFERED="1",
        )
    env.update(proc.get("env") or {})
    env.pop("DATA_FD", None)
    return env


def run_once(entry: dict, proc: dict, timeout: float) -> RunRecord:
    """Train rates (time order), wall seconds, return code and window of one run."""
    env = process_env(entry, proc)
    smuggle = proc.get("data_channel") == "smuggle"
    read_end = write_end = None
    chunks: list[bytes] = []
    reader = None
    if smuggle:
        env["DATA_FD"] = "1"
    else:
        read_end, write_end = os.pipe()
        env["DATA_FD"] = str(write_end)

        def drain() -> None:
            with os.fdopen(read_end, "rb") as stream:
                for chunk in iter(lambda: stream.read1(65536), b""):
                    chunks.append(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
    start = time.perf_counter()
    try:
        result = subprocess.run(
            proc["command"],
            env=env,
            cwd=entry["dirs"]["code"],
            capture_output=True,
            text=True,
            timeout=timeout,
            pass_fds=() if smuggle else (write_end,),
        )
    finally:
        if write_end is not None:
            os.close(write_end)
    wall = time.perf_counter() - start
    if reader is not None:
        reader.join(timeout=30)
        lines = b"".join(chunks).decode().splitlines()
    else:
        _plain, lines = SmuggleDecoder().feed(result.stdout)
    rates, window = parse_records(lines)
    if result.returncode != 0:
        print(result.stderr[-2000:], file=sys.stderr)
    return RunRecord(rates, wall, result.returncode, window)


def parse_records(lines: list[str]) -> tuple[list[float], dict | None]:
    """Measured ``train`` rates in the order written, and the ``window`` record if any.

    A benchmark never writes a warm-up rate (the window, or the older ``skip`` budget,
    keeps them out), so every rate record is a measured one.
    """
    rates: list[float] = []
    window = None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("task") != "train":
            continue
        if "rate" in record:
            try:
                rates.append(float(record["rate"]))
            except (TypeError, ValueError):
                continue
        elif isinstance(record.get("window"), dict):
            window = record["window"]
    return rates, window


FLOOR_LOOP = """
import sys, time
end = time.perf_counter() + float(sys.argv[1])
n = 0
while time.perf_counter() < end:
    s = 0
    for i in range(10000):
        s += i * i
    n += 1
print(n)
"""


def floor_probe(seconds: float) -> float:
    """Iterations/s of a fixed pure-Python loop run in one process per CPU at once."""
    if seconds <= 0:
        return float("nan")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FLOOR_LOOP, str(seconds)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(os.cpu_count() or 1)
    ]
    total = 0
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=seconds + 30)
            total += int(out.strip() or 0)
    finally:
        for proc in procs:  # a probe that hung must not outlive the harness
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return total / seconds


def rsd_of(values: list[float]) -> float:
    values = [v for v in values if v == v]
    if len(values) < 2:
        return float("nan")
    return statistics.stdev(values) / statistics.fmean(values)


def interval_of(run: RunRecord) -> dict | None:
    """The run's 95% interval of the mean rate (batch means), as JSON-able numbers."""
    if not run.ok:
        return None
    found = rate_interval(run.rates)
    if found is None:
        return None
    return {
        "mean": found.mean,
        "low": found.low,
        "high": found.high,
        "halfwidth": found.halfwidth if found.halfwidth != float("inf") else None,
        "observations": found.observations,
        "batches": found.batches,
    }


def coverage(runs: list[RunRecord]) -> list[dict]:
    """For each pair of consecutive runs (k, k+1): does run k's interval hold k+1's median?

    A pair counts only when both runs measured and run k has an interval (two rates at
    least); the others are left out of the figure rather than counted as misses.
    """
    pairs = []
    for k in range(len(runs) - 1):
        first, second = runs[k], runs[k + 1]
        interval = interval_of(first)
        if interval is None or not second.ok:
            continue
        median = statistics.median(second.rates)
        pairs.append(
            {
                "run": k + 1,
                "low": interval["low"],
                "high": interval["high"],
                "next_median": median,
                "hit": interval["low"] <= median <= interval["high"],
            }
        )
    return pairs


def summarise(name: str, runs: list[RunRecord], units: str, floors: list[float]) -> dict:
    means = [statistics.fmean(r.rates) for r in runs if r.ok]
    pairs = coverage(runs)
    intervals = [interval_of(r) for r in runs]
    halfwidths = [i["halfwidth"] for i in intervals if i and i["halfwidth"] is not None]
    windows = [r.window for r in runs if r.window is not None]
    return {
        "name": name,
        "units": units,
        "means": means,
        "mean": statistics.fmean(means) if means else float("nan"),
        "rsd": rsd_of(means),
        "floors": floors,
        "floor_rsd": rsd_of(floors),
        "wall": [round(r.wall, 1) for r in runs],
        "failures": sum(1 for r in runs if r.rc != 0),
        "observations": [len(r.rates) for r in runs],
        "intervals": intervals,
        "halfwidth_median": statistics.median(halfwidths) if halfwidths else float("nan"),
        "coverage": pairs,
        "hits": sum(1 for p in pairs if p["hit"]),
        "pairs": len(pairs),
        "windows": windows,
        "target_met": sum(1 for w in windows if w.get("met") is True),
    }


def coverage_line(rows: list[dict]) -> str:
    """The overall figure: how many intervals contained the next run's median."""
    hits = sum(row["hits"] for row in rows)
    pairs = sum(row["pairs"] for row in rows)
    if not pairs:
        return "Interval coverage: no pair of consecutive runs to compare (--repeat 2 or more)."
    return (
        f"Interval coverage: {hits} of {pairs} intervals contained the next run's median "
        f"({100 * hits / pairs:.0f}%)."
    )


def markdown(rows: list[dict], repeat: int, load: tuple[float, float]) -> str:
    with_windows = any(row.get("windows") for row in rows)
    out = [
        f"| benchmark | units | mean of {repeat} runs | RSD | floor RSD | 95% interval "
        f"(median ±) | next median inside | {'target met | ' if with_windows else ''}"
        "wall s per run |",
        "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if with_windows else "") + "---|",
    ]
    for row in rows:
        half = row.get("halfwidth_median", float("nan"))
        half_text = "-" if half != half else f"±{half * 100:.1f}%"
        cover = f"{row['hits']}/{row['pairs']}" if row.get("pairs") else "-"
        met = f"{row['target_met']}/{len(row['windows'])} | " if with_windows else ""
        out.append(
            f"| {row['name']} | {row['units']} | {row['mean']:.4g} | {row['rsd'] * 100:.1f}% | "
            f"{row['floor_rsd'] * 100:.1f}% | {half_text} | {cover} | {met}"
            f"{', '.join(str(w) for w in row['wall'])} |"
        )
    passed = sum(1 for row in rows if row["rsd"] < 0.10)
    out.append("")
    out.append(f"RSD under 10%: {passed} of {len(rows)} entries.")
    out.append("")
    out.append(coverage_line(rows))
    total = sum(sum(r["wall"]) for r in rows) / max(repeat, 1)
    out.append("")
    out.append(
        f"Run time of one pass over the suite: {total:.0f} s (load average before/after: "
        f"{load[0]:.2f} / {load[1]:.2f})."
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config" / "cpu.yaml"))
    parser.add_argument("--base", default="/tmp/milabench-stability")
    parser.add_argument("--select", default=None)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="KEY=VALUE passed to `milabench matrix` (e.g. '*.measure.max=10s')",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--floor-seconds",
        type=float,
        default=1.0,
        help="bare-baseline probe before each run (0: none)",
    )
    parser.add_argument("--prepare", action="store_true", help="run `milabench prepare` first")
    parser.add_argument("--markdown", default=None, help="write the table here")
    parser.add_argument("--json", default=None, help="write the raw numbers here")
    args = parser.parse_args(argv)

    if args.prepare:
        cmd = [
            sys.executable,
            "-m",
            "milabench",
            "prepare",
            "--config",
            args.config,
            "--base",
            args.base,
            "--use-current-env",
        ]
        if args.select:
            cmd += ["--select", args.select]
        subprocess.run(cmd, check=True, cwd=ROOT, timeout=600)

    load_before = os.getloadavg()[0]
    rows = []
    for entry, proc in resolved_processes(args.config, args.base, args.select, args.override):
        units = "?"
        runs = []
        floors = []
        for k in range(args.repeat):
            floors.append(floor_probe(args.floor_seconds))
            run = run_once(entry, proc, args.timeout)
            runs.append(run)
            mean = statistics.fmean(run.rates) if run.rates else float("nan")
            interval = interval_of(run)
            half = interval["halfwidth"] if interval else None
            print(
                f"{entry['name']} run {k + 1}: mean {mean:.4g} over {len(run.rates)} obs"
                + (f" ±{half * 100:.1f}%" if half is not None else "")
                + f", {run.wall:.1f} s, rc={run.rc} (floor {floors[-1]:.0f}/s)",
                flush=True,
            )
        units = _units_of(entry)
        rows.append(summarise(entry["name"], runs, units, floors))
        row = rows[-1]
        print(
            f"== {row['name']}: RSD {row['rsd'] * 100:.1f}% (floor {row['floor_rsd'] * 100:.1f}%)"
            f", next median inside the interval {row['hits']}/{row['pairs']}",
            flush=True,
        )
    load_after = os.getloadavg()[0]

    table = markdown(rows, args.repeat, (load_before, load_after))
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 1 if any(r["failures"] for r in rows) else 0


def _units_of(entry: dict) -> str:
    folder = Path(entry["definition"]).name
    return {"flops": "Tflops", "transformer-lm": "Tok/s", "llm": "Tok/s", "opbench": "calls/s"}.get(
        folder, "items/s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
