"""The first-light wheelhouse: what the GPU machine's Python lacks, as wheels, within a size.

The GPU machine lent for first light has a Python 3.12 venv holding the frameworks
(``image-nvidia-h200.txt``), maybe no pip, no network, and takes at most 64 MiB of files.
`build` writes, on a machine with registry access, a folder for it::

    DIR/pip-<version>-py3-none-any.whl   pip itself: python DIR/pip-X.whl/pip install ...
    DIR/wheels/*.whl                     one version per project, none the image has
    DIR/manifest.json                    what is in, what was left out and why

What goes in, in order, while the whole folder stays within ``max_mib``:

1. milabench's own needs for one local node with ``--use-current-env`` (`MILABENCH_NEEDS`,
   read from the imports of ``list``, ``machine``, ``install --use-current-env``,
   ``prepare``, ``run`` and ``report``) and pip's wheel: mandatory;
2. then each selected entry in the order given (the order of value): the packages its
   benchmark folder's requirements (the pin input of the install variant, ``cuda``) need
   beyond the image and what is already in, all of them or none.

One resolution (pip's ``install --dry-run --report`` for the target Python and platform)
covers the image, milabench and every selected entry, so each project has one version.
The image is assumed to hold what its own packages need: a package reached only through
an image package (torch's CUDA libraries, jax[cuda13]'s plugin) is never carried. A
project that has no wheel for the target is built here from its sdist, and must come out
pure Python (``py3-none-any``: antlr4-python3-runtime 4.9.3 for omegaconf 2.3).

Resolving needs a pip that honours ``--python-version`` for ``Requires-Python`` (this
machine's pip 23.2 does not) running under the target's Python version (markers are
evaluated with the running interpreter): a private venv under the temporary folder,
made once with ``python3.12`` and an upgraded pip (`resolver_python`). Standard library,
``packaging`` and milabench (to read the suite's entries).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging import tags as pkgtags
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from firstlight import missing_module
from firstlight.selection import DEFAULT_ORDER, LEFT_OUT_BY_DEFAULT

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IMAGE_LIST = HERE / "image-nvidia-h200.txt"
MIB = 1 << 20
DEFAULT_MAX_MIB = 40.0
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
DEFAULT_VARIANT = "cuda"
#: Room kept for manifest.json when choosing what fits (it is a few KiB).
MANIFEST_RESERVE = 64 << 10
#: The oldest pip that resolves for another Python (Requires-Python against
#: --python-version, PEP 658 metadata); the private resolver venv gets the newest.
MIN_RESOLVER_PIP = (24, 2)

#: The order of value of first light's default selection (its one home: selection.py).
DEFAULT_SELECT: list[str] = [n for n in DEFAULT_ORDER if n not in LEFT_OUT_BY_DEFAULT]

#: What milabench's own process imports on one local node with --use-current-env
#: (list, machine, install --use-current-env, prepare, run, report), by distribution,
#: with where. Their version ranges come from pyproject.toml.
MILABENCH_NEEDS: dict[str, str] = {
    "PyYAML": "milabench/config/yamlio.py: import yaml (every command that reads a suite)",
    "psutil": "milabench/execute/cleanup.py, execute/memory.py: import psutil (install, run)",
    "nvidia-ml-py": "milabench/doctor/nvidia.py, benchkit/accelerators.py: import pynvml "
    "(the doctor and the GPU monitor on NVIDIA)",
    "omegaconf": "milabench/config/interpolate.py: from omegaconf import OmegaConf, inside "
    "resolve_with_omegaconf (a suite or --override with a resolver, nesting or escape; "
    "plain ${a.b} references never import it)",
}
#: milabench's dependencies that these commands do not import, and why.
NOT_NEEDED: dict[str, str] = {
    "uv": "creates environments: install without --use-current-env, bundle, pin",
    "virtualenv": "creates environments: install without --use-current-env, bundle",
    "asyncssh": "reaches other nodes (remote/, fleet/): not one local node",
    "blessed": "the live dashboard on a terminal only (sinks/dashboard.py LiveDashboard), "
    "which falls back to plain lines without it; first light's output is a file",
    "voir": "inside benchmark processes of entries whose folder has a voirfile.py (per entry)",
    "ptera": "with voir (benchkit/session.py, overhead.py), per entry",
}
#: Carried for an entry whose benchmark folder has a voirfile.py.
VOIR_NEEDS = ("voir", "ptera")


class WheelhouseError(Exception):
    """The wheelhouse cannot be made; the message is one line (exit 1)."""


class UsageError(Exception):
    """Bad arguments (exit 2)."""


def canonical(name: str) -> str:
    return canonicalize_name(name)


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def mib(n: int) -> str:
    return f"{n / MIB:.1f}"


# ------------------------------------------------------------------------ the target


@dataclass(frozen=True)
class Target:
    """The GPU machine's Python: version and the platform tags its wheels may have."""

    python: str = "3.12"
    platform: str = DEFAULT_PLATFORM

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.python.split(".")[:2]
        return int(major), int(minor)

    @property
    def platforms(self) -> list[str]:
        return manylinux_platforms(self.platform)

    @property
    def machine(self) -> str:
        return _manylinux(self.platform)[2]

    def pip_args(self) -> list[str]:
        major, minor = self.version
        args = ["--only-binary=:all:", "--python-version", self.python,
                "--implementation", "cp", "--abi", f"cp{major}{minor}"]  # fmt: skip
        for plat in self.platforms:
            args += ["--platform", plat]
        return args

    def marker_env(self) -> dict[str, str]:
        """PEP 508 marker variables of the target interpreter."""
        parts = self.python.split(".")
        full = self.python if len(parts) >= 3 else f"{parts[0]}.{parts[1]}.0"
        return {
            "implementation_name": "cpython",
            "implementation_version": full,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": full,
            "python_version": ".".join(parts[:2]),
            "sys_platform": "linux",
        }

    def tags(self) -> set[pkgtags.Tag]:
        """cp3X (any abi3 down to cp32), none and py3 tags for these platforms, and any."""
        major, minor = self.version
        interp = f"cp{major}{minor}"
        out = set(pkgtags.cpython_tags((major, minor), abis=[interp], platforms=self.platforms))
        out |= set(pkgtags.compatible_tags((major, minor), interp, self.platforms))
        return out


_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _manylinux(platform: str) -> tuple[int, int, str]:
    found = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    if found:
        return int(found.group(1)), int(found.group(2)), found.group(3)
    found = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
    if found:
        return (*_LEGACY[found.group(1)], found.group(2))
    raise UsageError(
        f"--platform {platform}: expected manylinux_2_NN_ARCH (e.g. {DEFAULT_PLATFORM})"
    )


def manylinux_platforms(platform: str) -> list[str]:
    """``manylinux_2_28_x86_64`` and every older manylinux tag of its architecture, newest
    first, legacy aliases next to their glibc (``manylinux2014`` = 2_17 ...)."""
    major, minor, arch = _manylinux(platform)
    if major != 2:
        raise UsageError(f"--platform {platform}: only glibc 2 manylinux tags are known")
    out = []
    for m in range(minor, 4, -1):
        out.append(f"manylinux_2_{m}_{arch}")
        out += [f"{legacy}_{arch}" for legacy, (_, lm) in _LEGACY.items() if lm == m]
    return out


def wheel_fits(filename: str, allowed: set[pkgtags.Tag]) -> bool:
    """Does this wheel file install on the target (one of its tags is allowed)?"""
    try:
        _, _, _, wheel_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return bool(wheel_tags & allowed)


# ------------------------------------------------------------------ inputs: the image


@dataclass
class Image:
    python: str | None
    versions: dict[str, str | None]  # canonical name -> version (None: name only)
    names: dict[str, str]  # canonical name -> name as written


def read_image(path: Path) -> Image:
    """The image's package list: ``name==version`` or ``name``, ``# python: X.Y``."""
    python = None
    versions: dict[str, str | None] = {}
    names: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.startswith("#"):
            found = re.match(r"#\s*python:\s*(\d+\.\d+)", line)
            python = found.group(1) if found else python
            continue
        if not line:
            continue
        found = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*(\S+))?", line)
        if not found:
            raise UsageError(f"{path}:{number}: expected name or name==version, got {line!r}")
        versions[canonical(found.group(1))] = found.group(2)
        names[canonical(found.group(1))] = found.group(1)
    return Image(python, versions, names)


# ------------------------------------------------------- inputs: milabench and entries


def inputs_only(path: Path) -> set[str]:
    """Canonical names of the requirements of `path` marked ``# inputs-only``
    (`milabench.pack.INPUTS_ONLY`): read only on upstream's real inputs, which the GPU
    machine cannot fetch, so its entries run their stand-ins without them: not carried."""
    from milabench.pack import inputs_only_names

    return inputs_only_names(path)


def read_requirements(path: Path, _seen: frozenset[Path] = frozenset()) -> list[Requirement]:
    """The requirements of a pip requirements file (``-r`` followed, options skipped)."""
    path = path.resolve()
    if path in _seen:
        return []
    out: list[Requirement] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        include = re.match(r"(?:-r|--requirement)(?:\s+|=)(\S+)$", line)
        if include:
            out += read_requirements(path.parent / include.group(1), _seen | {path})
            continue
        if line.startswith("-"):
            continue  # -c, --extra-index-url ...: the image and this tool decide those
        try:
            out.append(Requirement(line))
        except InvalidRequirement as err:
            raise WheelhouseError(f"{path}:{number}: {err}") from None
    return out


def pyproject_specs(names: Iterable[str], pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """milabench's dependency lines (pyproject.toml) of these distributions."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    by_name = {canonical(Requirement(d).name): d for d in deps}
    out = []
    for name in names:
        if canonical(name) not in by_name:
            raise WheelhouseError(f"{pyproject}: milabench does not depend on {name}")
        out.append(by_name[canonical(name)])
    return out


@dataclass
class EntryNeeds:
    name: str
    requirements: list[Requirement]
    source: str  # the requirement file, relative to the repository
    inputs_only: list[str] = field(default_factory=list)  # left out: see `INPUTS_ONLY`


def entry_needs(config: Path, select: Sequence[str], variant: str) -> list[EntryNeeds]:
    """The selected entries, in the order of `select` (a word that names an entry takes
    it alone; a group, tag or folder its entries in suite order), with their roots."""
    from milabench.config import load_suite
    from milabench.config.select import selection_keys
    from milabench.errors import MilabenchError
    from milabench.pack import load_pack

    try:
        suite = load_suite(config, select=list(select), use_current_env=True)
    except MilabenchError as err:
        raise UsageError(str(err).splitlines()[0]) from None
    order: list[str] = []
    for word in select:
        if word in suite.entries:
            matched = [word]
        else:
            matched = [n for n, e in suite.entries.items() if word in selection_keys(e.raw)]
        if not matched:
            raise UsageError(f"--select {word}: no enabled entry of {config} matches it")
        order += [n for n in matched if n not in order]
    out = []
    for name in order:
        pack = load_pack(suite.entries[name], suite.system)
        source = pack.pin_input(variant)
        skipped = inputs_only(source)
        reqs = [r for r in read_requirements(source) if canonical(r.name) not in skipped]
        if pack.voirfile is not None:
            reqs += [Requirement(s) for s in pyproject_specs(VOIR_NEEDS)]
        try:
            shown = str(source.resolve().relative_to(REPO))
        except ValueError:
            shown = str(source)
        out.append(EntryNeeds(name, reqs, shown, sorted(skipped)))
    return out


# ------------------------------------------------------ the resolution, as a graph


@dataclass
class Graph:
    """Resolved projects (pip's report): version, file, dependencies."""

    nodes: dict[str, dict]  # canonical name -> pip report item
    env: dict[str, str]

    @classmethod
    def from_report(cls, report: dict, target: Target) -> Graph:
        nodes = {canonical(it["metadata"]["name"]): it for it in report["install"]}
        return cls(nodes, target.marker_env())

    def version(self, name: str) -> str:
        return self.nodes[name]["metadata"]["version"]

    def deps(self, name: str, extras: Iterable[str]) -> list[tuple[str, frozenset[str]]]:
        out = []
        wanted = ["", *extras]
        for text in self.nodes[name]["metadata"].get("requires_dist") or []:
            req = Requirement(text)
            if req.marker and not any(_marker_true(req.marker, self.env, e) for e in wanted):
                continue
            out.append((canonical(req.name), frozenset(req.extras)))
        return out

    def closure(
        self, roots: Iterable[tuple[str, Iterable[str]]], stop: Iterable[str] = ()
    ) -> tuple[set[str], set[str]]:
        """(projects reachable from `roots`, names required but absent from the report),
        neither entering nor listing the projects of `stop`."""
        stop = set(stop)
        extras: dict[str, set[str]] = {}
        missing: set[str] = set()
        todo = [(canonical(n), frozenset(e)) for n, e in roots]
        while todo:
            name, more = todo.pop()
            if name in stop:
                continue
            if name not in self.nodes:
                missing.add(name)
                continue
            have = extras.get(name)
            if have is not None and more <= have:
                continue
            extras[name] = (have or set()) | set(more)
            todo += self.deps(name, extras[name])
        return set(extras), missing


def _marker_true(marker: Marker, env: dict[str, str], extra: str) -> bool:
    return marker.evaluate({**env, "extra": extra})


# --------------------------------------------------------------- what fits (pure)


@dataclass(frozen=True)
class Unit:
    """An entry and the projects it needs beyond the image (milabench's included)."""

    name: str
    projects: frozenset[str]


@dataclass
class Fit:
    limit: int
    fixed: int  # bytes counted before any wheel: pip's wheel, the manifest's room
    kept: dict[str, list[str]] = field(default_factory=dict)  # project -> consumers
    entries_in: list[str] = field(default_factory=list)
    left: dict[str, tuple[tuple[str, ...], int, int]] = field(default_factory=dict)
    # entry left out -> (projects it lacked, largest first; their bytes; bytes free then)
    left_projects: dict[str, list[str]] = field(default_factory=dict)  # project -> entries
    total: int = 0

    def reason(self, entry: str, most: int = 8) -> str:
        projects, need, free = self.left[entry]
        names = ", ".join(projects[:most])
        if len(projects) > most:
            names += f" and {len(projects) - most} more"
        return (f"needs {names} ({mib(need)} MiB), over the {self.limit / MIB:g} MiB limit "
                f"({mib(free)} MiB left)")  # fmt: skip

    def left_out_lines(self) -> list[str]:
        """Entries left out, those lacking the same projects on one line."""
        groups: dict[tuple[str, ...], list[str]] = {}
        for entry, (projects, _, _) in self.left.items():
            groups.setdefault(projects, []).append(entry)
        return [f"{', '.join(entries)}: {self.reason(entries[0])}" for entries in groups.values()]


class TooBig(WheelhouseError):
    pass


def fit_entries(
    mandatory: Mapping[str, int],
    units: Sequence[Unit],
    sizes: Mapping[str, int],
    limit: int,
    fixed: int = 0,
) -> Fit:
    """What goes in: every project of `mandatory` (project -> bytes; milabench's), then each
    unit in order with all the projects it lacks, or none of them when they would take the
    total past `limit`. `fixed` counts first (pip's wheel, the manifest's room). `TooBig`
    when the mandatory part alone does not fit."""
    fit = Fit(limit=limit, fixed=fixed)
    total = fixed + sum(mandatory.values())
    if total > limit:
        raise TooBig(
            f"milabench's needs ({', '.join(sorted(mandatory)) or 'none'}) and pip's wheel "
            f"take {mib(total)} MiB, over the {limit / MIB:g} MiB limit"
        )
    for project in mandatory:
        fit.kept[project] = ["milabench"]
    for unit in units:
        lacking = sorted(unit.projects - fit.kept.keys(), key=lambda p: (-sizes[p], p))
        need = sum(sizes[p] for p in lacking)
        if total + need > limit:
            fit.left[unit.name] = (tuple(lacking), need, limit - total)
            for project in lacking:
                fit.left_projects.setdefault(project, []).append(unit.name)
            continue
        total += need
        for project in lacking:
            fit.kept[project] = []
        for project in unit.projects:
            fit.kept[project].append(unit.name)
        fit.entries_in.append(unit.name)
    for project in fit.kept:  # lacked by an entry left out, brought by a later one
        fit.left_projects.pop(project, None)
    fit.total = total
    return fit


# ------------------------------------------------------------------------ running pip


def _pip_version(python: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([python, "-m", "pip", "--version"], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.match(r"pip (\d+)\.(\d+)", out.stdout)
    return (int(found.group(1)), int(found.group(2))) if out.returncode == 0 and found else None


def _python_version(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _this_version() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def find_python(version: str) -> str | None:
    """A ``pythonX.Y`` that runs: this one, on PATH, or in pyenv's versions folder."""
    if _this_version() == version:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted(map(str, root.glob(f"versions/{version}.*/bin/python{version}")),
                         reverse=True)  # fmt: skip
    for exe in candidates:
        if exe and _python_version(exe) == version:
            return exe
    return None


def resolver_python(version: str, log: Callable[[str], None]) -> str:
    """A Python of the target's version with a recent pip: a private venv under the
    temporary folder (made once, its pip upgraded from the index); this Python's version
    when none of the target's exists (markers are then evaluated for it)."""
    base = find_python(version)
    if base is None:
        log(f"note: no python{version} here: pip evaluates markers for Python "
            f"{_this_version()}")  # fmt: skip
        base, version = sys.executable, _this_version()
    venv = Path(tempfile.gettempdir()) / "milabench-wheelhouse-pip" / f"py{version}"
    python = venv / "bin" / "python"
    have = _pip_version(str(python)) if python.exists() else None
    if have is not None and have >= MIN_RESOLVER_PIP:
        return str(python)
    log(f"making the resolver's venv {venv} (Python {version}, newest pip)")
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        raise WheelhouseError(f"cannot make {venv}: {_last_line(made.stderr)}")
    up = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade",
                         f"pip>={'.'.join(map(str, MIN_RESOLVER_PIP))}"],
                        capture_output=True, text=True)  # fmt: skip
    if up.returncode != 0:
        raise WheelhouseError(f"cannot upgrade pip in {venv}: {_error_line(up.stderr)}")
    return str(python)


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else "(no output)"


def _error_line(text: str) -> str:
    """pip's most telling error line."""
    lines = [x.strip() for x in text.splitlines() if x.strip().startswith("ERROR:")]
    for line in lines:
        if "No matching distribution" in line:
            return line.removeprefix("ERROR: ")
    return lines[0].removeprefix("ERROR: ") if lines else _last_line(text)


def no_distribution(stderr: str) -> str | None:
    """The requirement of pip's "No matching distribution found for X" (None if none)."""
    found = re.search(r"No matching distribution found for (\S+)", stderr)
    return found.group(1) if found else None


class Pip:
    def __init__(self, python: str, work: Path, target: Target, log: Callable[[str], None]):
        self.python = python
        self.work = work
        self.target = target
        self.log = log
        self.built = work / "built"  # wheels built here from sdists
        self.built.mkdir(parents=True, exist_ok=True)
        self.calls = 0

    def run(self, args: list[str]) -> subprocess.CompletedProcess:
        self.calls += 1
        logfile = self.work / f"pip-{self.calls}.log"
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
        done = subprocess.run([self.python, "-m", "pip", *args], capture_output=True,
                              text=True, env=env)  # fmt: skip
        logfile.write_text(f"$ pip {' '.join(args)}\n{done.stdout}\n{done.stderr}")
        return done

    def resolve(
        self, requirements: list[str], constraints: list[str], never_build: Iterable[str] = ()
    ) -> dict:
        """pip's installation report for these requirements on the target, building the
        pure-Python wheels of projects that have only an sdist (never those of
        `never_build`: the image's, whose absence is an error of the image list)."""
        never_build = {canonical(n) for n in never_build}
        reqs = self.work / "requirements.txt"
        cons = self.work / "constraints.txt"
        reqs.write_text("\n".join(requirements) + "\n")
        cons.write_text("\n".join(constraints) + "\n")
        built: set[str] = set()
        while True:
            report = self.work / "report.json"
            done = self.run(["install", "--dry-run", "--ignore-installed", "--quiet",
                             "--report", str(report), *self.target.pip_args(),
                             "--target", str(self.work / "target"),
                             "--find-links", str(self.built),
                             "-r", str(reqs), "-c", str(cons)])  # fmt: skip
            if done.returncode == 0:
                return json.loads(report.read_text())
            wanted = no_distribution(done.stderr)
            if wanted is None or canonical(Requirement(wanted).name) in built | never_build:
                raise WheelhouseError(f"cannot resolve for Python {self.target.python} "
                                      f"{self.target.platform}: {_error_line(done.stderr)}")  # fmt: skip
            built.add(canonical(Requirement(wanted).name))
            self.build(wanted)

    def build(self, requirement: str) -> Path:
        """The wheel of `requirement` built from its sdist; it must be pure Python."""
        name = Requirement(requirement).name
        self.log(f"building {requirement} from its sdist (no wheel for the target)")
        before = set(self.built.glob("*.whl"))
        done = self.run(["wheel", "--no-deps", "--no-binary", name, "--wheel-dir",
                         str(self.built), requirement])  # fmt: skip
        made = sorted(set(self.built.glob("*.whl")) - before)
        if done.returncode != 0 or not made:
            raise WheelhouseError(f"{name} has no wheel for the target and its sdist did not "
                                  f"build: {_error_line(done.stderr)}")  # fmt: skip
        if not wheel_fits(made[0].name, {pkgtags.Tag("py3", "none", "any")}):
            made[0].unlink()
            raise WheelhouseError(f"{name} has no wheel for Python {self.target.python} "
                                  f"{self.target.platform} and its sdist builds "
                                  f"{made[0].name}, not a pure-Python wheel")  # fmt: skip
        return made[0]

    def download(self, pins: list[str], dest: Path) -> None:
        """The target's wheels of these ``name==version`` pins into `dest`."""
        if not pins:
            return
        done = self.run(["download", "--no-deps", "--quiet", *self.target.pip_args(),
                         "--find-links", str(self.built), "--dest", str(dest), *pins])  # fmt: skip
        if done.returncode != 0:
            raise WheelhouseError(f"download failed: {_error_line(done.stderr)}")


# ------------------------------------------------------------------------ the build


@dataclass
class Options:
    out: Path
    max_mib: float = DEFAULT_MAX_MIB
    config: Path = REPO / "config" / "standard.yaml"
    select: list[str] = field(default_factory=lambda: list(DEFAULT_SELECT))
    image: Path = IMAGE_LIST
    python_version: str | None = None
    platform: str = DEFAULT_PLATFORM
    variant: str = DEFAULT_VARIANT


def prepare_out(out: Path) -> None:
    """`out` empty or a previous wheelhouse, whose wheels, pip and manifest go."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    ours = re.compile(r"wheels|manifest\.json|pip-.+\.whl")
    strangers = (
        sorted(p.name for p in out.iterdir() if not ours.fullmatch(p.name)) if out.is_dir() else []
    )
    if strangers:
        raise UsageError(f"{out} is neither empty nor a wheelhouse (it holds {strangers[0]}): "
                         "give an empty or new folder")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "wheels", ignore_errors=True)
    for old in [*out.glob("pip-*.whl"), out / "manifest.json"]:
        old.unlink(missing_ok=True)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build(opts: Options, log: Callable[[str], None] = print) -> dict:
    """Write the wheelhouse; its manifest. WheelhouseError / UsageError on failure."""
    started = time.monotonic()
    image = read_image(opts.image)
    target = Target(opts.python_version or image.python or "3.12", opts.platform)
    target.platforms  # noqa: B018 - validates --platform before any work
    limit = int(opts.max_mib * MIB)
    needs = entry_needs(opts.config, opts.select, opts.variant)
    prepare_out(opts.out)
    allowed = target.tags()

    work = Path(tempfile.mkdtemp(prefix="milabench-wheelhouse-"))
    ok = False
    try:
        pip = Pip(resolver_python(target.python, log), work, target, log)
        mb_roots = [Requirement(s) for s in pyproject_specs(MILABENCH_NEEDS)]
        entry_roots = {e.name: _applicable(e.requirements, target) for e in needs}
        # one resolution: the image's packages (its versions as constraints), milabench's
        # needs and every entry's requirements, image packages named by the entries without
        # their versions (the image's is the one that runs)
        lines = [image.names[n] for n in image.versions]
        for req in [*mb_roots, *(r for rs in entry_roots.values() for r in rs)]:
            if canonical(req.name) not in image.versions:
                lines.append(str(req))
        pins = [f"{image.names[n]}=={v}" for n, v in image.versions.items() if v]
        log(f"resolving for Python {target.python} {target.platform}: the image "
            f"({len(image.versions)} packages), milabench and {plural(len(needs), 'entry')}")  # fmt: skip
        graph = Graph.from_report(pip.resolve(lines, pins, never_build=image.versions), target)
        present, _ = graph.closure((n, ()) for n in image.versions)
        present |= set(image.versions)

        def lacking(roots: list[Requirement], who: str) -> set[str]:
            found, missing = graph.closure(((r.name, r.extras) for r in roots), stop=present)
            if missing:
                raise WheelhouseError(f"{who} needs {', '.join(sorted(missing))}, which the "
                                      "resolution left out (markers evaluated for another "
                                      "Python?)")  # fmt: skip
            return found

        mandatory = lacking(mb_roots, "milabench")
        units = [Unit(name, frozenset(lacking(roots, name))) for name, roots in entry_roots.items()]
        candidates = sorted(mandatory.union(*(u.projects for u in units)))

        stage = work / "stage"
        stage.mkdir()
        log(f"downloading {plural(len(candidates), 'wheel')} and pip's")
        pip.download([f"{graph.nodes[p]['metadata']['name']}=={graph.version(p)}"
                      for p in candidates], stage)  # fmt: skip
        files = _one_file_each(stage, candidates, graph, allowed)
        sizes = {p: f.stat().st_size for p, f in files.items()}
        pip_stage = work / "pip"
        pip_stage.mkdir()
        pip.download(["pip"], pip_stage)
        pip_wheels = sorted(pip_stage.glob("pip-*.whl"))
        if not pip_wheels:
            raise WheelhouseError("download failed: no wheel of pip for the target")
        pip_wheel = pip_wheels[-1]

        fit = fit_entries({p: sizes[p] for p in sorted(mandatory)}, units, sizes, limit,
                          fixed=pip_wheel.stat().st_size + MANIFEST_RESERVE)  # fmt: skip

        (opts.out / "wheels").mkdir()
        shutil.copy2(pip_wheel, opts.out / pip_wheel.name)
        for project in fit.kept:
            shutil.copy2(files[project], opts.out / "wheels" / files[project].name)
        manifest = _manifest(opts, target, limit, pip_wheel.name, fit, files, sizes, graph)
        manifest["inputs_only"] = {e.name: e.inputs_only for e in needs if e.inputs_only}
        write_manifest(opts.out, manifest)
        if manifest["total_bytes"] > limit:  # the manifest outgrew its room: never expected
            raise WheelhouseError(f"{opts.out} takes {mib(manifest['total_bytes'])} MiB, "
                                  f"over the {opts.max_mib:g} MiB limit")  # fmt: skip
        ok = True
        manifest["_seconds"] = time.monotonic() - started
        return manifest
    except TooBig:
        ok = True
        raise
    except WheelhouseError as err:
        raise WheelhouseError(f"{err} (pip's logs: {work})") from None
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)


def _applicable(reqs: list[Requirement], target: Target) -> list[Requirement]:
    env = target.marker_env()
    return [r for r in reqs if r.marker is None or _marker_true(r.marker, env, "")]


def _one_file_each(
    stage: Path, projects: list[str], graph: Graph, allowed: set[pkgtags.Tag]
) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(stage.iterdir()):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            raise WheelhouseError(f"pip downloaded {path.name}, not a wheel") from None
        project = canonical(name)
        if project not in projects or version != Version(graph.version(project)):
            raise WheelhouseError(f"pip downloaded {path.name}, which was not asked for")
        if not wheel_fits(path.name, allowed):
            raise WheelhouseError(f"{path.name} does not install on the target")
        if project in files:
            raise WheelhouseError(f"two files for {project}: {files[project].name}, {path.name}")
        files[project] = path
    absent = [p for p in projects if p not in files]
    if absent:
        raise WheelhouseError(f"download failed: no wheel of {', '.join(absent)}")
    return files


def _manifest(opts, target, limit, pip_name, fit, files, sizes, graph) -> dict:
    wheels = [
        {"file": files[p].name, "project": graph.nodes[p]["metadata"]["name"],
         "version": graph.version(p), "bytes": sizes[p], "for": consumers}
        for p, consumers in sorted(fit.kept.items())
    ]  # fmt: skip
    left_out = [
        {"project": graph.nodes[p]["metadata"]["name"], "bytes": sizes[p], "entries": entries,
         "reason": f"needed only by entries over the {opts.max_mib:g} MiB limit: "
                   f"{', '.join(entries)}"}
        for p, entries in sorted(fit.left_projects.items())
    ]  # fmt: skip
    return {
        "python": target.python,
        "platforms": target.platforms,
        "max_mib": opts.max_mib,
        "total_bytes": 0,
        "pip": pip_name,
        "wheels": wheels,
        "left_out": left_out,
        "entries_left_out": {e: fit.reason(e, most=1000) for e in fit.left},
        "entries": list(fit.entries_in),
        "_left_out_lines": fit.left_out_lines(),
    }


def write_manifest(out: Path, manifest: dict) -> None:
    """manifest.json, its ``total_bytes`` counting every file of `out`, itself included."""
    public = {k: v for k, v in manifest.items() if not k.startswith("_")}
    others = folder_bytes(out) - ((out / "manifest.json").stat().st_size
                                  if (out / "manifest.json").exists() else 0)  # fmt: skip
    total = others
    for _ in range(5):  # the size of the number changes the size of the file
        public["total_bytes"] = total
        text = json.dumps(public, indent=1) + "\n"
        if others + len(text.encode()) == total:
            break
        total = others + len(text.encode())
    (out / "manifest.json").write_text(text)
    manifest["total_bytes"] = folder_bytes(out)


# ---------------------------------------------------------------------- command line


USAGE = "python scripts/first_light_wheelhouse.py DIR [options]"


def parse_args(argv: Sequence[str] | None = None) -> Options:
    import argparse

    parser = argparse.ArgumentParser(
        prog="first_light_wheelhouse.py",
        description="The wheelhouse of first light: the wheels the GPU machine's Python "
        "lacks (milabench's, then the selected entries' in order), pip's wheel, a manifest.",
    )
    parser.add_argument("out", type=Path, metavar="DIR")
    parser.add_argument("--max-mib", type=float, default=DEFAULT_MAX_MIB,
                        help="size limit of DIR, every file counted (default 40)")  # fmt: skip
    parser.add_argument("--config", type=Path, default=REPO / "config" / "standard.yaml")
    parser.add_argument("--select", default=",".join(DEFAULT_SELECT), metavar="A,B",
                        help="entries in order of value (default: first light's)")  # fmt: skip
    parser.add_argument("--image", type=Path, default=IMAGE_LIST,
                        help="the GPU machine's package list (name==version or name)")  # fmt: skip
    parser.add_argument("--python-version", default=None,
                        help="the target's Python (default: the image's, 3.12)")  # fmt: skip
    parser.add_argument("--platform", default=DEFAULT_PLATFORM,
                        help="newest manylinux tag of the target (older ones are accepted)")  # fmt: skip
    parser.add_argument("--variant", default=DEFAULT_VARIANT,
                        help="install variant whose requirements the entries use (cuda)")  # fmt: skip
    args = parser.parse_args(argv)
    select = [w.strip() for w in args.select.split(",") if w.strip()]
    if not select:
        parser.error("--select names no entry")
    if not args.max_mib > 0:
        parser.error("--max-mib must be positive")
    for path in (args.config, args.image):
        if not path.is_file():
            parser.error(f"{path}: no such file")
    if args.python_version and not re.fullmatch(r"3\.\d+(\.\d+)?", args.python_version):
        parser.error("--python-version: expected 3.X")
    return Options(args.out, args.max_mib, args.config, select, args.image,
                   args.python_version, args.platform, args.variant)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    prog = "first_light_wheelhouse"
    try:
        manifest = build(opts)
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except WheelhouseError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as err:  # milabench's own needs, to read the suite
        print(f"{prog}: error: {missing_module(err)}", file=sys.stderr)
        return 1
    mine = [w for w in manifest["wheels"] if "milabench" in w["for"]]
    print(f"{opts.out}: {plural(len(manifest['wheels']), 'wheel')} and {manifest['pip']}, "
          f"{mib(manifest['total_bytes'])} MiB of the {opts.max_mib:g} MiB limit "
          f"({manifest['_seconds']:.0f} s)")  # fmt: skip
    print("milabench: " + (", ".join(f"{w['project']} {w['version']}" for w in mine)
                           or "nothing beyond the image"))  # fmt: skip
    for line in manifest["_left_out_lines"]:
        print(f"left out: {line}")
    by_project: dict[str, list[str]] = {}
    for entry, projects in manifest["inputs_only"].items():
        for project in projects:
            by_project.setdefault(project, []).append(entry)
    for project, entries in sorted(by_project.items()):
        print(f"not carried: {project} (read only on upstream's inputs, which the GPU machine "
              f"cannot fetch; {', '.join(entries)} run their stand-ins)")  # fmt: skip
    print("covered: " + (", ".join(manifest["entries"]) or "no entry"))
    return 0
