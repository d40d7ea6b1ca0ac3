"""Pass boundaries of the loader-bound entries of `config/standard.yaml`.

A DataLoader's pass ends with a wait: the next pass's first batch is made from nothing
(for V-JEPA, a worker decodes 24 videos while the GPU idles). Upstream's timer leaves
that wait out (benchmate's ``TimedIterator`` fetches each pass's first batch before its
first event), so every entry that reads a prepared set must either hold enough batches
per rank that no pass ends inside the measurement window on an 8-GPU node (the set is
sized by its prepare step), or leave each pass's first batch out of the timing as
upstream does. Checked here: the arithmetic of every entry, computed from the prepare
commands milabench builds for a fake 8-GPU node (docs/parity.md, "Pass boundaries",
must agree), and the timing of the loops that leave the boundary out, run for real
with each pass's start slowed down.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchshared.datasets import batches_per_rank, fake_imagenet_plan, node_ranks, timed_passes

from .conftest import BENCHMARKS, ROOT, bench_env, run_with_pipe
from .test_vit import load

STANDARD = ROOT / "config" / "standard.yaml"
PARITY = ROOT / "docs" / "parity.md"
GPUS = 8

# Benchmarks whose loop leaves each pass's first batch out of the timing, as upstream's
# does (one epoch of the timed iterator per pass): vjepa and geo_gnn are run below to show
# it; llm's real-data loop (main.py: ``while not timed.done: for ... in timed``) has the
# same shape, and its batches are cut from token ids in memory (no loader workers).
BOUNDARY_UNTIMED = {"vjepa", "geo_gnn", "llm"}
# Benchmarks whose prepare step only fetches inputs, for a loop whose passes wait for no
# loader worker: llama generates from one wikitext-103 prompt at a time (1.8M lines, never
# a second pass); rlhf's prompts are token lists in memory, batched without workers and
# chained pass after pass as trl's ``repeat_generator`` chains them upstream (a new pass
# costs a shuffle of a few thousand indices on both sides); recursiongfn's prepare fetches
# the proxy's weights, and its workers sample new trajectories for every batch, as
# gflownet's do (no data set, so no pass).
NO_LOADER_PASSES = {"llama", "rlhf", "recursiongfn"}


@dataclass(frozen=True)
class PassPlan:
    """One loader-bound entry on a node of `GPUS` GPUs: its prepared set holds ``rows``
    items, ``readers`` ranks share it (1: the process reads the whole set), each reads
    ``per_pass`` whole batches of ``batch`` a pass; its window needs ``needed``."""

    entry: str
    folder: str
    rows: int
    readers: int
    batch: int
    needed: int

    @property
    def per_pass(self) -> int:
        """Whole batches per rank and pass (a DistributedSampler pads to equal shares)."""
        return math.ceil(self.rows / self.readers) // self.batch

    @property
    def answer(self) -> str:
        """``sized``: no pass ends inside the window; ``untimed``: passes end inside it
        and the loop leaves their first batch out of the timing."""
        return "sized" if self.per_pass >= self.needed else "untimed"


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def planned_rows(folder: str, argv: list[str], env: dict[str, str], monkeypatch) -> int:
    """Items the prepare step of ``folder`` leaves for ``argv`` under ``env``, read from
    the prepare code itself (0: nothing prepared, synthetic data)."""
    if folder in ("torchvision", "lightning", "dinov2"):
        return fake_imagenet_plan(argv, env).images
    if folder == "vjepa":
        return load("vjepa", "prepare").parse_args(argv).videos
    if folder == "geo_gnn":
        return load("geo_gnn", "prepare").parse_args(argv).num_samples
    if folder == "llm":  # the stand-in makes its batches on the device; the real sets:
        dataset = _option(argv, "--dataset")  # their published row counts (train split)
        return {None: 0, "alpaca-cleaned": 51_760, "alpaca": 52_002}[dataset]
    if folder == "llava":
        with monkeypatch.context() as patch:  # its parse_args reads the process's variables
            for key in ("MILABENCH_CONFIG", "MILABENCH_GPU_COUNT"):
                patch.setenv(key, env[key])
            return load("llava", "prepare").parse_args(argv).samples
    raise AssertionError(
        f"{folder}: its prepare step writes a data set; say here how many items it holds for "
        "an entry's argv (or add the folder to NO_LOADER_PASSES if no DataLoader reads it), "
        'and give its entries a row in docs/parity.md, "Pass boundaries"'
    )


@pytest.fixture(scope="module")
def standard_plans(tmp_path_factory) -> tuple[dict[str, PassPlan], set[str]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return plan_standard_suite(monkeypatch, tmp_path_factory.mktemp("base"))


def plan_standard_suite(monkeypatch, tmp_path) -> tuple[dict[str, PassPlan], set[str]]:
    """Every entry of the standard suite (disabled ones too) on a fake 8-GPU node: the
    pass plans of those that read a prepared set, and the names of the others."""
    from milabench.config.loader import load_suite
    from milabench.pack import load_pack

    for key in ("MILABENCH_SYSTEM", "MILABENCH_CONFIG", "MILABENCH_GPU_COUNT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", f"cuda:{GPUS}:81920")
    suite = load_suite(STANDARD, base=tmp_path)
    plans: dict[str, PassPlan] = {}
    others: set[str] = set()
    for name, entry in suite.all_entries.items():
        folder = Path(entry.definition).name
        prepare = load_pack(entry, suite.system).build_prepare_plan()
        if prepare is None or folder in NO_LOADER_PASSES:
            others.add(name)
            continue
        spec = prepare.processes()[0]
        argv, env = [str(a) for a in spec.argv[2:]], dict(spec.env)
        assert spec.argv[1].endswith("prepare.py") and env["MILABENCH_GPU_COUNT"] == str(GPUS)
        rows = planned_rows(folder, argv, env, monkeypatch)
        if rows == 0:
            others.add(name)
            continue
        method = entry.plan.method
        assert method in ("per_gpu", "torchrun"), (name, method)
        readers = node_ranks(env) if method == "torchrun" else 1
        batch = int(_option(argv, "--batch-size") or 0)
        assert batch > 0, name
        needed = batches_per_rank(dict(entry.measure or {}))
        plans[name] = PassPlan(name, folder, rows, readers, batch, needed)
    return plans, others


def test_every_loader_bound_entry_has_whole_windows_or_untimed_boundaries(standard_plans):
    """On an 8-GPU node every entry that reads a prepared set either holds enough batches
    per rank for its warm-up and window in one pass (`batches_per_rank`: 160 with the
    default window), or belongs to a benchmark whose loop leaves each pass's first batch
    out of the timing (checked by the runs below); and each pass holds a whole batch."""
    plans, others = standard_plans
    loader_bound = """resnet50 convnext_large-fp32 convnext_large-fp16 convnext_large-tf32
        convnext_large-tf32-fp16 regnet_y_128gf focalnet resnet152-ddp-gpus lightning
        lightning-gpus dinov2-giant-single dinov2-giant-gpus dinov2-giant-nodes vjepa-single
        vjepa-gpus llava-single llava-gpus pna dimenet""".split()
    assert set(loader_bound) <= set(plans)  # and the LLM entries that train on alpaca
    assert {"resnet50-noio", "diffusion-gpus", "bert-fp32", "ppo", "llama"} <= others
    for name, plan in plans.items():
        assert plan.per_pass >= 1, (name, plan)
        if plan.answer == "untimed":
            assert plan.folder in BOUNDARY_UNTIMED, (name, plan)
    # the figures of docs/parity.md's arithmetic
    assert (plans["vjepa-gpus"].rows, plans["vjepa-gpus"].per_pass) == (1000, 5)
    assert plans["vjepa-single"].per_pass == 41 and plans["pna"].per_pass == 24
    assert plans["resnet152-ddp-gpus"].rows == 328_000
    assert plans["resnet152-ddp-gpus"].per_pass == plans["lightning-gpus"].per_pass == 160
    assert plans["dinov2-giant-gpus"].per_pass == 160 and plans["llava-gpus"].per_pass == 160
    assert plans["dinov2-giant-nodes"].readers == 16


def parity_section() -> str:
    text = PARITY.read_text()
    start = text.index("\n## Pass boundaries")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def test_parity_lists_every_entry_with_its_pass_arithmetic(standard_plans):
    """docs/parity.md, "Pass boundaries": one row per loader-bound entry whose batches
    per rank and pass and whose answer are the ones computed here, and every other entry
    of the suite named as reading no prepared set."""
    plans, others = standard_plans
    section = parity_section()
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([^`]+)`", cells[0]) if len(cells) > 4 else None
        if match:
            rows[match.group(1)] = cells
    assert set(rows) == set(plans)
    for name, plan in plans.items():
        cells = rows[name]
        assert cells[4].replace(",", "") == str(plan.per_pass), (name, cells[4], plan)
        assert cells[-1].startswith(plan.answer), (name, cells[-1], plan.answer)
    for name in others:
        assert f"`{name}`" in section, name


# -- the loops that leave each pass's first batch out of the timing --------------------------


def overlaps(rates: list[dict], waits: list[tuple[float, float]], margin: float = 0.02) -> list:
    """The (step, wait) pairs where a timed step's interval, ``[time - items / rate,
    time]``, covers a wait (``(start, end)``, epoch seconds) by more than ``margin``."""
    found = []
    for record, size in rates:
        end = record["time"]
        start = end - size / record["rate"]
        for low, high in waits:
            if min(end, high) - max(start, low) > margin:
                found.append((record, (low, high)))
    return found


class SlowPasses:
    """A loader whose passes are ``batches`` batches of 4 items; the first batch of every
    pass comes after a wait of ``delay`` s (the workers starting on a new pass), whose
    ``(start, end)`` is kept in ``waits``."""

    def __init__(self, batches: int, delay: float) -> None:
        self.batches, self.delay = batches, delay
        self.waits: list[tuple[float, float]] = []
        self.sampler = Sampler()

    def __iter__(self):
        start = time.time()
        time.sleep(self.delay)
        self.waits.append((start, time.time()))
        for _ in range(self.batches):
            yield [0, 1, 2, 3]

    def __len__(self) -> int:
        return self.batches


class Sampler:
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def timed_records(tmp_path: Path, loader, loop, stop: int) -> list[dict]:
    """Run ``loop(timed)`` over a `TimedIterator` of ``loader`` counting ``stop`` measured
    steps after one warm-up step (host clock); its records, read back from a file."""
    from benchkit.channel import DataWriter
    from benchkit.timing import TimedIterator

    path = tmp_path / f"records-{time.monotonic_ns()}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        counts = {"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}
        timed = TimedIterator(
            loader, device="cpu", stop=stop, skip=1, measure=counts, interval=3600,
            monitor=False, writer=DataWriter(fd, flush_interval=3600),
        )  # fmt: skip
        loop(timed)
        timed.close()
        timed.writer.flush()
    finally:
        os.close(fd)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_timed_passes_leaves_each_pass_start_out_of_the_steps(tmp_path, monkeypatch):
    """`timed_passes` over the loader: no timed step covers the wait before a pass's
    first batch, and the sampler learns each pass's number; the same loader chained into
    one stream (what vjepa did) puts that wait inside a timed step."""
    import benchkit.options

    monkeypatch.setattr(benchkit.options, "_cached", None)

    def step(_batch) -> None:
        time.sleep(0.01)

    loader = SlowPasses(batches=3, delay=0.25)
    records = timed_records(
        tmp_path, loader, lambda t: [step(b) for b in timed_passes(t, loader.sampler)], stop=8
    )
    rates = [(r, 4) for r in records if "rate" in r]
    assert len(rates) == 8 and len(loader.waits) == 3  # 9 steps: three passes
    assert loader.sampler.epochs == [0, 1, 2]
    assert overlaps(rates, loader.waits) == []

    chained = SlowPasses(batches=3, delay=0.25)
    stream = itertools.chain.from_iterable(itertools.repeat(chained))
    records = timed_records(tmp_path, stream, lambda t: [step(b) for b in t], stop=8)
    rates = [(r, 4) for r in records if "rate" in r]
    later = chained.waits[1:]  # the first pass's wait comes before the clock either way
    assert len(later) >= 2 and len(overlaps(rates, later)) == len(later)  # each one timed


def test_timed_passes_refuses_a_set_without_a_whole_batch(tmp_path, monkeypatch):
    import benchkit.options

    monkeypatch.setattr(benchkit.options, "_cached", None)
    with pytest.raises(ValueError, match="no whole batch"):
        timed_records(tmp_path, SlowPasses(0, 0.0), lambda t: list(timed_passes(t)), stop=2)


# A launcher that runs a benchmark's main.py with every DataLoader pass starting after a
# wait (the time its workers need to make the first batch), logging each wait.
SLOW_LOADER = """
import json, os, runpy, sys, time
import torch.utils.data

DELAY, LOG = float(os.environ["PASS_DELAY"]), os.environ["PASS_LOG"]
original = torch.utils.data.DataLoader.__iter__

def slow_iter(self):
    start = time.time()
    time.sleep(DELAY)
    with open(LOG, "a") as log:
        log.write(json.dumps([start, time.time()]) + "\\n")
    return original(self)

torch.utils.data.DataLoader.__iter__ = slow_iter
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
"""


def run_with_slow_passes(tmp_path: Path, bench: str, argv: list[str], stop: int):
    """``main.py argv`` of ``bench`` with each DataLoader pass starting 0.4 s late:
    the run and the waits."""
    launcher, log = tmp_path / "slow_loader.py", tmp_path / f"{bench}-waits.jsonl"
    launcher.write_text(SLOW_LOADER)
    env = bench_env(stop=stop, skip=1, PASS_DELAY="0.4", PASS_LOG=str(log))
    run = run_with_pipe([sys.executable, str(launcher), "main.py", *argv], env, BENCHMARKS / bench)
    assert run.returncode == 0, run.stderr[-3000:]
    waits = [tuple(json.loads(line)) for line in log.read_text().splitlines()]
    return run, waits


@pytest.mark.slow
def test_vjepa_leaves_each_pass_start_untimed(tmp_path):
    """vjepa on 4 tiny videos in batches of 2 (2 batches a pass) for 7 steps: 4 passes,
    and no measured step covers the wait before a pass's first batch."""
    csv = tmp_path / "FakeVideo" / "video_metainfo.csv"
    videos = ["--dataset", str(csv), "--videos", "4", "--video-frames", "40",
              "--video-width", "64", "--video-height", "48"]  # fmt: skip
    prepare = run_with_pipe([sys.executable, "prepare.py", *videos], bench_env(),
                            BENCHMARKS / "vjepa", timeout=120)  # fmt: skip
    assert prepare.returncode == 0, prepare.stderr
    argv = ["--dataset", str(csv), "--arch", "tiny", "--predictor", "tiny", "--patch", "8",
            "--frames", "4", "--image-size", "32", "--batch-size", "2", "--num-workers", "0",
            "--precision", "fp32", "--device", "cpu"]  # fmt: skip
    run, waits = run_with_slow_passes(tmp_path, "vjepa", argv, stop=6)
    assert "passes of 2 batches" in run.stdout and "4 pass(es) over the videos" in run.stdout
    rates = [(r, 2) for r in run.rates()]
    assert len(rates) == 6 and len(waits) == 4
    assert overlaps(rates, waits) == []


@pytest.mark.slow
def test_geo_gnn_leaves_each_pass_start_untimed(tmp_path):
    """pna on 96 molecules in batches of 32 (3 batches a pass) for 7 steps: its loop
    (one timed epoch per pass) leaves each pass's first batch untimed, as upstream's."""
    data = tmp_path / "geo"
    prepare = run_with_pipe(
        [sys.executable, "prepare.py", "--data", str(data), "--num-samples", "96"],
        bench_env(), BENCHMARKS / "geo_gnn", timeout=120,
    )  # fmt: skip
    assert prepare.returncode == 0, prepare.stderr
    argv = ["--model", "PNA", "--data", str(data), "--num-samples", "96", "--batch-size", "32",
            "--hidden", "8", "--layers", "2", "--num-workers", "0", "--device", "cpu",
            "--threads", "1"]  # fmt: skip
    run, waits = run_with_slow_passes(tmp_path, "geo_gnn", argv, stop=6)
    rates = [(r, 32) for r in run.rates()]
    assert len(rates) == 6 and len(waits) >= 3
    assert overlaps(rates, waits) == []
