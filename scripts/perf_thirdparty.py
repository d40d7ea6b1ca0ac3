"""Check the accounted instrumentation cost of the third-party examples end to end.

    python scripts/perf_thirdparty.py                      # table, 5 rounds
    python scripts/perf_thirdparty.py --rounds 3 --scripts sine,wordlm
    python scripts/perf_thirdparty.py --json out.json      # also save the results
    python scripts/perf_thirdparty.py --quick              # tiny sizes (smoke run)

Each instrumented run writes one ``overhead`` record (docs/thirdparty.md section 6): an
*accounted* figure, the time inside benchkit's callbacks plus calibrated costs of what it
does not own. This harness measures the real cost in the same runs: every script of
``benchmarks/thirdparty-*`` runs, unmodified, with a fixed amount of work, both **bare**
(``python script.py ARGS``) and **instrumented** (``python -m voir script.py ARGS`` with
the folder's voirfile; the measurement window is set to an hour so that it never stops
the script early). Start-up (imports, voir, the probes' installation and the calibration
at close) is removed by also running each way with a near-zero amount of work (in
``--tiny-rounds`` of the rounds, spread out) and subtracting its median: the training work
of a round is ``full - median(tiny)``, for each way. Rounds interleave the ways (the order
flips every round); the table gives medians over rounds of the children's CPU time (user +
sys; every script runs with ``--threads 1``), the end-to-end overhead ``(instrumented -
bare) / bare`` of the rounds' training work (median, min..max; wall clock too), and the
median accounted ``fraction`` of the runs' ``overhead`` records.

CPU timing on a shared machine is noisy at the percent level: the end-to-end figure bounds
the accounted one loosely; expect them to agree only within the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
PY = sys.executable

# The window never ends a run early: the script runs its fixed work to the end.
MEASURE_ENV = {
    "BENCHKIT_MEASURE_MIN": "3600s",
    "BENCHKIT_MEASURE_MAX": "3600s",
    "BENCHKIT_MEASURE_WARMUP_MAX": "3600s",
    "BENCHKIT_MEASURE_WARMUP_MIN": "1s",
    "BENCHKIT_GPU_POLL": "0",
}


@dataclass
class Script:
    name: str
    folder: str
    script: str
    # arguments of the full run and of the near-zero run ("{data}" / "{tiny}": corpora)
    full: list[str]
    tiny: list[str]
    quick_full: list[str]
    corpus_words: int = 0  # wordlm: words of the full corpus (0: no corpus)
    quick_corpus_words: int = 0
    common: list[str] = field(default_factory=lambda: ["--threads", "1", "--device", "cpu"])

    @property
    def path(self) -> Path:
        return BENCHMARKS / self.folder / self.script

    @property
    def voirfile(self) -> Path:
        return BENCHMARKS / self.folder / "voirfile.py"


SCRIPTS = {
    "regression": Script(
        "regression",
        "thirdparty-regression",
        "regression.py",
        full=["--epochs", "4"],
        tiny=["--epochs", "1"],
        quick_full=["--epochs", "2"],
    ),
    "wordlm": Script(
        "wordlm",
        "thirdparty-wordlm",
        "word_language_model.py",
        full=["--data", "{data}", "--epochs", "1"],
        tiny=["--data", "{tiny}", "--epochs", "1"],
        quick_full=["--data", "{data}", "--epochs", "1"],
        corpus_words=30_000,
        quick_corpus_words=6_000,
    ),
    "sine": Script(
        "sine",
        "thirdparty-sine",
        "sine_wave.py",
        full=["--epochs", "80"],
        tiny=["--epochs", "1"],
        quick_full=["--epochs", "6"],
    ),
}
TINY_CORPUS_WORDS = 1_500  # a couple of wordlm steps


def prepare_corpus(folder: Path, words: int) -> None:
    subprocess.run(
        [PY, str(BENCHMARKS / "thirdparty-wordlm" / "prepare.py"), "--data", str(folder)]
        + ["--corpus-words", str(words)],
        check=True,
        capture_output=True,
    )


def run_once(script: Script, args: list[str], instrumented: bool, work: Path) -> dict:
    """One child process; its CPU time (user + sys), wall time and overhead record."""
    extra = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), extra] if extra else [str(ROOT)]))
    env.pop("DATA_FD", None)
    env.pop("VOIRFILE", None)
    argv = [PY, str(script.path), *args, *script.common]
    data_path = work / "data.jsonl"
    fd = None
    if instrumented:
        argv[1:1] = ["-m", "voir"]
        fd = os.open(data_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        env.update(MEASURE_ENV, VOIRFILE=str(script.voirfile), DATA_FD=str(fd))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            argv,
            cwd=work,
            env=env,
            pass_fds=[fd] if fd is not None else [],
            capture_output=True,
            text=True,
        )
    finally:
        if fd is not None:
            os.close(fd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{script.name} ({'instrumented' if instrumented else 'bare'}) exited "
            f"{proc.returncode}: {' '.join(argv)}\n{proc.stderr[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = {"cpu_s": cpu, "wall_s": wall}
    if instrumented:
        overhead = None
        with open(data_path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "overhead" in record:
                    overhead = record["overhead"]
        if overhead is None:
            raise RuntimeError(f"{script.name}: no overhead record on the data fd")
        result["overhead"] = overhead
    return result


def _pct(inst: float, bare: float) -> float:
    return 100.0 * (inst - bare) / bare if bare > 0 else float("nan")


def tiny_round_indices(rounds: int, tiny_rounds: int) -> set[int]:
    """The rounds that also run the near-zero work, spread evenly (first and last...)."""
    n = max(1, min(tiny_rounds, rounds))
    if n == 1:
        return {rounds // 2}
    return {round(i * (rounds - 1) / (n - 1)) for i in range(n)}


def measure_script(script: Script, rounds: int, tiny_rounds: int, quick: bool, work: Path) -> dict:
    data, tiny_data = work / "corpus", work / "corpus-tiny"
    words = script.quick_corpus_words if quick else script.corpus_words
    if words:
        prepare_corpus(data, words)
        prepare_corpus(tiny_data, TINY_CORPUS_WORDS)

    def fill(args: list[str]) -> list[str]:
        return [a.format(data=data, tiny=tiny_data) for a in args]

    full_args = fill(script.quick_full if quick else script.full)
    tiny_args = fill(script.tiny)
    runs: dict[str, list[dict]] = {"bare": [], "inst": [], "bare_tiny": [], "inst_tiny": []}
    tiny_at = tiny_round_indices(rounds, tiny_rounds)
    for r in range(rounds):
        order = [("bare", full_args), ("inst", full_args)]
        if r in tiny_at:
            order += [("inst_tiny", tiny_args), ("bare_tiny", tiny_args)]
        for kind, args in order if r % 2 == 0 else order[::-1]:
            runs[kind].append(run_once(script, args, kind.startswith("inst"), work))

    def work_s(way: str, key: str) -> list[float]:
        startup = statistics.median(t[key] for t in runs[way + "_tiny"])
        return [f[key] - startup for f in runs[way]]

    result: dict = {
        "args": script.quick_full if quick else script.full,
        "tiny_args": script.tiny,
        "corpus_words": words,
        "rounds": rounds,
        "tiny_rounds": len(tiny_at),
    }
    for key, label in (("cpu_s", "cpu"), ("wall_s", "wall")):
        bare, inst = work_s("bare", key), work_s("inst", key)
        pcts = [_pct(i, b) for i, b in zip(inst, bare, strict=True)]
        result[label] = {
            "bare_work_s": statistics.median(bare),
            "instrumented_work_s": statistics.median(inst),
            "overhead_pct": statistics.median(pcts),
            "overhead_pct_min": min(pcts),
            "overhead_pct_max": max(pcts),
            "bare_work_all": bare,
            "instrumented_work_all": inst,
            "overhead_pct_all": pcts,
            "bare_startup_s": statistics.median(t[key] for t in runs["bare_tiny"]),
            "instrumented_startup_s": statistics.median(t[key] for t in runs["inst_tiny"]),
        }
    records = [run["overhead"] for run in runs["inst"]]
    result["accounted"] = {
        "fraction_pct": 100.0 * statistics.median(o["fraction"] for o in records),
        "per_step_us": 1e6 * statistics.median(o["per_step_s"] for o in records),
        "step_ms": 1e3 * statistics.median(o["step_s"] for o in records),
        "steps": statistics.median(o["steps"] for o in records),
        "records": records,
    }
    return result


def describe(r: dict) -> str:
    args = " ".join(r["args"]).replace("--data {data} ", "")
    corpus = f" on {r['corpus_words']} words" if r["corpus_words"] else ""
    return f"{args}{corpus} vs {' '.join(r['tiny_args']).replace('--data {tiny} ', '')}"


def table(results: dict) -> str:
    header = (
        "script",
        "bare work",
        "instr work",
        "end-to-end (cpu)",
        "min..max",
        "end-to-end (wall)",
        "accounted",
        "details",
    )
    rows = [header]
    for name, r in results["scripts"].items():
        c, w, a = r["cpu"], r["wall"], r["accounted"]
        rows.append(
            (
                name,
                f"{c['bare_work_s']:.2f} s",
                f"{c['instrumented_work_s']:.2f} s",
                f"{c['overhead_pct']:+.2f} %",
                f"{c['overhead_pct_min']:+.2f}..{c['overhead_pct_max']:+.2f} %",
                f"{w['overhead_pct']:+.2f} %",
                f"{a['fraction_pct']:.3f} %",
                f"{a['per_step_us']:.0f} us per {a['step_ms']:.2f} ms step, "
                f"{a['steps']:.0f} steps; start-up bare {c['bare_startup_s']:.2f} s, "
                f"instr {c['instrumented_startup_s']:.2f} s cpu; {describe(r)}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        cells = [f"{row[0]:<{widths[0]}}"]
        cells += [f"{cell:>{width}}" for cell, width in zip(row[1:-1], widths[1:], strict=True)]
        lines.append("  ".join(cells + [row[-1]]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument(
        "--scripts", default=",".join(SCRIPTS), help=f"comma list of {', '.join(SCRIPTS)}"
    )
    parser.add_argument(
        "--tiny-rounds",
        type=int,
        default=2,
        help="rounds (spread out) that also run the near-zero work whose median start-up "
        "cost is subtracted (default 2)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny amounts of work (smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also save the results as JSON")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scripts.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCRIPTS]
    if unknown or not names or args.rounds < 1:
        parser.error(f"unknown scripts {unknown}" if unknown else "nothing to run")
    results: dict = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "tiny_rounds": args.tiny_rounds,
        "quick": args.quick,
        "loadavg_before": os.getloadavg(),
        "scripts": {},
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mb-perf-thirdparty-") as tmp:
        for name in names:
            work = Path(tmp) / name
            work.mkdir()
            results["scripts"][name] = measure_script(
                SCRIPTS[name], args.rounds, args.tiny_rounds, args.quick, work
            )
    results["seconds"] = time.perf_counter() - t0
    results["loadavg_after"] = os.getloadavg()
    print(table(results))
    before, after = results["loadavg_before"][0], results["loadavg_after"][0]
    print(
        f"work = full run - median near-zero run ({min(args.tiny_rounds, args.rounds)} of "
        "the rounds), CPU "
        f"seconds (user+sys), median of {args.rounds} interleaved rounds; end-to-end = "
        "(instr - bare) / bare per round, median (min..max); accounted = overhead record"
    )
    print(
        f"load average (1 min) {before:.2f} before, {after:.2f} after, {os.cpu_count()} CPUs; "
        f"{results['seconds']:.0f} s in all"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
