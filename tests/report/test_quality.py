"""How good each number is: the 95% interval, the target, the warnings, memory, formatting.

(d) intervals and warnings from synthetic files whose interval is computed here by hand
(10 values: batch means with one value per batch, i.e. the plain Student t interval);
(e) every human-facing format prints numbers with 3 significant digits (a 0.000851 rate
reads 0.000851, never 0.00), while JSON and CSV keep full precision and the exact keys.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from milabench.report import build_report, render

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

T975_9 = 2.2622  # Student t, 0.975 quantile, 9 degrees of freedom (a printed table)
A = [100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.0, 101.0, 99.0]
B = [50.0, 51.0, 49.0, 50.5, 49.5, 50.0, 52.0, 48.0, 50.0, 50.0]

ROW_KEYS = {
    "observations", "warmup_s", "measured_s", "median", "ci95_low", "ci95_high",
    "halfwidth", "target", "target_met", "peak_rss", "peak_memory", "warnings",
}  # fmt: skip


def half_by_hand(values: list[float]) -> float:
    """Absolute half-width the report prints: the benchmark's relative half-width (t over
    10 batches of one value, around the plain mean) applied to the trimmed mean the
    report shows, so that a row and its warning say the same percentage."""
    relative = T975_9 * statistics.stdev(values) / math.sqrt(len(values)) / statistics.fmean(values)
    return relative * trimmed_mean(values)


def trimmed_mean(values: list[float]) -> float:
    return statistics.fmean(sorted(values)[1:-1])


def single(d: Path, tag: str = "one", rates=A, **kw) -> Path:
    return write_file(d, tag, entry(tag.split(".")[0], plan={"method": "njobs", "n": 1}),
                      rates=rates, **kw)  # fmt: skip


def test_interval_of_one_file_by_hand(tmp_path: Path):
    d = tmp_path / "runs" / "one"
    single(d)
    rep = build_report([d])
    br = rep.bench("one")
    h = half_by_hand(A)
    centre = trimmed_mean(A)  # the reported value: the trimmed mean
    assert br.raw_rate == pytest.approx(centre)
    assert br.ci_low == pytest.approx(centre - h, rel=1e-4)
    assert br.ci_high == pytest.approx(centre + h, rel=1e-4)
    assert br.halfwidth == pytest.approx(h / centre, rel=1e-4)
    assert br.observations == 10
    # 10 rates one second apart span 10 s of measurement (first to last, scaled up)
    assert br.measured_s == pytest.approx(10.0)
    assert br.warmup_s is None  # no warm-up record in an older file
    row = json.loads(render(rep, "json"))["benchmarks"][0]
    assert row["ci95_low"] == pytest.approx(centre - h, rel=1e-4)
    assert row["halfwidth"] == pytest.approx(h / centre, rel=1e-4)
    text = render(rep, "text")
    pct = 100 * h / centre
    assert f"±{pct:.2f}%" in text  # 1.3x%: three significant digits
    # about +/-1.3%, within the default +/-2%, with the 10 observations wanted: met
    assert h / centre < 0.02
    assert row["target"] == 0.02 and row["target_met"] is True and row["warnings"] == []


def test_devices_sum_and_repeats_average(tmp_path: Path):
    d = tmp_path / "runs" / "pg"
    write_file(d, "pg.D0", entry("pg"), rates=A)
    write_file(d, "pg.D1", entry("pg"), rates=B)
    br = build_report([d]).bench("pg")
    centre = trimmed_mean(A) + trimmed_mean(B)
    h = math.sqrt(half_by_hand(A) ** 2 + half_by_hand(B) ** 2)  # sum: quadrature
    assert br.raw_rate == pytest.approx(centre)
    assert (br.ci_low, br.ci_high) == (pytest.approx(centre - h, rel=1e-4),
                                       pytest.approx(centre + h, rel=1e-4))  # fmt: skip
    assert br.observations == 20

    # Two repeats that agree: their own intervals decide (sqrt(sum h^2) / k).
    d = tmp_path / "runs" / "rep"
    write_file(d, "rp.R1.D0", entry("rp"), rates=A)
    write_file(d, "rp.R2.D0", entry("rp"), rates=A[::-1])
    br = build_report([d]).bench("rp")
    h = math.sqrt(2 * half_by_hand(A) ** 2) / 2
    assert br.halfwidth == pytest.approx(h / br.raw_rate, rel=1e-4)
    assert br.ci_high - br.ci_low == pytest.approx(2 * h, rel=1e-4)

    # Two repeats that disagree more than their own intervals say (the host drifted
    # between them): the t interval over the repeats' values is the honest one.
    d = tmp_path / "runs" / "drift"
    shifted = [x * 1.1 for x in A]
    write_file(d, "rd.R1.D0", entry("rd"), rates=A)
    write_file(d, "rd.R2.D0", entry("rd"), rates=shifted)
    br = build_report([d]).bench("rd")
    values = [trimmed_mean(A), trimmed_mean(shifted)]
    between = 12.7062 * statistics.stdev(values) / math.sqrt(2)
    assert between > math.sqrt(half_by_hand(A) ** 2 + half_by_hand(shifted) ** 2) / 2
    assert br.ci_high - br.ci_low == pytest.approx(2 * between, rel=1e-4)


def test_window_records_and_their_warnings(tmp_path: Path):
    d = tmp_path / "runs" / "win"
    window = {
        "observations": 8, "warmup_s": 10.0, "warmup_observations": 4, "settled": False,
        "measured_s": 20.0, "mean": 0.4, "ci95": [0.3836, 0.4164], "halfwidth": 0.041,
        "batches": 8, "target": 0.02, "met": False, "min_observations": 10,
        "reason": "max_time",
    }  # fmt: skip
    records = [
        {"task": "train", "warmup": {"seconds": 10.0, "observations": 4, "settled": False}},
        {"task": "train", "window": window},
        {"task": "main", "process_tree": {"rss": 1 << 30, "peak_rss": 3 << 30, "processes": 3}},
    ]
    extra = [{"event": "data", "pipe": "data", "data": r} for r in records]
    single(d, "slow", rates=[0.4, 0.41, 0.39, 0.4, 0.42, 0.38, 0.4, 0.4], extra=extra)
    window2 = dict(window, observations=12, measured_s=3.0, halfwidth=0.01, met=True,
                   settled=True, reason="ended")  # fmt: skip
    single(d, "short", rates=[5.0] * 12,
           extra=[{"event": "data", "pipe": "data", "data": {"task": "train", "window": window2}}])  # fmt: skip
    rep = build_report([d])
    slow, short = rep.bench("slow"), rep.bench("short")
    assert (slow.warmup_s, slow.measured_s, slow.target_met) == (10.0, 20.0, False)
    assert slow.warnings == [
        "8 observations, fewer than the 10 wanted: the step (2.50 s) is long for the 20.0 s window",
        "95% interval ±4.1%, target ±2%",
        "warm-up never settled (capped at 10.0 s): the step time was still moving",
    ]
    assert slow.peak_rss == 3 << 30
    assert short.target_met is True
    assert short.warnings == [
        "the loop ran out after 3.00 s, before the window's end (6.00 s to 30.0 s of measured "
        "steps wanted): give the script more steps through its argv"
    ]
    assert rep.verdict == "PASS" and rep.exit_code == 0  # warnings never fail a run

    text = render(rep, "text")
    assert "Warnings\n--------" in text
    for w in slow.warnings:
        assert f"slow: {w}" in text
    header = text.split("Breakdown\n---------\n")[1].splitlines()[0]
    row = next(ln for ln in text.splitlines() if ln.startswith("slow "))
    cells = dict(zip([c.strip() for c in header.split("|")],
                     [c.strip() for c in row.split("|")], strict=True))  # fmt: skip
    assert cells["warm-up"] == "10.0 s" and cells["measured"] == "20.0 s"
    assert cells["target"] == "missed" and cells["obs"] == "8"
    assert cells["peak RSS"] == "3.00 GiB"
    md = render(rep, "markdown")
    assert "**Warnings**" in md and "slow: 95% interval ±4.1%, target ±2%" in md
    html = render(rep, "html")
    assert "<h2>Warnings</h2>" in html and "warm-up never settled" in html


def test_target_recomputed_without_a_window_record(tmp_path: Path):
    d = tmp_path / "runs" / "recompute"
    steady = [100.0 + 0.1 * (i % 3) for i in range(12)]
    single(d, "steady", rates=steady)
    strict = entry("strict", plan={"method": "njobs", "n": 1},
                   measure={"precision": 0.0001, "min_observations": 10})  # fmt: skip
    write_file(d, "strict", strict, rates=steady)  # same rates, a stricter target
    single(d, "few", rates=steady[:5])
    rep = build_report([d])
    assert rep.bench("steady").target_met is True and rep.bench("steady").warnings == []
    assert rep.bench("strict").target == 0.0001
    assert rep.bench("strict").target_met is False
    assert rep.bench("strict").warnings[0].endswith("target ±0.01%")
    few = rep.bench("few")
    assert few.target_met is False  # interval fine, but 5 < 10 observations
    assert few.warnings[0].startswith("5 observations, fewer than the 10 wanted: the step")


def test_peak_rss_falls_back_to_process_records(tmp_path: Path):
    d = tmp_path / "runs" / "rss"
    samples = [{"task": "main", "process": {"pid": 1, "load": 50, "memory": [m, 8 << 30]}}
               for m in (100 << 20, 300 << 20, 200 << 20)]  # fmt: skip
    single(d, "own", extra=[{"event": "data", "pipe": "data", "data": s} for s in samples])
    single(d, "none")
    rep = build_report([d])
    assert rep.bench("own").peak_rss == 300 << 20
    assert rep.bench("none").peak_rss is None
    assert "300 MiB" in render(rep, "text")


def test_three_significant_digits_in_every_human_format(tmp_path: Path):
    d = tmp_path / "runs" / "sig"
    tiny = [0.000851, 0.000852, 0.00085] * 4
    single(d, "tiny", rates=tiny)
    single(d, "big", rates=[12345.6, 12346.0, 12344.9] * 4)
    rep = build_report([d])
    assert statistics.fmean(sorted(tiny)[1:-1]) == pytest.approx(0.000851, rel=1e-3)
    for fmt in ("text", "markdown", "html"):
        out = render(rep, fmt)
        assert "0.000851" in out, fmt
        assert "12,300" in out, fmt
        assert " 0.00 " not in out and ">0.00<" not in out, fmt
    # machine formats keep full precision
    data = json.loads(render(rep, "json"))
    row = next(r for r in data["benchmarks"] if r["name"] == "tiny")
    assert row["perf"] == pytest.approx(statistics.fmean(sorted(tiny)[1:-1]), rel=1e-12)
    rows = list(csv.DictReader(io.StringIO(render(rep, "csv"))))
    assert float(next(r for r in rows if r["name"] == "big")["perf"]) == pytest.approx(
        statistics.fmean(sorted([12345.6, 12346.0, 12344.9] * 4)[1:-1])
    )


def test_json_and_csv_keys(tmp_path: Path):
    d = tmp_path / "runs" / "keys"
    single(d, "one")
    write_file(d, "bad.D0", entry("bad"), rates=[1.0], rc=1)
    rep = build_report([d])
    data = json.loads(render(rep, "json"))
    assert {"verdict", "exit_code", "verdict_reasons"} <= set(data)
    assert data["verdict"] == "FAIL" and data["exit_code"] == 1
    assert any("failure rate" in r for r in data["verdict_reasons"])
    for row in data["benchmarks"]:
        assert ROW_KEYS <= set(row), row["name"]
        assert isinstance(row["warnings"], list)
    one = next(r for r in data["benchmarks"] if r["name"] == "one")
    assert one["observations"] == 10 and one["median"] == pytest.approx(100.0)
    bad = next(r for r in data["benchmarks"] if r["name"] == "bad")
    assert bad["ci95_low"] is None and bad["target_met"] is None and bad["observations"] == 0
    header = render(rep, "csv").splitlines()[0].split(",")
    assert ROW_KEYS <= set(header)
