"""The generated data sets that torchrun ranks share scale with the node's GPUs, the
entry's batch size and its window, so that every rank has whole batches for its window;
the smoke suite's explicit sizes stay tiny (docs/benchmarks.md, "Data set sizes")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from .conftest import BENCHMARKS, ROOT
from .test_suites import matrix

# A window of 0.5 s + 0.5 s: 4 batches per rank at the 0.25 s step floor.
WINDOW = {"warmup_min": 0, "warmup_max": "0.5s", "min": 0, "max": "0.5s"}


def prepare(folder: str, argv: list[str], gpus: int, entry: dict | None = None) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MILABENCH_GPU_COUNT=str(gpus))
    env["MILABENCH_CONFIG"] = json.dumps(entry or {"num_machines": 1, "measure": WINDOW})
    done = subprocess.run(
        [sys.executable, "prepare.py", *argv],
        cwd=BENCHMARKS / folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_video_folder_is_upstreams_whatever_the_node(tmp_path):
    """V-JEPA's videos do not scale: upstream's fixed count of noise mp4 videos (1,000 by
    default; a few tiny ones here), one list row per video, decodable by the loader's
    decord; written once, again only when the layout changes."""
    from decord import VideoReader

    csv = tmp_path / "FakeVideo" / "video_metainfo.csv"
    # (decord misreads some tiny sizes, such as 32 x 24 or 48 x 32: these two it reads)
    small = ["--dataset", str(csv), "--videos", "3", "--video-frames", "12",
             "--video-width", "64", "--video-height", "48"]  # fmt: skip
    out = prepare("vjepa", [*small, "--batch-size", "5"], gpus=8)
    assert "3 videos of 12 frames of 64 x 48 px" in out
    assert csv.read_text().splitlines() == ["1.mp4 0", "2.mp4 0", "3.mp4 0"]
    reader = VideoReader(str(csv.parent / "1.mp4"))
    assert len(reader) == 12 and reader[0].asnumpy().shape == (48, 64, 3)
    video = csv.parent / "1.mp4"
    written = video.stat().st_mtime_ns
    assert "already prepared" in prepare("vjepa", [*small, "--batch-size", "5"], gpus=16)
    assert video.stat().st_mtime_ns == written
    prepare("vjepa", [*small[:-3], "80", "--video-height", "60"], gpus=8)  # written again
    assert VideoReader(str(video))[0].asnumpy().shape == (60, 80, 3)


def test_llava_samples_scale_unless_given(tmp_path):
    argv = ["--size", "tiny", "--text-len", "24", "--data", str(tmp_path / "a")]
    entry = {"num_machines": 2, "measure": WINDOW}
    out = prepare("llava", [*argv, "--batch-size", "20"], gpus=4, entry=entry)
    assert np.load(tmp_path / "a" / "images.npy", mmap_mode="r").shape[0] == 20 * 4 * 4 * 2
    assert "generated 640 llava samples" in out
    given = ["--size", "tiny", "--text-len", "24", "--data", str(tmp_path / "b")]
    prepare("llava", [*given, "--samples", "8", "--batch-size", "20"], gpus=4, entry=entry)
    assert np.load(tmp_path / "b" / "images.npy", mmap_mode="r").shape[0] == 8
    prepare("llava", [*given[:-1], str(tmp_path / "c")], gpus=1)  # at least 128
    assert np.load(tmp_path / "c" / "images.npy", mmap_mode="r").shape[0] == 128


@pytest.mark.parametrize("config", ["standard.yaml", "standard-smoke.yaml"])
def test_suites_let_prepare_size_the_shared_sets(config):
    """The standard suite leaves the sizes to prepare.py (it passes the batch size and no
    count; the video count is upstream's fixed one); the smoke suite passes small explicit
    counts, so CPU runs stay tiny."""
    entries = matrix(config, MILABENCH_FAKE_GPUS="cuda:8:81920")
    smoke = config == "standard-smoke.yaml"
    shared = {
        "resnet152-ddp-gpus": "--images-per-class",
        "lightning-gpus": "--images-per-class",
        "dinov2-giant-gpus": "--images-per-class",
        "vjepa-gpus": "--videos",  # upstream's 1,000 whatever the node (prepare's default)
        "llava-single": "--samples",
    }
    for name, count_option in shared.items():
        command = entry_command(entries[name])
        assert "--batch-size" in command, name
        assert (count_option in command) == smoke, name
        if smoke:
            assert int(command[command.index(count_option) + 1]) <= 64, name


def entry_command(entry: dict) -> list[str]:
    return entry.get("command") or entry["processes"][0]["command"]
