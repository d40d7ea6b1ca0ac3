"""Each CPU benchmark's main.py reports through the data channel: rate records with the
right units, losses where it trains, and the ``stop`` event once the window ends. The
benchmarks that an entry of config/standard-smoke.yaml runs the same way are read from
the session's smoke run (smokerun.py, `SmokeRun.check_measured`: its measurement window); the others
run here for a few steps (exact step counts, see conftest.bench_env, `check_budget`)."""

from __future__ import annotations

import shutil
import sys

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .smokerun import SmokeRun


def check_budget(run, stop: int, units: str, *, loss: bool = True) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    rates = run.rates()
    assert len(rates) == stop, (rates, run.stderr[-2000:])
    assert all(r["units"] == units and r["rate"] > 0 for r in rates)
    assert all(isinstance(r["time"], float) for r in rates)
    stops = run.events("stop")
    assert len(stops) == 1 and stops[0]["$data"]["observations"] == stop
    windows = [r["window"] for r in run.records if "window" in r]
    assert len(windows) == 1 and windows[0]["observations"] == stop
    if loss:
        losses = run.losses()
        assert losses and all(0 < x < 50 for x in losses)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_flops_reports_tflops(dtype, smoke: SmokeRun):
    """Reads the session's smoke run (entries fp32, bf16: 256 x 256 matmuls on cpu)."""
    smoke.check_measured(dtype, "Tflops", loss=False)
    decl = smoke.declared_flops(dtype)
    assert len(decl) == 1 and (decl[0]["flops_source"], decl[0]["precision"]) == (
        "analytic", dtype,
    )  # fmt: skip
    assert f"flops: {dtype} 256x256" in smoke.stdout_of(dtype)
    # 2*n^3 per matmul: even a slow CPU does more than 0.1 GFLOPS, none does 100 TFLOPS.
    assert all(1e-4 < r["rate"] < 100 for r in smoke.rates(dtype))


def test_convnet_trains_on_prepared_jpegs(tmp_path, python):
    data = tmp_path / "jpeg"
    prepare = [python, "prepare.py", "--data", str(data), "--classes", "3"]
    prepare += ["--images-per-class", "24", "--image-size", "32"]
    prep = run_with_pipe(prepare, bench_env(), BENCHMARKS / "convnet")
    assert prep.returncode == 0, prep.stderr
    assert len(list(data.glob("*/*.jpeg"))) == 72 and (data / "done").exists()
    again = run_with_pipe(prepare, bench_env(), BENCHMARKS / "convnet")
    assert "already prepared" in again.stdout
    run = run_with_pipe(
        [
            python,
            "main.py",
            "--data",
            str(data),
            "--image-size",
            "32",
            "--batch-size",
            "8",
            "--width",
            "8",
            "--num-workers",
            "2",
            "--device",
            "cpu",
        ],
        bench_env(stop=4, skip=1),
        BENCHMARKS / "convnet",
    )
    check_budget(run, 4, "items/s")
    assert "jpeg data" in run.stdout and "2 workers" in run.stdout


def test_convnet_noio(python):
    run = run_with_pipe(
        [
            python,
            "main.py",
            "--synthetic-data",
            "--image-size",
            "32",
            "--batch-size",
            "8",
            "--width",
            "8",
            "--device",
            "cpu",
        ],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "convnet",
    )
    check_budget(run, 3, "items/s")


def test_transformer_lm_reports_tokens(python):
    run = run_with_pipe(
        [
            python,
            "main.py",
            "--batch-size",
            "2",
            "--seq-len",
            "32",
            "--dim",
            "64",
            "--layers",
            "1",
            "--heads",
            "2",
            "--vocab",
            "512",
            "--device",
            "cpu",
        ],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "transformer-lm",
    )
    check_budget(run, 3, "Tok/s")
    # A random-token LM starts near log(vocab) = 6.2.
    assert all(5.0 < x < 8.0 for x in run.losses())


def test_bert_masked_lm(smoke: SmokeRun):
    """Reads the session's smoke run (entry bert-fp32: bert tiny, fp32, one process)."""
    smoke.check_measured("bert-fp32", "items/s")
    decl = smoke.declared_flops("bert-fp32")
    assert len(decl) == 1 and (decl[0]["flops_source"], decl[0]["precision"]) == (
        "counted", "fp32",
    )  # fmt: skip
    assert "bert: tiny" in smoke.stdout_of("bert-fp32")
    assert "fp32 on cpu" in smoke.stdout_of("bert-fp32")


def test_llm_tiny_llama(smoke: SmokeRun):
    """Reads the session's smoke run (entry llama-train: the llm benchmark's tiny Llama,
    fp32, one process; activation checkpointing on, as every llm entry has it)."""
    smoke.check_measured("llama-train", "Tok/s")
    decl = smoke.declared_flops("llama-train")
    assert len(decl) == 1 and (decl[0]["flops_source"], decl[0]["precision"]) == (
        "analytic", "fp32",
    )  # fmt: skip
    out = smoke.stdout_of("llama-train")
    assert "llm: tiny" in out and ", single, " in out and "fp32 on cpu" in out


@pytest.mark.parametrize("op", ["matmul", "embedding", "reduce"])
def test_opbench_latency_records(op, python):
    run = run_with_pipe(
        [
            python,
            "main.py",
            "--op",
            op,
            "--shapes",
            "small,skewed",
            *(["--round-ms", "4"] if op == "reduce" else ["--case-ms", "0.3"]),
            "--device",
            "cpu",
        ],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "opbench",
    )
    check_budget(run, 3, "calls/s", loss=False)
    cases = [r for r in run.records if "latency_ms" in r]
    variants = 2 if op == "reduce" else 1
    skipped = 0
    # shapes x dtypes (fp32, bf16) x modes (fwd, fwdbwd)
    assert len(cases) == variants * 2 * 2 * 2 - skipped
    for case in cases:
        lat = case["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
        assert case["units"] == "calls/s" and case["rate"] > 0 and case["calls"] > 0
        assert case["task"].startswith(op + ".")
    names = {c["task"] for c in cases}
    assert f"{op}.skewed.bf16.fwdbwd" in names or f"{op}.sum.skewed.bf16.fwdbwd" in names
    # The scored rate is a geometric mean of per-case call rates: it lies between the
    # slowest and the fastest case (a total-calls rate would sit next to the fastest).
    case_rates = [c["rate"] for c in cases]
    for record in run.rates():
        assert min(case_rates) / 3 < record["rate"] < max(case_rates) * 3


def test_ddp_two_processes_global_rate(smoke: SmokeRun):
    """Reads the session's smoke run (entry ddp-gpus: torchrun, 2 gloo ranks on cpu)."""
    smoke.check_measured("ddp-gpus", "items/s")
    decl = smoke.declared_flops("ddp-gpus")
    assert len(decl) == 1 and decl[0]["precision"] == "fp32"
    out = smoke.stdout_of("ddp-gpus")
    assert "world size 2" in out and "backend gloo" in out
    # Only rank 0 writes: exactly one stop event although two ranks ran (SmokeRun.check_measured).
    assert "destroy_process_group" not in smoke.stderr_of("ddp-gpus")


@pytest.mark.slow
def test_llm_two_ranks_bf16_with_checkpointing(python):
    """The LLM benchmark's distributed, bf16 and activation-checkpointing paths on CPU
    (gloo), and its process group destroyed on exit (nothing printed at teardown)."""
    pytest.importorskip("transformers")
    torchrun = shutil.which("torchrun", path=str(sys.executable).rsplit("/", 1)[0]) or shutil.which(
        "torchrun"
    )
    assert torchrun, "torchrun comes with torch"
    run = run_smuggled(
        [torchrun, "--standalone", "--nproc-per-node=2", "main.py", "--size", "tiny",
         "--batch-size", "2", "--seq-len", "16", "--precision", "bf16",
         "--gradient-checkpointing", "--device", "cpu", "--backend", "gloo"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "llm",
    )  # fmt: skip
    check_budget(run, 3, "Tok/s")
    assert "bf16 on cpu" in run.stdout
    assert len(run.events("stop")) == 1  # only rank 0 writes
    assert "destroy_process_group" not in run.stderr  # no "group was not destroyed" warning
    assert "terminate called" not in run.stderr


def test_every_distributed_benchmark_destroys_its_group():
    """Each benchmark that creates a process group destroys it in a `finally` block, so an
    exception or an early stop cannot leave it to interpreter exit."""
    import ast

    users = []
    for main in sorted(BENCHMARKS.glob("*/main.py")):
        tree = ast.parse(main.read_text())
        calls = {
            getattr(n.func, "attr", getattr(n.func, "id", None))
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
        }
        # the group is created by torch directly or by benchkit.torchsetup.init_distributed
        if not calls & {"init_process_group", "init_distributed"}:
            continue
        users.append(main.parent.name)
        in_finally = [
            c
            for t in ast.walk(tree)
            if isinstance(t, ast.Try)
            for stmt in t.finalbody
            for c in ast.walk(stmt)
            if isinstance(c, ast.Call)
        ]
        names = {getattr(c.func, "attr", getattr(c.func, "id", None)) for c in in_finally}
        destroyers = {"destroy_process_group", "teardown_distributed"}
        assert names & destroyers, f"{main}: no destroy_process_group in a finally block"
    distributed = {"ddp", "llm", "torchvision", "diffusion", "dinov2", "vjepa", "rlhf", "llava"}
    assert distributed <= set(users)


@pytest.mark.slow
def test_thirdparty_measured_only_through_voirfile(python):
    voir = shutil.which("voir", path=str(sys.executable).rsplit("/", 1)[0]) or shutil.which("voir")
    assert voir, "voir is a dependency of milabench"
    run = run_with_pipe(
        [
            voir,
            "--stop",
            "3",
            "--skip",
            "1",
            "--gpu-poll",
            "0",
            "main.py",
            "--batch-size",
            "8",
            "--num-samples",
            "64",
            "--device",
            "cpu",
        ],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "thirdparty",
    )
    check_budget(run, 3, "items/s")
    phases = [r["$data"]["name"] for r in run.events("phase")]
    assert phases[:4] == ["init", "parse_args", "load_script", "run_script"]
    # NLL of a 10-class model at random init is about log(10) = 2.3.
    assert all(1.0 < x < 4.0 for x in run.losses())
