"""Install the test dependencies (`.[test]`) with a CPU build of torch where one is reachable.

Usage::

    python scripts/install_test_deps.py [--dry-run] [--cpu-index URL] [--pip]

The `test` extra pins ``torch==2.13.0``. Which build pip picks for that pin depends on
pip's settings: the machine's ``find-links`` or index may hold the CPU build (as on the
development and CI machines), while PyPI's Linux wheel is a CUDA build that pulls several
GB of ``nvidia-*`` packages the tests never use. So the script asks pip, with the
machine's own settings, which torch it would install (``pip install --dry-run --report``);
when that is a CUDA build it adds PyTorch's CPU index (``--extra-index-url``, the
``+cpu`` build then wins) if the index answers, else it says in one line that the CUDA
build will be installed. Then it installs ``-e '.[test]'`` in the repository with uv
(``pip install uv`` first where it is missing): the same packages in a third of pip's time.
uv ignores pip's configuration, so it is handed pip's settings as milabench hands them
to its own installs (milabench/envs/pipconf.py, loaded by path: standard library only),
with ``--compile-bytecode`` as pip compiles. Where uv cannot be had or its install fails,
one line says so and pip installs instead; ``--pip`` asks for pip alone. Exit status:
the installer's (docs/testing.md, "Two tiers").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # the `test` extra's pin (pyproject.toml)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 8.0
TARGET = ["-e", ".[test]"]  # what the script installs, from the repository
PIPCONF = REPO / "milabench" / "envs" / "pipconf.py"


def planned_torch(pip: list[str]) -> dict:
    """The torch pip would install with the machine's settings: the ``install`` item of
    ``pip install --dry-run --report`` (``metadata``, ``download_info``); {} when pip
    cannot say (an old pip, no index reachable)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        argv = [*pip, "install", "--dry-run", "--quiet", "--ignore-installed", "--no-deps",
                "--report", str(report), TORCH]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not report.is_file():
            return {}
        items = json.loads(report.read_text(encoding="utf-8")).get("install") or []
    return items[0] if items else {}


def is_cuda_build(item: dict, platform: str = sys.platform) -> bool:
    """Whether the planned torch is a CUDA build: a ``+cu...`` local version, or (PyPI's
    Linux wheels) requirements on NVIDIA's runtime packages."""
    metadata = item.get("metadata") or {}
    version = str(metadata.get("version") or "")
    if "+" in version:
        return version.split("+", 1)[1].startswith("cu")
    if not platform.startswith("linux"):
        return False
    requires = metadata.get("requires_dist") or []
    return any(str(r).lower().startswith(("nvidia-", "cuda-")) for r in requires)


def index_answers(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the index serves torch's project page, else why not (one phrase)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))


def cpu_index_args(pip: list[str], cpu_index: str, say=print) -> list[str]:
    """``["--extra-index-url", cpu_index]`` where pip's settings give a CUDA build of torch
    and the CPU index answers, else []; says one line about the build chosen."""
    planned = planned_torch(pip)
    if not planned:
        say("install_test_deps: pip could not plan torch; installing with pip's settings")
        return []
    version = (planned.get("metadata") or {}).get("version")
    if not is_cuda_build(planned):
        say(f"install_test_deps: torch {version} from pip's settings (no CUDA build)")
        return []
    why = index_answers(cpu_index)
    if why is None:
        say(f"install_test_deps: torch's CPU build from {cpu_index} (pip's settings give CUDA)")
        return ["--extra-index-url", cpu_index]
    say(f"install_test_deps: note: no CPU build of torch reachable ({cpu_index}: {why}); "
        f"installing torch {version}, a CUDA build (several GB)")  # fmt: skip
    return []


def install_command(pip: list[str], cpu_index: str, say=print) -> list[str]:
    """The pip command that installs `.[test]` with a CPU build of torch if one is
    reachable; says one line about the build chosen."""
    return [*pip, "install", *TARGET, *cpu_index_args(pip, cpu_index, say)]


def _pipconf():
    """milabench/envs/pipconf.py, loaded by path (milabench is not installed yet)."""
    spec = importlib.util.spec_from_file_location("_milabench_pipconf", PIPCONF)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def uv_command(python: str, target: list[str], extra: list[str], environ=None):
    """``(argv, env)`` of the uv install of ``target`` into ``python`` that sees what pip
    would: pip's sources, certificates, proxy and timeouts as uv options and variables
    (pipconf.py), ``extra`` (the CPU index) added, bytecode compiled as pip does."""
    environ = os.environ if environ is None else environ
    settings = _pipconf().read_pip_settings(environ)
    argv = [python, "-m", "uv", "pip", "install", "--python", python, "--compile-bytecode",
            *target, *settings.uv_args(), *settings.index_strategy_args(None, extra),
            *extra]  # fmt: skip
    return argv, {**environ, **settings.uv_env()}


def has_uv(python: str) -> bool:
    """Whether ``python`` can run ``-m uv``."""
    probe = [python, "-c", "import importlib.util, sys; "
             "sys.exit(importlib.util.find_spec('uv') is None)"]  # fmt: skip
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def install(python: str, target: list[str], cpu_index: str, use_uv: bool = True,
            cwd: Path = REPO, say=print) -> int:  # fmt: skip
    """Install ``target`` into ``python``: with uv where it can be had (``pip install uv``
    when missing) and succeeds, else with pip; the installer's exit status."""
    pip = [python, "-m", "pip"]
    extra = cpu_index_args(pip, cpu_index, say)
    if use_uv and not has_uv(python):
        got = subprocess.run([*pip, "install", "--quiet", "uv"], cwd=cwd, check=False)
        if got.returncode != 0:
            say(f"install_test_deps: note: pip could not install uv (exit {got.returncode}); "
                "installing with pip")  # fmt: skip
            use_uv = False
    if use_uv:
        argv, env = uv_command(python, target, extra)
        done = subprocess.run(argv, cwd=cwd, env=env, check=False)
        if done.returncode == 0:
            return 0
        say(f"install_test_deps: note: the uv install failed (exit {done.returncode}); "
            "installing with pip")  # fmt: skip
    return subprocess.run([*pip, "install", *target, *extra], cwd=cwd, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the pip command only")
    parser.add_argument("--cpu-index", default=os.environ.get("TORCH_CPU_INDEX", CPU_INDEX),
                        help=f"PyTorch's CPU wheel index (default {CPU_INDEX})")  # fmt: skip
    parser.add_argument("--pip", action="store_true", help="install with pip, not uv")
    args = parser.parse_args(argv)
    if args.dry_run:  # the command that runs first (uv's, pip's with --pip)
        pip = [sys.executable, "-m", "pip"]
        if args.pip:
            print(" ".join(install_command(pip, args.cpu_index)))
        else:
            extra = cpu_index_args(pip, args.cpu_index)
            print(" ".join(uv_command(sys.executable, TARGET, extra)[0]))
        return 0
    return install(sys.executable, TARGET, args.cpu_index, use_uv=not args.pip)


if __name__ == "__main__":
    sys.exit(main())
