"""`${...}` interpolation: the fast path must agree with OmegaConf itself."""

from __future__ import annotations

import pytest
from cfgtest_util import write

from milabench.config import load_suite
from milabench.config.interpolate import resolve_interpolations, resolve_with_omegaconf
from milabench.errors import ConfigError


def describe(full_key):
    return "suite.yaml", full_key, None


DOCUMENTS = [
    {"system": {"arch": "cuda", "n": 3}, "packs": {"a": {"name": "a", "x": "${system.arch}"}}},
    {
        "system": {"arch": "cuda"},
        "packs": {"a": {"name": "a", "group": "g", "env": {"G": "${..group}", "S": "${.G}-x"}}},
    },
    {
        "system": {"n": 3, "f": 1.5, "b": True, "z": None},
        "packs": {
            "a": {
                "i": "${system.n}",
                "s": "n=${system.n} f=${system.f} b=${system.b}",
                "z": "${system.z}",
                "zz": "<${system.z}>",
            }
        },
    },
    {
        "system": {"nodes": [{"name": "n0"}, {"name": "n1"}]},
        "packs": {"a": {"first": "${system.nodes.1.name}", "all": "${system.nodes}"}},
    },
    {
        "system": {},
        "packs": {
            "a": {"w": 2, "v": "${.w}", "u": "${.v}", "t": "${packs.a.u}"},
            "b": {"from_a": "${packs.a.t}", "list": ["${..from_a}", 1]},
        },
    },
    {"system": {"d": {"k": [1, 2]}}, "packs": {"a": {"copy": "${system.d}"}}},
    {
        "system": {},
        "packs": {
            "a": {"argv": {"--batch-size": 3}, "x": "${.argv.--batch-size}", "y": "${packs.a-b.z}"},
            "a-b": {"z": 1},
        },
    },
]


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_fast_path_matches_omegaconf(doc):
    assert resolve_interpolations(doc, describe) == resolve_with_omegaconf(doc, describe)


def test_other_syntax_goes_to_omegaconf(monkeypatch):
    monkeypatch.setenv("CFG_TEST_VALUE", "from-env")
    doc = {
        "system": {"k": "arch"},
        "packs": {"a": {"e": "${oc.env:CFG_TEST_VALUE}", "n": "${system.${system.k}}"}},
    }
    doc["system"]["arch"] = "rocm"
    out = resolve_interpolations(doc, describe)
    assert out["packs"]["a"] == {"e": "from-env", "n": "rocm"}


@pytest.mark.parametrize(
    "packs,match",
    [
        ({"a": {"x": "${system.missing}"}}, "Interpolation key 'system.missing' not found"),
        ({"a": {"x": "${.y}", "y": "${.x}"}}, "cannot interpolate"),
        ({"a": {"x": "${"}}, "cannot interpolate"),
    ],
)
def test_errors_are_config_errors(packs, match):
    with pytest.raises(ConfigError, match=match):
        resolve_interpolations({"system": {}, "packs": packs}, describe)


def test_results_are_not_aliased(tmp_path):
    write(
        tmp_path / "s.yaml",
        "a: {definition: ., plan: {method: njobs}}\n"
        "b: {definition: ., plan: '${packs.a.plan}'}\n"
        "c: {definition: ., plan: '${packs.a.plan}'}\n",
    )
    s = load_suite(tmp_path / "s.yaml", base=tmp_path)
    s.entries["b"].raw["plan"]["n"] = 5
    assert "n" not in s.entries["c"].raw["plan"] and "n" not in s.entries["a"].raw["plan"]


def test_interpolation_error_names_file_entry_key(tmp_path):
    write(tmp_path / "s.yaml", "a: {definition: ., env: {X: '${system.nope}'}}\n")
    with pytest.raises(ConfigError) as info:
        load_suite(tmp_path / "s.yaml", base=tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 's.yaml'}: a.env.X: cannot interpolate")
