"""Wheelhouses for air-gapped nodes: ``milabench bundle`` and ``milabench install --offline``.

`make_bundle`, on a machine that reaches the package registries, writes the wheelhouse
of a selection's install groups (`milabench.envs.groups.build_groups`, as ``install``
makes them) for a target Python version and platform: ``wheels/*.whl``, each group's
pins in ``requirements/<group>.txt``, milabench's own in ``requirements/milabench.txt``,
the prepared real inputs in ``inputs/<name>/`` (`bundle_inputs`), and ``manifest.json``,
written last: a folder without one is not a wheelhouse.

On the node, `install_offline` installs the groups as ``milabench install`` does, with
the wheelhouse as the only package source, after checking that it is complete and made
for this Python, machine and selection (a missing or damaged wheel is one line naming
the package); `place_inputs` first puts the bundled inputs, each file checked, where
``benchshared.inputs.locate`` finds them.
How each step works: docs/environments.md "Air-gapped nodes".
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.envs.backends import Backend, backend_name, pip_command
from milabench.envs.groups import InstallGroup
from milabench.envs.install import GroupResult, LogFolder, install_all
from milabench.envs.marker import input_hash, install_inputs, is_up_to_date
from milabench.envs.pipconf import PipSettings, read_pip_settings
from milabench.envs.steps import run_step
from milabench.errors import EnvironmentMissing, UsageError
from milabench.plan.spec import ProcessSpec

FORMAT = 1
MANIFEST = "manifest.json"
WHEELS = "wheels"
INPUTS = "inputs"
INPUT_MANIFEST = "milabench-input.json"  # benchshared.inputs.MANIFEST
REQUIREMENTS = "requirements"
MILABENCH = "milabench"
#: build backend of ``pip install -e <repository>`` (pyproject.toml's build-system)
MILABENCH_BUILD = ("setuptools>=68",)
_PLATFORM = re.compile(r"^(?P<arch>x86_64|aarch64|ppc64le|s390x)-manylinux(?P<ver>2014|_2_\d+)$")
_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*(?P<version>[^\s;\\]+)"
)


# -- names -----------------------------------------------------------------------------


def canonical(name: str) -> str:
    """PEP 503 name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_key(filename: str) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name (``name-version[-build]-py-abi-plat``)."""
    parts = filename[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise ValueError(f"{filename}: not a wheel file name")
    return canonical(parts[0]), parts[1].lower()


def same_version(version: str) -> str:
    """A version spelled so that equal PEP 440 versions compare equal as strings here:
    lower case, trailing ``.0`` of the release dropped (``1.0.0+CPU`` -> ``1+cpu``)."""
    version = version.lower()
    match = re.match(r"^(\d+(?:\.\d+)*)(.*)$", version)
    if match is None:
        return version
    release = match.group(1).split(".")
    while len(release) > 1 and release[-1].lstrip("0") == "":
        release.pop()
    return ".".join(str(int(n)) for n in release) + match.group(2)


def wheel_tags(filename: str) -> tuple[str, str, str]:
    """(python, abi, platform) tags of a wheel file name."""
    parts = filename[: -len(".whl")].split("-")
    return parts[-3], parts[-2], parts[-1]


def read_pins(path: Path) -> list[tuple[str, str]]:
    """``(canonical name, version)`` of each ``name==version`` line of a compiled file."""
    pins = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        match = _PIN.match(line)
        if match is None:
            raise UsageError(f"{path}: not a pinned requirement: {line!r}")
        pins.append((canonical(match["name"]), match["version"].lower()))
    return pins


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def group_fingerprint(group: InstallGroup) -> str:
    """What decides a group's pins, independent of where the repository lies: the variant,
    the contents of its requirement files and of its constraints file (whose ``#
    milabench:`` directives hold the indexes and the variant's added requirements), the
    entries' constraint lines and whether voir is added."""
    digest = hashlib.sha256()
    items = [
        group.variant,
        *[hashlib.sha256(p.read_bytes()).hexdigest() for p in group.requirements],
        hashlib.sha256(group.constraints.read_bytes()).hexdigest() if group.constraints else "",
        *group.constraint_lines,
        str(group.needs_voir),
    ]
    for item in items:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()


# -- the target ------------------------------------------------------------------------


def this_python() -> str:
    return "{}.{}".format(*sys.version_info[:2])


@dataclass(frozen=True)
class Target:
    """The Python version and platform a wheelhouse is made for.

    ``platform`` is uv's spelling (``x86_64-manylinux_2_28``), or None for this machine's
    own platform; then ``python`` may still name another version of CPython.
    """

    python: str
    platform: str | None = None

    @classmethod
    def parse(cls, python: str | None, platform_name: str | None) -> Target:
        python = python or this_python()
        if not re.fullmatch(r"3\.\d+", python):
            raise UsageError(f"--python-version: {python!r} is not a CPython version like 3.11")
        if platform_name is not None and not _PLATFORM.match(platform_name):
            raise UsageError(
                f"--platform: {platform_name!r} is not a Linux platform like "
                "x86_64-manylinux_2_28 or aarch64-manylinux_2_28"
            )
        return cls(python, platform_name)

    @property
    def native(self) -> bool:
        return self.platform is None and self.python == this_python()

    @property
    def machine(self) -> str:
        """The CPU architecture of the target (``x86_64``...)."""
        if self.platform is None:
            return platform.machine()
        match = _PLATFORM.match(self.platform)
        assert match is not None
        return match["arch"]

    def pip_platforms(self) -> list[str]:
        """pip's ``--platform`` tags for the target: each manylinux tag it accepts."""
        if self.platform is None:
            return []
        match = _PLATFORM.match(self.platform)
        assert match is not None
        arch, ver = match["arch"], match["ver"]
        newest = 17 if ver == "2014" else int(ver.rsplit("_", 1)[1])
        tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{name}_{arch}" for minor, name in legacy.items() if minor <= newest]
        return tags

    def uv_args(self) -> list[str]:
        args = ["--python-version", self.python]
        if self.platform is not None:
            args += ["--python-platform", self.platform]
        return args

    def pip_args(self) -> list[str]:
        """``pip download`` options selecting the target's wheels (none when native)."""
        if self.native:
            return []
        args = ["--python-version", self.python, "--implementation", "cp"]
        for tag in self.pip_platforms():
            args += ["--platform", tag]
        return args

    def describe(self) -> dict:
        return {
            "python": self.python,
            "platform": self.platform or sysconfig.get_platform(),
            "machine": self.machine,
            "native": self.native,
        }


# -- making a wheelhouse ---------------------------------------------------------------


def milabench_requirements() -> list[str]:
    """milabench's own run-time dependencies (its metadata, extras left out)."""
    from importlib import metadata

    try:
        declared = metadata.requires("milabench") or []
    except metadata.PackageNotFoundError as err:
        raise EnvironmentMissing(
            "milabench is not installed as a package here ('pip install -e .' first), so its "
            "dependencies are unknown"
        ) from err
    return [r for r in declared if "extra ==" not in r and "extra==" not in r]


@dataclass
class BundleResult:
    """One part of a wheelhouse (an install group, or milabench itself)."""

    name: str
    ok: bool
    seconds: float
    pins: list[tuple[str, str]] = field(default_factory=list)
    message: str = ""


def _spec(name: str, step: str, argv: list[str], cwd: Path, env: dict[str, str]) -> ProcessSpec:
    return ProcessSpec(
        tag=[name],
        argv=argv,
        env={"PYTHONUNBUFFERED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env},
        cwd=str(cwd),
        node=None,
        data_channel="fd",
        timeout=3600.0,
        entry={"name": name, "tag": [name], "phase": "bundle", "step": step},
    )


@dataclass
class _Maker:
    """State of one `make_bundle` call: where files go and how commands are run."""

    output: Path
    target: Target
    system: dict
    logs: LogFolder
    echo: bool
    pip: PipSettings = field(default_factory=read_pip_settings)
    pip_cmd: list[str] = field(default_factory=pip_command)

    @property
    def staging(self) -> Path:
        return self.output / ".staging"

    def compile(self, name: str, inputs: list[Path], constraints: list[Path], index: list[str]):
        """``uv pip compile`` of ``inputs`` for the target; ``index`` in uv's spelling."""
        from milabench.config.options import get_option

        out = self.output / REQUIREMENTS / f"{name}.txt"
        strategy = get_option(self.system, "install.index_strategy", None)
        argv = [
            sys.executable, "-m", "uv", "pip", "compile", *[str(p) for p in inputs],
            "-o", str(out), *self.target.uv_args(), "--no-header", "--no-annotate",
            *self.pip.index_strategy_args(strategy, index),
        ]  # fmt: skip
        for path in constraints:
            argv += ["-c", str(path)]
        argv += index + self.pip.uv_args()
        spec = _spec(name, "compile", argv, self.logs.path, self.pip.uv_env())
        return out, run_step(spec, self.logs.sinks(), echo=self.echo)

    def download(self, name: str, pins: Path, index: list[str]):
        """``pip download --no-deps`` of every pin; ``index`` in pip's spelling."""
        argv = [
            *self.pip_cmd, "download", "--no-deps", "--progress-bar", "off",
            "--dest", str(self.staging), "-r", str(pins), *index, *self.target.pip_args(),
        ]  # fmt: skip
        return run_step(_spec(name, "download", argv, self.logs.path, {}), self.logs.sinks(),
                        echo=self.echo)  # fmt: skip

    def part(
        self,
        name: str,
        inputs: list[Path],
        constraints: list[Path],
        index: Sequence[str] = (),
        uv_index: Sequence[str] = (),
    ) -> BundleResult:
        """Compile one part's pins and download every pinned distribution."""
        start = time.perf_counter()
        pins_file, result = self.compile(name, inputs, constraints, list(uv_index))
        if not result.ok:
            return BundleResult(name, False, time.perf_counter() - start, [],
                                f"compile: {result.error}")  # fmt: skip
        pins = read_pins(pins_file)
        if pins:
            result = self.download(name, pins_file, list(index))
            if not result.ok:
                return BundleResult(name, False, time.perf_counter() - start, pins,
                                    f"download: {result.error}")  # fmt: skip
        return BundleResult(name, True, time.perf_counter() - start, pins)

    def reuse_wheels(self) -> None:
        """Move the wheels of a previous bundle into staging, where pip skips them."""
        for wheel in (self.output / WHEELS).glob("*.whl"):
            shutil.move(str(wheel), self.staging / wheel.name)

    def group(self, group: InstallGroup) -> BundleResult:
        """Bundle one install group: its requirement files plus what install adds on its
        command line, with its constraints; an empty pins file when it has nothing."""
        inputs = list(group.requirements)
        added = _added_requirements(group)
        if group.needs_voir:
            added += ["voir", "ptera"]
        if added:  # what install adds on its command line
            inputs.append(_log_file(self.logs, f"{group.name}.added.in", added))
        constraints = [group.constraints] if group.constraints else []
        if group.constraint_lines:
            name = f"{group.name}.constraints.txt"
            constraints.append(_log_file(self.logs, name, group.constraint_lines))
        if not inputs:
            (self.output / REQUIREMENTS / f"{group.name}.txt").write_text("")
            return BundleResult(group.name, True, 0.0)
        return self.part(group.name, inputs, constraints, group.index_args, _uv_index_args(group))

    def milabench(self) -> BundleResult:
        """Bundle milabench's own dependencies and its build backend."""
        source = self.output / REQUIREMENTS / f"{MILABENCH}.in"
        source.write_text("\n".join([*milabench_requirements(), *MILABENCH_BUILD]) + "\n")
        return self.part(MILABENCH, [source], [])

    def wheel_files(self, results: list[BundleResult]) -> list[dict] | None:
        """Once every part is resolved: build the sdists, move the pinned wheels into
        ``wheels/`` and return their records; None (and the failure recorded in
        ``results``) when a part failed, a build failed or a pin has no wheel."""
        if any(not r.ok for r in results):
            return None
        errors = self.build_sdists()
        if errors:
            results.append(BundleResult("sdists", False, 0.0, [], "; ".join(errors)))
            return None
        files = _collect(self.output, self.staging, results)
        found = {(f["package"], same_version(f["version"])) for f in files}
        for res in results:
            lost = [f"{n}=={v}" for n, v in res.pins if (n, same_version(v)) not in found]
            if lost:  # pip fetched something else than the pin: never a silent gap
                res.ok, res.message = False, f"no wheel of {', '.join(lost)} after download"
                return None
        return files

    def build_sdists(self) -> list[str]:
        """Turn each downloaded sdist into a wheel in the staging folder; errors as lines."""
        errors = []
        for sdist in sorted(self.staging.iterdir()):
            if sdist.suffix == ".whl" or not sdist.is_file():
                continue
            built = self.staging / ".built"
            argv = [*self.pip_cmd, "wheel", "--no-deps", "--progress-bar", "off",
                    "--wheel-dir", str(built), str(sdist)]  # fmt: skip
            result = run_step(_spec(sdist.name, "build", argv, self.logs.path, {}),
                              self.logs.sinks(), echo=self.echo)  # fmt: skip
            if not result.ok:
                errors.append(f"{sdist.name}: no wheel on the index and the build failed: "
                              f"{result.error}")  # fmt: skip
                continue
            for wheel in sorted(built.glob("*.whl")):
                _, abi, plat = wheel_tags(wheel.name)
                if not self.target.native and (abi, plat) != ("none", "any"):
                    errors.append(
                        f"{sdist.name}: no wheel on the index for the target, and its build "
                        f"here is for this machine only ({wheel.name}); bundle on a machine "
                        "like the node"
                    )
                    wheel.unlink()
                    continue
                os.replace(wheel, self.staging / wheel.name)
            sdist.unlink()
        return errors


def make_bundle(
    groups: list[InstallGroup],
    system: dict,
    output: Path,
    runs: Path,
    target: Target,
    *,
    with_milabench: bool = True,
    origin: dict | None = None,
    real_inputs: dict[str, dict] | None = None,
    echo: bool = False,
    say: Callable[[str], object] = print,
) -> tuple[list[BundleResult], Path | None, dict | None]:
    """Write the wheelhouse of ``groups`` into ``output`` (see module docstring).

    ``real_inputs``: what `bundle_inputs` copied into ``output/inputs`` (recorded in the
    manifest). Returns the result of each part, the log folder and the manifest (None
    when a part failed: then no manifest is written, and the folder is not a wheelhouse).
    """
    output = output.absolute()
    _start_folders(output)
    logs = LogFolder(runs, "bundle")
    results: list[BundleResult] = []
    manifest_groups: dict[str, dict] = {}
    try:
        maker = _Maker(output, target, system, logs, echo)
        maker.reuse_wheels()
        for group in groups:
            say(f"[{group.name}] pins for Python {target.python}, variant {group.variant}")
            res = maker.group(group)
            results.append(res)
            manifest_groups[group.name] = _group_record(group, res)
        own = None
        if with_milabench:
            say(f"[{MILABENCH}] milabench's own dependencies, for Python {target.python}")
            res = maker.milabench()
            results.append(res)
            own = {
                "requirements": f"{REQUIREMENTS}/{MILABENCH}.txt",
                "pins": [f"{n}=={v}" for n, v in res.pins],
            }
        files = maker.wheel_files(results)
        if files is None:
            return results, _logs_path(logs), None
    finally:
        logs.close()
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "milabench": _milabench_version(),
        **(origin or {}),
        "target": target.describe(),
        "groups": manifest_groups,
        "milabench_requirements": own,
        "files": files,
        "inputs": dict(real_inputs or {}),
    }
    _write_manifest(output, manifest)
    return results, _logs_path(logs), manifest


def _start_folders(output: Path) -> None:
    """Drop the manifest (``output`` is no wheelhouse until the end) and make the folders."""
    (output / MANIFEST).unlink(missing_ok=True)
    for sub in (WHEELS, REQUIREMENTS, ".staging"):
        (output / sub).mkdir(parents=True, exist_ok=True)


def _logs_path(logs: LogFolder) -> Path | None:
    """The log folder, when a step wrote into it."""
    return logs.path if logs.used else None


def _group_record(group: InstallGroup, res: BundleResult) -> dict:
    """The manifest's record of one bundled install group."""
    return {
        "variant": group.variant,
        "benchmarks": group.benchmarks,
        "fingerprint": group_fingerprint(group),
        "requirements": f"{REQUIREMENTS}/{group.name}.txt",
        "pins": [f"{n}=={v}" for n, v in res.pins],
    }


def _write_manifest(output: Path, manifest: dict) -> None:
    """``output/manifest.json``, written atomically (a temporary file, then a rename)."""
    tmp = output / f"{MANIFEST}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, output / MANIFEST)


def _uv_index_args(group: InstallGroup) -> list[str]:
    """The group's index directives in uv's spelling (a ``--torch-backend`` stays one),
    where the group has them; else pip's spelling, which uv reads too."""
    return list(getattr(group, "uv_index_args", None) or group.index_args)


def _added_requirements(group: InstallGroup) -> list[str]:
    """What install adds to a group's requirement files: the variant's ``--with``."""
    return list(getattr(group, "with_requirements", None) or []) if group.requirements else []


def _log_file(logs: LogFolder, name: str, lines: list[str]) -> Path:
    """A small input file written into the log folder (kept: it documents the bundle)."""
    logs.sinks()  # creates the folder
    path = logs.path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _collect(output: Path, staging: Path, results: list[BundleResult]) -> list[dict]:
    """Move the pinned wheels into ``wheels/`` (others are dropped); one record each."""
    wanted = {(n, same_version(v)) for r in results for n, v in r.pins}
    wheels = output / WHEELS
    files = []
    for path in sorted(staging.glob("*.whl")):
        key = wheel_key(path.name)
        if (key[0], same_version(key[1])) not in wanted:
            path.unlink()
            continue
        target = wheels / path.name
        os.replace(path, target)
        files.append({
            "name": path.name,
            "package": key[0],
            "version": key[1],
            "size": target.stat().st_size,
            "sha256": sha256_of(target),
        })  # fmt: skip
    shutil.rmtree(staging, ignore_errors=True)
    return files


def _milabench_version() -> str:
    from milabench import __version__

    return str(__version__)


# -- installing from a wheelhouse -------------------------------------------------------


@dataclass
class Wheelhouse:
    """A wheelhouse read back from its manifest (`read_wheelhouse`)."""

    path: Path
    manifest: dict

    @property
    def wheels(self) -> Path:
        return self.path / WHEELS

    def pins_file(self, group: str) -> Path:
        return self.path / REQUIREMENTS / f"{group}.txt"

    def files_by_key(self) -> dict[tuple[str, str], dict]:
        """The manifest's files by (name, `same_version`)."""
        files = self.manifest.get("files", [])
        return {(f["package"], same_version(f["version"])): f for f in files}

    def check_target(self) -> None:
        """This interpreter's version and this machine's architecture are the target's."""
        target = self.manifest.get("target") or {}
        if target.get("python") != this_python():
            raise UsageError(
                f"{self.path}: made for Python {target.get('python')}, this is Python "
                f"{this_python()} ({sys.executable}); run milabench bundle "
                f"--python-version {this_python()}"
            )
        if target.get("machine") and target["machine"] != platform.machine():
            raise UsageError(
                f"{self.path}: made for {target['machine']} machines, this one is "
                f"{platform.machine()}"
            )

    def check_file(self, record: dict, where: str) -> None:
        """One file of the manifest is present, with its sha256 (one line when not)."""
        path = self.wheels / record["name"]
        pkg = f"{record['package']}=={record['version']}"
        if not path.is_file():
            raise EnvironmentMissing(
                f"{self.path}: the wheel of {pkg} ({record['name']}, {where}) is missing; "
                "copy the whole wheelhouse again or run milabench bundle again"
            )
        if path.stat().st_size != record.get("size") or sha256_of(path) != record["sha256"]:
            raise EnvironmentMissing(
                f"{self.path}: the wheel of {pkg} ({record['name']}, {where}) does not match "
                "the sha256 of manifest.json (a damaged copy?); copy it again"
            )

    def check_pins(self, pins: list[str], where: str) -> None:
        """Each ``name==version`` has its file, present and intact (`check_file`)."""
        files = self.files_by_key()
        for pin in pins:
            package, _, version = pin.partition("==")
            record = files.get((package, same_version(version)))
            if record is None:
                raise EnvironmentMissing(
                    f"{self.path}: no wheel of {pin} ({where}) in manifest.json; "
                    "run milabench bundle again"
                )
            self.check_file(record, where)

    def check_group(self, group: InstallGroup) -> None:
        """The group was bundled, from the same requirement files and variant, complete."""
        bundled = self.manifest.get("groups") or {}
        record = bundled.get(group.name)
        if record is None:
            raise UsageError(
                f"{self.path}: install group {group.name!r} is not in this wheelhouse "
                f"(it has: {', '.join(sorted(bundled)) or 'none'}); run milabench bundle "
                "with this selection"
            )
        if record.get("variant") != group.variant:
            raise UsageError(
                f"{self.path}: install group {group.name!r} was bundled for variant "
                f"{record.get('variant')!r}, this install needs {group.variant!r}; run "
                f"milabench bundle --variant {group.variant}"
            )
        if record.get("fingerprint") != group_fingerprint(group):
            files = ", ".join(str(p) for p in group.requirements) or "none"
            raise UsageError(
                f"{self.path}: install group {group.name!r}: its requirement files or "
                f"constraints changed since the wheelhouse was made ({files}); run "
                "milabench bundle again"
            )
        if not self.pins_file(group.name).is_file():
            raise EnvironmentMissing(f"{self.pins_file(group.name)}: missing")
        self.check_pins(list(record.get("pins") or []), f"install group {group.name}")


def read_wheelhouse(path: Path) -> Wheelhouse:
    """The wheelhouse at ``path``; a usage error naming the file when it is not one."""
    path = Path(path).expanduser().absolute()
    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"{path}: not a wheelhouse (no {MANIFEST}; 'milabench bundle' writes it last)"
        ) from None
    except (OSError, ValueError) as err:
        raise UsageError(f"{manifest_path}: unreadable: {err}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format"), int):
        raise UsageError(f"{manifest_path}: not a milabench wheelhouse manifest")
    if manifest["format"] > FORMAT:
        raise UsageError(
            f"{manifest_path}: format {manifest['format']} is newer than this milabench "
            f"reads ({FORMAT}); upgrade milabench"
        )
    return Wheelhouse(path, manifest)


@dataclass
class OfflineBackend(Backend):
    """The chosen back-end, its package sources replaced by the wheelhouse alone.

    Every package source of the install command (the groups' index directives, pip's
    settings) is removed from its command line and replaced by ``--no-index --find-links
    <wheels>``; the directives still count in the input hash, so an environment installed
    offline is the one an online install makes. The group's bundled pins are added as
    constraints, and uv runs with ``--offline``.
    """

    wheelhouse: Wheelhouse | None = None

    def __post_init__(self) -> None:
        assert self.wheelhouse is not None
        self.pip = PipSettings(no_index=True, find_links=[str(self.wheelhouse.wheels)])
        self.pip_fallback = False  # no network to blame: the wheelhouse is the only source

    def install_spec(
        self, group: InstallGroup, cwd: Path, extra_constraints: Path | None
    ) -> ProcessSpec | None:
        assert self.wheelhouse is not None
        spec = super().install_spec(group, cwd, extra_constraints)
        if spec is None:
            return None
        argv = [*without_sources(spec.argv), "--no-index", "--find-links",
                str(self.wheelhouse.wheels), "-c", str(self.wheelhouse.pins_file(group.name))]  # fmt: skip
        if self.name == "uv":
            argv.append("--offline")
        env = {
            **spec.env,
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(self.wheelhouse.wheels),
            "UV_OFFLINE": "1",
        }
        return spec.evolve(argv=argv, env=env)


_SOURCE_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--torch-backend",
                   "-i", "-f")  # fmt: skip


def without_sources(argv: list[str]) -> list[str]:
    """``argv`` without its package sources: ``--no-index`` and each option of
    `_SOURCE_OPTIONS` with its value (``--opt VALUE`` or ``--opt=VALUE``)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--no-index" or word.split("=", 1)[0] in _SOURCE_OPTIONS and "=" in word:
            continue
        elif word in _SOURCE_OPTIONS:
            skip = True
        else:
            out.append(word)
    return out


def install_offline(
    groups: list[InstallGroup],
    system: dict,
    runs: Path,
    wheelhouse: Path,
    *,
    force: bool = False,
    backend: str | None = None,
    into_current_env: bool = False,
    echo: bool = False,
    say: Callable[[str], object] = print,
) -> tuple[list[GroupResult], Path | None]:
    """``milabench install --offline``: `install_all` with the wheelhouse as only source.

    The wheelhouse is checked first (target, and for every group that will be installed:
    bundled, same requirement files and variant, each pinned wheel present with its
    sha256); any problem is raised as one line before anything is installed. Groups that
    are up to date are neither checked nor touched. The bundled inputs that the groups'
    entries read are placed in their data folders first (`place_inputs`).
    """
    house = read_wheelhouse(wheelhouse)
    house.check_target()
    todo = []
    for group in groups:
        if group.use_current_env:
            if into_current_env:
                todo.append(group)
        elif force or not is_up_to_date(group, input_hash(install_inputs(group))):
            todo.append(group)
    for group in todo:
        house.check_group(group)
    entries = [e for g in groups for e in g.entries]
    wanted = set(entry_inputs(entries))
    carried = [n for n in house.manifest.get("inputs") or {} if n in wanted]
    if carried:
        place_inputs(house.path, data_folders(entries), carried, say=say)
    chosen = OfflineBackend(backend or backend_name(system), system, wheelhouse=house)
    return install_all(
        groups,
        system,
        runs,
        force=force,
        backend=chosen,
        into_current_env=into_current_env,
        echo=echo,
        say=say,
    )


# -- real inputs ---------------------------------------------------------------------------


def entry_inputs(entries: Sequence[Any]) -> list[str]:
    """The catalogue's inputs of ``entries`` (by name), each once, in entry order."""
    from benchshared.catalogue import inputs_for

    names: list[str] = []
    for entry in entries:
        names += [n for n in inputs_for(entry.name) if n not in names]
    return names


def data_folders(entries: Sequence[Any]) -> list[Path]:
    """The distinct ``dirs.data`` of ``entries`` (where their inputs live)."""
    found: list[Path] = []
    for entry in entries:
        data = entry.dirs.data
        if data is not None and Path(data) not in found:
            found.append(Path(data))
    return found


def _same_input(folder: Path, manifest: dict) -> bool:
    """True when ``folder`` already holds ``manifest``'s input, complete."""
    from benchshared.inputs import locate, read_manifest

    have = read_manifest(folder)
    return (
        have is not None
        and have.get("revision") == manifest.get("revision")
        and have.get("files") == manifest.get("files")
        and locate(folder.name, folder.parent) is not None
    )


def _copy_file(source: Path, target: Path) -> None:
    """A hard link when both are on one file system, else a copy (never a symlink)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _copy_input(source: Path, target: Path, manifest: dict) -> None:
    """The files of ``manifest`` from ``source`` to ``target``, the manifest last."""
    (target / INPUT_MANIFEST).unlink(missing_ok=True)
    for rel in sorted(manifest.get("files", {})):
        _copy_file(source / rel, target / rel)
    tmp = target / f"{INPUT_MANIFEST}.tmp{os.getpid()}"
    shutil.copyfile(source / INPUT_MANIFEST, tmp)
    os.replace(tmp, target / INPUT_MANIFEST)


def bundle_inputs(
    output: Path,
    names: Sequence[str],
    data: Sequence[Path],
    *,
    say: Callable[[str], object] = print,
) -> tuple[dict[str, dict], list[str]]:
    """Copy each prepared input of ``names`` (found under ``<data>/inputs``) into
    ``output/inputs/<name>/``; inputs bundled before and unchanged are kept.

    Returns the manifest's ``inputs`` record ``{name: {source, revision, files, size}}``
    and the names not prepared in any of ``data`` (a note each; nothing fails).
    """
    from benchshared.inputs import locate, read_manifest

    record: dict[str, dict] = {}
    missing: list[str] = []
    for name in names:
        folder = next(
            (f for f in (locate(name, Path(d) / "inputs") for d in data) if f is not None),
            None,
        )
        manifest = read_manifest(folder) if folder is not None else None
        if folder is None or manifest is None:
            missing.append(name)
            continue
        target = Path(output) / INPUTS / name
        if not _same_input(target, manifest):
            say(f"[inputs] {name}: copying {len(manifest['files'])} files from {folder}")
            _copy_input(folder, target, manifest)
        record[name] = {
            "source": manifest.get("source"),
            "revision": manifest.get("revision"),
            "files": len(manifest["files"]),
            "size": sum(int(f.get("size", 0)) for f in manifest["files"].values()),
        }
    return record, missing


def place_inputs(
    wheelhouse: Path,
    data: Sequence[Path],
    names: Sequence[str] | None = None,
    *,
    say: Callable[[str], object] = print,
) -> list[str]:
    """Put the wheelhouse's inputs (``names``, default all) into ``<data>/inputs/`` for
    each data folder, each file checked against its input manifest's sha256 first.

    An input already there with the same revision and files is left alone. Returns the
    names placed; a missing or damaged file is a `UsageError` naming it (nothing of that
    input is placed: its manifest is written last).
    """
    from benchshared.inputs import read_manifest

    house = read_wheelhouse(wheelhouse)
    bundled = house.manifest.get("inputs") or {}
    chosen = list(bundled) if names is None else [n for n in names if n in bundled]
    placed: list[str] = []
    for name in chosen:
        source = house.path / INPUTS / name
        manifest = read_manifest(source)
        if manifest is None:
            raise UsageError(f"{source}: bundled input {name} has no {INPUT_MANIFEST}")
        for rel, info in manifest.get("files", {}).items():
            path = source / rel
            if not path.is_file() or sha256_of(path) != info.get("sha256"):
                raise UsageError(
                    f"{path}: bundled input {name} is damaged (missing, or its sha256 differs "
                    "from the input's manifest); bundle it again"
                )
        for folder in data:
            target = Path(folder) / "inputs" / name
            if _same_input(target, manifest):
                continue
            _copy_input(source, target, manifest)
            say(f"[inputs] {name} ({manifest.get('revision')}) placed in {target}")
            placed.append(name)
    return placed


def summary(results: list[BundleResult], manifest: dict | None, output: Path) -> str:
    """One line per part (pins, time, or the error), then the wheelhouse's size."""
    lines = []
    for r in results:
        state = "ok" if r.ok else "failed"
        detail = f"{len(r.pins)} pins" if r.ok else r.message
        lines.append(f"{r.name}: {state} ({r.seconds:.1f} s) {detail}")
    if manifest is not None:
        files = manifest["files"]
        size = sum(f["size"] for f in files)
        lines.append(
            f"wheelhouse: {output} ({len(files)} wheels, {size / 2**20:.1f} MiB, "
            f"Python {manifest['target']['python']} on {manifest['target']['platform']})"
        )
        carried = manifest.get("inputs") or {}
        if carried:
            size = sum(i["size"] for i in carried.values())
            lines.append(
                f"inputs: {', '.join(carried)} ({size / 2**20:.1f} MiB) in {output / INPUTS}"
            )
    return "\n".join(lines)
