"""Every entry of the GPU standard suite fits, checked without a GPU, and its estimate
tracks what upstream milabench measured for it.

Each entry's model is built on the meta device by its benchmark's ``footprint.py`` and one
step at the configured batch is measured there (`benchkit.memory`): memory per GPU
(weights, gradients, optimiser state, activations with checkpointing, the parallelism's
share; the context and the allocator's share on top) and per node (every process's host
memory, at start-up and while training). The estimates must fit what the suite is sized
for: an 80 GB GPU (the fake GPUs' 81920 MiB) and 1 TiB of host memory for a node of 8
GPUs, except where upstream's own configuration needs more (`BEYOND_80GB`). The 70B
entries must start with less than 1/8 of that host memory per rank: they build on the
meta device and materialise only their shards.

Against upstream (memory_upstream.py, tests/benchmarks/data/upstream_memory.yaml): every
estimate lands within `benchkit.memory.ESTIMATE_BAND` of upstream's observations at the
same batch size, or within its documented exception; and the skip rule skips no entry on
a GPU as large as one where upstream ran it. The torchvision, timm and Lightning entries
are estimated in test_memory_vision.py (their libraries do not import here).

The argv of each entry is resolved as `milabench run` resolves it on a node of 8 fake
GPUs; the estimates run in one process per benchmark folder (what ``python -m
benchkit.memory FOLDER --jobs -`` runs), with the folder as working directory, as the
benchmark itself runs; the processes are forked from one that imported torch once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from dimenetbases import dimenet_cache

from benchkit.memory import (
    ESTIMATE_BAND,
    GIB,
    GPU_CONTEXT,
    HOST_RUNTIME,
    REFERENCE_GPU,
    REFERENCE_HOST,
    does_not_fit,
    tight_fit,
)

from .memory_upstream import (
    ROOT,
    VISION,
    against_upstream,
    batch_size,
    compared,
    estimate,
    footprint,
    jobs,
    ratio,
    skipped_where_upstream_runs,
    table,
    upstream,
)

LLM_70B = ("llm-lora-mp-gpus", "llm-full-mp-gpus", "llm-full-mp-nodes")
#: Entries whose upstream configuration needs more than an 80 GB GPU, and the GPU they
#: fit: llm-full-mp-gpus is upstream's llama3_70B_full.yaml on 8 GPUs (no CPU offload,
#: foreach AdamW): bf16 weights, gradients and AdamW state of 70B are 65.7 GiB a GPU, the
#: foreach step adds a copy of the weight shard (16.4 GiB). An H200 (141 GB) holds it
#: (upstream: 89.7 GiB in use there); two nodes of 80 GB GPUs too. Skipped on 80 GB.
BEYOND_80GB = {"llm-full-mp-gpus": 143771 * 2**20}
#: Entries that may not fit an 80 GB GPU by the band of their estimate: they run there,
#: with a warning. dinov2-giant-single holds 76.4 GiB on upstream's H100 and H200,
#: llava-single 71.3 GiB on its H200; llava-gpus is llava-single plus DDP's gradient
#: buckets (13.2 GiB), which upstream disables (out of memory).
TIGHT_ON_80GB = {"dinov2-giant-single", "llava-single", "llava-gpus"}


@pytest.fixture(scope="module")
def estimates(tmp_path_factory) -> dict[str, dict]:
    """Entry name -> ``{"footprint": {...}}``, every entry but the vision ones (DimeNet's
    bases from the session's cache: dimenetbases.py)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(dimenet_cache(tmp_path_factory)))
    entries = {name: job for name, job in jobs().items() if name not in VISION}
    results = estimate(sys.executable, entries, env)
    print("\n" + table(results, upstream()))
    return results


def test_every_entry_is_estimated(estimates):
    names = set(jobs())
    assert len(names) >= 50 and set(estimates) == names - VISION
    for name, result in estimates.items():
        assert "footprint" in result, (name, result)
        fp = result["footprint"]
        assert fp["per_gpu"] >= GPU_CONTEXT and fp["host_per_node"] >= HOST_RUNTIME, name


def test_the_data_file_is_the_suites_entries_at_their_batch_sizes():
    """Upstream's observations are recorded for every entry of the suite at the batch
    size the suite runs it with: a changed batch size makes them stale, and says so."""
    data = upstream()
    assert data["source"]["commit"] == "faf39234e7ff35b45a49faa09c66383519f6ec55"
    found = jobs()
    assert set(data["entries"]) == set(found)
    for name, (_folder, job) in found.items():
        assert data["entries"][name]["batch_size"] == batch_size(job["argv"]), name
        for o in data["entries"][name]["observations"]:
            assert o["gpu"] in data["gpus"] and o["memory_mib"] > 0, (name, o)
    observed = [name for name in found if compared(data, name)]
    assert len(observed) >= 30, observed  # the NVIDIA files cover most of the suite


def test_estimates_track_upstreams_observations(estimates):
    """Every estimate against upstream's observations at the same batch size (H100, H200,
    L40S), the context and the allocator's share taken out of them: within the band, or
    within the range its exception states (memory_upstream.EXCEPTIONS)."""
    problems = against_upstream(estimates, upstream())
    assert not problems, "\n".join(problems)


def test_no_entry_is_skipped_where_upstream_runs_it(estimates):
    """The skip rule over upstream's observations: on every GPU size of the data file (H100
    80 GB, H200, L40S 48 GB, and an A100 of 40 GB by arithmetic) that holds what upstream
    used to run an entry at this batch size, the entry is not skipped."""
    skips, warnings = skipped_where_upstream_runs(estimates, upstream())
    assert not skips, "\n".join(map(str, skips))
    print("\n".join(f"warned: {w}" for w in warnings))


def test_t5_with_upstreams_attention_lands_in_the_band():
    """The t5 exception is the attention, not the estimate: the same entry with T5's
    attention as upstream's transformers computes it (t5_upstream_attention.py) lands
    within the band of upstream's observations."""
    folder, job = jobs()["t5"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "tests" / "benchmarks"
         / "t5_upstream_attention.py"), str(ROOT), *map(str, job["argv"])],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    fp = footprint(json.loads(out.stdout))
    observations = compared(upstream(), "t5")
    assert observations
    low, high = ESTIMATE_BAND
    for o in observations:
        assert low <= ratio(fp, o["memory_mib"]) <= high, (o, fp.gpu_line())


def test_entries_fit_an_80gb_gpu_and_a_1tib_node(estimates):
    for name, result in estimates.items():
        fp = footprint(result)
        skipped = does_not_fit(fp, gpu_bytes=REFERENCE_GPU, host_bytes=None)
        warned = tight_fit(fp, gpu_bytes=REFERENCE_GPU)
        if name in BEYOND_80GB:  # upstream's configuration: skipped on 80 GB, says why
            assert skipped is not None, (name, result["gpu"])
            assert fp.per_gpu <= BEYOND_80GB[name], (name, result["gpu"])
        elif name in TIGHT_ON_80GB:
            assert skipped is None and warned is not None, (name, result["gpu"])
        else:
            assert skipped is None and warned is None, (name, result["gpu"])
        assert fp.host_per_node <= REFERENCE_HOST, (name, result["host"])


def test_an_entry_that_would_not_fit_is_caught():
    """DINOv2's ViT-g at 32 images per GPU fits an 80 GB GPU without activation
    checkpointing (as upstream runs it) because its stochastic depth (0.4) runs each
    residual branch of the student on 60% of the crops: without it the estimate is over
    80 GiB, and the entry would run there only with a warning, if at all."""
    folder = ROOT / "benchmarks" / "dinov2"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(folder)]))
    argv = ["--arch", "giant", "--batch-size", "32", "--drop-path", "0"]
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "benchkit.memory", str(folder), "--", *argv],
        capture_output=True, text=True, cwd=folder, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["footprint"]["per_gpu"] > REFERENCE_GPU, result["gpu"]
    assert result["footprint"]["activations"] > 50 * GIB
    fp = footprint(result)
    caught = does_not_fit(fp, gpu_bytes=REFERENCE_GPU, host_bytes=None)
    assert (caught or tight_fit(fp, gpu_bytes=REFERENCE_GPU)) is not None, result["gpu"]


def test_dinov2_shards_its_fp32_state_as_fsdp_does(estimates):
    """DINOv2 trains under FSDP (SHARD_GRAD_OP, fp16 parameters) on every entry, without
    activation checkpointing: on 8 ranks each keeps 1/8 of the fp32 gradients and AdamW
    state of the one-GPU entry, the same activations, and the fp16 copies of the whole
    student stay gathered (upstream's vitg14.yaml)."""
    single = estimates["dinov2-giant-single"]["footprint"]
    gpus = estimates["dinov2-giant-gpus"]["footprint"]
    assert gpus["optimizer"] == pytest.approx(single["optimizer"] / 8, rel=1e-6)
    assert gpus["grads"] == pytest.approx(single["grads"] / 8, rel=1e-6)
    assert gpus["activations"] == single["activations"]
    # fp32 shard (1/8) + the fp16 student (1/2 of the fp32 weights), on 8 ranks
    assert gpus["params"] == pytest.approx(
        single["params"] * (1 / 8 + 1 / 2) / (1 + 1 / 2), rel=1e-3
    )


def test_the_70b_entries_start_with_their_shards_only(estimates):
    """A rank of a 70B entry materialises its shard of the bf16 weights (1/8 of 140 GB on
    one node, 1/16 on two) on its GPU: nothing in host memory beyond the runtime (the
    whole model in fp32 would be 280 GB per rank). Upstream's settings: no CPU offload,
    so the full fine-tuning keeps its shards of weights, gradients and AdamW state on the
    GPU, and its foreach AdamW step makes a copy of the weight shard."""
    params = 70.55e9  # Llama-3.1-70B's parameters
    for name in LLM_70B:
        fp = estimates[name]["footprint"]
        world = 16 if name.endswith("-nodes") else 8
        assert fp["startup_per_rank"] < REFERENCE_HOST / 8, (name, fp)
        assert fp["host_startup"] <= 2 * params / world * 1.01, (name, fp)
        assert fp["host_per_node"] < REFERENCE_HOST, (name, fp)
    lora = estimates["llm-lora-mp-gpus"]["footprint"]
    assert lora["host_startup"] == 0  # shards materialised on the GPUs directly
    assert lora["params"] == pytest.approx(2 * params / 8, rel=0.01)
    assert lora["optimizer_step"] == 0  # fused AdamW (upstream's fused: True)
    for name in ("llm-full-mp-gpus", "llm-full-mp-nodes"):
        full = estimates[name]["footprint"]
        world = 16 if name.endswith("-nodes") else 8
        assert full["host_startup"] == full["host_run"] == 0, name  # no CPU offload
        shard = 2 * params / world  # bf16
        assert full["params"] == pytest.approx(shard, rel=0.01), name
        assert full["grads"] == pytest.approx(shard, rel=0.01), name
        assert full["optimizer"] == pytest.approx(2 * shard, rel=0.01), name
        assert full["optimizer_step"] == pytest.approx(shard, rel=0.01), name  # foreach
    nodes = estimates["llm-full-mp-nodes"]["footprint"]
    assert nodes["per_gpu"] <= REFERENCE_GPU  # upstream's configuration fits on 2 nodes
