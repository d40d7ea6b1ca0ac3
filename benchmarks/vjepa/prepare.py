"""Generate the synthetic video clips of the V-JEPA entries (idempotent).

Clips are uint8 arrays ``[frames, size, size, 3]`` saved as ``.npy`` (no video codec
needed: decoding is not what V-JEPA measures), listed in ``video_metainfo.csv`` like
upstream's ``FakeVideo`` folder. Smooth moving gradients, so that neighbouring patches
look alike as in real video. Gets the same argv as main.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchkit.datasets import data_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=None, help="the CSV (default: FakeVideo)")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--clips", type=int, default=64)
    args, _unknown = parser.parse_known_args(argv)
    csv = Path(args.dataset or Path(data_dir("FakeVideo")) / "video_metainfo.csv")
    root = csv.parent
    marker = root / "done.json"
    wanted = {"frames": args.frames, "size": args.image_size, "clips": args.clips}
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        print(f"vjepa: {root} already prepared", flush=True)
        return
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    size, frames = args.image_size, args.frames
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    lines = []
    for i in range(args.clips):
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        speed = rng.uniform(-0.05, 0.05, 2)
        clip = np.empty((frames, size, size, 3), dtype=np.uint8)
        for t in range(frames):
            wave = 0.5 + 0.5 * np.sin(6.28 * (xx + t * speed[0]) + 6.28 * (yy + t * speed[1]))
            clip[t] = (wave[..., None] * colour).clip(0, 255).astype(np.uint8)
        path = root / f"clip{i:05d}.npy"
        np.save(path, clip)
        lines.append(f"{path.name} {i % 10}")
    csv.write_text("\n".join(lines) + "\n")
    marker.write_text(json.dumps(wanted))  # last: a half-written folder is redone
    print(f"vjepa: {args.clips} clips of {frames} x {size} px in {root}", flush=True)


if __name__ == "__main__":
    main()
