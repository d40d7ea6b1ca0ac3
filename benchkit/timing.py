"""Throughput measurement of a training loop, inside a time-bounded window.

`TimedIterator` wraps a data loader. At each step boundary (when the loop asks for the
next batch) it records one timestamp: a device event on accelerators (CUDA, XPU, ...),
``time.perf_counter()`` on CPU. Nothing is converted, synchronised or written inside the
step; a few times a second (every ``CHECK_PERIOD``), between two steps, the completed
steps are converted into rates (device events are *queried*, never synchronised, so the
device keeps its queue), written, and handed to the measurement window
(`benchkit.window.Window`): warm-up until the step time settles, then measurement until
the 95% interval of the rate is narrow enough, between ``measure.min`` and
``measure.max`` seconds (docs/measurement.md). So a timeout, Ctrl-C or crash loses at
most a fraction of a second of what was measured. The first batch of every epoch is
fetched before the clock starts (creating a loader iterator is costly and would be
amortised in a real training run); warm-up steps are timed but never reported.

Typical use::

    it = TimedIterator(loader, device=device)            # budget from benchkit.options
    for epoch in range(epochs):
        for x, y in it:
            loss = step(x, y)
            it.record_loss(loss)                         # kept lazily, .item() at flush
        if it.done:                                      # budget spent: leave the epochs
            break

When the window ends the iterator flushes, writes the ``window`` record and the ``stop``
event and simply stops yielding (``it.done`` becomes true; later epochs yield nothing). Code that cannot
test ``it.done`` (deep loops, third-party scripts) passes ``on_stop="raise"`` and wraps its
main function with `benchkit.run_main` / ``with benchkit.budget():``, which turn the
`StopProgram` into exit code 0 (under voir, the overseer does it by itself).

In a distributed run every rank iterates and times its own steps. Decisions must be the
same on every rank (a rank that stops while the others wait in an all-reduce would hang
the job), so ranks meet at step counts they agree on (about every ``CHECK_PERIOD``): the
per-step batch sizes are summed over the ranks (rank 0 reports the global throughput,
and only rank 0 writes), rank 0's window decides, and one small all-reduce carries the
decision and the next meeting point. On NCCL jobs these collectives go through a gloo
group, so they never synchronise the device.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from benchkit.channel import DataWriter, default_writer
from benchkit.options import MeasureSettings, load_options
from benchkit.stopping import StopProgram
from benchkit.window import Window, WindowSettings

_INF = float("inf")

# Seconds between two conversions of completed steps (and window decisions): rates reach
# the run file at least this often, and a window ends at most this late.
CHECK_PERIOD = 0.25
# Shortest time a rate record covers: shorter steps are grouped (see `_coalesce`).
MIN_RECORD_S = 0.001


def default_batch_size(batch: Any) -> int:
    """Items in a batch: ``len`` of the batch, or of its first element for tuples/lists
    (``(inputs, targets)``) and of its first value for mappings (``{"input_ids": ...}``)
    when that element is itself sized."""
    if isinstance(batch, tuple | list) and batch:
        first = batch[0]
        return len(first) if hasattr(first, "__len__") else len(batch)
    if isinstance(batch, dict) and batch:
        first = next(iter(batch.values()))
        return len(first) if hasattr(first, "__len__") else len(batch)
    return len(batch)


def _torch() -> Any:
    """The torch module if the benchmark already imported it (never imported by us)."""
    return sys.modules.get("torch")


class _EventClock:
    """Device events of one accelerator back-end (``torch.cuda``, ``torch.xpu``, ...)."""

    def __init__(self, module: Any, kind: str) -> None:
        self.kind = kind
        self.module = module
        self.Event = module.Event

    def record(self) -> Any:
        event = self.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    @staticmethod
    def completed(event: Any) -> bool:
        """Whether the device has passed ``event`` (a query: never blocks)."""
        return bool(event.query())

    @staticmethod
    def seconds(start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0


def _device_kind(device: Any) -> str:
    """``"cpu"``, ``"cuda"``, ``"xpu"``, ... from a string, a torch.device, or None (auto)."""
    if device is None:
        torch = _torch()
        if torch is None:
            return "cpu"
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available():
            return "cuda"
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and getattr(xpu, "is_available", lambda: False)():
            return "xpu"
        return "cpu"
    kind = getattr(device, "type", None) or str(device)
    return kind.split(":", 1)[0].lower()


def _event_clock(kind: str) -> _EventClock | None:
    """Event-based clock for an accelerator, or None for host wall-clock timing."""
    if kind == "cpu":
        return None
    torch = _torch()
    if torch is None:
        try:
            import torch  # noqa: F811 - the benchmark asked for a device: torch is there
        except ImportError:
            return None
    module = getattr(torch, "cuda" if kind in ("cuda", "rocm", "hip") else kind, None)
    if module is None or not hasattr(module, "Event"):
        return None
    return _EventClock(module, kind)


def _distributed() -> tuple[int, int, Any]:
    """(rank, world_size, torch.distributed or None) of an initialised process group."""
    torch = _torch()
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), dist
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return rank, world, None


class TimedIterator:
    """Wrap ``loader`` and report its throughput as ``rate`` records (see module doc).

    Arguments:
        loader: any re-iterable (a DataLoader); each ``iter()`` is one epoch.
        batch_size: items per batch: an int, a callable ``batch -> int`` (e.g. tokens, for
            ``units="Tok/s"``), or None for `default_batch_size`. ``batch_size_fn`` is
            an alias.
        device: where the work runs (``"cuda"``, ``torch.device``, ...); None guesses from
            torch if the benchmark imported it.
        stop, skip: optional step-count bounds (measured steps at most, warm-up steps at
            least); None reads the options (`benchkit.options`).
        measure: `benchkit.options.MeasureSettings` or a partial mapping over the entry's
            ``measure`` block; ``window`` (`benchkit.window.WindowSettings`) replaces
            the whole window when given (tests use it for exact step counts).
        writer: a `DataWriter`; None uses the process-wide one (on rank 0 only).
        rank, world_size: None reads torch.distributed (or ``RANK``/``WORLD_SIZE``).
        task, units: the record's ``task`` and ``units``.
        interval: seconds between ``progress`` records; None reads the options.
        on_stop: ``"end"`` (stop yielding), ``"raise"`` (raise `StopProgram`), or a
            callable called once the stop was written (e.g. voir's ``ov.stop``).
        monitor: start a background `benchkit.monitors.Monitor` (None: when the writer
            is enabled and ``gpu_poll`` > 0).
        max_pending: steps kept unconverted at most (bounds memory when steps are tiny).
    """

    def __init__(
        self,
        loader: Iterable[Any],
        *,
        batch_size: int | Callable[[Any], int] | None = None,
        batch_size_fn: Callable[[Any], int] | None = None,
        device: Any = None,
        stop: int | None = None,
        skip: int | None = None,
        measure: MeasureSettings | dict[str, Any] | None = None,
        window: WindowSettings | None = None,
        writer: DataWriter | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        task: str = "train",
        units: str = "items/s",
        interval: float | None = None,
        on_stop: str | Callable[[], Any] = "end",
        monitor: bool | None = None,
        max_pending: int = 10_000,
    ) -> None:
        opts = load_options(stop=stop, skip=skip, interval=interval, measure=measure)
        self.options = opts
        self.loader = loader
        self.stop = opts.stop
        self.skip = opts.skip
        self.budget = opts.budget
        self.interval = opts.interval
        self.gpu_poll = opts.gpu_poll
        self.settings = window if window is not None else opts.window
        self.window = Window(self.settings)
        self.task = task
        self.units = units
        self.on_stop = on_stop
        self.max_pending = max(1, int(max_pending))
        if batch_size is None:
            batch_size = batch_size_fn
        self._batch_size = batch_size

        auto_rank, auto_world, self._dist = _distributed()
        self.rank = auto_rank if rank is None else rank
        self.world_size = auto_world if world_size is None else world_size
        if self.rank == 0:
            self.writer: DataWriter | None = writer if writer is not None else default_writer()
        else:
            self.writer = None
        self._want_monitor = monitor
        self._monitor: Any = None
        # Ranks decide together only when there is a process group to decide with.
        self._collective = self._dist is not None and self.world_size > 1
        self._group = _control_group(self._dist) if self._collective else None

        self._kind = _device_kind(device)
        self._clock = _event_clock(self._kind)

        self.done = False
        self.count = 0  # steps issued so far (warm-up included)
        self.epochs = 0
        self._measure_from: int | None = None  # index of the first measured step
        self._first_pending = 0  # index of the step at the head of the pending lists
        self._starts: list[Any] = []
        self._ends: list[Any] = []
        self._sizes: list[Any] = []
        self._global: list[float] = []  # summed sizes of the head of the pending steps
        # Losses and their times in two lists: a tuple per step would be one more object
        # for the garbage collector to track, which costs more than the rest of the call.
        self._losses: list[Any] = []
        self._loss_times: list[float] = []
        self._loss_steps: list[int] = []
        self._loss_copies: list[tuple[Any, Any, list[float]]] = []  # device -> host, in flight
        self._next_progress = 0.0
        self._next_meeting = 1  # step count of the next decision shared by the ranks
        self._last_meeting = (0, 0.0)
        self._window_written = False
        self._partial = (0.0, 0.0)  # items and seconds of steps not yet in a record
        self._partial_stamp = 0.0
        # What the instrument costs (benchkit.overhead): seconds spent deciding between
        # steps, and the seconds and number of the steps converted so far.
        self.check_seconds = 0.0
        self.step_seconds = 0.0
        self.steps_timed = 0
        # perf_counter -> epoch seconds, for record timestamps.
        self._epoch_offset = time.time() - time.perf_counter()
        if self.writer is not None:
            _LIVE.add(self)

    def continue_from(self, previous: TimedIterator) -> None:
        """Carry on the measurement of ``previous`` (a script that builds a new loader
        every epoch): same window, same step count, no second warm-up."""
        previous.close_pending()
        self.window = previous.window
        self.count = self._first_pending = previous.count
        self._measure_from = previous._measure_from
        self._next_progress = previous._next_progress
        self._next_meeting = previous._next_meeting
        self._last_meeting = previous._last_meeting
        self.done = previous.done

    def close_pending(self) -> None:
        """Convert what is pending without ending the window (a loader is replaced)."""
        if not self.done:
            self._convert(final=True)

    # -- the loop ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self.done:
            return iter(())
        self._start_monitor()
        if self._clock is None:
            return self._host_epoch()
        return self._device_epoch()

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Third-party loops reach through the loader (loader.sampler.set_epoch(...)).
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def _size_fn(self) -> Callable[[Any], Any]:
        size = self._batch_size
        if size is None:
            return default_batch_size
        if callable(size):
            return size
        return lambda _batch, _n=int(size): _n

    def _trigger(self) -> int | float:
        """Step count at which the loop must stop for a decision, whatever the time."""
        if self._collective:
            return self._next_meeting
        count, s = self.count, self.settings
        if self._measure_from is None:
            if count < s.skip:
                return s.skip
        elif s.stop and count < self._measure_from + s.stop:
            return self._measure_from + s.stop
        return count + max(1, self.max_pending - len(self._ends))

    def _host_epoch(self) -> Iterator[Any]:
        """One epoch timed with ``perf_counter`` (the hot loop: keep it lean)."""
        self.epochs += 1
        loader_it = iter(self.loader)
        try:
            batch = next(loader_it)  # outside the timed region
        except StopIteration:
            return
        clock = time.perf_counter
        size_of = self._size_fn()
        starts_append = self._starts.append
        ends_append = self._ends.append
        sizes_append = self._sizes.append
        count = self.count
        start = clock()
        self._begin(start)
        next_check = _INF if self._collective else start + CHECK_PERIOD
        trigger = self._trigger()
        try:
            while True:
                size = size_of(batch)
                yield batch
                try:
                    batch = next(loader_it)
                except StopIteration:
                    end = clock()
                    starts_append(start)
                    ends_append(end)
                    sizes_append(size)
                    count += 1
                    break
                end = clock()
                starts_append(start)
                ends_append(end)
                sizes_append(size)
                count += 1
                if end >= next_check or count >= trigger:
                    self.count = count
                    self._check(end)
                    if self.done:
                        break
                    start = clock()  # bookkeeping time is not the benchmark's
                    next_check = _INF if self._collective else start + CHECK_PERIOD
                    trigger = self._trigger()
                else:
                    start = end
        finally:
            self.count = count
            self._end_epoch()

    def _device_epoch(self) -> Iterator[Any]:
        """One epoch timed with device events (queried between steps, never waited on)."""
        self.epochs += 1
        loader_it = iter(self.loader)
        try:
            batch = next(loader_it)
        except StopIteration:
            return
        record = self._clock.record  # type: ignore[union-attr]
        host = time.perf_counter
        size_of = self._size_fn()
        count = self.count
        now = host()
        self._begin(now)
        next_check = _INF if self._collective else now + CHECK_PERIOD
        trigger = self._trigger()
        start = record()
        try:
            while True:
                size = size_of(batch)
                yield batch
                try:
                    batch = next(loader_it)
                except StopIteration:
                    self._append(start, record(), size)
                    count += 1
                    break
                end = record()
                self._append(start, end, size)
                count += 1
                now = host()
                if now >= next_check or count >= trigger:
                    self.count = count
                    self._check(now)
                    if self.done:
                        break
                    next_check = _INF if self._collective else host() + CHECK_PERIOD
                    trigger = self._trigger()
                    start = record()
                else:
                    start = end
        finally:
            self.count = count
            self._end_epoch()

    def _append(self, start: Any, end: Any, size: Any) -> None:
        self._starts.append(start)
        self._ends.append(end)
        self._sizes.append(size)

    def _begin(self, now: float) -> None:
        """The first step of the run begins: the window's clock starts."""
        if self.window.started is None:
            self.window.start(now)
            self._last_meeting = (self.count, now)
            if self.window.measuring:
                self._enter_measure()
            if self.writer is not None and self.writer.enabled:
                self._progress()
                self._next_progress = now + self.interval

    def _end_epoch(self) -> None:
        """Epoch over, window over, or the loop broke out: convert what is pending."""
        if self.done:
            return
        if self._collective:
            return  # decisions happen at the meetings every rank reaches
        self._convert(final=True)
        self.window.update(time.perf_counter())
        self._after_update(time.perf_counter())

    # -- decisions ----------------------------------------------------------------------
    def _check(self, now: float) -> None:
        """Between two steps: convert completed steps, let the window decide, report."""
        try:
            self._decide(now)
        finally:
            self.check_seconds += time.perf_counter() - now

    def _decide(self, now: float) -> None:
        if self._collective:
            self._meet(now)
        else:
            s = self.settings
            if self._measure_from is None and s.warmup_max <= 0 and self.count >= s.skip:
                # A warm-up of ``skip`` steps only: known without waiting for timings.
                self.window.begin_measure(now)
                self._enter_measure(at=s.skip)
            self._convert(final=False)
            self.window.update(now)
            self._after_update(now)
        if not self.done and now >= self._next_progress and self.writer is not None:
            self._progress()
            self.writer.flush()
            self._next_progress = now + self.interval

    def _after_update(self, now: float) -> None:
        if self._measure_from is None and self.window.measuring:
            self._enter_measure()
        if self.window.done or self._issued_all_measured():
            self._finish(now)  # a count bound: every measured step is issued, collect them

    def _issued_all_measured(self) -> bool:
        """The ``stop`` count bound is reached by the steps issued so far."""
        stop = self.settings.stop
        return (
            bool(stop)
            and self._measure_from is not None
            and self.count - self._measure_from >= stop
        )

    def _enter_measure(self, at: int | None = None) -> None:
        """Warm-up is over: steps issued from now on (or from step ``at``) are measured."""
        self._measure_from = self.count if at is None else at
        if self.writer is not None:
            self.writer.write(
                {"task": self.task, "warmup": self.window.warmup_record(), "time": time.time()}
            )

    def _meet(self, now: float) -> None:
        """A decision shared by every rank, at a step count they all reached."""
        self._reduce_pending()
        if self.writer is not None:  # rank 0 converts, decides and writes
            self._convert(final=False)
            self.window.update(now)
            if self._measure_from is None and (self.window.measuring or self.window.done):
                self._enter_measure()
        else:
            self._drop_pending()
        count, then = self._last_meeting
        steps = self.count - count
        per_step = (now - then) / steps if steps > 0 else 0.0
        proposal = int(min(100_000, max(1, CHECK_PERIOD / per_step))) if per_step > 0 else 1
        if self._measure_from is None and self.count < self.settings.skip:
            proposal = min(proposal, self.settings.skip - self.count)
        elif self._measure_from is not None and self.settings.stop:
            left = self._measure_from + self.settings.stop - self.count
            proposal = min(proposal, max(1, left))
        stop_now = self.window.done or self._issued_all_measured()
        stop_now, proposal = self._agree(stop_now, proposal)
        self._last_meeting = (self.count, now)
        self._next_meeting = self.count + proposal
        if stop_now:
            self._finish(now)

    def _agree(self, stop_now: bool, proposal: int) -> tuple[bool, int]:
        """One all-reduce: stop if any rank says so; meet again at the nearest proposal."""
        torch = _torch()
        dist = self._dist
        values = torch.tensor(
            [1 if stop_now else 0, -proposal], dtype=torch.int64, device=self._collective_device()
        )
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self._group)
        stop_flag, neg = (int(x) for x in values.tolist())
        return stop_flag > 0, max(1, -neg)

    def _finish(self, now: float) -> None:
        """The window is over: collect every step in flight, write the summary, stop."""
        if self.done:
            return
        if self._collective:
            self._reduce_pending()
            if self.writer is None:
                self._drop_pending()
        if self.writer is not None or not self._collective:
            self._convert(final=True)
        end = time.perf_counter()
        self.window.update(end)
        if not self.window.done:
            self.window.end("stop_count" if self.settings.stop else "ended")
        self.done = True
        if self.writer is not None:
            self._write_window()
            self.writer.event(
                "stop",
                {
                    "reason": self.window.reason,
                    "observations": self.window.observations,
                    "warmup_observations": len(self.window.warmup_durations),
                    "stop": self.stop,
                    "skip": self.skip,
                    "task": self.task,
                },
            )
            self.writer.flush()
        self._stop_monitor()
        if self.on_stop == "raise":
            raise StopProgram(self.count)
        if callable(self.on_stop):
            self.on_stop()

    def _write_window(self) -> None:
        if self._window_written or self.writer is None:
            return
        self._window_written = True
        self._progress()
        self.writer.write({"task": self.task, "window": self.window.summary(), "time": time.time()})

    # -- progress, stop ---------------------------------------------------------------
    def _progress(self) -> None:
        """``[done, total]``: measured seconds of the window's max, or steps of the budget."""
        if self.writer is None:
            return
        s, w = self.settings, self.window
        if s.max > 0:
            total = round(s.max, 1)
            if w.done and w.reason in ("precision", "stop_count", "max_time", "unreachable"):
                done = total  # the window is complete
            elif w.measuring or w.done:
                done = min(round(w.measured_seconds, 1), total)
            else:
                done = 0.0
            progress: list[float] = [done, total]
        elif self.budget:
            progress = [min(self.count, self.budget), self.budget]
        else:
            return
        self.writer.write({"task": "early_stop", "progress": progress})

    def close(self) -> None:
        """End of the loop: convert what is pending and write the window summary.

        A window that had not ended (the loop ran out of data) is summarised with reason
        ``ended`` (``ended_in_warmup`` if it never left warm-up), so the report can tell.
        """
        if not self.done:
            self._convert(final=True)  # ranks: only what the last meeting summed
            now = time.perf_counter()
            self.window.update(now)
            if not self.window.done:
                self.window.finish(now)
            if self.writer is not None and self.window.started is not None:
                self._write_window()
        if self.writer is not None:
            self.writer.flush()
        self._stop_monitor()

    def _at_exit(self) -> None:
        """The interpreter exits without `close` (a script that just ended): summarise."""
        try:
            if not self._window_written and self.window.started is not None:
                self.close()
        except Exception:  # noqa: BLE001 - never turn a clean exit into a traceback
            pass

    def __enter__(self) -> TimedIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- losses -----------------------------------------------------------------------
    def record_loss(self, loss: Any) -> None:
        """Keep ``loss`` (a tensor is detached, not read) until its step is converted.

        ``None`` is ignored: scripts often set ``loss = None`` before their loop."""
        if self.writer is None or loss is None:
            return
        detach = getattr(loss, "detach", None)
        self._losses.append(detach() if detach is not None else loss)
        self._loss_times.append(time.perf_counter())
        self._loss_steps.append(self.count)

    # -- conversion -------------------------------------------------------------------
    def _ready(self, final: bool) -> int:
        """How many pending steps can be converted now (their end is known, and their
        summed size when ranks sum them)."""
        n = len(self._ends)
        if self._collective:
            n = min(n, len(self._global))
        if n == 0 or self._clock is None:
            return n
        ends = self._ends
        if final:
            self._clock.synchronize(ends[n - 1])  # the end of the window: wait once
            return n
        completed = self._clock.completed
        if completed(ends[n - 1]):
            return n
        lo, hi = 0, n - 1  # events complete in order: find the first one still pending
        while lo < hi:
            mid = (lo + hi) // 2
            if completed(ends[mid]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _convert(self, final: bool) -> None:
        """Turn completed steps into records (rank 0) and feed the window."""
        k = self._ready(final)
        first = self._first_pending
        if k:
            starts, ends = self._starts[:k], self._ends[:k]
            if self._collective:
                sizes = self._global[:k]
                del self._global[:k]
            else:
                sizes = [float(x) for x in self._sizes[:k]]
                if self.world_size > 1:  # no process group to ask: assume equal ranks
                    sizes = [x * self.world_size for x in sizes]
            del self._starts[:k], self._ends[:k], self._sizes[:k]
            self._first_pending = first + k
            durations, stamps = self._durations(starts, ends)
            self.step_seconds += sum(durations)
            self.steps_timed += len(durations)
            split = k if self._measure_from is None else max(0, min(k, self._measure_from - first))
            if split:
                self.window.add_warmup(durations[:split])
            if split < k:
                rates, spans, times = self._coalesce(
                    sizes[split:], durations[split:], stamps[split:], final
                )
                self.window.add_measured(spans, rates)
                self._write_rates(rates, times)
        elif final:
            rates, spans, times = self._coalesce([], [], [], final)
            self.window.add_measured(spans, rates)
            self._write_rates(rates, times)
        self._convert_losses(final)

    def _coalesce(
        self, sizes: list[float], durations: list[float], stamps: list[float], final: bool
    ) -> tuple[list[float], list[float], list[float]]:
        """(rates, durations, stamps) of records lasting at least ``MIN_RECORD_S`` each.

        A step of 20 ms is one record, as always. Steps of a few microseconds (a tight
        loop under a 30 s window) are grouped until their durations add up to
        ``MIN_RECORD_S``, so a window writes at most ~1,000 records a second whatever the
        step; the rate of a group is its items over its time (run-data.md: one record
        "per measured step or window"). A partial group waits for the next conversion,
        except at the end of the window. Without a time window, every step is a record.
        """
        # Only a time window needs it: with step counts alone (``max: 0``), the user's
        # count bounds the records, and one record per step is the contract.
        threshold = MIN_RECORD_S if self.settings.max > 0 else 0.0
        acc_size, acc_time = self._partial
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
            self._partial_stamp = stamp
        if final and acc_time > 0:
            rates.append(acc_size / acc_time)
            spans.append(acc_time)
            times.append(self._partial_stamp)
            acc_size = acc_time = 0.0
        self._partial = (acc_size, acc_time)
        return rates, spans, times

    def _write_rates(self, rates: list[float], stamps: list[float]) -> None:
        writer = self.writer
        if writer is None or not rates:
            return
        # Records are formatted here rather than through json for speed (a flush formats
        # one record per step): the keys are fixed, the strings are JSON-encoded once, and
        # a finite float printed with ``g``/``f`` is valid JSON. Rates keep 7 significant
        # digits, timestamps microseconds.
        head = '{"task": ' + json.dumps(self.task) + ', "rate": '
        tail = ', "units": ' + json.dumps(self.units) + ', "time": '
        writer.write_encoded(
            [
                f"{head}{rate:.7g}{tail}{stamp:.6f}}}"
                for rate, stamp in zip(rates, stamps, strict=False)
            ]
        )

    def _convert_losses(self, final: bool) -> None:
        """Write the losses of converted steps; device tensors travel without a sync."""
        writer = self.writer
        if writer is None:
            return
        done = []
        for event, host, times in self._loss_copies:
            if not (final or event.query()):
                break  # copies land in order: the later ones are not there either
            done.append((host, times))
        if done:
            self._loss_copies = self._loss_copies[len(done) :]
            for host, times in done:
                self._write_losses([float(x) for x in host.tolist()], times)
        if not self._losses:
            return
        boundary = self._first_pending  # steps before it are converted: their losses exist
        n = len(self._losses) if final else sum(1 for s in self._loss_steps if s < boundary)
        if n == 0:
            return
        values, times = self._losses[:n], self._loss_times[:n]
        del self._losses[:n], self._loss_times[:n], self._loss_steps[:n]
        if not final and self._clock is not None:
            copy = _start_host_copy(values)
            if copy is not None:
                self._loss_copies.append((copy[0], copy[1], times))
                return
        self._write_losses(_loss_values(values), times)

    def _write_losses(self, values: list[float], times: list[float]) -> None:
        offset = self._epoch_offset
        head = '{"task": ' + json.dumps(self.task) + ', "loss": '
        self.writer.write_encoded(  # type: ignore[union-attr]
            [
                f'{head}{_json_float(value)}, "time": {when + offset:.6f}}}'
                for value, when in zip(values, times, strict=False)
            ]
        )

    def _durations(self, starts: list[Any], ends: list[Any]) -> tuple[list[float], list[float]]:
        if not ends:
            return [], []
        if self._clock is None:
            offset = self._epoch_offset
            return [e - s for s, e in zip(starts, ends, strict=False)], [e + offset for e in ends]
        seconds = self._clock.seconds
        last = ends[-1]
        now = time.time()  # the last converted event completed at or before now
        durations = [seconds(s, e) for s, e in zip(starts, ends, strict=False)]
        stamps = [now - seconds(e, last) for e in ends]
        return durations, stamps

    def _reduce_pending(self) -> None:
        """Sum the sizes of the steps issued since the last meeting over the ranks."""
        known = len(self._global)
        fresh = [float(s) for s in self._sizes[known:]]
        self._global.extend(self._reduce_sizes(fresh))

    def _drop_pending(self) -> None:
        """Ranks other than 0 report nothing: forget what they timed once it is summed."""
        k = len(self._global)
        del self._starts[:k], self._ends[:k], self._sizes[:k], self._global[:k]
        self._first_pending += k
        self._losses.clear()
        self._loss_times.clear()
        self._loss_steps.clear()

    def _collective_device(self) -> str:
        """Where the decision tensors live: the host with the gloo side group (or a gloo
        job); the current GPU when only an NCCL group is there (it takes no host tensor)."""
        if self._group is None and self._dist.get_backend() == "nccl":
            return f"cuda:{_torch().cuda.current_device()}"
        return "cpu"

    def _reduce_sizes(self, sizes: list[float]) -> list[float]:
        """Sum per-step sizes over ranks: two small collectives per meeting, none per step."""
        torch = _torch()
        dist = self._dist
        device = self._collective_device()
        length = torch.tensor([len(sizes)], dtype=torch.int64, device=device)
        dist.all_reduce(length, op=dist.ReduceOp.MAX, group=self._group)
        n = int(length.item())
        if n == 0:
            return []
        padded = sizes + [0.0] * (n - len(sizes))
        values = torch.tensor(padded, dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=self._group)
        return values.tolist()[: len(sizes)]

    # -- monitor ----------------------------------------------------------------------
    def _start_monitor(self) -> None:
        if self._monitor is not None or self.writer is None or not self.writer.enabled:
            return
        wanted = self._want_monitor
        if wanted is None:
            wanted = self.gpu_poll > 0
        if not wanted:
            return
        from benchkit.monitors import Monitor

        self._monitor = Monitor(self.writer, self.gpu_poll or 1.0)
        self._monitor.start()

    def _stop_monitor(self) -> None:
        if self._monitor is not None:
            self._monitor.stop()


# Iterators whose window may still need its summary when the interpreter exits (a
# script whose loop simply ended). Weak references: the hook must not keep a finished
# iterator, and the loader it holds, alive.
_LIVE: weakref.WeakSet[TimedIterator] = weakref.WeakSet()


@atexit.register
def _summarise_at_exit() -> None:
    for it in list(_LIVE):
        it._at_exit()


def _control_group(dist: Any) -> Any:
    """A gloo group for the ranks' small decisions when the default group is NCCL, so
    that agreeing on a stop never synchronises the device (None: use the default)."""
    try:
        if dist.get_backend() == "gloo":
            return None
        return dist.new_group(backend="gloo")
    except Exception:  # noqa: BLE001 - gloo unavailable: fall back to the default group
        return None


def _start_host_copy(values: list[Any]) -> tuple[Any, Any] | None:
    """Copy device loss tensors to pinned host memory without waiting; (event, host).

    The copy is queued behind the step that computed the losses; the event says when it
    has landed. None when the values are not device tensors (they are converted now).
    """
    torch = _torch()
    if torch is None or not values or not all(isinstance(v, torch.Tensor) for v in values):
        return None
    if values[0].device.type != "cuda":
        return None
    try:
        stacked = torch.stack([v.reshape(()).float() for v in values])
        host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
        host.copy_(stacked, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    except (RuntimeError, TypeError):
        return None
    return event, host


def _json_float(value: float) -> str:
    """A float as strict JSON: NaN/infinities become strings, as the channel writes them
    (the report reads them back as floats and fails a NaN loss)."""
    if value != value:
        return '"NaN"'
    if value in (_INF, -_INF):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return f"{value:.8g}"  # 8 significant digits: plenty for a loss, faster than repr


def _loss_values(values: list[Any]) -> list[float]:
    """Floats of the stored losses: one device transfer for accelerator tensors, a cheap
    ``item()`` each for host tensors (stacking costs more than it saves on CPU)."""
    torch = _torch()
    if torch is not None and values and all(isinstance(v, torch.Tensor) for v in values):
        if values[0].device.type != "cpu":
            try:
                stacked = torch.stack(values)
            except RuntimeError:  # different shapes: make them scalars first
                stacked = torch.stack([v.reshape(()) for v in values])
            try:
                return [float(x) for x in stacked.reshape(-1).tolist()][: len(values)]
            except (RuntimeError, ValueError):
                pass
    out = []
    for v in values:
        item = getattr(v, "item", None)
        try:
            out.append(float(item() if item is not None else v))
        except (TypeError, ValueError, RuntimeError):
            out.append(math.nan)
    return out
