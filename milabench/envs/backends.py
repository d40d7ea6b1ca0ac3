"""The commands that build an environment, as `ProcessSpec`s (nothing is started here).

Two back-ends produce the same environment:

* ``uv`` (default, fast): ``python -m uv venv --python <this interpreter>`` then ``uv pip
  install --python <venv>/bin/python ...``. uv ignores pip's configuration, so the
  user's pip sources are forwarded (`milabench.envs.pipconf`) and the index strategy is
  pip's ("best version across every index", option ``install.index_strategy``).
* ``pip`` (fallback): ``python -m virtualenv --python <this interpreter>`` then the
  environment's own ``pip install``, which reads pip's configuration itself.

The back-end is chosen with option ``install.backend`` (``uv`` | ``pip``). When uv's
install fails for a network reason (`milabench.envs.netcause`), `Backend.fallback_spec`
is the same install by pip (`pip_command`, ``--python <venv>/bin/python``: a uv
environment has no pip of its own), tried once (`milabench.envs.install`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from milabench.envs.groups import InstallGroup
from milabench.envs.pipconf import PipSettings, read_pip_settings
from milabench.errors import EnvironmentMissing, UsageError
from milabench.plan.spec import ProcessSpec

BACKENDS = ("uv", "pip")
INSTALL_TIMEOUT = 3600.0

# Imports every key module given on the command line; one line per failure on stderr
# ("validation: import X failed: ..."), the versions found on stdout, exit 1 on failure.
VALIDATE_SCRIPT = """\
import importlib, json, sys
failed, versions = [], {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
    except BaseException as err:
        failed.append(name)
        msg = str(err).splitlines()[0] if str(err) else ""
        print(f"validation: import {name} failed: {type(err).__name__}: {msg}",
              file=sys.stderr, flush=True)
    else:
        versions[name] = str(getattr(module, "__version__", ""))
print("validation: " + json.dumps({"prefix": sys.prefix, "versions": versions}), flush=True)
sys.exit(1 if failed else 0)
"""


def pip_command() -> list[str]:
    """A pip to run from this interpreter: virtualenv's bundled pip wheel (virtualenv is a
    dependency of milabench, so it is always there, and recent: ``--python`` needs pip
    22.3), else this interpreter's pip."""
    try:
        from virtualenv.seed.wheels.embed import BUNDLE_FOLDER, BUNDLE_SUPPORT

        version = "{}.{}".format(*sys.version_info[:2])
        name = BUNDLE_SUPPORT.get(version, {}).get("pip")
        if name and (Path(BUNDLE_FOLDER) / name).is_file():
            return [sys.executable, str(Path(BUNDLE_FOLDER) / name / "pip")]
    except (ImportError, AttributeError):
        pass
    import importlib.util

    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    raise EnvironmentMissing("no pip to run: install pip or virtualenv")


def backend_name(system: dict) -> str:
    """Option ``install.backend``; an unknown value is a usage error."""
    from milabench.config.options import get_option

    value = str(get_option(system, "install.backend", "uv")).strip().lower()
    if value not in BACKENDS:
        raise UsageError(f"option install.backend: unknown back-end {value!r} (use uv or pip)")
    return value


def _group_entry(group: InstallGroup, step: str) -> dict:
    """What the ``config`` event of an install step records (not a benchmark entry)."""
    return {
        "name": group.name,
        "tag": [group.name],
        "install_group": group.name,
        "phase": "install",
        "step": step,
        "benchmarks": group.benchmarks,
        "dirs": {"venv": str(group.venv)},
    }


def _spec(
    group: InstallGroup,
    step: str,
    argv: list[str],
    cwd: Path,
    timeout: float = INSTALL_TIMEOUT,
    env: dict[str, str] | None = None,
) -> ProcessSpec:
    return ProcessSpec(
        tag=[group.name],
        argv=argv,
        env={"PYTHONUNBUFFERED": "1", **(env or {})},
        cwd=str(cwd),
        node=None,
        data_channel="fd",
        timeout=timeout,
        entry=_group_entry(group, step),
    )


def requirement_args(
    group: InstallGroup, extra_constraints: Path | None, *, uv: bool = False
) -> list[str]:
    """``-r``/``-c`` options, index directives, the variant's ``--with`` requirements and
    the entries' pip args. ``uv``: the index options in uv's spelling (a ``--torch-backend``
    directive stays ``--torch-backend``; pip gets PyTorch's index URL instead)."""
    args: list[str] = []
    for req in group.requirements:
        args += ["-r", str(req)]
    if group.constraints is not None:
        args += ["-c", str(group.constraints)]
    if extra_constraints is not None:
        args += ["-c", str(extra_constraints)]
    args += group.uv_index_args if uv else group.index_args
    args += group.pip_args
    if group.requirements:
        args += group.with_requirements
    if group.needs_voir:
        args += ["voir", "ptera"]
    return args


@dataclass
class Backend:
    """Builds the create/install commands of one back-end."""

    name: str
    system: dict
    pip: PipSettings | None = None
    #: a uv install that fails for a network reason is tried once more with pip
    #: (option ``install.pip_fallback``, default true; never from a wheelhouse)
    pip_fallback: bool = True

    def __post_init__(self) -> None:
        if self.pip is None and self.name == "uv":
            self.pip = read_pip_settings()

    def create_spec(self, group: InstallGroup, cwd: Path) -> ProcessSpec:
        if self.name == "uv":
            argv = [
                sys.executable,
                "-m",
                "uv",
                "venv",
                "--quiet",
                "--python",
                sys.executable,
                str(group.venv),
            ]
        else:
            argv = [
                sys.executable,
                "-m",
                "virtualenv",
                "--quiet",
                "--python",
                sys.executable,
                str(group.venv),
            ]
        return _spec(group, "create", argv, cwd, timeout=600.0)

    def install_argv(self, python: Path, args: list[str]) -> list[str]:
        """The install command for ``args`` (requirements and options) into ``python``."""
        if self.name == "uv":
            from milabench.config.options import get_option

            strategy = get_option(self.system, "install.index_strategy", None)
            assert self.pip is not None
            return [
                sys.executable,
                "-m",
                "uv",
                "pip",
                "install",
                "--python",
                str(python),
                *self.pip.index_strategy_args(strategy, args),
                *self.pip.uv_args(),
                *args,
            ]
        return [str(python), "-m", "pip", "install", *args]

    def install_spec(
        self, group: InstallGroup, cwd: Path, extra_constraints: Path | None
    ) -> ProcessSpec | None:
        """None when the group has nothing to install (no requirements, no voir)."""
        args = requirement_args(group, extra_constraints, uv=self.name == "uv")
        if not group.requirements and not group.needs_voir and not group.pip_args:
            return None
        env = self.pip.uv_env() if self.name == "uv" and self.pip is not None else {}
        return _spec(group, "install", self.install_argv(group.python, args), cwd, env=env)

    def can_fall_back(self) -> bool:
        """uv, with the fallback allowed (`pip_fallback` and ``install.pip_fallback``)."""
        from milabench.config.options import get_option

        if self.name != "uv" or not self.pip_fallback:
            return False
        value = get_option(self.system, "install.pip_fallback", True)
        return str(value).strip().lower() not in ("0", "false", "no", "off")

    def fallback_spec(
        self, group: InstallGroup, cwd: Path, extra_constraints: Path | None
    ) -> ProcessSpec | None:
        """The install step by pip into the environment uv made (pip reads its own
        configuration); ``--no-input``: a 401 must fail, not wait for a password."""
        if not group.requirements and not group.needs_voir and not group.pip_args:
            return None
        args = requirement_args(group, extra_constraints, uv=False)
        argv = [*pip_command(), "--python", str(group.python), "install", "--no-input",
                "--progress-bar", "off", "--disable-pip-version-check", *args]  # fmt: skip
        return _spec(group, "install (pip)", argv, cwd)


def validate_spec(group: InstallGroup, cwd: Path) -> ProcessSpec:
    """``python -c`` importing benchkit, benchshared, voir (when used) and every key import."""
    modules = ["benchkit", "benchshared"]
    if group.needs_voir:
        modules.append("voir")
    modules += [m for m in group.key_imports if m not in modules]
    # -I: neither the working folder nor PYTHONPATH may make an import succeed by accident
    argv = [str(group.python), "-I", "-c", VALIDATE_SCRIPT, *modules]
    return _spec(group, "validate", argv, cwd, timeout=600.0)
