"""Brace placeholders and value helpers in argv (docs/config.md "Brace placeholders"), resolved at launch.

``{name}`` is replaced when `name` is one of the names of `placeholder_values`; any other
brace text is left alone (JSON arguments survive), with a warning when it is *almost* one
of ours (``{n_workers}``). An argument that is exactly a helper call (``auto``,
``auto_batch``, ``expr``) is then evaluated by the restricted evaluator of
`milabench.config.safe_eval`, never `eval`. In ``name=value`` arguments only the
right-hand side is resolved. What each placeholder and helper gives: the page above.
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Mapping
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.config.options import get_bool, get_option
from milabench.config.safe_eval import UnsafeExpression, evaluate
from milabench.errors import ConfigError

DEVICE_NAME = {"cuda": "cuda", "rocm": "cuda", "xpu": "xpu", "hpu": "hpu", "cpu": "cpu"}
# torch.distributed backend names: ROCm's RCCL is reached through the "nccl" backend,
# Intel GPUs through "xccl" (torch >= 2.8), Gaudi through "hccl" (its plugin registers it).
CCL = {"cuda": "nccl", "rocm": "nccl", "xpu": "xccl", "hpu": "hccl", "cpu": "gloo"}
DIR_NAMES = ("base", "venv", "code", "extra", "data", "runs", "cache")
REFERENCE_CAPACITY_MIB = 81920

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HELPER = re.compile(r"^\s*(auto|auto_batch|expr)\((.*)\)\s*$", re.S)
_ASSIGNMENT = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(.*)$", re.S)


class PlaceholderWarning(UserWarning):
    """A ``{name}`` in argv looks like a misspelled placeholder."""


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def cpu_count(system: dict[str, Any]) -> int:
    """Usable CPUs: option ``cpu.total_count`` or the node's count, minus reserved cores."""
    cpu = system.get("cpu") or {}
    total = get_option(system, "cpu.total_count", None)
    if total is None:
        total = cpu.get("count") or os.cpu_count() or 1
    reserved = _int(get_option(system, "cpu.reserved_cores", 0), 0)
    return max(1, _int(total, 1) - reserved)


def placeholder_values(
    entry: Entry | Mapping[str, Any],
    system: dict[str, Any],
    device: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Name -> value table for the brace placeholders of one process."""
    entry = as_entry(entry)
    values: dict[str, Any] = {
        k: v
        for k, v in system.items()
        if isinstance(k, str) and isinstance(v, str | int | float | bool)
    }
    arch = str(system.get("arch") or "cpu")
    gpu_count = _int((system.get("gpu") or {}).get("count"), 0)
    cpus = cpu_count(system)
    per_gpu = cpus // max(gpu_count, 1)
    n_workers = get_option(system, "cpu.n_workers", None)
    if n_workers is None:
        low = _int(get_option(system, "cpu.min", 2), 2)
        high = _int(get_option(system, "cpu.max", 16), 16)
        n_workers = min(max(per_gpu, low), high)
    values.update(
        cpu_count=cpus,
        gpu_count=gpu_count,
        cpu_per_gpu=per_gpu,
        n_worker=_int(n_workers, 2),
        arch=arch,
        device_name=DEVICE_NAME.get(arch, "cpu"),
        ccl=CCL.get(arch, "gloo"),
        milabench_name=entry.name,
    )
    for name in DIR_NAMES:
        values[f"milabench_{name}"] = str(entry.dirs.get(name) or entry.definition or "")
    if device is not None:
        values["device"] = device
    if extra:
        values.update(extra)
    return values


def auto_batch(default: Any, system: dict[str, Any]) -> Any:
    """Batch size scaled to the accelerator's memory when option ``batch_resize`` is on."""
    from milabench.config.system import capacity_mib

    if not get_bool(system, "batch_resize", False):
        return default
    capacity = capacity_mib((system.get("gpu") or {}).get("capacity"))
    reference = capacity_mib(get_option(system, "batch_resize_reference", REFERENCE_CAPACITY_MIB))
    if not capacity or not reference or not isinstance(default, int | float):
        return default
    return max(1, int(default * capacity / reference))


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class _Resolver:
    def __init__(
        self,
        entry: Entry | Mapping[str, Any],
        system: dict[str, Any],
        values: dict[str, Any],
        key: str = "argv",
    ):
        self.entry = entry
        self.system = system
        self.values = values
        self.key = key
        self.functions = {
            "auto": self._auto,
            "auto_batch": lambda default: auto_batch(default, system),
            "expr": lambda value: value,
            "min": min,
            "max": max,
            "int": int,
            "round": round,
        }

    def _auto(self, value: Any, default: Any) -> Any:
        return value if get_bool(self.system, "cpu.auto", False) else default

    def substitute(self, text: str) -> str:
        def repl(m: re.Match) -> str:
            name = m.group(1)
            if name in self.values:
                return _format(self.values[name])
            close = difflib.get_close_matches(name, list(self.values), n=1, cutoff=0.8)
            if close:
                warnings.warn(
                    f"{self.entry.name or '?'}: {self.key}: unknown placeholder '{{{name}}}' "
                    f"(did you mean '{{{close[0]}}}'?); left as is",
                    PlaceholderWarning,
                    stacklevel=4,
                )
            return m.group(0)

        return _PLACEHOLDER.sub(repl, text)

    def value(self, text: str) -> str:
        text = self.substitute(text)
        helper = _HELPER.match(text)
        if not helper:
            return text
        try:
            result = evaluate(
                f"{helper.group(1)}({helper.group(2)})",
                self.values,
                self.functions,
                allow_compare=False,
            )
        except UnsafeExpression as err:
            raise ConfigError.at(
                self.entry.config_file, self.entry.name, "argv", f"{text!r}: {err}"
            ) from None
        return _format(result)

    def item(self, item: str) -> str:
        assignment = _ASSIGNMENT.match(item)
        if assignment:
            return f"{assignment.group(1)}={self.value(assignment.group(2))}"
        return self.value(item)


def resolve_argv(
    argv: list[str],
    entry: Entry | Mapping[str, Any],
    system: dict[str, Any],
    *,
    device: int | None = None,
    extra: dict[str, Any] | None = None,
) -> list[str]:
    """`argv` with placeholders and helpers resolved for one process."""
    entry = as_entry(entry)
    resolver = _Resolver(entry, system, placeholder_values(entry, system, device, extra))
    return [resolver.item(str(item)) for item in argv]


def resolve_text(
    text: str,
    entry: Entry | Mapping[str, Any],
    system: dict[str, Any],
    *,
    key: str,
    device: int | None = None,
) -> str:
    """Brace placeholders of one string that is not an argument (a path such as the
    entry's ``working_dir``): the same names as in argv, no helpers, no ``name=value``
    splitting. Warnings for near-misses name `key`."""
    entry = as_entry(entry)
    resolver = _Resolver(entry, system, placeholder_values(entry, system, device), key)
    return resolver.substitute(str(text))
