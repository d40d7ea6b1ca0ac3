"""Constraint files per variant and their index directives."""

from __future__ import annotations

from pathlib import Path

import pytest

from milabench.config.entry import Entry
from milabench.envs.constraints import (
    DEFAULT_DIR,
    constraints_file,
    entry_constraint_lines,
    entry_pip_args,
    index_directives,
    read_directives,
)
from milabench.errors import ConfigError


def test_repository_constraint_files():
    cpu = (DEFAULT_DIR / "cpu.txt").read_text().splitlines()
    assert "torch==2.13.0" in cpu
    assert index_directives(DEFAULT_DIR / "cpu.txt") == []  # find-links / pip config
    # PyPI's torch 2.13.0 is the CUDA build: the cuda file names no extra index.
    assert index_directives(DEFAULT_DIR / "cuda.txt") == []
    assert "torch===2.13.0" in (DEFAULT_DIR / "cuda.txt").read_text().splitlines()
    cuda12 = read_directives(DEFAULT_DIR / "cuda12.txt")
    assert cuda12.uv_index_args == ["--torch-backend", "cu128"]
    assert cuda12.pip_index_args == ["--extra-index-url", "https://download.pytorch.org/whl/cu128"]
    for variant in ("cuda", "cuda12"):
        assert read_directives(DEFAULT_DIR / f"{variant}.txt").with_requirements == ["nvidia-ml-py"]
    expected = {"rocm": "rocm6.4", "xpu": "xpu"}
    for arch, suffix in expected.items():
        args = index_directives(DEFAULT_DIR / f"{arch}.txt")
        assert args == ["--extra-index-url", f"https://download.pytorch.org/whl/{suffix}"]
        assert "torch==2.13.0" in (DEFAULT_DIR / f"{arch}.txt").read_text().splitlines()


def test_directives_and_errors(tmp_path: Path):
    good = tmp_path / "good.txt"
    good.write_text(
        "# milabench: --index-url https://a/simple\n#milabench:  --find-links "
        "'/some dir'\n# an ordinary comment\nx==1\n"
    )
    assert index_directives(good) == [
        "--index-url",
        "https://a/simple",
        "--find-links",
        "/some dir",
    ]
    bad = tmp_path / "bad.txt"
    bad.write_text("x==1\n# milabench: --pre\n")
    with pytest.raises(ConfigError, match=r"bad\.txt:2: bad directive"):
        index_directives(bad)


def test_constraints_file_choice(tmp_path: Path):
    (tmp_path / "cpu.txt").write_text("")
    assert constraints_file("cpu", "cpu", tmp_path) == tmp_path / "cpu.txt"
    assert constraints_file("unpinned", "cpu", tmp_path) == tmp_path / "cpu.txt"
    assert constraints_file("cuda", "cuda", tmp_path) is None


def test_entry_pip_settings():
    entries = [
        Entry.from_mapping(m)
        for m in (
            {"name": "a", "pip": {"constraints": ["a<2", "b==1"], "args": ["--no-deps"]}},
            {"name": "b", "pip": {"constraints": "a<2", "args": "--pre --no-cache"}},
            {"name": "c"},
        )
    ]
    assert entry_constraint_lines(entries) == ["a<2", "b==1"]
    assert entry_pip_args(entries) == ["--no-deps", "--pre", "--no-cache"]


def test_torch_backend_and_with_directives(tmp_path: Path):
    good = tmp_path / "good.txt"
    good.write_text(
        "# milabench: --find-links /w\n# milabench: --torch-backend cu126\n"
        "# milabench: --with nvidia-ml-py\n# milabench: --with 'jax[cuda12]==0.10.2'\n"
    )
    found = read_directives(good)
    assert found.uv_index_args == ["--find-links", "/w", "--torch-backend", "cu126"]
    assert found.pip_index_args == [
        "--find-links",
        "/w",
        "--extra-index-url",
        "https://download.pytorch.org/whl/cu126",
    ]
    assert found.with_requirements == ["nvidia-ml-py", "jax[cuda12]==0.10.2"]
    for n, body in enumerate(("--torch-backend cuda12", "--with 'a b'"), start=1):
        bad = tmp_path / f"bad{n}.txt"
        bad.write_text(f"x==1\n# milabench: {body}\n")
        with pytest.raises(ConfigError, match=rf"bad{n}\.txt:2: bad directive"):
            read_directives(bad)
