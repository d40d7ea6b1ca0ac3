"""Two-node `milabench run` and `milabench preflight` against two real sshd "nodes".

Both nodes are this machine (127.0.0.1 and 127.0.0.2), so ``MILABENCH_FORCE_SSH=1``
makes the worker go through SSH as a real remote node would; the main node runs locally.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from milabench.events import read_events

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

HERE = Path(__file__).parent
SUITE = HERE / "suites" / "multinode.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(marker: str, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "MILABENCH_FORCE_SSH": "1",
            "MILABENCH_MULTINODE_PORT": str(port),
            "MILABENCH_DASH": "no",
            "MB_MARKER": marker,
        }
    )
    return env


def _marked(marker: str) -> list[psutil.Process]:
    """Processes of the run: their command line or environment carries the marker."""
    found = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            env = p.info["environ"] or {}
            cmd = " ".join(p.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if env.get("MB_TEST_MARKER") == marker or marker in cmd:
            found.append(p)
    return found


def _wait_none(marker: str, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = _marked(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _marked(marker)
    return left


def _run(cmd, marker: str, port: int, timeout: float) -> subprocess.CompletedProcess:
    """Run a milabench command; if it hangs, kill it and whatever it started, then fail."""
    try:
        return subprocess.run(
            cmd, env=_env(marker, port), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        for p in _marked(marker):
            try:
                p.kill()
            except psutil.Error:
                pass
        raise


def _run_cmd(ssh_cluster, tmp_path, marker, select, run_name, suite=SUITE):
    system = ssh_cluster.system_yaml(tmp_path / "system.yaml")
    return [
        sys.executable,
        "-m",
        "milabench",
        "run",
        "--config",
        str(suite),
        "--system",
        str(system),
        "--base",
        str(tmp_path / "base"),
        "--use-current-env",
        "--select",
        select,
        "--run-name",
        run_name,
        "--override",
        f"{select}.env.MB_TEST_MARKER={marker}",
    ]


def test_two_node_run_completes(ssh_cluster, tmp_path):
    marker = f"mb{uuid.uuid4().hex[:10]}"
    cmd = _run_cmd(ssh_cluster, tmp_path, marker, "tinyddp-nodes", "two")
    proc = _run(cmd, marker, _free_port(), timeout=240)
    run_dir = tmp_path / "base" / "runs" / "two"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    main_data = run_dir / "tinyddp-nodes.0.node0.data"
    worker_out = run_dir / "tinyddp-nodes.0.node1.stdout"
    assert main_data.exists() and worker_out.exists(), sorted(os.listdir(run_dir))
    events = list(read_events(main_data))
    rates = [e["data"] for e in events if e["event"] == "data" and "rate" in e.get("data", {})]
    assert rates, events[-5:]
    assert all(r["rate"] > 0 and r.get("units") == "items/s" for r in rates)
    # success: exit 0, or stopped by the runner after the benchmark's early-stop event
    end = [e for e in events if e["event"] == "end"][-1]["data"]
    assert end["return_code"] == 0 or end.get("early_stop") is True, end
    worker_events = list(read_events(run_dir / "tinyddp-nodes.0.node1.data"))
    worker_end = [e for e in worker_events if e["event"] == "end"][-1]["data"]
    assert worker_end["return_code"] == 0 or worker_end.get("early_stop") is True, worker_end
    # the worker really ran (world of 2, node-rank 1) and its output came back over SSH
    text = worker_out.read_text()
    assert "rank 1/2 node-rank 1" in text and f"marker={marker}" in text
    assert "rank 0/2 node-rank 0" in (run_dir / "tinyddp-nodes.0.node0.stdout").read_text()
    # only rank 0 reports the (global) throughput
    assert not [e for e in worker_events if e["event"] == "data" and "rate" in e["data"]]
    assert _wait_none(marker, 5) == []


def test_two_node_run_of_the_ddp_benchmark(ssh_cluster, tmp_path):
    """The suite's own ddp benchmark (benchmarks/ddp) with num_machines: 2."""
    marker = f"mb{uuid.uuid4().hex[:10]}"
    suite = HERE / "suites" / "ddp-nodes.yaml"
    cmd = _run_cmd(ssh_cluster, tmp_path, marker, "ddp-2nodes", "ddp", suite=suite)
    proc = _run(cmd, marker, _free_port(), timeout=240)
    run_dir = tmp_path / "base" / "runs" / "ddp"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    names = sorted(os.listdir(run_dir))
    assert {"ddp-2nodes.0.node0.data", "ddp-2nodes.0.node1.data"} <= set(names), names
    events = list(read_events(run_dir / "ddp-2nodes.0.node0.data"))
    rates = [e["data"]["rate"] for e in events if e["event"] == "data" and "rate" in e["data"]]
    assert rates and min(rates) > 0
    start = next(e for e in events if e["event"] == "start")["data"]["command"]
    assert "--nnodes=2" in start and "--node-rank=0" in start
    assert _wait_none(marker, 5) == []


def test_multinode_entry_skipped_on_one_node(tmp_path):
    """Without enough nodes the entry is skipped with the reason, not run."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "milabench", "run", "--config", str(SUITE),
            "--base", str(tmp_path), "--use-current-env", "--select", "tinyddp-nodes",
            "--run-name", "one", "--dash", "no",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    text = (tmp_path / "runs" / "one" / "tinyddp-nodes.data").read_text()
    assert "needs 2 nodes" in text, text[-1000:] + proc.stdout[-1000:] + proc.stderr[-1000:]


def test_interrupting_two_node_run_stops_remote_processes(ssh_cluster, tmp_path):
    marker = f"mb{uuid.uuid4().hex[:10]}"
    cmd = _run_cmd(ssh_cluster, tmp_path, marker, "tinyddp-hang", "hang")
    proc = subprocess.Popen(
        cmd,
        env=_env(marker, _free_port()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    run_dir = tmp_path / "base" / "runs" / "hang"
    try:
        # wait until both ranks are running (each printed its line)
        deadline = time.monotonic() + 90
        outs = [run_dir / f"tinyddp-hang.0.node{i}.stdout" for i in (0, 1)]
        while time.monotonic() < deadline:
            if all(p.exists() and "rank" in p.read_text() for p in outs):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the two ranks did not start")
        remote = [p for p in _marked(marker) if p.info["environ"].get("MILABENCH_NODE_RANK") == "1"]
        assert remote, "the worker's processes are visible"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, out[-1000:] + err[-1000:]
        assert _wait_none(marker, 10) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_preflight_prints_nodes_and_bandwidth(ssh_cluster, tmp_path):
    system = ssh_cluster.system_yaml(tmp_path / "system.yaml")
    env = _env("preflight", _free_port())
    proc = subprocess.run(
        [
            sys.executable, "-m", "milabench", "preflight",
            "--config", str(SUITE), "--system", str(system), "--base", str(tmp_path),
            "--use-current-env", "--size-mib", "4",
        ],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print("\n" + proc.stdout)
    lines = proc.stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert set(rows) == {"node0", "node1"}
    assert rows["node0"][1:4] == ["main", "127.0.0.1", "local"]
    assert rows["node1"][1:4] == ["worker", "127.0.0.2", "ssh"]
    assert all(r[-1] == "ok" for r in rows.values())
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert all(r[5].startswith(py) for r in rows.values())
    assert all(r[7] == "cpu:0" and r[8] == "free" for r in rows.values())
    summary = [line for line in lines if line.startswith("all-reduce")]
    assert summary and "GB/s" in summary[0] and "2 ranks" in summary[0]
    bandwidth = float(summary[0].split("bandwidth ")[1].split()[0])
    assert bandwidth > 0


def test_preflight_fails_naming_unreachable_node(ssh_cluster, tmp_path):
    import yaml

    doc = {"system": ssh_cluster.system()}
    doc["system"]["nodes"].append({"name": "lost", "ip": "192.0.2.1", "port": 22, "user": "root"})
    doc["system"]["options"]["ssh"]["connect_timeout"] = 2
    path = tmp_path / "system.yaml"
    path.write_text(yaml.safe_dump(doc))
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "milabench", "preflight", "--config", str(SUITE),
            "--system", str(path), "--base", str(tmp_path), "--use-current-env",
        ],
        env=_env("preflight", _free_port()), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 1
    assert "lost" in proc.stderr and "Traceback" not in proc.stderr
    assert "FAIL" in proc.stdout
    print(proc.stdout, proc.stderr)


def test_run_fails_fast_naming_unreachable_worker(ssh_cluster, tmp_path, tarpit):
    import yaml

    doc = {"system": ssh_cluster.system()}
    ip, port = tarpit
    doc["system"]["nodes"][1] = {"name": "dark", "ip": ip, "port": port, "user": "root"}
    doc["system"]["options"]["ssh"]["connect_timeout"] = 3
    path = tmp_path / "dark.yaml"
    path.write_text(yaml.safe_dump(doc))
    marker = f"mb{uuid.uuid4().hex[:10]}"
    cmd = _run_cmd(ssh_cluster, tmp_path, marker, "tinyddp-nodes", "dark")
    cmd[cmd.index("--system") + 1] = str(path)
    t0 = time.monotonic()
    proc = _run(cmd, marker, _free_port(), timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    run_dir = tmp_path / "base" / "runs" / "dark"
    text = " ".join(p.read_text() for p in run_dir.glob("*.data"))
    assert "dark" in text, text[-2000:]
    assert elapsed < 15, elapsed
    assert "no answer within 3 s" in text
    assert _wait_none(marker, 10) == []
    assert json  # keep the import used for debugging output
