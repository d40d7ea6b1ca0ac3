"""`milabench run` / `matrix` / `machine` as a user runs them: real subprocesses. (The
runs that bound time on this machine, and so are quiet, are in test_cli_run_timed.py.)"""

from __future__ import annotations

import json
import os

import pytest

from .conftest import data_events, marked_processes, milabench


@pytest.mark.slow
def test_repeat_and_resume(tmp_path, mark):
    proc = milabench(
        "run",
        "--select",
        "healthy",
        "--repeat",
        "2",
        "--run-name",
        "rep",
        base=tmp_path,
        mark=mark,
        check=0,
    )
    run = tmp_path / "runs" / "rep"
    assert sorted(p.name for p in run.glob("*.data")) == [
        "healthy.R1.D0.data",
        "healthy.R2.D0.data",
    ]
    assert "healthy" in proc.stdout

    # a run where one benchmark fails; --resume re-runs only that one
    milabench(
        "run", "--select", "healthy,raises", "--run-name", "res", base=tmp_path, mark=mark, check=1
    )
    run = tmp_path / "runs" / "res"
    healthy_before = (run / "healthy.D0.data").read_text()
    raises_before = (run / "raises.D0.data").read_text()
    milabench(
        "run", "--select", "healthy,raises", "--resume", "res", base=tmp_path, mark=mark, check=1
    )
    assert (run / "healthy.D0.data").read_text() == healthy_before  # not run again
    assert (run / "raises.D0.data").read_text() != raises_before  # ran again
    assert [e["event"] for e in data_events(run / "raises.D0.data")].count("start") == 1
    previous = list((run / "previous-attempts").glob("*/raises.D0.data"))
    assert len(previous) == 1 and previous[0].read_text() == raises_before
    # a node's memory that is no number of GiB: one line naming the variable, exit 2
    bad = milabench(
        "run",
        "--select",
        "healthy",
        base=tmp_path,
        env=dict(os.environ, MILABENCH_HOST_MEMORY="1T"),
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "MILABENCH_HOST_MEMORY='1T': expected the node's memory in GiB" in bad.stderr
    bad = milabench("run", "--select", "healthy", base=tmp_path,
                    env=dict(os.environ, MILABENCH_COMMIT="v1.0"))  # fmt: skip
    assert bad.returncode == 2 and "MILABENCH_COMMIT='v1.0': expected a git commit" in bad.stderr
    # unknown folder: one line, exit 2
    bad = milabench("run", "--resume", "nope", base=tmp_path)
    assert bad.returncode == 2 and "no run folder" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert marked_processes(mark) == []


@pytest.mark.slow
def test_capability_skip_and_missing_env(tmp_path):
    milabench(
        "run", "--select", "needs-nodes,healthy", "--run-name", "skip", base=tmp_path, check=0
    )
    events = data_events(tmp_path / "runs" / "skip" / "needs-nodes.data")
    assert [e["event"] for e in events] == ["config", "message", "end"]
    assert events[1]["data"]["skipped"] == "capability"
    assert "len(nodes) >= 2" in events[1]["data"]["message"]
    assert events[2]["data"]["return_code"] == "SKIPPED"
    # without --use-current-env the venv does not exist: recorded error, suite goes on
    proc = milabench("run", "--select", "healthy,noop", "--run-name", "noenv", base=tmp_path,
                     current_env=False)  # fmt: skip
    assert proc.returncode == 1
    for name in ("healthy", "noop"):
        events = data_events(tmp_path / "runs" / "noenv" / f"{name}.data")
        assert [e["event"] for e in events] == ["config", "error", "end"]
        assert events[1]["data"]["type"] == "EnvironmentMissing"
        assert "milabench install" in events[1]["data"]["message"]


@pytest.mark.slow
def test_torchrun_smuggled_channel(tmp_path):
    milabench(
        "run", "--select", "distributed", "--run-name", "ddp", base=tmp_path, check=0, timeout=300
    )
    run = tmp_path / "runs" / "ddp"
    events = data_events(run / "ddp.data")
    start = next(e for e in events if e["event"] == "start")["data"]["command"]
    assert start[0].endswith("torchrun") and "--nproc-per-node=2" in start
    records = [  # the benchmark's own records (not the runner's memory and interference)
        e["data"]
        for e in events
        if e["event"] == "data" and not {"process_tree", "interference"} & set(e["data"])
    ]
    assert len(records) == 3
    assert all(r["world"] == 2 and r["sum"] == 3.0 and r["rate"] > 0 for r in records)
    stdout = (run / "ddp.stdout").read_text()
    assert "rank 0 of 2 done (DATA_FD=1)" in stdout and "rank 1 of 2 done" in stdout
    assert "\x1b[" not in stdout  # smuggled records were taken out of the text


@pytest.mark.slow
def test_voir_instrumented_script(tmp_path):
    milabench("run", "--select", "voir", "--run-name", "voir", base=tmp_path, check=0)
    events = data_events(tmp_path / "runs" / "voir" / "voirbench.D0.data")
    command = next(e for e in events if e["event"] == "start")["data"]["command"]
    assert command[0].endswith("/voir")
    assert command[1:5] == ["--stop", "5", "--gpu-poll", "1"]
    phases = [e["data"]["name"] for e in events if e["event"] == "phase"]
    assert phases[:4] == ["init", "parse_args", "load_script", "run_script"]
    records = [
        e["data"] for e in events if e["event"] == "data" and "process_tree" not in e["data"]
    ]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[:3] == [1.0, 0.5, 1 / 3]
    assert any(r.get("task") == "early_stop" and r["progress"] == [5, 5] for r in records)
    assert "stop" in [e["event"] for e in events]
    assert events[-1]["data"].get("early_stop") is True


def test_matrix_and_machine(tmp_path):
    proc = milabench(
        "matrix",
        "--select",
        "healthy,distributed",
        "--format",
        "json",
        base=tmp_path,
        check=0,
        env=dict(os.environ, MILABENCH_FAKE_GPUS="cuda:2"),
    )
    out = json.loads(proc.stdout)
    healthy = out["healthy"]
    assert healthy["command"][1].endswith("benchmarks/healthy/main.py")
    assert healthy["command"][2:] == ["--steps", "5", "--workers", "2"]
    assert [p["tag"] for p in healthy["processes"]] == ["healthy.D0", "healthy.D1"]
    assert [p["env"]["CUDA_VISIBLE_DEVICES"] for p in healthy["processes"]] == ["0", "1"]
    ddp = out["ddp"]
    assert ddp["command"][0].endswith("torchrun") and "--nproc-per-node=2" in ddp["command"]
    assert "processes" not in ddp

    machine = milabench(
        "machine",
        base=tmp_path,
        check=0,
        env=dict(os.environ, MILABENCH_FAKE_GPUS="cuda:2:1000", MILABENCH_HF_TOKEN="hf_secret"),
    )
    meta = json.loads(machine.stdout)
    bad = milabench("machine", base=tmp_path, env=dict(os.environ, MILABENCH_COMMIT="HEAD"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "MILABENCH_COMMIT='HEAD': expected a git commit" in bad.stderr
    assert meta["cpu"]["count"] == os.cpu_count()
    assert meta["os"]["sysname"] == "Linux"
    assert meta["accelerators"]["arch"] == "cuda"
    assert len(meta["accelerators"]["gpus"]) == 2
    from benchkit.hostmem import host_may_grow, mem_total, shm_space

    shm = shm_space()
    assert meta["memory"] == {
        "total": mem_total(), "may_grow": host_may_grow(), "shm": shm[0] if shm else None
    }  # fmt: skip
    assert meta["milabench"]["version"]
    assert meta["torch"]["version"].startswith("2.13")
    assert "hf_secret" not in machine.stdout


def test_per_gpu_processes_run_concurrently(tmp_path):
    """Two (fake) GPUs: two processes, each restricted to its device, both recorded."""
    env = dict(os.environ, MILABENCH_FAKE_GPUS="cuda:2")
    milabench("run", "--select", "healthy", "--run-name", "pergpu", base=tmp_path, env=env, check=0)
    run = tmp_path / "runs" / "pergpu"
    spans = []
    for device in ("0", "1"):
        events = data_events(run / f"healthy.D{device}.data")
        assert events[-1]["data"]["return_code"] == 0
        assert f"devices {device}" in (run / f"healthy.D{device}.stdout").read_text()
        assert events[1]["data"]["accelerators"]["arch"] == "cuda"
        spans.append((events[2]["data"]["time"], events[-1]["data"]["time"]))
    # concurrent: the second started before the first ended
    assert spans[1][0] < spans[0][1] and spans[0][0] < spans[1][1]
