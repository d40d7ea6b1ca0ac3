"""Cost of the report pipeline on a large synthetic run folder (figures in docs/reports.md).

    python tests/report/measure_report.py

40 benchmarks x 8 devices, 500 rate + 500 loss records and 100 accelerator samples per
file: build_report (all layers), every renderer, and a compare of the report with itself.
"""

import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

from milabench.compare.comparison import compare_samples, samples_of  # noqa: E402
from milabench.report import build_report, render  # noqa: E402


def main() -> None:
    rng = random.Random(0)
    root = Path(tempfile.mkdtemp(prefix="milabench-measure-"))
    d = root / "big"
    try:
        t = time.perf_counter()
        nrec = 0
        for b in range(40):
            for dev in range(8):
                rates = [1000 + rng.gauss(0, 20) for _ in range(500)]
                gd = [{str(dev): {"memory": [1000 + i, 81920], "load": 0.9, "power": 300.0}}
                      for i in range(100)]  # fmt: skip
                write_file(d, f"bench{b}.D{dev}", entry(f"bench{b}"), rates=rates,
                           losses=[1.0] * 500, gpudata=gd)  # fmt: skip
                nrec += 500 * 2 + 100
        size = sum(p.stat().st_size for p in d.glob("*.data")) / 1e6
        print(f"wrote {nrec} records in {time.perf_counter() - t:.2f}s ({size:.1f} MB)")
        t = time.perf_counter()
        rep = build_report([d], validations=["all"])
        tb = time.perf_counter() - t
        print(f"build_report: {tb:.2f}s ({nrec / tb:,.0f} records/s)")
        for fmt in ["text", "json", "csv", "markdown", "html"]:
            t = time.perf_counter()
            out = render(rep, fmt)
            print(f"render {fmt}: {time.perf_counter() - t:.3f}s ({len(out) / 1e3:.0f} kB)")
        s = samples_of(rep)
        t = time.perf_counter()
        compare_samples(s, s)
        n = sum(len(v) for v in s.values()) // len(s)
        print(f"compare {len(s)} benchmarks x {n} samples: {time.perf_counter() - t:.2f}s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
