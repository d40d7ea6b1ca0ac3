"""Install the test dependencies (`.[test]`) with a CPU build of torch where one is reachable.

Usage::

    python scripts/install_test_deps.py [--dry-run] [--cpu-index URL]

The `test` extra pins ``torch==2.13.0``. Which build pip picks for that pin depends on
pip's settings: the machine's ``find-links`` or index may hold the CPU build (as on the
development and CI machines), while PyPI's Linux wheel is a CUDA build that pulls several
GB of ``nvidia-*`` packages the tests never use. So the script asks pip, with the
machine's own settings, which torch it would install (``pip install --dry-run --report``);
when that is a CUDA build it adds PyTorch's CPU index (``--extra-index-url``, the
``+cpu`` build then wins) if the index answers, else it says in one line that the CUDA
build will be installed. Then it runs ``pip install -e '.[test]'`` in the repository.
Exit status: pip's. Standard library only (docs/testing.md, "Two tiers").
"""

from __future__ import annotations

import argparse
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


def install_command(pip: list[str], cpu_index: str, say=print) -> list[str]:
    """The pip command that installs `.[test]` with a CPU build of torch if one is
    reachable; says one line about the build chosen."""
    command = [*pip, "install", "-e", ".[test]"]
    planned = planned_torch(pip)
    if not planned:
        say("install_test_deps: pip could not plan torch; installing with pip's settings")
        return command
    version = (planned.get("metadata") or {}).get("version")
    if not is_cuda_build(planned):
        say(f"install_test_deps: torch {version} from pip's settings (no CUDA build)")
        return command
    why = index_answers(cpu_index)
    if why is None:
        say(f"install_test_deps: torch's CPU build from {cpu_index} (pip's settings give CUDA)")
        return [*command, "--extra-index-url", cpu_index]
    say(f"install_test_deps: note: no CPU build of torch reachable ({cpu_index}: {why}); "
        f"installing torch {version}, a CUDA build (several GB)")  # fmt: skip
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the pip command only")
    parser.add_argument("--cpu-index", default=os.environ.get("TORCH_CPU_INDEX", CPU_INDEX),
                        help=f"PyTorch's CPU wheel index (default {CPU_INDEX})")  # fmt: skip
    args = parser.parse_args(argv)
    pip = [sys.executable, "-m", "pip"]
    command = install_command(pip, args.cpu_index)
    if args.dry_run:
        print(" ".join(command))
        return 0
    return subprocess.run(command, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
