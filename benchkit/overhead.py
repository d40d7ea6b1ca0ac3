"""What instrumenting a script costs, per step, measured in the process that ran it.

A voirfile measures a script through probes, a wrapped loader, a wrapped function or a
line hook. Each costs time the script would not spend on its own, and that time is
inside the steps being timed. A figure that hides its own cost is not one a procurement
team can trust, so the session reports it (``overhead`` record, docs/reports.md).

Part of the cost is timed directly (the time inside benchkit's callbacks and between-step
decisions). The rest happens in code benchkit does not own: ptera's dispatch around each
probe firing, the trace hook's look at every function entry, and the wrapped loader's per-step
bookkeeping. Those are calibrated once, when the session closes: the same
machinery is run on a toy function a few thousand times against a bare call, on this
machine, in this process, and the median of a few rounds is kept.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

ROUNDS = 5
CALLS = 2000


def _toy(x: int) -> int:
    y = x + 1
    return y


def _per_call(run: Callable[[int], None], bare: Callable[[int], None]) -> float:
    """Median over rounds of (instrumented - bare) seconds per call, floored at 0."""
    extra = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        bare(CALLS)
        t1 = time.perf_counter()
        run(CALLS)
        t2 = time.perf_counter()
        extra.append(((t2 - t1) - (t1 - t0)) / CALLS)
    return max(0.0, statistics.median(extra))


def _calls(n: int) -> None:
    f = _toy
    for i in range(n):
        f(i)


def probe_dispatch() -> float:
    """Seconds ptera and voir's stream add to one firing of a subscribed probe (our
    callback excluded: it is timed where it runs)."""
    from ptera import probing

    def probed(n: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ptera's search touches deprecated torch names
            with probing("/benchkit.overhead/_toy > y") as probe:
                probe.subscribe(lambda data: None)
                t0 = time.perf_counter()
                _calls(n)
                probed.seconds = time.perf_counter() - t0  # type: ignore[attr-defined]

    return _inner(probed)


def trace_entry() -> float:
    """Seconds a `benchkit.steps.LineTracer` adds to one function entry elsewhere."""
    from benchkit.steps import LineTracer

    def traced(n: int) -> None:
        tracer = LineTracer(__file__, 1, lambda frame: None)
        tracer.install()
        try:
            t0 = time.perf_counter()
            _calls(n)
            traced.seconds = time.perf_counter() - t0  # type: ignore[attr-defined]
        finally:
            tracer.uninstall()

    return _inner(traced)


def _lines(n: int) -> None:
    i = 0
    while i < n:
        i += 1
    if i < 0:  # never true: `trace_line` watches the line below, which never runs
        raise AssertionError(i)


def trace_line() -> float:
    """Seconds a `benchkit.steps.LineTracer` adds to one line event of a frame it watches
    (a line inside ``train`` sends every line of ``train`` through the hook)."""
    from benchkit.steps import LineTracer

    watched = _lines.__code__.co_firstlineno + 5
    n = CALLS * 10
    extra = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        _lines(n)
        bare = time.perf_counter() - t0
        tracer = LineTracer(__file__, watched, lambda frame: None)
        tracer.hits = 1  # count every event, as after the first hit of a real run
        tracer.install()
        try:
            t0 = time.perf_counter()
            _lines(n)
            traced = time.perf_counter() - t0
        finally:
            tracer.uninstall()
        extra.append((traced - bare) / max(1, tracer.lines))
    return max(0.0, statistics.median(extra))


def _inner(run: Callable[[int], None]) -> float:
    """Like `_per_call`, timing only the loop inside ``run`` (its set-up excluded)."""
    extra = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        _calls(CALLS)
        bare = time.perf_counter() - t0
        run(CALLS)
        extra.append((run.seconds - bare) / CALLS)  # type: ignore[attr-defined]
    return max(0.0, statistics.median(extra))


def loader_step() -> float:
    """Seconds a `benchkit.timing.TimedIterator` adds to one step of a host loop."""
    from benchkit.channel import DataWriter
    from benchkit.timing import TimedIterator
    from benchkit.window import WindowSettings

    settings = WindowSettings(warmup_min=3600, warmup_max=3600, min=3600, max=7200)

    def timed(n: int) -> None:
        it = TimedIterator(
            range(n), batch_size=1, window=settings, writer=DataWriter(fd=None), monitor=False
        )
        for _ in it:
            pass

    def bare(n: int) -> None:
        for _ in range(n):
            pass

    return _per_call(timed, bare)


_cache: dict[str, float] = {}


def cost(kind: str) -> float:
    """Calibrated seconds per unit of ``kind``: ``probe``, ``trace``, ``line`` or
    ``loader``."""
    if kind not in _cache:
        measure: dict[str, Callable[[], float]] = {
            "probe": probe_dispatch,
            "trace": trace_entry,
            "line": trace_line,
            "loader": loader_step,
        }
        try:
            _cache[kind] = measure[kind]()
        except Exception:  # noqa: BLE001 - a calibration must never break a run
            _cache[kind] = float("nan")
    return _cache[kind]


def record(
    *,
    steps: int,
    step_seconds: float,
    timed_seconds: float,
    counts: dict[str, int],
) -> dict[str, Any] | None:
    """The ``overhead`` payload: seconds of instrumentation per step and their share.

    ``timed_seconds``: instrumentation time measured directly (callbacks, decisions);
    ``counts``: how many units of each calibrated kind happened (probe firings, traced
    function entries, line events of traced frames, loader steps); ``step_seconds``:
    total time of the ``steps``.
    """
    if steps <= 0 or step_seconds <= 0:
        return None
    parts = {"timed_s": timed_seconds / steps}
    calibrated = 0.0
    for kind, n in counts.items():
        if n <= 0:
            continue
        unit = cost(kind)
        if unit == unit:  # not NaN
            parts[f"{kind}_s"] = unit * n / steps
            calibrated += unit * n
    per_step = (timed_seconds + calibrated) / steps
    step_s = step_seconds / steps
    return {
        "per_step_s": per_step,
        "step_s": step_s,
        "fraction": per_step / step_s,
        "steps": steps,
        "fires": int(counts.get("probe", 0)),
        "counts": {k: int(v) for k, v in counts.items() if v},
        "parts": parts,
    }
