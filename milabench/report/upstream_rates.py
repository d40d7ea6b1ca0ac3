"""This run's rates and memory beside upstream's on the same GPU (config/upstream_rates.yaml).

Upstream records, per GPU, the rate and memory of every entry at each batch size it ran
(``config/scaling/<GPU>.yaml``); ``scripts/upstream_rates.py`` keeps the runs at our
suite's batch sizes. `load(products)` picks the GPU family that names the machine's GPU
(`gpu_family`: H200 in "NVIDIA H200"; another form factor, PCIe or NVL, never);
`versus(...)` gives an entry's gaps in rate and in peak memory and their verdicts: within
`PARITY_GAP`, a parity question beyond, not comparable (a stand-in, another recipe,
another batch size), or not compared (upstream's figure is a whole node's). Standard
library and PyYAML only, importing no other module of milabench: ``scripts/first_light.py``
loads this file by its path before milabench is importable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_RATES = Path(__file__).resolve().parents[2] / "config" / "upstream_rates.yaml"
#: A rate further than this from upstream's (relative) is a parity question.
PARITY_GAP = 0.05
#: Product names of another form factor than upstream's sizing files name (they give the
#: family only: H100, H200): another card, other clocks and power, never compared.
OTHER_FORM = re.compile(r"PCIe|NVL", re.IGNORECASE)


@dataclass
class UpstreamRates:
    """Upstream's rates on one GPU family (``gpu``), from ``source``: entry -> its
    ``median`` and ``n`` runs, ``per`` (gpu or node), ``batch_size``, ``excluded``."""

    gpu: str
    source: str
    entries: dict[str, dict] = field(default_factory=dict)


@dataclass
class Versus:
    """One entry against upstream: our rate per GPU, upstream's median over ``runs``,
    the relative ``gap`` (None when not computed) and the ``verdict``; the same for the
    peak GPU memory (MiB, ``memory_*``), whose verdict is None when either side has no
    figure."""

    name: str
    ours: float | None
    upstream: float | None
    runs: int
    gap: float | None
    verdict: str
    batch_size: int | None = None
    memory_ours: float | None = None
    memory_upstream: float | None = None
    memory_gap: float | None = None
    memory_verdict: str | None = None

    @property
    def gap_text(self) -> str:
        return _percent(self.gap)

    @property
    def memory_gap_text(self) -> str:
        return _percent(self.memory_gap)

    @property
    def question(self) -> bool:
        """A parity question: comparable, and further than `PARITY_GAP` from upstream
        in rate or in memory."""
        verdicts = (self.verdict, self.memory_verdict or "")
        return any(v.startswith("parity question") for v in verdicts)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "batch_size": self.batch_size, "ours": self.ours,
                "upstream": self.upstream, "runs": self.runs, "gap": self.gap,
                "verdict": self.verdict, "memory_mib": self.memory_ours,
                "upstream_memory_mib": self.memory_upstream, "memory_gap": self.memory_gap,
                "memory_verdict": self.memory_verdict}  # fmt: skip


def _percent(gap: float | None) -> str:
    return "-" if gap is None else f"{gap * 100:+.1f}%"


def gpu_family(names: list[str], families: list[str]) -> str | None:
    """The first of ``families`` (H100, H200, MI325, ...) that names one of the machine's
    GPUs as a whole word (MI325 matches MI325X); another form factor (PCIe, NVL) never."""
    for family in families:
        word = re.compile(rf"(?<![A-Za-z0-9]){re.escape(family)}X?(?![A-Za-z0-9])")
        if any(word.search(name) and not OTHER_FORM.search(name) for name in names):
            return family
    return None


def load(products: list[str], path: Path = DEFAULT_RATES) -> UpstreamRates | None:
    """Upstream's rates on the family of ``products`` (the machine's GPU names); None
    without PyYAML, the file, or a family of it among them."""
    try:
        import yaml

        data = yaml.safe_load(Path(path).read_text())
    except (ImportError, OSError, ValueError):
        return None
    source = (data or {}).get("source") or {}
    files = source.get("files") or {}
    family = gpu_family([p for p in products if p], list(files))
    if family is None:
        return None
    where = f"{source.get('repository')} {str(source.get('commit', ''))[:8]}, {files[family]}"
    out = UpstreamRates(family, where)
    for entry, info in (data.get("entries") or {}).items():
        for obs in info.get("observations") or []:
            if obs.get("gpu") != family:
                continue
            excluded = [r["excluded"] for r in obs.get("rates") or [] if r.get("excluded")]
            out.entries[entry] = {"median": obs.get("median"), "n": obs.get("n", 0),
                                  "memory": obs.get("memory_median"),
                                  "per": info.get("per", "gpu"), "excluded": excluded,
                                  "batch_size": info.get("batch_size")}  # fmt: skip
    return out


def versus(rates: UpstreamRates | None, name: str, ours: float | None,
           reason: str | None = None, batch_size: int | None = None,
           peak_mib: float | None = None, halfwidth: float | None = None) -> Versus | None:  # fmt: skip
    """``name``'s rate per GPU (``ours``) and peak GPU memory (``peak_mib``) against
    upstream's medians; None when upstream has no figure for it on this family.
    ``reason``: why this run's figures are not comparable (the report's), if they are
    not; ``batch_size``: the run's, when known; ``halfwidth``: our rate's 95% interval
    (relative): a parity question whose gap is inside it says so (measure longer)."""
    up = rates.entries.get(name) if rates else None
    if up is None:
        return None
    median, runs, batch = up["median"], int(up["n"] or 0), up["batch_size"]
    if up["per"] == "node":
        apart = "not compared: upstream's figure is for every GPU of its node"
    elif median is None:
        apart = f"not compared: upstream's runs are excluded ({up['excluded'][0]})"
    elif batch_size is not None and batch is not None and batch_size != batch:
        apart = f"not comparable: batch {batch_size}, upstream's figure is at {batch}"
    else:
        apart = f"not comparable: {reason}" if reason else None
    gap, verdict = _judge(ours, median, apart, ("faster", "slower"), "no rate measured")
    if verdict.startswith("parity question") and halfwidth and abs(gap) <= halfwidth:
        verdict += f" (inside our 95% interval, ±{halfwidth:.0%}: measure longer)"
    found = Versus(name, ours, median, runs, gap, verdict, batch)
    memory = up.get("memory")
    if memory and peak_mib is not None and peak_mib == peak_mib:
        found.memory_ours, found.memory_upstream = peak_mib, float(memory)
        found.memory_gap, found.memory_verdict = _judge(
            peak_mib, float(memory), apart, ("more memory", "less memory"), ""
        )
    return found


def _judge(ours: float | None, upstream: float | None, apart: str | None,
           words: tuple[str, str], missing: str) -> tuple[float | None, str]:  # fmt: skip
    """(gap, verdict) of ``ours`` against ``upstream``: ``apart`` (why they are not
    held together) when given, else within `PARITY_GAP` or a parity question."""
    if apart is not None and apart.startswith("not compared"):
        return None, apart
    if ours is None or ours != ours or not upstream:  # missing or NaN
        return None, apart or missing
    gap = ours / upstream - 1
    if apart is not None:
        return gap, apart
    if abs(gap) <= PARITY_GAP:
        return gap, f"within {PARITY_GAP:.0%}"
    return gap, f"parity question: {words[0] if gap > 0 else words[1]} by {abs(gap):.0%}"


def heading(rates: UpstreamRates) -> str:
    """The one line that says what the figures are held against."""
    return (
        f"Against upstream's {rates.gpu} ({rates.source}): the same entry at the same batch "
        f"size, our rate and peak memory per GPU against the medians of upstream's runs; "
        f"a gap over {PARITY_GAP:.0%} is a parity question."
    )
