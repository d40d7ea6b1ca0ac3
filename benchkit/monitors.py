"""Background sampling of accelerators, host and process into ``gpudata``/``cpudata``/
``process`` records (docs/run-data.md section 3).

A daemon thread samples every ``interval`` seconds and appends the records to the shared
`DataWriter` (thread-safe); the benchmark's loop never waits for it. Back-ends are chosen
by what the benchmark's environment has:

* accelerators: `benchkit.accelerators.find_accelerators` (the fake GPUs of
  ``MILABENCH_FAKE_GPUS``, NVML, the vendors' command-line tools), none on a machine
  without any; device keys are the indexes as the process sees them;
* host and process: ``psutil`` when importable, else ``/proc`` (Linux) with the standard
  library.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from benchkit.accelerators import Accelerators, ForcedArch, NoAccelerators, find_accelerators
from benchkit.channel import DataWriter


class PsutilSampler:
    """Host memory/load and this process's load/memory through psutil."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.proc = psutil.Process()
        psutil.cpu_percent(None)  # first call only starts the measurement window
        self.proc.cpu_percent(None)

    def cpu(self) -> dict[str, Any]:
        mem = self.psutil.virtual_memory()
        return {
            "memory": [mem.total - mem.available, mem.total],
            "load": self.psutil.cpu_percent(None),
        }

    def process(self) -> dict[str, Any]:
        with self.proc.oneshot():
            rss = self.proc.memory_info().rss
            load = self.proc.cpu_percent(None)
        return {
            "pid": self.proc.pid,
            "load": load,
            "memory": [rss, self.psutil.virtual_memory().total],
        }


class ProcSampler:
    """The same figures from ``/proc`` when psutil is not installed (Linux)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        self._cpu_prev = self._cpu_times()
        self._proc_prev = (self._proc_ticks(), time.monotonic())

    @staticmethod
    def _meminfo() -> tuple[int, int]:
        values: dict[str, int] = {}
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                values[name] = int(rest.split()[0]) * 1024
        total = values.get("MemTotal", 0)
        available = values.get("MemAvailable", values.get("MemFree", 0))
        return total - available, total

    @staticmethod
    def _cpu_times() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    def _proc_ticks(self) -> int:
        with open(f"/proc/{self.pid}/stat") as f:
            # The command name may contain spaces: fields start after the last ")".
            rest = f.read().rpartition(")")[2].split()
        return int(rest[11]) + int(rest[12])  # utime + stime

    def cpu(self) -> dict[str, Any]:
        total, idle = self._cpu_times()
        prev_total, prev_idle = self._cpu_prev
        self._cpu_prev = (total, idle)
        busy = (total - prev_total) - (idle - prev_idle)
        load = 100.0 * busy / (total - prev_total) if total > prev_total else 0.0
        return {"memory": list(self._meminfo()), "load": round(load, 2)}

    def process(self) -> dict[str, Any]:
        ticks, now = self._proc_ticks(), time.monotonic()
        prev_ticks, prev_now = self._proc_prev
        self._proc_prev = (ticks, now)
        elapsed = now - prev_now
        load = 100.0 * (ticks - prev_ticks) / self.ticks / elapsed if elapsed > 0 else 0.0
        with open(f"/proc/{self.pid}/statm") as f:
            rss = int(f.read().split()[1]) * self.page
        return {"pid": self.pid, "load": round(load, 2), "memory": [rss, self._meminfo()[1]]}


def gpu_backend() -> Accelerators | None:
    """The accelerators this process can sample, or None on a machine without any."""
    found = find_accelerators()
    inner = found.inner if isinstance(found, ForcedArch) else found
    return None if isinstance(inner, NoAccelerators) else found


def host_sampler() -> PsutilSampler | ProcSampler | None:
    try:
        return PsutilSampler()
    except ImportError:
        pass
    try:
        return ProcSampler()
    except (OSError, ValueError, IndexError):
        return None


class Monitor:
    """Daemon thread writing monitor records every ``interval`` seconds.

    ``sample()`` gives one round of records (also used by tests and by the first tick);
    ``start()``/``stop()`` run it in the background. Failures of a back-end while running
    disable that back-end rather than kill the thread: a monitor must never end a run.
    """

    def __init__(
        self,
        writer: DataWriter,
        interval: float = 1.0,
        *,
        task: str = "main",
        gpu: bool = True,
        host: bool = True,
    ) -> None:
        self.writer = writer
        self.interval = max(0.01, float(interval))
        self.task = task
        self._gpu = gpu_backend() if gpu else None
        self._host = host_sampler() if host else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def backends(self) -> dict[str, str | None]:
        return {
            "gpu": type(self._gpu).__name__ if self._gpu else None,
            "host": type(self._host).__name__ if self._host else None,
        }

    def sample(self) -> list[dict[str, Any]]:
        now = time.time()
        records: list[dict[str, Any]] = []
        if self._gpu is not None:
            try:
                records.append({"task": self.task, "time": now, "gpudata": self._gpu.sample()})
            except Exception as err:
                self._gpu = None
                self._failed("accelerator", err)
        if self._host is not None:
            try:
                records.append({"task": self.task, "time": now, "cpudata": self._host.cpu()})
                records.append({"task": self.task, "time": now, "process": self._host.process()})
            except Exception as err:
                self._host = None
                self._failed("host", err)
        return records

    def _failed(self, what: str, err: BaseException) -> None:
        """Record, once, that a back-end stopped: the run goes on (the measurement does not
        depend on it) and the report shows the warning, so missing usage data is explained
        rather than silently absent."""
        message = f"{what} monitor stopped: {type(err).__name__}: {err}"
        try:
            self.writer.event("message", {"message": message, "warning": "monitor"})
        except Exception:
            pass  # the data channel itself is gone: nothing left to tell

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for record in self.sample():
                self.writer.write(record)

    def start(self) -> Monitor:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="benchkit-monitor", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (waits for the current round) and flush what was written."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        if self._gpu is not None:
            self._gpu.close()
        self.writer.flush()

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
