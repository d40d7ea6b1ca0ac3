"""Which entries a first light runs, in which order, and why the others are left out.

By default: the bf16 matmul (the device's measured peak, against which every other
entry's MFU is also given) and every weighted entry of the suite that runs on this
machine, in order of value: the score weighs them alike, so the cheapest come first and
a call cut short still brings back the most scored entries. An entry is left out, with
its reason printed, when the machine skips it (`requires_capabilities`), when its inputs
cannot be made or carried within one call (`LEFT_OUT_BY_DEFAULT`), or when the wheelhouse
could not carry what it needs (its ``manifest.json``).

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The measured peak: bf16 matrix products, a few seconds.
PEAK_ENTRY = "bf16"

#: The order of value of the default selection (cheapest first after the peak, from the
#: entries' start-up and step costs on one H100/H200-class GPU). A weighted entry missing
#: here comes after these, in suite order.
DEFAULT_ORDER = [
    "bf16",
    "resnet50",
    "bert-tf32-fp16",
    "reformer",
    "convnext_large-tf32-fp16",
    "pna",
    "regnet_y_128gf",
    "ppo",
    "vjepa-single",
    "brax",
]

#: Weighted entries a default first light leaves out, and why (an explicit ``--select``
#: still runs them).
LEFT_OUT_BY_DEFAULT = {
    "vjepa-single": (
        "its prepare writes about 24 GB of video, decoded with decord (26 MiB of wheels): "
        "neither fits one 10-minute call nor the wheelhouse"
    ),
    "brax": (
        "its start-up alone is budgeted at up to 10 minutes (brax's trainer compiles for "
        "minutes: measure.startup 600 s), more than one call"
    ),
}


@dataclass
class Choice:
    """The entries to run, in order, and those left out with their reasons."""

    run: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


def _rank(name: str, suite_order: dict[str, int]) -> tuple[int, int]:
    if name in DEFAULT_ORDER:
        return (0, DEFAULT_ORDER.index(name))
    return (1, suite_order.get(name, 0))


def choose(
    rows: list[dict],
    *,
    explicit: bool,
    not_carried: dict[str, str] | None = None,
) -> Choice:
    """The first light's entries from ``milabench list --format json`` rows.

    ``explicit``: the rows were narrowed by the user's ``--select``/``--exclude``; every
    selected entry is a candidate, in suite order. Otherwise the candidates are
    `PEAK_ENTRY` and the weighted entries, in `DEFAULT_ORDER`, less
    `LEFT_OUT_BY_DEFAULT`. Either way an entry the machine skips, or whose packages the
    wheelhouse left out (``not_carried``: entry -> reason), is left out with its reason.
    """
    not_carried = not_carried or {}
    suite_order = {row["name"]: i for i, row in enumerate(rows)}
    choice = Choice()
    candidates = []
    for row in rows:
        if not row.get("selected", True) or not row.get("enabled", True):
            continue
        name = row["name"]
        weighted = float(row.get("weight") or 0) > 0
        if not explicit and not (weighted or name == PEAK_ENTRY):
            continue
        candidates.append(row)
    if not explicit:
        candidates.sort(key=lambda row: _rank(row["name"], suite_order))
    for row in candidates:
        name = row["name"]
        if row.get("skip"):
            choice.left_out[name] = f"skipped on this machine: {row['skip']}"
        elif not explicit and name in LEFT_OUT_BY_DEFAULT:
            choice.left_out[name] = LEFT_OUT_BY_DEFAULT[name]
        elif name in not_carried:
            choice.left_out[name] = f"not in the wheelhouse: {not_carried[name]}"
        else:
            choice.run.append(name)
    return choice
