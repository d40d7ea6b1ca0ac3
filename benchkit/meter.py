"""Between two steps: convert the completed steps, let the window decide, write.

A `Meter` is the measurement of one run of steps, whoever issues them (a wrapped loader,
`benchkit.timing.TimedIterator`, or a step-mode probe, `benchkit.steps.StepTimer`). The
issuer appends each step to ``meter.pending``, keeps ``meter.count`` up to date, and
calls `check` every ``CHECK_PERIOD`` seconds or when ``count`` reaches `trigger` (a
count bound, a distributed meeting, a full buffer). A check converts the completed steps
(`benchkit.pending`, `benchkit.clock`), hands their durations to the window
(`benchkit.window.Window`: warm-up steps, then measured ones), writes their rates and
losses (`benchkit.records`), and ends the run when the window is over or a ``stop``
count is reached: the summary, then what ``before_stop`` writes (every rank), then the
``stop`` event are written, ``done`` becomes true and ``on_finish`` runs.

Distributed runs decide at agreed step counts only (`benchkit.agreement`): there, rank 0
converts, decides and writes; the others only sum their sizes and follow the verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchkit.agreement import Agreement
from benchkit.clock import Clock
from benchkit.losses import LossBuffer
from benchkit.options import BenchOptions
from benchkit.pending import PendingSteps
from benchkit.records import MIN_RECORD_S, RateGrouper, Records, progress_of
from benchkit.window import Window, WindowSettings

# Seconds between two conversions of completed steps (and window decisions): rates reach
# the run file at least this often, and a window ends at most this late.
CHECK_PERIOD = 0.25


class Meter:
    """The state of one measurement (see module doc).

    ``options``: the run's bounds (``stop``/``skip`` echoed in the ``stop`` event, the
    count ``budget``, the progress ``interval``); ``settings``: the window; ``records``:
    None on ranks that do not write; ``agreement``: the ranks' meetings, None when this
    process decides alone; ``max_pending``: steps kept unconverted at most.
    """

    def __init__(
        self,
        *,
        options: BenchOptions,
        settings: WindowSettings,
        clock: Clock,
        records: Records | None,
        agreement: Agreement | None,
        world_size: int,
        max_pending: int,
    ) -> None:
        self.stop = options.stop
        self.skip = options.skip
        self.budget = options.budget
        self.interval = options.interval
        self.settings = settings
        self.window = Window(settings)
        self.clock = clock
        self.records = records
        self.agreement = agreement
        self.collective = agreement is not None
        self.world_size = world_size
        self.max_pending = max(1, int(max_pending))
        self.pending = PendingSteps()
        self.losses = LossBuffer()
        # Only a time window groups tiny steps; with step counts alone (``max: 0``) the
        # user's count bounds the records, and one record per step is the contract.
        self.grouper = RateGrouper(MIN_RECORD_S if settings.max > 0 else 0.0)
        self.on_finish: Callable[[], Any] | None = None
        # Runs on every rank when the window ends, before the ``stop`` event is written
        # (the runner may end the process soon after it): must not raise.
        self.before_stop: Callable[[], Any] | None = None

        self.done = False
        self.count = 0  # steps issued so far (warm-up included)
        self.measure_from: int | None = None  # index of the first measured step
        self.next_progress = 0.0
        self.window_written = False
        # What the instrument costs (benchkit.overhead): seconds spent deciding between
        # steps, and the seconds and number of the steps converted so far.
        self.check_seconds = 0.0
        self.step_seconds = 0.0
        self.steps_timed = 0

    def continue_from(self, previous: Meter) -> None:
        """Carry on the measurement of ``previous``: same window, same step count, no
        second warm-up (a script that builds a new loader every epoch)."""
        previous.close_pending()
        self.window = previous.window
        self.count = self.pending.first = previous.count
        self.measure_from = previous.measure_from
        self.next_progress = previous.next_progress
        if self.agreement is not None and previous.agreement is not None:
            self.agreement.continue_from(previous.agreement)
        self.done = previous.done

    def close_pending(self) -> None:
        """Convert what is pending without ending the window."""
        if not self.done:
            self.convert(final=True)

    def record_loss(self, loss: Any) -> None:
        """Keep ``loss`` for the step under way (nothing on ranks that do not write)."""
        if self.records is not None and loss is not None:
            self.losses.add(loss, self.count)

    # -- the issuer's side -------------------------------------------------------------
    def trigger(self) -> int | float:
        """Step count at which the issuer must check, whatever the time."""
        if self.agreement is not None:
            return self.agreement.next_meeting
        count, s = self.count, self.settings
        if self.measure_from is None:
            if count < s.skip:
                return s.skip
        elif s.stop and count < self.measure_from + s.stop:
            return self.measure_from + s.stop
        return count + max(1, self.max_pending - len(self.pending))

    def next_check(self, now: float) -> float:
        """When the issuer must check next, whatever the count (never, for ranks that
        decide only at their meetings)."""
        return float("inf") if self.collective else now + CHECK_PERIOD

    def begin(self, now: float) -> None:
        """A step begins; the first one starts the window's clock."""
        if self.window.started is None:
            self.window.start(now)
            if self.agreement is not None:
                self.agreement.started(self.count, now)
            if self.window.measuring:
                self._enter_measure()
            if self.records is not None and self.records.enabled:
                self.records.progress(self._progress())
                self.next_progress = now + self.interval

    def end_epoch(self) -> None:
        """The issuer paused (a loader's epoch is over, or the loop broke out): convert
        what is pending. Ranks deciding together wait for their next meeting."""
        if self.done or self.collective:
            return
        self.convert(final=True)
        self.window.update(time.perf_counter())
        self._after_update(time.perf_counter())

    def check(self, now: float) -> None:
        """Between two steps: convert completed steps, let the window decide, report;
        may finish the run (``on_finish`` runs then, and may raise)."""
        try:
            self._decide(now)
        finally:
            self.check_seconds += time.perf_counter() - now

    def close(self) -> None:
        """No more steps: convert what is pending and write the window summary.

        A window that had not ended (the loop ran out of data) is summarised with reason
        ``ended`` (``ended_in_warmup`` if it never left warm-up), so the report can tell.
        """
        if not self.done:
            self.convert(final=True)  # ranks: only what the last meeting summed
            now = time.perf_counter()
            self.window.update(now)
            if not self.window.done:
                self.window.finish(now)
            if self.records is not None and self.window.started is not None:
                self._write_window()
        if self.records is not None:
            self.records.flush()

    # -- decisions ---------------------------------------------------------------------
    def _decide(self, now: float) -> None:
        if self.collective:
            self._meet(now)
        else:
            s = self.settings
            if self.measure_from is None and s.warmup_max <= 0 and self.count >= s.skip:
                # A warm-up of ``skip`` steps only: known without waiting for timings.
                self.window.begin_measure(now)
                self._enter_measure(at=s.skip)
            self.convert(final=False)
            self.window.update(now)
            self._after_update(now)
        if not self.done and now >= self.next_progress and self.records is not None:
            self.records.progress(self._progress())
            self.records.flush()
            self.next_progress = now + self.interval

    def _after_update(self, now: float) -> None:
        if self.measure_from is None and self.window.measuring:
            self._enter_measure()
        if self.window.done or self._issued_all_measured():
            self.finish(now)  # a count bound: every measured step is issued, collect them

    def _issued_all_measured(self) -> bool:
        """The ``stop`` count bound is reached by the steps issued so far."""
        stop = self.settings.stop
        return (
            bool(stop) and self.measure_from is not None and self.count - self.measure_from >= stop
        )

    def _enter_measure(self, at: int | None = None) -> None:
        """Warm-up is over: steps issued from now on (or from step ``at``) are measured."""
        self.measure_from = self.count if at is None else at
        if self.records is not None:
            self.records.warmup(self.window)

    def _meet(self, now: float) -> None:
        """A decision shared by every rank, at a step count they all reached."""
        agreement = self.agreement
        assert agreement is not None
        self.pending.sum_new(agreement)
        if self.records is not None:  # rank 0 converts, decides and writes
            self.convert(final=False)
            self.window.update(now)
            if self.measure_from is None and (self.window.measuring or self.window.done):
                self._enter_measure()
        else:
            self._drop_summed()
        s = self.settings
        within = None  # steps to the next count bound: meet there at the latest
        if self.measure_from is None and self.count < s.skip:
            within = s.skip - self.count
        elif self.measure_from is not None and s.stop:
            within = max(1, self.measure_from + s.stop - self.count)
        stop_now = self.window.done or self._issued_all_measured()
        if agreement.meet(stop_now, self.count, now, within):
            self.finish(now)

    def _drop_summed(self) -> None:
        """Ranks other than 0 report nothing: forget what they timed once it is summed."""
        self.pending.drop_summed()
        self.losses.clear()

    def finish(self, now: float) -> None:
        """The window is over: collect every step in flight, write the summary, stop."""
        if self.done:
            return
        if self.agreement is not None:
            self.pending.sum_new(self.agreement)
            if self.records is None:
                self._drop_summed()
        if self.records is not None or not self.collective:
            self.convert(final=True)
        end = time.perf_counter()
        self.window.update(end)
        if not self.window.done:
            self.window.end("stop_count" if self.settings.stop else "ended")
        self.done = True
        if self.records is not None:
            self._write_window()
        if self.before_stop is not None:
            self.before_stop()
        if self.records is not None:
            self.records.stop(self.window, self.stop, self.skip)
            self.records.flush()
        if self.on_finish is not None:
            self.on_finish()

    def _write_window(self) -> None:
        if self.window_written or self.records is None:
            return
        self.window_written = True
        self.records.progress(self._progress())
        self.records.window(self.window)

    def _progress(self) -> list[float] | None:
        return progress_of(self.settings, self.window, self.count, self.budget)

    # -- conversion --------------------------------------------------------------------
    def convert(self, final: bool) -> None:
        """Turn completed steps into records (when this rank writes) and feed the window."""
        pending = self.pending
        first = pending.first
        k = pending.ready(self.clock, final, summed_only=self.collective)
        if k:
            starts, ends, sizes = pending.take(k, self.collective, self.world_size)
            durations, stamps = self.clock.durations(starts, ends)
            self.step_seconds += sum(durations)
            self.steps_timed += len(durations)
            split = k if self.measure_from is None else max(0, min(k, self.measure_from - first))
            if split:
                self.window.add_warmup(durations[:split])
            if split < k:
                self._measured(sizes[split:], durations[split:], stamps[split:], final)
        elif final:
            self._measured([], [], [], final)
        if self.records is not None:
            for values, times in self.losses.take(pending.first, final, self.clock.on_device):
                self.records.losses(values, times)

    def _measured(
        self, sizes: list[float], durations: list[float], stamps: list[float], final: bool
    ) -> None:
        rates, spans, times = self.grouper.group(sizes, durations, stamps, final)
        self.window.add_measured(spans, rates)
        if self.records is not None:
            self.records.rates(rates, times)
