"""Drive the dashboard sink with a synthetic run (the events a real run produces).

Used by the tmux test and to record docs/dashboard.txt:
``python tests/dashboard/drive_dashboard.py --mode long --steps 40 --pause-at 20``.
With ``--marker FILE`` it writes ``paused`` into FILE when it pauses mid-run and
``closed`` after the sink is closed, and each time waits until the test writes
``resume`` there (at most ``--pause`` seconds), so that the test captures the screen at
known moments without waiting longer than it needs.
"""

import argparse
import sys
import time
from pathlib import Path

from milabench.sinks.dashboard import make_dashboard


def ev(event, data=None, pipe=None):
    return {"event": event, "data": data, "pipe": pipe}


def _hold(marker: str | None, state: str, seconds: float) -> None:
    """Write ``state`` into ``marker`` and wait for ``resume`` there, or ``seconds``."""
    if not marker:
        time.sleep(seconds)
        return
    Path(marker).write_text(state)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and Path(marker).read_text() != "resume":
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="long")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--pause-at", type=int, default=20)
    parser.add_argument("--marker", default=None)
    parser.add_argument("--pause", type=float, default=3.0, help="longest hold (s)")
    args = parser.parse_args()

    sink = make_dashboard(args.mode, sys.stdout, total=5)
    benches = [("resnet50", ["D0", "D1"]), ("bert-fp16", ["D0", "D1"])]
    n = args.steps
    tags = [f"{name}.{dev}" for name, devs in benches for dev in devs]
    for name, devs in benches:
        for dev in devs:
            tag = f"{name}.{dev}"
            sink.on_event(tag, ev("config", {"name": name, "tag": [name, dev]}))
            sink.on_event(tag, ev("start", {"command": ["voir", "main.py"], "time": time.time()}))
    # A quick failing benchmark first, so a finished row is on screen.
    sink.on_event("badbench.D0", ev("config", {"name": "badbench"}))
    sink.on_event("badbench.D0", ev("start", {"command": ["python", "main.py"], "time": 0}))
    sink.on_event("badbench.D0", ev("error", {"type": "RuntimeError", "message": "boom"}))
    sink.on_event("badbench.D0", ev("end", {"command": [], "time": 0, "return_code": 1}))
    # A NaN loss, then the early stop: exit code 0, yet failed (the report's rule).
    sink.on_event("nanbench.D0", ev("config", {"name": "nanbench"}))
    sink.on_event("nanbench.D0", ev("start", {"command": ["python", "main.py"], "time": 0}))
    tiny = {"task": "train", "rate": 0.000851, "units": "Tflops", "time": 0}
    sink.on_event("nanbench.D0", ev("data", tiny, "data"))
    sink.on_event("nanbench.D0", ev("data", {"task": "train", "loss": "NaN", "time": 0}, "data"))
    sink.on_event("nanbench.D0", ev("stop", {"reason": "window"}))
    end = {"command": [], "time": 0, "return_code": 0, "early_stop": True}
    sink.on_event("nanbench.D0", ev("end", end))
    # A benchmark still in its warm-up when the screen is captured mid-run.
    sink.on_event("flops.D0", ev("config", {"name": "flops"}))
    sink.on_event("flops.D0", ev("start", {"command": ["python", "flops.py"], "time": 0}))
    for k in range(1, n + 1):
        for i, tag in enumerate(tags):
            unit = "items/s" if tag.startswith("resnet") else "Tok/s"
            base = 812.5 if unit == "items/s" else 45210.0
            sink.on_event(tag, ev("data", {"task": "early_stop", "progress": [k, n]}, "data"))
            sink.on_event(
                tag,
                ev("data", {"task": "train", "rate": base + i, "units": unit, "time": 0}, "data"),
            )
            sink.on_event(
                tag, ev("data", {"task": "train", "loss": 2.5 - k / n, "time": 0}, "data")
            )
            sink.on_event(
                tag,
                ev(
                    "data",
                    {
                        "task": "main",
                        "time": 0,
                        "gpudata": {
                            "0": {
                                "memory": [40960, 81920],
                                "load": 0.93,
                                "temperature": 61,
                                "power": 310,
                            }
                        },
                    },
                    "data",
                ),
            )
            tree = {"rss": 1.5 * 2**30, "peak_rss": (1 + k / n) * 2**30, "processes": 3}
            sink.on_event(tag, ev("data", {"task": "main", "time": 0, "process_tree": tree}))
            for _ in range(50):  # plenty of output lines: they must not slow anything
                sink.on_event(tag, ev("line", "epoch log line", "stdout"))
        if k == args.pause_at:
            time.sleep(0.6)  # let the dashboard redraw
            _hold(args.marker, "paused", args.pause)
        else:
            time.sleep(0.02)
    # flops: warm-up over, a few rates, then its measured window.
    warm = {"seconds": 1.2, "observations": 40, "settled": True}
    sink.on_event("flops.D0", ev("data", {"task": "train", "warmup": warm}, "data"))
    for _ in range(3):
        rate = {"task": "train", "rate": 12345.0, "units": "Gflops", "time": 0}
        sink.on_event("flops.D0", ev("data", rate, "data"))
    window = {"observations": 120, "measured_s": 6.02, "mean": 12345.0, "halfwidth": 0.015}
    window.update({"target": 0.02, "met": True, "reason": "precision"})
    sink.on_event("flops.D0", ev("data", {"task": "train", "window": window}, "data"))
    tags.append("flops.D0")
    for tag in tags:
        sink.on_event(tag, ev("stop", {"reason": "budget"}))
        sink.on_event(tag, ev("end", {"command": [], "time": 0, "return_code": 0}))
    sink.close()
    print("dashboard closed", flush=True)
    _hold(args.marker, "closed", args.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
