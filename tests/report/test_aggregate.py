"""Aggregation, reasons, validations and renderers on run folders with known contents."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchkit.devicemem import memory_record
from milabench.report import build_report, render
from milabench.report.tracebacks import extract_pip_errors, extract_traceback

sys.path.insert(0, str(Path(__file__).parent))
from synth import META, entry, write_file  # noqa: E402

TRACE = """some output
Traceback (most recent call last):
  File "main.py", line 10, in <module>
    train()
  File "main.py", line 5, in train
    raise ValueError("bad batch")
ValueError: bad batch
"""


def gpu(used, load, power, total=81920):
    return {"0": {"memory": [used, total], "load": load, "temperature": 60, "power": power}}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "synthetic"
    # per_gpu benchmark on two devices (device 1 slower)
    write_file(
        d,
        "pg.D0",
        entry("pg", weight=2.0),
        rates=[10, 11, 12, 13, 14, 100],
        losses=[3, 2, 1],
        gpudata=[gpu(1000, 0.9, 100), gpu(3000, 0.8, 200), gpu(2000, 0.7, 300)],
    )
    write_file(d, "pg.D1", entry("pg", weight=2.0), rates=[5, 5, 6])
    # global-rate benchmark (njobs): one success, one timeout
    nj = entry("nj", plan={"method": "njobs", "n": 2})
    write_file(d, "nj.0", nj, rates=[20, 22, 24, 26, 28])
    write_file(d, "nj.1", nj, rates=[21], rc="TIMEOUT")
    # early stop with a non-zero code is a success
    write_file(d, "es.D0", entry("es"), rates=[7, 8], rc=-15, stop=True)
    # NaN loss
    write_file(d, "nan.D0", entry("nan"), rates=[1, 2], losses=[1.0, float("nan")])
    # crash with a traceback
    write_file(d, "crash.D0", entry("crash"), rates=[], rc=1, stderr=TRACE)
    # capability skip (runner style)
    write_file(
        d,
        "multi",
        entry("multi", plan={"method": "njobs", "n": 1}),
        rc="SKIPPED",
        extra=[
            {
                "event": "message",
                "data": {"message": "skipped: len(nodes) >= 2", "skipped": "capability"},
            }
        ],
    )
    # the tool died: no end event, and a cut last line
    p = write_file(d, "cut.D0", entry("cut"), rates=[3, 3], rc=None)
    with open(p, "a") as f:
        f.write('{"event": "data", "data": {"task": "train", "ra')
    return d


def test_statistics_scores_and_reasons(run_dir: Path):
    rep = build_report([run_dir], entries={"notrun": entry("notrun", weight=1.5)})
    pg = rep.bench("pg")
    assert (pg.n, pg.fail, pg.ngpu) == (2, 0, 2)
    pooled = sorted([10, 11, 12, 13, 14, 100, 5, 5, 6])[1:-1]
    assert pg.samples == pooled
    assert pg.perf == pytest.approx(sum(pooled) / len(pooled))
    d0 = (11 + 12 + 13 + 14) / 4  # trimmed per device
    d1 = (5 + 5 + 6) / 3
    assert pg.device_rates == {"0": pytest.approx(d0), "1": pytest.approx(d1)}
    assert pg.score == pytest.approx(d0 + d1)
    assert pg.peak_memory == 3000
    assert pg.mean_load == pytest.approx(0.8)
    assert pg.energy == pytest.approx(100 * 1 + 200 * 1)  # left sums between samples
    assert pg.mean_power == pytest.approx(200)
    assert pg.perf_per_watt == pytest.approx((d0 + d1) / 200)

    nj = rep.bench("nj")
    assert (nj.n, nj.fail) == (2, 1)
    assert nj.perf == pytest.approx(24.0)
    assert nj.score == pytest.approx(24.0 * 0.5)
    assert rep.bench("es").statuses["es.D0"] == "success"
    assert rep.bench("nan").reason == "failed (NaN loss)"
    assert rep.bench("crash").reason == "failed (exit code 1)"
    assert rep.bench("multi").reason == "skipped: capability (len(nodes) >= 2)"
    assert rep.bench("multi").n == 0
    assert rep.bench("cut").reason == "incomplete"
    assert rep.bench("notrun").reason == "not run"

    weights = {
        "pg": 2.0,
        "nj": 1,
        "es": 1,
        "nan": 1,
        "crash": 1,
        "multi": 1,
        "cut": 1,
        "notrun": 1.5,
    }
    scores = {"pg": d0 + d1, "nj": 12.0, "es": 7.5}
    expected = math.exp(
        sum(w * math.log(scores.get(k, 0) + 1) for k, w in weights.items()) / sum(weights.values())
    )
    assert rep.score == pytest.approx(expected)
    # fails: nj.1, nan, crash, cut (multi skipped, notrun absent) over n = 2+2+1+1+1+1
    assert rep.failure_rate == pytest.approx(4 / 8)
    assert rep.verdict == "FAIL" and rep.exit_code == 1


def test_validation_layers(run_dir: Path):
    write_file(
        run_dir,
        "idle.D0",
        entry("idle"),
        rates=[1, 1],
        gpudata=[gpu(50000, 0.1, 50), gpu(50000, 0.2, 50)],
    )
    rep = build_report([run_dir], validations=["all"])
    layers = {layer.name: layer for layer in rep.layers}
    err = layers["error"]
    assert any("crash" in f and "ValueError: bad batch" in f for f in err.failures)
    assert any("nj" in f and "timed out" in f for f in err.failures)
    # every process that failed by the one rule is in the error layer, a NaN loss too
    assert any(f.startswith("nan: NaN loss in nan.D0") for f in err.failures)
    assert not any(f.startswith("multi") for lay in rep.layers for f in lay.failures)
    crash = next(g for g in rep.errors if g.bench == "crash")
    assert crash.line == "ValueError: bad batch" and crash.tags == ["crash.D0"]
    assert crash.excerpt[0].startswith("Traceback")
    assert layers["ensure_rate"].failures == ["crash: no throughput sample from crash.D0"]
    assert layers["loss"].failures == ["nan: NaN loss in nan.D0"]
    assert not any(f.startswith("pg:") for f in layers["usage"].failures)
    assert layers["usage"].failures == [
        "idle: mean accelerator load 0.150 < gpu_load_threshold 0.500"
    ]
    assert any("pg" in w and "memory" in w for w in layers["usage"].warnings)
    assert any(
        f.startswith("pg:") and "2 process(es) started" in f for f in layers["planning"].failures
    )


def test_clean_run_passes(tmp_path: Path):
    d = tmp_path / "ok"
    write_file(d, "a.D0", entry("a"), rates=[10.0] * 6, losses=[2, 1])
    write_file(d, "b.0", entry("b", plan={"method": "njobs", "n": 1}), rates=[3, 4, 5])
    rep = build_report([d], validations=["all,-usage"])
    assert rep.exit_code == 0 and rep.verdict == "PASS" and rep.failure_rate == 0
    assert rep.score == pytest.approx(math.exp((math.log(11) + math.log(5)) / 2))
    assert "a " in render(rep, "text") and "(PASS)" in render(rep, "text")
    # missing metadata fails the default `version` layer
    write_file(d, "c.D0", entry("c"), rates=[1.0], meta=None)
    assert build_report([d]).exit_code == 1


def test_the_start_up_estimate_stands_beside_the_peak_measured(tmp_path: Path):
    """The ``estimate`` message of `benchkit.memory` (bytes per GPU) becomes the row's
    ``memory_estimate`` in MiB, beside ``peak_memory``; the CSV column is appended only
    when some row has one."""
    d = tmp_path / "runs" / "est"
    estimate = {"event": "message", "data": {"message": "memory estimate 3.0 GiB per GPU",
                                             "estimate": True, "memory": {"per_gpu": 3 * 2**30}}}  # fmt: skip
    write_file(d, "a.D0", entry("a"), rates=[10, 11, 12], gpudata=[gpu(3000, 0.9, 100)],
               extra=[estimate])  # fmt: skip
    write_file(d, "b.D0", entry("b"), rates=[10, 11, 12], gpudata=[gpu(2000, 0.9, 100)])
    rep = build_report([d])
    assert rep.bench("a").memory_estimate == 3072 and rep.bench("b").memory_estimate is None
    rows = {r["name"]: r for r in json.loads(render(rep, "json"))["benchmarks"]}
    assert rows["a"]["memory_estimate"] == 3072 and rows["a"]["peak_memory"] == 3000
    header, *lines = list(csv.reader(io.StringIO(render(rep, "csv"))))
    assert header[-1] == "memory_estimate"
    write_file(tmp_path / "runs" / "none", "b.D0", entry("b"), rates=[10, 11, 12])
    bare = list(csv.reader(io.StringIO(render(build_report([tmp_path / "runs" / "none"]), "csv"))))
    assert "memory_estimate" not in bare[0]


def torch_peaks(allocated: float, reserved: float, rank: int = 0, **counts: int) -> dict:
    """A run-file line of the record a GPU process writes (`benchkit.devicemem`), MiB."""
    figures = {"device": 0, "max_allocated": allocated, "max_reserved": reserved, **counts}
    return {"event": "data", "pipe": "data", "data": memory_record(figures, rank=rank)}


def test_torch_peaks_stand_beside_the_peak_measured_and_the_estimate(tmp_path: Path):
    """Each process's ``torch_memory`` record (MiB) becomes the row's
    ``torch_peak_allocated``/``torch_peak_reserved``, the largest over the successful
    processes (a failed one is left out, as from ``peak_memory``), with the allocator's
    retries and OOMs; the CSV columns are appended only when some row has them."""
    d = tmp_path / "runs" / "torch"
    pna = entry("pna", weight=2.0)
    write_file(d, "pna.D0", pna, rates=[10, 11, 12], gpudata=[gpu(40166, 0.9, 300)],
               extra=[torch_peaks(28100.0, 39000.0, alloc_retries=0, ooms=0)])  # fmt: skip
    write_file(d, "pna.D1", pna, rates=[10, 11, 12], gpudata=[gpu(39000, 0.9, 300)],
               extra=[torch_peaks(29230.5, 38000.0, alloc_retries=3, ooms=0)])  # fmt: skip
    write_file(d, "pna.D2", pna, rates=[10], rc=1, stderr=TRACE,
               extra=[torch_peaks(60000.0, 70000.0, alloc_retries=9, ooms=1)])  # fmt: skip
    # one launch (torchrun) whose two ranks wrote into the same file
    ddp = entry("ddp", plan={"method": "njobs", "n": 1})
    write_file(d, "ddp.0", ddp, rates=[5, 6, 7],
               extra=[torch_peaks(100.0, 120.0, rank=0), torch_peaks(90.0, 150.0, rank=1)])  # fmt: skip
    write_file(d, "bert.D0", entry("bert"), rates=[10, 11, 12], gpudata=[gpu(16050, 0.9, 300)])
    rep = build_report([d])
    pna_row = rep.bench("pna")
    assert (pna_row.torch_peak_allocated, pna_row.torch_peak_reserved) == (29230.5, 39000.0)
    assert (pna_row.torch_alloc_retries, pna_row.torch_ooms) == (3, 0)
    assert pna_row.peak_memory == 40166
    ddp_row = rep.bench("ddp")
    assert (ddp_row.torch_peak_allocated, ddp_row.torch_peak_reserved) == (100, 150)
    assert ddp_row.torch_alloc_retries is None  # not recorded: not invented
    rows = {r["name"]: r for r in json.loads(render(rep, "json"))["benchmarks"]}
    assert rows["pna"]["torch_peak_allocated"] == 29230.5 and rows["pna"]["torch_ooms"] == 0
    assert rows["pna"]["torch_peak_reserved"] == 39000.0 and rows["pna"]["torch_alloc_retries"] == 3
    assert {rows["bert"][k] for k in TORCH_FIELDS} == {None}
    header, *lines = list(csv.reader(io.StringIO(render(rep, "csv"))))
    assert header[-4:] == TORCH_FIELDS
    by_name = {line[0]: dict(zip(header, line, strict=True)) for line in lines}
    assert [by_name["pna"][k] for k in TORCH_FIELDS] == ["29230.5", "39000.0", "3", "0"]
    assert [by_name["bert"][k] for k in TORCH_FIELDS] == ["", "", "", ""]
    write_file(tmp_path / "runs" / "cpu", "b.D0", entry("b"), rates=[10, 11, 12])
    bare = build_report([tmp_path / "runs" / "cpu"])
    assert not set(TORCH_FIELDS) & set(next(csv.reader(io.StringIO(render(bare, "csv")))))
    assert json.loads(render(bare, "json"))["benchmarks"][0]["torch_peak_reserved"] is None


TORCH_FIELDS = ["torch_peak_allocated", "torch_peak_reserved", "torch_alloc_retries", "torch_ooms"]


def test_a_run_where_every_benchmark_failed_has_no_score_in_any_format(tmp_path: Path):
    """The formula gives exp(0) = 1 when nothing was measured; no format may print it."""
    d = tmp_path / "runs" / "all-failed"
    write_file(d, "crash.D0", entry("crash"), rc=1, stderr=TRACE)
    write_file(d, "diverges.D0", entry("diverges"), rates=[1, 2], losses=[1.0, float("nan")])
    rep = build_report([d])
    assert rep.score is None and rep.exit_code == 1
    why = "no benchmark succeeded (2 failed)"
    assert rep.score_reason == why
    text = render(rep, "text")
    assert f"Score:        - ({why})" in text
    table = text.split("Breakdown\n---------\n")[1].split("\n\n")[0].splitlines()
    assert all(line.split("|")[-2].strip() == "-" for line in table[1:])  # row scores
    md = render(rep, "markdown")
    assert md.startswith(f"## ❌ milabench: FAIL, score - ({why})")
    data = json.loads(render(rep, "json"))
    assert (data["score"], data["score_reason"], data["exit_code"]) == (None, why, 1)
    assert [r["score"] for r in data["benchmarks"]] == [None, None]
    rows = list(csv.DictReader(io.StringIO(render(rep, "csv"))))
    assert [r["score"] for r in rows] == ["", ""]
    html = render(rep, "html")
    assert f"score - ({why})" in html and "score 1" not in html and "score 0" not in html
    proc = _cli("report", "--runs", str(d))
    assert proc.returncode == 1 and f"- ({why})" in proc.stdout
    # a run that measured something keeps its score; the failed row still has none
    write_file(d, "ok.D0", entry("ok"), rates=[10.0] * 6)
    rep = build_report([d])
    assert rep.score == pytest.approx(math.exp(math.log(11) / 3)) and rep.score_reason is None
    assert {r["name"]: r["score"] for r in json.loads(render(rep, "json"))["benchmarks"]} == {
        "crash": None,
        "diverges": None,
        "ok": pytest.approx(10.0),
    }


def test_a_suite_whose_measured_benchmarks_weigh_nothing_has_no_score(tmp_path: Path):
    d = tmp_path / "unweighted"
    write_file(d, "a.D0", entry("a", weight=0), rates=[10.0] * 6)
    rep = build_report([d])
    assert rep.score is None
    assert rep.score_reason == "no benchmark that measured a rate has a weight (a)"


def test_renderers(run_dir: Path):
    rep = build_report([run_dir])
    text = render(rep, "text")
    header = text.split("Breakdown\n---------\n")[1].splitlines()[0]
    assert [c.strip() for c in header.split("|")] == [
        "bench",
        "fail",
        "n",
        "ngpu",
        "perf",
        "95% CI",
        "obs",
        "warm-up",
        "measured",
        "target",
        "sem%",
        "std%",
        "peak RSS",
        "peak acc mem",
        "energy",  # the fixture's monitors report power: the energy columns are shown
        "items/J",
        "score",
        "weight",
    ]
    assert "Failure rate:" in text and "Errors" in text and "ValueError: bad batch" in text
    data = json.loads(render(rep, "json"))
    assert {"benchmarks", "score", "failure_rate", "verdict"} <= set(data)
    row = next(r for r in data["benchmarks"] if r["name"] == "multi")
    assert {"name", "n", "fail", "ngpu", "perf", "std", "sem", "score", "weight"} <= set(row)
    assert row["perf"] is None and row["reason"].startswith("skipped: capability")
    assert data["score"] == pytest.approx(rep.score)
    rows = list(csv.DictReader(io.StringIO(render(rep, "csv"))))
    assert float(next(r for r in rows if r["name"] == "pg")["perf"]) == pytest.approx(
        rep.bench("pg").perf
    )
    md = render(rep, "markdown")
    assert "| bench | fail |" in md and "<details>" in md
    html = render(rep, "html")
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "<script" not in html


def test_traceback_extraction_variants():
    torchrun = "\n".join("[rank0]: " + ln for ln in TRACE.splitlines())
    assert extract_traceback(torchrun.splitlines()).line == "ValueError: bad batch"
    chained = (
        TRACE
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + TRACE.replace("ValueError: bad batch", "KeyError: 'x'")
    )
    assert extract_traceback(chained.splitlines()).line == "KeyError: 'x'"
    pip = [
        "Collecting foo",
        "ERROR: Could not find a version that satisfies the requirement foo==9",
        "ERROR: No matching distribution found for foo==9",
    ]
    assert extract_pip_errors(pip).line.startswith("ERROR: Could not find a version")
    uv = ["  × No solution found when resolving dependencies:", "  ╰─▶ Because foo was not found"]
    assert "No solution found" in extract_pip_errors(uv).line


def test_install_log_folder_reports_pip_error(tmp_path: Path):
    d = tmp_path / "install.2026"
    write_file(
        d,
        "torch",
        {"name": "torch"},
        rc=1,
        stderr="ERROR: No matching distribution found for torch==0.0.1\n",
    )
    write_file(d, "hf", {"name": "hf"}, rc=0, meta=None)
    rep = build_report([d])
    assert rep.errors[0].line == "ERROR: No matching distribution found for torch==0.0.1"
    assert rep.exit_code == 1
    assert [lay.name for lay in rep.layers if not lay.passed] == ["error"]  # no rate expected
    assert "ERROR: No matching distribution" in render(rep, "text")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_report(run_dir: Path, tmp_path: Path):
    proc = _cli("report", "--runs", str(run_dir), "--format", "json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["verdict"] == "FAIL"
    out = tmp_path / "r.html"
    proc = _cli("report", "--runs", str(run_dir), "--format", "html", "--output", str(out))
    assert out.read_text().startswith("<!DOCTYPE html>")
    proc = _cli("report", "--runs", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no such run folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _cli("report", "--runs", str(run_dir), "--validations", "bogus")
    assert proc.returncode == 2 and "unknown layer" in proc.stderr


def test_meta_is_used_for_system(run_dir: Path):
    rep = build_report([run_dir])
    assert rep.system["cpu"] == META["cpu"]["brand"] and rep.system["n_cpu"] == 2


def test_tags_and_multinode_launch(tmp_path: Path):
    from milabench.report.runs import split_tag

    assert split_tag("resnet50.R2.D3", "resnet50")[1] == {
        "repeat": 2,
        "device": "3",
        "job": None,
        "node": None,
    }
    assert split_tag("llm-nodes.0.node2", None) == (
        "llm-nodes",
        {"repeat": None, "device": None, "job": "0", "node": "node2"},
    )
    assert split_tag("a.b.0.10.0.0.2", "a.b")[1]["node"] == "10.0.0.2"
    d = tmp_path / "mn"
    e = entry("mn", plan={"method": "njobs", "n": 1}, num_machines=2)
    write_file(d, "mn.0.main", e, rates=[50, 52, 51])
    write_file(d, "mn.0.10.0.0.2", e, rates=[])  # other rank: no rates, exit 0
    rep = build_report([d], validations=["all,-usage"])
    mn = rep.bench("mn")
    assert (mn.n, mn.fail, mn.reason) == (2, 0, None)
    assert mn.score == pytest.approx(51.0)
    assert rep.exit_code == 0


def test_entries_that_differ_from_upstream_are_named_in_every_format(run_dir: Path):
    """An entry whose `parity` says "different: ..." is listed with its reason; "same"
    and unset entries are not."""
    entries = {
        "pg": entry("pg", parity="different: t5-large at 512 tokens, upstream t5-small"),
        "nj": entry("nj", parity="same"),
    }
    rep = build_report([run_dir], entries=entries)
    line = "pg: t5-large at 512 tokens, upstream t5-small"
    text = render(rep, "text")
    assert "Comparison with upstream milabench" in text and line in text
    assert "nj:" not in text.split("Comparison with upstream milabench")[1].split("\n\n")[0]
    assert line in render(rep, "markdown")
    assert "pg: t5-large at 512 tokens" in render(rep, "html")
    rows = {r["name"]: r for r in json.loads(render(rep, "json"))["benchmarks"]}
    assert rows["pg"]["parity"].startswith("different:") and rows["nj"]["parity"] == "same"
    csv_rows = {r["name"]: r for r in csv.DictReader(io.StringIO(render(rep, "csv")))}
    assert csv_rows["pg"]["parity"].startswith("different:") and csv_rows["es"]["parity"] == ""


def test_a_cpu_machine_runs_on_no_accelerator(tmp_path: Path):
    """A per-device process of a CPU run (tag D0) ran on the CPU: its row says ngpu 0,
    as the System block says n_gpu 0."""
    d = tmp_path / "cpu"
    write_file(d, "a.D0", entry("a"), rates=[10.0] * 6)
    rep = build_report([d])
    assert rep.bench("a").ngpu == 0 and rep.system["n_gpu"] == 0
    gpu_meta = {**META, "accelerators": {"arch": "cuda", "gpus": {"0": {"product": "H100"}}}}
    write_file(tmp_path / "gpu", "a.D0", entry("a"), rates=[10.0] * 6, meta=gpu_meta)
    assert build_report([tmp_path / "gpu"]).bench("a").ngpu == 1
