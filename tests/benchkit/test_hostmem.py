"""The node's memory as the OS tells it (`benchkit.hostmem`): ``MemTotal``, the override,
what can grow a VM's memory, /dev/shm's size."""

from __future__ import annotations

import os

import pytest

from benchkit import hostmem
from benchkit.hostmem import GIB, host_bytes, host_may_grow, host_override, shm_space


def test_the_override_is_gib_or_unchecked_and_anything_else_is_an_error():
    assert host_override({}) == (False, None)
    assert host_override({"MILABENCH_HOST_MEMORY": " "}) == (False, None)
    assert host_override({"MILABENCH_HOST_MEMORY": "128"}) == (True, 128 * GIB)
    assert host_override({"MILABENCH_HOST_MEMORY": "0.5"}) == (True, GIB // 2)
    assert host_override({"MILABENCH_HOST_MEMORY": "Unchecked"}) == (True, None)
    for bad in ("128G", "-1", "0", "nan", "inf"):
        with pytest.raises(ValueError, match=f"MILABENCH_HOST_MEMORY='{bad}': expected"):
            host_override({"MILABENCH_HOST_MEMORY": bad})
    assert host_bytes({"MILABENCH_HOST_MEMORY": "2"}) == 2 * GIB
    assert host_bytes({"MILABENCH_HOST_MEMORY": "unchecked"}) is None
    assert host_bytes({}) == hostmem.mem_total()


def test_memtotal_is_the_machine_memory():
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert hostmem.mem_total() == pytest.approx(pages, rel=0.01)
    assert hostmem.mem_total("/no/such/meminfo") is None


def virtio(root, name: str, device: int, features: str = "", bound: bool = True) -> None:
    """A virtio device as sysfs shows it (no such device can be made here)."""
    folder = root / "bus" / "virtio" / "devices" / name
    folder.mkdir(parents=True)
    (folder / "device").write_text(f"0x{device:04x}\n")
    (folder / "features").write_text(features.ljust(64, "0") + "\n")
    if bound:
        (folder / "driver").mkdir()


def test_what_can_grow_a_vms_memory(tmp_path):
    """A bound virtio-mem device; a balloon that holds pages MemTotal leaves out (no
    DEFLATE_ON_OOM, bit 2). Not: an unbound device, a balloon that holds nothing, one
    whose pages MemTotal counts, a disk."""
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 10\nnr_balloon_pages 262144\n")
    sys_root = tmp_path / "sys"
    virtio(sys_root, "virtio0", 0x02)  # a block device
    virtio(sys_root, "virtio1", 0x05, "011001")  # balloon with DEFLATE_ON_OOM
    assert host_may_grow(str(sys_root), str(vmstat)) is None
    virtio(sys_root, "virtio2", 0x05, "010001")  # balloon without it, holding pages
    assert host_may_grow(str(sys_root), str(vmstat)) == "virtio-balloon"
    vmstat.write_text("nr_balloon_pages 0\n")
    assert host_may_grow(str(sys_root), str(vmstat)) is None
    virtio(sys_root, "virtio3", 0x18, bound=False)
    assert host_may_grow(str(sys_root), str(vmstat)) is None
    (sys_root / "bus" / "virtio" / "devices" / "virtio3" / "driver").mkdir()
    assert host_may_grow(str(sys_root), str(vmstat)) == "virtio-mem"
    assert host_may_grow(str(tmp_path / "none")) is None
    assert host_may_grow() in (None, "virtio-mem", "virtio-balloon")  # this machine's


def test_shm_space_is_the_file_system_size_and_free_bytes(tmp_path):
    size, free = shm_space(str(tmp_path))
    st = os.statvfs(tmp_path)
    assert size == st.f_blocks * st.f_frsize and 0 <= free <= size
    assert shm_space(str(tmp_path / "missing")) is None
