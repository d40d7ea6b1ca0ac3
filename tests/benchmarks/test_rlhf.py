"""The rlhf (PPO) and llava benchmarks run for real at tiny sizes.

Their runs check what the orchestrator sees (rates and units, finite losses, the FLOPs
record, the ``stop`` event, one writer under torchrun): the session's smoke run
(smokerun.py) for the configurations that config/standard-smoke.yaml runs (rlhf-single,
rlhf-gpus, llava-single), subprocesses here for the others; in-process checks look at
what the records cannot show: a PPO step changes the policy and the value model and
leaves the reference and the reward model alone, and the analytic FLOPs formulas equal
``torch.utils.flop_counter`` on one real step (matmuls; the counter does not see the CPU
attention kernel, so the formulas are compared without their attention term).
"""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .smokerun import SmokeRun

RLHF = BENCHMARKS / "rlhf"
LLAVA = BENCHMARKS / "llava"
RLHF_TINY = ["--size", "tiny", "--batch-size", "4", "--prompt-len", "8", "--response-len", "6"]
RLHF_TINY += ["--ppo-epochs", "2", "--precision", "fp32", "--device", "cpu"]
LLAVA_DATA = ["--size", "tiny", "--text-len", "24", "--samples", "8"]


def offline_env(tmp_path: Path, stop: int = 4, skip: int = 1) -> dict[str, str]:
    """`bench_env` with its own ``$MILABENCH_DIR_DATA`` (no upstream input there) and the
    hub offline: ``prepare.py``'s fetch says in one line per input that it is missing and
    the benchmark runs its stand-in (test_*_real_inputs.py run upstream's inputs)."""
    data = str(tmp_path / "milabench-data")
    return bench_env(stop=stop, skip=skip, HF_HUB_OFFLINE="1", MILABENCH_DIR_DATA=data)


def load_main(folder: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A benchmark's main.py as a module of its own name (every folder has a ``main``)."""
    monkeypatch.syspath_prepend(str(folder))  # llava's main imports its shapes.py
    spec = importlib.util.spec_from_file_location(name, folder / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torchrun() -> str:
    path = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which(
        "torchrun"
    )
    assert path, "torchrun comes with torch"
    return path


def check_records(run, stop: int, units: str = "items/s") -> dict:
    """Rates, finite losses, one window and one stop event; returns the FLOPs record."""
    assert run.returncode == 0, run.stderr[-3000:]
    rates = run.rates()
    assert len(rates) == stop, (rates, run.stderr[-2000:])
    assert all(r["units"] == units and r["rate"] > 0 for r in rates)
    losses = run.losses()
    assert losses and all(math.isfinite(x) for x in losses)
    stops = run.events("stop")
    assert len(stops) == 1 and stops[0]["$data"]["observations"] == stop
    flops = [r for r in run.records if "flops_per_item" in r]
    assert len(flops) == 1, run.records
    assert flops[0]["flops_per_item"] > 0 and flops[0]["precision"] == "fp32"
    return flops[0]


def check_smoke_records(smoke: SmokeRun, entry: str, units: str = "items/s") -> dict:
    """`check_records` on the smoke run's records of ``entry`` (`SmokeRun.check_measured`:
    one window whose observations are the rate records and the stop event's count)."""
    smoke.check_measured(entry, units, loss=False)
    flops = smoke.declared_flops(entry)
    losses = smoke.losses(entry)
    assert losses and all(math.isfinite(x) for x in losses)
    assert len(flops) == 1, flops
    assert flops[0]["flops_per_item"] > 0 and flops[0]["precision"] == "fp32"
    return flops[0]


# -- rlhf --------------------------------------------------------------------------------


def test_rlhf_defaults_are_upstreams(monkeypatch):
    """Upstream's rlhf runs trl's PPOTrainer with PPOConfig's defaults: all four models
    from EleutherAI/pythia-160m (sft_model_path, reward_model_path), 53 sampled tokens at
    temperature 0.7 without top-k / top-p or a stop token, 4 PPO epochs of 1 mini-batch,
    lr 3e-6; 64 prompts per device."""
    pytest.importorskip("transformers")
    rlhf = load_main(RLHF, "rlhf_main_defaults", monkeypatch)
    args = rlhf.parse_args([])
    assert args.size == "pythia-160m" and args.batch_size == 64 and args.response_len == 53
    assert (args.ppo_epochs, args.mini_batches, args.lr) == (4, 1, 3e-6)
    assert (args.temperature, args.kl_coef, args.vf_coef, args.lam) == (0.7, 0.05, 0.1, 0.95)
    config = rlhf.neox_config("pythia-160m")  # EleutherAI/pythia-160m's config.json
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (
        768, 12, 12,
    )  # fmt: skip
    assert (config.intermediate_size, config.vocab_size) == (3072, 50304)
    rope = getattr(config, "rope_parameters", None) or {}
    assert rope.get("partial_rotary_factor", getattr(config, "rotary_pct", None)) == 0.25
    assert config.use_parallel_residual and config.hidden_act == "gelu"
    assert not config.tie_word_embeddings
    assert rlhf.pad_token("pythia-160m") == 50277  # "[PAD]" added to the 50,277 tokens
    gen = rlhf.generation_config(args)
    assert gen.max_new_tokens == 53 and gen.do_sample and gen.top_k == 0 and gen.top_p == 1.0
    assert gen.eos_token_id is None and abs(gen.temperature - 0.7) < 1e-6


def test_rlhf_single_process(smoke: SmokeRun, monkeypatch):
    """Reads the session's smoke run (entry rlhf-single: tiny models, fp32, one process)."""
    pytest.importorskip("transformers")
    flops = check_smoke_records(smoke, "rlhf-single", "Tok/s")
    assert flops["flops_source"] == "analytic"
    out = smoke.stdout_of("rlhf-single")
    assert "world size 1" in out and "update fp32 on cpu" in out
    # The rate counts prompt tokens (upstream's batch_size_fn: batch x prompt length), and
    # the FLOPs record is per prompt token.
    rlhf = load_main(RLHF, "rlhf_main_units", monkeypatch)
    args = rlhf.parse_args(smoke.argv("rlhf-single"))
    assert (args.size, args.prompt_len, args.precision) == ("tiny", 16, "fp32")
    per_sequence = rlhf.flops_per_sequence(rlhf.neox_config("tiny"), args)
    assert flops["flops_per_item"] == pytest.approx(per_sequence / args.prompt_len)


def test_rlhf_two_ranks_under_torchrun(smoke: SmokeRun):
    """DDP over gloo: rank 0 alone writes (one stop, one FLOPs record), the global rate
    counts both ranks' sequences, and the process group goes away cleanly.
    Reads the session's smoke run (entry rlhf-gpus: torchrun, 2 gloo ranks)."""
    check_smoke_records(smoke, "rlhf-gpus", "Tok/s")
    assert "world size 2" in smoke.stdout_of("rlhf-gpus")
    stderr = smoke.stderr_of("rlhf-gpus")
    assert "destroy_process_group" not in stderr
    assert "terminate called" not in stderr


@pytest.mark.slow
def test_rlhf_step_trains_policy_and_value_only(monkeypatch):
    """One PPO step moves the policy and the value model; the reference and the reward
    model keep their weights (and never require gradients). The analytic FLOPs of the
    step equal the counted ones (without attention, which the CPU counter misses)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchkit.flops import count_flops
    from benchkit.torchsetup import setup

    rlhf = load_main(RLHF, "rlhf_main", monkeypatch)
    args = rlhf.parse_args(RLHF_TINY)
    run = setup(args)
    models = rlhf.build_models(args.size, run.device)
    named = {
        "policy": models.core.policy,
        "value": models.core.value,
        "reference": models.reference,
        "reward": models.reward,
    }
    before = {k: {n: p.detach().clone() for n, p in m.named_parameters()} for k, m in named.items()}
    assert not any(p.requires_grad for p in models.reference.parameters())
    assert not any(p.requires_grad for p in models.reward.parameters())
    # The reference starts as the policy (KL 0 on the first rollout), the value model as
    # the reward model.
    assert all(torch.equal(before["policy"][n], before["reference"][n]) for n in before["policy"])

    opt = torch.optim.AdamW(models.trained.parameters(), lr=1e-3)
    prompts = torch.randint(0, rlhf.pad_token(args.size), (args.batch_size, args.prompt_len))
    out: dict = {}

    def step() -> None:
        out["data"] = rlhf.rollout(models, prompts, args, run)
        out["loss"], out["stats"] = rlhf.ppo_update(models, out["data"], opt, args, run)

    counted = count_flops(step)
    data = out["data"]
    # every response has its full length (no stop token)
    assert data.seq.shape == (args.batch_size, args.prompt_len + args.response_len)
    assert data.responses.shape == (args.batch_size, args.response_len)
    assert torch.equal(data.seq[:, : args.prompt_len], prompts)
    assert torch.isfinite(out["loss"]) and torch.isfinite(data.advantages).all()
    assert data.kl.abs().max() < 1e-4  # policy == reference during the rollout
    assert out["stats"].shape == (args.ppo_epochs, args.mini_batches, 7)
    assert len(rlhf.report_statistics(data, out["stats"], args, 1)) == 14

    def moved(key: str) -> bool:
        params = dict(named[key].named_parameters())
        return any(not torch.equal(before[key][n], params[n]) for n in params)

    assert moved("policy") and moved("value")
    assert not moved("reference") and not moved("reward")
    assert all(p.grad is None for p in models.reference.parameters())
    assert all(p.grad is None for p in models.reward.parameters())

    config = models.core.policy.config
    matmuls = rlhf.flops_per_sequence(config, args, attention=False)
    assert matmuls * args.batch_size == pytest.approx(counted, rel=1e-3)
    assert rlhf.flops_per_sequence(config, args) > matmuls  # + attention


# -- llava -------------------------------------------------------------------------------


@pytest.mark.slow
def test_llava_trains_on_prepared_pairs(tmp_path, python, monkeypatch):
    """prepare.py writes images and token ids once; main.py trains on them, and its
    counted FLOPs equal the analytic formula's matmul part."""
    pytest.importorskip("transformers")
    np = pytest.importorskip("numpy")
    data = tmp_path / "llava"
    prepare = [python, "prepare.py", *LLAVA_DATA, "--data", str(data)]
    prep = run_with_pipe(prepare, offline_env(tmp_path), LLAVA)
    assert prep.returncode == 0, prep.stderr
    images = np.load(data / "images.npy")
    ids = np.load(data / "input_ids.npy")
    assert images.shape == (8, 32, 32, 3) and images.dtype == np.uint8
    assert ids.shape == (8, 24 + 16)  # text + one placeholder per 8 px patch of 32 px
    assert ((ids == 510).sum(axis=1) == 16).all() and (ids[:, 0] == 1).all()
    assert (data / "done").exists()
    again = run_with_pipe(prepare, offline_env(tmp_path), LLAVA)
    assert "already prepared" in again.stdout

    argv = [python, "main.py", *LLAVA_DATA, "--data", str(data), "--batch-size", "2"]
    argv += ["--precision", "fp32", "--device", "cpu", "--num-workers", "1", "--flops", "counted"]
    run = run_with_pipe(argv, offline_env(tmp_path, 3, 1), LLAVA)
    flops = check_records(run, 3)
    assert flops["flops_source"] == "counted"
    # A random model over a 512-token vocabulary starts near log(512) = 6.2.
    assert all(5.0 < x < 8.0 for x in run.losses())
    assert "batch 2 x 40 tokens at most (16 image)" in run.stdout

    llava = load_main(LLAVA, "llava_main", monkeypatch)
    shape = llava.SIZES["tiny"]
    assert flops["flops_per_item"] == pytest.approx(
        llava.analytic_flops(shape, 24, attention=False), rel=1e-3
    )


@pytest.mark.slow
def test_llava_variable_text_lengths(tmp_path, python, monkeypatch, smoke: SmokeRun):
    """Each sample keeps its own text length (upstream: one aokvqa conversation each):
    prepare.py draws them, a batch is padded to its longest with the pad id out of the
    loss; upstream's step: gradient norm clipped at 1.0, torch's AdamW (lr 5e-5, not
    fused). The training run on such samples: reads the session's smoke run (entry
    llava-single: text lengths drawn from 40-128 tokens, fp32, one process)."""
    pytest.importorskip("transformers")
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    data = tmp_path / "llava"
    argv = [*LLAVA_DATA, "--min-text-len", "8", "--data", str(data)]
    prep = run_with_pipe([python, "prepare.py", *argv], offline_env(tmp_path), LLAVA)
    assert prep.returncode == 0, prep.stderr
    ids, lengths = np.load(data / "input_ids.npy"), np.load(data / "lengths.npy")
    assert ids.shape[1] == lengths.max() and 8 + 16 <= lengths.min() <= lengths.max() <= 40
    assert len(set(lengths.tolist())) > 1
    for row, n in zip(ids, lengths, strict=True):
        assert row[n - 1] == 2 and (row[n:] == 511).all()  # </s>, then pads

    llava = load_main(LLAVA, "llava_main_lengths", monkeypatch)
    args = llava.parse_args([*argv, "--batch-size", "4", "--device", "cpu"])
    assert args.lr == 5e-5 and args.clip_grad == 1.0
    loader, _ = llava.make_loader(args, llava.SIZES["tiny"], 0, 1)
    images, batch_ids, labels = next(iter(loader))
    assert batch_ids.shape[1] <= 40 and (labels[batch_ids == 511] == -100).all()

    check_smoke_records(smoke, "llava-single")
    out = smoke.stdout_of("llava-single")
    assert "world size 1, fp32 on cpu" in out
    # the samples it trained on have lengths of their own too
    (folder,) = re.findall(r", data (\S+), ", out)
    trained = np.load(Path(folder) / "lengths.npy")
    assert len(set(trained.tolist())) > 1
    model = llava.build_model(llava.SIZES["tiny"], torch.device("cpu"), torch.float32)
    opt = llava.make_optimizer(model, args)
    assert not opt.defaults["fused"] and opt.defaults["weight_decay"] == 0.01


@pytest.mark.slow
def test_llava_two_ranks_under_torchrun(tmp_path, python):
    """The (disabled upstream) llava-gpus path: DDP with the unused last vision layer,
    each rank its share of the samples, one writer, a clean teardown. 24 samples: 6 steps
    per rank and epoch, so that the 1 + 3 steps fit in one epoch (across an epoch end,
    benchkit's ranks meet one step late and a stop count can be overshot by one)."""
    pytest.importorskip("transformers")
    data = tmp_path / "llava"
    data_argv = [*LLAVA_DATA[:-1], "24"]  # --samples 24
    prep = run_with_pipe(
        [python, "prepare.py", *data_argv, "--data", str(data)], offline_env(tmp_path), LLAVA
    )
    assert prep.returncode == 0, prep.stderr
    argv = [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *data_argv]
    argv += ["--data", str(data), "--batch-size", "2", "--precision", "fp32", "--device", "cpu"]
    run = run_smuggled([*argv, "--backend", "gloo"], offline_env(tmp_path, 3, 1), LLAVA)
    check_records(run, 3)
    assert "world size 2" in run.stdout
    assert "terminate called" not in run.stderr


@pytest.mark.slow
def test_llava_without_data_says_to_prepare(tmp_path, python):
    pytest.importorskip("transformers")
    argv = [python, "main.py", *LLAVA_DATA, "--data", str(tmp_path), "--device", "cpu"]
    run = run_with_pipe(argv, offline_env(tmp_path), LLAVA, timeout=60)
    assert run.returncode != 0 and "run prepare.py" in run.stderr
    assert run.records == []
