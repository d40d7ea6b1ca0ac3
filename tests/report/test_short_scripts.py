"""A script that ends before its window measured anything gets one line saying how long
it ran, what a measurement needs and what to change; a window with 0 observations always
says why, in the warnings and in the Errors section."""

from __future__ import annotations

import sys
from pathlib import Path

from milabench.report import build_report, render

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

SHORT = {"warmup_min": "0.5s", "warmup_max": "2s", "min": "3s", "max": "12s"}


def window(reason: str, warmup_s: float, measured_s: float) -> dict:
    record = {"observations": 0, "warmup_s": warmup_s, "measured_s": measured_s,
              "settled": True, "target": 0.02, "met": False, "min_observations": 10,
              "reason": reason}  # fmt: skip
    return {"event": "data", "pipe": "data", "data": {"task": "train", "window": record}}


def one(tmp_path: Path, name: str, record: dict) -> list[str]:
    d = tmp_path / name
    write_file(d, f"{name}.D0", entry(name, measure=SHORT), rates=[], extra=[record])
    rep = build_report([d])
    assert rep.bench(name).reason == "failed (no throughput sample)"
    [group] = rep.errors  # the Errors section says it too
    assert group.line == "no throughput sample" and group.excerpt == rep.bench(name).warnings
    assert rep.bench(name).warnings[0] in render(rep, "text")
    return rep.bench(name).warnings


def test_a_loop_that_ended_in_the_window_before_its_first_step(tmp_path):
    [line] = one(tmp_path, "regression", window("ended", 0.5, 0.03))
    assert line == (
        "nothing measured: the loop ended 0.0300 s into the measured window, before a "
        "measured step completed, after 0.500 s of warm-up (the process ran 1.00 s); a "
        "measurement needs 0.500 s to 2.00 s of warm-up (measure.warmup_min, warmup_max; the "
        "shorter once the step time settles), then 3.00 s to 12.0 s of measured steps "
        "(measure.min, max): give the script more steps through its argv, or end the warm-up "
        "before 0.530 s: --override regression.measure.warmup_min=0s --override "
        "regression.measure.warmup_max=0.2s"
    )


def test_a_step_longer_than_the_window(tmp_path):
    [line] = one(tmp_path, "slowstep", window("max_time", 2.0, 12.0))
    assert line == (
        "nothing measured: no measured step completed in the 12.0 s window (after 2.00 s of "
        "warm-up): a step is longer than the window; --override slowstep.measure.max=24s "
        "gives it time"
    )


def test_a_script_too_short_for_its_warm_up(tmp_path):
    [line] = one(tmp_path, "tiny", window("ended_in_warmup", 0.13, 0.0))
    assert line.startswith(
        "nothing measured: the loop ended during warm-up after 0.130 s, before the measured "
        "window could begin (the process ran 1.00 s); a measurement needs 0.500 s to 2.00 s"
    )
    assert line.endswith(
        "--override tiny.measure.warmup_min=0s --override tiny.measure.warmup_max=0.06s"
    )
