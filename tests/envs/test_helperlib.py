"""milabench.envs.helperlib: where benchkit and benchshared come from, how they are copied
into an environment, and that an edit to either refreshes the copy (and the input hash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from milabench.envs.helperlib import (
    TOOL_ROOT,
    helper_sources,
    install_helpers,
    package_hash,
    refresh_helpers,
    site_packages,
    source_hashes,
)


def fake_venv(root: Path) -> Path:
    """The folders of a virtual environment that the copies go into."""
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    return root


def sources(root: Path) -> dict[str, Path]:
    """Two small helper packages, laid out as a clone has them."""
    kit = root / "benchkit"
    shared = root / "benchmarks" / "_shared" / "benchshared"
    for folder, text in ((kit, "KIT = 1\n"), (shared, "SHARED = 1\n")):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text(text)
        (folder / "__pycache__").mkdir()
        (folder / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"not source")
    return {"benchkit": kit, "benchshared": shared}


def test_the_checkout_provides_both_packages():
    found = helper_sources()
    assert found == {
        "benchkit": TOOL_ROOT / "benchkit",
        "benchshared": TOOL_ROOT / "benchmarks" / "_shared" / "benchshared",
    }
    assert all((folder / "__init__.py").is_file() for folder in found.values())
    assert set(source_hashes()) == {"benchkit", "benchshared"}


def test_benchshared_beside_milabench_when_installed_from_a_wheel(tmp_path):
    (tmp_path / "benchshared").mkdir()
    (tmp_path / "benchshared" / "__init__.py").write_text("")
    assert helper_sources(tmp_path)["benchshared"] == tmp_path / "benchshared"


def test_missing_benchshared_names_both_places(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        helper_sources(tmp_path)
    assert str(tmp_path / "benchmarks" / "_shared" / "benchshared") in str(err.value)
    assert str(tmp_path / "benchshared") in str(err.value)


def test_install_copies_sources_without_bytecode(tmp_path):
    found = sources(tmp_path / "src")
    venv = fake_venv(tmp_path / "venv")
    copies = install_helpers(venv, found)
    where = site_packages(venv)
    assert copies == [where / "benchkit", where / "benchshared"]
    assert (where / "benchshared" / "__init__.py").read_text() == "SHARED = 1\n"
    assert not (where / "benchshared" / "__pycache__").exists()
    assert all(package_hash(where / n) == package_hash(f) for n, f in found.items())


def test_an_edit_refreshes_only_the_edited_copy(tmp_path):
    found = sources(tmp_path / "src")
    venv = fake_venv(tmp_path / "venv")
    install_helpers(venv, found)
    before = source_hashes(found)
    assert refresh_helpers(venv, found) == []  # up to date: nothing copied

    (found["benchshared"] / "vision.py").write_text("MEAN = (0.5, 0.5, 0.5)\n")
    after = source_hashes(found)
    assert after["benchshared"] != before["benchshared"]  # the install input hash moves
    assert after["benchkit"] == before["benchkit"]
    kit_copy = site_packages(venv) / "benchkit" / "__init__.py"
    kit_inode = kit_copy.stat().st_ino
    assert refresh_helpers(venv, found) == ["benchshared"]
    copied = site_packages(venv) / "benchshared" / "vision.py"
    assert copied.read_text() == "MEAN = (0.5, 0.5, 0.5)\n"
    assert kit_copy.stat().st_ino == kit_inode  # benchkit's copy was left alone


def test_a_missing_copy_is_made(tmp_path):
    found = sources(tmp_path / "src")
    venv = fake_venv(tmp_path / "venv")
    assert refresh_helpers(venv, found) == ["benchkit", "benchshared"]
    assert (site_packages(venv) / "benchshared" / "__init__.py").is_file()
