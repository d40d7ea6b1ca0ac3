"""Cost of sampling a benchmark's process-tree memory (`milabench.execute.memory`).

    python scripts/perf_memory_sampler.py              # table
    python scripts/perf_memory_sampler.py --seconds 3  # shorter idle runs (smoke)

(1) one `TreeSampler.sample` of a tree of N idle children (the procfs walk and one
    ``statm`` read per process), next to ``psutil.Process.children(recursive=True)``
    alone, which reads every process of the machine;
(2) the runner's own CPU time (this process, every thread) while it runs an idle child
    for ``--seconds`` through `run_specs`, with sampling (1 s) and without (``--rounds``
    interleaved rounds, medians), then the worst lag of the event loop in one more run
    of each (a 10 ms ticker beside the runner; its own wake-ups are not in the CPU time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from milabench.execute import memory  # noqa: E402


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def sample_cost(n_children: int, repeats: int = 200) -> tuple[float, float, int]:
    """Median microseconds of one tree sample and of psutil's recursive children()."""
    code = (
        "import subprocess, sys, time\n"
        f"kids = [subprocess.Popen(['sleep', '60']) for _ in range({n_children})]\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "ready"
        sampler = memory.TreeSampler(leader.pid)
        ours, theirs = [], []
        proc = psutil.Process(leader.pid)
        for _ in range(repeats):
            t = time.perf_counter()
            sample = sampler.sample()
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            proc.children(recursive=True)
            theirs.append(time.perf_counter() - t)
        return statistics.median(ours) * 1e6, statistics.median(theirs) * 1e6, sample.processes
    finally:
        for pid in memory.tree_pids(leader.pid)[::-1]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        leader.wait()


async def _idle_run(
    seconds: float, interval: float | None, tick: bool = False
) -> tuple[float, float, int]:
    from milabench.execute.runner import run_specs
    from milabench.plan.spec import ProcessSpec

    records = 0

    class Count:
        def on_event(self, tag, event):
            nonlocal records
            data = event.get("data")
            records += isinstance(data, dict) and "process_tree" in data

        def close(self):
            pass

    lag = 0.0
    done = False

    async def ticker():
        nonlocal lag
        loop = asyncio.get_running_loop()
        while not done:
            t = loop.time()
            await asyncio.sleep(0.01)
            lag = max(lag, loop.time() - t - 0.01)

    spec = ProcessSpec(tag=["idle"], argv=["sleep", str(seconds)], entry={"name": "idle"})
    ticking = asyncio.ensure_future(ticker()) if tick else None
    cpu0 = _cpu()
    await run_specs([spec], [Count()], memory_interval=interval)
    cpu = _cpu() - cpu0
    done = True
    if ticking is not None:
        await ticking
    return cpu, lag, records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {len(psutil.pids())} pids"
    )
    for n in (0, 8, 32):
        ours, theirs, count = sample_cost(n)
        print(
            f"one sample, {n:>2} children ({count:>2} processes): {ours:8.1f} us"
            f"   (psutil children(recursive=True) alone: {theirs:8.1f} us)"
        )
    asyncio.run(_idle_run(0.1, 1.0))  # warm imports and the metadata probe
    modes = (("without sampling", None), ("with sampling (1 s)", 1.0))
    cpus: dict[str, list[float]] = {label: [] for label, _ in modes}
    for r in range(args.rounds):  # interleaved, alternating which goes first
        for label, interval in modes if r % 2 == 0 else modes[::-1]:
            cpus[label].append(asyncio.run(_idle_run(args.seconds, interval))[0])
    for label, interval in modes:
        cpu = statistics.median(cpus[label])
        _, lag, records = asyncio.run(_idle_run(args.seconds, interval, tick=True))
        print(
            f"runner, {args.seconds:g} s idle child, {label:<20}: CPU {cpu * 1e3:6.1f} ms"
            f" ({cpu / args.seconds * 100:.2f} % of one core; median of {args.rounds}),"
            f" worst loop lag {lag * 1e3:.1f} ms, {records} process_tree records"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
