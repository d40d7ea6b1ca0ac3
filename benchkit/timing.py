"""Throughput measurement of a training loop without synchronising the device in it.

`TimedIterator` wraps a data loader. At each step boundary (when the loop asks for the
next batch) it records one timestamp: a device event on accelerators (CUDA, XPU, ...),
``time.perf_counter()`` on CPU. Nothing is converted, synchronised or written inside the
loop; that happens in one go at the end of an epoch, when ``max_pending`` observations
are waiting, or when the budget (``stop + skip`` observations) is reached. On CPU (host
timestamps, nothing to synchronise) a single process also converts at each progress tick
(every ``interval`` seconds), outside the timed intervals, so that rates are seen live. The first
batch of every epoch is fetched before the clock starts (creating a loader iterator is
costly and would be amortised in a real training run), and the first ``skip``
observations of the process are warm-up: timed but never reported.

Typical use::

    it = TimedIterator(loader, device=device)            # budget from benchkit.options
    for epoch in range(epochs):
        for x, y in it:
            loss = step(x, y)
            it.record_loss(loss)                         # kept lazily, .item() at flush
        if it.done:                                      # budget spent: leave the epochs
            break

When the budget is reached the iterator flushes, writes the ``stop`` event and simply
stops yielding (``it.done`` becomes true; later epochs yield nothing). Code that cannot
test ``it.done`` (deep loops, third-party scripts) passes ``on_stop="raise"`` and wraps its
main function with `benchkit.run_main` / ``with benchkit.budget():``, which turn the
`StopProgram` into exit code 0 (under voir, the overseer does it by itself).

In a distributed run every rank iterates and times its own steps; at each flush the
per-step batch sizes are summed over the ranks with one ``all_reduce`` so that rank 0
reports the global throughput, and only rank 0 writes.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from benchkit.channel import DataWriter, default_writer
from benchkit.options import load_options
from benchkit.stopping import StopProgram

_INF = float("inf")


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
        stop, skip: budget (see `benchkit.options`); None reads the options.
        writer: a `DataWriter`; None uses the process-wide one (on rank 0 only).
        rank, world_size: None reads torch.distributed (or ``RANK``/``WORLD_SIZE``).
        task, units: the record's ``task`` and ``units``.
        interval: seconds between ``progress`` records; None reads the options.
        on_stop: ``"end"`` (stop yielding), ``"raise"`` (raise `StopProgram`), or a
            callable called once the stop was written (e.g. voir's ``ov.stop``).
        monitor: start a background `benchkit.monitors.Monitor` (None: when the writer
            is enabled and ``gpu_poll`` > 0).
        max_pending: observations kept before an intermediate flush (bounds memory for
            endless epochs; on accelerators this is the only in-loop synchronisation).
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
        opts = load_options(stop=stop, skip=skip, interval=interval)
        self.loader = loader
        self.stop = opts.stop
        self.skip = opts.skip
        self.budget = opts.budget
        self.interval = opts.interval
        self.gpu_poll = opts.gpu_poll
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

        self._kind = _device_kind(device)
        self._clock = _event_clock(self._kind)

        self.done = False
        self.count = 0  # observations so far (warm-up included)
        self.epochs = 0
        self._reported = 0  # observations already converted (index of the next one)
        self._starts: list[Any] = []
        self._ends: list[Any] = []
        self._sizes: list[Any] = []
        # Losses and their times in two lists: a tuple per step would be one more object
        # for the garbage collector to track, which costs more than the rest of the call.
        self._losses: list[Any] = []
        self._loss_times: list[float] = []
        self._next_progress = 0.0
        # perf_counter -> epoch seconds, for record timestamps.
        self._epoch_offset = time.time() - time.perf_counter()

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
        budget = self.budget or _INF
        count = self.count
        next_tick = self._next_tick(clock())
        max_pending = self.max_pending
        pending = len(self._ends)
        start = clock()
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
                pending += 1
                if count >= budget:
                    break
                if end >= next_tick or pending >= max_pending:
                    self.count = count
                    # Host timestamps need no synchronisation: convert them at each
                    # tick too, so rates show up live (not across ranks: the reduction
                    # must happen at the same step on every rank).
                    if pending >= max_pending or self.world_size <= 1:
                        self._flush()
                        pending = 0
                    next_tick = self._tick(end)
                    start = clock()  # bookkeeping time is not the benchmark's
                else:
                    start = end
        finally:
            self.count = count
            self._end_epoch()

    def _device_epoch(self) -> Iterator[Any]:
        """One epoch timed with device events (no synchronisation until the flush)."""
        self.epochs += 1
        loader_it = iter(self.loader)
        try:
            batch = next(loader_it)
        except StopIteration:
            return
        record = self._clock.record  # type: ignore[union-attr]
        host = time.perf_counter
        size_of = self._size_fn()
        budget = self.budget or _INF
        count = self.count
        pending = len(self._ends)
        next_tick = self._next_tick(host())
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
                pending += 1
                if count >= budget:
                    break
                now = host()
                if now >= next_tick or pending >= self.max_pending:
                    self.count = count
                    if pending >= self.max_pending:
                        self._flush()
                        pending = 0
                    next_tick = self._tick(now)
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

    def _end_epoch(self) -> None:
        """Epoch over, budget spent, or the loop broke out: convert what is pending."""
        if self.done:
            return
        self._flush()
        if self.budget and self.count >= self.budget:
            self._finish_budget()

    # -- progress, stop ---------------------------------------------------------------
    def _next_tick(self, now: float) -> float:
        if not self.budget or self.writer is None or not self.writer.enabled:
            return _INF
        if self._next_progress == 0.0:
            self._progress()
            self._next_progress = now + self.interval
        return self._next_progress

    def _tick(self, now: float) -> float:
        """Called at most once per ``interval``: progress record and a lazy flush."""
        self._progress()
        if self.writer is not None:
            self.writer.flush()
        self._next_progress = now + self.interval
        return self._next_progress

    def _progress(self) -> None:
        if self.writer is not None and self.budget:
            done = min(self.count, self.budget)
            self.writer.write({"task": "early_stop", "progress": [done, self.budget]})

    def _finish_budget(self) -> None:
        self.done = True
        if self.writer is not None:
            self._progress()
            self.writer.event(
                "stop",
                {
                    "reason": "budget",
                    "observations": self.count,
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

    def close(self) -> None:
        """Flush what is pending (for loops that end without reaching the budget)."""
        if not self.done:
            self._flush()
        if self.writer is not None:
            self.writer.flush()
        self._stop_monitor()

    def __enter__(self) -> TimedIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- losses -----------------------------------------------------------------------
    def record_loss(self, loss: Any) -> None:
        """Keep ``loss`` (a tensor is detached, not read) until the next flush."""
        if self.writer is None:
            return
        detach = getattr(loss, "detach", None)
        self._losses.append(detach() if detach is not None else loss)
        self._loss_times.append(time.perf_counter())

    # -- flush ------------------------------------------------------------------------
    def _flush(self) -> None:
        """Synchronise once, turn pending intervals into records, write them (rank 0)."""
        # Copy and clear in place: the hot loop holds bound ``append``s of these lists.
        starts, ends, sizes = self._starts.copy(), self._ends.copy(), self._sizes.copy()
        losses, loss_times = self._losses.copy(), self._loss_times.copy()
        for pending in (self._starts, self._ends, self._sizes, self._losses, self._loss_times):
            pending.clear()
        first_index = self._reported
        self._reported += len(ends)
        if not ends and not losses:
            if self._dist is not None and self.world_size > 1:
                self._reduce_sizes([])  # keep collectives paired across ranks
            return
        durations, stamps = self._durations(starts, ends)
        totals = self._global_sizes(sizes)
        writer = self.writer
        if writer is None:
            return
        # Records are formatted here rather than through json for speed (the flush of a
        # long epoch formats one record per step): the keys are fixed, the strings are
        # JSON-encoded once, and a finite float printed with ``g``/``f`` is valid JSON.
        # Rates keep 7 significant digits, timestamps microseconds.
        head = '{"task": ' + json.dumps(self.task) + ', "rate": '
        tail = ', "units": ' + json.dumps(self.units) + ', "time": '
        lines = []
        skip = self.skip - first_index
        for i, (duration, stamp, size) in enumerate(zip(durations, stamps, totals, strict=False)):
            if i < skip or duration <= 0:
                continue
            rate = size / duration
            if rate != rate or rate == _INF:
                continue
            lines.append(f"{head}{rate:.7g}{tail}{stamp:.6f}}}")
        writer.write_encoded(lines)
        if losses:
            values = _loss_values(losses)
            offset = self._epoch_offset
            head = '{"task": ' + json.dumps(self.task) + ', "loss": '
            lines = [
                f'{head}{_json_float(value)}, "time": {when + offset:.6f}}}'
                for value, when in zip(values, loss_times, strict=False)
            ]
            writer.write_encoded(lines)

    def _durations(self, starts: list[Any], ends: list[Any]) -> tuple[list[float], list[float]]:
        if not ends:
            return [], []
        if self._clock is None:
            offset = self._epoch_offset
            return [e - s for s, e in zip(starts, ends, strict=False)], [e + offset for e in ends]
        clock = self._clock
        last = ends[-1]
        clock.synchronize(last)  # the only synchronisation
        now = time.time()
        seconds = clock.seconds
        durations = [seconds(s, e) for s, e in zip(starts, ends, strict=False)]
        stamps = [now - seconds(e, last) for e in ends]
        return durations, stamps

    def _global_sizes(self, sizes: list[Any]) -> list[float]:
        sizes = [float(s) for s in sizes]
        if self.world_size <= 1:
            return sizes
        if self._dist is None:
            # No process group to ask: assume every rank processes as much as this one.
            return [s * self.world_size for s in sizes]
        return self._reduce_sizes(sizes)

    def _reduce_sizes(self, sizes: list[float]) -> list[float]:
        """Sum per-step sizes over ranks: two collectives per flush, none per step."""
        torch = _torch()
        dist = self._dist
        device = "cpu"
        if dist.get_backend() == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        length = torch.tensor([len(sizes)], dtype=torch.int64, device=device)
        dist.all_reduce(length, op=dist.ReduceOp.MAX)
        n = int(length.item())
        if n == 0:
            return []
        padded = sizes + [0.0] * (n - len(sizes))
        values = torch.tensor(padded, dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
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
