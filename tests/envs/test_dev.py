"""`milabench dev`: a command (or shell) in the benchmark's environment and folder."""

from __future__ import annotations

import pytest


@pytest.fixture
def installed(mb):
    proc = mb("install", "--select", "alpha")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return mb


def test_dev_runs_a_command_in_the_environment(installed):
    mb = installed
    code = (
        "import os, sys, mbtiny; print(sys.prefix); print(os.getcwd()); "
        "print(os.environ['MILABENCH_DIR_DATA']); print(os.environ['OMP_NUM_THREADS']); "
        "print('MILABENCH_CONFIG' in os.environ)"
    )
    proc = mb("dev", "tiny-a", "--", "python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    prefix, cwd, data, threads, has_config = proc.stdout.splitlines()
    assert prefix == str(mb.base / "venv" / "alpha")
    assert cwd == str(mb.config.parent / "tiny-a")
    assert data == str(mb.base / "data")
    assert int(threads) >= 1 and has_config == "True"


def test_dev_returns_the_command_exit_code(installed):
    proc = installed("dev", "tiny-a", "--", "python", "-c", "raise SystemExit(7)")
    assert proc.returncode == 7


def test_dev_shell_reads_commands(installed):
    proc = installed("dev", "tiny-a", input='echo "in:$VIRTUAL_ENV:$PWD"; exit 3\n')
    assert proc.returncode == 3
    assert (
        f"in:{installed.base / 'venv' / 'alpha'}:{installed.config.parent / 'tiny-a'}"
        in proc.stdout
    )


def test_dev_unknown_benchmark_lists_candidates(mb):
    proc = mb("dev", "tiny", "--", "true")
    assert proc.returncode == 2
    assert "no benchmark named 'tiny'" in proc.stderr
    assert "tiny-a" in proc.stderr and "badimport" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dev_missing_environment(mb):
    proc = mb("dev", "tiny-b", "--", "true")
    assert proc.returncode == 1
    assert "milabench install --select tiny-b" in proc.stderr


def test_dev_with_current_env(mb):
    mb.config = mb.config.parent / "extra.yaml"
    proc = mb(
        "dev",
        "current",
        "--use-current-env",
        "--",
        "python",
        "-c",
        "import sys, psutil; print(sys.prefix)",
    )
    assert proc.returncode == 0, proc.stderr
    import sys

    assert proc.stdout.strip() == sys.prefix
