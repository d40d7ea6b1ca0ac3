"""Each benchmark's main.py answers ``--help`` by hand: no milabench, no data channel.
(Its own file: test_mains.py reads the shared smoke run and is handed out late, while
these start an interpreter and may run at any time: tests/concurrency.py.)

Every main runs in a process of its own, as ``python main.py --help`` in its folder,
forked from one interpreter that imported torch (and transformers) once
(help_server.py): twenty fresh interpreters importing torch cost about 25 s of CPU
more, for the same check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BENCHMARKS, BenchRun, bench_env

HELP_SERVER = Path(__file__).resolve().parent / "help_server.py"
MAINS = [
    "flops",
    "convnet",
    "transformer-lm",
    "bert",
    "opbench",
    "ddp",
    "thirdparty",
    "llm",
    "torchvision",
    "huggingface",
    "llama",
    "rlhf",
    "llava",
    "geo_gnn",
    "recursiongfn",
    "diffusion",
    "lightning",
    "dinov2",
    "vjepa",
    "purejaxrl",
]


@pytest.fixture(scope="module")
def helps() -> dict[str, BenchRun]:
    """Each main's ``--help`` run (help_server.py), by name."""
    argv = [sys.executable, str(HELP_SERVER), str(BENCHMARKS), *MAINS]
    done = subprocess.run(argv, env=bench_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    return {name: BenchRun(**found[name]) for name in MAINS}


@pytest.mark.parametrize("name", MAINS)
def test_help_runs_without_orchestrator(name, helps):
    """`python main.py --help` works by hand (no milabench, no data channel needed)."""
    result = helps[name]
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert result.records == []
