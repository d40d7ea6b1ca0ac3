"""argv_list (docs/config.md "Arguments")."""

from __future__ import annotations

import pytest

from milabench.config.argv import argv_list as _argv_list
from milabench.errors import ConfigError


def argv_list(entry: dict) -> list[str]:
    """An entry's argv as the pack assembles it (errors name its file and entry)."""
    return _argv_list(entry.get("argv"), file=entry.get("config_file"), name=entry.get("name"))


def test_list_is_passed_as_is():
    assert argv_list({"argv": ["--a", 1, "x y", True]}) == ["--a", "1", "x y", "true"]


def test_mapping_rules_and_order():
    entry = {
        "argv": {
            "--batch-size": 32,
            "--dropped": None,
            "--amp": True,
            "train": True,  # positional, comes first
            "--devices": [0, 1, 2],
            "--": ["--extra", "verbatim"],
            "--lr": 0.5,
            "data": True,
        }
    }
    assert argv_list(entry) == [
        "train",
        "data",
        "--batch-size",
        "32",
        "--amp",
        "--devices",
        "0,1,2",
        "--lr",
        "0.5",
        "--extra",
        "verbatim",
    ]


def test_missing_or_empty():
    assert argv_list({}) == []
    assert argv_list({"argv": {}}) == []
    assert argv_list({"argv": None}) == []


def test_false_is_an_error_naming_file_entry_key():
    entry = {"name": "bench", "config_file": "suite.yaml", "argv": {"--amp": False}}
    with pytest.raises(ConfigError) as info:
        argv_list(entry)
    assert str(info.value).startswith("suite.yaml: bench.argv.--amp: ")
    assert "null" in str(info.value)


def test_nested_mapping_value_is_an_error():
    with pytest.raises(ConfigError, match=r"bench\.argv\.--x"):
        argv_list({"name": "bench", "argv": {"--x": {"a": 1}}})


def test_not_a_list_or_mapping():
    with pytest.raises(ConfigError, match=r"bench\.argv: expected a list or a mapping"):
        argv_list({"name": "bench", "argv": "--a --b"})
