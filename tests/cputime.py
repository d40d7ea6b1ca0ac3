"""Where the test suite's CPU goes: with ``MILABENCH_TEST_CPU_LOG=FOLDER`` every test
process (each xdist worker) appends one JSON line per test to ``FOLDER/<pid>.jsonl``:
its id, start (epoch seconds), wall seconds, and the CPU seconds of the worker itself
(``self``) and of the child processes it waited for during the test (``children``).

On a machine whose CPUs are busy for the whole run the wall time follows the total CPU
work, not the order of the tests, so CPU seconds say what shortening a test would save.
A child reaped late is counted where it was reaped (a session fixture's servers, such as
the loopback sshd nodes, at the end of the session). docs/testing.md shows the
one-liner that sums the lines per file.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV = "MILABENCH_TEST_CPU_LOG"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    start, own, children = time.time(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    line = {
        "id": item.nodeid,
        "start": start,
        "wall": time.time() - start,
        "self": _cpu(resource.RUSAGE_SELF) - own,
        "children": _cpu(resource.RUSAGE_CHILDREN) - children,
    }
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
