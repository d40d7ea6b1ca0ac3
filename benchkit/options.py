"""The measurement budget and settings of the running benchmark.

A benchmark process learns them from the orchestrator through ``MILABENCH_CONFIG`` (the
JSON of its resolved entry; the ``voir.options`` mapping holds ``stop``, ``skip``,
``interval``, ``gpu_poll``), and a script run by hand gets sane defaults. Explicit
arguments always win, so a benchmark (or a test) can pin a value. Environment variables
``BENCHKIT_STOP``/``BENCHKIT_SKIP``/``BENCHKIT_INTERVAL``/``BENCHKIT_GPU_POLL`` override the
entry, which is handy when debugging a benchmark outside the orchestrator.

Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields, replace
from typing import Any

DEFAULT_STOP = 60
DEFAULT_SKIP = 5
DEFAULT_INTERVAL = 1.0
DEFAULT_GPU_POLL = 1.0

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_SECONDS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``1``, ``0.5``, ``"1s"``, ``"250ms"``, ``"2m"`` (config files use units)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (use e.g. 1, 0.5, '1s', '250ms')")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _parse_count(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, not {value!r}") from None
    if number != int(number) or number < 0:
        raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    return int(number)


@dataclass(frozen=True)
class BenchOptions:
    """What the instrumentation needs to know about the run.

    * ``stop``: timed observations to collect before ending the benchmark (0: no budget,
      run until the script ends by itself).
    * ``skip``: warm-up observations before timing starts; they are neither timed nor
      recorded.
    * ``interval``: seconds between progress records and lazy flushes of the writer.
    * ``gpu_poll``: seconds between two samples of the background monitor (0: no monitor).
    """

    stop: int = DEFAULT_STOP
    skip: int = DEFAULT_SKIP
    interval: float = DEFAULT_INTERVAL
    gpu_poll: float = DEFAULT_GPU_POLL

    @property
    def budget(self) -> int:
        """Observations (warm-up included) after which the benchmark ends; 0 = unbounded."""
        return self.stop + self.skip if self.stop else 0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _coerce(name: str, value: Any) -> Any:
    if name in ("stop", "skip"):
        return _parse_count(value, name)
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"{name} must not be negative, not {value!r}")
    return seconds


def entry_from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The resolved entry passed by the orchestrator, or ``{}`` when run by hand.

    ``MILABENCH_CONFIG`` holds JSON in benchmark processes; in the user's own shell it may
    be the path of a suite file, which is not ours to read here, so anything that is not
    a JSON object is ignored.
    """
    env = os.environ if environ is None else environ
    raw = env.get("MILABENCH_CONFIG", "").strip()
    if not raw.startswith("{"):
        return {}
    try:
        entry = json.loads(raw)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def options_from_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """The raw ``voir.options`` mapping of an entry (``{}`` when it has none)."""
    voir = entry.get("voir") if isinstance(entry, dict) else None
    opts = voir.get("options") if isinstance(voir, dict) else None
    return dict(opts) if isinstance(opts, dict) else {}


def load_options(
    *,
    stop: int | None = None,
    skip: int | None = None,
    interval: float | str | None = None,
    gpu_poll: float | str | None = None,
    environ: dict[str, str] | None = None,
) -> BenchOptions:
    """Options in force: explicit arguments > ``BENCHKIT_*`` env > entry > defaults.

    Raises ``ValueError`` naming the option when a value cannot be understood: a budget
    that silently falls back to a default would make a run measure something else.
    """
    env = os.environ if environ is None else environ
    layers: list[dict[str, Any]] = [options_from_entry(entry_from_env(env))]
    layers.append(
        {
            name: env[f"BENCHKIT_{name.upper()}"]
            for name in ("stop", "skip", "interval", "gpu_poll")
            if env.get(f"BENCHKIT_{name.upper()}", "") != ""
        }
    )
    explicit = {"stop": stop, "skip": skip, "interval": interval, "gpu_poll": gpu_poll}
    layers.append({k: v for k, v in explicit.items() if v is not None})

    result = BenchOptions()
    known = {f.name for f in fields(BenchOptions)}
    for layer in layers:
        values = {}
        for name, value in layer.items():
            name = name.replace("-", "_")
            if name not in known or value is None:
                continue
            values[name] = _coerce(name, value)
        result = replace(result, **values)
    return result


_cached: BenchOptions | None = None


def options() -> BenchOptions:
    """The process-wide options from the environment (read once)."""
    global _cached
    if _cached is None:
        _cached = load_options()
    return _cached
