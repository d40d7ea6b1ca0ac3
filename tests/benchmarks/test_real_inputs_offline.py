"""Upstream's real inputs missing, tested on the session's shared smoke run (the smoke
suite's ``HF_HUB_OFFLINE=1``, nothing prepared): one ``milabench: input NAME for ENTRY
unavailable`` line per missing input, runs that pass on their stand-ins, and a report
that names each entry not comparable with the stand-in and the missing inputs. The case
with every input prepared is test_real_inputs_e2e.py, whose helpers this file uses.
"""

from __future__ import annotations

import json

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
