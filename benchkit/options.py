"""The measurement window and settings of the running benchmark.

A benchmark process learns them from the orchestrator through ``MILABENCH_CONFIG`` (the
JSON of its resolved entry): the ``measure`` mapping holds the time window
(docs/measurement.md: ``warmup_min``, ``warmup_max``, ``settle``, ``min``, ``max``,
``precision``, ``min_observations``, ``required_observations``, ``startup``,
``stop_unreachable``), and the
``voir.options`` mapping holds ``stop``, ``skip`` (optional step-count bounds, upstream's
format), ``interval``, ``gpu_poll``. A script run by hand gets the same defaults as the
suites. Explicit arguments always win, so a benchmark (or a test) can pin a value.
Environment variables ``BENCHKIT_STOP``/``BENCHKIT_SKIP``/``BENCHKIT_INTERVAL``/
``BENCHKIT_GPU_POLL`` and ``BENCHKIT_MEASURE_<KEY>`` (e.g. ``BENCHKIT_MEASURE_MAX=5s``)
override the entry, which is handy when debugging a benchmark outside the orchestrator.

`parse_measure` is also what milabench uses to validate a suite's ``measure`` blocks and
to derive each entry's process timeout (`MeasureSettings.timeout`), so the benchmark and
the orchestrator can never read the same block differently.

Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields, replace
from typing import Any

from benchkit.window import WindowSettings

DEFAULT_STOP = 0  # no step-count bound: the time window ends the measurement
DEFAULT_SKIP = 0
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
class MeasureSettings(WindowSettings):
    """The ``measure`` block of an entry (docs/measurement.md section 1), in seconds.

    The window's own settings and their defaults are `WindowSettings`' (one place);
    this adds what only the orchestrator needs. ``config/base.yaml`` writes the same
    values out (a test checks they agree) so that a suite file shows what it runs with.
    ``stop``/``skip`` are not part of the block: they come from ``voir.options``.
    """

    required_observations: int = 1
    startup: float = 120.0

    @property
    def timeout(self) -> float:
        """Process timeout derived from the budget: start-up margin + warm-up + window.

        0 when the window has no time bound (``max: 0``): the entry's ``max_duration``
        (or the runner's default) applies then.
        """
        if self.max <= 0:
            return 0.0
        return self.startup + self.warmup_max + self.max

    def window(self, stop: int = 0, skip: int = 0) -> WindowSettings:
        values = {f.name: getattr(self, f.name) for f in fields(WindowSettings)}
        return WindowSettings(**{**values, "stop": stop, "skip": skip})

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in MEASURE_KEYS}


_SECONDS = ("warmup_min", "warmup_max", "min", "max", "startup")
_FRACTIONS = ("settle", "precision")
_COUNTS = ("min_observations", "required_observations")
_FLAGS = ("stop_unreachable",)
MEASURE_KEYS = _SECONDS + _FRACTIONS + _COUNTS + _FLAGS
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _measure_value(key: str, value: Any) -> Any:
    if key in _SECONDS:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ValueError(f"measure.{key}: {exc}") from None
        if seconds < 0:
            raise ValueError(f"measure.{key} must not be negative, not {value!r}")
        return seconds
    if key in _FRACTIONS:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"measure.{key} must be a number, not {value!r}")
        text = str(value).strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise ValueError(
                f"measure.{key} must be a number such as 0.02 or 2%, not {value!r}"
            ) from None
        if not 0 < number < 1:
            raise ValueError(f"measure.{key} must be between 0 and 1 (0.02 = 2%), not {value!r}")
        return number
    if key in _FLAGS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"measure.{key} must be true or false, not {value!r}")
    return _parse_count(value, f"measure.{key}")


def parse_measure(block: Any, base: MeasureSettings | None = None) -> MeasureSettings:
    """``MeasureSettings`` from an entry's ``measure`` mapping (missing keys: ``base``).

    Raises ``ValueError`` naming ``measure.<key>`` for an unknown key or a value that
    cannot be read, and for windows that contradict themselves (``min`` > ``max``).
    """
    result = base or MeasureSettings()
    if block is None:
        return result
    if not isinstance(block, dict):
        raise ValueError(f"measure must be a mapping of settings, not {block!r}")
    values = {}
    for key, value in block.items():
        if key not in MEASURE_KEYS:
            import difflib

            close = difflib.get_close_matches(str(key), MEASURE_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(
                f"measure.{key}: unknown setting{hint}; known: {', '.join(MEASURE_KEYS)}"
            )
        if value is None:
            continue
        values[key] = _measure_value(key, value)
    result = replace(result, **values)
    if result.max and result.min > result.max:
        raise ValueError(
            f"measure.min ({result.min:g} s) is longer than measure.max ({result.max:g} s)"
        )
    if result.warmup_max and result.warmup_min > result.warmup_max:
        raise ValueError(
            f"measure.warmup_min ({result.warmup_min:g} s) is longer than "
            f"measure.warmup_max ({result.warmup_max:g} s)"
        )
    return result


def measure_from_entry(
    entry: dict[str, Any], environ: dict[str, str] | None = None
) -> MeasureSettings:
    """The entry's ``measure`` block, with ``BENCHKIT_MEASURE_<KEY>`` overrides."""
    env = os.environ if environ is None else environ
    settings = parse_measure(entry.get("measure") if isinstance(entry, dict) else None)
    overrides = {
        key: env[f"BENCHKIT_MEASURE_{key.upper()}"]
        for key in MEASURE_KEYS
        if env.get(f"BENCHKIT_MEASURE_{key.upper()}", "") != ""
    }
    return parse_measure(overrides, settings) if overrides else settings


@dataclass(frozen=True)
class BenchOptions:
    """What the instrumentation needs to know about the run.

    * ``measure``: the time window (`MeasureSettings`), what ends a measurement;
    * ``stop``: measured observations at most (0: no count bound), an extra upper bound;
    * ``skip``: warm-up observations at least (timed to see the warm-up settle, never
      reported);
    * ``interval``: seconds between progress records and lazy flushes of the writer;
    * ``gpu_poll``: seconds between two samples of the background monitor (0: no monitor).
    """

    stop: int = DEFAULT_STOP
    skip: int = DEFAULT_SKIP
    interval: float = DEFAULT_INTERVAL
    gpu_poll: float = DEFAULT_GPU_POLL
    measure: MeasureSettings = MeasureSettings()

    @property
    def budget(self) -> int:
        """Observations (warm-up included) after which a count-bounded run ends; 0 = none."""
        return self.stop + self.skip if self.stop else 0

    @property
    def window(self) -> WindowSettings:
        return self.measure.window(stop=self.stop, skip=self.skip)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["measure"] = self.measure.as_dict()
        return out


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
    measure: MeasureSettings | dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> BenchOptions:
    """Options in force: explicit arguments > ``BENCHKIT_*`` env > entry > defaults.

    ``measure`` may be `MeasureSettings` or a partial mapping applied over the entry's.

    Raises ``ValueError`` naming the option when a value cannot be understood: a budget
    that silently falls back to a default would make a run measure something else.
    """
    env = os.environ if environ is None else environ
    entry = entry_from_env(env)
    layers: list[dict[str, Any]] = [options_from_entry(entry)]
    layers.append(
        {
            name: env[f"BENCHKIT_{name.upper()}"]
            for name in ("stop", "skip", "interval", "gpu_poll")
            if env.get(f"BENCHKIT_{name.upper()}", "") != ""
        }
    )
    explicit = {"stop": stop, "skip": skip, "interval": interval, "gpu_poll": gpu_poll}
    layers.append({k: v for k, v in explicit.items() if v is not None})

    settings = measure_from_entry(entry, env)
    if isinstance(measure, MeasureSettings):
        settings = measure
    elif measure is not None:
        settings = parse_measure(measure, settings)
    result = BenchOptions(measure=settings)
    known = {f.name for f in fields(BenchOptions)} - {"measure"}
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
