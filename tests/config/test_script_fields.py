"""The entry fields ``script`` and ``working_dir``: checked at load time, shown by
``resolve`` and ``matrix`` (docs/config.md, fields table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cfgtest_util import run_cli, write

from milabench.config import load_suite
from milabench.errors import ConfigError


def bench(tmp_path: Path) -> Path:
    folder = tmp_path / "benchmarks" / "foo"
    write(folder / "train.py", "")
    return folder


def suite_with(tmp_path: Path, fields: str) -> Path:
    bench(tmp_path)
    return write(tmp_path / "suite.yaml", f"foo:\n  definition: benchmarks/foo\n{fields}")


def test_fields_are_kept_as_written(tmp_path):
    path = suite_with(tmp_path, '  script: train.py\n  working_dir: "{milabench_extra}/w"\n')
    entry = load_suite(path, base=tmp_path / "base").entries["foo"].raw
    assert entry["script"] == "train.py"
    assert entry["working_dir"] == "{milabench_extra}/w"


def test_missing_script_names_the_entry_and_key(tmp_path):
    path = suite_with(tmp_path, "  script: trian.py\n")
    with pytest.raises(ConfigError) as info:
        load_suite(path, base=tmp_path / "base")
    message = str(info.value)
    assert message.startswith(f"{path}: foo.script: no file 'trian.py' in ")
    assert message.endswith(str(Path("benchmarks") / "foo")) and "\n" not in message


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ("  script: [a.py]\n", "foo.script: expected a file name, not ['a.py']"),
        ("  script: ''\n", "foo.script: expected a file name, not ''"),
        ("  working_dir: 3\n", "foo.working_dir: expected a folder path, not 3"),
        ("  working_dir: {a: 1}\n", "foo.working_dir: expected a folder path, not {'a': 1}"),
    ],
)
def test_non_string_values_are_errors(tmp_path, fields, expected):
    with pytest.raises(ConfigError, match="^.*" + expected.replace("[", r"\[")):
        load_suite(suite_with(tmp_path, fields), base=tmp_path / "base")


def test_absolute_script_and_missing_folder(tmp_path):
    other = write(tmp_path / "elsewhere" / "run.py", "")
    load_suite(suite_with(tmp_path, f"  script: {other}\n"), base=tmp_path / "base")
    # a definition folder that does not exist is not the script's fault
    path = write(tmp_path / "s2.yaml", "foo:\n  definition: nowhere\n  script: x.py\n")
    assert load_suite(path, base=tmp_path / "base").entries["foo"].raw["script"] == "x.py"


def test_resolve_error_exit_code_and_matrix_cwd(tmp_path):
    path = suite_with(tmp_path, "  script: trian.py\n")
    proc = run_cli("resolve", "--config", str(path), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "milabench: error: suite.yaml: foo.script: no file 'trian.py' in benchmarks/foo"
    )
    path = suite_with(tmp_path, '  script: train.py\n  working_dir: "{milabench_extra}/w"\n')
    base = tmp_path / "base"
    args = ["--config", str(path), "--base", str(base), "--format", "json"]
    proc = run_cli("matrix", *args, "--use-current-env", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    foo = json.loads(proc.stdout)["foo"]
    assert foo["script"] == "train.py" and foo["working_dir"] == "{milabench_extra}/w"
    assert foo["command"][1] == str(tmp_path / "benchmarks" / "foo" / "train.py")
    assert foo["cwd"] == str(base / "extra" / "foo" / "w")
