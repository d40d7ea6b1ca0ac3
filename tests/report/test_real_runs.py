"""Reports, comparisons and the store on folders written by a real `milabench run`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from milabench.report import build_report, render

from .conftest import SUITE, milabench

pytestmark = pytest.mark.slow


def independent_stats(run_dir: Path) -> dict:
    """Recompute the report's numbers from the `.data` files with plain json, following
    docs/reports.md (not milabench.report's code)."""
    per_bench: dict[str, list[dict]] = {}
    for path in sorted(run_dir.glob("*.data")):
        info = {"rates": [], "rc": None, "stop": False, "nan": False, "device": None}
        for line in path.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            data = ev.get("data")
            if ev["event"] == "config":
                name = data["name"]
                method = data["plan"]["method"]
                weight = data["weight"] * (1 if data.get("enabled", True) else 0)
            elif ev["event"] == "data" and data.get("task") == "train" and "rate" in data:
                info["rates"].append(float(data["rate"]))
            elif ev["event"] == "data" and "loss" in data:
                info["nan"] |= data["loss"] in ("NaN", "Infinity", "-Infinity")
            elif ev["event"] == "end":
                info["rc"] = data["return_code"]
            elif ev["event"] == "stop":
                info["stop"] = True
        tag_rest = path.name[len(name) + 1 : -len(".data")].split(".")
        info["device"] = next((p[1:] for p in tag_rest if p.startswith("D")), None)
        info["method"] = method
        info["weight"] = weight
        per_bench.setdefault(name, []).append(info)

    def trimmed(values):
        values = sorted(values)
        return values[1:-1] if len(values) >= 5 else values

    out = {}
    for name, files in per_bench.items():
        # docs/measurement.md section 4: measured, no NaN/inf loss (an early stop does not
        # excuse it), ended with code 0 or by the instrumentation's stop
        ok = [f for f in files if (f["stop"] or f["rc"] == 0) and f["rates"] and not f["nan"]]
        n, fail = len(files), len(files) - len(ok)
        pooled = trimmed([r for f in ok for r in f["rates"]])
        if not pooled:
            out[name] = {
                "n": n,
                "fail": fail,
                "perf": None,
                "score": None,  # no value, no score (the suite counts it as 0)
                "weight": files[0]["weight"],
            }
            continue
        mean = sum(pooled) / len(pooled)
        std = math.sqrt(sum((x - mean) ** 2 for x in pooled) / (len(pooled) - 1))
        if files[0]["method"] == "per_gpu":
            devs: dict = {}
            for f in ok:
                devs.setdefault(f["device"], []).extend(f["rates"])
            raw = sum(sum(trimmed(v)) / len(trimmed(v)) for v in devs.values())
        else:
            raw = mean
        out[name] = {"n": n, "fail": fail, "perf": mean, "std%": 100 * std / mean,
                     "sem%": 100 * std / math.sqrt(len(pooled)) / mean,
                     "score": raw * (1 - fail / n), "weight": files[0]["weight"]}  # fmt: skip
    return out


def test_report_matches_independent_recomputation(real_runs):
    run_dir = real_runs["full"]
    expected = independent_stats(run_dir)
    assert set(expected) == {"steady", "steady-jobs", "broken"}
    proc = milabench("report", "--runs", str(run_dir), "--format", "json", "--config", str(SUITE))
    assert proc.returncode == 1, proc.stderr  # broken fails on purpose
    data = json.loads(proc.stdout)
    rows = {r["name"]: r for r in data["benchmarks"]}
    for name, exp in expected.items():
        row = rows[name]
        assert (row["n"], row["fail"]) == (exp["n"], exp["fail"]), name
        assert row["score"] == (exp["score"] and pytest.approx(exp["score"])), name
        if exp["perf"] is not None:
            assert row["perf"] == pytest.approx(exp["perf"])
            assert row["std"] == pytest.approx(exp["std%"])
            assert row["sem"] == pytest.approx(exp["sem%"])
    assert rows["broken"]["reason"] == "failed (exit code 1)"
    # suite score from the suite file's weights (the disabled entry weighs nothing)
    suite = yaml.safe_load(SUITE.read_text())
    weights = {k: v["weight"] * (1 if v.get("enabled", True) else 0) for k, v in suite.items()}
    num = sum(w * math.log((expected[k]["score"] or 0) + 1) for k, w in weights.items() if w)
    assert data["score"] == pytest.approx(math.exp(num / sum(w for w in weights.values() if w)))
    total_n = sum(e["n"] for e in expected.values())
    assert data["failure_rate"] == pytest.approx(1 / total_n)
    assert data["verdict"] == "FAIL"
    assert rows["switched-off"]["reason"] == "disabled" and rows["switched-off"]["weight"] == 0
    text = render(build_report([run_dir]), "text")
    assert "RuntimeError: planted failure for the report tests" in text


CPU_SUITE = Path(__file__).parents[2] / "config" / "cpu-fast.yaml"


def test_cpu_suite_report_matches_independent_recomputation(tmp_path):
    """The same check on a real run of the CPU suite's torch benchmarks."""
    pytest.importorskip("torch")
    from .conftest import real_run

    run_dir = real_run(tmp_path, "cpu", "--select", "flops-fp32,convnet-noio", suite=CPU_SUITE)
    expected = independent_stats(run_dir)
    assert set(expected) == {"flops-fp32", "convnet-noio"}
    proc = milabench("report", "--runs", str(run_dir), "--format", "json")
    data = json.loads(proc.stdout)
    rows = {r["name"]: r for r in data["benchmarks"]}
    for name, exp in expected.items():
        row = rows[name]
        assert (row["n"], row["fail"]) == (exp["n"], exp["fail"]), name
        assert row["score"] == pytest.approx(exp["score"]), name
        assert row["perf"] == pytest.approx(exp["perf"]), name
        assert row["std"] == pytest.approx(exp["std%"]) and row["sem"] == pytest.approx(exp["sem%"])
    num = sum(e["weight"] * math.log(e["score"] + 1) for e in expected.values())
    assert data["score"] == pytest.approx(
        math.exp(num / sum(e["weight"] for e in expected.values()))
    )
    assert (data["verdict"], proc.returncode) == ("PASS", 0), proc.stdout


def test_a_a_comparison_flags_nothing(real_runs):
    proc = milabench("compare", str(real_runs["aa1"]), str(real_runs["aa2"]), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert {r["name"] for r in data["benchmarks"]} == {"steady", "steady-jobs"}
    for row in data["benchmarks"]:
        assert not row["significant"] and row["label"] == "not significant", row
    assert data["regressions"] == []


def test_planted_slowdown_is_a_regression(real_runs):
    proc = milabench("compare", "--baseline", str(real_runs["aa1"]), str(real_runs["slow"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION" in proc.stdout
    proc = milabench("compare", str(real_runs["aa1"]), str(real_runs["slow"]), "--format", "json")
    data = json.loads(proc.stdout)
    for row in data["benchmarks"]:
        assert row["label"] == "slower" and row["regression"], row
        assert 0.78 < row["ratio"] < 0.92 and row["ci_high"] < 1
    # a generous threshold for one benchmark (from a YAML file) lets it pass
    th = real_runs["base"] / "thresholds.yaml"
    th.write_text("default: {relative: 5%}\nsteady: {relative: 30%}\n")
    proc = milabench("compare", str(real_runs["aa1"]), str(real_runs["slow"]), "--thresholds",
                     str(th), "--format", "json")  # fmt: skip
    assert json.loads(proc.stdout)["regressions"] == ["steady-jobs"]
    # the same from the suite entries' `compare:` key
    proc = milabench("compare", str(real_runs["aa1"]), str(real_runs["slow"]), "--config",
                     str(SUITE), "--override", "steady-jobs.compare.relative=30%", "--format", "json")  # fmt: skip
    assert json.loads(proc.stdout)["regressions"] == ["steady"], proc.stderr


def test_store_import_is_idempotent_and_baseline_from_store(real_runs, tmp_path):
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    proc = milabench("store", "import", str(real_runs["aa1"]), str(real_runs["full"]), "--url", url)
    assert proc.returncode == 0, proc.stderr
    assert "aa1: imported 2 benchmark(s)" in proc.stdout
    from milabench.history.store import Store

    with Store(url) as store:
        counts = [store.count(t) for t in ("mb_runs", "mb_results", "mb_samples")]
    proc = milabench("store", "import", str(real_runs["aa1"]), "--url", url)
    assert "already stored" in proc.stdout
    with Store(url) as store:
        assert [store.count(t) for t in ("mb_runs", "mb_results", "mb_samples")] == counts
        assert counts[0] == 2 and counts[2] > 40
    proc = milabench("history", "--method", "outliers", "--bench", "steady", "--url", url)
    assert proc.returncode == 0 and "aa1" in proc.stdout
    # the stored run as a baseline
    proc = milabench("compare", "--baseline", "aa1", str(real_runs["slow"]), "--url", url)
    assert proc.returncode == 1 and "store:aa1" in proc.stdout


def test_ab_mode_confirms_planted_regression(real_runs, tmp_path):
    proc = milabench(
        "compare", "--ab", "--config", str(SUITE), "--base", str(tmp_path), "--use-current-env",
        "--select", "steady", "--env-b", "H6_SLOWDOWN=0.15", "--rounds", "1",
        "--confirm-rounds", "1", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["regressions"] == ["steady"]
    assert "confirming suspected regression(s): steady" in proc.stderr
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 4 and any(".confirm.B.r0" in r for r in runs)
