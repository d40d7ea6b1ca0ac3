"""The orchestrator's and the tests' dependencies have tested bounds (pyproject.toml), and
this environment holds versions inside them."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def requirements(group: str) -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lines = project["dependencies"] if group == "" else project["optional-dependencies"][group]
    return [Requirement(line) for line in lines]


GROUPS = ["", "test", "store"]


@pytest.mark.parametrize("group", GROUPS)
def test_every_dependency_has_an_upper_bound(group):
    unbounded = [
        str(req)
        for req in requirements(group)
        if not any(spec.operator in ("<", "<=", "==", "~=") for spec in req.specifier)
    ]
    assert unbounded == [], f"pyproject.toml [{group or 'dependencies'}]: no upper bound"


@pytest.mark.parametrize("group", ["", "test"])
def test_installed_versions_are_inside_the_bounds(group):
    outside = []
    for req in requirements(group):
        version = metadata.version(req.name)
        if not req.specifier.contains(version, prereleases=True):
            outside.append(f"{req.name} {version} (wants {req.specifier})")
    assert outside == []
