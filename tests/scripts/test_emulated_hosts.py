"""scripts/emulated_hosts.py: profiles, tables from a report, the cgroup helper.

The tables are built from report dicts written here (the shape `milabench report
--format json` gives, with and without the measurement-window keys), so the tests do not
depend on a run; one real run of two tiny benchmarks checks the whole path end to end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from systemtools import require

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location(
        "emulated_hosts", ROOT / "scripts" / "emulated_hosts.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["emulated_hosts"] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


emu = _load()


def _args(**kw) -> argparse.Namespace:
    args = emu.build_parser().parse_args([])
    for key, value in kw.items():
        setattr(args, key, value)
    return args


# ---------------------------------------------------------------- profiles


def test_profiles_are_the_four_in_order():
    profiles = emu.make_profiles()
    assert list(profiles) == ["native", "avx2", "onecore", "quota"]
    assert profiles["native"].env == {} and profiles["native"].prefix == ()


def test_avx2_sets_the_isa_limits_and_keeps_the_rest_of_the_environment():
    avx2 = emu.make_profiles()["avx2"]
    env = avx2.environ({"PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx512"})
    assert env["ATEN_CPU_CAPABILITY"] == "default"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert env["PATH"] == "/bin"
    assert avx2.argv(["milabench", "run"]) == ["milabench", "run"]


def test_onecore_puts_taskset_in_front():
    onecore = emu.make_profiles()["onecore"]
    assert onecore.argv(["python", "-m", "milabench", "run"]) == [
        "taskset", "-c", "0", "python", "-m", "milabench", "run",
    ]  # fmt: skip
    assert onecore.environ({"A": "1"}) == {"A": "1"}


def test_quota_profile_carries_its_cpus_and_the_quota_in_microseconds():
    quota = emu.make_profiles(quota_cpus=1.5)["quota"]
    assert quota.quota_cpus == 1.5 and quota.prefix == () and quota.env == {}
    assert emu.CpuQuota(1.5, root=Path("/nonexistent")).quota_us == 150_000
    assert emu.CpuQuota(1.0, root=Path("/nonexistent")).period_us == 100_000
    with pytest.raises(ValueError):
        emu.CpuQuota(0, root=Path("/nonexistent"))


def test_parse_profiles_keeps_order_drops_repeats_rejects_unknown():
    known = emu.make_profiles()
    assert [p.name for p in emu.parse_profiles("quota, native,quota", known)] == [
        "quota",
        "native",
    ]
    with pytest.raises(SystemExit, match="unknown avx9.*known: native"):
        emu.parse_profiles("native,avx9", known)


def test_run_command_passes_the_suite_options_through_and_names_the_run():
    args = _args(config="/c/cpu.yaml", base="/b", select=["flops-fp32"], override=["a.b=1"])
    cmd = emu.run_command(args, "emu-avx2-2026")
    assert cmd[:4] == [sys.executable, "-m", "milabench", "run"]
    joined = " ".join(cmd)
    assert "--config /c/cpu.yaml --base /b --select flops-fp32 --override a.b=1" in joined
    assert "--run-name emu-avx2-2026" in joined and "--dash no" in joined
    # with a selection, the report reads the entries from the run (as run itself judged)
    assert emu.report_args(args) == []
    assert emu.report_args(_args(config="/c.yaml", base="/b"))[:2] == ["--config", "/c.yaml"]


def test_printed_verdict_failure_rate_and_score_are_read_from_the_console():
    text = "Failure rate:     0.00% (PASS)\nScore:             1.20\n"
    assert emu.parse_printed(text) == ("PASS", 0.0, 1.2)
    newer = "Failure rate: 50% (FAIL)\nScore:        0.5\nVerdict:      FAIL (exit code 1)\n"
    assert emu.parse_printed(newer) == ("FAIL", 0.5, 0.5)
    assert emu.parse_printed("Traceback ...") == (None, None, None)


# ---------------------------------------------------------------- tables


def _row(name, perf, **extra):
    row = {"name": name, "n": 1, "fail": 0, "perf": perf, "units": "items/s"}
    row.update(extra)
    return row


def _report(benchmarks, verdict="PASS", exit_code=0, score=1.0, failure_rate=0.0):
    return {
        "benchmarks": benchmarks,
        "score": score,
        "failure_rate": failure_rate,
        "verdict": verdict,
        "exit_code": exit_code,
        "verdict_reasons": [] if verdict == "PASS" else ["failure rate 50% > 1%"],
    }


def _result(profile, report, wall=65.0, exit_code=0, printed="PASS"):
    res = emu.ProfileResult(profile, profile, wall_s=wall, exit_code=exit_code)
    res.printed_verdict = printed
    emu.apply_report(res, report)
    return res


NATIVE = _report(
    [
        _row("convnet", 500.0, observations=120, halfwidth=0.012, target=0.02, target_met=True),
        _row("flops-bf16", 0.80, observations=60, halfwidth=0.004, target=0.02, target_met=True),
    ]
)
AVX2 = _report(
    [
        _row("convnet", 450.0, observations=100, halfwidth=0.03, target=0.02, target_met=False),
        _row("flops-bf16", 0.008, observations=4, halfwidth=0.05, target=0.02, target_met=False),
    ],
    score=0.5,
)
FAILED = _report(
    [
        _row("convnet", 300.0, observations=50, ci95_low=294.0, ci95_high=306.0, target_met=True),
        {"name": "flops-bf16", "n": 1, "fail": 1, "perf": None, "reason": "timed out"},
    ],
    verdict="FAIL",
    exit_code=1,
    failure_rate=0.5,
)


def test_summary_table_has_one_row_per_profile_with_time_verdict_and_weak_entries():
    results = [
        _result("native", NATIVE, wall=65),
        _result("avx2", AVX2, wall=605),
        _result("quota", FAILED, wall=90, exit_code=1, printed="FAIL"),
        emu.ProfileResult("onecore", "one core", skipped="taskset not found on PATH"),
    ]
    lines = emu.summary_table(results).splitlines()
    assert lines[0].startswith("| profile | time | verdict | exit | score |")
    native, avx2, quota, onecore = lines[2:]
    assert native == "| native | 1:05 | PASS | 0 | 1.00 | 0.00% | 0 / 2 | 60 |  |"
    assert avx2.startswith("| avx2 | 10:05 | PASS | 0 | 0.500 | 0.00% | 2 / 2 | 4 |")
    assert quota.startswith("| quota | 1:30 | FAIL | 1 | 1.00 | 50.00% | 1 / 2 | 50 |")
    assert "failure rate 50% > 1%" in quota
    assert onecore.startswith("| onecore | - | skipped |") and "taskset not found" in onecore


def test_entries_table_gives_rate_halfwidth_ratio_and_flags():
    results = [
        _result("native", NATIVE),
        _result("avx2", AVX2),
        _result("quota", FAILED, exit_code=1, printed="FAIL"),
    ]
    lines = emu.entries_table(results).splitlines()
    assert lines[0] == "| entry | units | native | avx2 | quota |"
    convnet = lines[2].split(" | ")
    assert convnet[2] == "500 ±1.2%"
    assert convnet[3] == "450 ±3.0% (x0.90) **[target missed]**"
    assert convnet[4].startswith("300 ±2.0% (x0.60)")  # half-width from ci95 when absent
    bf16 = lines[3].split(" | ")
    assert bf16[3] == "0.00800 ±5.0% (x0.010) **[target missed, n=4<10]**"
    assert bf16[4].startswith("FAILED (timed out)")


def test_rows_of_an_older_report_read_as_missing_not_as_errors():
    old = _report([{"name": "convnet", "n": 1, "fail": 0, "perf": 512.0, "units": "items/s"}])
    res = _result("native", old)
    assert res.entries[0]["halfwidth"] is None and res.entries[0]["target_met"] is None
    assert emu.entries_table([res]).splitlines()[2] == "| convnet | items/s | 512 |"
    assert emu.summary_row(res, 10)[6:8] == ["0 / 1", "-"]


def test_markdown_names_the_host_and_json_round_trips():
    features = {"cpus": 2, "affinity": 2, "avx512f": True, "avx512_bf16": False}
    results = [_result("native", NATIVE)]
    text = emu.markdown(results, features, 10, "config/cpu.yaml")
    assert "avx512_bf16: no" in text and "changes less" in text
    json.dumps([emu.asdict(r) for r in results])


def test_fmt_sig_and_time():
    assert [emu.fmt_sig(x) for x in (0.000851, 12345, 812.34, 81.234, 0, None)] == [
        "0.000851", "12,300", "812", "81.2", "0", "-",
    ]  # fmt: skip
    assert emu.fmt_time(65.4) == "1:05" and emu.fmt_time(None) == "-"


# ---------------------------------------------------------------- cgroup helper


def test_cgroup_missing_controller_is_a_clear_reason(tmp_path):
    with pytest.raises(emu.CgroupUnavailable, match="no cgroup v1 cpu controller"):
        emu.CpuQuota(1.0, root=tmp_path / "absent").create()
    with pytest.raises(emu.CgroupUnavailable, match="not a cgroup v1 cpu controller"):
        emu.CpuQuota(1.0, root=tmp_path).create()


def test_cgroup_that_cannot_be_created_is_a_clear_reason(tmp_path):
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "taken").write_text("a file where the group would go")
    quota = emu.CpuQuota(1.0, root=tmp_path, name="taken")
    with pytest.raises(emu.CgroupUnavailable, match="cannot create"):
        quota.create()
    assert quota.remove() is None  # nothing was created: nothing to remove


def test_cgroup_unwritable_root_is_a_clear_reason(tmp_path, monkeypatch):
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    monkeypatch.setattr(emu.os, "access", lambda path, mode: False)  # root ignores modes
    with pytest.raises(emu.CgroupUnavailable, match="not writable"):
        emu.CpuQuota(1.0, root=tmp_path).check()


def test_quota_profile_is_skipped_with_the_reason_and_nothing_is_run(tmp_path):
    args = _args(base=str(tmp_path / "base"))
    result = emu.run_profile(
        emu.make_profiles()["quota"], args, stamp="x", cgroup_root=tmp_path / "absent"
    )
    assert result.skipped and "no cgroup v1 cpu controller" in result.skipped
    assert result.exit_code is None and not (tmp_path / "base").exists()


def test_cgroup_in_a_stand_in_root_sets_the_quota_and_the_child_joins(tmp_path):
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    quota = emu.CpuQuota(0.5, root=tmp_path, name="emu-test")
    quota.create()
    assert (quota.path / "cpu.cfs_period_us").read_text() == "100000\n"
    assert (quota.path / "cpu.cfs_quota_us").read_text() == "50000\n"
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        preexec_fn=quota.join,
        check=True,
    )
    assert (quota.path / "cgroup.procs").read_text().split() == [child.stdout.strip()]
    assert quota.pids() == []  # the child has exited
    for control in quota.path.iterdir():  # what the kernel does by itself on a real group
        control.unlink()
    assert quota.remove(timeout=1) is None and not quota.path.exists()


# ---------------------------------------------------------------- suite_stability coverage


def _stability():
    spec = importlib.util.spec_from_file_location(
        "suite_stability", ROOT / "scripts" / "suite_stability.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["suite_stability"] = module
    spec.loader.exec_module(module)
    return module


def test_stability_coverage_counts_next_medians_inside_each_interval():
    stab = _stability()
    steady = [100.0 + (i % 5) for i in range(40)]  # mean 102, a narrow interval
    runs = [
        stab.RunRecord(steady, 10.0, 0),
        stab.RunRecord(steady[::-1], 10.0, 0),  # same rates, other order: median 102 inside
        stab.RunRecord([x * 1.2 for x in steady], 10.0, 0),  # 20% faster: outside
        stab.RunRecord([], 3.0, 1),  # failed: its pairs are left out
        stab.RunRecord(steady, 10.0, 0),
    ]
    pairs = stab.coverage(runs)
    assert [(p["run"], p["hit"]) for p in pairs] == [(1, True), (2, False)]
    row = stab.summarise("x", runs, "items/s", [1.0] * 5)
    assert (row["hits"], row["pairs"], row["observations"]) == (1, 2, [40, 40, 40, 0, 40])
    assert stab.coverage_line([row]) == (
        "Interval coverage: 1 of 2 intervals contained the next run's median (50%)."
    )
    assert "no pair" in stab.coverage_line([stab.summarise("y", runs[:1], "-", [1.0])])


def test_stability_reads_rates_in_order_and_the_window_record():
    stab = _stability()
    lines = [
        '{"task": "train", "warmup": {"seconds": 1.2}}',
        '{"task": "train", "rate": 3.0, "time": 1}',
        "not json",
        '{"task": "loss", "loss": 1.0}',
        '{"task": "train", "rate": 1.0, "time": 2}',
        '{"task": "train", "window": {"observations": 2, "met": false}}',
    ]
    assert stab.parse_records(lines) == ([3.0, 1.0], {"observations": 2, "met": False})


# ---------------------------------------------------------------- one real run


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _torch_available(), reason="needs torch in the current environment")
def test_real_run_of_two_profiles(tmp_path, capsys):
    require("taskset")
    # native plus the quota (its cgroup must be joined and removed) where the controller
    # is writable, else onecore: two profiles keep the test short
    profiles = ["native", "onecore"]
    if os.geteuid() == 0:
        try:
            emu.CpuQuota(1.0).check()
            profiles = ["native", "quota"]
        except emu.CgroupUnavailable:
            pass
    rc = emu.main(
        [
            "--config", str(ROOT / "config" / "cpu-fast.yaml"),
            "--base", str(tmp_path),
            "--select", "flops-fp32",
            "--use-current-env",
            "--profiles", ",".join(profiles),
            "--quiet",
            "--json", str(tmp_path / "emu.json"),
        ]
    )  # fmt: skip
    assert rc == 0
    data = json.loads((tmp_path / "emu.json").read_text())
    for res in data["results"]:
        assert res["exit_code"] == 0, res
        assert res["printed_verdict"] == "PASS" and res["verdict"] == "PASS"
        assert [e["name"] for e in res["entries"]] == ["flops-fp32"]
        assert res["entries"][0]["rate"] > 0
        assert Path(res["run_dir"]).name.startswith(f"emu-{res['profile']}-")
    out = capsys.readouterr().out
    assert "| native |" in out and "| flops-fp32 | Tflops |" in out
    if "quota" in profiles:
        notes = data["results"][-1]["notes"]
        assert any("cfs_quota_us=100000" in n for n in notes)
        assert not any("not seen in the cgroup" in n for n in notes)
        assert not list(emu.CGROUP_ROOT.glob(f"milabench-emu-{os.getpid()}"))
