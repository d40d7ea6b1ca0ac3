"""The batch script `milabench slurm sbatch` writes, submitted to a real Slurm cluster.

The cluster (tests/slurm/conftest.py) is one node, this host, with real munged,
slurmctld and slurmd. Each test writes a job script with the CLI, submits it with
``sbatch``, polls ``scontrol show job`` until the job is over, then checks what the job
left: its exit code, the system file written on the allocation (this host, main), and a
run folder that the report reads. Skipped with the reason where Slurm cannot be installed.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml
from clirun import milabench

from .conftest import JOB_MARK_VAR, JobResult, SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
CPU_FAST = ROOT / "config" / "cpu-fast.yaml"
TINY = Path(__file__).resolve().parent / "suite.yaml"
# Generous: a job of one small benchmark takes seconds here, but the machine is shared
# and every measurement window is time-bounded anyway (config/base.yaml `measure`).
JOB_TIMEOUT = 600.0


def write_script(tmp_path: Path, base: Path, *options: str) -> Path:
    script = tmp_path / "job.sbatch"
    proc = milabench("slurm", "sbatch", "--base", str(base), "--output", str(script), *options)
    assert proc.returncode == 0, proc.stderr
    assert script.read_text().startswith("#!/bin/bash\n")
    return script


def run_job(
    cluster: SlurmCluster, script: Path, cwd: Path, *args: str, env: dict | None = None
) -> JobResult:
    """Submit, wait for the end, and check that none of the job's processes outlived it."""
    token = uuid.uuid4().hex
    job_id = cluster.submit(script, *args, cwd=cwd, env={**(env or {}), JOB_MARK_VAR: token})
    job = cluster.wait(job_id, JOB_TIMEOUT)
    left = cluster.wait_job_processes_gone(token)
    assert not left, f"job {job_id} left processes {left}\n{cluster.describe(job)}"
    return job


def the_run_folder(base: Path, job: JobResult, cluster: SlurmCluster) -> Path:
    found = sorted((base / "runs").glob(f"slurm-{job.job_id}.*"))
    assert len(found) == 1, f"run folders {found}\n{cluster.describe(job)}"
    return found[0]


def read_data(run_dir: Path) -> dict[str, dict]:
    """Per benchmark tag: its rates and return code, from the `.data` files read as the
    documented JSON lines (every line must parse)."""
    out = {}
    for path in sorted(run_dir.glob("*.data")):
        info: dict = {"rates": [], "return_code": None, "events": set()}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            event = json.loads(line)  # a line that does not parse fails the test here
            assert isinstance(event, dict) and "event" in event, f"{path}:{number}: {line}"
            info["events"].add(event["event"])
            data = event.get("data")
            if event["event"] == "data" and isinstance(data, dict) and "rate" in data:
                info["rates"].append(float(data["rate"]))
            elif event["event"] == "end":
                info["return_code"] = data["return_code"]
        out[path.name[: -len(".data")]] = info
    return out


def check_system_file(base: Path, job: JobResult, cluster: SlurmCluster) -> None:
    """The system file the job wrote from SLURM_JOB_NODELIST: this host, main."""
    path = base / "slurm" / f"system.{job.job_id}.yaml"
    assert path.is_file(), cluster.describe(job)
    nodes = yaml.safe_load(path.read_text())["system"]["nodes"]
    assert [(n["name"], n["main"]) for n in nodes] == [(cluster.host, True)], nodes


def test_job_runs_a_cpu_benchmark_in_the_current_env(slurm_cluster, tmp_path):
    base = tmp_path / "base"
    script = write_script(tmp_path, base, "--config", str(CPU_FAST), "--select", "flops-fp32",
                          "--use-current-env")  # fmt: skip
    job = run_job(slurm_cluster, script, tmp_path)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), slurm_cluster.describe(job)
    check_system_file(base, job, slurm_cluster)
    assert job.output == base / "slurm" / f"milabench-{job.job_id}.out"
    log = job.output.read_text()
    assert "PASS" in log, log[-3000:]

    run_dir = the_run_folder(base, job, slurm_cluster)
    data = read_data(run_dir)
    assert list(data) == ["flops-fp32.D0"], data
    assert data["flops-fp32.D0"]["return_code"] == 0
    assert data["flops-fp32.D0"]["rates"] and all(r > 0 for r in data["flops-fp32.D0"]["rates"])
    report = milabench("report", "--runs", str(run_dir), "--format", "json")
    assert report.returncode == 0, report.stdout + report.stderr
    rows = {r["name"]: r for r in json.loads(report.stdout)["benchmarks"]}
    assert rows["flops-fp32"]["perf"] > 0 and rows["flops-fp32"]["fail"] == 0
    # --use-current-env: nothing installed into the base
    assert not (base / "venv").exists()


def test_job_installs_prepares_and_runs_in_its_own_env(slurm_cluster, tmp_path):
    base = tmp_path / "base"
    script = write_script(tmp_path, base, "--config", str(TINY), "--select", "paced")
    job = run_job(slurm_cluster, script, tmp_path)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), slurm_cluster.describe(job)
    check_system_file(base, job, slurm_cluster)
    # the job made the benchmark's environment, and the run used it
    assert (base / "venv" / "paced" / "bin" / "python").exists(), slurm_cluster.describe(job)
    assert len(list((base / "runs").glob("install.*"))) == 1  # install's log folder
    log = job.output.read_text()
    assert "paced  installed" in log and "no prepare step" in log, log[-3000:]  # both ran
    run_dir = the_run_folder(base, job, slurm_cluster)
    data = read_data(run_dir)
    assert data["paced.D0"]["return_code"] == 0 and len(data["paced.D0"]["rates"]) >= 20
    first = (run_dir / "paced.D0.data").read_text().splitlines()[0]
    assert str(base / "venv" / "paced") in first  # the config event names its venv
    report = milabench("report", "--runs", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr


def test_a_failing_benchmark_fails_the_job_and_keeps_the_run(slurm_cluster, tmp_path):
    base = tmp_path / "base"
    script = write_script(tmp_path, base, "--config", str(TINY), "--select",
                          "paced,planted-failure", "--use-current-env")  # fmt: skip
    job = run_job(slurm_cluster, script, tmp_path)
    assert job.state == "FAILED" and job.code == 1, slurm_cluster.describe(job)
    check_system_file(base, job, slurm_cluster)
    run_dir = the_run_folder(base, job, slurm_cluster)
    data = read_data(run_dir)
    assert set(data) == {"paced.D0", "planted-failure.D0"}
    assert data["paced.D0"]["return_code"] == 0 and data["paced.D0"]["rates"]
    assert data["planted-failure.D0"]["return_code"] not in (0, None)
    report = milabench("report", "--runs", str(run_dir), "--format", "json")
    assert report.returncode == 1, report.stdout + report.stderr
    rows = {r["name"]: r for r in json.loads(report.stdout)["benchmarks"]}
    assert rows["paced"]["fail"] == 0 and rows["planted-failure"]["fail"] == 1
    assert "planted failure" in job.output.read_text()  # the job's log names the cause


def test_the_script_under_scripts_submits_a_suite(slurm_cluster, tmp_path):
    """scripts/slurm/milabench.sbatch, submitted as it is, with options for the suite: it
    has `milabench slurm sbatch` write the job script on the allocation and runs it."""
    import sys

    base = tmp_path / "base"
    script = ROOT / "scripts" / "slurm" / "milabench.sbatch"
    env = {"MILABENCH_BASE": str(base), "MILABENCH_PYTHON": sys.executable}
    job = run_job(slurm_cluster, script, tmp_path, "--config", str(TINY), "--select", "paced",
                  "--use-current-env", "--", "--validations", "all", env=env)  # fmt: skip
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), slurm_cluster.describe(job)
    assert job.output == tmp_path / f"milabench-{job.job_id}.out"  # the submission folder
    kept = (base / "slurm" / f"job.{job.job_id}.sh").read_text()
    assert "--select paced --use-current-env" in kept and "--validations all" in kept
    check_system_file(base, job, slurm_cluster)
    run_dir = the_run_folder(base, job, slurm_cluster)
    assert read_data(run_dir)["paced.D0"]["rates"]
    report = milabench("report", "--runs", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr


def test_a_job_outside_slurm_and_a_bad_selection_are_one_line(tmp_path):
    """The written script refuses to run outside an allocation; a selection that names
    nothing fails when the script is written, not after the queue."""
    import subprocess

    base = tmp_path / "base"
    script = write_script(tmp_path, base, "--config", str(TINY), "--select", "paced")
    outside = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin"}, timeout=60)  # fmt: skip
    assert outside.returncode == 2 and "SLURM_JOB_NODELIST" in outside.stderr
    bad = milabench("slurm", "sbatch", "--config", str(TINY), "--select", "nope",
                    "--base", str(base), "--output", str(tmp_path / "bad.sbatch"))  # fmt: skip
    assert bad.returncode == 2 and not (tmp_path / "bad.sbatch").exists()
    assert bad.stderr.strip().splitlines()[-1].startswith("milabench: error:"), bad.stderr
    assert "nope" in bad.stderr and "Traceback" not in bad.stderr


def test_scancel_mid_run_stops_every_process_and_keeps_the_partial_run(slurm_cluster, tmp_path):
    """`scancel` of a running job: Slurm signals every process of the job; the run stops
    its benchmark, writes the partial report and exits, and nothing outlives the job."""
    import time

    from .conftest import marked_pids

    base = tmp_path / "base"
    script = write_script(tmp_path, base, "--config", str(TINY), "--select", "paced",
                          "--use-current-env", "--override", "paced.argv.--steps=100000")  # fmt: skip
    token = uuid.uuid4().hex
    job_id = slurm_cluster.submit(script, cwd=tmp_path, env={JOB_MARK_VAR: token})
    deadline = time.monotonic() + JOB_TIMEOUT
    data = None
    while time.monotonic() < deadline:  # until the benchmark has measured something
        data = next((base / "runs").glob(f"slurm-{job_id}.*/paced.D0.data"), None)
        if data is not None and '"rate"' in data.read_text():
            break
        state = slurm_cluster.job_info(job_id).get("JobState")
        assert state in ("PENDING", "RUNNING", None), f"job {job_id} ended early: {state}"
        time.sleep(0.5)
    else:
        slurm_cluster.command("scancel", job_id)
        pytest.fail(f"job {job_id} measured nothing in {JOB_TIMEOUT:.0f} s\n{slurm_cluster.logs()}")
    running = marked_pids(JOB_MARK_VAR, token)
    assert len(running) >= 2, running  # the job script (now `milabench run`), its benchmark
    assert slurm_cluster.command("scancel", job_id).returncode == 0
    job = slurm_cluster.wait(job_id, 120)
    assert job.state == "CANCELLED", slurm_cluster.describe(job)
    left = slurm_cluster.wait_job_processes_gone(token)
    assert not left, f"left after scancel: {left}\n{slurm_cluster.describe(job)}"
    run_dir = data.parent
    events = read_data(run_dir)["paced.D0"]
    assert events["rates"] and "end" in events["events"], slurm_cluster.describe(job)
    report = json.loads((run_dir / "report.json").read_text())  # the partial report
    assert {r["name"] for r in report["benchmarks"]} == {"paced"}, report
