"""Replay recorded rate streams through the measurement window, with and without the
target-unreachable rule, and say what the rule saves and whether it ever stops a window
that would have met its target.

Why replay: the rule (`benchkit.window.Window.unreachable`) decides from the interval's
history, and its thresholds must be judged on what real hosts produce, not on synthetic
noise. A run recorded with a window that never ends on precision (``--override
'*.measure.precision=0.0001'``, so every entry measures to ``max``) holds, for every
entry, the whole stream the window would have seen; replaying it with ``precision`` 1%,
2% or 3% tells when the window would have met each target, and when the rule would have
given up. Streams recorded with the ordinary settings can be replayed too, up to where
they ended.

The replay feeds the recorded rates to the same `benchkit.window.Window` in the order and
at the times they were recorded (decisions every 0.25 s of measured time, as
`benchkit.meter` makes them), from the start of the measured window (the ``warmup``
record's time).

Usage::

    python scripts/window_replay.py RUN_DIR [RUN_DIR ...] [--label noisy] \\
        [--targets 0.01,0.02,0.03] [--min 6] [--max 30] [--json out.json]
    # keep some streams (gzipped JSON) and replay them later without the run folders:
    python scripts/window_replay.py RUN_DIR --save-streams s.json.gz --keep bert,convnet
    python scripts/window_replay.py s.json.gz

Exit code 1 when the rule stops a window that would have met its target (a "false stop").
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchkit.window import Window, WindowSettings  # noqa: E402
from milabench.report.runs import read_run_dir  # noqa: E402

STEP = 0.25  # seconds between two window decisions (benchkit.meter.CHECK_PERIOD)


@dataclass
class Stream:
    """One entry's measured rates, times relative to the start of its measured window."""

    run: str
    tag: str
    times: list[float]
    rates: list[float]
    horizon: float  # how long it was recorded for (seconds of measured window)


@dataclass
class Outcome:
    reason: str  # precision, max_time, unreachable, ended (the recording ran out)
    at: float  # measured seconds when the window ended
    halfwidth: float | None


def streams_of(run_dir: Path) -> list[Stream]:
    """The rate streams of a run folder's successful files (with a measured window)."""
    out = []
    for fr in read_run_dir(run_dir):
        if len(fr.rates) < 2 or fr.window is None:
            continue
        start = fr.measure_start
        if start is None:
            continue
        pairs = [(t - start, r) for t, r in zip(fr.rate_times, fr.rates, strict=False) if t]
        pairs = [(t, r) for t, r in pairs if t >= 0 and math.isfinite(r)]
        if len(pairs) < 2:
            continue
        measured = fr.window.get("measured_s")
        horizon = float(measured) if isinstance(measured, int | float) else pairs[-1][0]
        out.append(
            Stream(
                run=run_dir.name,
                tag=fr.tag,
                times=[t for t, _ in pairs],
                rates=[r for _, r in pairs],
                horizon=horizon,
            )
        )
    return out


def load_streams(path: Path) -> list[Stream]:
    """Streams saved with ``--save-streams`` (JSON, gzipped when the name ends in .gz)."""
    import gzip

    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return [Stream(**item) for item in json.loads(raw)["streams"]]


def save_streams(path: Path, streams: list[Stream]) -> None:
    import gzip

    doc = json.dumps({"streams": [asdict(s) for s in streams]}, separators=(",", ":"))
    data = gzip.compress(doc.encode(), mtime=0) if path.suffix == ".gz" else doc.encode()
    path.write_bytes(data)


def replay(stream: Stream, settings: WindowSettings, **rule: float) -> Outcome:
    """Run `stream` through a window with ``settings`` (``rule``: Window attributes such
    as ``unreachable_margin``) until it ends or the recording runs out."""
    window = Window(settings)
    for key, value in rule.items():
        setattr(window, key, value)
    window.started = 0.0
    window.begin_measure(0.0)
    i = 0
    now = 0.0
    end = min(stream.horizon, settings.max) + 1e-9
    while now < end:
        now += STEP
        batch = []
        while i < len(stream.times) and stream.times[i] <= now:
            batch.append(stream.rates[i])
            i += 1
        if batch:
            window.add_measured([0.0] * len(batch), batch)
        window.update(now)
        if window.done:
            ci = window.interval()
            return Outcome(window.reason or "?", round(now, 2), ci.halfwidth if ci else None)
    ci = window.interval()
    reason = "max_time" if stream.horizon >= settings.max - STEP else "ended"
    return Outcome(reason, round(min(now, end), 2), ci.halfwidth if ci else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--label", default="")
    parser.add_argument("--targets", default="0.01,0.02,0.03")
    parser.add_argument("--min", type=float, default=6.0)
    parser.add_argument("--max", type=float, default=30.0)
    parser.add_argument("--margin", type=float, default=None)
    parser.add_argument("--stalled", type=float, default=None)
    parser.add_argument("--projection", type=float, default=None)
    parser.add_argument("--allowance", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--save-streams", type=Path, default=None)
    parser.add_argument("--keep", default="", help="with --save-streams: entry name prefixes")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    rule = {}
    if args.margin is not None:
        rule["unreachable_margin"] = args.margin
    if args.stalled is not None:
        rule["stalled_exponent"] = args.stalled
    if args.projection is not None:
        rule["projection_exponent"] = args.projection
    if args.allowance is not None:
        rule["exponent_allowance"] = args.allowance
    streams = [
        s for run in args.runs for s in (load_streams(run) if run.is_file() else streams_of(run))
    ]
    if args.save_streams:
        keep = [k for k in args.keep.split(",") if k]
        chosen = [s for s in streams if not keep or any(s.tag.startswith(k) for k in keep)]
        for s in chosen:
            s.times = [round(t, 6) for t in s.times]
            s.rates = [float(f"{r:.7g}") for r in s.rates]
        save_streams(args.save_streams, chosen)
        print(f"saved {len(chosen)} stream(s) to {args.save_streams}")
        return 0
    targets = [float(x) for x in args.targets.split(",") if x.strip()]
    rows = []
    false_stops = []
    for target in targets:
        base = WindowSettings(min=args.min, max=args.max, precision=target)
        off = WindowSettings(**{**asdict(base), "stop_unreachable": False})
        on = WindowSettings(**{**asdict(base), "stop_unreachable": True})
        for stream in streams:
            a, b = replay(stream, off), replay(stream, on, **rule)
            row = {
                "run": stream.run,
                "tag": stream.tag,
                "target": target,
                "horizon": stream.horizon,
                "off": asdict(a),
                "on": asdict(b),
                "saved": round(a.at - b.at, 2),
            }
            rows.append(row)
            if b.reason == "unreachable" and a.reason == "precision":
                false_stops.append(row)
            if args.verbose:
                print(
                    f"{stream.run} {stream.tag} ±{target:.0%}: off {a.reason}@{a.at:g}s "
                    f"(±{(a.halfwidth or 0):.2%}), on {b.reason}@{b.at:g}s",
                    file=sys.stderr,
                )
    print(f"{args.label or 'streams'}: {len(streams)} stream(s) from {len(args.runs)} run(s)")
    print("| target | windows | met (rule off) | missed at max (rule off) | stopped unreachable "
          "| of them would have met | measured time, rule off | rule on | saved |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for target in targets:
        mine = [r for r in rows if r["target"] == target and r["off"]["reason"] != "ended"]
        met = sum(r["off"]["reason"] == "precision" for r in mine)
        missed = sum(r["off"]["reason"] == "max_time" for r in mine)
        stopped = sum(r["on"]["reason"] == "unreachable" for r in mine)
        wrong = sum(
            r["on"]["reason"] == "unreachable" and r["off"]["reason"] == "precision" for r in mine
        )
        t_off = sum(r["off"]["at"] for r in mine)
        t_on = sum(r["on"]["at"] for r in mine)
        saved = f"{t_off - t_on:.1f} s ({(t_off - t_on) / t_off:.0%})" if t_off else "-"
        print(
            f"| ±{target:.0%} | {len(mine)} | {met} | {missed} | {stopped} | {wrong} | "
            f"{t_off:.0f} s | {t_on:.0f} s | {saved} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"label": args.label, "rows": rows}, indent=1))
    if false_stops:
        for r in false_stops:
            print(
                f"FALSE STOP: {r['run']} {r['tag']} ±{r['target']:.0%}: met at "
                f"{r['off']['at']} s, stopped at {r['on']['at']} s",
                file=sys.stderr,
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
