"""Each benchmark's main.py answers ``--help`` by hand: no milabench, no data channel.
(Its own file: test_mains.py reads the shared smoke run and is handed out late, while
these start an interpreter each and may run at any time: tests/concurrency.py.)"""

from __future__ import annotations

import pytest

from .conftest import BENCHMARKS, bench_env, run_with_pipe

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


@pytest.mark.parametrize("name", MAINS)
def test_help_runs_without_orchestrator(name, python):
    """`python main.py --help` works by hand (no milabench, no data channel needed)."""
    result = run_with_pipe(
        [python, "main.py", "--help"], bench_env(), BENCHMARKS / name, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert result.records == []
