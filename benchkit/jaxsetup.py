"""The start of every JAX benchmark: platform, CPU threads, and the device check.

JAX picks its platform when it is first used and, by default, falls back to the CPU
with a warning when its GPU plugin is missing or fails to load: a ``--device cuda`` run
of a CPU-only JAX would measure the CPU under a GPU's name. `configure` (before jax is
imported) and `require_device` (after) make that impossible: a benchmark asked for an
accelerator that JAX cannot see exits with one line naming JAX's version and the device.

Only the standard library is imported at module level (benchkit's rule): jax is
imported inside `require_device`.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

#: milabench device names (the ``{device_name}`` placeholder) -> JAX's default backend
#: when that device is in use (``jax.default_backend()``: "gpu" for CUDA and ROCm).
BACKENDS = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "rocm": "gpu", "tpu": "tpu"}
_PLUGINS = ("jax-cuda", "jax-rocm", "jaxlib-cuda", "jaxlib-rocm")


def configure(device: str | None, threads: int | None = None) -> None:
    """Environment variables JAX reads when it is imported: call before ``import jax``.

    ``--device cpu`` sets ``JAX_PLATFORMS=cpu`` (unless already set). Other devices leave
    JAX free to choose; `require_device` then checks what it chose. ``threads`` is not
    applied: XLA has no setting for its CPU thread pool, which uses every CPU the process
    may run on (its affinity: ``taskset`` bounds it). The often-quoted
    ``intra_op_parallelism_threads=N`` in ``XLA_FLAGS`` lacks ``--`` and XLA skips it
    (measured: jax 0.11.2 runs a matmul on both cores of a 2-core machine with ``N=1``).
    """
    del threads  # kept for the callers' signature: see above
    if device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")


def gpu_plugins() -> list[str]:
    """``name version`` of the installed JAX GPU plugins (jax-cuda12-plugin, ...)."""
    found = []
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(_PLUGINS):
            found.append(f"{name} {dist.version}")
    return sorted(set(found))


def _why_unseen(jax: Any, device: str) -> str | None:
    """Why JAX cannot run on ``device`` (``cuda``, ``cuda:1``, ``cpu``...), or None."""
    kind, _, index = device.partition(":")
    wanted = BACKENDS.get(kind)
    if wanted is None:
        return f"JAX has no back-end for {kind} (known: {', '.join(sorted(BACKENDS))})"
    try:
        backend = jax.default_backend()
        devices = jax.devices()
    except RuntimeError as err:  # JAX_PLATFORMS names a platform that failed
        return str(err).splitlines()[0] if str(err) else "no back-end could be initialised"
    if backend != wanted:
        if wanted == "gpu":
            plugins = gpu_plugins()
            if not plugins:
                return (
                    f"no GPU plugin is installed (JAX runs on {backend}); install "
                    "jax[cuda12] or jax[cuda13] (jax[rocm] on AMD), or run with --device cpu"
                )
            try:
                jax.devices("cuda")
            except RuntimeError as err:
                detail = str(err).splitlines()[0] if str(err) else ""
            else:
                detail = ""
            return (
                f"{', '.join(plugins)} installed but JAX fell back to {backend}"
                + (f" ({detail})" if detail else "")
                + "; check the driver with nvidia-smi"
            )
        return f"JAX runs on {backend}"
    if index.isdigit() and int(index) >= len(devices):
        return f"only {len(devices)} {backend} device(s) are visible"
    return None


def require_device(device: str | None) -> str:
    """JAX's default backend, once checked to be the one ``device`` asks for.

    ``None`` accepts whatever JAX chose. Otherwise, when JAX runs elsewhere (no GPU
    plugin, a plugin that found no GPU), exits with one line::

        jax 0.8.1 cannot see device cuda: no GPU plugin is installed (JAX runs on cpu); ...
    """
    import jax

    if device is None:
        return str(jax.default_backend())
    why = _why_unseen(jax, device)
    if why is not None:
        raise SystemExit(f"jax {jax.__version__} cannot see device {device}: {why}")
    return str(jax.default_backend())
