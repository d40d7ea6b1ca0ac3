"""Fleet folders for the fleet-report tests, assembled from real `milabench run` folders.

`milabench fleet` writes `<base>/fleet/<name>/fleet.json` and copies each node's run folder
under `nodes/<node>/` (docs/fleet.md). These helpers build the same layout from run folders
made by real runs of the tiny suite of tests/report (`sleepy`: paced steps, real rates):
two normal runs, one made 50% slower for real (`H6_SLOWDOWN=0.5`: every step takes twice
as long), and one whose `broken` benchmark raises. fleet.json is written as the fleet
command writes it, with each node's environment in the contract's shape.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ..report.conftest import real_run

# One node's `environment` (fleet.json); the tests change one key to plant a difference.
ENVIRONMENT: dict[str, Any] = {
    "python": "3.11.7",
    "milabench": "0.1.0",
    "milabench_commit": "0123456789abcdef0123456789abcdef01234567",
    "milabench_code": "c" * 64,
    "cpu_model": "AMD EPYC 7B13",
    "cpu_count": 2,
    "gpu_model": None,
    "gpu_count": 0,
    "driver": None,
    "torch": {"sleepy": "2.13.0+cpu"},
    "packages": {"sleepy": "a" * 64},
}

_CACHE: dict[str, dict[str, Path]] = {}


def real_fleet_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real run folders: `normal1`, `normal2`, `slow` (both steady benchmarks, the last
    50% slower), `broken` (steady, plus `broken` which fails; no steady-jobs). Made once
    per session, for every test module's `fleet_runs` fixture."""
    if "runs" not in _CACHE:
        base = tmp_path_factory.mktemp("fleetruns")
        _CACHE["runs"] = {
            "normal1": real_run(base, "normal1", "--select", "aa"),
            "normal2": real_run(base, "normal2", "--select", "aa"),
            "slow": real_run(base, "slow", "--select", "aa", env={"H6_SLOWDOWN": "0.5"}),
            "broken": real_run(base, "broken", "--select", "steady,broken"),
        }
    return _CACHE["runs"]


def environment(**changes: Any) -> dict[str, Any]:
    env = copy.deepcopy(ENVIRONMENT)
    env.update(changes)
    return env


def node(
    name: str,
    source: Path | None,
    *,
    status: str | None = "ok",
    reason: str | None = None,
    env: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A node of fleet.json whose run folder is a copy of the run folder `source` (None: no
    run folder; `run=` in `extra` then writes the key as given). `env` None: the default
    environment."""
    return {
        "name": name,
        "host": "127.0.0.1",
        "status": status,
        "reason": reason,
        "phase_seconds": {"install": 1.5, "prepare": 0.5, "run": 4.0},
        "_source": source,
        "environment": environment() if env is None else env,
        **extra,
    }


def make_fleet(
    root: Path,
    nodes: list[dict[str, Any]],
    *,
    name: str = "fleet.2026-11-23_20-01-02",
    started: str = "2026-11-23T20:01:02+00:00",
    ended: str | None = "2026-11-23T20:04:10+00:00",
    **fields: Any,
) -> Path:
    """Write `<root>/<name>/` the way `milabench fleet` does: run folders copied under
    `nodes/<node>/`, fleet.json (contract of docs/fleet.md) next to them."""
    folder = root / name
    (folder / "nodes").mkdir(parents=True, exist_ok=True)
    written = []
    for item in nodes:
        item = dict(item)
        source = item.pop("_source", None)
        if source is not None:
            target = folder / "nodes" / item["name"]
            shutil.copytree(source, target)
            item.setdefault("run", f"nodes/{item['name']}")
        else:
            item.setdefault("run", None)
        written.append(item)
    doc = {
        "schema_version": 1,
        "kind": "milabench-fleet",
        "name": name,
        "config": str(Path(__file__).parent / "suite.yaml"),
        "select": ["aa"],
        "exclude": [],
        "started": started,
        "ended": ended,
        "nodes": written,
        **fields,
    }
    (folder / "fleet.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return folder
