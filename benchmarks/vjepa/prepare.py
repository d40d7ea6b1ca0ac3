"""Generate the synthetic videos of the V-JEPA entries (idempotent), as upstream's
``prepare.py`` does: ``--videos`` (1,000) mp4 files of ``--video-width`` x
``--video-height`` (640 x 480) uniform-noise frames, ``--video-frames`` (300) of them at
30 fps, MPEG-4 (OpenCV's ``mp4v``), listed in ``video_metainfo.csv`` (``name label``, one
line per video, names relative to the list) in ``$MILABENCH_DIR_DATA/FakeVideo``. The
loader (main.py) decodes them with decord. About 24 MB a video at the default size.
Gets the same argv as main.py. The count does not scale with the node (1,000 videos on 8
GPUs is 5 batches of 24 per rank and pass; 30,720, enough for a window without a pass
boundary, would be 740 GB): main.py leaves each pass's first batch out of the timing, as
upstream does.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
from pathlib import Path

from benchshared.datasets import data_dir


def write_video(path: Path, seed: int, width: int, height: int, frames: int) -> None:
    """One video of uniform-noise frames (upstream's ``generate_random_video``)."""
    import cv2
    import numpy as np

    rng = np.random.RandomState(seed)
    partial = path.with_suffix(".part.mp4")
    writer = cv2.VideoWriter(str(partial), cv2.VideoWriter_fourcc(*"mp4v"), 30, (width, height))
    for _ in range(frames):
        writer.write(rng.randint(0, 256, (height, width, 3), dtype=np.uint8))
    writer.release()
    partial.rename(path)  # whole files only


def _write(job: tuple) -> None:
    write_video(*job)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options that matter here (main.py's others are ignored): ``--dataset``,
    ``--videos`` (upstream's 1,000 whatever the node), ``--video-frames``,
    ``--video-width``, ``--video-height``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=None, help="the CSV (default: FakeVideo)")
    parser.add_argument("--videos", type=int, default=1000)
    parser.add_argument("--video-frames", type=int, default=300)
    parser.add_argument("--video-width", type=int, default=640)
    parser.add_argument("--video-height", type=int, default=480)
    args, _unknown = parser.parse_known_args(argv)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    csv = Path(args.dataset or Path(data_dir("FakeVideo")) / "video_metainfo.csv")
    root = csv.parent
    marker = root / "done.json"
    layout = {
        "videos": args.videos,
        "frames": args.video_frames,
        "width": args.video_width,
        "height": args.video_height,
        "codec": "mp4v",
    }
    if marker.is_file() and json.loads(marker.read_text()) == layout:
        print(f"vjepa: {root} already prepared ({args.videos} videos)", flush=True)
        return
    marker.unlink(missing_ok=True)  # written again last: a half-written folder is redone
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("*.npy"):  # clips of an earlier layout
        old.unlink()
    size = (args.video_width, args.video_height, args.video_frames)
    jobs = [(root / f"{i + 1}.mp4", i, *size) for i in range(args.videos)]
    workers = max(1, min(os.cpu_count() or 1, 16, len(jobs)))
    if workers == 1:
        for job in jobs:
            _write(job)
    else:
        with multiprocessing.Pool(workers) as pool:
            for _ in pool.imap_unordered(_write, jobs):
                pass
    csv.write_text("".join(f"{i + 1}.mp4 0\n" for i in range(args.videos)))
    marker.write_text(json.dumps(layout))  # last
    print(
        f"vjepa: {args.videos} videos of {args.video_frames} frames of {args.video_width} x "
        f"{args.video_height} px in {root}",
        flush=True,
    )


if __name__ == "__main__":
    main()
