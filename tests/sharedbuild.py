"""Things built once per test session and shared by every worker: run folders and the
environments they need, too slow to make again in each test file that reads them.

`build_once(factory, name, build)` calls ``build(folder)`` in the first worker that asks
and hands every later caller, in any worker, what it returned (a JSON value). The folder
lies in the session's base temporary folder (the one pytest keeps for the last three
sessions): under pytest-xdist each worker's own base is a folder of that one, so the
workers of one session share it and no other session sees it. An ``fcntl`` lock makes a
second caller wait while the first builds. A build that fails is not tried again: every
caller fails with its error, so one broken build costs its time once.
"""

from __future__ import annotations

import fcntl
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DONE = "built.json"


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The session's folder that every worker sees."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Any]) -> Any:
    """What ``build(folder)`` returned, built by the first caller of the session."""
    root = shared_root(factory)
    folder = root / name
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            done = folder / DONE
            if not done.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    record = {"ok": True, "value": build(folder)}
                except BaseException as exc:  # noqa: BLE001 - recorded for the other callers
                    record = {"ok": False, "error": "".join(traceback.format_exception(exc))}
                done.write_text(json.dumps(record))
            record = json.loads(done.read_text())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if not record["ok"]:
        pytest.fail(f"the shared build {name!r} failed:\n{record['error']}", pytrace=False)
    return record["value"]
