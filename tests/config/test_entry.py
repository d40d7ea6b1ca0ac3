"""The typed entry (`milabench.config.entry`): built once by the loader, read as fields
everywhere after; unknown keys reported with a suggestion, an error with --strict."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
from cfgtest_util import REPO, run_cli, write

from milabench.config import load_suite
from milabench.config.entry import KNOWN_KEYS, UPSTREAM_IGNORED, Entry, unknown_keys
from milabench.config.loader import UnknownKeyWarning
from milabench.errors import ConfigError


def _suite(tmp_path: Path, body: str) -> Path:
    bench = tmp_path / "bench"
    bench.mkdir(exist_ok=True)
    (bench / "main.py").write_text("")
    return write(tmp_path / "suite.yaml", f"bench:\n  definition: bench\n{body}")


def test_loader_builds_typed_entries_with_one_venv_rule(tmp_path):
    path = _suite(tmp_path, "  plan: {method: njobs, n: 3}\n  num_machines: 1\n  weight: 2\n")
    suite = load_suite(path, base=tmp_path / "base")
    entry = suite.entries["bench"]
    assert isinstance(entry, Entry)
    assert entry.plan.method == "njobs" and entry.plan.n == 3 and entry.plan.nproc is None
    assert entry.num_machines == 1 and entry.weight == 2.0 and entry.enabled is True
    assert entry.venv == tmp_path / "base" / "venv" / "bench"
    assert entry.python == str(tmp_path / "base" / "venv" / "bench" / "bin" / "python")
    assert entry.dirs.data == tmp_path / "base" / "data"
    assert entry.code == tmp_path / "bench"
    # the resolved mapping travels unchanged (recorded in run files, given to benchmarks)
    assert entry.raw["plan"] == {"method": "njobs", "n": 3}
    with pytest.raises(TypeError):
        entry.raw["weight"] = 3  # read-only
    current = load_suite(path, base=tmp_path / "base", use_current_env=True).entries["bench"]
    assert current.venv == Path(sys.prefix) and current.python == sys.executable


def test_records_of_older_runs_take_the_defaults():
    entry = Entry.from_mapping({"name": "old", "plan": {"method": "per-gpu"}})
    assert entry.plan.method == "per_gpu"  # dashes read as underscores
    assert entry.group == "old" and entry.install_group == "old" and entry.tag == ("old",)
    assert entry.num_machines == 1 and entry.max_duration is None and entry.weight == 1.0
    # a value of the wrong type is never converted: the validation reports it at load time
    assert Entry.from_mapping({"name": "x", "plan": {"n": "3"}}).plan.n is None


def test_unknown_key_gets_a_suggestion_and_a_warning(tmp_path):
    path = _suite(tmp_path, "  max_durations: 30\n  url: https://example.org/model\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_suite(path, base=tmp_path / "base")
    messages = [str(w.message) for w in caught if issubclass(w.category, UnknownKeyWarning)]
    assert messages == [
        f"{path}: bench.max_durations: unknown key (did you mean 'max_duration'?); nothing reads it"
    ]  # `url` is an upstream key accepted without effect: not reported


def test_strict_makes_an_unknown_key_an_error(tmp_path):
    path = _suite(tmp_path, "  max_durations: 30\n")
    with pytest.raises(ConfigError, match=r"bench\.max_durations: unknown key \(did you mean"):
        load_suite(path, base=tmp_path / "base", strict=True)


def test_benchfile_settings_and_upstream_keys_are_not_reported():
    assert unknown_keys({"_my_setting": 1, "url": "x", "definition": "."}) == []
    assert unknown_keys({"wieght": 1}) == [("wieght", "weight")]
    assert unknown_keys({"zzz": 1}) == [("zzz", None)]
    assert not set(UPSTREAM_IGNORED) & KNOWN_KEYS


def test_cli_warns_by_default_and_strict_exits_2(tmp_path):
    path = _suite(tmp_path, "  max_durations: 30\n")
    base = str(tmp_path / "base")
    done = run_cli("resolve", "--config", str(path), "--base", base)
    assert done.returncode == 0, done.stderr
    assert "milabench: warning: " in done.stderr and "did you mean 'max_duration'?" in done.stderr
    strict = run_cli("resolve", "--config", str(path), "--base", base, "--strict")
    assert strict.returncode == 2
    lines = strict.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("milabench: error: ")
    assert "bench.max_durations: unknown key (did you mean 'max_duration'?)" in lines[0]
    env = run_cli("resolve", "--config", str(path), "--base", base, env={"MILABENCH_STRICT": "1"})
    assert env.returncode == 2


def test_shipped_suites_have_no_unknown_key():
    for name in ("cpu.yaml", "standard.yaml", "cpu-fast.yaml", "thirdparty.yaml"):
        load_suite(REPO / "config" / name, strict=True)
