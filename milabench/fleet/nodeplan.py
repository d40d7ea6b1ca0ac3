"""What each node of a fleet runs, as plain data (no process, no connection).

Every node runs its *own* single-node milabench (``python -m milabench install``,
``prepare`` and ``run``) with a one-node system file naming itself:

* in its own base ``<node base>/nodes/<node name>`` (``<node base>``: the node's
  ``base:``, else the main node's ``--base``, as `milabench.remote.sync.node_base`);
* single-node entries only: one with ``num_machines > 1`` is left out with a note and
  disabled on the nodes (``--override <entry>.enabled=false``), so that the node's own
  selection resolves to exactly the entries the main node chose;
* its system file keeps the user's ``arch``, ``gpu``, ``cpu`` and ``options`` as written
  (a node detects its own accelerators) and names the node's copy of the constraints.

Why each rule: docs/multinode.md "Validate a new rack".
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from milabench.errors import ConfigError, UsageError
from milabench.remote.sync import node_base

TOKEN_VAR = "MILABENCH_FLEET_TOKEN"
PHASES = ("install", "prepare", "run")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Keys of the user's system file that describe the cluster, not one machine.
_CLUSTER_KEYS = ("nodes", "sshkey", "docker_image", "base", "config_file")


def check_node_names(system: dict) -> None:
    """Node names become folder names (``nodes/<name>``): one path component, plain."""
    for node in system.get("nodes") or []:
        name = str(node.get("name"))
        if not _NODE_NAME.fullmatch(name) or name in (".", ".."):
            where = system.get("config_file") or "system file"
            raise ConfigError(
                f"{where}: node {name!r}: a fleet uses node names as folder names; "
                "use letters, digits, '.', '_' and '-' only"
            )


def parse_phases(text: str | None) -> tuple[str, ...]:
    """``install,prepare,run`` (the default) or a subset, kept in pipeline order."""
    if not text:
        return PHASES
    words = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in PHASES]
    if unknown or not words:
        raise UsageError(
            f"--phases: unknown phase {', '.join(unknown) or text!r} (choose among "
            f"{', '.join(PHASES)})"
        )
    return tuple(p for p in PHASES if p in words)


@dataclass(frozen=True)
class Selection:
    """The entries every node runs, those left out and why, and the overrides that make
    each node's own selection agree."""

    run: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]
    overrides: tuple[str, ...]


def single_node_selection(suite) -> Selection:
    """The selected entries with ``num_machines <= 1``; the others left out with a note."""
    run: list[str] = []
    left: list[tuple[str, str]] = []
    for name, entry in suite.entries.items():
        if entry.num_machines > 1:
            left.append((name, f"num_machines {entry.num_machines}: needs several nodes together"))
        else:
            run.append(name)
    overrides = tuple(f"{name}.enabled=false" for name, _ in left)
    return Selection(tuple(run), tuple(left), overrides)


def node_run_base(node: dict, main_base: str | Path) -> str:
    """The base folder the node's own milabench uses (see the module's first rule)."""
    return f"{node_base(node, main_base).rstrip('/')}/nodes/{node['name']}"


def raw_system(system: dict) -> dict:
    """The user's system file as written (``{}`` without one), for the nodes' copies."""
    path = system.get("config_file")
    if not path:
        return {}
    from milabench.config.merge import strip_markers
    from milabench.config.yamlio import read_yaml

    data = strip_markers(read_yaml(Path(path)))
    if isinstance(data, dict) and "system" in data:
        data = data["system"]
    return dict(data) if isinstance(data, dict) else {}


def node_system(raw: dict, node: dict, *, constraints_dir: str | None = None) -> dict:
    """The one-node system file of ``node``: the user's settings, the node alone, local.

    ``constraints_dir`` (the node's copy of the main node's constraint files) becomes the
    ``install.constraints_dir`` option: the copied package holds no ``constraints/``
    folder, and a node installing unpinned would not measure the same packages.
    """
    import copy

    system = {k: copy.deepcopy(v) for k, v in raw.items() if k not in _CLUSTER_KEYS}
    if constraints_dir:
        options = system.get("options")
        options = options if isinstance(options, dict) else {}
        install = options.get("install")
        install = install if isinstance(install, dict) else {}
        install["constraints_dir"] = constraints_dir
        options["install"] = install
        system["options"] = options
    system["nodes"] = [
        {
            "name": str(node["name"]),
            "ip": "127.0.0.1",
            "user": str(node.get("user") or "root"),
            "main": True,
            "local": True,
        }
    ]
    return {"system": system}


@dataclass(frozen=True)
class NodeCommandSettings:
    """What every phase command of one node shares (paths are the node's own)."""

    python: str
    config: str
    system_file: str
    base: str
    select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    use_current_env: bool = False
    strict: bool = False
    ignore_doctor: bool = False  # the node's run starts despite a doctor failure


def phase_argv(settings: NodeCommandSettings, phase: str, run_name: str | None = None) -> list[str]:
    """``python -m milabench <phase> ...`` for the node (an argv list, never a shell line)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    argv = [settings.python, "-m", "milabench", phase]
    argv += ["--config", settings.config, "--system", settings.system_file, "--base", settings.base]
    if settings.select:
        argv += ["--select", ",".join(settings.select)]
    if settings.exclude:
        argv += ["--exclude", ",".join(settings.exclude)]
    for override in settings.overrides:
        argv += ["--override", override]
    if settings.use_current_env:
        argv.append("--use-current-env")
    if settings.strict:
        argv.append("--strict")
    if phase == "run":
        if run_name:
            argv += ["--run-name", run_name]
        argv += ["--dash", "no"]
        if settings.ignore_doctor:
            argv.append("--ignore-doctor")
    return argv


def phase_env(package_dir: str | None, token: str, pythonpath: str | None = None) -> dict[str, str]:
    """The variables a phase command gets on top of the node's own.

    ``MILABENCH_FORCE_SSH=0``: the node's milabench runs its single node locally even when
    the fleet itself was told to reach loopback nodes over SSH. ``TOKEN_VAR``: every
    process the phase starts inherits it (the node's milabench passes its environment on
    to benchmarks), so that a final sweep can find anything that escaped its process
    group, including benchmarks the node's milabench started in sessions of their own.
    """
    env = {
        "MILABENCH_FORCE_SSH": "0",
        "MILABENCH_DASH": "no",
        TOKEN_VAR: token,
    }
    if package_dir:
        env["PYTHONPATH"] = package_dir + (f"{os.pathsep}{pythonpath}" if pythonpath else "")
    return env


def short_reason(lines: Sequence[str], limit: int = 300) -> str:
    """The last meaningful line of a command's output, for a one-line reason."""
    for line in reversed(lines):
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line).strip()
        if text:
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return "no output"
