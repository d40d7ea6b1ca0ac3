"""Running a command inside the system's container image (system key ``docker_image``).

The container shares the host's network (rendezvous addresses stay valid) and IPC
namespace (shared memory for dataloaders and NCCL), sees every GPU, and mounts the base
directory at the same path so that environments, data and run folders are where the plan
says. Variables are passed one by one with ``-e K=V`` (argv items, so no quoting is
needed here; the SSH layer quotes every word for the remote shell).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def gpu_flags(arch: str | None) -> list[str]:
    """How the container gets the accelerators of ``arch``."""
    if arch == "rocm":
        return ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
    if arch in (None, "", "cuda"):
        return ["--gpus", "all"]
    return []


def docker_wrap(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    image: str,
    base: str | None,
    cwd: str | None = None,
    arch: str | None = "cuda",
    executable: str = "docker",
) -> list[str]:
    """``docker run --rm --network host --ipc host --gpus all -v B:B -e K=V ... IMAGE argv``."""
    if not image:
        raise ValueError("docker_wrap needs an image")
    out = [executable, "run", "--rm", "--network", "host", "--ipc", "host", *gpu_flags(arch)]
    if base:
        out += ["-v", f"{base}:{base}"]
    if cwd:
        out += ["-w", str(cwd)]
    for key, value in env.items():
        out += ["-e", f"{key}={value}"]
    out += [image, *map(str, argv)]
    return out
