"""`milabench prepare`: runs prepare.py once per dataset, idempotent, fast the 2nd time."""

from __future__ import annotations

import json

import pytest


@pytest.mark.quiet  # bounds the time of a no-op command
def test_prepare_generates_once_then_is_fast(mb):
    assert mb("install", "--select", "alpha,beta").returncode == 0
    proc = mb("prepare", "--select", "tiny-a,tiny-b")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = mb.base / "data" / "tiny-a"
    tokens = data / "tokens.bin"
    # the entry's argv (--tokens 500) reached prepare.py, with the run's variables
    assert tokens.stat().st_size == 500 * 2
    marker = json.loads((data / "tokens.bin.done").read_text())
    assert marker["params"]["n_tokens"] == 500
    assert f"generated 500 tokens (vocabulary 1000) in {tokens}" in proc.stdout
    assert "no prepare step" in [ln for ln in proc.stdout.splitlines() if "tiny-b" in ln][0]
    mtime = tokens.stat().st_mtime_ns

    elapsed, proc = mb.timed("prepare", "--select", "tiny-a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"already prepared: 500 tokens in {tokens}" in proc.stdout
    assert tokens.stat().st_mtime_ns == mtime
    assert elapsed < 2.0
    last = sorted((mb.base / "runs").glob("prepare.*"))[-1]
    assert "already prepared" in (last / "tiny-a.stdout").read_text()


def test_prepare_without_environment_fails_clearly(mb):
    proc = mb("prepare", "--select", "tiny-a")
    assert proc.returncode == 1
    assert "milabench install --select tiny-a" in proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
