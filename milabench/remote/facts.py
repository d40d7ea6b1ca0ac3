"""What a node will run with: Python, milabench code, packages of each environment, hardware.

`node_environment` returns the ``environment`` object of each node in ``fleet.json`` (what
`milabench fleet` writes), the same for the main node (probed by a local subprocess) and for
workers (over SSH): the probe is one stdlib-only program (`FACTS_PROBE`) sent inline, so
both sides compute every value the same way, and a worker needs no milabench to answer.

How each value is found, and why that way:

* ``python``: ``platform.python_version()`` of the interpreter that will run the
  benchmarks (``python=`` if given, else the first environment's ``bin/python`` found,
  else ``python3``/``python`` on the node's PATH).
* ``milabench``: ``__version__`` read as text from ``<package_dir>/milabench/__init__.py``;
  ``milabench_commit``: the git HEAD of that folder when it is a clone (read from
  ``.git`` without git), else the commit recorded when the code was pushed (`STAMP`);
  ``milabench_code``: the sha256 of the package's files (`code hash` below), which tells
  a worker's stale or edited copy from the main node's even at the same commit.
* ``packages[group]``: sha256 of the sorted ``name==version`` lines (names lower-cased
  with ``-`` for ``_`` and ``.``, one line each, ``\\n`` after each) read from the
  ``*.dist-info/METADATA`` of the environment's site-packages: what ``pip freeze`` lists,
  without starting pip (seconds per environment) or even the environment's interpreter.
  ``torch[group]``: the version of the ``torch`` distribution there. A missing
  environment gives None for both.
* ``cpu_model`` (``/proc/cpuinfo``), ``cpu_count`` (``os.cpu_count()``), ``gpu_model``,
  ``gpu_count``, ``driver``: ``nvidia-smi`` when present, else ``rocm-smi``, else the
  fake GPUs of ``MILABENCH_FAKE_GPUS`` (tests), else None/0/None.

Code hash: sha256 over ``<relative path>\\0<content>\\0`` of every file of
``milabench/`` and ``benchkit/`` under the package folder, in sorted path order, skipping
the names of `CODE_EXCLUDES` (``__pycache__``, ``*.pyc``, VCS folders: what
`milabench.remote.codesync` does not copy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from milabench.errors import NodeError
from milabench.remote.nodes import node_label, runs_locally
from milabench.remote.probe import prefixed_json
from milabench.remote.ssh import ConnectionPool, run_here, shared_pool

STAMP = ".milabench-code.json"
# Names neither copied to a node nor hashed (the same rule on both sides of a comparison).
CODE_EXCLUDES = ("__pycache__", "*.pyc", ".git", ".hg", ".svn", ".pytest_cache", ".ruff_cache")
FACTS_PREFIX = "@milabench-facts "

FACTS_PROBE = r"""
import fnmatch, hashlib, json, os, platform, re, shutil, subprocess, sys
args = json.loads(sys.argv[1])
out = {"python": platform.python_version(), "executable": sys.executable}

def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def dist_list(venv):
    found = []
    for sp in sorted(__import__("glob").glob(os.path.join(venv, "lib", "python*", "site-packages"))):
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

def git_head(folder):
    git = os.path.join(folder, ".git")
    if not os.path.isdir(git):
        return None
    try:
        head = open(os.path.join(git, "HEAD")).read().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(None, 1)[1]
        path = os.path.join(git, ref)
        if os.path.exists(path):
            return open(path).read().strip()
        packed = os.path.join(git, "packed-refs")
        if os.path.exists(packed):
            for line in open(packed):
                if line.rstrip().endswith(" " + ref):
                    return line.split()[0]
    except OSError:
        pass
    return None

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
    stamps = __import__("glob").glob(os.path.join(args["code_root"], "*", "pkg", args["stamp"]))
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

cpu_model = None
try:
    for line in open("/proc/cpuinfo", encoding="utf-8", errors="replace"):
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
out["cpu_model"] = cpu_model or platform.processor() or platform.machine()
out["cpu_count"] = os.cpu_count()

def smi(argv):
    if not shutil.which(argv[0]):
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None

gpu_model, gpu_count, driver = None, 0, None
text = smi(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
if text and text.strip():
    rows = [[c.strip() for c in line.split(",")] for line in text.strip().splitlines()]
    gpu_model, gpu_count, driver = rows[0][0], len(rows), rows[0][-1]
else:
    text = smi(["rocm-smi", "--showproductname", "--showdriverversion", "--json"])
    if text:
        try:
            doc = json.loads(text)
            cards = [v for k, v in doc.items() if k.startswith("card")]
            if cards:
                gpu_count = len(cards)
                gpu_model = cards[0].get("Card series") or cards[0].get("Card model")
            driver = (doc.get("system") or {}).get("Driver version")
        except ValueError:
            pass
    fake = os.environ.get("MILABENCH_FAKE_GPUS", "")
    if not gpu_count and fake:
        parts = fake.split(":")
        try:
            gpu_count = int(parts[1])
            gpu_model, driver = f"Fake {parts[0]} device", "fake"
        except (IndexError, ValueError):
            pass
out["gpu_model"], out["gpu_count"], out["driver"] = gpu_model, gpu_count, driver
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
    return ["sh", "-c", _PICK_PYTHON, "milabench-facts", FACTS_PROBE, args, *candidates]


def parse_facts(stdout: str) -> dict | None:
    return prefixed_json(stdout, FACTS_PREFIX)


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
    facts.pop("executable", None)
    return facts


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
    "local_package_dir",
    "node_environment",
    "version_differences",
]
