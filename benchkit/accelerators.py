"""Accelerators: which back-end answers on this machine, its devices, and their samples.

The one module that reads GPUs, for every caller: milabench's detection (the system's
arch, count and capacity, the `meta` record, the driver checks), benchkit's in-process
monitor (`benchkit.monitors.Monitor`) and the machine-facts probe sent to other nodes
(`milabench.machine.facts`). Standard library only (benchkit's rule, and the probe
runs with whatever Python a node has): vendor bindings are imported when asked for.

`find_accelerators()` picks a back-end, in this order:

1. ``MILABENCH_FAKE_GPUS=<arch>:<count>[:<MiB>[:lost@N]]`` (`fake_gpus`, the only reader
   of that variable) -> `FakeAccelerators`. NVIDIA GPUs cannot exist on a CPU-only
   machine, so this is the one sanctioned stand-in: same interface as the real back-ends,
   plausible moving numbers, products named ``Fake <arch> device``; ``lost@N`` makes the
   N-th sample fail the way NVML does when a GPU falls off the bus.
2. NVML through ``pynvml`` (nvidia-ml-py), when importable and a driver answers.
3. The vendors' command-line tools on the PATH: ``nvidia-smi`` (a node whose Python has
   no pynvml), ``rocm-smi``, ``xpu-smi``, ``hl-smi``; ``MILABENCH_SMI=0`` turns them off
   (a tool that hangs on a broken driver). Their outputs are parsed by `benchkit.smi`.
4. `NoAccelerators` (arch ``cpu``).

``MILABENCH_GPU_ARCH`` forces the reported arch whatever the back-end. A variable that
cannot be read raises `AcceleratorSettingError` naming it and its accepted form.

Every back-end answers `.arch`, `.devices()` (``[{"index", "device", "product",
"memory": {"used", "total"}}]``, MiB), `.sample()` (the ``gpudata`` mapping of a run's
data: ``{"0": {"memory": [used, total], "load": 0..1, "temperature": C, "power": W,
"energy": J}}``, energy a cumulative counter where the back-end has one, NVML adding
``clock_events``, ``clocks`` and ``xid``), `.system_info()` and `.close()`. Device keys
are the indexes **as the process sees them**: with ``CUDA_VISIBLE_DEVICES=2,3`` physical
GPU 3 is ``"1"``, which is what the benchmark's ``cuda:1`` means.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from benchkit.smi import (
    ROCM_ARGS,
    XPU_METRICS,
    parse_query,
    parse_rocm,
    parse_rocm_driver,
    parse_xpu_discovery,
    parse_xpu_dump,
    run_tool,
)

ARCHES = ("cuda", "rocm", "xpu", "hpu", "cpu")
FAKE_GPUS_FORM = "<arch>:<count>[:<MiB>[:lost@N]]"
DEFAULT_FAKE_MIB = 81920
_MIB = 1024 * 1024


class AcceleratorSettingError(ValueError):
    """An environment variable about accelerators that cannot be read; the message names
    the variable, its value and the accepted form."""


class FakeGPUSpec(NamedTuple):
    """``MILABENCH_FAKE_GPUS`` read: ``count`` devices of ``arch`` with ``memory_mib`` each,
    the ``lost_at``-th sample failing (0: never)."""

    arch: str
    count: int
    memory_mib: int = DEFAULT_FAKE_MIB
    lost_at: int = 0


def parse_fake_gpus(text: str) -> FakeGPUSpec:
    """``cuda:8``, ``cuda:8:81920``, ``cuda:1:1000:lost@3`` -> `FakeGPUSpec`.

    Raises `AcceleratorSettingError` saying what is wrong with which part."""
    parts = text.strip().split(":")
    problem = None
    if not 2 <= len(parts) <= 4:
        problem = "wrong number of fields"
    elif parts[0] not in ARCHES:
        problem = f"unknown arch {parts[0]!r}"
    elif not parts[1].isdigit():
        problem = f"count {parts[1]!r} is not a whole number"
    elif len(parts) >= 3 and parts[2] and not (parts[2].isdigit() and int(parts[2]) > 0):
        problem = f"memory {parts[2]!r} is not a positive number of MiB"
    elif len(parts) == 4 and not (parts[3].startswith("lost@") and parts[3][5:].isdigit()):
        problem = f"{parts[3]!r} is not lost@N"
    if problem:
        raise AcceleratorSettingError(
            f"MILABENCH_FAKE_GPUS={text!r}: {problem}; expected {FAKE_GPUS_FORM} "
            f"with arch one of {', '.join(ARCHES)}"
        )
    mib = int(parts[2]) if len(parts) >= 3 and parts[2] else DEFAULT_FAKE_MIB
    lost = int(parts[3][5:]) if len(parts) == 4 else 0
    return FakeGPUSpec(parts[0], int(parts[1]), mib, lost)


def fake_gpus_setting(spec: FakeGPUSpec) -> dict[str, str]:
    """The variable, as `fake_gpus` reads it, that makes a process started with it see
    the devices of ``spec`` (for a launcher's child environment)."""
    lost = f":lost@{spec.lost_at}" if spec.lost_at else ""
    return {"MILABENCH_FAKE_GPUS": f"{spec.arch}:{spec.count}:{spec.memory_mib}{lost}"}


def fake_gpus(environ: Mapping[str, str] | None = None) -> FakeGPUSpec | None:
    """The fake GPUs this process is told to see (None when the variable is unset or
    empty). The only place that reads ``MILABENCH_FAKE_GPUS``."""
    text = (os.environ if environ is None else environ).get("MILABENCH_FAKE_GPUS")
    return parse_fake_gpus(text) if text else None


def forced_arch(environ: Mapping[str, str] | None = None) -> str | None:
    """``MILABENCH_GPU_ARCH`` (None when unset), checked against `ARCHES`."""
    env = os.environ if environ is None else environ
    forced = env.get("MILABENCH_GPU_ARCH") or None
    if forced is not None and forced not in ARCHES:
        raise AcceleratorSettingError(
            f"MILABENCH_GPU_ARCH={forced!r}: expected one of {', '.join(ARCHES)}"
        )
    return forced


def visible_devices(total: int, environ: Mapping[str, str] | None = None) -> list[str]:
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


class Accelerators:
    """Base back-end: no devices."""

    arch: str = "cpu"
    backend: str = "none"

    def devices(self) -> list[dict[str, Any]]:
        return []

    def sample(self) -> dict[str, dict[str, Any]]:
        return {}

    def system_info(self) -> dict[str, Any]:
        return {"arch": self.arch, "backend": self.backend, "count": len(self.devices())}

    def close(self) -> None:
        """Release what the back-end holds (NVML's handle, event sets)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} arch={self.arch} devices={len(self.devices())}>"


class NoAccelerators(Accelerators):
    """A machine without accelerators (or whose accelerators no tool can see)."""


class FakeAccelerators(Accelerators):
    """Stand-in GPUs for tests and dry runs on machines without them.

    Load follows a slow sine wave per device and memory use follows the load, so
    samplers, dashboards and reports see values that move like a busy GPU's; energy is a
    cumulative counter integrating the fake power, like NVML's.
    """

    backend = "fake"

    def __init__(
        self, arch: str, count: int, memory_mib: int = DEFAULT_FAKE_MIB, lost_at: int = 0
    ) -> None:
        self.arch = arch
        self.memory_mib = memory_mib
        self.lost_at = lost_at
        self.keys = [str(i) for i, _ in enumerate(visible_devices(count))]
        self.count = len(self.keys)
        self.samples = 0
        self._start = time.monotonic()
        self._energy = [1000.0] * self.count
        self._last: list[tuple[float, float] | None] = [None] * self.count

    @classmethod
    def from_spec(cls, spec: FakeGPUSpec) -> FakeAccelerators:
        return cls(spec.arch, spec.count, spec.memory_mib, spec.lost_at)

    def _load(self, index: int) -> float:
        t = time.monotonic() - self._start
        return round(0.75 + 0.2 * math.sin(t / 3.0 + index), 4)

    def _used(self, index: int) -> int:
        return int(self.memory_mib * (0.1 + 0.6 * self._load(index)))

    def devices(self) -> list[dict[str, Any]]:
        return [
            {
                "index": i,
                "device": i,
                "product": f"Fake {self.arch} device",
                "memory": {"used": self._used(i), "total": self.memory_mib},
            }
            for i in range(self.count)
        ]

    def sample(self) -> dict[str, dict[str, Any]]:
        self.samples += 1
        if self.lost_at and self.samples >= self.lost_at:
            raise RuntimeError(f"GPU is lost (fake device, lost@{self.lost_at})")
        out = {}
        now = time.monotonic()
        for i, key in enumerate(self.keys):
            load = self._load(i)
            power = round(80 + 300 * load, 1)
            last = self._last[i]
            if last is not None:
                self._energy[i] += last[1] * (now - last[0])
            self._last[i] = (now, power)
            out[key] = {
                "memory": [self._used(i), self.memory_mib],
                "load": load,
                "temperature": round(40 + 35 * load, 1),
                "power": power,
                "energy": round(self._energy[i], 3),
            }
        return out

    def system_info(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "backend": self.backend,
            "count": self.count,
            "driver_version": "fake",
            "product": f"Fake {self.arch} device",
        }


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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NVMLAccelerators(Accelerators):
    """NVIDIA GPUs through NVML (``pynvml``, from the nvidia-ml-py package).

    Only the devices this process may use (an inherited ``CUDA_VISIBLE_DEVICES`` with
    indexes, GPU or MIG UUIDs), in that order. Besides memory, load, temperature, power
    and energy, each sample carries what explains a slow GPU: ``clock_events`` (the
    current clock-event reasons, `CLOCK_EVENT_REASONS`), ``clocks`` (``{"sm": MHz,
    "mem": MHz}``) and ``xid`` (the XID error codes NVML reported since the previous
    sample, when the driver lets this process register for them; registered on the
    first sample, so that detection alone does not).
    """

    arch = "cuda"
    backend = "nvml"

    def __init__(self, pynvml: Any) -> None:
        self.nvml = pynvml
        self.handles: dict[str, Any] = {}
        for visible, physical in enumerate(visible_devices(pynvml.nvmlDeviceGetCount())):
            if physical.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(physical))
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(physical)
            self.handles[str(visible)] = handle
        self.count = len(self.handles)
        self.reason_bits = clock_event_bits(pynvml)
        self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self._events: Any = None
        self._uuids: dict[str, str] = {}
        self._registered = False

    @classmethod
    def probe(cls) -> NVMLAccelerators | None:
        """The back-end when pynvml imports, a driver answers and a device is visible."""
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            found = cls(pynvml)
        except Exception:  # noqa: BLE001 - any NVML failure means "no usable driver"
            return None
        if found.count == 0:
            found.close()
            return None
        return found

    def _memory(self, handle: Any) -> tuple[float, float]:
        info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
        return info.used / _MIB, info.total / _MIB

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for i, handle in enumerate(self.handles.values()):
            used, total = self._memory(handle)
            out.append(
                {
                    "index": i,
                    "device": i,
                    "product": _text(self.nvml.nvmlDeviceGetName(handle)),
                    "memory": {"used": int(used), "total": int(total)},
                }
            )
        return out

    def _register_xid(self) -> None:
        """An NVML event set for XID errors of the visible devices (none where the
        driver refuses: MIG slices, no permission, an old driver)."""
        self._registered = True
        nvml = self.nvml
        xid = getattr(nvml, "nvmlEventTypeXidCriticalError", None)
        if xid is None:
            return
        try:
            events = nvml.nvmlEventSetCreate()
        except Exception:  # noqa: BLE001
            return
        for key, handle in self.handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, xid, events)
                self._uuids[_text(nvml.nvmlDeviceGetUUID(handle))] = key
            except Exception:  # noqa: BLE001
                continue
        if self._uuids:
            self._events = events
            return
        try:
            nvml.nvmlEventSetFree(events)
        except Exception:  # noqa: BLE001
            pass

    def _pending_xids(self) -> dict[str, list[int]]:
        """XID codes waiting in the event set, per device key (never blocks)."""
        out: dict[str, list[int]] = {}
        if self._events is None:
            return out
        nvml = self.nvml
        for _ in range(64):  # a storm of events must not hold the sampler
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # noqa: BLE001 - NVML_ERROR_TIMEOUT: nothing pending
                break
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
            except Exception:  # noqa: BLE001
                uuid = ""
            key = self._uuids.get(uuid, next(iter(self._uuids.values())))
            out.setdefault(key, []).append(int(data.eventData))
        return out

    def sample(self) -> dict[str, dict[str, Any]]:
        if not self._registered:
            self._register_xid()
        nvml = self.nvml
        out: dict[str, dict[str, Any]] = {}
        for key, handle in self.handles.items():
            entry: dict[str, Any] = {}
            try:
                entry["memory"] = list(self._memory(handle))
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

    def system_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"arch": "cuda", "backend": self.backend, "count": self.count}
        for key, fn in (
            ("driver_version", "nvmlSystemGetDriverVersion"),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),
        ):
            try:
                info[key] = _text(getattr(self.nvml, fn)())
            except Exception:  # noqa: BLE001 - optional facts
                info[key] = None
        return info

    def close(self) -> None:
        if self._events is not None:
            try:
                self.nvml.nvmlEventSetFree(self._events)
            except Exception:  # noqa: BLE001
                pass
            self._events = None
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _tools_allowed() -> bool:
    return os.environ.get("MILABENCH_SMI") != "0"


class QueryToolAccelerators(Accelerators):
    """NVIDIA (``nvidia-smi --query-gpu=<fields>``) and Gaudi (``hl-smi -Q <fields>``)
    through their CSV queries (``--format=csv,noheader,nounits``), one call per sample.

    nvidia-smi lists every device of the machine: the visible ones are picked by index
    or UUID (`visible_devices`). hl-smi reports memory only.
    """

    TOOLS = {"cuda": "nvidia-smi", "hpu": "hl-smi"}
    DEVICE_FIELDS = {
        "cuda": ("index", "uuid", "name", "memory.used", "memory.total"),
        "hpu": ("index", "name", "memory.used", "memory.total"),
    }
    # (query field, sample key, divisor)
    SAMPLE_FIELDS = {
        "cuda": (
            ("utilization.gpu", "load", 100.0),
            ("temperature.gpu", "temperature", 1.0),
            ("power.draw", "power", 1.0),
        ),
        "hpu": (),
    }

    def __init__(self, arch: str, tool: str) -> None:
        self.arch = arch
        self.tool = tool
        self.backend = os.path.basename(tool)

    @classmethod
    def probe(cls, arch: str) -> QueryToolAccelerators | None:
        path = shutil.which(cls.TOOLS[arch])
        if not path:
            return None
        found = cls(arch, path)
        return found if found.devices() else None

    def _query(self, fields: tuple[str, ...]) -> list[dict[str, str]]:
        names = ",".join(fields)
        query = [f"--query-gpu={names}"] if self.arch == "cuda" else ["-Q", names]
        return parse_query(run_tool([self.tool, *query, "--format=csv,noheader,nounits"]), fields)

    def _visible(self, rows: list[dict[str, str]]) -> list[dict[str, str]]:
        if self.arch != "cuda":
            return rows
        by_id = {}
        for row in rows:
            by_id[row.get("index", "")] = row
            by_id[row.get("uuid", "")] = row
        found = []
        for physical in visible_devices(len(rows)):
            if physical not in by_id:
                break  # a MIG slice or an unknown id: the driver stops there too
            found.append(by_id[physical])
        return found

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for i, row in enumerate(self._visible(self._query(self.DEVICE_FIELDS[self.arch]))):
            try:
                used, total = int(float(row["memory.used"])), int(float(row["memory.total"]))
            except (KeyError, ValueError):
                continue
            out.append(
                {
                    "index": i,
                    "device": i,
                    "product": row.get("name") or f"{self.arch} device",
                    "memory": {"used": used, "total": total},
                }
            )
        return out

    def sample(self) -> dict[str, dict[str, Any]]:
        extra = self.SAMPLE_FIELDS[self.arch]
        fields = self.DEVICE_FIELDS[self.arch] + tuple(f for f, _, _ in extra)
        out = {}
        for i, row in enumerate(self._visible(self._query(fields))):
            sample: dict[str, Any] = {}
            try:
                sample["memory"] = [float(row["memory.used"]), float(row["memory.total"])]
            except (KeyError, ValueError):
                pass
            for field, key, divisor in extra:
                try:
                    sample[key] = float(row[field]) / divisor
                except (KeyError, ValueError):
                    pass  # "[N/A]", "[Not Supported]"
            out[str(i)] = sample
        return out

    def system_info(self) -> dict[str, Any]:
        info = super().system_info()
        if self.arch == "cuda":
            rows = self._query(("driver_version",))
            info["driver_version"] = rows[0].get("driver_version") if rows else None
        return info


class ROCmAccelerators(Accelerators):
    """AMD GPUs through ``rocm-smi`` (keys: the indexes as this process sees them)."""

    arch = "rocm"

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.backend = os.path.basename(tool)
        cards = self._cards()
        self.keys = {physical: str(i) for i, physical in enumerate(visible_devices(len(cards)))}

    @classmethod
    def probe(cls) -> ROCmAccelerators | None:
        path = shutil.which("rocm-smi")
        if not path:
            return None
        found = cls(path)
        return found if found.keys else None

    def _cards(self) -> dict[str, dict[str, Any]]:
        return parse_rocm(run_tool([self.tool, *ROCM_ARGS]))

    def _visible(self) -> list[tuple[str, dict[str, Any]]]:
        cards = self._cards()
        found = [(self.keys[p], s) for p, s in cards.items() if p in self.keys]
        return sorted(found, key=lambda kv: int(kv[0]))

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for key, sample in self._visible():
            used, total = sample.get("memory") or (0.0, 0.0)
            out.append(
                {
                    "index": int(key),
                    "device": int(key),
                    "product": sample.get("product") or "AMD GPU",
                    "memory": {"used": int(used), "total": int(total)},
                }
            )
        return out

    def sample(self) -> dict[str, dict[str, Any]]:
        return {
            key: {k: v for k, v in sample.items() if k != "product"}
            for key, sample in self._visible()
        }

    def system_info(self) -> dict[str, Any]:
        info = super().system_info()
        info["driver_version"] = parse_rocm_driver(
            run_tool([self.tool, "--showdriverversion", "--json"])
        )
        return info


class XPUAccelerators(Accelerators):
    """Intel GPUs through ``xpu-smi`` (discovery once, one ``dump`` call per device and
    sample: some releases take one device id only)."""

    arch = "xpu"

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.backend = os.path.basename(tool)
        self.found = parse_xpu_discovery(run_tool([self.tool, "discovery", "--json"]))

    @classmethod
    def probe(cls) -> XPUAccelerators | None:
        path = shutil.which("xpu-smi")
        if not path:
            return None
        found = cls(path)
        return found if found.found else None

    def _ordered(self) -> list[str]:
        return sorted(self.found, key=lambda k: int(k) if k.isdigit() else 0)

    def devices(self) -> list[dict[str, Any]]:
        return [
            {
                "index": i,
                "device": int(key) if key.isdigit() else key,
                "product": self.found[key]["product"],
                "memory": {"used": 0, "total": int(self.found[key].get("total_mib") or 0)},
            }
            for i, key in enumerate(self._ordered())
        ]

    def sample(self) -> dict[str, dict[str, Any]]:
        out = {}
        for key in self._ordered():
            argv = [self.tool, "dump", "-d", key, "-m", XPU_METRICS, "-n", "1"]
            for device, sample in parse_xpu_dump(run_tool(argv)).items():
                used = sample.pop("memory_used", None)
                total = (self.found.get(device) or {}).get("total_mib")
                if used is not None and total:
                    sample["memory"] = [used, total]
                out[device] = sample
        return out


class ForcedArch(Accelerators):
    """Wraps a back-end so that `.arch` reports ``MILABENCH_GPU_ARCH``."""

    def __init__(self, inner: Accelerators, arch: str) -> None:
        self.inner = inner
        self.arch = arch
        self.backend = inner.backend

    def devices(self) -> list[dict[str, Any]]:
        return self.inner.devices()

    def sample(self) -> dict[str, dict[str, Any]]:
        return self.inner.sample()

    def system_info(self) -> dict[str, Any]:
        return {**self.inner.system_info(), "arch": self.arch, "forced_arch": True}

    def close(self) -> None:
        self.inner.close()


def command_line_accelerators() -> Accelerators | None:
    """The first vendor tool on the PATH that reports a device (None if none, or when
    ``MILABENCH_SMI=0``)."""
    if not _tools_allowed():
        return None
    for probe in (
        lambda: QueryToolAccelerators.probe("cuda"),
        ROCmAccelerators.probe,
        XPUAccelerators.probe,
        lambda: QueryToolAccelerators.probe("hpu"),
    ):
        try:
            found = probe()
        except Exception:  # noqa: BLE001 - unreadable output: not this tool
            found = None
        if found is not None:
            return found
    return None


def find_accelerators() -> Accelerators:
    """A fresh back-end for this machine and these variables (the caller closes it)."""
    spec = fake_gpus()
    forced = forced_arch()
    found: Accelerators
    if spec is not None:
        found = FakeAccelerators.from_spec(spec)
    else:
        found = NVMLAccelerators.probe() or command_line_accelerators() or NoAccelerators()
    if forced and forced != found.arch:
        found = ForcedArch(found, forced)
    return found


_cache: dict[tuple[Any, ...], Accelerators] = {}
_KEY_VARIABLES = (
    "MILABENCH_GPU_ARCH",
    "MILABENCH_SMI",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "PATH",
)


def detect(*, refresh: bool = False) -> Accelerators:
    """The accelerators of this machine, cached per process and per relevant variables
    (for callers that only read devices and facts; a sampler takes `find_accelerators`)."""
    key = (fake_gpus(), *(os.environ.get(v) for v in _KEY_VARIABLES))
    if not refresh and key in _cache:
        return _cache[key]
    found = find_accelerators()
    _cache[key] = found
    return found
