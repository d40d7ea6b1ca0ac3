"""AMD and Intel GPUs through sysfs: the kernel files ``rocm-smi`` and ``xpu-smi`` read,
so the checks need neither tool nor its Python bindings.

`sysfs_gpu_findings` finds the AMD and Intel display devices among the PCI devices (an
Intel display controller without power management is left out), runs the checks of one
device (PCIe link, power cap, temperature; on AMD also the forced performance level and
the RAS memory errors) and folds devices that passed alike into one line. Each check is
a small function of the device's folder. The checks and their thresholds: docs/doctor.md
"The checks". Standard library only: it is sent to nodes inline.
"""

from __future__ import annotations

import os

from milabench.doctor.findings import FAIL, OK, WARN, Finding, merge_alike, pct
from milabench.doctor.thresholds import POWER_LIMIT_FAIL, TEMPERATURE_MARGIN
from milabench.machine.procfs import read_text

AMD_VENDOR = "0x1002"
INTEL_VENDOR = "0x8086"
_DISPLAY_CLASS = ("0x0300", "0x0302", "0x0380", "0x1200")  # VGA, 3D, display, processing


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def _link(text: str | None) -> str | None:
    return text.strip() if text else None


def _hwmon(device: str) -> str | None:
    try:
        names = sorted(os.listdir(f"{device}/hwmon"))
    except OSError:
        return None
    return f"{device}/hwmon/{names[0]}" if names else None


def check_pcie_link(device: str, subject: str) -> list[Finding]:
    """The link's width against the widest the device allows."""
    width = _num(read_text(f"{device}/current_link_width"))
    max_width = _num(read_text(f"{device}/max_link_width"))
    speed = _link(read_text(f"{device}/current_link_speed"))
    max_speed = _link(read_text(f"{device}/max_link_speed"))
    if not (width and max_width):
        return []
    value = {"width": width, "max_width": max_width, "speed": speed, "max_speed": max_speed}
    if width < max_width:
        reason = (
            f"PCIe x{width:.0f} ({speed}), the device allows x{max_width:.0f}: host-device "
            "copies are slower (reseat the card, check the slot)"
        )
        return [Finding("pcie_link", subject, WARN, reason, value)]
    return [Finding("pcie_link", subject, OK, f"PCIe x{width:.0f} ({speed})", value)]


def check_power_cap(hwmon: str, subject: str) -> list[Finding]:
    """The power cap against its default (AMD: ``power1_cap``; Intel xe/i915: the
    sustained limit ``power1_max`` against the card's rated maximum)."""
    cap = _num(read_text(f"{hwmon}/power1_cap"))
    default = _num(read_text(f"{hwmon}/power1_cap_default"))
    if cap is None:
        cap = _num(read_text(f"{hwmon}/power1_max"))
        default = _num(read_text(f"{hwmon}/power1_rated_max"))
    if not (cap and default):
        return []
    ratio = cap / default
    value = {"limit_w": cap / 1e6, "default_w": default / 1e6}
    words = f"power cap {cap / 1e6:.0f} W"
    if ratio < POWER_LIMIT_FAIL:
        reason = (
            f"{words} is {pct(ratio)} of the default {default / 1e6:.0f} W: the GPU is "
            "capped and will measure slower"
        )
        return [Finding("power_limit", subject, FAIL, reason, value)]
    reason = f"{words} (default {default / 1e6:.0f} W)"
    return [Finding("power_limit", subject, OK, reason, value)]


def check_temperature(hwmon: str, subject: str) -> list[Finding]:
    """The temperature at rest against the critical one."""
    temp = _num(read_text(f"{hwmon}/temp1_input"))
    crit = _num(read_text(f"{hwmon}/temp1_crit"))
    if temp is None:
        return []
    t, c = temp / 1000, (crit / 1000 if crit else None)
    value = {"temperature": t, "critical": c}
    if c and t >= c - TEMPERATURE_MARGIN:
        reason = f"{t:.0f} °C at rest, critical at {c:.0f} °C: check cooling"
        return [Finding("temperature", subject, FAIL if t >= c else WARN, reason, value)]
    reason = f"{t:.0f} °C" + (f" (critical {c:.0f} °C)" if c else "")
    return [Finding("temperature", subject, OK, reason, value)]


def check_perf_level(device: str, subject: str) -> list[Finding]:
    """amdgpu's performance level: forced to anything but auto, high or peak, the
    clocks are held."""
    level = read_text(f"{device}/power_dpm_force_performance_level")
    if level is None:
        return []
    level = level.strip()
    if level in ("auto", "high", "peak"):
        return [Finding("perf_level", subject, OK, f"performance level {level}", level)]
    reason = f"performance level forced to {level}: clocks are held (rocm-smi --setperflevel auto)"
    return [Finding("perf_level", subject, WARN, reason, level)]


def check_ras_errors(device: str, subject: str) -> list[Finding]:
    """amdgpu's RAS count of uncorrectable memory errors (``ras/umc_err_count``)."""
    ras = read_text(f"{device}/ras/umc_err_count")
    if ras is None:
        return []
    counts = {}
    for line in ras.splitlines():
        key, _, raw = line.partition(":")
        if raw.strip().isdigit():
            counts[key.strip()] = int(raw.strip())
    if counts.get("ue"):
        reason = f"{counts['ue']} uncorrectable memory error(s) (RAS): reset or service the GPU"
        return [Finding("ecc_errors", subject, FAIL, reason, counts)]
    return [Finding("ecc_errors", subject, OK, "no uncorrectable memory error (RAS)", counts)]


def device_findings(device: str, subject: str, vendor: str) -> list[Finding]:
    """Every check of one device (its sysfs folder), in the order they are listed."""
    out = check_pcie_link(device, subject)
    hwmon = _hwmon(device)
    if hwmon is not None:
        out += check_power_cap(hwmon, subject) + check_temperature(hwmon, subject)
    if vendor == AMD_VENDOR:
        out += check_perf_level(device, subject) + check_ras_errors(device, subject)
    return out


def sysfs_gpu_findings(root: str = "/sys/bus/pci/devices") -> list[Finding]:
    """AMD and Intel GPUs found among the PCI devices (NVIDIA ones are NVML's)."""
    out: list[Finding] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    index = {AMD_VENDOR: 0, INTEL_VENDOR: 0}
    for name in names:
        device = f"{root}/{name}"
        vendor = (read_text(f"{device}/vendor") or "").strip()
        klass = (read_text(f"{device}/class") or "").strip()
        if vendor not in index or not klass.startswith(_DISPLAY_CLASS):
            continue
        if vendor == INTEL_VENDOR and _hwmon(device) is None:
            continue  # an integrated display controller without power management
        prefix = "amd" if vendor == AMD_VENDOR else "intel"
        found = device_findings(device, f"{prefix}{index[vendor]}", vendor)
        index[vendor] += 1
        out += found
    return merge_alike(merge_alike(out, "amd"), "intel")
