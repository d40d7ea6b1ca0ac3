"""Accelerator detection and sampling behind one small interface.

`detect()` picks a back-end, in this order:

1. ``MILABENCH_FAKE_GPUS=<arch>:<count>[:<MiB>]`` -> `FakeAccelerators`. NVIDIA GPUs cannot
   exist on a CPU-only machine, so this is the one sanctioned stand-in: same interface as
   the NVML back-end, plausible changing numbers, products named ``Fake <arch> device``.
2. NVML through `pynvml` (imported lazily, used only when a driver answers `nvmlInit`).
3. ``rocm-smi``, ``xpu-smi``, ``hl-smi`` when one of them is on the PATH.
4. `NoAccelerators` (arch ``cpu``).

``MILABENCH_GPU_ARCH`` forces the reported arch whatever the back-end.

Every back-end answers `.arch`, `.devices()` (``[{"index", "device", "product",
"memory": {"used", "total"}}]`` in MiB), `.sample()` (the ``gpudata`` mapping of
run-data.md: ``{"0": {"memory": [used, total], "load": 0..1, "temperature": C,
"power": W, "energy": J}}``, energy being a cumulative counter where the back-end has
one) and `.system_info()`.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from typing import Any

from benchkit.monitors import visible_devices
from benchkit.smi import ROCM_ARGS, XPU_METRICS, parse_rocm, parse_xpu_discovery, parse_xpu_dump
from milabench.errors import ConfigError

ARCHES = ("cuda", "rocm", "xpu", "hpu", "cpu")


class Accelerators:
    """Base back-end: no devices."""

    arch: str = "cpu"

    def devices(self) -> list[dict[str, Any]]:
        return []

    def sample(self) -> dict[str, dict[str, Any]]:
        return {}

    def system_info(self) -> dict[str, Any]:
        return {"arch": self.arch, "backend": type(self).__name__, "count": len(self.devices())}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} arch={self.arch} devices={len(self.devices())}>"


class NoAccelerators(Accelerators):
    """A machine without accelerators (or whose accelerators no tool can see)."""


class FakeAccelerators(Accelerators):
    """Stand-in GPUs for tests and dry runs on machines without them.

    Load follows a slow sine wave per device and memory use follows the load, so samplers,
    dashboards and validation layers see values that move like a busy GPU's.
    """

    def __init__(self, arch: str, count: int, memory_mib: int = 81920):
        self.arch = arch
        self.count = count
        self.memory_mib = memory_mib
        self._start = time.monotonic()
        # Cumulative energy per device (J), integrating the fake power between samples,
        # so that the report's counter path sees numbers that grow like NVML's.
        self._energy = [1000.0] * count
        self._last: list[tuple[float, float] | None] = [None] * count

    @classmethod
    def from_spec(cls, spec: str) -> FakeAccelerators:
        """Parse ``cuda:8``, ``cuda:8:81920`` (or ``cuda:8:81920:lost@N``: the fourth field
        only matters to benchkit's in-process sampler, see `benchkit.monitors`)."""
        parts = spec.strip().split(":")
        try:
            if len(parts) not in (2, 3, 4) or parts[0] not in ARCHES:
                raise ValueError
            if len(parts) == 4 and not parts[3].startswith("lost@"):
                raise ValueError
            count = int(parts[1])
            mib = int(parts[2]) if len(parts) >= 3 and parts[2] else 81920
            if count < 0 or mib <= 0:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"MILABENCH_FAKE_GPUS={spec!r}: expected <arch>:<count>[:<MiB>[:lost@N]] "
                f"with arch one of {', '.join(ARCHES)}"
            ) from None
        return cls(parts[0], count, mib)

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

    def _load(self, index: int) -> float:
        t = time.monotonic() - self._start
        return round(0.75 + 0.2 * math.sin(t / 3.0 + index), 4)

    def _used(self, index: int) -> int:
        return int(self.memory_mib * (0.1 + 0.6 * self._load(index)))

    def sample(self) -> dict[str, dict[str, Any]]:
        out = {}
        now = time.monotonic()
        for i in range(self.count):
            load = self._load(i)
            power = round(80 + 300 * load, 1)
            last = self._last[i]
            if last is not None:
                self._energy[i] += last[1] * (now - last[0])
            self._last[i] = (now, power)
            out[str(i)] = {
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
            "backend": "fake",
            "count": self.count,
            "driver_version": "fake",
            "product": f"Fake {self.arch} device",
        }


class NVMLAccelerators(Accelerators):
    """NVIDIA GPUs through NVML (`pynvml` from the nvidia-ml-py package)."""

    arch = "cuda"

    def __init__(self, pynvml: Any):
        self.nvml = pynvml
        # Only the devices this process may use (an inherited CUDA_VISIBLE_DEVICES with
        # indexes, GPU or MIG UUIDs), in that order: plans count and number these.
        self.handles = []
        for physical in visible_devices(pynvml.nvmlDeviceGetCount()):
            if physical.isdigit():
                self.handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(physical)))
            else:
                self.handles.append(pynvml.nvmlDeviceGetHandleByUUID(physical))
        self.count = len(self.handles)

    @classmethod
    def probe(cls) -> NVMLAccelerators | None:
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            found = cls(pynvml)
        except Exception:  # noqa: BLE001 - any NVML failure means "no usable driver"
            return None
        return found if found.count > 0 else None

    def _text(self, value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _memory(self, handle: Any) -> tuple[int, int]:
        info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used) // 2**20, int(info.total) // 2**20

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for i, handle in enumerate(self.handles):
            used, total = self._memory(handle)
            out.append(
                {
                    "index": i,
                    "device": i,
                    "product": self._text(self.nvml.nvmlDeviceGetName(handle)),
                    "memory": {"used": used, "total": total},
                }
            )
        return out

    def sample(self) -> dict[str, dict[str, Any]]:
        nvml = self.nvml
        out = {}
        for i, handle in enumerate(self.handles):
            used, total = self._memory(handle)
            record: dict[str, Any] = {"memory": [used, total]}
            try:
                record["load"] = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
            except nvml.NVMLError:
                record["load"] = None
            try:
                record["temperature"] = nvml.nvmlDeviceGetTemperature(handle, 0)
            except nvml.NVMLError:
                record["temperature"] = None
            try:
                record["power"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000
            except nvml.NVMLError:
                record["power"] = None
            try:  # cumulative since the driver loaded (Volta and later), mJ -> J
                record["energy"] = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000
            except (nvml.NVMLError, AttributeError):
                pass
            out[str(i)] = record
        return out

    def system_info(self) -> dict[str, Any]:
        nvml = self.nvml
        info: dict[str, Any] = {"arch": "cuda", "backend": "nvml", "count": self.count}
        for key, fn in (
            ("driver_version", "nvmlSystemGetDriverVersion"),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),
        ):
            try:
                info[key] = self._text(getattr(nvml, fn)())
            except Exception:  # noqa: BLE001 - optional facts
                info[key] = None
        return info


class SMIAccelerators(Accelerators):
    """ROCm / Intel XPU / Gaudi, seen through their command-line tools.

    Kept deliberately small: enough to count devices and read memory totals, which is what
    the configuration needs. Live samples are read with the same tool on each call.
    """

    TOOLS = {"rocm": "rocm-smi", "xpu": "xpu-smi", "hpu": "hl-smi"}

    def __init__(self, arch: str, tool: str):
        self.arch = arch
        self.tool = tool

    @classmethod
    def probe(cls) -> SMIAccelerators | None:
        for arch, tool in cls.TOOLS.items():
            path = shutil.which(tool)
            if path:
                found = cls(arch, path)
                if found.devices():
                    return found
        return None

    def _run(self, *args: str) -> str:
        try:
            done = subprocess.run(
                [self.tool, *args], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout if done.returncode == 0 else ""

    def devices(self) -> list[dict[str, Any]]:
        if self.arch == "rocm":
            return self._rocm_devices()
        if self.arch == "hpu":
            return self._csv_devices(
                "-Q", "index,name,memory.used,memory.total", "--format=csv,noheader,nounits"
            )
        return self._xpu_devices()

    def _rocm_devices(self) -> list[dict[str, Any]]:
        cards = parse_rocm(self._run(*ROCM_ARGS))
        out = []
        for i, (_, sample) in enumerate(sorted(cards.items(), key=lambda kv: int(kv[0]))):
            used, total = sample.get("memory") or (0.0, 0.0)
            out.append(
                {
                    "index": i,
                    "device": i,
                    "product": sample.get("product") or "AMD GPU",
                    "memory": {"used": int(used), "total": int(total)},
                }
            )
        return out

    def _csv_devices(self, *args: str) -> list[dict[str, Any]]:
        out = []
        for line in self._run(*args).splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 4:
                continue
            try:
                index, used, total = int(cells[0]), int(float(cells[2])), int(float(cells[3]))
            except ValueError:
                continue
            out.append(
                {
                    "index": index,
                    "device": index,
                    "product": cells[1],
                    "memory": {"used": used, "total": total},
                }
            )
        return out

    def _xpu_devices(self) -> list[dict[str, Any]]:
        found = parse_xpu_discovery(self._run("discovery", "--json"))
        return [
            {
                "index": i,
                "device": int(key) if key.isdigit() else key,
                "product": info["product"],
                "memory": {"used": 0, "total": int(info.get("total_mib") or 0)},
            }
            for i, (key, info) in enumerate(found.items())
        ]

    def sample(self) -> dict[str, dict[str, Any]]:
        """Live samples: rocm-smi and xpu-smi through `benchkit.smi` (load, power,
        temperature, memory and the cumulative energy counter), hl-smi memory only."""
        if self.arch == "rocm":
            cards = parse_rocm(self._run(*ROCM_ARGS))
            ordered = sorted(cards.items(), key=lambda kv: int(kv[0]))
            return {
                str(i): {k: v for k, v in sample.items() if k != "product"}
                for i, (_, sample) in enumerate(ordered)
            }
        if self.arch == "xpu":
            out = {}
            for d in self._xpu_devices():
                argv = ["dump", "-d", str(d["device"]), "-m", XPU_METRICS, "-n", "1"]
                for sample in parse_xpu_dump(self._run(*argv)).values():
                    used = sample.pop("memory_used", None)
                    if used is not None:
                        sample["memory"] = [used, d["memory"]["total"]]
                    out[str(d["index"])] = sample
            return out
        return {
            str(d["index"]): {
                "memory": [d["memory"]["used"], d["memory"]["total"]],
                "load": None,
                "temperature": None,
                "power": None,
            }
            for d in self.devices()
        }

    def system_info(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "backend": os.path.basename(self.tool),
            "count": len(self.devices()),
        }


class _Forced(Accelerators):
    """Wraps a back-end so that `.arch` reports ``MILABENCH_GPU_ARCH``."""

    def __init__(self, inner: Accelerators, arch: str):
        self.inner = inner
        self.arch = arch

    def devices(self) -> list[dict[str, Any]]:
        return self.inner.devices()

    def sample(self) -> dict[str, dict[str, Any]]:
        return self.inner.sample()

    def system_info(self) -> dict[str, Any]:
        return {**self.inner.system_info(), "arch": self.arch, "forced_arch": True}


_cache: dict[tuple[str | None, str | None], Accelerators] = {}


def detect(*, refresh: bool = False) -> Accelerators:
    """The accelerators of this machine (cached per process and per relevant variables)."""
    fake = os.environ.get("MILABENCH_FAKE_GPUS") or None
    forced = os.environ.get("MILABENCH_GPU_ARCH") or None
    visible = tuple(os.environ.get(v) for v in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"))
    key = (fake, forced, visible)
    if not refresh and key in _cache:
        return _cache[key]
    found: Accelerators | None
    if fake:
        found = FakeAccelerators.from_spec(fake)
    else:
        found = NVMLAccelerators.probe() or SMIAccelerators.probe() or NoAccelerators()
    if forced:
        if forced not in ARCHES:
            raise ConfigError(f"MILABENCH_GPU_ARCH={forced!r}: expected one of {', '.join(ARCHES)}")
        if forced != found.arch:
            found = _Forced(found, forced)
    _cache[key] = found
    return found
