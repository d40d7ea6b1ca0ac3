"""The one success rule on real run files, and the verdict that `milabench report` exits with.

(a) every combination of the rule's inputs, written as real `.data` files with the event
codec and read back by the report, checked against the rule as docs/measurement.md
states it (an oracle written here from the prose, not from `outcome.py`), plus a table of
named cases with the exact words the report prints;
(b) `milabench report --runs DIR` in a subprocess on synthetic run folders: the verdict it
prints and its exit code agree in every case, all-skipped and empty folders included.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from milabench.report import build_report
from milabench.report.aggregate import failure_detail, file_status
from milabench.report.runs import read_file

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

SKIP_EVENT = {
    "event": "message",
    "data": {"message": "skipped: len(nodes) >= 2", "skipped": "capability"},
}
ERROR_EVENT = {"event": "error", "data": {"type": "RuntimeError", "message": "boom"}}
REQUIRED = 3


def write_case(
    d: Path,
    tag: str,
    *,
    skipped: bool = False,
    early_stop: bool = False,
    rc: int | str | None = 0,
    observations: int = 5,
    loss: float | None = None,
    error: bool = False,
    required: int = 1,
) -> Path:
    """One process's file with exactly these facts."""
    config = entry(tag.split(".")[0], measure={"required_observations": required})
    extra = ([ERROR_EVENT] if error else []) + ([SKIP_EVENT] if skipped else [])
    losses = [2.0] * max(0, observations - 1) + ([loss] if loss is not None else [])
    rates = [10.0 + i for i in range(observations)]
    if loss is not None and not rates:  # a loss without any rate
        extra = [{"event": "data", "pipe": "data", "data": {"task": "train", "loss": loss}}] + extra
    return write_file(
        d,
        tag,
        config,
        rates=rates,
        losses=losses if rates else [],
        rc="SKIPPED" if skipped else rc,
        stop=early_stop,
        extra=extra,
    )


def oracle(*, skipped, early_stop, rc, observations, loss, error, rates_elsewhere, required) -> str:
    """docs/measurement.md section 4, read literally."""
    if skipped:
        return "skipped"
    diverged = loss is not None and not math.isfinite(loss)
    if diverged or error:  # an early stop does not excuse a NaN loss
        return "failed"
    if not early_stop:  # ended by itself: code 0, else it says how it ended
        if rc == "TIMEOUT":
            return "timed out"
        if rc == "INTERRUPTED":
            return "interrupted"
        if rc is None:
            return "incomplete"
        if rc != 0:
            return "failed"
    measured = observations >= required or (rates_elsewhere and observations == 0)
    return "success" if measured else "failed"


COMBOS = list(
    itertools.product(
        [False, True],  # skipped
        [False, True],  # early stop
        [0, 1, "TIMEOUT", "INTERRUPTED", None],  # return code (None: no end event)
        [0, REQUIRED - 1, REQUIRED + 2],  # observations (zero, fewer than required, enough)
        [None, 1.5, math.nan, math.inf],  # last loss
        [False, True],  # error event
        [False, True],  # rates reported by another rank of the launch
    )
)


def test_every_combination_of_the_rule(tmp_path: Path):
    d = tmp_path / "runs" / "combos"
    for i, (skipped, stop, rc, obs, loss, error, elsewhere) in enumerate(COMBOS):
        # a node part in the tag makes the file a rank of a multi-node launch
        tag = f"c{i}.0.node2" if elsewhere else f"c{i}.D0"
        path = write_case(
            d,
            tag,
            skipped=skipped,
            early_stop=stop,
            rc=rc,
            observations=obs,
            loss=loss,
            error=error,
            required=REQUIRED,
        )
        fr = read_file(path)
        facts = dict(skipped=skipped, early_stop=stop, rc=rc, observations=obs, loss=loss,
                     error=error, rates_elsewhere=elsewhere, required=REQUIRED)  # fmt: skip
        expected = oracle(**facts)
        got = file_status(fr, group_has_rates=elsewhere)
        assert got == expected, facts
        detail = failure_detail(fr, got, group_has_rates=elsewhere)
        assert (detail == "") == (got == "success"), facts
        if got == "failed" and loss is not None and not math.isfinite(loss):
            assert detail.startswith("NaN loss"), facts


# name: (file facts, status, detail, benchmark reason)
NAMED = {
    "clean": (dict(), "success", "", None),
    "skipped": (dict(skipped=True), "skipped", "skipped", "skipped: capability (len(nodes) >= 2)"),
    "early-stop": (dict(early_stop=True, rc=-15), "success", "", None),
    "nan-loss": (dict(loss=math.nan), "failed", "NaN loss", "failed (NaN loss)"),
    "inf-loss": (dict(loss=math.inf), "failed", "NaN loss", "failed (NaN loss)"),
    "nan-then-early-stop": (
        dict(loss=math.nan, early_stop=True, rc=-15),
        "failed",
        "NaN loss (then stopped early)",
        "failed (NaN loss (then stopped early))",
    ),
    "error-event": (dict(error=True), "failed", "error event", "failed (error event)"),
    "timeout": (dict(rc="TIMEOUT"), "timed out", "timed out", "timed out"),
    "interrupted": (dict(rc="INTERRUPTED"), "interrupted", "interrupted", "interrupted"),
    "no-end": (dict(rc=None), "incomplete", "incomplete (no end event)", "incomplete"),
    "exit-code": (dict(rc=3), "failed", "exit code 3", "failed (exit code 3)"),
    "zero-observations": (
        dict(observations=0),
        "failed",
        "no throughput sample",
        "failed (no throughput sample)",
    ),
    "early-stop-nothing-measured": (
        dict(observations=0, early_stop=True, rc=-15),
        "failed",
        "no throughput sample",
        "failed (no throughput sample)",
    ),
    "fewer-than-required": (
        dict(observations=2, required=5),
        "failed",
        "2 observation(s), fewer than the 5 required",
        "failed (2 observation(s), fewer than the 5 required)",
    ),
}


@pytest.mark.parametrize("case", sorted(NAMED))
def test_named_cases(tmp_path: Path, case: str):
    facts, status, detail, reason = NAMED[case]
    d = tmp_path / "runs" / case
    path = write_case(d, f"{case}.D0", **facts)
    fr = read_file(path)
    assert file_status(fr) == status
    assert failure_detail(fr, status) == detail
    rep = build_report([d])
    assert rep.bench(case).reason == reason
    if status == "success":
        assert rep.verdict == "PASS" and rep.exit_code == 0
    else:
        assert rep.verdict == "FAIL" and rep.exit_code == 1
        assert rep.verdict_reasons


def test_rates_elsewhere_in_a_multinode_launch(tmp_path: Path):
    d = tmp_path / "runs" / "mn"
    e = entry("mn", plan={"method": "njobs", "n": 1}, num_machines=2)
    write_file(d, "mn.0.main", e, rates=[50, 52, 51])
    write_file(d, "mn.0.node2", e, rates=[])  # other rank: no rates, exit 0: a success
    write_file(d, "mn.1.main", e, rates=[])  # no node part: must have measured itself
    rep = build_report([d])
    mn = rep.bench("mn")
    assert mn.statuses == {"mn.0.main": "success", "mn.0.node2": "success", "mn.1.main": "failed"}
    assert mn.reason is None and mn.fail == 1


# ---------------------------------------------------------------------------- (b)


def _cli_report(run_dir: Path, fmt: str = "text") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "milabench", "report", "--runs", str(run_dir), "--format", fmt],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _folder(tmp_path: Path, case: str) -> Path:
    d = tmp_path / "runs" / case
    d.mkdir(parents=True)
    ok = dict(rates=[10.0] * 12)
    if case == "pass":
        write_file(d, "a.D0", entry("a"), **ok)
        write_file(d, "b.0", entry("b", plan={"method": "njobs", "n": 1}), **ok)
    elif case == "one-failure":
        write_file(d, "a.D0", entry("a"), **ok)
        write_file(d, "b.D0", entry("b"), rates=[1.0], rc=1)
    elif case == "nan-early-stop":
        write_file(d, "a.D0", entry("a"), **ok)
        write_file(d, "n.D0", entry("n"), rates=[5.0] * 4, losses=[1, math.nan], rc=-15, stop=True)
    elif case == "all-skipped":
        for name in ("x", "y"):
            write_file(d, name, entry(name), rc="SKIPPED", extra=[SKIP_EVENT])
    elif case == "layer-only":  # every process succeeded; the version layer fails
        write_file(d, "a.D0", entry("a"), meta=None, **ok)
    elif case == "skips-and-success":  # a skip is neither success nor failure
        write_file(d, "a.D0", entry("a"), **ok)
        write_file(d, "x", entry("x"), rc="SKIPPED", extra=[SKIP_EVENT])
    elif case == "warnings-only":  # too few observations and a wide interval: still PASS
        write_file(d, "a.D0", entry("a"), rates=[1.0, 9.0, 2.0])
    # "empty": no .data file at all
    return d


CASES = {
    "pass": ("PASS", None),
    "one-failure": ("FAIL", "failure rate 50"),
    "nan-early-stop": ("FAIL", "failure rate 50"),
    "all-skipped": ("FAIL", "nothing was measured: every selected benchmark was skipped"),
    "empty": ("FAIL", "nothing was measured: no benchmark ran (no .data file"),
    "layer-only": ("FAIL", "validation layer 'version' failed"),
    "skips-and-success": ("PASS", None),
    "warnings-only": ("PASS", None),
}
VERDICT = re.compile(r"^Verdict: +(PASS|FAIL) \(exit code (\d+)\)$", re.M)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_verdict_agrees_with_exit_code(tmp_path: Path, case: str):
    d = _folder(tmp_path, case)
    verdict, reason = CASES[case]
    proc = _cli_report(d)
    m = VERDICT.search(proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert m.group(1) == verdict
    assert int(m.group(2)) == proc.returncode == (0 if verdict == "PASS" else 1)
    assert f"({verdict})" in proc.stdout  # the failure-rate line carries the same verdict
    if reason:
        after = proc.stdout[m.end() :]
        assert reason in after.split("\n\n")[0], proc.stdout  # listed under the verdict
    assert "Traceback" not in proc.stderr
    data = json.loads(_cli_report(d, "json").stdout)
    assert (data["verdict"], data["exit_code"]) == (verdict, proc.returncode)
    assert bool(data["verdict_reasons"]) == (verdict == "FAIL")
    if case == "all-skipped":
        assert "len(nodes) >= 2" in " ".join(data["verdict_reasons"])
