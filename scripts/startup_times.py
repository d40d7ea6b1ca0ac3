"""Measure what the standard suite's start-up budgets must cover: model builds and compiles.

    python scripts/startup_times.py                       # every probe that fits here
    python scripts/startup_times.py --probes llm-8b,llm-70b --json out.json
    python scripts/startup_times.py --probes jax --jax-python results/venv/jax/bin/python

The start-up margin of an entry (``measure.startup``, docs/measurement.md) must cover
everything between the process start and the end of its first step: imports, building
the model, the data set-up, compilation and the first step itself (the window's clock
starts at the first step, and a JAX step compiles before it). This script times, on this
machine's CPU, the parts that can take minutes:

* ``llm-8b``, ``llm-70b``: `benchmarks/llm/main.py`'s ``make_model`` (a
  ``LlamaForCausalLM`` with transformers' random initialisation) on the host, in fp32
  then cast to bf16 (a whole model built on the host) and in bf16 (what a rank that
  keeps its FSDP shards in host memory initialises: 1/8 of it on 8 GPUs). A whole 8B
  model is 32 GB of fp32 and a 70B one 280 GB, so the probe builds the same shapes with
  1 and 2 decoder layers and a 256-token vocabulary (per-layer cost), and with no layer
  and the real vocabulary (embeddings and head), then extrapolates linearly:
  ``full = embeddings + layers x per_layer``. A part whose memory would not fit in 80 %
  of what is available is not built: its time is scaled from the parameter rate of the
  parts that were (said in the output).
* ``dinov2``: the ViT-g/14 student with its heads (`benchmarks/dinov2/main.py`'s
  ``build``) and its teacher copy, at full size on the host (the entry builds there, then moves to the GPU).
* ``diffusion``: the UNet, VAE and text encoder of every full-size shape of
  `benchmarks/diffusion/main.py` (``build``: Stable Diffusion 1.5's, 2's), on the host.
* ``jax``: the ``ppo``, ``brax`` and ``dqn`` entries of ``config/standard.yaml`` with
  their own arguments, run by the jax environment's interpreter on the CPU until their
  first measured step (``BENCHKIT_STOP=1``, no warm-up): imports, environment set-up,
  XLA compilation of the whole training iteration, and two iterations.

Each probe runs in its own process (its imports counted, its memory given back). Times
are **CPU seconds** of the probe's process, every thread together: what the work costs a
dedicated core, whatever else the machine runs (on a shared machine the wall time says
more about the neighbours; it is printed too). Threads: ``--threads`` (default: every
CPU this process may use), set with ``torch.set_num_threads`` and ``OMP_NUM_THREADS``.
Prints one Markdown table; ``--json`` writes the raw figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROBES = ("llm-8b", "llm-70b", "dinov2", "diffusion", "jax")
JAX_ENTRIES = ("ppo", "brax", "dqn")
GIB = 1024**3


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (the whole RAM when it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def load_module(folder: str, name: str) -> Any:
    """``benchmarks/<folder>/main.py`` as a module (its folder first on ``sys.path``)."""
    import importlib.util

    path = ROOT / "benchmarks" / folder / "main.py"
    sys.path[:0] = [str(path.parent), str(ROOT)]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- child probes (run in a fresh interpreter each) ---------------------------------------


def timed(fn, *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the CPU seconds it took (every thread of this process)."""
    start = time.process_time()
    value = fn(*args)
    return value, time.process_time() - start


def probe_llm(size: str) -> dict[str, Any]:
    """Per-layer and embedding build times of an ``llm`` shape on the host, in fp32 (a
    whole model built there, then cast) and in bf16 (what a rank that keeps its FSDP
    shards in host memory initialises: 1/ranks of the model), and the extrapolation."""
    start = time.process_time()
    import torch
    import transformers  # noqa: F401  (make_model imports it lazily: counted here)
    from transformers import LlamaForCausalLM  # noqa: F401

    llm = load_module("llm", "llm_main")
    imports = time.process_time() - start
    hidden, layers, heads, kv_heads, inter, vocab = llm.SIZES[size]
    layer_params = hidden * (2 * hidden + 2 * hidden * kv_heads // heads) + 3 * hidden * inter
    embed_params = 2 * vocab * hidden  # input embeddings and an untied head

    def build(n_layers: int, n_vocab: int, dtype: torch.dtype) -> dict[str, Any]:
        name = f"probe-{n_layers}-{n_vocab}"
        llm.SIZES[name] = (hidden, n_layers, heads, kv_heads, inter, n_vocab)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # as the benchmark builds: no fp32 copy first
        try:
            (model, _), t_build = timed(llm.make_model, name, 512)
        finally:
            torch.set_default_dtype(previous)
        t_cast = timed(model.to, torch.bfloat16)[1] if dtype == torch.float32 else 0.0
        params = sum(p.numel() for p in model.parameters())
        del model
        gc.collect()
        return {"layers": n_layers, "vocab": n_vocab, "params": params,
                "build_s": t_build, "bf16_s": t_cast}  # fmt: skip

    def extrapolate(dtype: torch.dtype) -> dict[str, Any]:
        size_of = torch.tensor([], dtype=dtype).element_size()

        def fits(params: int) -> bool:  # the weights, and a bf16 copy when cast
            return params * (size_of + 2) < 0.8 * available_bytes()

        parts = [build(1, 256, dtype)]
        if fits(2 * layer_params):
            parts.append(build(2, 256, dtype))
        if fits(embed_params):
            parts.append(build(0, vocab, dtype))
        one = parts[0]
        two = next((p for p in parts if p["layers"] == 2), None)
        keys = ("build_s", "bf16_s")
        if two is not None:
            per_layer = {k: max(two[k] - one[k], 0.0) for k in keys}
        else:
            per_layer = {k: one[k] for k in keys}
        embed = next((p for p in parts if p["layers"] == 0), None)
        if embed is not None:
            embeddings, note = {k: embed[k] for k in keys}, "measured"
        else:  # scaled from the per-layer rate (time per parameter)
            embeddings = {k: per_layer[k] * embed_params / layer_params for k in keys}
            note = "scaled from the per-layer rate (did not fit in memory)"
        full = {k: embeddings[k] + layers * per_layer[k] for k in keys}
        return {"parts": parts, "per_layer": per_layer, "embeddings": embeddings,
                "embeddings_from": note, "full": full}  # fmt: skip

    build(1, 256, torch.bfloat16)  # warm-up: first-call costs are not a layer's
    fp32 = extrapolate(torch.float32)
    bf16 = extrapolate(torch.bfloat16)
    params = embed_params + layers * layer_params
    return {
        "probe": f"llm-{size}",
        "imports_s": imports,
        "layers": layers,
        "params": params,
        "fp32_gib": 4 * params / GIB,
        "fp32": fp32,
        "bf16": bf16,
        # a whole model built in fp32 on the host, then cast to bf16
        "whole_fp32_s": fp32["full"]["build_s"] + fp32["full"]["bf16_s"],
        # one rank of 8 initialising its bf16 shard in host memory (FSDP CPU offload)
        "shard_of_8_bf16_s": bf16["full"]["build_s"] / 8,
        "total_s": imports + fp32["full"]["build_s"] + fp32["full"]["bf16_s"],
    }


def probe_dinov2() -> dict[str, Any]:
    start = time.process_time()
    import copy

    dino = load_module("dinov2", "dinov2_main")
    imports = time.process_time() - start
    args = dino.parse_args(["--arch", "giant", "--batch-size", "32"])
    student, t_student = timed(dino.build, args)
    params = sum(p.numel() for p in student.parameters())
    _, t_teacher = timed(copy.deepcopy, student)
    return {
        "probe": "dinov2",
        "imports_s": imports,
        "params": params,
        "fp32_gib": 4 * params / GIB,
        "student_s": t_student,
        "teacher_copy_s": t_teacher,
        "total_s": imports + t_student + t_teacher,
    }


def probe_diffusion() -> dict[str, Any]:
    """Every full-size shape of `benchmarks/diffusion/main.py` (``SHAPES`` but ``tiny``),
    built on the host as the entries build them before moving them to the GPU."""
    start = time.process_time()
    import diffusers  # noqa: F401  (build imports it lazily: counted here)
    import torch
    import transformers  # noqa: F401

    diffusion = load_module("diffusion", "diffusion_main")
    imports = time.process_time() - start
    shapes = getattr(diffusion, "SHAPES", None) or {"sd15": diffusion.SD15}
    builds = {}
    for name, shape in shapes.items():
        if name == "tiny":
            continue
        models, seconds = timed(diffusion.build, shape, torch.device("cpu"))
        params = sum(p.numel() for m in models for p in m.parameters())
        builds[name] = {"build_s": seconds, "params": params}
        del models
        gc.collect()
    slowest = max(builds.values(), key=lambda b: b["build_s"])
    return {
        "probe": "diffusion",
        "imports_s": imports,
        "builds": builds,
        "params": slowest["params"],
        "fp32_gib": 4 * slowest["params"] / GIB,
        "build_s": slowest["build_s"],
        "total_s": imports + slowest["build_s"],
    }


def run_child(probe: str, threads: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    start = time.perf_counter()
    if probe.startswith("llm-"):
        row = probe_llm(probe.removeprefix("llm-"))
    else:
        row = {"dinov2": probe_dinov2, "diffusion": probe_diffusion}[probe]()
    row["wall_s"] = time.perf_counter() - start
    return row


# -- the jax entries, run as the suite runs them -------------------------------------------


def jax_commands(threads: int) -> dict[str, list[str]]:
    """The resolved argv of the standard suite's jax entries on a CPU node."""
    os.environ["MILABENCH_GPU_ARCH"] = "cpu"
    from milabench.config import load_suite
    from milabench.config.argv import argv_list
    from milabench.config.placeholders import resolve_argv

    suite = load_suite(ROOT / "config" / "standard.yaml", select=list(JAX_ENTRIES))
    out = {}
    for name, entry in suite.entries.items():
        argv = resolve_argv([str(a) for a in argv_list(entry.argv)], entry, suite.system)
        if "--threads" in argv:
            argv[argv.index("--threads") + 1] = str(threads)
        out[name] = argv
    return out


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def probe_jax(python: str, threads: int, timeout: float) -> list[dict[str, Any]]:
    rows = []
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads), DATA_FD="1")
    env.update(BENCHKIT_STOP="1", BENCHKIT_MEASURE_WARMUP_MIN="0",
               BENCHKIT_MEASURE_WARMUP_MAX="0", BENCHKIT_MEASURE_MIN="0")  # fmt: skip
    env.pop("MILABENCH_CONFIG", None)
    for name, argv in jax_commands(threads).items():
        command = [python, str(ROOT / "benchmarks" / "purejaxrl" / "main.py"), *argv]
        start, cpu = time.perf_counter(), children_cpu()
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=timeout)  # fmt: skip
            rc = done.returncode
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] if rc else []
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", []
        rows.append({"probe": f"jax-{name}", "argv": argv, "total_s": children_cpu() - cpu,
                     "wall_s": time.perf_counter() - start, "returncode": rc,
                     "error": tail[0] if tail else None})  # fmt: skip
    return rows


# -- the parent --------------------------------------------------------------------------


def describe(row: dict[str, Any]) -> tuple[str, str]:
    """(what was measured, how the full-size figure was obtained) of one probe's row."""
    probe = row["probe"]
    if probe.startswith("llm-"):
        per, emb = row["fp32"]["per_layer"], row["fp32"]["embeddings"]
        per16 = row["bf16"]["per_layer"]
        what = (f"{row['params'] / 1e9:.1f}B parameters ({row['fp32_gib']:.0f} GiB fp32), "
                f"whole model in fp32 on the host then cast: per layer {per['build_s']:.2f} s "
                f"build + {per['bf16_s']:.2f} s cast, embeddings {emb['build_s']:.1f} + "
                f"{emb['bf16_s']:.1f} s ({row['fp32']['embeddings_from']}), imports "
                f"{row['imports_s']:.1f} s; in bf16 per layer {per16['build_s']:.2f} s, "
                f"a shard of 8 in host memory {row['shard_of_8_bf16_s']:.0f} s")  # fmt: skip
        return what, f"extrapolated to {row['layers']} layers"
    if probe == "dinov2":
        return (f"ViT-g/14 + head, {row['params'] / 1e9:.2f}B parameters: student "
                f"{row['student_s']:.1f} s, teacher copy {row['teacher_copy_s']:.1f} s, "
                f"imports {row['imports_s']:.1f} s", "full size")  # fmt: skip
    if probe == "diffusion":
        builds = ", ".join(
            f"{name} {b['params'] / 1e9:.2f}B parameters {b['build_s']:.1f} s"
            for name, b in row["builds"].items()
        )
        return (f"UNet + VAE + text encoder built: {builds}; imports {row['imports_s']:.1f} s",
                "full size, the slowest shape")  # fmt: skip
    status = "" if row["returncode"] == 0 else f" (exit {row['returncode']}: {row['error']})"
    return (" ".join(row["argv"]) + status, "full size, to the first measured step")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--probes", default=",".join(PROBES), help="comma list of " + ", ".join(PROBES)
    )
    parser.add_argument("--threads", type=int, default=cpus())
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter with torch, transformers, diffusers"
    )
    default_jax = ROOT / "results" / "venv" / "jax" / "bin" / "python"
    parser.add_argument(
        "--jax-python", default=str(default_jax), help="interpreter with jax and brax"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per probe")
    parser.add_argument("--json", default=None, help="write the raw figures here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.threads)), flush=True)
        return 0
    probes = [p.strip() for p in args.probes.split(",") if p.strip()]
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        parser.error(f"unknown probe {unknown[0]!r}; known: {', '.join(PROBES)}")
    rows: list[dict[str, Any]] = []
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(ROOT))
    for probe in probes:
        if probe == "jax":
            if not Path(args.jax_python).exists():
                print(f"jax: no interpreter at {args.jax_python} (--jax-python)", file=sys.stderr)
                continue
            rows += probe_jax(args.jax_python, args.threads, args.timeout)
            continue
        command = [args.python, __file__, "--child", probe, "--threads", str(args.threads)]
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=args.timeout)  # fmt: skip
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{probe}: failed (exit {done.returncode}): {tail}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"Host: {cpus()} CPUs, {args.threads} threads per probe, "
          f"{available_bytes() / GIB:.0f} GiB available\n")  # fmt: skip
    print("| probe | CPU seconds | wall seconds | what | how |")
    print("|:---|---:|---:|:---|:---|")
    for row in rows:
        what, how = describe(row)
        wall = row.get("wall_s")
        wall_text = f"{wall:.0f} s" if wall is not None else "-"
        print(f"| {row['probe']} | {row['total_s']:.0f} s | {wall_text} | {what} | {how} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "cpus": cpus(),
                                                "rows": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
