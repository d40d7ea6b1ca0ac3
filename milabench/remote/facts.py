"""What a node will run with: Python, milabench code, packages of each environment, hardware.

`node_environment` returns the ``environment`` object of each node in ``fleet.json`` (what
`milabench fleet` writes), the same for the main node (probed by a local subprocess) and for
workers (over SSH): the probe is one stdlib-only program (`FACTS_PROBE`) sent inline with
the modules it imports (`milabench.machine.inline`), so both sides compute every value the
same way, and a worker needs no milabench to answer. Its keys: ``python`` (of the
interpreter that will run the benchmarks: ``python=``, else the first environment's, else
``python3``/``python`` on the node's PATH), ``milabench``, ``milabench_commit``,
``milabench_code`` (the code hash, over the files of ``milabench/`` and ``benchkit/``
less `CODE_EXCLUDES`), ``packages[group]`` (sha256 of the sorted ``name==version`` lines
of the environment's ``*.dist-info``) and ``torch[group]`` (None for a missing
environment), and the hardware of `milabench.machine.facts.machine_facts` flattened by
`hardware`. How each value is computed, and why: docs/multinode.md "Without a shared
filesystem" (versions before running).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from milabench.config.topology import node_label, runs_locally
from milabench.errors import NodeError
from milabench.machine.facts import SHIPPED_MODULES, accelerator_count
from milabench.machine.inline import inline_program
from milabench.remote.probe import prefixed_json
from milabench.remote.ssh import ConnectionPool, run_here, shared_pool

STAMP = ".milabench-code.json"
# Names neither copied to a node nor hashed (the same rule on both sides of a comparison).
CODE_EXCLUDES = ("__pycache__", "*.pyc", ".git", ".hg", ".svn", ".pytest_cache", ".ruff_cache")
FACTS_PREFIX = "@milabench-facts "

FACTS_PROBE = r"""
import fnmatch, glob, hashlib, json, os, re, sys
from milabench.machine.facts import git_head, machine_facts
args = json.loads(sys.argv[1])
out = machine_facts()

def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def dist_list(venv):
    found = []
    for sp in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))):
        for entry in sorted(os.listdir(sp)):
            if not entry.endswith(".dist-info"):
                continue
            name = version = None
            try:
                with open(os.path.join(sp, entry, "METADATA"), encoding="utf-8", errors="replace") as f:
                    for line in f:
                        if not line.strip():
                            break
                        if line.startswith("Name:") and name is None:
                            name = line.split(":", 1)[1].strip()
                        elif line.startswith("Version:") and version is None:
                            version = line.split(":", 1)[1].strip()
            except OSError:
                continue
            if name and version:
                found.append((canon(name), version))
    return sorted(set(found))

torch, packages = {}, {}
for group, venv in args["venvs"].items():
    if not os.path.isdir(venv):
        torch[group] = packages[group] = None
        continue
    dists = dist_list(venv)
    text = "".join(f"{n}=={v}\n" for n, v in dists)
    packages[group] = hashlib.sha256(text.encode()).hexdigest()
    torch[group] = next((v for n, v in dists if n == "torch"), None)
out["torch"], out["packages"] = torch, packages

def skipped(name):
    return any(fnmatch.fnmatchcase(name, p) for p in args["excludes"])

def code_hash(pkg):
    h = hashlib.sha256()
    files = []
    for top in ("milabench", "benchkit"):
        for root, dirs, names in os.walk(os.path.join(pkg, top)):
            dirs[:] = [d for d in dirs if not skipped(d)]
            files += [os.path.join(root, n) for n in names if not skipped(n)]
    for path in sorted(files, key=lambda p: os.path.relpath(p, pkg)):
        h.update(os.path.relpath(path, pkg).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()

pkg = args.get("package_dir")
if not pkg and args.get("code_root"):
    stamps = glob.glob(os.path.join(args["code_root"], "*", "pkg", args["stamp"]))
    if stamps:
        pkg = os.path.dirname(max(stamps, key=os.path.getmtime))
out["package_dir"] = pkg
out["milabench"] = out["milabench_commit"] = out["milabench_code"] = None
if pkg and os.path.isfile(os.path.join(pkg, "milabench", "__init__.py")):
    text = open(os.path.join(pkg, "milabench", "__init__.py"), encoding="utf-8").read()
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    out["milabench"] = found.group(1) if found else None
    out["milabench_commit"] = git_head(pkg)
    stamp = os.path.join(pkg, args["stamp"])
    if out["milabench_commit"] is None and os.path.isfile(stamp):
        try:
            out["milabench_commit"] = json.load(open(stamp)).get("commit")
        except (OSError, ValueError):
            pass
    out["milabench_code"] = code_hash(pkg)
print("@milabench-facts " + json.dumps(out), flush=True)
"""

# Tried in this order on the node: the first that exists runs `FACTS_PROBE`.
_PICK_PYTHON = (
    'code=$1; args=$2; shift 2; for p in "$@"; do '
    'if command -v "$p" >/dev/null 2>&1; then exec "$p" -c "$code" "$args"; fi; done; '
    'echo "no Python interpreter among: $*" >&2; exit 127'
)

ENVIRONMENT_KEYS = (
    "python",
    "milabench",
    "milabench_commit",
    "cpu_model",
    "cpu_count",
    "gpu_model",
    "gpu_count",
    "driver",
    "torch",
    "packages",
)


def local_package_dir() -> str:
    """The folder holding the running ``milabench`` package (and, in a clone, benchkit)."""
    import milabench

    return str(Path(milabench.__file__).resolve().parent.parent)


def _venvs_on_node(
    groups: Sequence[str], base_of_node: str, venvs: Mapping[str, str] | None
) -> dict[str, str]:
    if venvs is not None:
        return {str(k): str(v) for k, v in venvs.items()}
    return {g: f"{base_of_node.rstrip('/')}/venv/{g}" for g in groups}


def probe_argv(
    venvs: Mapping[str, str],
    package_dir: str | None,
    python: str | None = None,
    *,
    code_root: str | None = None,
) -> list[str]:
    """The argv that prints one ``@milabench-facts {json}`` line on the node.

    Without ``package_dir``, the probe takes the newest ``<code_root>/<run-id>/pkg`` (by
    the modification time of its stamp) when ``code_root`` is given.
    """
    candidates = [python] if python else []
    candidates += [f"{v.rstrip('/')}/bin/python" for v in venvs.values()]
    candidates += ["python3", "python"]
    args = json.dumps(
        {
            "venvs": dict(venvs),
            "package_dir": package_dir,
            "code_root": code_root,
            "stamp": STAMP,
            "excludes": list(CODE_EXCLUDES),
        }
    )
    program = inline_program(FACTS_PROBE, SHIPPED_MODULES, filename="<milabench-facts>")
    return ["sh", "-c", _PICK_PYTHON, "milabench-facts", program, args, *candidates]


def parse_facts(stdout: str) -> dict | None:
    return prefixed_json(stdout, FACTS_PREFIX)


def hardware(facts: Mapping) -> dict:
    """The fleet format's hardware keys of a `machine_facts` record: ``cpu_model``,
    ``cpu_count``, ``gpu_model`` (the first device's product), ``gpu_count``,
    ``driver`` (None where unknown)."""
    cpu = facts.get("cpu") or {}
    gpus = (facts.get("accelerators") or {}).get("gpus") or {}
    system = (facts.get("accelerators") or {}).get("system") or {}
    first = next(iter(gpus.values()), {}) if gpus else {}
    return {
        "cpu_model": cpu.get("brand"),
        "cpu_count": cpu.get("count"),
        "gpu_model": first.get("product") if gpus else None,
        "gpu_count": accelerator_count(facts),
        "driver": system.get("driver_version") if gpus else None,
    }


async def node_environment(
    system: dict,
    node: dict,
    groups: list[str],
    base_of_node: str,
    *,
    package_dir: str | None = None,
    venvs: Mapping[str, str] | None = None,
    python: str | None = None,
    pool: ConnectionPool | None = None,
    timeout: float = 120.0,
) -> dict:
    """The fleet format's ``environment`` of ``node`` (plus ``milabench_code``).

    ``groups`` are install groups, whose environments are ``<base_of_node>/venv/<group>``
    unless ``venvs`` maps each group to its folder *on that node*. ``package_dir`` is the
    folder of the milabench code the node runs (a `CodeLayout.package_dir`); by default the
    running tool's own folder for a node reached without SSH, else the most recent code
    pushed under ``<base_of_node>/code/`` (None values when there is none). Raises
    `NodeError` naming the node when it cannot be reached or the probe fails.
    """
    local = runs_locally(node, system)
    if package_dir is None:
        package_dir = local_package_dir() if local else None
    found_venvs = _venvs_on_node(groups, base_of_node, venvs)
    code_root = None if package_dir else f"{base_of_node.rstrip('/')}/code"
    argv = probe_argv(found_venvs, package_dir, python, code_root=code_root)
    try:
        if local:
            code, out, err = await run_here(argv, timeout)
        else:
            pool = pool if pool is not None else shared_pool(system)
            result = await pool.run(node, argv, timeout=timeout)
            code, out, err = result.exit_status or 0, str(result.stdout or ""), str(result.stderr)
    except TimeoutError as exc:
        raise NodeError(
            f"node {node_label(node)}: facts probe did not answer in {timeout:g} s"
        ) from exc
    facts = parse_facts(out)
    if code != 0 or facts is None:
        raise NodeError(
            f"node {node_label(node)}: facts probe failed (exit {code}): {err.strip()[-200:]}"
        )
    versions = ("python", "milabench", "milabench_commit", "milabench_code", "package_dir")
    return {
        **{key: facts.get(key) for key in versions},
        **hardware(facts),
        "torch": facts.get("torch"),
        "packages": facts.get("packages"),
    }


def differences(env: dict, ref: dict) -> list[tuple[str, object, object]]:
    """``(what, env's value, ref's value)`` for each compared version that differs.

    Compared: python, milabench, milabench_commit, milabench_code, and per install group
    the torch version (``torch[group]``) and the package-list hash (``packages[group]``).
    Hardware (models, counts, driver) is the fleet report's business: nodes of one job
    may differ there on purpose.
    """
    found: list[tuple[str, object, object]] = []
    for key in ("python", "milabench", "milabench_commit", "milabench_code"):
        if env.get(key) != ref.get(key):
            found.append((key, env.get(key), ref.get(key)))
    for key in ("torch", "packages"):
        mine, theirs = env.get(key) or {}, ref.get(key) or {}
        for group in sorted(set(mine) | set(theirs)):
            if mine.get(group) != theirs.get(group):
                found.append((f"{key}[{group}]", mine.get(group), theirs.get(group)))
    return found


def version_differences(environments: Mapping[str, dict], reference: str) -> dict[str, str]:
    """``{node: one line}`` for each node whose versions differ from ``reference``'s,
    naming what differs and both values (hashes and commits shortened to 12 digits):
    ``node node1: differs from node0: packages[torch] 5e1dba6ccbf8 vs 38673bcbebe4``.
    """
    ref = environments[reference]
    lines: dict[str, str] = {}
    for name, env in environments.items():
        if name == reference:
            continue
        diffs = [f"{k} {_short(a)} vs {_short(b)}" for k, a, b in differences(env, ref)]
        if diffs:
            lines[name] = f"node {name}: differs from {reference}: " + "; ".join(diffs)
    return lines


def _short(value) -> str:
    if value is None:
        return "missing"
    text = str(value)
    if len(text) >= 40 and all(c in "0123456789abcdef" for c in text):
        return text[:12]
    return text


__all__ = [
    "ENVIRONMENT_KEYS",
    "FACTS_PROBE",
    "STAMP",
    "hardware",
    "local_package_dir",
    "node_environment",
    "version_differences",
]
