"""A copy, on this machine, of the GPU machine's Python (first-light rehearsal).

`build_image_env(dest)` makes a Python 3.12 virtual environment at `dest` holding the
versions of `image-nvidia-h200.txt` (the image's package list, read here, never repeated
in code), CPU builds where the image has CUDA-only packages, then removes pip from it, as
on the GPU machine; milabench is not installed. A complete environment (its marker holds a
hash of what was asked) is reused as is. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGE_LIST = HERE / "image-nvidia-h200.txt"
MARKER = "imageenv-complete.json"
LOG = "imageenv-install.log"

# Packages of the image that only work with a GPU: the rehearsal runs on a CPU, where
# jaxlib alone is JAX's CPU back-end (the CUDA build of torch runs on a CPU as it is).
CPU_SKIP = frozenset({"jax-cuda13-plugin", "jax-cuda13-pjrt"})

# Where this environment differs from the image's versions, because a pinned version does
# not exist on PyPI: {name: (image's version, version installed here)}. Empty: every
# pinned version of image-nvidia-h200.txt was found on PyPI (checked 2026-11).
DEVIATIONS: dict[str, tuple[str, str]] = {}


class ImageEnvError(RuntimeError):
    """The environment cannot be built; the message is one line."""


def read_image_list(path: Path = IMAGE_LIST) -> tuple[str, list[str]]:
    """(python version, requirement lines) of the image's package list."""
    python = None
    reqs: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            found = re.match(r"#\s*python:\s*(\d+\.\d+)", line)
            if found:
                python = found.group(1)
            continue
        name = re.split(r"[=<>!~\[ ;]", line, maxsplit=1)[0]
        if canonical(name) in CPU_SKIP:
            continue
        if canonical(name) in DEVIATIONS:
            line = f"{name}=={DEVIATIONS[canonical(name)][1]}"
        reqs.append(line)
    if python is None:
        raise ImageEnvError(f"{path}: no '# python: X.Y' line")
    return python, reqs


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requested_hash(python: str, reqs: list[str]) -> str:
    text = json.dumps({"python": python, "requirements": sorted(reqs)})
    return hashlib.sha256(text.encode()).hexdigest()


def _version_of(exe: str) -> str | None:
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str = "3.12") -> str:
    """`pythonX.Y` on PATH, else in pyenv's versions folder; ImageEnvError if neither."""
    candidates = []
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    versions = root / "versions"
    if versions.is_dir():
        found = sorted(
            versions.glob(f"{version}.*/bin/python{version}"),
            key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)],
            reverse=True,
        )
        candidates.extend(str(p) for p in found)
    for exe in candidates:
        if _version_of(exe) == version:
            return exe
    raise ImageEnvError(
        f"Python {version} not found: no working python{version} on PATH nor under {versions}"
    )


def _complete(dest: Path, digest: str) -> bool:
    marker = dest / MARKER
    python = dest / "bin" / "python"
    if not (marker.is_file() and python.exists()):
        return False
    try:
        return json.loads(marker.read_text()).get("hash") == digest
    except (OSError, ValueError):
        return False


def _clean_env() -> dict[str, str]:
    """This process's variables less those that would put another Python's modules in
    the environment's interpreter (the caller's PYTHONPATH: the repository, say)."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(argv: list[str], log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        try:
            rc = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=_clean_env()
            ).returncode
        except OSError as exc:
            raise ImageEnvError(f"{what} could not start: {exc}") from None
    if rc != 0:
        last = ""
        for line in log.read_text(errors="replace").splitlines():
            if line.strip():
                last = line.strip()
        raise ImageEnvError(f"{what} failed (exit {rc}): {last[:300]} (log: {log})")


def build_image_env(dest: Path, *, say=print) -> Path:
    """Create (or reuse) the image's environment at `dest`; return its python."""
    dest = Path(dest).absolute()
    version, reqs = read_image_list()
    digest = requested_hash(version, reqs)
    python = dest / "bin" / "python"
    if _complete(dest, digest):
        say(f"image env: reusing {dest}")
        return python
    base = find_python(version)
    if dest.exists():
        if any(dest.iterdir()) and not (dest / "pyvenv.cfg").exists():
            raise ImageEnvError(f"{dest} exists and is not a virtual environment")
        say(f"image env: {dest} is incomplete, rebuilding it")
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    log = dest.parent / f"{dest.name}.{LOG}"
    log.write_text("")
    start = time.monotonic()
    say(f"image env: creating {dest} with {base}")
    _run([base, "-m", "venv", str(dest)], log, f"python{version} -m venv")
    if DEVIATIONS:
        for name, (image, here) in sorted(DEVIATIONS.items()):
            say(f"image env: {name} {here} instead of the image's {image} (not on PyPI)")
    say(f"image env: installing {len(reqs)} packages (log: {log})")
    reqfile = dest / "image-requirements.txt"
    reqfile.write_text("\n".join(reqs) + "\n")
    _run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-r", str(reqfile)],
        log,
        "pip install of the image's packages",
    )
    _run([str(python), "-m", "pip", "uninstall", "-y", "pip"], log, "removing pip")
    probe = subprocess.run(
        [str(python), "-I", "-m", "pip", "--version"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        raise ImageEnvError(f"pip is still importable in {dest} after its removal")
    probe = subprocess.run(
        [str(python), "-I", "-c", "import milabench"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        raise ImageEnvError(f"milabench is importable in {dest}: it must not be")
    (dest / MARKER).write_text(
        json.dumps(
            {
                "hash": digest,
                "python": version,
                "requirements": reqs,
                "deviations": DEVIATIONS,
                "seconds": round(time.monotonic() - start, 1),
            },
            indent=1,
        )
        + "\n"
    )
    say(f"image env: ready in {time.monotonic() - start:.0f} s: {python}")
    return python


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    dest = Path(args[0]) if args else Path("/work/fl-image-env")
    try:
        print(build_image_env(dest))
    except ImageEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
