"""``first-light.md``: one line per entry, what was left out and why, the doctor's failures.

Per entry: status, wall time, rate with its 95% interval, TFLOPS, MFU against the
datasheet peak (``config/peaks.yaml``, as the report gives it) and against the bf16
matmul peak measured in the same call (only for the entries the datasheet counts
against the bf16 peak: an fp32 one is not held against a bf16 matmul), the GPU's mean
load over the run (a low one says the GPU waited: on its loader, or on the host), the
peak GPU memory beside the start-up estimate (`benchkit.memory`), PyTorch's own peaks
(allocated and reserved) and upstream milabench's observation on a GPU of the same name
at the same batch size (``tests/benchmarks/data/upstream_memory.yaml``, read when PyYAML
is importable), and the rate against upstream's on a GPU of the same family at the same
batch size (``config/upstream_rates.yaml``, through `milabench.report.upstream_rates`):
a gap over 5% is a parity question. Read from the state of the call, the run folder's
``report.csv`` and ``report.json`` and ``machine.json``; rewritten after every entry, so
a call cut short still says what it measured.

Standard library only (PyYAML optional).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

from firstlight.selection import PEAK_ENTRY

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_MEMORY = REPO / "tests" / "benchmarks" / "data" / "upstream_memory.yaml"
RATES_MODULE = REPO / "milabench" / "report" / "upstream_rates.py"


def _load(name: str, path: Path):
    """A module of the repository that imports nothing of milabench, loaded from its
    file: this script runs before milabench is importable."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while building
        spec.loader.exec_module(module)
    return sys.modules[name]


rates_module = _load("firstlight_upstream_rates", RATES_MODULE)
#: `benchkit.hostmem`: ``MemTotal`` now, for the machine line.
hostmem = _load("firstlight_hostmem", REPO / "benchkit" / "hostmem.py")
UpstreamRates = rates_module.UpstreamRates


def upstream_rates(names: list[str]) -> UpstreamRates | None:
    """Upstream's rates on the family of the machine's GPUs (None: no family matches)."""
    return rates_module.load(names)


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


def machine_line(machine_json: Path, memory_now: int | None = None) -> str | None:
    """One line for the record: GPUs (count, product, memory), driver and its CUDA,
    torch and its CUDA, the host's memory (``MemTotal`` at the start, and
    ``memory_now`` when it differs: a VM's memory can grow) and /dev/shm, Python,
    milabench's commit, the date (``milabench machine``); None when the file cannot be
    read."""
    try:
        facts = json.loads(machine_json.read_text())
    except (OSError, ValueError):
        return None
    acc = facts.get("accelerators") or {}
    gpus = [g for g in (acc.get("gpus") or {}).values() if isinstance(g, dict)]
    system = acc.get("system") or {}
    parts = []
    if gpus:
        total = (gpus[0].get("memory") or {}).get("total")
        size = f" ({total} MiB)" if total else ""
        parts.append(f"{len(gpus)} x {gpus[0].get('product') or 'GPU'}{size}")
    else:
        parts.append(f"no GPU ({acc.get('arch') or 'cpu'})")
    if system.get("driver_version"):
        cuda = _cuda_version(system.get("cuda_driver_version"))
        parts.append(f"driver {system['driver_version']}" + (f" (CUDA {cuda})" if cuda else ""))
    torch = facts.get("torch") or {}
    if torch.get("version"):
        parts.append(f"torch {torch['version']}")
    parts += _memory_parts(facts.get("memory") or {}, memory_now)
    parts.append(f"Python {facts.get('python') or '-'}")
    commit = str((facts.get("milabench") or {}).get("commit") or "")[:8]
    parts.append(f"milabench {commit or '-'}")
    return "machine: " + ", ".join(parts) + f"; {facts.get('date') or '-'}"


def _memory_parts(memory: dict, now: int | None) -> list[str]:
    """``host 15.6 GiB (120.0 GiB later; virtio-mem)`` and ``/dev/shm 7.8 GiB``."""
    gib = 2**30
    out = []
    total = memory.get("total")
    if isinstance(total, int):
        later = f"{now / gib:.1f} GiB later" if isinstance(now, int) and now != total else ""
        notes = "; ".join(x for x in (later, memory.get("may_grow") or "") if x)
        out.append(f"host {total / gib:.1f} GiB" + (f" ({notes})" if notes else ""))
    if isinstance(memory.get("shm"), int):
        out.append(f"/dev/shm {memory['shm'] / gib:.1f} GiB")
    return out


def _cuda_version(value: object) -> str | None:
    """NVML's CUDA driver version (13000) as 13.0; text as it is; None when absent."""
    text = str(value or "").strip()
    if text.isdigit() and len(text) >= 4:
        number = int(text)
        return f"{number // 1000}.{number % 1000 // 10}"
    return text or None


def upstream_memory(names: list[str], path: Path = UPSTREAM_MEMORY) -> dict[str, float]:
    """entry -> upstream's largest observed GPU memory (MiB) on the GPU family that names
    one of ``names`` (`gpu_family`: not a PCIe or NVL card); {} without PyYAML or one."""
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except (ImportError, OSError, ValueError):
        return {}
    family = rates_module.gpu_family(names, list(data.get("gpus") or {}))
    wanted = {family} if family else set()
    out: dict[str, float] = {}
    for entry, info in (data.get("entries") or {}).items():
        seen = [float(o["memory_mib"]) for o in (info or {}).get("observations") or []
                if isinstance(o, dict) and o.get("gpu") in wanted and "memory_mib" in o]  # fmt: skip
        if seen:
            out[entry] = max(seen)
    return out


def not_comparable(report_json: Path) -> dict[str, str]:
    """entry -> why the run's report says its figure is not comparable with upstream's
    (a stand-in input, a different recipe: the report's ``upstream`` section)."""
    try:
        data = json.loads(report_json.read_text())
    except (OSError, ValueError):
        return {}
    items = (data.get("upstream") or {}).get("not_comparable") or []
    return {str(i["name"]): str(i.get("reason", "")) for i in items
            if isinstance(i, dict) and "name" in i}  # fmt: skip


def versus(entry: str, row: dict, rates: UpstreamRates | None, notes: dict[str, str]):
    """`milabench.report.upstream_rates.versus` of one row of ``report.csv``: the rate per
    GPU (``perf``), the report's reason when not comparable (``notes``, ``parity``)."""
    parity = str(row.get("parity") or "")
    reason = notes.get(entry) or (parity.partition(":")[2].strip()
                                  if parity.startswith("different") else None)  # fmt: skip
    ours = _float(row.get("perf"))
    ours = ours if ours is not None else _float(row.get("rate"))
    return rates_module.versus(rates, entry, ours, reason, None, _float(row.get("peak_memory")),
                               _float(row.get("halfwidth")))  # fmt: skip


def upstream_section(state: dict, rows: dict[str, dict], rates: UpstreamRates | None,
                     notes: dict[str, str]) -> list[str]:  # fmt: skip
    """The lines of "Against upstream": every entry that finished and has an upstream rate."""
    if rates is None:
        return []
    lines = []
    for entry in state.get("entries") or []:
        found = versus(entry["name"], rows.get(entry["name"], {}), rates, notes)
        if found is None or entry.get("status") != "done":
            continue
        lines.append(f"| {found.name} | {found.batch_size} | {num(found.ours)} | "
                     f"{num(found.upstream)} | {found.runs} | {found.gap_text} | "
                     f"{found.verdict} | {num(found.memory_ours)} | "
                     f"{num(found.memory_upstream)} | {found.memory_gap_text} | "
                     f"{found.memory_verdict or '-'} |")  # fmt: skip
    if not lines:
        return []
    return ["", rates_module.heading(rates), "",
            "| entry | batch | rate | upstream | runs | gap | verdict | peak MiB | "
            "upstream MiB | memory gap | memory verdict |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|", *lines]  # fmt: skip


def measured_peak(rows: dict[str, dict]) -> float | None:
    """The bf16 matmul's TFLOPS measured in this call (None when it did not run)."""
    return _float(rows.get(PEAK_ENTRY, {}).get("tflops"))


def torch_memory(row: dict) -> str:
    """PyTorch's own peaks, ``allocated / reserved`` MiB (the report's
    ``torch_peak_allocated`` and ``torch_peak_reserved``), '-' when not recorded: beside
    NVML's peak and the estimate they say whether a gap is the tensors or the allocator's
    reserve."""
    allocated = _float(row.get("torch_peak_allocated"))
    reserved = _float(row.get("torch_peak_reserved"))
    if allocated is None and reserved is None:
        return "-"
    return f"{num(allocated)} / {num(reserved)}"


def measured_mfu(row: dict, rows: dict[str, dict]) -> float | None:
    """``row``'s TFLOPS as a fraction of the bf16 peak measured in this call, only when
    the datasheet counts the entry against the same peak as bf16 (its ``peak_tflops``
    equals the bf16 row's: bf16 and fp16 on NVIDIA). An fp32 or tf32 entry is not held
    against a bf16 matmul: None, as when either figure is missing."""
    peak, tflops = measured_peak(rows), _float(row.get("tflops"))
    ours = _float(row.get("peak_tflops"))
    bf16 = _float(rows.get(PEAK_ENTRY, {}).get("peak_tflops"))
    if not peak or not tflops or ours is None or bf16 is None:
        return None
    return tflops / peak if abs(ours - bf16) <= 1e-6 * bf16 else None


def render(
    state: dict,
    rows: dict[str, dict],
    run_dir: Path,
    upstream: dict[str, float] | None = None,
    rates: UpstreamRates | None = None,
    notes: dict[str, str] | None = None,
    machine: str | None = None,
) -> str:
    """The Markdown summary (see the module docstring); ``upstream``: entry -> upstream's
    observed GPU memory (MiB) on this GPU, when known; ``rates``: upstream's rates on
    this GPU's family; ``notes``: entry -> why the report says it is not comparable;
    ``machine``: `machine_line`."""
    upstream, notes = upstream or {}, notes or {}
    peak = measured_peak(rows)
    lines = [
        "# First light",
        "",
        f"budget {state.get('budget', '-')} s, wall {state.get('wall', '-')} s; "
        f"measured bf16 peak: {num(peak)} TFLOPS",
        *(["", machine] if machine else []),
        "",
        "| entry | status | wall s | rate | 95% interval | units | TFLOPS | MFU % "
        "(datasheet) | MFU % (measured peak) | GPU load % | peak GPU MiB | estimate MiB | "
        "torch MiB (allocated / reserved) | upstream MiB | vs upstream rate | note |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entry in state.get("entries") or []:
        row = rows.get(entry["name"], {})
        tflops = _float(row.get("tflops"))
        mfu = _float(row.get("mfu"))
        low, high = _float(row.get("ci95_low")), _float(row.get("ci95_high"))
        interval = f"{num(low)} - {num(high)}" if low is not None else "-"
        peak_mib = _float(row.get("peak_memory"))
        load = _float(row.get("mean_load"))
        found = versus(entry["name"], row, rates, notes) if entry["status"] == "done" else None
        gap = found.gap_text if found else "-"
        lines.append(
            f"| {entry['name']} | {entry['status']} | {entry.get('seconds', '-')} | "
            f"{num(_float(row.get('rate')))} | {interval} | {row.get('units') or '-'} | "
            f"{num(tflops)} | {num(mfu * 100 if mfu is not None else None)} | "
            f"{num(100 * measured if (measured := measured_mfu(row, rows)) else None)} | "
            f"{num(100 * load if load is not None else None)} | {num(peak_mib)} | {num(_float(row.get('memory_estimate')))} | "
            f"{torch_memory(row)} | "
            f"{num(upstream.get(entry['name']))} | {gap} | {entry.get('note', '')} |"
        )
    lines += upstream_section(state, rows, rates, notes)
    warned = [
        (e["name"], rows.get(e["name"], {}).get("warnings")) for e in state.get("entries") or []
    ]
    warned = [(name, text) for name, text in warned if text]
    if warned:  # a window short of its target, a loader that prefetched less, an estimate
        lines += ["", "Warnings (the report's, per entry):", ""]
        lines += [f"* {name}: {text}" for name, text in warned]
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
