"""Honest overhead: what the instrumentation cost, and scripts that never measured.

Benchmarks measured from outside (a voirfile's probes on a third-party script) write one
`overhead` record at the end of the run; the report shows its fraction of a step in every
format, warns above `OVERHEAD_WARN` (1%) without changing the verdict, and adds nothing
for benchmarks that do not write it. A process whose script ended during warm-up is
flagged in every format. The run folders are real `.data` files written event by event.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from milabench.report import build_report, render
from milabench.report.aggregate import OVERHEAD_WARN
from milabench.report.numbers import fmt_duration
from milabench.report.render_tables import COLUMNS, CSV_FIELDS
from milabench.report.runs import read_file

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

RATES = [100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.0, 101.0, 99.0]
SMALL = {"per_step_s": 2.4e-06, "step_s": 0.0123, "fraction": 0.000195, "steps": 812,
         "fires": 1624, "parts": {"callbacks_s": 1.1e-06, "dispatch_s": 1.3e-06}}  # fmt: skip
LARGE = {"per_step_s": 1.2e-05, "step_s": 0.00052, "fraction": 0.023, "steps": 4000}
FORMATS = ("text", "markdown", "html", "json", "csv")


def data(record: dict) -> dict:
    return {"event": "data", "pipe": "data", "data": record}


def overhead_record(values: dict) -> dict:
    return data({"task": "train", "overhead": values, "time": 1_000_020.0})


def bench(d: Path, name: str, *, overhead: dict | None = None, tag: str | None = None, **kw):
    extra = list(kw.pop("extra", []))
    if overhead is not None:
        extra.append(overhead_record(overhead))
    cfg = entry(name, plan={"method": "njobs", "n": 1})
    return write_file(d, tag or name, cfg, rates=kw.pop("rates", RATES), extra=extra, **kw)


def csv_rows(report) -> tuple[list[str], list[dict]]:
    text = render(report, "csv")
    return text.splitlines()[0].split(","), list(csv.DictReader(io.StringIO(text)))


def table_cells(text: str, name: str, header_after: str) -> dict[str, str]:
    """The Breakdown row of ``name`` as {column: cell} (text format)."""
    header = text.split(header_after)[1].splitlines()[0]
    row = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
    cols = [c.strip() for c in header.split("|")]
    return dict(zip(cols, [c.strip() for c in row.split("|")], strict=True))


def test_overhead_record_is_parsed_last_one_wins(tmp_path: Path):
    d = tmp_path / "runs" / "parse"
    path = bench(d, "ext", extra=[overhead_record({"fraction": 0.5})], overhead=SMALL)
    fr = read_file(path)
    assert fr.overhead == SMALL  # the last record, as written
    assert read_file(bench(d, "plain")).overhead is None


def test_small_overhead_is_shown_without_warning(tmp_path: Path):
    d = tmp_path / "runs" / "small"
    bench(d, "ext", overhead=SMALL)
    bench(d, "builtin")
    rep = build_report([d])
    ext, builtin = rep.bench("ext"), rep.bench("builtin")
    assert ext.overhead == pytest.approx(0.000195)
    assert ext.overhead_per_step_s == pytest.approx(2.4e-06)
    assert ext.warnings == [] and builtin.warnings == []
    assert builtin.overhead is None and builtin.overhead_per_step_s is None
    assert rep.verdict == "PASS"

    rows = {r["name"]: r for r in json.loads(render(rep, "json"))["benchmarks"]}
    assert rows["ext"]["overhead"] == pytest.approx(0.000195, rel=1e-12)
    assert rows["ext"]["overhead_per_step_s"] == pytest.approx(2.4e-06, rel=1e-12)
    assert "overhead" not in rows["builtin"] and "overhead_per_step_s" not in rows["builtin"]

    header, csv_data = csv_rows(rep)
    assert header == CSV_FIELDS + ["overhead", "overhead_per_step_s"]
    by_name = {r["name"]: r for r in csv_data}
    assert float(by_name["ext"]["overhead"]) == pytest.approx(0.000195, rel=1e-12)
    assert float(by_name["ext"]["overhead_per_step_s"]) == pytest.approx(2.4e-06, rel=1e-12)
    assert by_name["builtin"]["overhead"] == "" and by_name["builtin"]["overhead_per_step_s"] == ""

    text = render(rep, "text")
    cells = table_cells(text, "ext", "Breakdown\n---------\n")
    assert cells["overhead"] == "0.019%/step"
    assert table_cells(text, "builtin", "Breakdown\n---------\n")["overhead"] == "-"
    assert list(cells)[list(cells).index("measured") + 1] == "overhead"
    assert "Warnings" not in text

    md = render(rep, "markdown")
    header_md = next(ln for ln in md.splitlines() if ln.startswith("| bench |"))
    assert "| measured | overhead | target |" in header_md
    ext_md = next(ln for ln in md.splitlines() if ln.startswith("| ext |"))
    assert "| 0.019%/step |" in ext_md
    assert header_md.count("|") == ext_md.count("|")

    html = render(rep, "html")
    assert "<th>overhead</th>" in html
    assert '<td class="num">0.019%/step</td>' in html
    assert "overhead 0.019%/step)" in html  # the benchmark's details paragraph
    assert html.count("overhead 0.019%/step") == 1  # the built-in one shows none


def test_large_overhead_warns_and_the_verdict_stands(tmp_path: Path):
    d = tmp_path / "runs" / "large"
    bench(d, "ext", overhead=LARGE)
    rep = build_report([d])
    ext = rep.bench("ext")
    warning = "instrumentation costs 2.3% of a step (12.0 µs of 520 µs): above 1%"
    assert ext.warnings == [warning]
    assert ext.overhead == pytest.approx(0.023)
    assert rep.verdict == "PASS" and rep.exit_code == 0  # warnings never fail a run
    for fmt in ("text", "markdown", "html", "csv"):
        assert warning in render(rep, fmt), fmt
    data_ = json.loads(render(rep, "json"))  # JSON escapes µs: compare the parsed text
    assert data_["warnings"] == [{"bench": "ext", "message": warning}]
    assert data_["benchmarks"][0]["warnings"] == [warning]
    assert "~ ext: " + warning in render(rep, "text")
    assert table_cells(render(rep, "text"), "ext", "Breakdown\n---------\n")["overhead"] == (
        "2.3%/step"
    )


def test_threshold_and_tolerant_reading(tmp_path: Path):
    assert OVERHEAD_WARN == 0.01
    d = tmp_path / "runs" / "edge"
    bench(d, "at", overhead={"fraction": OVERHEAD_WARN, "per_step_s": None})  # not above
    bench(d, "derived", overhead={"per_step_s": 3e-4, "step_s": 0.01})  # 3%, computed
    bench(d, "nofrac", overhead={"per_step_s": None, "step_s": "fast", "fraction": None})
    bench(d, "partial", overhead={"fraction": 0.05, "step_s": 0.002})  # per_step derived
    bench(d, "bare", overhead={"fraction": 0.04})
    bench(d, "junk", overhead={"fraction": True, "per_step_s": "x"})
    rep = build_report([d])
    assert rep.bench("at").warnings == [] and rep.bench("at").overhead == 0.01
    assert rep.bench("at").overhead_per_step_s is None
    derived = rep.bench("derived")
    assert derived.overhead == pytest.approx(0.03)
    assert derived.warnings == ["instrumentation costs 3% of a step (300 µs of 10.0 ms): above 1%"]
    assert rep.bench("nofrac").overhead is None and rep.bench("nofrac").warnings == []
    partial = rep.bench("partial")
    assert partial.overhead_per_step_s == pytest.approx(1e-4)
    assert partial.warnings == ["instrumentation costs 5% of a step (100 µs of 2.00 ms): above 1%"]
    assert rep.bench("bare").warnings == ["instrumentation costs 4% of a step: above 1%"]
    assert rep.bench("junk").overhead is None
    rows = {r["name"]: r for r in json.loads(render(rep, "json"))["benchmarks"]}
    assert rows["at"]["overhead"] == 0.01 and rows["at"]["overhead_per_step_s"] is None
    assert "overhead" not in rows["nofrac"] and "overhead" not in rows["junk"]
    assert rep.verdict == "PASS"


def test_largest_overhead_of_the_successful_files(tmp_path: Path):
    d = tmp_path / "runs" / "several"
    cfg = entry("pg")
    write_file(d, "pg.D0", cfg, rates=RATES, extra=[overhead_record(SMALL)])
    write_file(d, "pg.D1", cfg, rates=RATES, extra=[overhead_record(LARGE)])
    # a failed process's overhead does not describe the reported figure
    write_file(d, "pg.D2", cfg, rates=RATES, rc=1,
               extra=[overhead_record({"fraction": 0.5, "per_step_s": 1.0, "step_s": 2.0})])  # fmt: skip
    rep = build_report([d])
    pg = rep.bench("pg")
    assert pg.overhead == pytest.approx(0.023)
    assert pg.overhead_per_step_s == pytest.approx(1.2e-05)
    overhead_warnings = [w for w in pg.warnings if "instrumentation" in w]
    assert overhead_warnings == [
        "pg.D1: instrumentation costs 2.3% of a step (12.0 µs of 520 µs): above 1%"
    ]


def test_no_overhead_record_no_noise(tmp_path: Path):
    d = tmp_path / "runs" / "builtin"
    bench(d, "one")
    bench(d, "two")
    rep = build_report([d])
    assert all(br.overhead is None for br in rep.benchmarks)
    for row in json.loads(render(rep, "json"))["benchmarks"]:
        assert "overhead" not in row and "overhead_per_step_s" not in row
    header, _ = csv_rows(rep)
    assert header == CSV_FIELDS
    text = render(rep, "text")
    header_text = text.split("Breakdown\n---------\n")[1].splitlines()[0]
    assert [c.strip() for c in header_text.split("|")] == COLUMNS
    for fmt in ("text", "markdown", "html"):
        out = render(rep, fmt).replace(str(d), "")  # the folder's name has the test's
        assert "overhead" not in out, fmt


WINDOW_IN_WARMUP = {
    "observations": 0, "warmup_s": 0.8, "warmup_observations": 5, "settled": False,
    "measured_s": 0.0, "mean": None, "ci95": None, "halfwidth": None, "batches": 0,
    "target": 0.02, "met": False, "min_observations": 10, "reason": "ended_in_warmup",
}  # fmt: skip
# What a measurement needs with the default window, and what to change (one line each).
NEEDS = (
    "(the process ran 1.00 s); a measurement needs 1.00 s to 10.0 s of warm-up "
    "(measure.warmup_min, warmup_max; the shorter once the step time settles), then 6.00 s "
    "to 30.0 s of measured steps (measure.min, max): give the script more steps through "
    "its argv, or end the warm-up before "
)
IN_WARMUP = (
    "nothing measured: the loop ended during warm-up after 0.800 s, before the measured "
    f"window could begin {NEEDS}0.800 s: --override short.measure.warmup_min=0s "
    "--override short.measure.warmup_max=0.4s"
)
AFTER_WARMUP = (
    "nothing measured: the script ended as its warm-up finished after 1.50 s, before the "
    f"measured window could record a step {NEEDS}1.50 s: --override "
    "cut.measure.warmup_min=0s --override cut.measure.warmup_max=0.7s"
)


def test_script_that_ended_in_warmup_is_flagged_everywhere(tmp_path: Path):
    d = tmp_path / "runs" / "warm"
    bench(d, "short", rates=[], extra=[data({"task": "train", "window": WINDOW_IN_WARMUP})])
    warm = {"seconds": 1.5, "observations": 6, "settled": True}
    bench(d, "cut", rates=[], extra=[data({"task": "train", "warmup": warm})])
    bench(d, "fine")
    rep = build_report([d])
    assert rep.bench("short").warnings == [IN_WARMUP]
    assert rep.bench("cut").warnings == [AFTER_WARMUP]
    assert rep.bench("fine").warnings == []
    # nothing measured is a failure by the one rule; the warning says why
    assert rep.bench("short").fail == 1 and "no throughput sample" in rep.bench("short").reason
    for fmt in FORMATS:
        out = render(rep, fmt)
        if fmt == "json":
            out = json.dumps(json.loads(out), ensure_ascii=False)
        assert IN_WARMUP in out and AFTER_WARMUP in out, fmt
    messages = json.loads(render(rep, "json"))["warnings"]
    assert {"bench": "short", "message": IN_WARMUP} in messages
    _, rows = csv_rows(rep)
    assert next(r for r in rows if r["name"] == "cut")["warnings"] == AFTER_WARMUP


def test_ended_in_warmup_beside_a_measured_process(tmp_path: Path):
    """One repeat measured, the other ended in warm-up: the benchmark keeps its figure and
    the warning names the process (no warning for the window record of a measured one)."""
    d = tmp_path / "runs" / "mixed"
    cfg = entry("mx")
    write_file(d, "mx.R1.D0", cfg, rates=RATES)
    write_file(d, "mx.R2.D0", cfg, rates=[],
               extra=[data({"task": "train", "window": WINDOW_IN_WARMUP})])  # fmt: skip
    # killed during warm-up (no record at all): the status says it, no warm-up sentence
    write_file(d, "mx.R3.D0", cfg, rates=[], rc="TIMEOUT")
    br = build_report([d]).bench("mx")
    assert br.summary is not None and br.fail == 2
    assert br.warnings == [f"mx.R2.D0: {IN_WARMUP.replace('short.', 'mx.')}"]


def test_fmt_duration():
    assert fmt_duration(2.4e-06) == "2.40 µs"
    assert fmt_duration(0.0123) == "12.3 ms"
    assert fmt_duration(0.00052) == "520 µs"
    assert fmt_duration(9.996e-4) == "1.00 ms"
    assert fmt_duration(6.123) == "6.12 s"
    assert fmt_duration(8.5e-7) == "850 ns"
    assert fmt_duration(None) == "-" and fmt_duration(0) == "0 s"
