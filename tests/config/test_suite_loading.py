"""load_suite on suites written in the upstream format (docs/config.md section 1)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from cfgtest_util import SUITES, write

from milabench.config import load_suite
from milabench.config.argv import argv_list
from milabench.errors import ConfigError, UsageError
from milabench.plan import methods

MAIN = SUITES / "main.yaml"


@pytest.fixture(scope="module")
def suite():
    return load_suite(MAIN, base="/tmp/milabench-test-base")


def test_run_order_is_file_order_after_includes(suite):
    assert list(suite.entries) == [
        "first",
        "shadowed",
        "resnet",
        "multi",
        "interp",
        "grid-sgd-bs16",
        "grid-adam-bs16",
        "grid-sgd-bs32",
        "grid-adam-bs32",
    ]


def test_private_and_disabled_entries(suite):
    assert not any(n.startswith("_") for n in suite.entries)
    assert not any(n.startswith("_") for n in suite.all_entries)
    # Disabled by the suite's _defaults: listed for the report, never selected.
    assert "disabled-one" not in suite.entries
    assert suite.all_entries["disabled-one"].raw["enabled"] is False
    assert suite.all_entries["disabled-one"].raw["weight"] == 4
    assert set(suite.templates) == {"_base", "_child", "_other"}


def test_include_chain_later_file_wins(suite):
    # root.yaml defines `shadowed` with weight 1; main.yaml (including it) sets 2 + enabled.
    assert suite.entries["shadowed"].raw["weight"] == 2
    assert suite.entries["shadowed"].raw["enabled"] is True
    # `first` enables itself in root.yaml; _defaults (enabled: false) is only a default.
    assert suite.entries["first"].raw["enabled"] is True


def test_definition_relative_to_the_file_that_wrote_it(suite):
    alpha = str(SUITES / "benches" / "alpha")
    gamma = str(SUITES / "benches" / "gamma")
    assert suite.entries["first"].raw["definition"] == gamma  # written in root.yaml
    assert suite.entries["resnet"].raw["definition"] == alpha  # inherited from sub/templates.yaml
    assert suite.entries["resnet"].raw["config_file"] == str(MAIN)
    assert suite.entries["resnet"].raw["config_base"] == str(SUITES)
    assert suite.entries["first"].raw["config_file"] == str(SUITES / "root.yaml")


def test_multi_level_inheritance_and_tags(suite):
    resnet = suite.entries["resnet"].raw
    assert resnet["tags"] == ["monogpu", "noio"]  # sorted union along _base -> _child
    assert resnet["argv"]["--batch-size"] == 64  # child wins
    assert resnet["argv"]["--synthetic"] is True  # from _child
    assert resnet["argv"]["--amp"] is None  # removed by _child with null
    assert resnet["voir"] == {"options": {"stop": 20, "skip": 2}}  # suite _defaults
    assert resnet["install_group"] == "torch"
    assert resnet["group"] == "vision"
    assert argv_list(resnet["argv"]) == [
        "data",
        "--batch-size",
        "64",
        "--workers",
        "{n_worker}",
        "--synthetic",
    ]


def test_list_of_parents_merged_left_to_right(suite):
    multi = suite.entries["multi"].raw
    assert multi["definition"] == str(SUITES / "benches" / "beta")  # _other is later
    assert multi["env"] == {"A": "1"}
    assert multi["tags"] == ["inference", "monogpu"]
    assert multi["plan"] == {"method": "njobs", "n": 2}


def test_star_entry_merged_on_top(suite):
    assert {e.max_duration for e in suite.all_entries.values()} == {90}


def test_identity_fields_and_defaults(suite):
    e = suite.entries["first"].raw
    assert e["name"] == "first" and e["tag"] == ["first"]
    assert e["group"] == "first" and e["install_group"] == "first"
    assert e["install_variant"] == "cpu"
    assert e["num_machines"] == 1 and e["plan"] == {"method": "per_gpu"}
    base = Path("/tmp/milabench-test-base")
    assert e["dirs"] == {
        "base": str(base),
        "venv": str(base / "venv" / "first"),
        "data": str(base / "data"),
        "runs": str(base / "runs"),
        "extra": str(base / "extra" / "first"),
        "cache": str(base / "cache"),
        "code": str(SUITES / "benches" / "gamma"),
    }
    assert e["use_current_env"] is False


def test_matrix_two_axes(suite):
    grid = {n: e for n, e in suite.entries.items() if n.startswith("grid-")}
    assert list(grid) == ["grid-sgd-bs16", "grid-adam-bs16", "grid-sgd-bs32", "grid-adam-bs32"]
    e = grid["grid-adam-bs32"].raw
    assert e["matrix"] == {"bs": 32, "opt": "adam"}
    assert e["argv"]["--batch-size"] == 32  # a whole-string placeholder keeps its type
    assert e["argv"]["--optimizer"] == "adam"
    assert e["argv"]["--note"] == "bs=32 keeps {n_worker}"  # launch placeholders untouched
    assert e["argv"]["--json"] == '{"a": 1}'
    assert e["voir"]["options"]["stop"] == 32  # any job string naming a matrix key
    assert e["tags"] == ["monogpu", "noio"]  # inherited: matrix runs before inheritance
    assert e["enabled"] is True  # field next to `matrix` applies to every job
    assert "grid" not in suite.all_entries


def test_omegaconf_interpolation_absolute_and_relative(suite):
    env = suite.entries["interp"].raw["env"]
    assert env == {"ARCH": "cpu", "GROUP": "interp", "NAME": "interp", "SELF": "cpu"}


@pytest.mark.parametrize(
    "select,exclude,expected",
    [
        (
            ["noio"],
            [],
            ["resnet", "grid-sgd-bs16", "grid-adam-bs16", "grid-sgd-bs32", "grid-adam-bs32"],
        ),
        (["vision"], [], ["resnet"]),  # group
        (["beta"], [], ["multi"]),  # definition folder name
        (["gamma", "inference"], [], ["first", "shadowed", "multi"]),
        (["*"], ["noio", "torch"], ["first", "shadowed"]),  # install group
        (
            [],
            ["diagnostic"],
            [
                "shadowed",
                "resnet",
                "multi",
                "interp",
                "grid-sgd-bs16",
                "grid-adam-bs16",
                "grid-sgd-bs32",
                "grid-adam-bs32",
            ],
        ),
        (["disabled-one"], [], []),  # a disabled entry is never selected
    ],
)
def test_selection(select, exclude, expected):
    s = load_suite(MAIN, base="/tmp/x", select=select, exclude=exclude)
    assert list(s.entries) == expected


def test_selection_typo_is_a_usage_error():
    with pytest.raises(UsageError, match="did you mean 'resnet'"):
        load_suite(MAIN, base="/tmp/x", select=["resnte"])


def test_overrides_last_layer():
    s = load_suite(
        MAIN,
        base="/tmp/x",
        overrides=[
            "resnet.argv.--batch-size=8",
            "*.max_duration=30",
            "grid-sgd-bs16.weight=0",
            "_defaults.voir.options.stop=5",
            "resnet.argv.data=!delete",
        ],
    )
    assert s.entries["resnet"].raw["argv"]["--batch-size"] == 8
    assert "data" not in s.entries["resnet"].raw["argv"]
    assert {e.max_duration for e in s.entries.values()} == {30}
    assert s.entries["grid-sgd-bs16"].raw["weight"] == 0
    assert s.entries["first"].raw["voir"]["options"]["stop"] == 5


def test_override_of_unknown_entry():
    with pytest.raises(ConfigError, match="no entry named 'resnte'.*did you mean 'resnet'"):
        load_suite(MAIN, base="/tmp/x", overrides=["resnte.weight=2"])


def test_use_current_env():
    s = load_suite(MAIN, base="/tmp/x", use_current_env=True)
    assert all(str(e.dirs.venv) == sys.prefix for e in s.entries.values())
    assert all(e.use_current_env is True and e.venv == Path(sys.prefix) for e in s.entries.values())


def test_delete_tag_and_append(tmp_path):
    write(
        tmp_path / "base.yaml",
        "_t: {definition: ., argv: [a, b], tags: [x], env: {A: '1', B: '2'}}\n"
        "one: {inherits: _t}\n",
    )
    write(
        tmp_path / "top.yaml",
        "include: base.yaml\n"
        "one:\n  argv: {append: [c]}\n  tags: {append: [y]}\n  env:\n    A: !delete\n"
        "two: {inherits: _t, argv: {append: [d]}}\n",
    )
    s = load_suite(tmp_path / "top.yaml", base=tmp_path)
    assert s.entries["one"].raw["argv"] == ["a", "b", "c"]
    assert s.entries["one"].raw["tags"] == ["x", "y"]
    assert s.entries["one"].raw["env"] == {"B": "2"}
    assert s.entries["two"].raw["argv"] == ["a", "b", "d"]


def test_suite_defaults_apply_without_inherits(tmp_path):
    write(
        tmp_path / "s.yaml",
        "_defaults: {max_duration: 42, weight: 0.5, plan: {method: njobs}}\n"
        "plain: {definition: ., plan: {n: 3}}\n",
    )
    e = load_suite(tmp_path / "s.yaml", base=tmp_path).entries["plain"].raw
    assert e["max_duration"] == 42 and e["weight"] == 0.5
    assert e["plan"] == {"method": "njobs", "n": 3}
    assert e["enabled"] is True  # built-in default survives the suite's _defaults


def test_plan_method_dashes_and_known_methods(tmp_path):
    # the plan layer's method table is the only list of methods
    assert methods() == ["accelerate", "multinode", "njobs", "per_gpu", "torchrun"]
    write(tmp_path / "s.yaml", "a: {definition: ., plan: {method: per-gpu}}\n")
    assert load_suite(tmp_path / "s.yaml", base=tmp_path).entries["a"].raw["plan"]["method"] == (
        "per_gpu"
    )


def test_system_values_reach_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:4:40960")
    write(tmp_path / "s.yaml", "a: {definition: ., env: {V: '${system.gpu.count}'}}\n")
    s = load_suite(tmp_path / "s.yaml", base=tmp_path)
    assert s.system["arch"] == "cuda"
    assert s.entries["a"].raw["install_variant"] == "cuda"
    assert s.entries["a"].raw["env"]["V"] == 4


def test_entries_without_definition_are_not_selectable(tmp_path):
    write(tmp_path / "s.yaml", "a: {weight: 1}\nb: {definition: sub}\n")
    s = load_suite(tmp_path / "s.yaml", base=tmp_path)
    assert list(s.entries) == ["b"]
    assert s.entries["b"].raw["definition"] == str(tmp_path / "sub")


def test_unknown_fields_are_kept(tmp_path):
    # kept and handed on (a benchfile may read them), but an unknown name is reported
    write(tmp_path / "s.yaml", "a: {definition: ., model: tiny, _size: 3, url: [http://x]}\n")
    with pytest.warns(UserWarning, match=r"a\.model: unknown key; nothing reads it") as seen:
        e = load_suite(tmp_path / "s.yaml", base=tmp_path).entries["a"].raw
    assert len(seen) == 1  # `_size` (a benchfile's own) and `url` (upstream) are quiet
    assert e["model"] == "tiny" and e["_size"] == 3 and e["url"] == ["http://x"]


def _big_suite(tmp_path: Path, n: int, interpolate: bool) -> Path:
    lines = [
        "_defaults: {max_duration: 100}",
        "_t: {definition: ., tags: [a], argv: {--x: 1, --y: '{n_worker}'}}",
        "_u: {inherits: _t, tags: [b], argv: {--z: true}}",
    ]
    for i in range(n):
        env = "${..name}" if interpolate else "v"
        lines.append(f"bench{i}: {{inherits: _u, weight: {i}, env: {{N: '{env}'}}}}")
    return write(tmp_path / "big.yaml", "\n".join(lines) + "\n")


@pytest.mark.quiet  # measures time on this machine
@pytest.mark.parametrize("interpolate", [False, True])
def test_fifty_entries_load_fast(tmp_path, interpolate):
    path = _big_suite(tmp_path, 50, interpolate)
    system = load_suite(path, base=tmp_path).system  # warm-up (imports, detection)
    best = min(_timed(lambda: load_suite(path, base=tmp_path, system=system)) for _ in range(3))
    assert best < 0.2, f"load_suite took {best:.3f}s for 50 entries"


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_delete_a_whole_included_entry(tmp_path):
    write(tmp_path / "base.yaml", "a: {definition: .}\nb: {definition: .}\n")
    write(tmp_path / "top.yaml", "include: base.yaml\na: !delete\n")
    assert list(load_suite(tmp_path / "top.yaml", base=tmp_path).all_entries) == ["b"]
    write(tmp_path / "child.yaml", "include: top.yaml\nc: {inherits: a}\n")
    with pytest.raises(ConfigError, match="c.inherits: no entry named 'a'"):
        load_suite(tmp_path / "child.yaml", base=tmp_path)


def test_matrix_job_clashing_with_an_entry(tmp_path):
    write(
        tmp_path / "s.yaml",
        "m-1: {definition: .}\nm:\n  matrix: {v: [1, 2]}\n  job: {name: 'm-{v}', definition: .}\n",
    )
    with pytest.raises(ConfigError, match="m.job.name: generated entry 'm-1' has the same name"):
        load_suite(tmp_path / "s.yaml", base=tmp_path)


def test_matrix_without_job_name_gets_a_name_per_combination(tmp_path):
    write(tmp_path / "s.yaml", "m:\n  matrix: {v: [1, 2], w: x}\n  definition: .\n")
    s = load_suite(tmp_path / "s.yaml", base=tmp_path)
    assert list(s.entries) == ["m-1-x", "m-2-x"]


def test_requires_capabilities_type_checked_at_load(tmp_path):
    write(tmp_path / "s.yaml", "a: {definition: ., requires_capabilities: {x: 1}}\n")
    with pytest.raises(ConfigError, match="a.requires_capabilities: expected a list"):
        load_suite(tmp_path / "s.yaml", base=tmp_path)
