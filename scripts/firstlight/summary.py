"""``first-light.md``: one line per entry, what was left out and why, the doctor's failures.

Per entry: status, wall time, rate with its 95% interval, TFLOPS, MFU against the
datasheet peak (``config/peaks.yaml``, as the report gives it) and against the bf16
matmul peak measured in the same call, the peak GPU memory beside the start-up estimate
(`benchkit.memory`) and upstream milabench's observation on a GPU of the same name at
the same batch size (``tests/benchmarks/data/upstream_memory.yaml``, read when PyYAML
is importable). Read from the state of the call, the run folder's ``report.csv`` and
``machine.json``; rewritten after every entry, so a call cut short still says what it
measured.

Standard library only (PyYAML optional).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from firstlight.selection import PEAK_ENTRY

UPSTREAM_MEMORY = (
    Path(__file__).resolve().parents[2] / "tests" / "benchmarks" / "data" / "upstream_memory.yaml"
)


def _float(value: object) -> float | None:
    try:
        return float(value) if value not in (None, "") else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def num(value: float | None) -> str:
    """3 significant digits below 100, whole numbers above, "-" when missing."""
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def read_rows(csv_path: Path) -> dict[str, dict]:
    try:
        with open(csv_path, newline="") as fh:
            return {r["name"]: r for r in csv.DictReader(fh)}
    except OSError:
        return {}


def doctor_failures(run_dir: Path) -> list[str]:
    """The checks `milabench doctor` failed or warned about when the run started."""
    try:
        data = json.loads((run_dir / "doctor.json").read_text())
    except (OSError, ValueError):
        return []
    out = []
    for f in data.get("findings") or []:
        if isinstance(f, dict) and f.get("severity") in ("fail", "failure", "error", "warn",
                                                          "warning"):  # fmt: skip
            out.append(f"{f.get('severity')}: {f.get('subject', '')} {f.get('check', '')}: "
                       f"{f.get('reason', '')}".replace("  ", " "))  # fmt: skip
    return out


def gpu_names(machine_json: Path) -> list[str]:
    """The product names of the machine's GPUs (``milabench machine``), [] if unknown."""
    try:
        facts = json.loads(machine_json.read_text())
    except (OSError, ValueError):
        return []
    gpus = ((facts.get("accelerators") or {}).get("gpus") or {}).values()
    return [str(g.get("product") or g.get("name") or "") for g in gpus if isinstance(g, dict)]


def upstream_memory(names: list[str], path: Path = UPSTREAM_MEMORY) -> dict[str, float]:
    """entry -> upstream's largest observed GPU memory (MiB) on a GPU whose short name
    (H100, H200, L40S, ...) is in one of ``names``; {} without PyYAML or a match."""
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except (ImportError, OSError, ValueError):
        return {}
    wanted = {g for g in (data.get("gpus") or {}) if any(g in name for name in names)}
    out: dict[str, float] = {}
    for entry, info in (data.get("entries") or {}).items():
        seen = [float(o["memory_mib"]) for o in (info or {}).get("observations") or []
                if isinstance(o, dict) and o.get("gpu") in wanted and "memory_mib" in o]  # fmt: skip
        if seen:
            out[entry] = max(seen)
    return out


def measured_peak(rows: dict[str, dict]) -> float | None:
    """The bf16 matmul's TFLOPS measured in this call (None when it did not run)."""
    return _float(rows.get(PEAK_ENTRY, {}).get("tflops"))


def render(
    state: dict, rows: dict[str, dict], run_dir: Path, upstream: dict[str, float] | None = None
) -> str:
    """The Markdown summary (see the module docstring); ``upstream``: entry -> upstream's
    observed GPU memory (MiB) on this GPU, when known."""
    upstream = upstream or {}
    peak = measured_peak(rows)
    lines = [
        "# First light",
        "",
        f"budget {state.get('budget', '-')} s, wall {state.get('wall', '-')} s; "
        f"measured bf16 peak: {num(peak)} TFLOPS",
        "",
        "| entry | status | wall s | rate | 95% interval | units | TFLOPS | MFU % "
        "(datasheet) | MFU % (measured peak) | peak GPU MiB | estimate MiB | upstream MiB "
        "| note |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entry in state.get("entries") or []:
        row = rows.get(entry["name"], {})
        tflops = _float(row.get("tflops"))
        mfu = _float(row.get("mfu"))
        low, high = _float(row.get("ci95_low")), _float(row.get("ci95_high"))
        interval = f"{num(low)} - {num(high)}" if low is not None else "-"
        peak_mib = _float(row.get("peak_memory"))
        lines.append(
            f"| {entry['name']} | {entry['status']} | {entry.get('seconds', '-')} | "
            f"{num(_float(row.get('rate')))} | {interval} | {row.get('units') or '-'} | "
            f"{num(tflops)} | {num(mfu * 100 if mfu is not None else None)} | "
            f"{num(100 * tflops / peak if tflops and peak else None)} | "
            f"{num(peak_mib)} | {num(_float(row.get('memory_estimate')))} | "
            f"{num(upstream.get(entry['name']))} | {entry.get('note', '')} |"
        )
    left = state.get("left_out") or {}
    if left:
        lines += ["", "Left out:", ""]
        lines += [f"* {name}: {reason}" for name, reason in left.items()]
    install = state.get("install_failures") or []
    if install:
        lines += ["", "Install check failures (`milabench install --use-current-env`):", ""]
        lines += [f"* {line}" for line in install]
    doctor = doctor_failures(run_dir)
    if doctor:
        lines += ["", "Doctor checks that did not pass (the run carried on: --ignore-doctor):",
                  ""]  # fmt: skip
        lines += [f"* {line}" for line in doctor]
    return "\n".join(lines) + "\n"
