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
    "lightning-gpus",
    "dimenet",
    "recursiongfn",
    "rlhf-single",
    "diffusion-gpus",
    "llava-single",
    "dinov2-giant-gpus",
    "llama",
    "llm-lora-single",
    "llm-lora-ddp-gpus",
    "vjepa-single",
    "vjepa-gpus",
    "brax",
]

#: Weighted entries a default first light leaves out, and why (an explicit ``--select``
#: still runs them).
LEFT_OUT_BY_DEFAULT = {
    "vjepa-single": (
        "its prepare writes about 24 GB of video, more than one 10-minute call can make "
        "(its decoder, decord, 26 MiB of wheels, stays out of the default wheelhouse too)"
    ),
    "vjepa-gpus": (
        "its prepare writes about 24 GB of video, more than one 10-minute call can make "
        "(its decoder, decord, 26 MiB of wheels, stays out of the default wheelhouse too)"
    ),
    "brax": (
        "its start-up alone is budgeted at up to 10 minutes (brax's trainer compiles for "
        "minutes: measure.startup 600 s), more than one call"
    ),
}


#: Seconds each entry of ``config/first-light.yaml`` took on one H200 on 2026-11-30, its
#: prepare and run together with milabench's own start-ups (the call's state,
#: ``seconds``; docs/benchmarks.md, "First light on an H200"). llama: its first attempt
#: was stopped at 45 s of run, warm-up 21 s, its second took 37 s: 55 s. dimenet's
#: 55.9 s held 23 s of generating 100,000 molecules, 20,000 since (a safe side to err on). Used for H100- and H200-class GPUs
#: (`EXPECTED_FOR`), where an entry is started only when `MARGIN` times its figure is
#: left, so that a call near its end runs a cheaper entry rather than cut one off.
MEASURED_SECONDS = {
    "bf16": 11.8,
    "resnet50": 25.5,
    "bert-tf32-fp16": 20.2,
    "reformer": 17.2,
    "convnext_large-tf32-fp16": 30.9,
    "pna": 37.0,
    "regnet_y_128gf": 29.9,
    "ppo": 30.6,
    "lightning-gpus": 33.8,
    "dimenet": 55.9,
    "rlhf-single": 33.7,
    "llava-single": 23.9,
    "dinov2-giant-gpus": 35.6,
    "llama": 55.0,
    "llm-lora-single": 27.9,
    "llm-lora-ddp-gpus": 32.9,
}
#: The suite file and the GPU names (words of the product name) the figures hold for.
EXPECTED_FOR = ("first-light.yaml", ("H100", "H200"))
#: How much more than its measured figure an entry may need (a first start pays for
#: cold caches: llama's first run on the H200 took 45 s and more, its second 37 s).
MARGIN = 1.25


def expected_seconds(name: str, suite: str, gpus: list[str]) -> float | None:
    """Seconds ``name`` should take (`MEASURED_SECONDS` times `MARGIN`) when ``suite``
    (the config's file name) and the machine's GPU names (``gpus``) are those the
    figures were measured for (`EXPECTED_FOR`); None otherwise, or when not measured."""
    suite_name, families = EXPECTED_FOR
    words = {w for g in gpus for w in g.replace("-", " ").split()}
    if suite != suite_name or not gpus or not words & set(families):
        return None
    seconds = MEASURED_SECONDS.get(name)
    return None if seconds is None else seconds * MARGIN


def wait_reason(name: str, left: float, cap: float, suite: str, gpus: list[str]) -> str | None:
    """Why ``name`` should not start now, with ``left`` seconds before it would be cut
    (at most ``cap``, what the entry cap gives): its expected seconds
    (`expected_seconds`) exceed what is left, which is short of the cap (an entry the
    cap itself cuts is run all the same: the cap is the caller's word). None when it
    may start."""
    need = expected_seconds(name, suite, gpus)
    if need is None or need <= left or left >= cap:
        return None
    return f"waits for the next call: expected {need:.0f} s, {left:.0f} s left"


@dataclass
class Choice:
    """The entries to run, in order, and those left out with their reasons."""

    run: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


def _rank(name: str, suite_order: dict[str, int]) -> tuple[int, int]:
    if name in DEFAULT_ORDER:
        return (0, DEFAULT_ORDER.index(name))
    return (1, suite_order.get(name, 0))


class UnknownEntry(ValueError):
    """A name given to ``--select``/``--exclude`` that is no entry of the suite."""


def _check_names(names: list[str], known: list[str], option: str) -> None:
    import difflib

    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UnknownEntry(f"{option} {name}: no entry of that name{hint}")


def choose(
    rows: list[dict],
    *,
    select: list[str] | None = None,
    exclude: list[str] | None = None,
    not_carried: dict[str, str] | None = None,
) -> Choice:
    """The first light's entries from ``milabench list --format json`` rows.

    ``select``: entry names (exact: ``lightning`` is not ``lightning-gpus``), run in suite
    order. Without it the candidates are `PEAK_ENTRY` and the weighted entries, in
    `DEFAULT_ORDER`, less `LEFT_OUT_BY_DEFAULT`. ``exclude``: entry names taken out.
    Either way an entry the machine skips, or whose packages the wheelhouse left out
    (``not_carried``: entry -> reason), is left out with its reason. A name that is no
    entry raises `UnknownEntry`.
    """
    not_carried = not_carried or {}
    exclude = exclude or []
    known = [row["name"] for row in rows]
    _check_names(select or [], known, "--select")
    _check_names(exclude, known, "--exclude")
    suite_order = {name: i for i, name in enumerate(known)}
    choice = Choice()
    candidates = []
    for row in rows:
        name = row["name"]
        if not row.get("enabled", True) or name in exclude:
            continue
        if select is not None:
            if name in select:
                candidates.append(row)
        elif float(row.get("weight") or 0) > 0 or name == PEAK_ENTRY:
            candidates.append(row)
    if select is None:
        candidates.sort(key=lambda row: _rank(row["name"], suite_order))
    for row in candidates:
        name = row["name"]
        if row.get("skip"):
            choice.left_out[name] = f"skipped on this machine: {row['skip']}"
        elif select is None and name in LEFT_OUT_BY_DEFAULT:
            choice.left_out[name] = LEFT_OUT_BY_DEFAULT[name]
        elif name in not_carried:
            choice.left_out[name] = f"not in the wheelhouse: {not_carried[name]}"
        else:
            choice.run.append(name)
    return choice


def _keys(row: dict) -> set[str]:
    """What ``milabench --select`` matches an entry by (its folder aside)."""
    return {row["name"], str(row.get("group")), str(row.get("install_group")),
            *map(str, row.get("tags") or [])}  # fmt: skip


def only(name: str, rows: list[dict]) -> list[str]:
    """milabench's selection options for the entry ``name`` alone: ``--select`` matches
    groups and tags too (``--select lightning`` would also run ``lightning-gpus``), so
    the other entries it would match are excluded by name."""
    ours = next((row for row in rows if row["name"] == name), None)
    mine = _keys(ours) if ours is not None else {name}
    others = [row["name"] for row in rows
              if row["name"] != name and name in _keys(row) and row["name"] not in mine]  # fmt: skip
    return ["--select", name] + (["--exclude", ",".join(others)] if others else [])
