"""`milabench prepare`: runs prepare.py once per dataset, idempotent, fast the 2nd time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import clean_environ


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


def test_prepare_says_which_inputs_an_entry_will_lack(tmp_path, milabench_runner):
    """Without --verbose, each input a prepare step could not have is one line of the
    command's output (as `benchshared.inputs.fetch` printed it), and the table says the
    entry will run its stand-in."""
    suite = tmp_path / "suite.yaml"
    fixture = Path(__file__).parent / "fixtures" / "inputs-bench"
    suite.write_text(
        f"inputs-bench:\n  definition: {fixture}\n  env:\n    HF_HUB_OFFLINE: '1'\n"
        "    BENCH: inputs-bench\n"
    )
    env = {**clean_environ(), "MILABENCH_GPU_ARCH": "cpu"}
    mb = milabench_runner(suite, tmp_path / "base", env)
    proc = mb("prepare", "--use-current-env")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("milabench: input ")]
    assert [ln.split(" unavailable: ")[0] for ln in lines] == [
        "milabench: input alpaca-cleaned for inputs-bench",
        "milabench: input llama3.1-8b-tokenizer for inputs-bench",
    ]
    assert all("offline (HF_HUB_OFFLINE=1) and not prepared" in ln for ln in lines)
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("inputs-bench "))
    assert "2 input(s) unavailable (alpaca-cleaned, llama3.1-8b-tokenizer): it will run its " in (
        row
    )
