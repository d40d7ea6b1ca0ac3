"""The suites resolve, every benchmark folder follows the folder contract, the standard
suite expands to the right processes on an 8-GPU CUDA machine (fake back-end), and the
third-party script stays free of any milabench import."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
from systemtools import MACHINE_PREFIX

from .conftest import BENCHMARKS, ROOT

CONFIG = ROOT / "config"


def milabench(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    for key in (
        "MILABENCH_CONFIG",
        "MILABENCH_SYSTEM",
        "MILABENCH_FAKE_GPUS",
        "MILABENCH_GPU_ARCH",
    ):
        full_env.pop(key, None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=120,
    )


def resolve(config: str, *extra: str, **env: str) -> dict:
    out = milabench("resolve", "--config", str(CONFIG / config), "--format", "json", *extra, **env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def matrix(config: str, *extra: str, **env: str) -> dict:
    out = milabench("matrix", "--config", str(CONFIG / config), "--format", "json", *extra, **env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


CPU_ENTRIES = {
    "flops-fp32",
    "flops-bf16",
    "convnet",
    "convnet-noio",
    "transformer-lm",
    "bert",
    "ddp",
    "thirdparty",
    *(
        f"opbench-{op}"
        for op in ["matmul", "conv2d", "softmax", "layernorm", "embedding", "reduce", "elementwise"]
    ),
}
KNOWN_TAGS = {"monogpu", "multigpu", "multinode", "nobatch", "noio", "diagnostic"}


def test_cpu_suite_resolves():
    entries = resolve("cpu.yaml")
    assert set(entries) == CPU_ENTRIES
    for name, entry in entries.items():
        assert entry["weight"] > 0, name
        assert set(entry["tags"]) & KNOWN_TAGS, name
        assert entry["install_group"] in {"torch", "hf"}, name
        opts = entry["voir"]["options"]
        assert "stop" not in opts and "skip" not in opts, name  # time is the budget
        assert entry["measure"]["max"] == "30s" and entry.get("max_duration") is None, name
    assert entries["ddp"]["plan"] == {"method": "torchrun", "nproc": 2}
    assert entries["opbench-softmax"]["matrix"] == {"op": "softmax"}
    assert {"torch", "hf"} <= {e["install_group"] for e in entries.values()}


def test_cpu_fast_shrinks_windows():
    from benchkit.options import parse_measure

    full, fast = resolve("cpu.yaml"), resolve("cpu-fast.yaml")
    assert set(fast) < set(full)  # fewer opbench entries
    for name, entry in fast.items():
        small, big = parse_measure(entry["measure"]), parse_measure(full[name]["measure"])
        assert small.max < big.max and small.timeout < big.timeout, name


def test_cpu_commands_resolve_placeholders():
    entries = matrix("cpu.yaml", MILABENCH_GPU_ARCH="cpu")
    ddp = entries["ddp"]["command"]
    assert "--nproc-per-node=2" in ddp and ddp[ddp.index("--backend") + 1] == "gloo"
    thirdparty = entries["thirdparty"]["command"]
    assert os.path.basename(thirdparty[0]) == "voir" and "--interval" in thirdparty
    flops = entries["flops-fp32"]["command"]
    assert flops[flops.index("--device") + 1] == "cpu"
    assert not any("{" in arg for e in entries.values() for arg in e["command"])


FAULTS_PROBE = """
import ctypes, resource
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 64 << 20
def cycle():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(extra_env: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(extra_env)
    out = subprocess.run(
        [sys.executable, "-c", FAULTS_PROBE], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason=MACHINE_PREFIX + "glibc allocator (Linux only)"
)
def test_cpu_suite_allocator_settings_stop_page_faults():
    """Every CPU entry carries the allocator variables, and they do what the suite says.

    Without them glibc maps a 64 MiB block afresh at each allocation (16,384 page faults
    per allocate/touch/free cycle, the run-to-run variance source measured in
    docs/benchmarks.md); with them the freed block is reused and faults stop.
    """
    entries = matrix("cpu.yaml", MILABENCH_GPU_ARCH="cpu")
    envs = {name: entry.get("env") or {} for name, entry in entries.items()}
    settings = envs["flops-fp32"]
    assert settings.get("MALLOC_MMAP_MAX_") == "0" and "MALLOC_TRIM_THRESHOLD_" in settings
    assert all(env == settings for env in envs.values()), envs
    assert _page_faults({}) > 5 * 10_000  # the default: ~16k faults per cycle
    assert _page_faults(settings) < 1_000
    standard = matrix("standard.yaml", MILABENCH_FAKE_GPUS="cuda:8:81920")
    assert not any("MALLOC_MMAP_MAX_" in (e.get("env") or {}) for e in standard.values())


def _scripts_named_in_suites() -> dict[str, set[str]]:
    """folder name -> the ``script:`` values entries of the shipped suites give it."""
    from milabench.config.yamlio import parse_yaml

    out: dict[str, set[str]] = {}
    for suite in CONFIG.glob("*.yaml"):
        for entry in (parse_yaml(suite.read_text(), suite) or {}).values():
            if isinstance(entry, dict) and entry.get("script") and entry.get("definition"):
                folder = (suite.parent / entry["definition"]).resolve().name
                out.setdefault(folder, set()).add(entry["script"])
    return out


# a folder whose name starts with "_" holds shared code (benchmarks/_shared), not a benchmark
FOLDERS = sorted(p.name for p in BENCHMARKS.iterdir() if p.is_dir() and p.name[0] not in "_.")


@pytest.mark.parametrize("folder", FOLDERS)
def test_folder_contract(folder):
    path = BENCHMARKS / folder
    # the script is main.py, or the file every suite entry of the folder names (`script:`)
    scripts = _scripts_named_in_suites().get(folder) or {"main.py"}
    for name in (*sorted(scripts), "requirements.in", "requirements.cpu.txt",
                 "requirements.cuda.txt"):  # fmt: skip
        assert (path / name).is_file(), f"{folder}/{name}"
    cpu = (path / "requirements.cpu.txt").read_text()
    cuda = (path / "requirements.cuda.txt").read_text()
    if "torch" in (path / "requirements.in").read_text().split():  # not the JAX folder
        assert "\ntorch==2.13.0+cpu\n" in cpu
        assert "\ntorch==2.13.0\n" in cuda
    assert "nvidia-ml-py==" in cuda
    pins = [line for line in cpu.splitlines() if line and not line.startswith((" ", "#"))]
    assert all("==" in line for line in pins), pins


def test_thirdparty_has_no_milabench_import():
    source = (BENCHMARKS / "thirdparty" / "main.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported.isdisjoint({"milabench", "benchkit", "benchshared", "voir", "ptera"}), imported
    assert "milabench" not in source and "benchkit" not in source
    voirfile = (BENCHMARKS / "thirdparty" / "voirfile.py").read_text()
    assert "benchkit.instruments" in voirfile


PER_GPU = {
    "resnet50",
    "resnet50-noio",
    "convnext_large-fp32",
    "convnext_large-fp16",
    "convnext_large-tf32",
    "convnext_large-tf32-fp16",
    "bert-fp32",
    "bert-fp16",
    "bert-tf32",
    "llama-train",
    "fp16",
    "bf16",
    "tf32",
    "fp32",
}


def test_standard_weights_and_groups():
    entries = resolve("standard.yaml", MILABENCH_FAKE_GPUS="cuda:8:81920")
    assert sum(e["weight"] for e in entries.values()) > 0
    assert {"torch", "hf"} <= {e["install_group"] for e in entries.values()}
    assert entries["convnext_large-tf32-fp16"]["install_variant"] == "cuda"


@pytest.mark.parametrize("variant", ["cpu", "cuda", "cuda12"])
def test_pins_agree_across_benchmarks(variant):
    """Benchmarks of one install group share one environment: a package pinned at two
    versions in two folders makes the group's install unsolvable."""
    seen: dict[str, dict[str, str]] = {}
    for path in BENCHMARKS.glob(f"*/requirements.{variant}.txt"):
        for line in path.read_text().splitlines():
            if "==" in line and not line.startswith((" ", "#")):
                name, version = line.split("==", 1)
                seen.setdefault(name.lower(), {})[version.strip()] = path.parent.name
    conflicts = {name: versions for name, versions in seen.items() if len(versions) > 1}
    assert not conflicts, conflicts
