"""A fake of NVIDIA's `pynvml` (nvidia-ml-py) for tests on machines without a GPU.

It has the real module's interface for what milabench calls (names, arguments, the
`NVMLError` class with its ``value``), and a real module is checked against it in the
tests (every name here exists in the installed nvidia-ml-py). Devices come from
`DEVICES`, which a test may replace before `nvmlInit`; a device may carry MIG instances,
reachable by their ``MIG-...`` UUID like on a real A100/H100 in MIG mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    """Like the real one: ``NVMLError(value)`` with the error code in ``.value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"NVML error {self.value}"


@dataclass
class _Memory:
    total: int
    free: int
    used: int


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class FakeDevice:
    index: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total_mib: int = 81559
    used_mib: int = 1024
    load: int = 87  # percent
    temperature: int = 61
    power_mw: int = 412000
    energy_mj: int = 123456789  # millijoules since the driver loaded
    mig: list[FakeDevice] = field(default_factory=list)


def h100_node(count: int = 8) -> list[FakeDevice]:
    return [FakeDevice(i, f"GPU-{i:08x}-fake-{i}") for i in range(count)]


DEVICES: list[FakeDevice] = h100_node()
_T0 = time.monotonic()
_initialised = False


def _check() -> None:
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlInit() -> None:
    global _initialised
    _initialised = True


def nvmlShutdown() -> None:
    global _initialised
    _initialised = False


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return "550.54.15"


def nvmlSystemGetCudaDriverVersion() -> int:
    _check()
    return 12040


def nvmlDeviceGetCount() -> int:
    _check()
    return len(DEVICES)


def nvmlDeviceGetHandleByIndex(index: int) -> FakeDevice:
    _check()
    if not 0 <= index < len(DEVICES):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return DEVICES[index]


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> FakeDevice:
    _check()
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for device in DEVICES:
        for candidate in (device, *device.mig):
            if candidate.uuid == text:
                return candidate
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetName(handle: FakeDevice) -> str:
    _check()
    return handle.name


def nvmlDeviceGetUUID(handle: FakeDevice) -> str:
    _check()
    return handle.uuid


def nvmlDeviceGetMemoryInfo(handle: FakeDevice) -> _Memory:
    _check()
    total, used = handle.total_mib * 2**20, handle.used_mib * 2**20
    return _Memory(total=total, free=total - used, used=used)


def nvmlDeviceGetUtilizationRates(handle: FakeDevice) -> _Utilization:
    _check()
    return _Utilization(gpu=handle.load, memory=handle.load // 2)


def nvmlDeviceGetTemperature(handle: FakeDevice, sensor: int) -> int:
    _check()
    return handle.temperature


def nvmlDeviceGetPowerUsage(handle: FakeDevice) -> int:
    _check()
    return handle.power_mw


def nvmlDeviceGetTotalEnergyConsumption(handle: FakeDevice) -> int:
    """Millijoules since the driver loaded: ``energy_mj`` at import, then the device's
    power integrated over the time since, so that successive samples grow like a real
    counter's (mW x s = mJ)."""
    _check()
    return handle.energy_mj + int(handle.power_mw * (time.monotonic() - _T0))
