"""Upstream's real inputs missing, tested on the session's shared smoke run (the smoke
suite's ``HF_HUB_OFFLINE=1``, nothing prepared): one ``milabench: input NAME for ENTRY
unavailable`` line per missing input, runs that pass on their stand-ins, and a report
that names each entry not comparable with the stand-in and the missing inputs; and, for
an LLM entry and the graph entries, what their own prepare and main said. The case with
every input prepared is test_real_inputs_e2e.py, whose helpers this file uses.
"""

from __future__ import annotations

import json

from .smokerun import SmokeRun
from .test_real_inputs_e2e import (
    ENTRIES,
    STAND_IN,
    UNAVAILABLE,
    inputs_records,
    milabench,
    suite,
)


def test_offline_and_unprepared_each_input_is_one_line_and_not_comparable(smoke, tmp_path):
    """The shared smoke run (tests/benchmarks/smokerun.py: the smoke suite's
    ``HF_HUB_OFFLINE=1``, nothing prepared) is this case for every entry that reads
    upstream's inputs, hub and URL ones: its prepare named each missing input in one line,
    in the prepare steps' stderr files; the runs passed on the stand-ins; and its report,
    read with ``parity: same``, gives each entry as not comparable: the stand-in that ran
    and the inputs not prepared."""
    entries = ENTRIES
    (logs,) = (smoke.base / "runs").glob("prepare.*")
    for entry, names in entries.items():
        lines = (logs / f"{entry}.stderr").read_text().splitlines()
        found = [UNAVAILABLE.fullmatch(line) for line in lines]
        assert all(found) and [m[1] for m in found] == list(names), lines
        assert all(m[3].startswith("offline (HF_HUB_OFFLINE=1)") for m in found), lines
    assert not any((smoke.base / "data" / "inputs").rglob("milabench-input.json"))

    for entry, names in entries.items():
        row = smoke.rows()[entry]
        assert row["fail"] == 0 and row["n"] >= 1, row
        (record,) = inputs_records(smoke.folder, entry)
        assert record["comparable"] is False and sorted(record["missing"]) == sorted(names)
        assert STAND_IN[entry] in record["stand_in"], record
    config = suite(tmp_path / "offline.yaml", {"parity": "same"})
    done = milabench("report", "--runs", str(smoke.folder), "--format", "json",
                     config=config, base=smoke.base, timeout=300, select=entries)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    upstream = json.loads(done.stdout)["upstream"]
    reasons = {o["name"]: o["reason"] for o in upstream["not_comparable"]}
    assert not set(entries) & set(upstream["comparable"]), upstream
    for entry, names in entries.items():
        reason = reasons[entry]
        assert reason.startswith("ran ") and STAND_IN[entry] in reason, reason
        assert reason.endswith(" not prepared)") and all(n in reason for n in names), reason


def test_llm_without_the_inputs_runs_the_stand_in(smoke: SmokeRun):
    """Without the input folders (the session's smoke run, smokerun.py: offline, nothing
    prepared; entry llm-lora-single at batch 2x64): random weights on random tokens, and
    an ``inputs`` record that says not comparable, names what is missing (the entry's
    weights too, in the order the entry reads them) and what ran instead."""
    smoke.check_measured("llm-lora-single", "Tok/s")
    (record,) = [r["inputs"] for r in smoke.data("llm-lora-single", "inputs")]
    assert record["entry"] == "llm-lora-single" and record["comparable"] is False
    assert record["missing"] == ["alpaca-cleaned", "llama3.1-8b-tokenizer", "llama3.1-8b"]
    assert record["stand_in"] == "random weights, 64-token random sequences"
    out = smoke.stdout_of("llm-lora-single")
    assert "weights of" not in out
    assert "batch 2x64" in out and "not comparable with upstream" in out


def test_dimenet_without_the_input_runs_the_stand_in_not_comparable(smoke: SmokeRun):
    """No PCQM4Mv2 input (offline), read from the session's smoke run (smokerun.py:
    ``HF_HUB_OFFLINE=1``, nothing prepared): each of pna and dimenet says the input is
    unavailable; the first prepared generates the stand-in's molecules, the other finds
    them (they share them); dimenet trains on them and announces it not comparable."""
    (logs,) = (smoke.base / "runs").glob("prepare.*")
    said = {}
    for entry in ("pna", "dimenet"):
        stderr = (logs / f"{entry}.stderr").read_text()
        assert f"milabench: input pcqm4mv2 for {entry} unavailable" in stderr, stderr
        said[entry] = (logs / f"{entry}.stdout").read_text()
        assert "STAND-IN" in said[entry] and "not comparable" in said[entry], said[entry]
    samples = smoke.option("dimenet", "--num-samples")
    assert smoke.option("pna", "--num-samples") == samples
    made = [e for e, out in said.items() if f"generated {samples} molecules" in out]
    kept = [e for e, out in said.items() if f"already prepared: {samples} molecules" in out]
    assert len(made) == 1 and len(kept) == 1, said
    assert (smoke.base / "data" / "geo_gnn" / f"molecules-{samples}.done").is_file()
    assert not (smoke.base / "data" / "geo_gnn" / f"pcqm4mv2-{samples}").exists()
    out = smoke.stdout_of("dimenet")
    assert "STAND-IN molecules" in out and "not comparable" in out
    (record,) = [r["inputs"] for r in smoke.data("dimenet", "inputs")]
    assert record["comparable"] is False and record["missing"] == ["pcqm4mv2"]
    assert "molecules.py" in record["stand_in"] and record["real"] == {}
