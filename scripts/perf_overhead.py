"""Measure milabench's own costs against bare baselines, in one command.

    python scripts/perf_overhead.py            # table
    python scripts/perf_overhead.py --json     # machine-readable
    python scripts/perf_overhead.py --quick    # fewer rounds and paired blocks (smoke run)

(a) instrumentation overhead: `perf_workload.py` (CPU MLP training) run bare vs under the
    orchestrator's runner (`milabench.execute.runner`: process group, stdout/stderr/data
    pumps, run files) with `TimedIterator` + monitor + data channel; interleaved rounds,
    medians of the script's own wall-clock throughput, ratio.
(b) launch latency: a no-op benchmark through the runner vs ``python -c pass``.
(c) ingestion: a child writing N JSON lines through ``DATA_FD`` (benchkit's DataWriter)
    into the runner's ``.data`` file: lines/s, and every line checked present.
(d) per-step cost of `TimedIterator` vs a bare loop (us/step), and of `DataWriter.write`.

Targets (docs/performance.md): (a) <= 1 %, (b) < 0.5 s extra, (c) >= 100k lines/s, (d) <= 5 us/step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "perf_workload.py"
# A step of a few milliseconds (a 512-wide MLP on 128 samples, one thread): small, yet a
# real training step (the CPU suite's benchmarks take >= 20 ms per step).
WORKLOAD_BATCH = 128
WORKLOAD_ARGS = ["--width", "512", "--batch", str(WORKLOAD_BATCH), "--warmup", "50"]
PY = sys.executable


def _runner_available() -> bool:
    try:
        import milabench.execute.runner  # noqa: F401
        import milabench.sinks.runfiles  # noqa: F401
    except ImportError:
        return False
    return True


def run_under_runner(argv: list[str], run_dir: Path, tag: str, env: dict | None = None):
    """One process through the real runner into ``run_dir``; returns (outcome, seconds)."""
    from milabench.execute.runner import run_specs_sync
    from milabench.plan.spec import ProcessSpec
    from milabench.sinks.runfiles import RunFileSink

    spec = ProcessSpec(
        tag=[tag],
        argv=argv,
        env=dict(env or {}),
        cwd=str(run_dir),
        data_channel="fd",
        timeout=600,
        entry={"name": tag, "tag": [tag], "voir": {"options": {"stop": 0, "gpu_poll": 1}}},
    )
    sink = RunFileSink(run_dir)
    t0 = time.perf_counter()
    try:
        outcomes = run_specs_sync([spec], [sink])
    finally:
        sink.close()
    return outcomes[0], time.perf_counter() - t0


_PERFLOAD_MAIN = """
import runpy, sys
sys.argv = [{workload!r}, *sys.argv[1:]]
runpy.run_path({workload!r}, run_name="__main__")
"""


def _milabench_cli_available() -> bool:
    try:
        import milabench.cli.run  # noqa: F401
        import milabench.execute.session  # noqa: F401
    except ImportError:
        return False
    return True


def make_suite(workdir: Path, steps: int) -> Path:
    """A tiny suite: ``noop`` (``pass``) and ``perfload`` (the CPU workload)."""
    root = workdir / "suite"
    for name, code in (
        ("noop", "pass\n"),
        ("perfload", _PERFLOAD_MAIN.format(workload=str(WORKLOAD))),
    ):
        (root / "benchmarks" / name).mkdir(parents=True, exist_ok=True)
        (root / "benchmarks" / name / "main.py").write_text(code)
    suite = root / "suite.yaml"
    entries = []
    perf_argv = "  argv:\n" + "".join(
        f"    {k}: {v}\n"
        for k, v in zip(
            ["--steps", *WORKLOAD_ARGS[::2]], [steps, *WORKLOAD_ARGS[1::2]], strict=True
        )
    )
    for name, argv in (("noop", ""), ("perfload", perf_argv)):
        entries.append(
            f"{name}:\n"
            f"  definition: {root / 'benchmarks' / name}\n"
            f"  group: {name}\n"
            "  install_group: torch\n"
            "  plan:\n    method: per_gpu\n"
            "  max_duration: 600\n"
            "  voir:\n    options: {stop: 0, skip: 0, gpu_poll: 1}\n" + argv
        )
    suite.write_text("\n".join(entries))
    return suite


def milabench_run(suite: Path, workdir: Path, select: str, run_name: str) -> dict:
    """``milabench run`` of one benchmark of the tiny suite; wall time and its run dir."""
    base = workdir / "base"
    argv = [
        PY,
        "-m",
        "milabench",
        "run",
        "--config",
        str(suite),
        "--use-current-env",
        "--base",
        str(base),
        "--dash",
        "no",
        "--run-name",
        run_name,
        "--select",
        select,
    ]
    launched = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    exited = time.time()
    run_dir = base / "runs" / run_name
    data = run_dir / f"{select}.D0.data"
    if not data.exists():
        raise RuntimeError(f"milabench run wrote no {data.name}:\n{proc.stderr[-3000:]}")
    events = {ev["event"]: ev["data"] for ev in map(json.loads, data.open()) if "event" in ev}
    if events.get("end", {}).get("return_code") != 0:
        raise RuntimeError(f"{select} failed under milabench run:\n{proc.stderr[-3000:]}")
    return {
        "seconds": seconds,
        "run_dir": run_dir,
        "setup_s": events["start"]["time"] - launched,
        "process_s": events["end"]["time"] - events["start"]["time"],
        "teardown_s": exited - events["end"]["time"],
    }


def _perf_from_stdout(text: str) -> tuple[float, float]:
    """(items per wall second, items per CPU second) printed by the workload."""
    for line in text.splitlines():
        if line.startswith("PERF "):
            _, wall, cpu = line.split()
            return float(wall), float(cpu)
    raise RuntimeError(f"workload printed no PERF line:\n{text[-2000:]}")


def measure_overhead(rounds: int, steps: int, workdir: Path, blocks: int = 60) -> dict:
    """(a): interleaved bare / instrumented rounds, medians of items/s; and ``blocks``
    alternating blocks inside one process (`_paired_overhead`)."""
    bare, inst = [], []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("DATA_FD", None)
    args = [PY, str(WORKLOAD), "--steps", str(steps), *WORKLOAD_ARGS]
    use_cli = _milabench_cli_available()
    use_runner = _runner_available()
    suite = make_suite(workdir, steps) if use_cli else None
    for r in range(rounds):
        order = ("bare", "inst") if r % 2 == 0 else ("inst", "bare")
        for kind in order:
            if kind == "bare":
                out = subprocess.run(
                    [*args, "--bare"], env=env, capture_output=True, text=True, check=True
                ).stdout
                bare.append(_perf_from_stdout(out))
            elif use_cli:
                result = milabench_run(suite, workdir, "perfload", f"overhead{r}")
                text = (result["run_dir"] / "perfload.D0.stdout").read_text()
                inst.append(_perf_from_stdout(text))
            elif use_runner:
                run_dir = workdir / f"overhead{r}"
                outcome, _ = run_under_runner(args, run_dir, "workload", {"OMP_NUM_THREADS": "1"})
                assert outcome.return_code == 0, outcome
                text = (run_dir / "workload.stdout").read_text()
                inst.append(_perf_from_stdout(text))
            else:
                inst.append(_perf_under_voir_pipe(args, env))
    paired = _paired_overhead(env, blocks)
    b, i = statistics.median(x[0] for x in bare), statistics.median(x[0] for x in inst)
    bc, ic = statistics.median(x[1] for x in bare), statistics.median(x[1] for x in inst)
    return {
        "bare_items_per_s": b,
        "instrumented_items_per_s": i,
        "overhead_pct": 100.0 * (b - i) / b,
        "bare_items_per_cpu_s": bc,
        "instrumented_items_per_cpu_s": ic,
        "overhead_cpu_pct": 100.0 * (bc - ic) / bc,
        "paired_overhead_pct": paired[0],
        "paired_bare_items_per_cpu_s": paired[1],
        "paired_instrumented_items_per_cpu_s": paired[2],
        "rounds": rounds,
        "steps": steps,
        "batch": WORKLOAD_BATCH,
        "bare_all": bare,
        "instrumented_all": inst,
        "through": "milabench run"
        if use_cli
        else ("milabench.execute.runner" if use_runner else "DATA_FD pipe reader"),
    }


def _paired_overhead(env: dict, blocks: int = 60) -> tuple[float, float, float]:
    """Bare and instrumented blocks alternating inside one workload process (records go
    to a real descriptor): the precise figure on a machine whose load drifts."""
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        out = subprocess.run(
            [PY, str(WORKLOAD), "--paired", str(blocks), "--block", "50", *WORKLOAD_ARGS],
            env=dict(env, DATA_FD=str(fd)),
            pass_fds=[fd],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.close(fd)
    for line in out.splitlines():
        if line.startswith("PAIRED "):
            pct, bare, inst = map(float, line.split()[1:])
            return pct, bare, inst
    raise RuntimeError(f"workload printed no PAIRED line:\n{out[-2000:]}")


def _perf_under_voir_pipe(args: list[str], env: dict) -> tuple[float, float]:
    """Fallback for (a) when the runner is absent: a plain DATA_FD pipe reader."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        args, env=dict(env, DATA_FD=str(w)), pass_fds=[w], stdout=subprocess.PIPE, text=True
    )
    os.close(w)
    while os.read(r, 65536):
        pass
    os.close(r)
    out, _ = proc.communicate()
    return _perf_from_stdout(out)


def measure_launch(rounds: int, workdir: Path) -> dict:
    """(b): a no-op benchmark under ``milabench run`` (and through the runner alone) vs
    ``python -c pass``, interleaved; the CLI's time is split with its run file's
    ``start``/``end`` events into setup (config, metadata), process, and teardown (report)."""
    bare, runner, cli = [], [], []
    suite = make_suite(workdir, 10) if _milabench_cli_available() else None
    for r in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([PY, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t0)
        if _runner_available():
            outcome, seconds = run_under_runner([PY, "-c", "pass"], workdir / f"noop{r}", "noop")
            assert outcome.return_code == 0, outcome
            runner.append(seconds)
        if suite is not None:
            cli.append(milabench_run(suite, workdir, "noop", f"noop-cli{r}"))
    b = statistics.median(bare)
    result: dict = {"python_c_pass_s": b, "rounds": rounds}
    if runner:
        m = statistics.median(runner)
        result.update({"runner_noop_s": m, "runner_extra_s": m - b})
    if cli:
        m = statistics.median(x["seconds"] for x in cli)
        result.update(
            {
                "milabench_run_noop_s": m,
                "extra_s": m - b,
                "milabench_run_setup_s": statistics.median(x["setup_s"] for x in cli),
                "milabench_run_process_s": statistics.median(x["process_s"] for x in cli),
                "milabench_run_teardown_s": statistics.median(x["teardown_s"] for x in cli),
            }
        )
    elif runner:
        result["extra_s"] = result["runner_extra_s"]
    return result


_EMITTER = """
import sys
from benchkit.channel import DataWriter
n = int(sys.argv[1])
w = DataWriter(batch=8192, flush_interval=3600)
# Records pre-formatted in batches (as TimedIterator's flush does) so that the emitter
# is not the bottleneck: what is measured is the channel and the runner.
template = '{"task": "train", "rate": 1.5, "units": "items/s", "i": %d}'
for start in range(0, n, 4096):
    w.write_encoded([template % i for i in range(start, min(n, start + 4096))])
w.close()
"""


def measure_ingestion(n: int, workdir: Path) -> dict:
    """(c): N lines through DATA_FD into the runner's .data file; all must arrive."""
    if not _runner_available():
        return {"skipped": "milabench.execute.runner not importable"}
    run_dir = workdir / "ingest"
    outcome, seconds = run_under_runner([PY, "-c", _EMITTER, str(n)], run_dir, "ingest")
    assert outcome.return_code == 0, outcome
    seen = 0
    expected = 0
    started = ended = None
    with open(run_dir / "ingest.data", encoding="utf-8") as f:
        for line in f:
            ev = json.loads(line)  # every line of the file must be valid JSON
            data = ev.get("data")
            if ev.get("event") == "start":
                started = data["time"]
            elif ev.get("event") == "end":
                ended = data["time"]
            if ev.get("event") == "data" and isinstance(data, dict) and "i" in data:
                if data["i"] != expected:
                    raise AssertionError(f"line {expected} missing or out of order")
                expected += 1
                seen += 1
    process_s = ended - started  # spawn to exit as the runner saw it
    return {
        "lines": n,
        "received": seen,
        "lost": n - seen,
        "seconds": seconds,
        "process_seconds": process_s,
        "lines_per_s": n / process_s,
        "lines_per_s_with_setup": n / seconds,
    }


def measure_step_cost(n: int) -> dict:
    """(d): TimedIterator per-step cost and DataWriter.write cost, in microseconds."""
    from benchkit.channel import DataWriter
    from benchkit.timing import TimedIterator

    marks: list[float] = []

    class Source:
        """n items; notes the moment it is exhausted (before TimedIterator's flush)."""

        def __iter__(self):
            yield from range(n)
            marks.append(time.perf_counter())

    def bare() -> float:
        t0 = time.perf_counter()
        for _ in Source():
            pass
        return time.perf_counter() - t0

    def timed() -> tuple[float, float]:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            writer = DataWriter(devnull, flush_interval=3600)
            it = TimedIterator(
                Source(),
                batch_size=1,
                stop=0,
                skip=0,
                writer=writer,
                monitor=False,
                max_pending=n + 1,
                # every step measured and written, as the figure has always counted
                measure={"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0},
            )
            t0 = time.perf_counter()
            for _ in it:
                pass
            end = time.perf_counter()  # the epoch-end flush ran inside the last next()
            it.close()
        finally:
            os.close(devnull)
        return marks[-1] - t0, end - marks[-1]

    rounds = 5
    bares = [bare() for _ in range(rounds)]
    timings = [timed() for _ in range(rounds)]
    b = statistics.median(bares) / n
    loop = statistics.median(t[0] for t in timings) / n
    flush = statistics.median(t[1] for t in timings) / n

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        writer = DataWriter(devnull, batch=256, flush_interval=3600)
        record = {"task": "train", "rate": 812.3, "units": "items/s", "time": 1795311510.9}
        t0 = time.perf_counter()
        for _ in range(n):
            writer.write(record)
        writer.flush()
        write = (time.perf_counter() - t0) / n
    finally:
        os.close(devnull)
    loss_us = _loss_cost(min(n, 50_000))
    monitor_ms = _monitor_sample_ms()
    return {
        "steps": n,
        "bare_loop_us": b * 1e6,
        "timed_loop_us": loop * 1e6,
        "step_cost_us": (loop - b) * 1e6,
        "flush_cost_us_per_step": flush * 1e6,
        "datawriter_write_us": write * 1e6,
        "record_loss_us": loss_us,
        "monitor_sample_ms": monitor_ms,
    }


def _loss_cost(n: int) -> float:
    """``record_loss`` of a torch scalar plus its share of the flush, us per step."""
    try:
        import torch
    except ImportError:
        return float("nan")
    from benchkit.channel import DataWriter
    from benchkit.timing import TimedIterator

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        w = torch.ones((), requires_grad=True)
        losses = [w * 2.0 for _ in range(64)]
        it = TimedIterator(
            range(n),
            batch_size=1,
            stop=0,
            skip=0,
            monitor=False,
            max_pending=n + 1,
            writer=DataWriter(devnull, flush_interval=3600),
        )
        record = it.record_loss
        t0 = time.perf_counter()
        for i in range(n):
            record(losses[i & 63])
        it.close()  # converts the n tensors and writes n records
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        os.close(devnull)


def _monitor_sample_ms() -> float:
    """One round of the background monitor (host + process; GPU when present), in ms."""
    from benchkit.channel import DataWriter
    from benchkit.monitors import Monitor

    monitor = Monitor(DataWriter(fd=None), 1.0)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        monitor.sample()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def table(results: dict) -> str:
    rows = []
    a = results.get("overhead")
    if a:
        rows.append(
            (
                "(a) instrumentation overhead",
                f"{a['overhead_cpu_pct']:+.2f} % cpu",
                "<= 1 %",
                f"items per CPU second bare {a['bare_items_per_cpu_s']:.0f} vs "
                f"{a['instrumented_items_per_cpu_s']:.0f}; median of {a['rounds']} "
                f"interleaved rounds via {a['through']}",
            )
        )
        rows.append(
            (
                "(a) same, paired in-process",
                f"{a['paired_overhead_pct']:+.2f} % cpu",
                "<= 1 %",
                f"median over 60 alternating blocks of 50 steps: bare "
                f"{a['paired_bare_items_per_cpu_s']:.0f} vs "
                f"{a['paired_instrumented_items_per_cpu_s']:.0f} items per CPU second",
            )
        )
        rows.append(
            (
                "(a) same, wall clock",
                f"{a['overhead_pct']:+.2f} % wall",
                "<= 1 %",
                f"items/s bare {a['bare_items_per_s']:.0f} vs {a['instrumented_items_per_s']:.0f}"
                " (noisy when the machine is shared: see the load average)",
            )
        )
    d = results.get("step_cost")
    if a and d:
        # Cost that benchkit adds per training step, from the microbenchmarks of (d),
        # against the workload's own step time: robust to the noise of a shared machine.
        step_us = 1e6 * a["batch"] / a["bare_items_per_cpu_s"]
        per_step = d["step_cost_us"] + d["flush_cost_us_per_step"] + d["record_loss_us"]
        monitor = d["monitor_sample_ms"] * 1e3 / 1e6  # one sample per second: fraction
        pct = 100.0 * (per_step / step_us + monitor)
        a["accounted_pct"] = pct
        rows.append(
            (
                "(a) same, accounted",
                f"{pct:.3f} %",
                "<= 1 %",
                f"{per_step:.1f} us per {step_us:.0f} us step (loop+flush+loss) + monitor "
                f"{d['monitor_sample_ms']:.2f} ms/s",
            )
        )
    b = results.get("launch")
    if b and "extra_s" in b:
        if "milabench_run_noop_s" in b:
            detail = (
                f"milabench run no-op {b['milabench_run_noop_s']:.3f} s (setup "
                f"{b['milabench_run_setup_s']:.3f} + process {b['milabench_run_process_s']:.3f}"
                f" + report {b['milabench_run_teardown_s']:.3f}) vs python -c pass "
                f"{b['python_c_pass_s']:.3f} s"
            )
        else:
            detail = f"python -c pass {b['python_c_pass_s']:.3f} s"
        rows.append(("(b) launch latency (extra)", f"{b['extra_s']:.3f} s", "< 0.5 s", detail))
        if "runner_noop_s" in b:
            rows.append(
                (
                    "(b) same, runner only",
                    f"{b['runner_extra_s']:.3f} s",
                    "< 0.5 s",
                    f"milabench.execute.runner no-op {b['runner_noop_s']:.3f} s (metadata "
                    "probe, process, pumps)",
                )
            )
    c = results.get("ingestion")
    if c and "lines_per_s" in c:
        rows.append(
            (
                "(c) data channel ingestion",
                f"{c['lines_per_s']:,.0f} lines/s",
                ">= 100k lines/s",
                f"{c['received']:,}/{c['lines']:,} lines in .data (lost {c['lost']}) in "
                f"{c['process_seconds']:.2f} s of process life ({c['lines_per_s_with_setup']:,.0f} "
                f"lines/s counting runner setup, {c['seconds']:.2f} s)",
            )
        )
    d = results.get("step_cost")
    if d:
        rows.append(
            (
                "(d) TimedIterator per-step cost",
                f"{d['step_cost_us']:.2f} us",
                "<= 5 us",
                f"loop {d['timed_loop_us']:.2f} vs bare {d['bare_loop_us']:.3f} us; flush "
                f"{d['flush_cost_us_per_step']:.2f} us/step after the loop; "
                f"DataWriter.write {d['datawriter_write_us']:.2f} us; record_loss "
                f"{d['record_loss_us']:.2f} us incl. flush",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        f"{'measure':<{widths[0]}}  {'result':>{widths[1]}}  {'target':<{widths[2]}}  details",
    ]
    for r in rows:
        lines.append(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds and paired blocks (smoke run)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds for (a) and (b)")
    parser.add_argument("--steps", type=int, default=None, help="workload steps for (a)")
    parser.add_argument("--lines", type=int, default=None, help="lines for (c)")
    parser.add_argument(
        "--only", default="a,b,c,d", help="comma list of the measures to run (a,b,c,d)"
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 7)
    steps = args.steps or (150 if args.quick else 800)
    lines = args.lines or (50_000 if args.quick else 500_000)
    only = set(args.only.split(","))
    results: dict = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="mb-perf-") as tmp:
        work = Path(tmp)
        if "d" in only:
            results["step_cost"] = measure_step_cost(200_000 if not args.quick else 50_000)
        if "c" in only:
            results["ingestion"] = measure_ingestion(lines, work)
        if "b" in only:
            results["launch"] = measure_launch(rounds, work)
        if "a" in only:
            results["overhead"] = measure_overhead(rounds, steps, work, 10 if args.quick else 60)
    results["loadavg_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(table(results))
        before, after = results["loadavg_before"][0], results["loadavg_after"][0]
        print(f"load average (1 min) {before:.2f} before, {after:.2f} after, {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
