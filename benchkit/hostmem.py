"""The node's memory as its operating system tells it: ``MemTotal``, whether a virtual
machine's memory can grow past it, the ``MILABENCH_HOST_MEMORY`` override, and the size
of the shared memory that DataLoader workers hand their batches through (/dev/shm).

`benchkit.memory` checks an entry's host footprint against `host_bytes`; the loaders
size their prefetching to `shm_space` (`benchkit.shm`); the machine facts
(`milabench.machine.facts`, sent inline to nodes) and the doctor record and judge them.
Standard library only, and no other module of benchkit: it is shipped to nodes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

GIB = 2**30
HOST_MEMORY_VARIABLE = "MILABENCH_HOST_MEMORY"
#: virtio device IDs of what can give a virtual machine more memory than its ``MemTotal``
#: says now (`host_may_grow`): RAM hot-plugged as it is used (virtio-mem: ``MemTotal`` is
#: what is plugged), and a balloon that holds pages (virtio-balloon without
#: ``DEFLATE_ON_OOM``, feature bit 2: ``MemTotal`` leaves its pages out until the host
#: lets it deflate; with the bit, the guest counts them and takes them back itself).
VIRTIO_MEM, VIRTIO_BALLOON = 0x18, 0x05
BALLOON_DEFLATE_ON_OOM = 2
#: Where torch's DataLoader workers put the batches they hand over (``shm_open``).
SHM_PATH = "/dev/shm"


def mem_total(meminfo: str = "/proc/meminfo") -> int | None:
    """``MemTotal`` of ``meminfo`` in bytes, None when it cannot be read."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_override(environ: Mapping[str, str] | None = None) -> tuple[bool, int | None]:
    """``MILABENCH_HOST_MEMORY`` read: (given, bytes). A number of GiB gives its bytes;
    ``unchecked`` gives (True, None): the node's memory is not checked; unset or empty
    is (False, None). Any other value raises ValueError naming the variable."""
    text = ((os.environ if environ is None else environ).get(HOST_MEMORY_VARIABLE) or "").strip()
    if not text:
        return False, None
    if text.lower() == "unchecked":
        return True, None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"{HOST_MEMORY_VARIABLE}={text!r}: expected the node's memory in GiB (a "
            "positive number) or 'unchecked'"
        )
    return True, int(value * GIB)


def host_bytes(environ: Mapping[str, str] | None = None) -> int | None:
    """The node's memory for the start-up check: ``MILABENCH_HOST_MEMORY`` when given
    (`host_override`), else `mem_total`; None when unknown or unchecked."""
    given, value = host_override(environ)
    return value if given else mem_total()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def balloon_pages(vmstat: str = "/proc/vmstat") -> int:
    """Pages a memory balloon holds now (``nr_balloon_pages``), 0 when unknown."""
    for line in (_read(vmstat) or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_balloon_pages" and value.strip().isdigit():
            return int(value)
    return 0


def host_may_grow(sys_root: str = "/sys", vmstat: str = "/proc/vmstat") -> str | None:
    """What can give this node more memory than ``MemTotal`` says now: ``virtio-mem``
    (a bound hot-plug device), ``virtio-balloon`` (a bound balloon that holds pages
    ``MemTotal`` leaves out: `VIRTIO_BALLOON`), or None (a VM may still be resized from
    outside; nothing inside says so)."""
    devices = os.path.join(sys_root, "bus", "virtio", "devices")
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return None
    for name in names:
        folder = os.path.join(devices, name)
        if not os.path.exists(os.path.join(folder, "driver")):
            continue  # no driver bound: the device does nothing
        try:
            kind = int(_read(os.path.join(folder, "device")) or "-1", 16)
        except ValueError:
            continue
        if kind == VIRTIO_MEM:
            return "virtio-mem"
        if kind == VIRTIO_BALLOON:
            features = _read(os.path.join(folder, "features")) or ""
            counted = features[BALLOON_DEFLATE_ON_OOM : BALLOON_DEFLATE_ON_OOM + 1] == "1"
            if not counted and balloon_pages(vmstat) > 0:
                return "virtio-balloon"
    return None


def shm_space(path: str = SHM_PATH) -> tuple[int, int] | None:
    """(size, free bytes) of the file system at ``path`` (what an unprivileged process
    may still write), None when there is none or it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
