"""Bad numeric settings (plan.nproc, plan.n, multinode.port, ssh.connect_timeout, ...)
are one line at load time naming the file, entry and key; never a bare ValueError."""

from __future__ import annotations

import pytest
from cfgtest_util import run_cli, write

from milabench.config.entry import Entry
from milabench.config.options import checked_number
from milabench.config.system import load_system
from milabench.errors import ConfigError
from milabench.plan.tree import NJobs, default_nproc, plan_count

SUITE = """
convnet:
  weight: 1
  plan: {{method: {method}, {key}: {value}}}
  argv: []
"""


@pytest.mark.parametrize(
    "method,key,value",
    [
        ("torchrun", "nproc", "two"),
        ("torchrun", "nproc", "0"),
        ("torchrun", "nproc", "-3"),
        ("torchrun", "nproc", "1.5"),
        ("njobs", "n", "many"),
        ("njobs", "n", "0"),
    ],
)
def test_bad_plan_counts_are_one_line(tmp_path, method, key, value):
    suite = write(tmp_path / "suite.yaml", SUITE.format(method=method, key=key, value=value))
    proc = run_cli("resolve", "--config", str(suite), "--base", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("milabench: error: ") and "suite.yaml: convnet.plan." + key in line
    assert "expected a whole number >= 1" in line and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "options,match",
    [
        (
            "multinode: {port: http}",
            r"s\.yaml: system\.options\.multinode\.port: expected a "
            r"whole number in 1\.\.65535, not 'http'",
        ),  # fmt: skip
        ("multinode: {port: 70000}", r"multinode\.port: .* not 70000"),
        ("multinode: {port: 0}", r"multinode\.port: .* not 0"),
        ("ssh: {connect_timeout: 0}", r"ssh\.connect_timeout: expected a positive number"),
        ("ssh: {connect_timeout: -1}", r"ssh\.connect_timeout: expected a positive number"),
        ("ssh: {connect_timeout: soon}", r"ssh\.connect_timeout: .* not 'soon'"),
        ("cpu: {reserved_cores: -2}", r"cpu\.reserved_cores: expected a whole number >= 0"),
        ("cpu: {n_workers: 2.5}", r"cpu\.n_workers: .* not 2\.5"),
        ("run: {memory_interval: -1}", r"run\.memory_interval: expected a number >= 0"),
    ],
)
def test_bad_numeric_options_fail_at_load(tmp_path, options, match):
    path = write(tmp_path / "s.yaml", f"options:\n  {options}\n")
    with pytest.raises(ConfigError, match=match):
        load_system(path)


def test_good_numeric_options_load(tmp_path):
    path = write(
        tmp_path / "s.yaml",
        "options:\n  multinode: {port: 29500}\n  ssh: {connect_timeout: 2.5}\n"
        "  cpu: {n_workers: 0, reserved_cores: 0}\n  run: {memory_interval: 0}\n",
    )
    system = load_system(path)
    assert checked_number(system, "multinode.port", 29400) == 29500
    assert checked_number(system, "ssh.connect_timeout", 10.0) == 2.5


def test_an_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("MILABENCH_MULTINODE_PORT", "99999")
    with pytest.raises(ConfigError, match=r"^environment variable MILABENCH_MULTINODE_PORT: "):
        load_system(None)
    monkeypatch.setenv("MILABENCH_MULTINODE_PORT", "31000")
    assert checked_number(load_system(None), "multinode.port", 29400) == 31000


def test_cli_prints_one_line_for_a_bad_option(tmp_path):
    system = write(tmp_path / "s.yaml", "options:\n  ssh: {connect_timeout: -5}\n")
    proc = run_cli("resolve", "--system", str(system), "--base", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"milabench: error: {system}: system.options.ssh.connect_timeout: "
        "expected a positive number, not -5"
    )


def test_plan_code_never_raises_a_bare_value_error():
    raw = {"name": "convnet", "config_file": "suite.yaml", "plan": {"nproc": "two"}}
    entry = Entry.from_mapping(raw)
    # the typed entry holds whole numbers only (the loader's validation rejects "two"
    # with its file and key); plan code then falls back to the default, never a ValueError
    assert entry.plan.nproc is None and default_nproc(entry, {}) == 2
    entry = Entry.from_mapping({**raw, "plan": {"nproc": 0}})
    with pytest.raises(ConfigError, match=r"^suite\.yaml: convnet\.plan\.nproc: "):
        default_nproc(entry, {})
    # the same rule as the load-time validation: a whole number >= 1, nothing converted
    for bad in ("x", "3", 2.0, 0, -1, 1.5, True, None, [2]):
        with pytest.raises(ConfigError):
            plan_count(entry, "n", bad)
    assert plan_count(entry, "n", 3) == 3

    class Inner:
        pass

    inner = Inner()
    inner.entry, inner.system = entry, {}
    with pytest.raises(ConfigError, match=r"convnet\.plan\.n: .* not 'x'"):
        NJobs(inner, "x")
