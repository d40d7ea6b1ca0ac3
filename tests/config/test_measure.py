"""The `measure` block: read as the benchmark reads it, errors that name the key, the
process timeout derived from the time budget (docs/measurement.md)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from cfgtest_util import REPO, SUITES, run_cli, write

from benchkit.options import MEASURE_KEYS, MeasureSettings, parse_measure
from milabench.config import load_suite
from milabench.plan.tree import entry_timeout

BENCH = SUITES / "benches" / "alpha"


def suite(tmp_path, body: str):
    return write(
        tmp_path / "suite.yaml",
        f"bench:\n  definition: {BENCH}\n" + body,
    )


def test_base_yaml_writes_out_the_defaults_benchkit_uses():
    """One set of defaults: what a script run by hand uses is what the suites show."""
    block = yaml.safe_load((REPO / "config" / "base.yaml").read_text())["_defaults"]["measure"]
    assert parse_measure(block) == MeasureSettings()
    assert set(block) == set(MEASURE_KEYS)
    assert {f.name for f in dataclasses.fields(MeasureSettings)} == set(MEASURE_KEYS) | {
        "stop",
        "skip",
    }


@pytest.mark.parametrize("name", ["cpu.yaml", "standard.yaml"])
def test_no_shipped_suite_counts_steps_or_caps_the_window(name):
    s = load_suite(REPO / "config" / name)
    for entry_name, entry in s.all_entries.items():
        options = entry.voir_options
        assert "stop" not in options and "skip" not in options, entry_name
        assert entry.max_duration is None, entry_name
        m = parse_measure(dict(entry.measure or {}))
        assert entry_timeout(entry) == m.timeout == m.startup + m.warmup_max + m.max


def test_timeout_derives_from_the_budget_and_max_duration_replaces_it(tmp_path):
    path = suite(tmp_path, "  measure: {max: 1m, warmup_max: 5s, startup: 30s}\n")
    entry = load_suite(path).entries["bench"]
    assert entry_timeout(entry) == 30 + 5 + 60
    entry = load_suite(path, overrides=["bench.max_duration=500"]).entries["bench"]
    assert entry_timeout(entry) == 500
    # no time bound at all (count-only window): the runner's default
    entry = load_suite(path, overrides=["bench.measure.max=0", "bench.measure.min=0"]).entries[
        "bench"
    ]
    assert entry_timeout(entry) == 600


def test_override_changes_the_window(tmp_path):
    path = suite(tmp_path, "")
    entry = load_suite(path, overrides=["bench.measure.precision=0.05"]).entries["bench"].raw
    assert parse_measure(entry["measure"]).precision == 0.05


@pytest.mark.parametrize(
    "body,expected",
    [
        (
            "  measure: {precison: 0.01}\n",
            "suite.yaml: bench.measure.precison: unknown setting (did you mean 'precision'?)",
        ),
        ("  measure: {max: forever}\n", "suite.yaml: bench.measure.max: not a duration"),
        ("  measure: {min: 40s}\n", "suite.yaml: bench.measure.min: measure.min (40 s) is longer"),
        ("  measure: fast\n", "suite.yaml: bench.measure: expected a mapping, not str"),
    ],
)
def test_bad_measure_is_one_line_naming_file_entry_and_key(tmp_path, body, expected):
    path = suite(tmp_path, body)
    proc = run_cli("resolve", "--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert expected in lines[0], lines[0]


def test_short_max_duration_is_one_warning_for_the_suite(tmp_path):
    path = write(
        tmp_path / "suite.yaml",
        "_defaults: {max_duration: 60}\n"
        + "".join(f"b{i}:\n  definition: {BENCH}\n" for i in range(6)),
    )
    proc = run_cli("resolve", "--config", str(path))
    assert proc.returncode == 0
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "milabench: warning: b0, b1, b2, b3 and 2 more: max_duration 60 s < measurement "
        "budget 160 s (120 s start-up + 10 s warm-up + 30 s window); a slow machine may be "
        "stopped before its window ends (remove max_duration to derive the timeout from "
        "the budget)"
    ]
