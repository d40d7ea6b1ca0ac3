"""MILABENCH_CONFIG means one thing: the entry's JSON in benchmark processes.

The command line takes its suite from ``--config``, else ``MILABENCH_SUITE``, else
``MILABENCH_CONFIG`` only when that holds a path (upstream compatibility); the JSON a
benchmark process (or a `milabench dev` shell) gets under ``MILABENCH_CONFIG`` is never
read as a file name (docs/config.md).
"""

from __future__ import annotations

import json
import sys

from cfgtest_util import SUITES, run_cli

from milabench.cli.common import DEFAULT_CONFIG, suite_from_env

ENTRY_JSON = json.dumps({"name": "resnet", "dirs": {"base": "/nowhere"}})


def test_suite_from_env_rules():
    assert suite_from_env({}) is None
    assert suite_from_env({"MILABENCH_SUITE": "a.yaml"}) == "a.yaml"
    assert suite_from_env({"MILABENCH_CONFIG": "b.yaml"}) == "b.yaml"  # upstream spelling
    assert suite_from_env({"MILABENCH_SUITE": "a.yaml", "MILABENCH_CONFIG": "b.yaml"}) == "a.yaml"
    assert suite_from_env({"MILABENCH_CONFIG": ENTRY_JSON}) is None
    assert suite_from_env({"MILABENCH_CONFIG": "  " + ENTRY_JSON}) is None
    assert suite_from_env({"MILABENCH_CONFIG": ENTRY_JSON, "MILABENCH_SUITE": "a.yaml"}) == "a.yaml"
    assert suite_from_env({"MILABENCH_SUITE": "", "MILABENCH_CONFIG": ""}) is None


def test_resolve_with_entry_json_uses_milabench_suite(tmp_path):
    done = run_cli(
        "resolve",
        "--format",
        "json",
        env={
            "MILABENCH_CONFIG": ENTRY_JSON,
            "MILABENCH_SUITE": str(SUITES / "main.yaml"),
            "MILABENCH_BASE": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)
    assert "resnet" in entries and "multi" in entries
    assert entries["resnet"]["config_file"].endswith("main.yaml")


def test_resolve_with_entry_json_uses_the_default_suite(tmp_path):
    done = run_cli(
        "resolve",
        "--format",
        "json",
        env={"MILABENCH_CONFIG": ENTRY_JSON, "MILABENCH_BASE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    expected = run_cli("resolve", "--format", "json", "--config", str(DEFAULT_CONFIG),
                       env={"MILABENCH_BASE": str(tmp_path)})  # fmt: skip
    assert expected.returncode == 0, expected.stderr
    assert json.loads(done.stdout) == json.loads(expected.stdout)


def test_milabench_config_path_still_names_the_suite(tmp_path):
    done = run_cli(
        "resolve",
        "--format",
        "json",
        env={"MILABENCH_CONFIG": str(SUITES / "main.yaml"), "MILABENCH_BASE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert "resnet" in json.loads(done.stdout)


def test_milabench_inside_dev_reads_the_suite_dev_used(tmp_path):
    """`milabench dev` exports the entry's JSON as MILABENCH_CONFIG and the suite as
    MILABENCH_SUITE: a `milabench resolve` in that shell resolves the same suite."""
    inner = [sys.executable, "-m", "milabench", "resolve", "--format", "json"]
    done = run_cli(
        "dev", "resnet", "--config", str(SUITES / "main.yaml"), "--use-current-env", "--",
        *inner,
        env={"MILABENCH_BASE": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resnet" in json.loads(done.stdout) and "multi" in json.loads(done.stdout)
