"""NVIDIA GPUs through NVML (``pynvml``): one small check per fact of a device, and the
driver against the pinned CUDA build.

`nvidia_findings` opens NVML (nothing when it is absent or no driver answers), runs every
check of `DEVICE_CHECKS` on each device this process may use (``CUDA_VISIBLE_DEVICES``)
and folds devices that passed alike into one line (`merge_alike`). Each check is
``(nvml, handle, subject) -> list[Finding]``, empty when the device does not support the
query. Fake accelerators (``MILABENCH_FAKE_GPUS``) are not checked. The checks and their
thresholds: docs/doctor.md "The checks". Standard library only (NVML when installed):
it is sent to nodes inline.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from benchkit.accelerators import AcceleratorSettingError, fake_gpus
from milabench.doctor.findings import FAIL, OK, WARN, Finding, merge_alike, pct
from milabench.doctor.thresholds import (
    POWER_LIMIT_FAIL,
    POWER_LIMIT_HIGH,
    RETIRED_PAGES_WARN,
    TEMPERATURE_MARGIN,
)

# NVML clock-event ("throttle") reasons: bit value -> (name, severity at rest). The bit
# values are NVML's (nvmlClocksEventReason* in nvidia-ml-py); `clock_event_names`
# prefers the installed module's constants and falls back to these.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
_CLOCK_EVENT_CONSTANTS = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
}
CLOCK_EVENT_SEVERITY = {
    "hw_slowdown": FAIL,
    "hw_thermal_slowdown": FAIL,
    "hw_power_brake_slowdown": FAIL,
    "sw_thermal_slowdown": WARN,
    "sw_power_cap": WARN,
}


def clock_event_names(mask: int, nvml: Any = None) -> list[str]:
    """The names of the clock-event reasons set in ``mask`` (NVML's bit values; the
    installed module's ``nvmlClocksEventReason*`` constants when it has them)."""
    bits = dict(CLOCK_EVENT_BITS)
    if nvml is not None:
        for name, suffix in _CLOCK_EVENT_CONSTANTS.items():
            for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
                value = getattr(nvml, prefix + suffix, None)
                if isinstance(value, int) and value:
                    bits = {b: n for b, n in bits.items() if n != name}
                    bits[value] = name
                    break
    return [name for bit, name in sorted(bits.items()) if mask & bit]


def _visible_indexes(count: int, environ: dict[str, str] | None = None) -> list[int] | None:
    """Physical indexes ``CUDA_VISIBLE_DEVICES`` selects, None when it names UUIDs or is
    unset (then every device is checked)."""
    env = os.environ if environ is None else environ
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    out = []
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        if not item.isdigit():
            return None
        if int(item) >= count:
            break
        out.append(int(item))
    return out


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``; None when the function is absent or not supported."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def check_persistence(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """Persistence mode: off, the driver sets the GPU up again for every process."""
    mode = _call(nvml, "nvmlDeviceGetPersistenceMode", handle)
    if mode is None:
        return []
    if mode:
        return [Finding("persistence_mode", subject, OK, "persistence mode on", True)]
    reason = (
        "persistence mode off: the driver sets the GPU up again for every process "
        "(slower starts, first steps vary); nvidia-smi -pm 1"
    )
    return [Finding("persistence_mode", subject, WARN, reason, False)]


def check_power_limit(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """The enforced power limit against the default: below it, a capped GPU."""
    limit = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    if limit is None:
        limit = _call(nvml, "nvmlDeviceGetPowerManagementLimit", handle)
    default = _call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    if not (limit and default):
        return []
    ratio = limit / default
    watts, dwatts = limit / 1000, default / 1000
    value = {"limit_w": watts, "default_w": dwatts}
    if ratio < POWER_LIMIT_FAIL:
        severity = FAIL
        reason = (
            f"power limit {watts:.0f} W is {pct(ratio)} of the default {dwatts:.0f} W: "
            f"the GPU is capped and will measure slower (nvidia-smi -pl {dwatts:.0f})"
        )
    elif ratio > POWER_LIMIT_HIGH:
        severity = WARN
        reason = (
            f"power limit {watts:.0f} W is above the default {dwatts:.0f} W: results are "
            "not comparable with stock GPUs"
        )
    else:
        severity, reason = OK, f"power limit {watts:.0f} W (default {dwatts:.0f} W)"
    return [Finding("power_limit", subject, severity, reason, value)]


def check_clock_events(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """The clock-event reasons holding the clocks down now, at rest."""
    reasons = _call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = _call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if reasons is None:
        return []
    names = clock_event_names(int(reasons), nvml)
    bad = [n for n in names if n in CLOCK_EVENT_SEVERITY]
    if not bad:
        reason = "no slowdown (" + (", ".join(names) or "none") + ")"
        return [Finding("clock_events", subject, OK, reason, names)]
    severity = FAIL if any(CLOCK_EVENT_SEVERITY[n] == FAIL for n in bad) else WARN
    reason = (
        f"clocks held down now by {', '.join(bad)} (at rest): check cooling and "
        "power delivery (nvidia-smi -q -d PERFORMANCE)"
    )
    return [Finding("clock_events", subject, severity, reason, names)]


def check_pcie_link(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """The PCIe link's width against the widest the GPU and slot allow (the generation
    alone is no finding: an idle GPU lowers its link speed)."""
    gen = _call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)
    width = _call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)
    max_gen = _call(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)
    max_width = _call(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)
    if not (width and max_width):
        return []
    value = {"gen": gen, "width": width, "max_gen": max_gen, "max_width": max_width}
    link = f"PCIe gen {gen} x{width}"
    if width < max_width:
        severity = WARN
        reason = (
            f"{link}, the GPU and slot allow x{max_width}: host-device copies run at "
            f"{width / max_width:.0%} of their bandwidth (reseat the card, check the slot)"
        )
    elif gen and max_gen and gen < max_gen:
        severity = OK
        reason = f"{link} (gen {max_gen} possible: an idle GPU lowers its link speed)"
    else:
        severity, reason = OK, f"{link}"
    return [Finding("pcie_link", subject, severity, reason, value)]


def _ecc_mode_finding(current: int, pending: int, subject: str) -> Finding:
    value = {"current": current, "pending": pending}
    if current != pending:
        reason = (
            f"ECC {'on' if current else 'off'} now, {'on' if pending else 'off'} after the "
            "next reset: reset the GPU before measuring"
        )
        return Finding("ecc_mode", subject, WARN, reason, value)
    if not current:
        reason = (
            "ECC off: more memory and bandwidth than the same GPU with ECC on, so results "
            "are not comparable with ECC-on nodes"
        )
        return Finding("ecc_mode", subject, WARN, reason, value)
    return Finding("ecc_mode", subject, OK, "ECC on", value)


def _ecc_errors_findings(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    unc = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile = _call(
        nvml, "nvmlDeviceGetTotalEccErrors", handle, unc, getattr(nvml, "NVML_VOLATILE_ECC", 0)
    )
    aggregate = _call(
        nvml, "nvmlDeviceGetTotalEccErrors", handle, unc, getattr(nvml, "NVML_AGGREGATE_ECC", 1)
    )
    value = {"volatile": volatile, "aggregate": aggregate}
    if volatile:
        reason = (
            f"{volatile} uncorrected ECC error(s) since the driver loaded: reset the GPU "
            "(nvidia-smi -r) before measuring"
        )
        return [Finding("ecc_errors", subject, FAIL, reason, value)]
    if aggregate:
        reason = (
            f"{aggregate} uncorrected ECC error(s) over the GPU's life (none since the "
            "driver loaded): watch this GPU"
        )
        return [Finding("ecc_errors", subject, WARN, reason, value)]
    if volatile is not None or aggregate is not None:
        return [Finding("ecc_errors", subject, OK, "no uncorrected ECC error", value)]
    return []


def check_ecc(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """ECC mode (off, or changing at the next reset), then the uncorrected ECC errors
    since the driver loaded and over the GPU's life (read only where ECC is known)."""
    ecc = _call(nvml, "nvmlDeviceGetEccMode", handle)
    if ecc is None:
        return []
    mode = _ecc_mode_finding(int(ecc[0]), int(ecc[1]), subject)
    return [mode, *_ecc_errors_findings(nvml, handle, subject)]


def check_remapped_rows(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """Row remapping: pending (a reset is due) or failed (the GPU needs service)."""
    rows = _call(nvml, "nvmlDeviceGetRemappedRows", handle)
    if rows is None:
        return []
    corr, unc_rows, pending, failure = (int(x) for x in rows[:4])
    value = {"correctable": corr, "uncorrectable": unc_rows, "pending": pending,
             "failure": failure}  # fmt: skip
    if failure:
        severity, reason = FAIL, "row remapping failed: the GPU needs service"
    elif pending:
        severity, reason = FAIL, "row remapping pending: reset the GPU"
    else:
        severity, reason = OK, f"{corr + unc_rows} row(s) remapped, none pending"
    return [Finding("remapped_rows", subject, severity, reason, value)]


def check_retired_pages(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """Pages retired for ECC errors (many: a GPU to replace) and a retirement pending."""
    pages = []
    for cause in ("MULTIPLE_SINGLE_BIT_ECC_ERRORS", "DOUBLE_BIT_ECC_ERROR"):
        const = getattr(nvml, f"NVML_PAGE_RETIREMENT_CAUSE_{cause}", None)
        if const is not None:
            found = _call(nvml, "nvmlDeviceGetRetiredPages", handle, const)
            if found is not None:
                pages.append(len(found))
    pending = _call(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if not pages and pending is None:
        return []
    count = sum(pages)
    value = {"retired": count, "pending": bool(pending)}
    if pending:
        severity, reason = FAIL, "page retirement pending: reset the GPU"
    elif count >= RETIRED_PAGES_WARN:
        severity = WARN
        reason = f"{count} pages retired (the usual replacement threshold is {RETIRED_PAGES_WARN})"
    else:
        severity, reason = OK, f"{count} page(s) retired, none pending"
    return [Finding("retired_pages", subject, severity, reason, value)]


def check_mig_mode(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """MIG mode: on, the suite measures slices; changing, at the next reset."""
    mig = _call(nvml, "nvmlDeviceGetMigMode", handle)
    if mig is None:
        return []
    current, pending = int(mig[0]), int(mig[1])
    enabled = getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    value = {"current": current, "pending": pending}
    if current != pending:
        severity, reason = WARN, "MIG mode changes at the next reset"
    elif current == enabled:
        severity, reason = WARN, "MIG on: the suite measures the GPU's slices, not the whole GPU"
    else:
        severity, reason = OK, "MIG off"
    return [Finding("mig_mode", subject, severity, reason, value)]


def check_temperature(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """The temperature at rest against the slowdown threshold."""
    temp = _call(nvml, "nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
    slowdown = _call(
        nvml,
        "nvmlDeviceGetTemperatureThreshold",
        handle,
        getattr(nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
    )
    if temp is None:
        return []
    value = {"temperature": temp, "slowdown": slowdown}
    if not slowdown:
        severity, reason = OK, f"{temp} °C"
    elif temp >= slowdown:
        severity = FAIL
        reason = (
            f"{temp} °C at rest, at or above the slowdown threshold {slowdown} °C: "
            "cooling has failed"
        )
    elif temp >= slowdown - TEMPERATURE_MARGIN:
        severity = WARN
        reason = (
            f"{temp} °C at rest, {slowdown - temp} °C below the slowdown threshold "
            f"{slowdown} °C: under load it will slow down"
        )
    else:
        severity, reason = OK, f"{temp} °C (slowdown at {slowdown} °C)"
    return [Finding("temperature", subject, severity, reason, value)]


#: The checks of one device, in the order their findings are listed.
DEVICE_CHECKS: tuple[Callable[[Any, Any, str], list[Finding]], ...] = (
    check_persistence,
    check_power_limit,
    check_clock_events,
    check_pcie_link,
    check_ecc,
    check_remapped_rows,
    check_retired_pages,
    check_mig_mode,
    check_temperature,
)


def device_findings(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    """Every check of `DEVICE_CHECKS` on one device, in order."""
    return [found for check in DEVICE_CHECKS for found in check(nvml, handle, subject)]


def check_driver(nvml: Any, needed: tuple[int, int] | None, source: str | None) -> Finding | None:
    """The driver's CUDA version against what the pinned CUDA build needs."""
    version = _call(nvml, "nvmlSystemGetDriverVersion")
    cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    if isinstance(version, bytes):
        version = version.decode()
    if cuda is None:
        return None
    have = (int(cuda) // 1000, (int(cuda) % 1000) // 10)
    words = f"driver {version} supports CUDA {have[0]}.{have[1]}"
    value = {"driver": version, "cuda": f"{have[0]}.{have[1]}"}
    if needed is None:
        return Finding("driver", "nvidia", OK, words, value)
    value["needed"] = f"{needed[0]}.{needed[1]}"
    if have < tuple(needed):
        return Finding(
            "driver",
            "nvidia",
            FAIL,
            f"{words}, the pinned CUDA build needs {needed[0]}.{needed[1]} ({source}): update "
            "the driver or pin a torch build for this CUDA version",
            value,
        )
    return Finding(
        "driver", "nvidia", OK, f"{words}; the pinned build needs {needed[0]}.{needed[1]}", value
    )


def nvidia_findings(
    nvml: Any = None, *, cuda_needed: tuple[int, int] | None = None, cuda_source: str = ""
) -> list[Finding]:
    """Every NVML check on every device this process may use (``CUDA_VISIBLE_DEVICES``
    indexes; all devices otherwise). [] when NVML is absent or no driver answers."""
    try:
        fake = fake_gpus()
    except AcceleratorSettingError as err:
        return [Finding("gpus", "gpu", FAIL, str(err))]
    if fake is not None:
        reason = f"{fake.count} fake {fake.arch} devices (MILABENCH_FAKE_GPUS): not checked"
        return [Finding("gpus", "gpu", OK, reason)]
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415 - optional, NVIDIA machines only
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no device: not an NVIDIA machine
        return []
    try:
        count = int(nvml.nvmlDeviceGetCount())
        indexes = _visible_indexes(count)
        if indexes is None:
            indexes = list(range(count))
        found: list[Finding] = []
        for i in indexes:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except nvml.NVMLError as err:
                found.append(Finding("gpu", f"gpu{i}", FAIL, f"NVML cannot open it: {err}"))
                continue
            found += device_findings(nvml, handle, f"gpu{i}")
        out = merge_alike(found)
        driver = check_driver(nvml, cuda_needed, cuda_source)
        if driver is not None:
            out.append(driver)
        return out
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
