"""Throughput measurement of a training loop, inside a time-bounded window.

`TimedIterator` wraps a data loader: the loop iterates it instead of the loader, and it
times each step (from one request for a batch to the next), reports rates and losses,
and ends the loop when the measurement window is over. It is the front of these parts:

| module | its job |
|---|---|
| `benchkit.clock` | one stamp per step boundary (device events or ``perf_counter``), never a wait |
| `benchkit.pending` | the steps issued but not yet converted |
| `benchkit.meter` | between two steps: convert completed steps, feed the window, decide, write |
| `benchkit.window` | warm-up until the step time settles, then measure until the rate is precise |
| `benchkit.agreement` | distributed ranks meeting at agreed step counts to decide together |
| `benchkit.losses` | losses kept lazily and read without stalling the device |
| `benchkit.records` | the records written (rates, losses, progress, warm-up, window, stop) |
| `benchkit.devicemem` | torch's peak allocated and reserved memory of the device, once per process |

Nothing is converted, synchronised or written inside a step; a few times a second
(`benchkit.meter.CHECK_PERIOD`), between two steps, the completed steps are converted,
written and handed to the window (docs/measurement.md), so a timeout, Ctrl-C or crash
loses at most a fraction of a second of what was measured. The first batch of every
epoch is fetched before the clock starts (creating a loader iterator is costly and would
be amortised in a real training run); warm-up steps are timed but never reported.

Typical use::

    it = TimedIterator(loader, device=device)            # budget from benchkit.options
    for epoch in range(epochs):
        for x, y in it:
            loss = step(x, y)
            it.record_loss(loss)                         # kept lazily, .item() at flush
        if it.done:                                      # budget spent: leave the epochs
            break

When the window ends the iterator flushes, writes the ``window`` record, torch's peak
memory on an accelerator (`benchkit.devicemem`, every rank) and the ``stop`` event, and
simply stops yielding (``it.done`` becomes true; later epochs yield nothing).
Code that cannot test ``it.done`` (deep loops, third-party scripts) passes
``on_stop="raise"`` and wraps its main function with `benchkit.run_main` / ``with
benchkit.budget():``, which turn the `StopProgram` into exit code 0 (under voir, the
overseer does it by itself). In a distributed run every rank iterates; rank 0 reports
the global throughput and only rank 0 writes the measurement (`benchkit.agreement`). A
window that the loop left unfinished is summarised when `close` is called, or when the
interpreter exits.
"""

from __future__ import annotations

import atexit
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from benchkit.agreement import Agreement, process_group
from benchkit.channel import DataWriter, default_writer
from benchkit.clock import clock_for, device_kind
from benchkit.devicemem import record_peak_memory
from benchkit.meter import CHECK_PERIOD, Meter
from benchkit.options import MeasureSettings, load_options
from benchkit.records import Records
from benchkit.stopping import StopProgram
from benchkit.window import Window, WindowSettings


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

    ``meter`` (`benchkit.meter.Meter`) holds the measurement; ``count``, ``done``,
    ``window`` and the cost counters read through to it.
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
        self.task = task
        self.units = units
        self.on_stop = on_stop
        self.epochs = 0
        self._batch_size = batch_size if batch_size is not None else batch_size_fn

        auto_rank, auto_world, dist = process_group()
        self.rank = auto_rank if rank is None else rank
        self.world_size = auto_world if world_size is None else world_size
        self.writer: DataWriter | None = None
        if self.rank == 0:
            self.writer = writer if writer is not None else default_writer()
        self._want_monitor = monitor
        self._monitor: Any = None

        self._device = device
        clock = clock_for(device_kind(device))
        # Ranks decide together only when there is a process group to decide with.
        collective = dist is not None and self.world_size > 1
        self.meter = Meter(
            options=opts,
            settings=self.settings,
            clock=clock,
            records=(
                Records(self.writer, task, units, clock.epoch_offset)
                if self.writer is not None
                else None
            ),
            agreement=Agreement(dist, CHECK_PERIOD) if collective else None,
            world_size=self.world_size,
            max_pending=max_pending,
        )
        self.meter.on_finish = self._finished
        self.meter.before_stop = self._record_memory
        if self.writer is not None:
            _LIVE.add(self)

    # -- what the measurement says -----------------------------------------------------
    @property
    def done(self) -> bool:
        """The window is over (or the run was closed): the loop yields nothing more."""
        return self.meter.done

    @property
    def count(self) -> int:
        """Steps issued so far, warm-up included."""
        return self.meter.count

    @property
    def window(self) -> Window:
        return self.meter.window

    @property
    def check_seconds(self) -> float:
        """Seconds spent deciding between steps (`benchkit.overhead`)."""
        return self.meter.check_seconds

    @property
    def step_seconds(self) -> float:
        """Seconds of the steps converted so far."""
        return self.meter.step_seconds

    @property
    def steps_timed(self) -> int:
        """Steps converted so far."""
        return self.meter.steps_timed

    def continue_from(self, previous: TimedIterator) -> None:
        """Carry on the measurement of ``previous`` (a script that builds a new loader
        every epoch): same window, same step count, no second warm-up."""
        self.meter.continue_from(previous.meter)

    def close_pending(self) -> None:
        """Convert what is pending without ending the window (a loader is replaced)."""
        self.meter.close_pending()

    def record_loss(self, loss: Any) -> None:
        """Keep ``loss`` (a tensor is detached, not read) until its step is converted.

        ``None`` is ignored: scripts often set ``loss = None`` before their loop."""
        self.meter.record_loss(loss)

    # -- the loop ----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self.done:
            return iter(())
        self._start_monitor()
        if self.meter.clock.on_device:
            return self._device_epoch()
        return self._host_epoch()

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Third-party loops reach through the loader (loader.sampler.set_epoch(...)).
        if name in ("loader", "meter"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def _size_fn(self) -> Callable[[Any], Any]:
        size = self._batch_size
        if size is None:
            return default_batch_size
        if callable(size):
            return size
        return lambda _batch, _n=int(size): _n

    def _host_epoch(self) -> Iterator[Any]:
        """One epoch timed with ``perf_counter`` (the hot loop: keep it lean)."""
        self.epochs += 1
        loader_it = iter(self.loader)
        try:
            batch = next(loader_it)  # outside the timed region
        except StopIteration:
            return
        meter = self.meter
        pending = meter.pending
        clock = time.perf_counter
        size_of = self._size_fn()
        starts_append = pending.starts.append
        ends_append = pending.ends.append
        sizes_append = pending.sizes.append
        count = meter.count
        start = clock()
        meter.begin(start)
        next_check = meter.next_check(start)
        trigger = meter.trigger()
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
                    meter.count = count
                    meter.check(end)
                    if meter.done:
                        break
                    start = clock()  # bookkeeping time is not the benchmark's
                    next_check = meter.next_check(start)
                    trigger = meter.trigger()
                else:
                    start = end
        finally:
            meter.count = count
            meter.end_epoch()

    def _device_epoch(self) -> Iterator[Any]:
        """One epoch timed with device events (queried between steps, never waited on)."""
        self.epochs += 1
        loader_it = iter(self.loader)
        try:
            batch = next(loader_it)
        except StopIteration:
            return
        meter = self.meter
        pending = meter.pending
        record = meter.clock.record
        host = time.perf_counter
        size_of = self._size_fn()
        starts_append = pending.starts.append
        ends_append = pending.ends.append
        sizes_append = pending.sizes.append
        count = meter.count
        now = host()
        meter.begin(now)
        next_check = meter.next_check(now)
        trigger = meter.trigger()
        start = record()
        try:
            while True:
                size = size_of(batch)
                yield batch
                try:
                    batch = next(loader_it)
                except StopIteration:
                    starts_append(start)
                    ends_append(record())
                    sizes_append(size)
                    count += 1
                    break
                end = record()
                starts_append(start)
                ends_append(end)
                sizes_append(size)
                count += 1
                now = host()
                if now >= next_check or count >= trigger:
                    meter.count = count
                    meter.check(now)
                    if meter.done:
                        break
                    next_check = meter.next_check(host())
                    trigger = meter.trigger()
                    start = record()
                else:
                    start = end
        finally:
            meter.count = count
            meter.end_epoch()

    # -- the end -----------------------------------------------------------------------
    def _finished(self) -> None:
        """The window is over and its stop written: stop the monitor, then ``on_stop``."""
        self._stop_monitor()
        if self.on_stop == "raise":
            raise StopProgram(self.meter.count)
        if callable(self.on_stop):
            self.on_stop()

    def close(self) -> None:
        """End of the loop: convert what is pending and write the window summary.

        A window that had not ended (the loop ran out of data) is summarised with reason
        ``ended`` (``ended_in_warmup`` if it never left warm-up), so the report can tell.
        """
        self.meter.close()
        self._record_memory()
        self._stop_monitor()

    def _record_memory(self) -> None:
        """torch's peak memory on this process's device (`benchkit.devicemem`), once per
        process and on every rank: rank 0 on its writer, the others on the process-wide
        one. Nothing on the CPU; never raises."""
        record_peak_memory(self._device, writer=self.writer, task=self.task, rank=self.rank)

    def _at_exit(self) -> None:
        """The interpreter exits without `close` (a script that just ended): summarise."""
        try:
            if not self.meter.window_written and self.window.started is not None:
                self.close()
        except Exception:  # noqa: BLE001 - never turn a clean exit into a traceback
            pass

    def __enter__(self) -> TimedIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- monitor -----------------------------------------------------------------------
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
