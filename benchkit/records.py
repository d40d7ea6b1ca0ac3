"""The records a step timer writes to the data channel (docs/run-data.md section 3).

`Records` is the only writer of a timer's records, all with the timer's ``task``:

* ``{"task": t, "rate": r, "units": u, "time": s}``: one per measured step, or per
  group of steps (`RateGrouper`);
* ``{"task": t, "loss": x, "time": s}``: a NaN or infinite loss as a JSON string;
* ``{"task": "early_stop", "progress": [done, total]}`` (`progress_of`);
* ``{"task": t, "warmup": {...}, "time": s}`` when measurement begins;
* ``{"task": t, "window": {...}, "time": s}`` when it ends, then the
  ``{"$event": "stop", "$data": {...}}`` event.

Rates and losses are formatted here rather than through `json` for speed (a conversion
formats one record per step): the keys are fixed, the strings JSON-encoded once, and a
finite float printed with ``g``/``f`` is valid JSON. Rates keep 7 significant digits,
losses 8, timestamps microseconds.
"""

from __future__ import annotations

import json
import time

from benchkit.channel import DataWriter
from benchkit.window import Window, WindowSettings

_INF = float("inf")

# Shortest time a rate record covers under a time window: shorter steps are grouped.
MIN_RECORD_S = 0.001


class RateGrouper:
    """Turns converted steps into (rates, durations, stamps) of records lasting at least
    ``threshold`` seconds each.

    A step of 20 ms is one record. Steps of a few microseconds (a tight loop
    under a 30 s window) are grouped until their durations add up to the threshold, so a
    window writes at most ~1,000 records a second whatever the step; the rate of a group
    is its items over its time (docs/run-data.md section 3).
    A partial group waits for the next call, except a ``final`` one. A threshold of 0
    (step counts only, no time window) makes every step a record: the user's count then
    bounds the records, and one record per step is the contract.
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.partial = (0.0, 0.0)  # items and seconds of steps not yet in a record
        self.partial_stamp = 0.0

    def group(
        self, sizes: list[float], durations: list[float], stamps: list[float], final: bool
    ) -> tuple[list[float], list[float], list[float]]:
        threshold = self.threshold
        acc_size, acc_time = self.partial
        rates: list[float] = []
        spans: list[float] = []
        times: list[float] = []
        for size, duration, stamp in zip(sizes, durations, stamps, strict=False):
            if not duration > 0 or size != size:
                continue
            acc_size += size
            acc_time += duration
            if acc_time >= threshold:
                rate = acc_size / acc_time
                if rate != _INF:
                    rates.append(rate)
                    spans.append(acc_time)
                    times.append(stamp)
                acc_size = acc_time = 0.0
            self.partial_stamp = stamp
        if final and acc_time > 0:
            rates.append(acc_size / acc_time)
            spans.append(acc_time)
            times.append(self.partial_stamp)
            acc_size = acc_time = 0.0
        self.partial = (acc_size, acc_time)
        return rates, spans, times


def progress_of(
    settings: WindowSettings, window: Window, count: int, budget: int
) -> list[float] | None:
    """``[done, total]``: measured seconds of the window's max, or steps of a count
    budget; None when neither bounds the run."""
    if settings.max > 0:
        total = round(settings.max, 1)
        if window.done and window.reason in ("precision", "stop_count", "max_time", "unreachable"):
            done = total  # the window is complete
        elif window.measuring or window.done:
            done = min(round(window.measured_seconds, 1), total)
        else:
            done = 0.0
        return [done, total]
    if budget:
        return [min(count, budget), budget]
    return None


def json_float(value: float) -> str:
    """A float as strict JSON: NaN/infinities become strings, as the channel writes them
    (the report reads them back as floats and fails a NaN loss)."""
    if value != value:
        return '"NaN"'
    if value in (_INF, -_INF):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return f"{value:.8g}"  # 8 significant digits: plenty for a loss, faster than repr


class Records:
    """A timer's records on ``writer`` (see module doc). ``epoch_offset`` turns the
    ``perf_counter`` times of losses into epoch seconds."""

    def __init__(self, writer: DataWriter, task: str, units: str, epoch_offset: float) -> None:
        self.writer = writer
        self.task = task
        self.units = units
        self.epoch_offset = epoch_offset
        self._rate_head = '{"task": ' + json.dumps(task) + ', "rate": '
        self._rate_tail = ', "units": ' + json.dumps(units) + ', "time": '
        self._loss_head = '{"task": ' + json.dumps(task) + ', "loss": '

    @property
    def enabled(self) -> bool:
        return self.writer.enabled

    def flush(self) -> None:
        self.writer.flush()

    def rates(self, rates: list[float], stamps: list[float]) -> None:
        """One ``rate`` record per value; ``stamps`` in epoch seconds."""
        if not rates:
            return
        head, tail = self._rate_head, self._rate_tail
        self.writer.write_encoded(
            [
                f"{head}{rate:.7g}{tail}{stamp:.6f}}}"
                for rate, stamp in zip(rates, stamps, strict=False)
            ]
        )

    def losses(self, values: list[float], times: list[float]) -> None:
        """One ``loss`` record per value; ``times`` from ``perf_counter``."""
        offset = self.epoch_offset
        head = self._loss_head
        self.writer.write_encoded(
            [
                f'{head}{json_float(value)}, "time": {when + offset:.6f}}}'
                for value, when in zip(values, times, strict=False)
            ]
        )

    def progress(self, progress: list[float] | None) -> None:
        if progress is not None:
            self.writer.write({"task": "early_stop", "progress": progress})

    def warmup(self, window: Window) -> None:
        """Warm-up is over: what it looked like."""
        self.writer.write(
            {"task": self.task, "warmup": window.warmup_record(), "time": time.time()}
        )

    def window(self, window: Window) -> None:
        """The window is over: its summary."""
        self.writer.write({"task": self.task, "window": window.summary(), "time": time.time()})

    def stop(self, window: Window, stop: int, skip: int) -> None:
        """The ``stop`` event: the measurement is over, the process may be ended."""
        self.writer.event(
            "stop",
            {
                "reason": window.reason,
                "observations": window.observations,
                "warmup_observations": len(window.warmup_durations),
                "stop": stop,
                "skip": skip,
                "task": self.task,
            },
        )
