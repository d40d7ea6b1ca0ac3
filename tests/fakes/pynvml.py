"""A fake of NVIDIA's `pynvml` (nvidia-ml-py) for tests on machines without a GPU.

It has the real module's interface for what milabench calls (names, arguments, the
`NVMLError` class with its ``value``), and a real module is checked against it in the
tests (every name here exists in the installed nvidia-ml-py). Devices come from
`DEVICES`, which a test may replace before `nvmlInit`; a device may carry MIG instances,
reachable by their ``MIG-...`` UUID like on a real A100/H100 in MIG mode.

The driver is 550.54.15 (CUDA 12.4) unless ``FAKE_PYNVML_DRIVER`` names another one, for
the processes a test starts: ``535.183.01`` (its CUDA version from the driver branch, as
`nvidia-smi` shows it: 535 is 12.2, 570 is 12.8, 580 is 13.0) or ``<driver>/<cuda>`` with
NVML's integer (``575.57.08/12090``). A test in the same process may set
`DRIVER_VERSION` and `CUDA_DRIVER_VERSION` instead.

``FAKE_PYNVML_DEVICES`` gives the processes a test starts other devices: JSON
``{"count": 1, "devices": {"0": {"persistence": 0, "power_limit_mw": 490000}}}``, the
keys of ``devices`` being indexes and their values `FakeDevice` fields (tuples as lists).
"""

from __future__ import annotations

import os
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
    # Health (`milabench doctor`, the in-window monitors): a healthy H100 SXM by default.
    persistence: int = 1  # NVML_FEATURE_ENABLED
    power_limit_mw: int = 700000  # enforced limit
    default_power_limit_mw: int = 700000
    clocks_event_reasons: int = 0  # nvmlClocksEventReason* bits (0: none)
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_max_gen: int = 5
    pcie_max_width: int = 16
    ecc_supported: bool = True
    ecc_mode: tuple[int, int] = (1, 1)  # (current, pending)
    ecc_uncorrected: tuple[int, int] = (0, 0)  # (volatile, aggregate)
    retired_pages: dict[int, list[int]] = field(default_factory=dict)  # cause -> addresses
    retired_pending: int = 0
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corr, unc, pending, fail
    mig_mode: tuple[int, int] = (0, 0)  # (current, pending)
    slowdown_temperature: int = 87
    shutdown_temperature: int = 92
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    xid_events: list[int] = field(default_factory=list)  # pending XIDs, delivered in order


def h100_node(count: int = 8) -> list[FakeDevice]:
    return [FakeDevice(i, f"GPU-{i:08x}-fake-{i}") for i in range(count)]


DEVICES: list[FakeDevice] = h100_node()
_T0 = time.monotonic()
# nvmlInit calls not yet matched by nvmlShutdown: NVML keeps a reference count and shuts
# down only when it falls to zero, so a library that inits and shuts down (the doctor)
# does not close the handles another part of the process still holds.
_init_count = 0

# The CUDA version each driver branch reports (nvidia-smi's "CUDA Version").
BRANCH_CUDA = {470: 11040, 525: 12000, 535: 12020, 550: 12040, 560: 12060, 565: 12070,
               570: 12080, 575: 12090, 580: 13000, 590: 13010}  # fmt: skip


def _driver_from_env() -> tuple[str, int]:
    """``FAKE_PYNVML_DRIVER`` read as (driver version, NVML CUDA version)."""
    spec = os.environ.get("FAKE_PYNVML_DRIVER", "").strip()
    if not spec:
        return "550.54.15", 12040
    driver, _, cuda = spec.partition("/")
    if cuda:
        return driver, int(cuda)
    return driver, BRANCH_CUDA[int(driver.split(".")[0])]


DRIVER_VERSION, CUDA_DRIVER_VERSION = _driver_from_env()


def _check() -> None:
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlInit() -> None:
    global _init_count
    _init_count += 1


def nvmlShutdown() -> None:
    global _init_count
    _check()
    _init_count -= 1


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return DRIVER_VERSION


def nvmlSystemGetCudaDriverVersion() -> int:
    _check()
    return CUDA_DRIVER_VERSION


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


# -- health: what `milabench doctor` and the in-window monitors read ---------------------
# Names, arguments and return shapes are nvidia-ml-py's (checked by the interface test).

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
nvmlClocksEventReasonNone = 0
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlEventTypeXidCriticalError = 0x8


def nvmlDeviceGetPersistenceMode(handle: FakeDevice) -> int:
    _check()
    return handle.persistence


def nvmlDeviceGetEnforcedPowerLimit(handle: FakeDevice) -> int:
    _check()
    return handle.power_limit_mw


def nvmlDeviceGetPowerManagementLimit(handle: FakeDevice) -> int:
    _check()
    return handle.power_limit_mw


def nvmlDeviceGetPowerManagementDefaultLimit(handle: FakeDevice) -> int:
    _check()
    return handle.default_power_limit_mw


def nvmlDeviceGetCurrentClocksEventReasons(handle: FakeDevice) -> int:
    _check()
    return handle.clocks_event_reasons


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: FakeDevice) -> int:
    """The older name of the same call (nvidia-ml-py keeps both)."""
    return nvmlDeviceGetCurrentClocksEventReasons(handle)


def nvmlDeviceGetCurrPcieLinkGeneration(handle: FakeDevice) -> int:
    _check()
    return handle.pcie_gen


def nvmlDeviceGetCurrPcieLinkWidth(handle: FakeDevice) -> int:
    _check()
    return handle.pcie_width


def nvmlDeviceGetMaxPcieLinkGeneration(handle: FakeDevice) -> int:
    _check()
    return handle.pcie_max_gen


def nvmlDeviceGetMaxPcieLinkWidth(handle: FakeDevice) -> int:
    _check()
    return handle.pcie_max_width


def _ecc(handle: FakeDevice) -> None:
    _check()
    if not handle.ecc_supported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetEccMode(handle: FakeDevice) -> list[int]:
    """``[current, pending]`` like the real call."""
    _ecc(handle)
    return list(handle.ecc_mode)


def nvmlDeviceGetTotalEccErrors(handle: FakeDevice, errorType: int, counterType: int) -> int:
    _ecc(handle)
    if errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
        return 0
    volatile, aggregate = handle.ecc_uncorrected
    return volatile if counterType == NVML_VOLATILE_ECC else aggregate


def nvmlDeviceGetRetiredPages(device: FakeDevice, sourceFilter: int) -> list[int]:
    _ecc(device)
    return list(device.retired_pages.get(sourceFilter, []))


def nvmlDeviceGetRetiredPagesPendingStatus(device: FakeDevice) -> int:
    _ecc(device)
    return device.retired_pending


def nvmlDeviceGetRemappedRows(device: FakeDevice) -> tuple[int, int, int, int]:
    """``(correctable, uncorrectable, pending, failure)``; not supported before Ampere."""
    _check()
    if device.remapped_rows is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return tuple(device.remapped_rows)


def nvmlDeviceGetMigMode(device: FakeDevice) -> list[int]:
    _check()
    return list(device.mig_mode)


def nvmlDeviceGetTemperatureThreshold(handle: FakeDevice, threshold: int) -> int:
    _check()
    if threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
        return handle.slowdown_temperature
    if threshold == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
        return handle.shutdown_temperature
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetClockInfo(handle: FakeDevice, type: int) -> int:
    _check()
    if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        return handle.sm_clock_mhz
    if type == NVML_CLOCK_MEM:
        return handle.mem_clock_mhz
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


@dataclass
class _EventData:
    """The fields of nvidia-ml-py's ``c_nvmlEventData_t`` that callers read."""

    device: FakeDevice
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _EventSet:
    devices: list[tuple[FakeDevice, int]] = field(default_factory=list)


def nvmlEventSetCreate() -> _EventSet:
    _check()
    return _EventSet()


def nvmlDeviceRegisterEvents(handle: FakeDevice, eventTypes: int, eventSet: _EventSet) -> None:
    _check()
    eventSet.devices.append((handle, eventTypes))


def nvmlEventSetWait(eventSet: _EventSet, timeoutms: int) -> _EventData:
    """The next pending XID of a registered device; ``NVMLError(NVML_ERROR_TIMEOUT)`` when
    none is pending (the fake never waits: ``timeoutms`` is accepted and ignored)."""
    _check()
    for device, types in eventSet.devices:
        if types & nvmlEventTypeXidCriticalError and device.xid_events:
            return _EventData(device, nvmlEventTypeXidCriticalError, device.xid_events.pop(0))
    raise NVMLError(NVML_ERROR_TIMEOUT)


def nvmlEventSetFree(eventSet: _EventSet) -> None:
    eventSet.devices.clear()


def _devices_from_env() -> None:
    """Apply ``FAKE_PYNVML_DEVICES`` (see the module docstring) to `DEVICES`."""
    import json

    raw = os.environ.get("FAKE_PYNVML_DEVICES")
    if not raw:
        return
    spec = json.loads(raw)
    global DEVICES
    DEVICES = h100_node(int(spec.get("count", len(DEVICES))))
    for index, fields in (spec.get("devices") or {}).items():
        device = DEVICES[int(index)]
        for name, value in fields.items():
            if not hasattr(device, name):
                raise ValueError(f"FAKE_PYNVML_DEVICES: FakeDevice has no field {name!r}")
            if isinstance(value, list) and isinstance(getattr(device, name), tuple):
                value = tuple(value)
            setattr(device, name, value)


_devices_from_env()
