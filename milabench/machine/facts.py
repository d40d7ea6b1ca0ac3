"""The facts of one machine (CPU, memory, OS, Python, accelerators) as one record.

`machine_facts()` is the one probe of them: the `meta` record of every run
(`milabench.metadata`, its fields in docs/run-data.md), `milabench preflight`
(`milabench.remote.probe`) and `milabench fleet` (`milabench.remote.facts`), which run
this very module on each node (`SHIPPED_MODULES`, sent with `milabench.machine.inline`).
So it needs the standard library, `benchkit.accelerators` and `benchkit.hostmem` only.
Reading facts never stops a run: a back-end that fails gives ``arch: "unknown"`` and its
``error``.

`git_head` (the commit of a clone, read without git) is here for the same reason: the
`meta` record names the tool's commit, and the fleet's node probe the commit of the code
pushed to the node.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Mapping
from typing import Any

from benchkit import accelerators, hostmem

#: What a node needs to run `machine_facts` (in import order), for `inline_program`.
SHIPPED_MODULES = (
    "benchkit.smi",
    "benchkit.accelerators",
    "benchkit.hostmem",
    "milabench.machine.facts",
)


def cpu_brand() -> str:
    """The CPU model (``model name`` of /proc/cpuinfo, else what `platform` says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The instruction-set extensions that decide CPU results (the kernels torch and oneDNN
# pick: AVX-512 and AMX for bf16/int8 on x86, SVE and the bf16/i8mm extensions on Arm),
# as /proc/cpuinfo spells them (x86 ``flags``, Arm ``Features``).
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
    "amx_fp16", "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme",
)  # fmt: skip


def cpu_isa(cpuinfo: str | None = None) -> list[str]:
    """The `ISA_FLAGS` the CPU has, in that order (the first processor's ``flags`` or
    ``Features`` line of /proc/cpuinfo); [] when unknown."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            have = set(value.split())
            return [flag for flag in ISA_FLAGS if flag in have]
    return []


def memory_facts(sys_root: str = "/sys") -> dict[str, Any]:
    """``total`` (``MemTotal``, bytes), ``may_grow`` (the device that can give a VM more
    than that: `benchkit.hostmem.host_may_grow`, None) and ``shm`` (the size of
    /dev/shm, where DataLoader workers hand over their batches; None without one)."""
    shm = hostmem.shm_space()
    return {
        "total": hostmem.mem_total(),
        "may_grow": hostmem.host_may_grow(sys_root),
        "shm": shm[0] if shm else None,
    }


def accelerator_facts() -> dict[str, Any]:
    """``{"arch", "gpus", "system"}`` of `benchkit.accelerators.detect` (``error`` and
    no device when it fails, a setting it cannot read included)."""
    try:
        found = accelerators.detect()
        gpus = {str(d.get("index", i)): d for i, d in enumerate(found.devices())}
        return {"arch": found.arch, "gpus": gpus, "system": found.system_info()}
    except Exception as err:  # noqa: BLE001 - facts must never stop a run
        return {"arch": "unknown", "gpus": {}, "system": {}, "error": repr(err)}


def machine_facts() -> dict[str, Any]:
    """The record described above, for the machine this runs on."""
    uname = os.uname()
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "cpu": {"count": os.cpu_count(), "brand": cpu_brand(), "isa": cpu_isa()},
        "memory": memory_facts(),
        "os": {
            "sysname": uname.sysname,
            "nodename": uname.nodename,
            "release": uname.release,
            "version": uname.version,
            "machine": uname.machine,
        },
        "accelerators": accelerator_facts(),
    }


def accelerator_count(facts: Mapping[str, Any]) -> int:
    """How many accelerators a `machine_facts` record lists."""
    gpus = (facts.get("accelerators") or {}).get("gpus")
    return len(gpus) if isinstance(gpus, Mapping) else 0


def accelerator_arch(facts: Mapping[str, Any]) -> str | None:
    """The arch of a `machine_facts` record (None when it has none)."""
    return (facts.get("accelerators") or {}).get("arch")


#: Names the commit of a copy of the code without ``.git`` (a container image, a copied tree).
COMMIT_VARIABLE = "MILABENCH_COMMIT"


def commit_override(environ: Mapping[str, str] | None = None) -> str | None:
    """``MILABENCH_COMMIT`` read: the commit (7 to 40 hex digits, lowercased) that a copy
    of the code without ``.git`` came from; None when unset or empty. Any other value
    raises ValueError naming the variable."""
    text = ((os.environ if environ is None else environ).get(COMMIT_VARIABLE) or "").strip()
    if not text:
        return None
    if not re.fullmatch(r"[0-9a-fA-F]{7,40}", text):
        raise ValueError(
            f"{COMMIT_VARIABLE}={text!r}: expected a git commit (7 to 40 hex digits, as "
            "`git rev-parse HEAD` prints it)"
        )
    return text.lower()


def tool_commit(folder: str | os.PathLike[str]) -> str | None:
    """milabench's commit: HEAD of the checkout at ``folder`` when it is one (it wins),
    else ``MILABENCH_COMMIT`` (`commit_override`; a bad value counts as unset here:
    `milabench run` and `milabench machine` refuse it first); None when neither."""
    head = git_head(folder)
    if head is not None:
        return head
    try:
        return commit_override()
    except ValueError:
        return None


def git_head(folder: str | os.PathLike[str]) -> str | None:
    """HEAD of the clone (or `git worktree`) at ``folder``, read from ``.git`` without
    starting git; None when ``folder`` is not a checkout or its files cannot be read."""
    try:
        git = _git_dir(os.path.join(folder, ".git"))
        with open(os.path.join(git, "HEAD"), encoding="utf-8") as f:
            head = f.read().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(None, 1)[1]
        for base in dict.fromkeys((git, _common_dir(git))):
            path = os.path.join(base, ref)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    return f.read().strip() or None
            packed = os.path.join(base, "packed-refs")
            if os.path.exists(packed):
                with open(packed, encoding="utf-8") as f:
                    for line in f:
                        if line.rstrip().endswith(" " + ref):
                            return line.split()[0]
    except (OSError, IndexError):
        return None
    return None


def _git_dir(dot_git: str) -> str:
    """The git directory of a checkout: ``.git`` itself, or where a worktree's or
    submodule's ``.git`` file points (``gitdir: <path>``)."""
    if os.path.isdir(dot_git):
        return dot_git
    with open(dot_git, encoding="utf-8") as f:
        target = f.read().strip().removeprefix("gitdir:").strip()
    return os.path.normpath(os.path.join(os.path.dirname(dot_git), target))


def _common_dir(git: str) -> str:
    """Where a worktree's branches live (its ``commondir`` file), else ``git`` itself."""
    try:
        with open(os.path.join(git, "commondir"), encoding="utf-8") as f:
            return os.path.normpath(os.path.join(git, f.read().strip()))
    except OSError:
        return git
    return None
