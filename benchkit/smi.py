"""The outputs of the vendors' command-line monitors, parsed by pure functions.

Why command lines: NVIDIA has a Python binding (NVML, `benchkit.accelerators`) that a
node's Python may lack; AMD's and Intel's equivalents are libraries that a benchmark
environment does not have, while ``nvidia-smi``, ``rocm-smi``, ``xpu-smi`` and ``hl-smi``
come with every driver install. The parsers here (`parse_rocm`, `parse_xpu_dump`,
`parse_query`, ...) are tested against recorded outputs; the back-ends of
`benchkit.accelerators` run the tools and turn the results into the same ``gpudata``
records as NVML's::

    {"0": {"memory": [used_MiB, total_MiB], "load": 0..1, "temperature": C,
           "power": W, "energy": J (cumulative counter)}}

rocm-smi ``--json`` prints ``{"card<N>": {"<field name>": "<text>"}}`` with the field names
of its text output (e.g. ``GPU use (%)``, ``Current Socket Graphics Package Power (W)`` or
``Average Graphics Package Power (W)`` by generation, ``Accumulated Energy (uJ)``);
``xpu-smi dump`` prints CSV whose header names the metrics (``GPU Energy Consumed (J)``).
Standard library only (benchkit's rule).
"""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
from collections.abc import Sequence
from typing import Any

_MIB = 1024 * 1024

ROCM_ARGS = (
    "--showuse",
    "--showpower",
    "--showtemp",
    "--showmeminfo",
    "vram",
    "--showenergycounter",
    "--showproductname",
    "--json",
)
# xpu-smi dump metric ids: 0 utilisation (%), 1 power (W), 3 core temperature (C),
# 8 energy consumed (J), 18 memory used (MiB).
XPU_METRICS = "0,1,3,8,18"


def _number(text: Any) -> float | None:
    """``"133.0"``, ``"35.0°C"``, ``" 21.53"`` -> float; ``"N/A"``, ``""`` -> None."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    cleaned = text.strip().rstrip("%").replace("°C", "").replace("W", "").strip()
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _field(info: dict[str, Any], *, prefix: str = "", suffix: str = "") -> Any:
    """The first field whose name starts with ``prefix`` and ends with ``suffix``."""
    for key, value in info.items():
        if key.startswith(prefix) and key.endswith(suffix):
            return value
    return None


def rocm_product(info: dict[str, Any]) -> str | None:
    """The model name of a rocm-smi card (``Card Series``; older releases: ``Card series``)."""
    for key in ("Card Series", "Card series", "Card Model", "Card SKU"):
        value = info.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def parse_rocm(text: str) -> dict[str, dict[str, Any]]:
    """``rocm-smi <ROCM_ARGS>`` output -> ``{physical index: sample}`` (plus ``product``)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(data, dict):
        return out
    for card, info in data.items():
        if not (card.startswith("card") and card[4:].isdigit() and isinstance(info, dict)):
            continue
        sample: dict[str, Any] = {}
        used = _number(info.get("VRAM Total Used Memory (B)"))
        total = _number(info.get("VRAM Total Memory (B)"))
        if used is not None and total is not None:
            sample["memory"] = [used / _MIB, total / _MIB]
        load = _number(info.get("GPU use (%)"))
        if load is not None:
            sample["load"] = load / 100.0
        temp = _number(info.get("Temperature (Sensor junction) (C)"))
        if temp is None:
            temp = _number(info.get("Temperature (Sensor edge) (C)"))
        if temp is not None:
            sample["temperature"] = temp
        power = _number(_field(info, suffix="Graphics Package Power (W)"))
        if power is not None:
            sample["power"] = power
        energy = _number(info.get("Accumulated Energy (uJ)"))
        if energy is not None:
            sample["energy"] = energy / 1e6
        product = rocm_product(info)
        if product:
            sample["product"] = product
        out[card[4:]] = sample
    return out


def parse_xpu_dump(text: str) -> dict[str, dict[str, Any]]:
    """``xpu-smi dump -m <XPU_METRICS> -n 1`` CSV -> ``{device id: sample}`` (memory used
    only: the total comes from ``xpu-smi discovery``). The last row of a device wins."""
    rows = [line for line in text.splitlines() if line.strip()]
    if not rows:
        return {}
    reader = csv.reader(io.StringIO("\n".join(rows)), skipinitialspace=True)
    header = [h.strip() for h in next(reader, [])]
    if "DeviceId" not in header:
        return {}
    out: dict[str, dict[str, Any]] = {}
    columns = {
        "GPU Utilization (%)": ("load", 0.01),
        "GPU Power (W)": ("power", 1.0),
        "GPU Core Temperature (Celsius Degree)": ("temperature", 1.0),
        "GPU Energy Consumed (J)": ("energy", 1.0),
        "GPU Memory Used (MiB)": ("memory_used", 1.0),
    }
    for row in reader:
        cells = dict(zip(header, (c.strip() for c in row), strict=False))
        device = cells.get("DeviceId", "").strip()
        if not device.isdigit():
            continue
        sample: dict[str, Any] = {}
        for name, (key, scale) in columns.items():
            value = _number(cells.get(name))
            if value is not None:
                sample[key] = value * scale
        out[device] = sample
    return out


def parse_xpu_discovery(text: str) -> dict[str, dict[str, Any]]:
    """``xpu-smi discovery --json`` -> ``{device id: {"product", "total_mib"}}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for i, dev in enumerate(data.get("device_list", []) if isinstance(data, dict) else []):
        if not isinstance(dev, dict):
            continue
        key = str(dev.get("device_id", i))
        size = _number(dev.get("memory_physical_size_byte"))
        out[key] = {
            "product": dev.get("device_name") or "Intel GPU",
            "total_mib": size / _MIB if size else None,
        }
    return out


def parse_rocm_driver(text: str) -> str | None:
    """``rocm-smi --showdriverversion --json`` -> the driver version (None if absent)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    system = data.get("system") if isinstance(data, dict) else None
    value = system.get("Driver version") if isinstance(system, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def parse_query(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """``nvidia-smi``/``hl-smi --query-gpu=<fields> --format=csv,noheader,nounits`` ->
    one ``{field: text}`` per device row; rows of the wrong width are left out."""
    out = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        cells = [c.strip() for c in row]
        if len(cells) == len(fields):
            out.append(dict(zip(fields, cells, strict=True)))
    return out


def run_tool(argv: list[str], timeout: float = 20.0) -> str:
    """The tool's standard output, or "" when it is missing, fails or hangs."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""
