"""Running a command inside the system's container image (system key ``docker_image``).

The container shares the host's network (rendezvous addresses stay valid) and IPC
namespace (shared memory for dataloaders and NCCL), sees every GPU, and mounts the base
directory at the same path so that environments, data and run folders are where the plan
says. Variables are passed by name only, ``-e K``: docker then copies the value from its
own environment, so no value (``MILABENCH_CONFIG``, tokens of ``env:``) is on the docker
command line, which every user of the node can read in ``ps``. The SSH launcher exports
the values in the remote shell from a 0600 file it sourced (see
`milabench.remote.ssh.remote_command`); a local caller passes them with ``Popen(env=...)``.
`write_env_file` makes the ``--env-file`` alternative (0600, one ``K=V`` a line) for
callers that cannot set docker's environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path


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
    """``docker run --rm --network host --ipc host --gpus all -v B:B -e K ... IMAGE argv``.

    Only the names of ``env`` are on the command line; docker must run with the values in
    its environment.
    """
    if not image:
        raise ValueError("docker_wrap needs an image")
    out = [executable, "run", "--rm", "--network", "host", "--ipc", "host", *gpu_flags(arch)]
    if base:
        out += ["-v", f"{base}:{base}"]
    if cwd:
        out += ["-w", str(cwd)]
    for key in env:
        if not key or "=" in key or not key.replace("_", "a").isalnum():
            raise ValueError(f"invalid environment variable name: {key!r}")
        out += ["-e", key]
    out += [image, *map(str, argv)]
    return out


def write_env_file(path: str | os.PathLike[str], env: Mapping[str, str]) -> Path:
    """``env`` as a docker ``--env-file`` (``K=V`` lines), created with mode 0600.

    The file is opened with ``O_EXCL`` and mode 0600, so it is never readable by others,
    not even for an instant; the caller deletes it once the container started.
    Docker's format has no quoting: a value with a newline cannot be written.
    """
    lines = []
    for key, value in env.items():
        if not key or "=" in key or not key.replace("_", "a").isalnum():
            raise ValueError(f"invalid environment variable name: {key!r}")
        if "\n" in str(value) or "\r" in str(value):
            raise ValueError(f"{key}: a value with a newline cannot go in an env file")
        lines.append(f"{key}={value}\n")
    target = Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(lines))
    return target
