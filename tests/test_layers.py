"""The package layering of milabench (`.importlinter`, docs/architecture.md) holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    pytest.importorskip("importlinter", reason="import-linter is not installed")
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is installed without its lint-imports command")
    proc = subprocess.run(
        [exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_execute_and_sinks_are_forbidden_the_report():
    """The contract that `lint-imports` above enforces is in the configuration: the
    executor and the sinks read run data through `milabench.rundata`, never the report."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    forbidden = [
        section
        for name, section in config.items()
        if name.startswith("importlinter:contract:") and section.get("type") == "forbidden"
    ]
    pairs = {
        (source, target)
        for section in forbidden
        for source in section["source_modules"].split()
        for target in section["forbidden_modules"].split()
    }
    assert {
        ("milabench.execute", "milabench.report"),
        ("milabench.sinks", "milabench.report"),
    } <= pairs
    layers = config["importlinter:contract:layers"]["layers"].split()
    assert layers.index("milabench.sinks") < layers.index("milabench.rundata")
    assert layers.index("milabench.rundata") < layers.index("milabench.events")
