"""The rule for missing tools (tests/systemtools.py), run as pytest runs it: a real pytest
in a subprocess on a small test folder, with and without ``CI=true``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

CASES = """
import pytest
from systemtools import Tool, cannot_run_here, require

def test_needs_a_tool_that_is_absent():
    require(Tool("mb-absent-tool", "mb-absent-package"))

def test_skips_by_hand():
    pytest.skip("rsync is not installed")

@pytest.mark.skipif(True, reason="needs zsh")
def test_skipif():
    pass

def test_machine_cannot():
    cannot_run_here("no cgroup v1 cpu controller")

def test_passes():
    pass
"""

MODULE_SKIP = """
import pytest
pytest.importorskip("mb_absent_module")

def test_never_collected():
    pass
"""


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(TESTS), MILABENCH_TEST_INSTALL="never")
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-p", "systemtools", "-q", "-rfEs", "-p",
            "no:cacheprovider", "--rootdir", str(folder), str(folder)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=folder, timeout=120)


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    return tmp_path


def test_outside_ci_a_missing_tool_skips_with_its_name(cases):
    proc = run_pytest(cases, ci=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "1 passed, 5 skipped" in out, out
    assert "mb-absent-tool (Debian package mb-absent-package) not installed" in out
    assert "installs are turned off (MILABENCH_TEST_INSTALL=never)" in out


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_tool_fails_with_its_name(cases, ci):
    proc = run_pytest(cases, ci=ci)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    assert len(failed) == 4, out
    joined = "\n".join(failed)
    assert "test_needs_a_tool_that_is_absent" in joined and "mb-absent-tool" in joined
    assert "rsync is not installed" in joined
    assert "needs zsh" in joined
    assert "mb_absent_module" in joined  # a skip at collection fails too
    # what the machine cannot have at all still skips, with its reason
    assert "1 skipped" in out and "cannot run on this machine: no cgroup v1 cpu" in out
    assert "1 passed" in out


def test_ci_false_is_not_ci(cases):
    assert run_pytest(cases, ci="false").returncode == 0
