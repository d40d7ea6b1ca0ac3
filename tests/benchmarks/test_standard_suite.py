"""The GPU standard suite at upstream breadth: upstream's entry names and weights, and the
commands `milabench matrix` prints for every entry on a fake 8-GPU CUDA node and on two
such nodes (per-GPU processes, one torchrun per node, torchrun across nodes)."""

from __future__ import annotations

import json
import os

import pytest

from .test_suites import CONFIG, matrix, milabench, resolve

# Upstream milabench's standard suite (v1 weights): name -> (weight, enabled).
UPSTREAM = {
    "llama": (1.0, True),
    "resnet50": (1.0, True),
    "resnet50-noio": (0.0, True),
    "convnext_large-fp32": (0.0, True),
    "convnext_large-fp16": (0.0, True),
    "convnext_large-tf32": (0.0, True),
    "convnext_large-tf32-fp16": (1.0, True),
    "regnet_y_128gf": (1.0, True),
    "bert-fp32": (0.0, True),
    "bert-fp16": (0.0, True),
    "bert-tf32": (0.0, True),
    "bert-tf32-fp16": (1.0, True),
    "t5": (0.0, True),
    "reformer": (1.0, True),
    "whisper": (0.0, True),
    "focalnet": (0.0, True),
    "fp16": (0.0, True),
    "bf16": (0.0, True),
    "tf32": (0.0, True),
    "fp32": (0.0, True),
    "brax": (1.0, True),
    "diffusion-single": (0.0, True),
    "diffusion-gpus": (1.0, True),
    "diffusion-nodes": (1.0, True),
    "lightning": (0.0, True),
    "lightning-gpus": (1.0, True),
    "dinov2-giant-single": (0.0, True),
    "dinov2-giant-gpus": (1.0, True),
    "dinov2-giant-nodes": (0.0, False),
    "llm-lora-single": (1.0, True),
    "llm-lora-ddp-gpus": (1.0, True),
    "llm-lora-ddp-nodes": (1.0, True),
    "llm-lora-mp-gpus": (1.0, True),
    "llm-full-mp-gpus": (1.0, True),
    "llm-full-mp-nodes": (1.0, True),
    "resnet152-ddp-gpus": (0.0, True),
    "dqn": (0.0, True),
    "ppo": (1.0, True),
    "dimenet": (1.0, True),
    "pna": (1.0, True),
    "recursiongfn": (1.0, True),
    "llava-single": (1.0, True),
    "llava-gpus": (0.0, False),
    "rlhf-single": (1.0, True),
    "rlhf-gpus": (0.0, True),
    "vjepa-single": (1.0, True),
    "vjepa-gpus": (1.0, True),
}
# Ours beyond upstream's list (unweighted: the score is upstream's weighting).
EXTRA = {
    "txt-to-image-single",
    "llama-train",
    "llama-train-gpus",
    "llama-train-nodes",
    "ddp-gpus",
    "ddp-nodes",
}
FAKE8 = {"MILABENCH_FAKE_GPUS": "cuda:8:81920"}


def _kind(entry: dict) -> str:
    tags = set(entry["tags"])
    kinds = tags & {"monogpu", "multigpu", "multinode"}
    assert len(kinds) == 1, (entry["name"], tags)
    return kinds.pop()


def listing(config: str, **env: str) -> dict[str, dict]:
    """`milabench list` (disabled entries included) by name."""
    out = milabench("list", "--config", str(CONFIG / config), "--format", "json", **env)
    assert out.returncode == 0, out.stderr
    return {e["name"]: e for e in json.loads(out.stdout)}


def test_upstream_names_and_weights():
    listed = listing("standard.yaml", **FAKE8)
    assert len(listed) >= 45
    assert set(UPSTREAM) | EXTRA == set(listed)
    for name, (weight, enabled) in UPSTREAM.items():
        assert (listed[name]["weight"], listed[name]["enabled"]) == (weight, enabled), name
    weighted = {name for name, e in listed.items() if e["weight"] > 0 and e["enabled"]}
    assert weighted == {name for name, (w, on) in UPSTREAM.items() if w > 0 and on}
    entries = resolve("standard.yaml", **FAKE8)  # the enabled ones, fully resolved
    assert set(entries) == {name for name, e in listed.items() if e["enabled"]}
    for name, e in entries.items():
        _kind(e)  # every entry says whether it is mono-GPU, one node, or several nodes
        if name.endswith("-nodes"):
            assert e["num_machines"] == 2, name
            assert e["requires_capabilities"] == ["len(nodes) >= 2"], name


def test_every_family_has_its_own_stack():
    entries = resolve("standard.yaml", **FAKE8)
    families = {e["definition"].rsplit("/", 1)[-1] for e in entries.values()}
    assert len(families) >= 15, families
    groups = {e["install_group"] for e in entries.values()}
    assert {"torch", "hf"} <= groups and len(groups) >= 3, groups


def test_matrix_on_eight_fake_gpus():
    entries = matrix("standard.yaml", **FAKE8)
    enabled = {n for n, (_, on) in UPSTREAM.items() if on} | EXTRA
    assert enabled == set(entries)
    for name, e in entries.items():
        kind = _kind(e)
        if kind == "multinode":
            assert e.get("skipped"), name  # one node here: skipped with its reason
            continue
        if not e["enabled"]:
            continue
        method = e["plan"]["method"]
        if method == "per_gpu":
            assert kind == "monogpu", name
            procs = e["processes"]
            assert [p["tag"] for p in procs] == [f"{name}.D{i}" for i in range(8)], name
            assert [p["env"]["CUDA_VISIBLE_DEVICES"] for p in procs] == [str(i) for i in range(8)]
            command = procs[0]["command"]
            if "--device" in command:
                assert command[command.index("--device") + 1] == "cuda", name
        elif method == "torchrun":
            assert kind == "multigpu", name
            command = e["command"]
            assert os.path.basename(command[0]) == "torchrun", name
            assert "--nproc-per-node=8" in command and "--standalone" in command, name
            if "--backend" in command:
                assert command[command.index("--backend") + 1] == "nccl", name
        else:  # one process that uses every GPU of the node itself (JAX pmap, Lightning)
            assert method == "njobs" and kind == "multigpu", name
            assert os.path.basename(e["command"][0]) == "python", name  # one process
            assert "CUDA_VISIBLE_DEVICES" not in (e.get("env") or {}), name


@pytest.fixture
def two_nodes(tmp_path):
    system = tmp_path / "system.yaml"
    system.write_text(
        "system:\n"
        "  arch: cuda\n"
        "  nodes:\n"
        "    - {name: n0, ip: 10.0.0.1, main: true, user: bench}\n"
        "    - {name: n1, ip: 10.0.0.2, user: bench}\n"
    )
    return str(system)


def test_matrix_across_two_nodes(two_nodes):
    entries = matrix("standard.yaml", "--system", two_nodes, **FAKE8)
    nodes = [name for name, e in entries.items() if _kind(e) == "multinode" and e["enabled"]]
    assert set(nodes) >= {
        "diffusion-nodes",
        "llm-lora-ddp-nodes",
        "llm-full-mp-nodes",
        "llama-train-nodes",
        "ddp-nodes",
    }
    for name in nodes:
        procs = entries[name]["processes"]
        assert [p["tag"] for p in procs] == [f"{name}.0.n0", f"{name}.0.n1"], name
        for rank, proc in enumerate(procs):
            command = proc["command"]
            assert os.path.basename(command[0]) == "torchrun", name
            assert "--nnodes=2" in command and f"--node-rank={rank}" in command, name
            assert "--nproc-per-node=8" in command, name
            assert "--master-addr=10.0.0.1" in command, name
            if "--backend" in command:
                assert command[command.index("--backend") + 1] == "nccl", name
