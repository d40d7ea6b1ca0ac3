"""DataLoader workers sized to /dev/shm (`benchkit.shm`): the arithmetic, the batch sizes
it measures, and a real loader under a real 64 MiB /dev/shm that fails as configured and
runs once its prefetch is fitted."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from benchkit import shm
from benchkit.shm import SharedMemoryTooSmall, fit_prefetch, loader_need

MIB = 2**20
REPO = Path(__file__).resolve().parents[2]


def test_a_loader_holds_its_workers_batches_and_two_in_hand():
    assert loader_need(10 * MIB, 8, 4) == (8 * 4 + 2) * 10 * MIB
    assert loader_need(10 * MIB, 8, 4, ranks=8) == 8 * (8 * 4 + 2) * 10 * MIB
    assert loader_need(10 * MIB, 0, 4, ranks=8) == 0  # no workers: nothing shared


def test_the_prefetch_is_kept_lowered_or_refused():
    """Kept when the node's loaders fit in 90% of /dev/shm's size; else the largest that
    fits, with one line naming the sizes and the fix; refused when one batch per worker
    does not fit, with the size it needs."""
    batch = 154 * MIB  # 256 float images of 224 px
    big = (64 * 2**30, 64 * 2**30)
    assert fit_prefetch(batch, 8, 4, space=big) == (4, None)
    assert fit_prefetch(batch, 8, 4, space=None) == (4, None)  # no /dev/shm to read
    assert fit_prefetch(batch, 0, 4, space=(MIB, MIB)) == (4, None)  # no workers
    # 4 GiB: (8 x p + 2) x 154 MiB <= 3.6 GiB holds for p = 2, not 3
    prefetch, line = fit_prefetch(batch, 8, 4, space=(4 * 2**30, 4 * 2**30), label="resnet50")
    assert prefetch == 2
    assert line.startswith("resnet50: 8 loader workers x 1 process(es), batches of 154 MiB: ")
    assert "/dev/shm is 4.0 GiB: prefetching 2 batches per worker instead of 4" in line
    assert "--shm-size" in line
    # what fitted one process does not fit eight that share the node
    with pytest.raises(SharedMemoryTooSmall) as refused:
        fit_prefetch(batch, 8, 4, ranks=8, space=(4 * 2**30, 4 * 2**30))
    assert "one batch per worker needs 13.4 GiB" in str(refused.value)
    with pytest.raises(SharedMemoryTooSmall, match="/dev/shm is 64 MiB"):
        fit_prefetch(batch, 8, 4, space=(64 * MIB, 64 * MIB))


def test_batch_bytes_are_read_from_one_sample_without_moving_the_seeds():
    """A sample's tensors and arrays (nested) times the batch, measured with Python's,
    NumPy's and torch's random state left as it was."""

    class Crops(torch.utils.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, index):
            random.random(), np.random.rand(), torch.rand(1)  # augmentations draw
            return {"crops": [torch.zeros(3, 8, 8), torch.zeros(3, 4, 4)], "y": np.int64(1)}

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    assert shm.sampled_batch_bytes(Crops(), 32) == 32 * ((3 * 64 + 3 * 16) * 4 + 8)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert shm.sampled_batch_bytes([], 32) == 0

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield torch.zeros(8)

    assert shm.sampled_batch_bytes(Stream(), 32) == 0
    assert shm.tensor_bytes("text") == 0


LOADER = textwrap.dedent(
    """
    import sys, time, torch
    from benchkit.shm import loader_prefetch

    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return 4096

        def __getitem__(self, i):
            return torch.full((3, 224, 224), float(i))

    batch = 16  # 9.2 MiB of float images
    asked = 4
    prefetch = asked if sys.argv[1] == "plain" else loader_prefetch(
        batch * 3 * 224 * 224 * 4, 2, asked, label="test")
    loader = torch.utils.data.DataLoader(
        Images(), batch_size=batch, num_workers=2, prefetch_factor=prefetch)
    for i, b in enumerate(loader):
        time.sleep(0.05)  # a slow step: the workers fill their prefetch
        if i == 40:
            break
    print("done, prefetch", prefetch)
    """
)


@pytest.mark.system
def test_a_real_loader_under_a_small_dev_shm(tmp_path):
    """In a private mount namespace (``unshare -rm``: nothing changes on the machine),
    /dev/shm is a 64 MiB tmpfs, a container's default. Two workers prefetching 4 float
    batches of 9.2 MiB each fail (torch: ``unable to allocate shared memory``); with the
    prefetch fitted (2), the loop runs and the warning names the sizes."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    script = tmp_path / "loader.py"
    script.write_text(LOADER)

    def run(mode: str) -> subprocess.CompletedProcess:
        mount = (
            f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {script} {mode}"
        )
        return subprocess.run(
            ["unshare", "-rm", "sh", "-c", mount], capture_output=True, text=True, timeout=120,
            cwd=REPO, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )  # fmt: skip

    plain = run("plain")
    assert plain.returncode != 0, plain.stdout
    assert "unable to allocate shared memory" in plain.stderr, plain.stderr[-2000:]
    fitted = run("fitted")
    assert fitted.returncode == 0, fitted.stderr[-2000:]
    assert "done, prefetch 2" in fitted.stdout
    assert "/dev/shm is 64 MiB: prefetching 2 batches per worker instead of 4" in fitted.stderr
