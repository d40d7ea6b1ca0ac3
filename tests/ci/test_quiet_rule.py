"""The parallel workers' rule (tests/concurrency.py), run as the README runs the tests: a
real pytest with two xdist workers in a subprocess, on a small folder whose tests write
when they start and end. Ordinary tests share the machine; a quiet test runs alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

CASES = """
import json, os, time
import pytest

LOG = os.environ["MB_QUIET_LOG"]

def spell(name, seconds):
    start = time.time()
    time.sleep(seconds)
    with open(LOG, "a") as f:
        f.write(json.dumps([name, start, time.time()]) + "\\n")

@pytest.mark.parametrize("i", range(4))
def test_ordinary(i):
    spell(f"ordinary{i}", 0.6)
"""

QUIET = """
import pytest
from test_ordinary import spell

@pytest.mark.quiet
@pytest.mark.parametrize("i", range(2))
def test_quiet(i):
    spell(f"quiet{i}", 0.6)
"""

CONFTEST = """
from concurrency import pytest_collection_modifyitems, pytest_runtest_protocol
"""


def overlap(a: list, b: list) -> bool:
    return a[1] < b[2] and b[1] < a[2]


@pytest.mark.slow
def test_quiet_tests_run_alone_and_the_others_in_parallel(tmp_path: Path):
    pytest.importorskip("xdist")
    (tmp_path / "test_ordinary.py").write_text(CASES)
    (tmp_path / "test_quiet.py").write_text(QUIET)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: alone\n")
    log = tmp_path / "spells.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(tmp_path)]), MB_QUIET_LOG=str(log))
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
            "--rootdir", str(tmp_path), str(tmp_path)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    spells = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(spells) == 6
    quiet = [s for s in spells if s[0].startswith("quiet")]
    ordinary = [s for s in spells if s[0].startswith("ordinary")]
    for q in quiet:
        others = [s[0] for s in spells if s is not q and overlap(q, s)]
        assert others == [], (q[0], others)
    # the ordinary ones did share the machine: two ran at once at least once
    assert any(overlap(a, b) for i, a in enumerate(ordinary) for b in ordinary[i + 1 :])


MIXED = """
import pytest

def test_plain():
    pass

@pytest.mark.quiet
def test_timed():
    pass
"""


def test_a_file_with_one_quiet_test_is_handed_out_last(tmp_path: Path):
    """Under ``--dist loadfile`` a file goes to a worker whole, where its first test stands:
    a file holding any quiet test is ordered after every ordinary file, so that its quiet
    test cannot wait behind a long ordinary file on the other worker."""
    (tmp_path / "test_a_mixed.py").write_text(MIXED)
    (tmp_path / "test_b_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: alone\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(tmp_path)]))
    argv = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
            "--rootdir", str(tmp_path), str(tmp_path)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids == [
        "test_b_plain.py::test_one",
        "test_a_mixed.py::test_plain",
        "test_a_mixed.py::test_timed",
    ], done.stdout
