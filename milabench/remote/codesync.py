"""The code a worker runs, copied to a per-run folder on it: no shared filesystem needed.

Before a multi-node run, every worker gets ``<node base>/code/<run-id>/``: ``pkg/`` (the
tool itself, `package_dir`, first on the benchmark's ``PYTHONPATH``, with the stamp
``pkg/.milabench-code.json``) and ``tree/<absolute main-node path>`` (each benchmark
folder and suite file), so a main-node path maps to exactly one node path
(`CodeLayout.remote_path`). ``<node base>``: `milabench.remote.sync.node_base`. A node
sharing the main node's base, or on this machine without SSH, gets an *identity* layout:
nothing is copied and every path maps to itself (only the base is mapped, when the node
names another one). Stale files are removed inside each copied folder, never outside
it; ``__pycache__``, ``*.pyc`` and VCS folders are neither copied nor deleted. The
layout, and why a source tree: docs/multinode.md "Without a shared filesystem".
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from milabench.config.topology import main_node, node_label, remote_nodes, runs_locally
from milabench.errors import NodeError, UsageError
from milabench.remote.facts import (
    CODE_EXCLUDES,
    STAMP,
    differences,
    local_package_dir,
    node_environment,
    version_differences,
)
from milabench.remote.ssh import ConnectionPool, shared_pool
from milabench.remote.sync import (
    Method,
    choose_method,
    copy_many,
    map_to_node,
    node_base,
    sees_marker,
    shared_marker,
)

CODE_FOLDER = "code"
PACKAGE_FOLDER = "pkg"
TREE_FOLDER = "tree"
EXCLUDES = CODE_EXCLUDES
PUSH_PARALLEL = 8  # nodes copied at once (each runs one rsync or SFTP session at a time)
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class CodeLayout:
    """Where the main node's code is on one node, and how it got there.

    ``mapping`` holds ``(main-node prefix, node prefix)`` pairs, longest prefix first: each
    copied folder or file, and the main node's base when the node has another one.
    ``method`` is ``local`` (this machine, no SSH), ``shared`` (nothing copied), ``rsync``
    or ``sftp``; ``transferred`` counts the files (and links) the push copied.
    """

    root: str
    package_dir: str
    node: str = ""
    method: str = "shared"
    mapping: tuple[tuple[str, str], ...] = ()
    transferred: int = 0
    why: str = ""

    @property
    def copied(self) -> bool:
        """True when the node runs a copy (so `package_dir` goes on PYTHONPATH)."""
        return self.method in ("rsync", "sftp")

    def remote_path(self, local: str | Path) -> str:
        """The node's path for a main-node path (unchanged when nothing maps it).

        Relative paths are returned as given: they are relative to the process's working
        directory, which is mapped itself. A path is matched after lexical normalisation
        (``/base/../x`` is not under ``/base``); an unmatched one is returned as written.
        """
        text = os.fspath(local)
        if not text.startswith("/"):
            return text
        path = os.path.normpath(text)
        for src, dst in self.mapping:
            if path == src:
                return dst
            if path.startswith(src.rstrip("/") + "/"):
                return dst.rstrip("/") + path[len(src.rstrip("/")) :]
        return text

    def translate(self, word: str) -> str:
        """An argv word or variable value with main-node paths replaced.

        Handles a bare path, ``--option=/path``, and ``:``-separated path lists
        (``PATH``, ``PYTHONPATH``); anything else is returned unchanged.
        """
        if not self.mapping or not word:
            return word
        if word.startswith("/"):
            if ":" in word:
                return ":".join(
                    self.remote_path(p) if p.startswith("/") else p for p in word.split(":")
                )
            return self.remote_path(word)
        key, sep, value = word.partition("=")
        if sep and value.startswith("/") and not key.startswith("/"):
            return f"{key}={self.translate(value)}"
        return word

    def translate_value(self, value: str) -> str:
        """`translate`, and inside JSON values (``MILABENCH_CONFIG``) every string too."""
        stripped = value.lstrip()
        if stripped.startswith(("{", "[")):
            try:
                doc = json.loads(value)
            except ValueError:
                return self.translate(value)
            return json.dumps(_walk(doc, self.translate))
        return self.translate(value)

    def to_dict(self) -> dict:
        return {
            "root": self.root,
            "package_dir": self.package_dir,
            "node": self.node,
            "method": self.method,
            "transferred": self.transferred,
            "why": self.why,
            "mapping": [list(pair) for pair in self.mapping],
        }


def _walk(value, fn):
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    return value


# -- what is copied ----------------------------------------------------------------------


def package_sources() -> list[tuple[Path, str]]:
    """``(local path, name under pkg/)`` for milabench, benchkit, benchshared and
    pyproject.toml: each package as this interpreter imports it."""
    import benchkit
    import benchshared
    import milabench

    tool = Path(milabench.__file__).absolute().parent
    found = [(tool, "milabench")]
    found += [(Path(m.__file__).absolute().parent, m.__name__) for m in (benchkit, benchshared)]
    pyproject = tool.parent / "pyproject.toml"
    if pyproject.is_file():
        found.append((pyproject, "pyproject.toml"))
    return found


def check_run_id(run_id: str) -> str:
    """The run id as a folder name (one path component, no hidden or odd names)."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        raise UsageError(
            f"code sync: run id {run_id!r} must be one folder name (letters, digits, '.', '_', '-')"
        )
    return run_id


def _normalise(paths: Iterable[str | Path]) -> list[Path]:
    """Absolute, existing, de-duplicated; a path inside another listed folder is dropped."""
    found: list[Path] = []
    for p in paths:
        path = Path(os.path.normpath(os.path.abspath(os.fspath(p))))
        if not path.exists():
            raise UsageError(f"code sync: {path} does not exist on the main node")
        found.append(path)
    found = sorted(set(found), key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for path in found:
        if not any(k.is_dir() and path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def _tree_path(root: str, local: Path) -> str:
    return f"{root}/{TREE_FOLDER}{local}"


def _mapping(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def identity_layout(
    node: dict, main_base: str, run_id: str, method: str, why: str = ""
) -> CodeLayout:
    """A layout that copies nothing: the node sees the main node's paths."""
    there = node_base(node, main_base)
    pairs = [(main_base, there)] if there != main_base else []
    return CodeLayout(
        root=f"{there}/{CODE_FOLDER}/{run_id}",
        package_dir=local_package_dir(),
        node=str(node.get("name")),
        method=method,
        mapping=_mapping(pairs),
        why=why,
    )


def _stamp(run_id: str) -> str:
    from milabench import __version__
    from milabench.machine.facts import git_head

    tool = package_sources()[0][0]
    return json.dumps(
        {
            "version": __version__,
            "commit": git_head(tool.parent),
            "run_id": run_id,
            "source": str(tool.parent),
            "pushed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    )


async def _write_stamp(pool: ConnectionPool, node: dict, path: str, text: str) -> None:
    conn = await pool.connect(node)
    command = shlex.join(["sh", "-c", 'mkdir -p -- "${1%/*}" && cat > "$1"', "stamp", path])
    result = await asyncio.wait_for(conn.run(command, input=text), 60)
    if result.exit_status != 0:
        raise NodeError(
            f"node {node_label(node)}: cannot write {path}: {str(result.stderr or '').strip()}"
        )


async def _push_one(
    pool: ConnectionPool,
    node: dict,
    main_base: str,
    run_id: str,
    sources: Sequence[Path],
    stamp: str,
) -> CodeLayout:
    method: Method = await choose_method(pool, node)
    there = node_base(node, main_base)
    root = f"{there}/{CODE_FOLDER}/{run_id}"
    package_dir = f"{root}/{PACKAGE_FOLDER}"
    package = package_sources()
    pairs = [(str(src), f"{package_dir}/{name}") for src, name in package]
    pairs += [(str(src), _tree_path(root, src)) for src in sources]
    if there != main_base:
        pairs.append((main_base, there))
    # two copies per node: the tool under pkg/, the suite's paths under tree/
    count = await copy_many(
        pool, node, package, package_dir, method=method, delete=True, excludes=EXCLUDES
    )
    tree = [(src, str(src).lstrip("/")) for src in sources]
    count += await copy_many(
        pool, node, tree, f"{root}/{TREE_FOLDER}", method=method, delete=True, excludes=EXCLUDES
    )
    await _write_stamp(pool, node, f"{package_dir}/{STAMP}", stamp)
    return CodeLayout(
        root=root,
        package_dir=package_dir,
        node=str(node["name"]),
        method=method.name,
        mapping=_mapping(pairs),
        transferred=count,
        why="" if method.name == "rsync" else method.why,
    )


async def push_each(
    system: dict,
    base: Path,
    run_id: str,
    paths: list[Path],
    nodes: list[dict] | None = None,
    *,
    pool: ConnectionPool | None = None,
) -> tuple[dict[str, CodeLayout], dict[str, NodeError]]:
    """`push_code` that never raises for one node: ``(layouts, {node: error})``.

    A node that cannot be reached, or whose copy fails, is in the second mapping (its
    error names it); the others are copied all the same.
    """
    check_run_id(run_id)
    main_base = os.path.normpath(os.path.abspath(os.fspath(base)))
    targets = remote_nodes(system) if nodes is None else list(nodes)
    for node in targets:
        node_base(node, main_base)  # a bad base: one line before anything moves
    sources = _normalise(paths)
    own_pool = pool is None
    pool = pool if pool is not None else ConnectionPool(system)
    limit = asyncio.Semaphore(PUSH_PARALLEL)
    try:
        stamp = _stamp(run_id)
        with shared_marker(main_base) as marker:

            async def one(node: dict) -> CodeLayout:
                if runs_locally(node, system):
                    return identity_layout(node, main_base, run_id, "local")
                async with limit:
                    if await sees_marker(pool, node, main_base, marker):
                        return identity_layout(node, main_base, run_id, "shared")
                    return await _push_one(pool, node, main_base, run_id, sources, stamp)

            results = await asyncio.gather(*(one(n) for n in targets), return_exceptions=True)
    finally:
        if own_pool:
            await pool.close()
    layouts: dict[str, CodeLayout] = {}
    errors: dict[str, NodeError] = {}
    for node, result in zip(targets, results, strict=True):
        name = str(node["name"])
        if isinstance(result, NodeError):
            errors[name] = result
        elif isinstance(result, BaseException):
            raise result  # a bug, or a cancellation: not a node's fault
        else:
            layouts[name] = result
    return layouts, errors


async def push_code(
    system: dict,
    base: Path,
    run_id: str,
    paths: list[Path],
    nodes: list[dict] | None = None,
    *,
    pool: ConnectionPool | None = None,
) -> dict[str, CodeLayout]:
    """Copy the tool and ``paths`` (benchmark folders, config files) to every node.

    ``nodes`` defaults to the nodes reached over SSH. Returns ``{node name: CodeLayout}``
    for each of them (identity layouts for nodes on this machine and shared bases).
    Raises `NodeError` naming every node that failed, after the others finished (use
    `push_each` to carry on without them).
    """
    layouts, errors = await push_each(system, base, run_id, paths, nodes, pool=pool)
    if errors:
        raise NodeError("code sync failed: " + "; ".join(str(e) for e in errors.values()))
    return layouts


def describe_push(
    layouts: Mapping[str, CodeLayout], refused: Mapping[str, str] | None = None
) -> str:
    """``code: node1 rsync (12 files) in /b1/code/run, node2 shared, node3 refused``."""
    if not layouts and not refused:
        return "code: none to copy (single node)"
    parts = []
    for name, layout in layouts.items():
        if layout.copied:
            why = f", {layout.why}" if layout.why else ""
            parts.append(
                f"{name} {layout.method} ({layout.transferred} files{why}) in {layout.root}"
            )
        else:
            parts.append(f"{name} {layout.method}")
    parts += [f"{name} refused" for name in refused or {}]
    return "code: " + ", ".join(parts)


# -- a run ------------------------------------------------------------------------------


def code_paths(suite) -> list[Path]:
    """What a node needs of the suite: each selected benchmark folder, each entry's script
    when it lies outside its folder, and the config files the entries came from."""
    found: list[Path] = []
    for entry in suite.entries.values():
        if entry.definition is not None:
            found.append(Path(entry.definition))
        if entry.script and Path(entry.script).is_absolute():
            script = Path(entry.script)
            if entry.definition is None or not script.is_relative_to(entry.definition):
                found.append(script)
        if entry.config_file:
            found.append(Path(entry.config_file))
    if getattr(suite, "config_path", None):
        from milabench.config.document import load_document

        # the suite file and every file it includes (a node may load the suite itself)
        found.extend(load_document(Path(suite.config_path)).files)
    return [p for p in found if p.exists()]


def run_venvs(suite) -> dict[str, str]:
    """``{install group: environment folder on the main node}`` of the selected entries."""
    venvs: dict[str, str] = {}
    for entry in suite.entries.values():
        group = "current-env" if entry.use_current_env else entry.install_group
        venvs.setdefault(group, str(entry.venv))
    return venvs


_ACTIVE: dict[int, tuple[dict, dict[str, CodeLayout]]] = {}


def activate(system: dict, layouts: Mapping[str, CodeLayout]) -> None:
    """Make `layout_for` answer ``layouts`` for this system object (the run's launcher
    reads them when it builds each remote command)."""
    _ACTIVE[id(system)] = (system, dict(layouts))


def layout_for(system: dict | None, node: dict | None) -> CodeLayout | None:
    """The active layout of ``node`` in ``system`` (None: run from the main node's paths)."""
    if system is None or node is None:
        return None
    found = _ACTIVE.get(id(system))
    if found is None or found[0] is not system:
        return None
    return found[1].get(str(node.get("name")))


async def check_versions(
    system: dict,
    base: str | Path,
    layouts: Mapping[str, CodeLayout],
    venvs: Mapping[str, str],
    *,
    pool: ConnectionPool | None = None,
) -> tuple[dict[str, dict], dict[str, str]]:
    """The environment of the main node and of every node in ``layouts``, and
    ``{node: one line}`` for each node whose versions differ from the main node's
    (`facts.version_differences`) or whose facts could not be read.

    ``venvs`` maps install groups to their folder on the main node; on each node the
    folder under its own base is probed.
    """
    main_base = os.path.normpath(os.path.abspath(os.fspath(base)))
    main = str(main_node(system)["name"])
    nodes = {str(n["name"]): n for n in system.get("nodes") or []}
    names = [main] + [n for n in layouts if n != main]

    async def one(name: str) -> dict:
        node = nodes[name]
        there = main_base if name == main else node_base(node, main_base)
        mapped = {g: map_to_node(v, main_base, there) for g, v in venvs.items()}
        layout = layouts.get(name)
        package = layout.package_dir if layout is not None and name != main else None
        return await node_environment(
            system,
            node,
            sorted(venvs),
            there,
            package_dir=package or local_package_dir(),
            venvs=mapped,
            pool=pool,
        )

    found = await asyncio.gather(*(one(n) for n in names), return_exceptions=True)
    environments: dict[str, dict] = {}
    problems: dict[str, str] = {}
    for name, result in zip(names, found, strict=True):
        if isinstance(result, NodeError):
            problems[name] = str(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            environments[name] = result
    if main in environments:
        problems.update(version_differences(environments, main))
    return environments, problems


async def push_and_check(
    system: dict,
    base: str | Path,
    run_id: str,
    paths: list[Path],
    venvs: Mapping[str, str],
    *,
    pool: ConnectionPool,
    attempts: int = 2,
) -> tuple[dict[str, CodeLayout], dict[str, dict], dict[str, str]]:
    """Copy the code (`push_each`), then compare every node with the main one.

    Returns the layouts, the environments and ``{node: one line}`` for each node that
    failed or differs. A node whose *only* difference is the code hash saw a file that
    changed on the main node while it was being copied (an editor saving, a ``git
    pull``): it is copied again and checked again, up to ``attempts`` times in all.
    """
    main = str(main_node(system)["name"])
    layouts, errors = await push_each(system, Path(base), run_id, paths, pool=pool)
    for attempt in range(attempts):
        environments, problems = await check_versions(system, base, layouts, venvs, pool=pool)
        ref = environments.get(main)
        again = [
            name
            for name in problems
            if ref is not None
            and name in environments
            and [d[0] for d in differences(environments[name], ref)] == ["milabench_code"]
        ]
        if not again or attempt == attempts - 1:
            break
        nodes = [n for n in system.get("nodes") or [] if str(n["name"]) in again]
        redone, failed = await push_each(system, Path(base), run_id, paths, nodes, pool=pool)
        layouts.update(redone)
        errors.update(failed)
        for name in failed:
            layouts.pop(name, None)
    problems.update({name: str(err) for name, err in errors.items()})
    return layouts, environments, problems


def push_for_run(suite, run_id: str, *, check: bool = True) -> str | None:
    """Before a multi-node ``milabench run``: copy the code to every worker, check that
    every node has the main node's versions, and make the run's remote commands use the
    copies (`activate`). Returns the lines to print (None on a single-node system, where
    nothing happens).

    A worker that cannot be reached, whose copy failed or whose versions differ is
    *refused* for the run (`ConnectionPool.refuse` on the run's pool): every benchmark
    process that needs it fails at once with that line in its run files, the other
    benchmarks run; nothing is raised.
    """
    system = suite.system
    if not remote_nodes(system):
        return None

    async def main() -> tuple[dict[str, CodeLayout], dict[str, str]]:
        pool = ConnectionPool(system)
        try:
            if not check:
                layouts, errors = await push_each(
                    system, suite.base, run_id, code_paths(suite), pool=pool
                )
                return layouts, {name: str(err) for name, err in errors.items()}
            layouts, _, refused = await push_and_check(
                system, suite.base, run_id, code_paths(suite), run_venvs(suite), pool=pool
            )
            return layouts, refused
        finally:
            await pool.close()

    layouts, refused = asyncio.run(main())
    run_pool = shared_pool(system)
    for node in system.get("nodes") or []:
        reason = refused.get(str(node["name"]))
        if reason is not None:
            run_pool.refuse(node, NodeError(f"refused for this run: {reason}"))
            layouts.pop(str(node["name"]), None)
    activate(system, layouts)
    line = describe_push(layouts, refused)
    return "\n".join([line, *(f"warning: {why}" for why in refused.values())])


__all__ = [
    "CodeLayout",
    "activate",
    "code_paths",
    "describe_push",
    "layout_for",
    "push_code",
    "push_for_run",
]
