"""scripts/fresh_clone_check.py: the README's commands read as written, a clone of the
working tree, the user's environment, pytest's summary read back."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fresh", REPO / "scripts" / "fresh_clone_check.py")
fresh = importlib.util.module_from_spec(spec)
sys.modules["fresh"] = fresh
spec.loader.exec_module(fresh)


def test_reads_the_readme_commands_as_written():
    commands = fresh.quick_start_commands((REPO / "README.md").read_text())
    assert [c.number for c in commands] == [1, 2]
    readme = (REPO / "README.md").read_text()
    for c in commands:
        assert f"\n{c.line}\n" in readme  # verbatim lines of the README
    assert "milabench run" in commands[0].line
    assert "pytest" in commands[1].line and "scripts/install_test_deps.py" in commands[1].line


def test_a_readme_without_the_block_is_an_error():
    with pytest.raises(SystemExit, match="no '## Quick start' section"):
        fresh.quick_start_commands("# x\n")
    with pytest.raises(SystemExit, match="no ```bash block"):
        fresh.quick_start_commands("## Quick start\nnothing\n")


def test_summary_of_a_pytest_run():
    outcome = fresh.Outcome(fresh.Command(2, "t", "pytest"), 1, 60.0)
    fresh.summarise(
        outcome,
        "\n".join(
            [
                "....",
                "SKIPPED [1] tests/a.py:3: cannot run on this machine: no cgroup v1",
                "FAILED tests/b.py::test_x - AssertionError",
                "ERROR tests/c.py::test_y - RuntimeError",
                "= 1 failed, 1064 passed, 16 skipped, 4 errors in 1817.34s (0:30:17) =",
            ]
        ),
    )
    assert outcome.counts == {"failed": 1, "passed": 1064, "skipped": 16, "error": 4}
    assert len(outcome.failed) == 2 and len(outcome.skipped) == 1
    text = fresh.report([outcome], "clone of HEAD (abc)", "/usr/bin/python3")
    assert "command 2: FAILED (exit 1) in 1.0 min" in text
    assert "1 failed, 1064 passed, 16 skipped, 4 error" in text
    assert "cannot run on this machine: no cgroup v1" in text


def test_working_tree_copy_holds_uncommitted_files(tmp_path):
    dest = tmp_path / "clone"
    assert fresh.make_clone(dest, working_tree=True).startswith("working tree")
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
    copied = subprocess.run(["git", "-C", str(dest), "ls-files"], capture_output=True,
                            text=True, check=True).stdout.split()  # fmt: skip
    assert set(copied) >= {t for t in tracked if (REPO / t).exists()}
    assert not (dest / "results").exists()  # ignored folders stay behind
    assert (dest / "README.md").read_bytes() == (REPO / "README.md").read_bytes()


def test_user_environment_activates_only_the_new_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("MILABENCH_BASE", "/somewhere")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("CI", "true")
    env = fresh.user_environment(tmp_path / "venv", ci=False)
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "venv" / "bin")
    assert env["VIRTUAL_ENV"] == str(tmp_path / "venv")
    assert "MILABENCH_BASE" not in env and "PYTHONPATH" not in env and "CI" not in env
    if sys.prefix != sys.base_prefix:  # this test's own venv is not on the user's PATH
        assert str(Path(sys.prefix) / "bin") not in env["PATH"].split(os.pathsep)
    assert fresh.user_environment(tmp_path / "venv", ci=True)["CI"] == "true"


def test_runs_a_command_and_reads_its_output(tmp_path):
    command = fresh.Command(1, "t", "echo 'Verdict: PASS (exit code 0)'; exit 3")
    env = {**os.environ}
    outcome = fresh.run_command(command, tmp_path, env, tmp_path / "log", timeout=60)
    assert outcome.exit_status == 3
    assert outcome.verdict == "Verdict: PASS (exit code 0)"
    assert "Verdict" in (tmp_path / "log").read_text()
