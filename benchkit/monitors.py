"""Background sampling of accelerators, host and process into ``gpudata``/``cpudata``/
``process`` records (spec run-data.md section 3).

A daemon thread samples every ``interval`` seconds and appends the records to the shared
`DataWriter` (thread-safe); the benchmark's loop never waits for it. Back-ends are chosen
by what the benchmark's environment has:

* accelerators: NVML through ``pynvml`` when importable and a driver answers; the fake
  back-end of the contract when ``MILABENCH_FAKE_GPUS=<arch>:<count>[:<MiB>]`` is set (the
  only stand-in for GPUs that cannot exist on a CPU machine); otherwise none;
* host and process: ``psutil`` when importable, else ``/proc`` (Linux) with the standard
  library.

Device keys are the indexes **as the process sees them**: with
``CUDA_VISIBLE_DEVICES=2,3`` physical GPU 3 is reported as ``"1"``, which is what the
benchmark's ``cuda:1`` means.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from benchkit.channel import DataWriter

_MIB = 1024 * 1024


def visible_devices(total: int, environ: dict[str, str] | None = None) -> list[str]:
    """Physical ids (indexes or UUIDs) of the devices this process sees, in its order."""
    env = os.environ if environ is None else environ
    for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        value = env.get(name)
        if value is not None:
            ids = [x.strip() for x in value.split(",") if x.strip()]
            # The driver stops at the first invalid entry (e.g. "-1" hides everything).
            out = []
            for x in ids:
                if x.isdigit() and int(x) >= total:
                    break
                if x.startswith("-"):
                    break
                out.append(x)
            return out
    return [str(i) for i in range(total)]


# NVML's clock-event ("throttle") reasons, by the suffix of nvidia-ml-py's constant
# (``nvmlClocksEventReason<Suffix>``, older releases ``nvmlClocksThrottleReason<Suffix>``)
# -> the name written in ``gpudata`` records (docs/doctor.md). "Why is this GPU slower
# than its peers": thermal and power slowdowns are the usual answers.
CLOCK_EVENT_REASONS = {
    "GpuIdle": "gpu_idle",
    "ApplicationsClocksSetting": "applications_clocks_setting",
    "SwPowerCap": "sw_power_cap",
    "HwSlowdown": "hw_slowdown",
    "SyncBoost": "sync_boost",
    "SwThermalSlowdown": "sw_thermal_slowdown",
    "HwThermalSlowdown": "hw_thermal_slowdown",
    "HwPowerBrakeSlowdown": "hw_power_brake_slowdown",
    "DisplayClockSetting": "display_clock_setting",
}


def clock_event_bits(nvml: Any) -> list[tuple[int, str]]:
    """(bit, name) of every clock-event reason the installed pynvml defines."""
    out = []
    for suffix, name in CLOCK_EVENT_REASONS.items():
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            bit = getattr(nvml, prefix + suffix, None)
            if isinstance(bit, int) and bit:
                out.append((bit, name))
                break
    return out


class NVMLSampler:
    """GPU samples through NVML (``pynvml``, from the nvidia-ml-py package).

    Besides memory, load, temperature, power and energy, each device's sample carries
    what explains a slow GPU: ``clock_events`` (the names of the current clock-event
    reasons, `CLOCK_EVENT_REASONS`), ``clocks`` (``{"sm": MHz, "mem": MHz}``) and
    ``xid`` (the XID error codes NVML reported since the previous sample, when the
    driver lets this process register for them).
    """

    def __init__(self) -> None:
        import pynvml  # raises ImportError when absent

        pynvml.nvmlInit()  # raises when no driver answers
        self.nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        self.handles: dict[str, Any] = {}
        for visible, physical in enumerate(visible_devices(count)):
            if physical.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(physical))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(physical)
            self.handles[str(visible)] = handle
        self.reason_bits = clock_event_bits(pynvml)
        self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self._events, self._uuids = self._register_xid()

    def _register_xid(self) -> tuple[Any, dict[str, str]]:
        """An NVML event set for XID errors of the visible devices (None where the
        driver refuses: MIG slices, no permission, an old driver)."""
        nvml = self.nvml
        xid = getattr(nvml, "nvmlEventTypeXidCriticalError", None)
        if xid is None:
            return None, {}
        try:
            events = nvml.nvmlEventSetCreate()
        except Exception:
            return None, {}
        uuids: dict[str, str] = {}
        for key, handle in self.handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, xid, events)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                uuids[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = key
            except Exception:
                continue
        if not uuids:
            try:
                nvml.nvmlEventSetFree(events)
            except Exception:
                pass
            return None, {}
        return events, uuids

    def _pending_xids(self) -> dict[str, list[int]]:
        """XID codes waiting in the event set, per device key (never blocks)."""
        out: dict[str, list[int]] = {}
        if self._events is None:
            return out
        nvml = self.nvml
        for _ in range(64):  # a storm of events must not hold the sampler
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing pending
                break
            try:
                uuid = nvml.nvmlDeviceGetUUID(data.device)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            except Exception:
                uuid = ""
            key = self._uuids.get(uuid, next(iter(self._uuids.values())))
            out.setdefault(key, []).append(int(data.eventData))
        return out

    def sample(self) -> dict[str, dict[str, Any]]:
        nvml = self.nvml
        out: dict[str, dict[str, Any]] = {}
        for key, handle in self.handles.items():
            entry: dict[str, Any] = {}
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                entry["memory"] = [mem.used / _MIB, mem.total / _MIB]
            except nvml.NVMLError:
                pass
            try:
                entry["load"] = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            except nvml.NVMLError:
                pass
            try:
                entry["temperature"] = nvml.nvmlDeviceGetTemperature(
                    handle, nvml.NVML_TEMPERATURE_GPU
                )
            except nvml.NVMLError:
                pass
            try:
                entry["power"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            except nvml.NVMLError:
                pass
            try:  # cumulative since the driver loaded (Volta and later), mJ -> J
                entry["energy"] = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
            except (nvml.NVMLError, AttributeError):
                pass
            if self._reasons is not None:
                try:
                    mask = int(self._reasons(handle))
                    entry["clock_events"] = [n for bit, n in self.reason_bits if mask & bit]
                except nvml.NVMLError:
                    pass
            clocks = {}
            for name, const in (("sm", "NVML_CLOCK_SM"), ("mem", "NVML_CLOCK_MEM")):
                try:
                    clocks[name] = nvml.nvmlDeviceGetClockInfo(handle, getattr(nvml, const))
                except (nvml.NVMLError, AttributeError):
                    pass
            if clocks:
                entry["clocks"] = clocks
            out[key] = entry
        for key, codes in self._pending_xids().items():
            if key in out:
                out[key]["xid"] = codes
        return out

    def close(self) -> None:
        if self._events is not None:
            try:
                self.nvml.nvmlEventSetFree(self._events)
            except Exception:
                pass
            self._events = None
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


class FakeGPUSampler:
    """The contract's fake accelerators (``MILABENCH_FAKE_GPUS=<arch>:<count>[:<MiB>]``).

    Values are plausible and vary over time so that dashboards and reports see motion;
    they are clearly fake (no real device exists on a CPU-only machine). A fourth field
    ``lost@N`` makes the N-th sample fail the way NVML does when a GPU falls off the bus
    (``NVML_ERROR_GPU_IS_LOST``), so the monitor's failure path can be tested for real.
    """

    def __init__(self, spec: str) -> None:
        parts = spec.split(":")
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(
                f"MILABENCH_FAKE_GPUS must be <arch>:<count>[:<MiB>[:lost@N]], not {spec!r}"
            )
        self.arch = parts[0]
        count = int(parts[1])
        self.total = float(parts[2]) if len(parts) > 2 and parts[2] else 81920.0
        lost = parts[3] if len(parts) > 3 else ""
        self.lost_at = int(lost[5:]) if lost.startswith("lost@") and lost[5:].isdigit() else 0
        self.samples = 0
        self.keys = [str(i) for i, _ in enumerate(visible_devices(count))]
        self._t0 = time.monotonic()
        # A cumulative energy counter like NVML's (joules), integrating the fake power.
        self._energy = 1000.0
        self._last: tuple[float, float] | None = None  # (time, power) of the last sample

    def sample(self) -> dict[str, dict[str, Any]]:
        self.samples += 1
        if self.lost_at and self.samples >= self.lost_at:
            raise RuntimeError(f"GPU is lost (fake device, lost@{self.lost_at})")
        now = time.monotonic()
        phase = (now - self._t0) % 10.0 / 10.0
        power = round(100.0 + 200.0 * phase, 1)
        if self._last is not None:
            self._energy += self._last[1] * (now - self._last[0])
        self._last = (now, power)
        return {
            key: {
                "memory": [round(self.total * (0.3 + 0.4 * phase), 1), self.total],
                "load": round(0.5 + 0.45 * phase, 3),
                "temperature": 40 + int(30 * phase),
                "power": power,
                "energy": round(self._energy, 3),
            }
            for key in self.keys
        }

    def close(self) -> None:
        pass


def gpu_sampler() -> Any:
    """The accelerator back-end available here (fake, NVML, rocm-smi, xpu-smi), or None."""
    fake = os.environ.get("MILABENCH_FAKE_GPUS")
    if fake:
        return FakeGPUSampler(fake)
    try:
        return NVMLSampler()
    except Exception:  # no pynvml, no driver, no device
        pass
    from benchkit.smi import smi_sampler

    return smi_sampler()


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
        self._gpu = gpu_sampler() if gpu else None
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
