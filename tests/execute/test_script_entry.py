"""Entries that run a third-party script as it is: ``script``, ``working_dir``, the
folders that exist before it starts, and argparse's own message in the report.

The plan tests build packs from hand-made entries; the slow ones run real
``milabench run`` subprocesses with real voir on ``benchmarks/thirdscript``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from concurrency import STOP_GRACE

from milabench.events import read_events
from milabench.execute.launcher import FolderError, ensure_folders
from milabench.execute.suite import run_suite
from milabench.pack import load_pack
from milabench.plan.spec import ProcessSpec
from milabench.remote.launcher import SSHLauncher
from milabench.sinks.runfiles import RunFileSink

from .conftest import BENCHMARKS, cpu_system, make_entry

THIRD = BENCHMARKS / "thirdscript"
ARGPARSE_LINE = "train_script.py: error: argument --epochs: invalid int value: 'notanint'"


# -- plan: script path and working directory in the ProcessSpec ---------------------------
def test_default_script_and_cwd_are_main_py_in_the_folder(tmp_path):
    spec = load_pack(make_entry("healthy", tmp_path), cpu_system()).build_run_plan().processes()[0]
    assert spec.argv[1] == str(BENCHMARKS / "healthy" / "main.py")
    assert spec.cwd == str(BENCHMARKS / "healthy")


def test_script_and_working_dir_with_placeholder(tmp_path):
    entry = make_entry(
        "thirdscript",
        tmp_path,
        script="train_script.py",
        working_dir="{milabench_extra}/work",
        argv={"--epochs": 2},
    )
    pack = load_pack(entry, cpu_system())
    assert pack.main_path == THIRD / "train_script.py"
    spec = pack.build_run_plan().processes()[0]
    # under voir: the voir executable, then the absolute script as first positional
    assert Path(spec.argv[0]).name == "voir"
    assert spec.argv[-3:] == [str(THIRD / "train_script.py"), "--epochs", "2"]
    assert spec.cwd == str(tmp_path / "extra" / "thirdscript" / "work")
    assert spec.env["VOIRFILE"] == str(THIRD / "voirfile.py")
    assert spec.tag == ["thirdscript", "D0"]


def test_relative_working_dir_and_absolute_script(tmp_path):
    script = tmp_path / "elsewhere" / "train.py"
    entry = make_entry("healthy", tmp_path, script=str(script), working_dir="out/../run")
    spec = load_pack(entry, cpu_system()).build_run_plan().processes()[0]
    assert spec.argv[1] == str(script)
    assert spec.cwd == str(BENCHMARKS / "healthy" / "run")


def test_relative_definition_gives_an_absolute_script(tmp_path, monkeypatch):
    monkeypatch.chdir(BENCHMARKS)
    entry = make_entry("healthy", tmp_path, definition="healthy", working_dir="/tmp")
    spec = load_pack(entry, cpu_system()).build_run_plan().processes()[0]
    assert spec.argv[1] == str(BENCHMARKS / "healthy" / "main.py")
    assert spec.cwd == "/tmp"


def test_prepare_runs_in_the_working_dir_too(tmp_path):
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "prepare.py").write_text("")
    entry = make_entry("bench", tmp_path, definition=folder, working_dir="{milabench_data}")
    prep = load_pack(entry, cpu_system()).build_prepare_plan().processes()[0]
    assert prep.argv[1] == str(folder / "prepare.py")
    assert prep.cwd == str(tmp_path / "data")


def test_remote_command_creates_and_enters_the_working_dir(tmp_path):
    entry = make_entry("healthy", tmp_path, working_dir="/scratch/a dir")
    spec = load_pack(entry, cpu_system()).build_run_plan().processes()[0]
    spec = spec.evolve(node={"name": "n1", "ip": "10.0.0.2", "user": "u"})
    words = shlex.split(SSHLauncher(cpu_system()).command_for(spec))
    assert words[:6] == ["mkdir", "-p", "--", "/scratch/a dir", "&&", "cd"]
    assert words[6] == "/scratch/a dir"
    # the definition folder itself is never created remotely
    plain = load_pack(make_entry("healthy", tmp_path), cpu_system()).build_run_plan()
    spec = plain.processes()[0].evolve(node={"name": "n1", "ip": "10.0.0.2", "user": "u"})
    assert shlex.split(SSHLauncher(cpu_system()).command_for(spec))[0] == "cd"


# -- folders created before the process starts ----------------------------------------------
def test_ensure_folders_creates_dirs_and_working_dir(tmp_path):
    entry = make_entry("thirdscript", tmp_path, working_dir="{milabench_extra}/work")
    spec = load_pack(entry, cpu_system()).build_run_plan().processes()[0]
    ensure_folders(spec)
    for name in ("data", "cache", "runs", "extra/thirdscript/work"):
        assert (tmp_path / name).is_dir(), name
    ensure_folders(spec)  # idempotent
    # not a benchmark entry (install steps): nothing is created
    ensure_folders(ProcessSpec(tag=["x"], argv=["true"], cwd=str(tmp_path / "no")))
    assert not (tmp_path / "no").exists()


def test_uncreatable_folder_is_one_line_naming_the_key(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    entry = make_entry("healthy", tmp_path, working_dir=str(blocker / "work"))
    spec = load_pack(entry, cpu_system()).build_run_plan().processes()[0]
    with pytest.raises(FolderError) as info:
        ensure_folders(spec)
    message = str(info.value)
    assert message.startswith(f"healthy: working_dir: cannot create {blocker / 'work'}: ")
    assert "\n" not in message


@pytest.mark.slow
def test_uncreatable_folder_fails_only_its_entry(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = make_entry("noop", tmp_path)
    bad["dirs"]["extra"] = str(blocker / "extra")
    good = make_entry("healthy", tmp_path, argv={"--steps": 3})
    run_dir = tmp_path / "runs" / "folders"
    sink = RunFileSink(run_dir)
    results = asyncio.run(run_suite({"noop": bad, "healthy": good}, cpu_system(), run_dir, [sink]))
    sink.close()
    by_name = {r.name: r for r in results}
    assert not by_name["noop"].succeeded and by_name["healthy"].succeeded
    events = list(read_events(run_dir / "noop.D0.data"))
    errors = [e["data"] for e in events if e["event"] == "error"]
    assert errors == [
        {
            "type": "FolderError",
            "message": f"noop: dirs.extra: cannot create {blocker / 'extra'}: Not a directory",
        }
    ]
    assert "start" in [e["event"] for e in events] and events[-1]["event"] == "end"


# -- real `milabench run` ---------------------------------------------------------------------
SUITE = """
_defaults:
  weight: 1
  plan:
    method: per_gpu
  measure: {{warmup_min: 0.1s, warmup_max: 0.5s, min: 0.5s, max: 1s, min_observations: 3,
             startup: 60s}}
  voir:
    options: {{gpu_poll: 0}}

named-script:
  definition: {third}
  script: train_script.py
  working_dir: "{{milabench_extra}}/work"
  argv:
    --epochs: 1000

bad-argument-voir:
  definition: {third}
  script: train_script.py
  argv:
    --epochs: notanint

bad-argument-plain:
  definition: {plain}
  script: {third}/train_script.py
  argv:
    --epochs: notanint
"""


def run(tmp_path: Path, *select: str, suite_text: str | None = None):
    plain = tmp_path / "plain"  # a folder without voirfile: the script runs without voir
    plain.mkdir(exist_ok=True)
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text or SUITE.format(third=THIRD, plain=plain))
    env = dict(os.environ, MILABENCH_DASH="no", MILABENCH_RUN_EARLY_STOP_GRACE=STOP_GRACE)
    cmd = [sys.executable, "-m", "milabench", "run", "--config", str(suite), "--base",
           str(tmp_path / "base"), "--use-current-env", "--select", ",".join(select)]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)


@pytest.mark.slow
def test_named_script_in_its_working_dir_passes(tmp_path: Path):
    proc = run(tmp_path, "named-script")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^Verdict: +PASS \(exit code 0\)$", proc.stdout, re.M)
    base = tmp_path / "base"
    work = base / "extra" / "named-script" / "work"
    # the relative output landed in the working directory, which milabench created
    assert (work / "outputs" / "cwd.txt").read_text().strip() == str(work)
    assert (base / "extra" / "named-script" / "runs-seen.txt").read_text().strip() == "1"
    assert (base / "data").is_dir() and (base / "cache").is_dir()


@pytest.mark.slow
def test_wrong_script_name_is_a_config_error(tmp_path: Path):
    text = SUITE.format(third=THIRD, plain=tmp_path / "plain").replace(
        "script: train_script.py\n  working_dir", "script: trian_script.py\n  working_dir"
    )
    proc = run(tmp_path, "named-script", suite_text=text)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("milabench: error: suite.yaml: named-script.script: ")
    assert lines[0].endswith(f"no file 'trian_script.py' in {THIRD}")


@pytest.mark.slow
def test_argparse_error_is_shown_with_and_without_voir(tmp_path: Path):
    proc = run(tmp_path, "bad-argument-voir", "bad-argument-plain")
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^Verdict: +FAIL \(exit code 1\)$", out, re.M)
    # validation lines: status detail, then the script's own message
    assert f"bad-argument-voir: error event in bad-argument-voir.D0: {ARGPARSE_LINE}" in out
    assert f"bad-argument-plain: exit code 2 in bad-argument-plain.D0: {ARGPARSE_LINE}" in out
    # the Errors section names the argparse line for both, never a bare SystemExit
    assert f"bad-argument-voir [bad-argument-voir.D0]: {ARGPARSE_LINE}" in out
    assert f"bad-argument-plain [bad-argument-plain.D0]: {ARGPARSE_LINE}" in out
    assert "SystemExit: 2" not in out
