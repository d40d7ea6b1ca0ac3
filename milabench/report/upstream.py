"""What a run's score can be compared with: upstream milabench's weighted entries.

`comparability(benchmarks)` says, for each of the 25 entries upstream milabench v1.3.2
weights, whether this run measured it with upstream's work and inputs: measured, its
suite entry says ``parity: same`` (docs/parity.md), and its benchmark did not announce a
synthetic stand-in for a missing input (the ``inputs`` record, docs/inputs.md). Every
other weighted entry is listed with the reason. None when the run holds none of them (a
CPU suite has nothing to compare with upstream). `rate_comparison(benchmarks, product)`
holds each measured entry's rate against upstream's on the same GPU family
(`milabench.report.upstream_rates`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from milabench.report.upstream_rates import UpstreamRates, Versus, heading, load, versus
from milabench.rundata.numbers import fmt_sig

UPSTREAM_VERSION = "v1.3.2"

# The entries upstream's config/standard.yaml weights (weight > 0, enabled), at v1.3.2.
UPSTREAM_WEIGHTED = frozenset(
    {
        "resnet50", "convnext_large-tf32-fp16", "regnet_y_128gf", "bert-tf32-fp16",
        "reformer", "brax", "diffusion-gpus", "diffusion-nodes", "lightning-gpus",
        "dinov2-giant-gpus", "llm-lora-single", "llm-lora-ddp-gpus", "llm-lora-ddp-nodes",
        "llm-lora-mp-gpus", "llm-full-mp-gpus", "llm-full-mp-nodes", "ppo", "dimenet", "pna",
        "recursiongfn", "llava-single", "rlhf-single", "vjepa-single", "vjepa-gpus", "llama",
    }
)  # fmt: skip


@dataclass
class Comparability:
    """Upstream's weighted entries split into comparable ones and the others (with why)."""

    comparable: list[str] = field(default_factory=list)
    others: list[tuple[str, str]] = field(default_factory=list)  # (entry, reason)
    one_gpu: list[str] = field(default_factory=list)  # `-gpus` entries that ran on 1 GPU

    @property
    def total(self) -> int:
        return len(self.comparable) + len(self.others)

    def headline(self) -> str:
        """``14 of 25 comparable with upstream milabench v1.3.2``."""
        return (
            f"{len(self.comparable)} of {self.total} comparable with upstream milabench "
            f"{UPSTREAM_VERSION}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": UPSTREAM_VERSION,
            "weighted": self.total,
            "comparable": sorted(self.comparable),
            "not_comparable": [{"name": n, "reason": r} for n, r in self.others],
            "ran_on_one_gpu": sorted(self.one_gpu),
        }


def stand_in_reason(inputs: dict[str, Any] | None) -> str | None:
    """Why an entry that announced its inputs is not comparable (None when it is, or
    when it announced nothing)."""
    if not inputs or not inputs.get("missing"):
        return None
    missing = ", ".join(str(m) for m in inputs["missing"])
    return f"ran {inputs.get('stand_in') or 'a synthetic stand-in'} ({missing} not prepared)"


def entry_reason(br: Any) -> str | None:
    """Why the benchmark result `br` is not comparable with upstream's entry; None if it
    is. Reads `parity`, `inputs`, `summary`, `reason` of a `BenchResult`."""
    if br.summary is None:
        return br.reason or "not measured"
    parity = (br.parity or "").strip()
    if parity.lower().startswith("different"):
        return parity.partition(":")[2].strip() or "different work"
    if not parity.lower().startswith("same"):
        return "its entry does not say it does upstream's work (no `parity: same`)"
    return stand_in_reason(br.inputs)


def comparability(benchmarks: Iterable[Any]) -> Comparability | None:
    """Split upstream's weighted entries by this run's `BenchResult`s; None when the run
    holds none of them."""
    by_name = {br.name: br for br in benchmarks}
    if not UPSTREAM_WEIGHTED & set(by_name):
        return None
    out = Comparability()
    for name in sorted(UPSTREAM_WEIGHTED):
        br = by_name.get(name)
        reason = "not in this run" if br is None else entry_reason(br)
        if reason is None:
            out.comparable.append(name)
        else:
            out.others.append((name, reason))
        if br is not None and br.summary is not None and name.endswith("-gpus") and br.ngpu == 1:
            out.one_gpu.append(name)
    return out


def comparability_lines(comp: Comparability | None) -> list[str]:
    """The headline, then ``entry: reason`` for each other entry, then the entries that
    ran on one GPU; [] for None."""
    if comp is None:
        return []
    lines = [comp.headline()]
    lines += [f"{name}: {reason}" for name, reason in comp.others]
    if comp.one_gpu:
        lines.append(
            "ran on 1 GPU (as upstream runs them on a 1-GPU node): " + ", ".join(comp.one_gpu)
        )
    return lines


@dataclass
class RateComparison:
    """The run's rates against upstream's on one GPU family (`rates`), one `Versus` each."""

    rates: UpstreamRates
    rows: list[Versus]

    def lines(self, units: dict[str, str | None]) -> list[str]:
        """The heading, then ``entry: ours vs upstream unit (gap): verdict`` and, where
        both sides have it, ``; memory ours vs upstream MiB (gap): verdict``."""
        out = [heading(self.rates)]
        for v in self.rows:
            unit = units.get(v.name) or ""
            gap = f" ({v.gap_text})" if v.gap is not None else ""
            line = f"{v.name}: {fmt_sig(v.ours)} vs {fmt_sig(v.upstream)} {unit}{gap}: {v.verdict}"
            if v.memory_verdict is not None and v.memory_gap is not None:
                line += (f"; memory {fmt_sig(v.memory_ours)} vs {fmt_sig(v.memory_upstream)} "
                         f"MiB ({v.memory_gap_text}): {v.memory_verdict}")  # fmt: skip
            out.append(line.replace("  ", " "))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.rates.gpu, "source": self.rates.source,
                "entries": [v.as_dict() for v in self.rows]}  # fmt: skip


def rate_comparison(benchmarks: Iterable[Any], product: str | None) -> RateComparison | None:
    """Each measured benchmark (`BenchResult`) against upstream's figure on the family of
    ``product`` (the run's GPU); None when there is no such figure."""
    rates = load([product] if product else [])
    if rates is None:
        return None
    rows = []
    for br in benchmarks:
        if br.summary is None:
            continue
        found = versus(rates, br.name, br.perf, entry_reason(br), br.batch_size,
                       br.peak_memory, br.halfwidth)  # fmt: skip
        if found is not None:
            rows.append(found)
    return RateComparison(rates, rows) if rows else None
