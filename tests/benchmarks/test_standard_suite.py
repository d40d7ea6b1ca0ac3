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
    "sd15-txt-to-image",
    "llama-train",
    "llama-train-gpus",
    "llama-train-nodes",
    "ddp-gpus",
    "ddp-nodes",
}
FAKE8 = {"MILABENCH_FAKE_GPUS": "cuda:8:81920"}
# The `-gpus` entries that need several GPUs: upstream's `requires_capabilities: gpu['count']
# > 1` (its torchvision DDP entry and the two 70B entries), and our own torchrun entries.
# Upstream runs and scores its other `-gpus` entries on a 1-GPU node.
SEVERAL_GPUS = {"resnet152-ddp-gpus", "llm-lora-mp-gpus", "llm-full-mp-gpus"}
OURS_SEVERAL_GPUS = {"llama-train-gpus", "ddp-gpus"}


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
    entries = resolve("standard.yaml", **FAKE8)  # the enabled ones, fully resolved
    assert set(entries) == {name for name, e in listed.items() if e["enabled"]}
    # upstream's weight on every entry, whatever inputs it runs: a run on stand-in inputs
    # is marked not comparable in the report (docs/inputs.md), it is not left out
    for name, (weight, enabled) in UPSTREAM.items():
        assert (listed[name]["weight"], listed[name]["enabled"]) == (weight, enabled), name
    weighted = {name for name, e in listed.items() if e["weight"] > 0 and e["enabled"]}
    assert weighted == {name for name, (w, on) in UPSTREAM.items() if w > 0 and on}
    assert len(weighted) == 25
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


# -- the plan of every entry on nodes of 1, 2, 4 and 8 GPUs, and on two nodes ------------------

MULTIGPU = "gpu['count'] > 1"  # base.yaml `_multigpu`: upstream's rule
MULTINODE = "len(nodes) >= 2"


def expected_plan(entry: dict, gpus: int, nodes: int) -> str:
    """What `milabench matrix` must print for ``entry`` on ``nodes`` nodes of ``gpus``
    GPUs each: ``skipped: <reason>``, or the kind of plan."""
    method = entry["plan"]["method"]
    if entry["num_machines"] > nodes:
        return f"skipped: {MULTINODE}"
    if MULTIGPU in (entry.get("requires_capabilities") or []) and gpus < 2:
        return f"skipped: {MULTIGPU}"
    return "multinode" if entry["num_machines"] > 1 else method


def check_plan(name: str, entry: dict, gpus: int, nodes: int) -> None:
    kind = expected_plan(entry, gpus, nodes)
    if kind.startswith("skipped: "):
        assert entry.get("skipped") == kind.removeprefix("skipped: "), (name, entry.get("skipped"))
        assert "command" not in entry, name
        return
    assert not entry.get("skipped"), (name, entry.get("skipped"))
    command = entry["command"]
    if kind == "per_gpu":  # one process per GPU, each restricted to its device
        procs = entry.get("processes") or [{"tag": f"{name}.D0", "command": command, "env": {}}]
        assert [p["tag"] for p in procs] == [f"{name}.D{i}" for i in range(gpus)], name
        if gpus > 1:
            devices = [p["env"]["CUDA_VISIBLE_DEVICES"] for p in procs]
            assert devices == [str(i) for i in range(gpus)], name
        assert os.path.basename(command[0]) in ("python", "voir"), name
    elif kind == "torchrun":  # one launcher with a worker per GPU of the node
        assert os.path.basename(command[0]) == "torchrun", name
        assert f"--nproc-per-node={gpus}" in command and "--standalone" in command, name
        assert "processes" not in entry, name
    elif kind == "multinode":  # one launcher per node, every GPU of each
        procs = entry["processes"]
        assert [p["tag"] for p in procs] == [f"{name}.0.n{r}" for r in range(nodes)], name
        for rank, proc in enumerate(procs):
            assert os.path.basename(proc["command"][0]) == "torchrun", name
            assert f"--nnodes={nodes}" in proc["command"], name
            assert f"--node-rank={rank}" in proc["command"], name
            assert f"--nproc-per-node={gpus}" in proc["command"], name
    else:  # njobs: one process that uses every GPU of the node itself (brax's jax.pmap)
        assert kind == "njobs", (name, kind)
        assert os.path.basename(command[0]) == "python" and "processes" not in entry, name


def nodes_file(tmp_path, count: int) -> str:
    system = tmp_path / f"system-{count}.yaml"
    lines = ["system:", "  arch: cuda", "  nodes:"]
    lines += [
        f"    - {{name: n{i}, ip: 10.0.0.{i + 1}, user: bench{', main: true' if i == 0 else ''}}}"
        for i in range(count)
    ]
    system.write_text("\n".join(lines) + "\n")
    return str(system)


@pytest.mark.parametrize(
    "gpus, nodes", [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (8, 2)], ids=lambda v: str(v)
)
def test_matrix_plans_every_entry_on_each_node_shape(tmp_path, gpus, nodes):
    """Every enabled entry gets the plan its requirements call for: per-GPU processes,
    a torchrun over the node's GPUs (on one GPU, skipped with upstream's reason where upstream
    skips it), one
    torchrun per node (skipped on one node), or one process for brax."""
    extra = ("--system", nodes_file(tmp_path, nodes)) if nodes > 1 else ()
    entries = matrix("standard.yaml", *extra, MILABENCH_FAKE_GPUS=f"cuda:{gpus}:81920")
    assert set(entries) == {n for n, (_, on) in UPSTREAM.items() if on} | EXTRA
    kinds = {}
    for name, entry in entries.items():
        check_plan(name, entry, gpus, nodes)
        kinds[name] = expected_plan(entry, gpus, nodes)
    scheduled = {n for n, k in kinds.items() if not k.startswith("skipped")}
    multi = {n for n in entries if n.endswith(("-gpus", "-nodes"))}
    if gpus == 1:  # upstream's rule: a 1-GPU node skips only the entries that need several
        assert {n for n in multi if n.endswith("-gpus")} - scheduled == (
            SEVERAL_GPUS | OURS_SEVERAL_GPUS
        )
    if nodes == 1:
        assert not {n for n in scheduled if n.endswith("-nodes")}
    if gpus >= 2:
        assert {n for n in entries if n.endswith("-gpus")} <= scheduled
    if nodes == 2:
        assert {n for n in entries if n.endswith("-nodes")} <= scheduled
    assert "brax" in scheduled and "resnet50" in scheduled  # mono-GPU and one-process


def test_one_gpu_skips_exactly_what_upstream_skips():
    """On a fake 1-GPU node the skipped `-gpus` entries are upstream's (its `gpu['count'] >
    1`) and our own torchrun entries; every other `-gpus` entry is a one-rank torchrun."""
    listed = listing("standard.yaml", MILABENCH_FAKE_GPUS="cuda:1:81920")
    entries = resolve("standard.yaml", **FAKE8)
    one_gpu = matrix("standard.yaml", MILABENCH_FAKE_GPUS="cuda:1:81920")
    for name, entry in entries.items():
        needs = MULTIGPU in (entry.get("requires_capabilities") or [])
        assert needs == (name in SEVERAL_GPUS | OURS_SEVERAL_GPUS), name
        if name.endswith("-gpus"):
            assert "multigpu" in entry["tags"], name
        if needs:
            assert listed[name]["skip"] == f"requires {MULTIGPU}", name
        elif name.endswith("-gpus") and entry["plan"]["method"] == "torchrun":
            assert not one_gpu[name].get("skipped"), name
            assert "--nproc-per-node=1" in one_gpu[name]["command"], name
    assert not listed["llava-gpus"]["skip"]  # disabled upstream, but not for its GPU count
    assert not entries["brax"].get("requires_capabilities")  # one process, any GPU count


def test_run_on_one_gpu_skips_what_needs_several_and_says_why(tmp_path):
    """`milabench run` on a 1-GPU node: the entries that need several GPUs or nodes start
    nothing and the report names the requirement each one lacks."""
    entries = matrix("standard.yaml", MILABENCH_FAKE_GPUS="cuda:1:81920")
    multi = sorted(n for n in entries if n.endswith("-nodes") or n in SEVERAL_GPUS)
    run = milabench(
        "run", "--config", str(CONFIG / "standard.yaml"), "--select", ",".join(multi),
        "--base", str(tmp_path), "--run-name", "one-gpu", MILABENCH_FAKE_GPUS="cuda:1:81920",
    )  # fmt: skip
    assert run.returncode == 1 and "every selected benchmark was skipped" in run.stdout
    report = json.loads((tmp_path / "runs" / "one-gpu" / "report.json").read_text())
    reasons = {row["name"]: row["reason"] for row in report["benchmarks"]}
    assert set(reasons) == set(multi)
    for name, reason in reasons.items():
        wanted = MULTINODE if name.endswith("-nodes") else MULTIGPU
        assert reason == f"skipped: capability ({wanted})", name


def test_smoke_suite_runs_the_multi_gpu_code_on_a_cpu():
    """On a CPU a torchrun starts 2 gloo ranks, a real multi-rank run: the smoke suite's
    `_multigpu` lets it through; a 1-GPU node still skips the entries that need several
    GPUs and runs the others on its one GPU."""
    on_cpu = matrix("standard-smoke.yaml", MILABENCH_GPU_ARCH="cpu")
    gpus = [n for n in on_cpu if n.endswith("-gpus")]
    assert gpus and not any(on_cpu[n].get("skipped") for n in gpus)
    assert all("--nproc-per-node=2" in on_cpu[n]["command"] for n in gpus)
    one_gpu = matrix("standard-smoke.yaml", MILABENCH_FAKE_GPUS="cuda:1:81920")
    several = [n for n in gpus if n in SEVERAL_GPUS | OURS_SEVERAL_GPUS]
    assert several and all(
        one_gpu[n].get("skipped") == "arch == 'cpu' or gpu['count'] > 1" for n in several
    )
    assert not any(one_gpu[n].get("skipped") for n in gpus if n not in several)
