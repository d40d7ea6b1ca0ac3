"""milabench made importable in the GPU machine's Python, from a carried wheelhouse.

The machine's Python has the frameworks but not milabench's own dependencies, maybe no
pip, and no network. `make_importable`:

1. checks ``python -I -c "import milabench, benchkit, benchshared, omegaconf"``: ``-I``
   as milabench's own import check runs (PYTHONPATH does not count), so what passes here
   passes there;
2. otherwise installs every wheel of ``WHEELHOUSE/wheels`` into ``OUT/site`` with
   ``pip install --no-index --no-deps --target`` (the wheelhouse holds exactly what the
   image lacks, one version each): with the Python's own pip, else with pip's wheel
   carried in the wheelhouse (``python WHEELHOUSE/pip-X.whl/pip``: pip runs from its
   wheel);
3. writes ``milabench-first-light.pth`` into the Python's ``purelib``: the repository,
   ``benchmarks/_shared`` and ``OUT/site``, appended after the environment's own
   packages (what the image has always wins). `remove_pth` takes it out again at the
   end of the call;
4. where that folder cannot be written (a read-only image, another owner), makes an
   overlay instead (`overlay`): a venv ``OUT/venv`` of the same interpreter whose .pth
   adds the Python's own site folders first, then the same three; the Python's console
   scripts (``torchrun``, ...) are copied into its ``bin`` pointing at the overlay, and
   the call runs milabench with the overlay's Python (`Setup.python`).

Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from firstlight.procs import Deadline, run_bounded

PTH_NAME = "milabench-first-light.pth"
PROBE = "import milabench, benchkit, benchshared, omegaconf, yaml, psutil"


class SetupError(Exception):
    """milabench cannot be made importable: one line for the user."""


@dataclass
class Setup:
    """What `make_importable` did: the .pth it wrote into the Python's own folder (None
    if nothing was needed, or for an overlay) and the overlay's Python (None if none)."""

    pth: Path | None
    installed: list[str]
    how: str
    python: str | None = None


def _run(argv: list[str], deadline: Deadline) -> subprocess.CompletedProcess:
    """A short probe, bounded by the call's deadline (a minute at most)."""
    timeout = min(60.0, deadline.left() - 20.0)
    if timeout < 1:
        raise SetupError("no time left in the budget to set milabench up")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SetupError(f"{' '.join(argv[:3])} ... did not answer in {timeout:.0f} s") from None


def importable(python: str, deadline: Deadline) -> tuple[bool, str]:
    """Whether milabench and its runtime imports load in ``python -I``; the error line."""
    proc = _run([python, "-I", "-c", PROBE], deadline)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode == 0, last


def purelib(python: str, deadline: Deadline) -> Path:
    """The folder of the Python's own pure-Python packages (its site-packages)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = _run([python, "-I", "-c", code], deadline)
    if out.returncode != 0:
        raise SetupError(f"{python} cannot say where its packages are: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def has_pip(python: str, deadline: Deadline) -> bool:
    return _run([python, "-m", "pip", "--version"], deadline).returncode == 0


def read_manifest(house: Path) -> dict:
    """The wheelhouse's ``manifest.json`` ({} for a folder of wheels without one)."""
    try:
        return json.loads((house / "manifest.json").read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise SetupError(f"{house / 'manifest.json'}: unreadable ({err})") from None


def pip_argv(python: str, house: Path, manifest: dict, deadline: Deadline) -> tuple[list[str], str]:
    """How to run pip in ``python``: its own, else the wheel the wheelhouse carries."""
    if has_pip(python, deadline):
        return [python, "-m", "pip"], "the Python's own pip"
    name = manifest.get("pip")
    wheels = [house / name] if name else sorted(house.glob("pip-*.whl"))
    if not wheels or not wheels[0].is_file():
        raise SetupError(
            f"{python} has no pip and {house} carries no pip wheel (pip-*.whl); "
            "make the wheelhouse with scripts/first_light_wheelhouse.py"
        )
    return [python, str(wheels[0] / "pip")], f"pip from {wheels[0].name}"


def make_importable(
    python: str, repo: Path, house: Path | None, out: Path, deadline: Deadline
) -> Setup:
    """Make ``import milabench`` work in ``python -I`` (see the module docstring)."""
    ok, _ = importable(python, deadline)
    if ok:
        return Setup(None, [], "already importable")
    if house is None:
        raise SetupError(
            f"milabench is not importable in {python}; give --wheelhouse DIR (made by "
            "scripts/first_light_wheelhouse.py) to install its dependencies from"
        )
    manifest = read_manifest(house)
    wheels = sorted((house / "wheels").glob("*.whl"))
    site = out / "site"
    if wheels:
        pip, how = pip_argv(python, house, manifest, deadline)
        argv = [*pip, "install", "--no-index", "--no-deps", "--upgrade", "--target",
                str(site), "--disable-pip-version-check", *map(str, wheels)]  # fmt: skip
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PYTHONNOUSERSITE": "1"}
        env.pop("PYTHONPATH", None)
        done = run_bounded(argv, timeout=min(180.0, deadline.left() - 25), grace=2.0,
                           log=out / "logs" / "setup.txt", env=env)  # fmt: skip
        if done.rc != 0:
            raise SetupError(
                f"installing {len(wheels)} wheels from {house} failed; see "
                f"{out / 'logs' / 'setup.txt'}"
            )
    else:
        how = "no wheels to install"
    pth = purelib(python, deadline) / PTH_NAME
    paths = [repo, repo / "benchmarks" / "_shared", site]
    names = [w.name for w in wheels]
    try:
        pth.write_text("".join(f"{p.absolute()}\n" for p in paths))
    except OSError as err:
        made = overlay(python, paths, out / OVERLAY, deadline)
        why = f"{pth.parent} cannot be written: {err.strerror}"
        return Setup(None, names, f"{how}; an overlay venv {made} ({why})", str(made))
    ok, line = importable(python, deadline)
    if not ok:
        raise SetupError(f"milabench is still not importable in {python}: {line}")
    return Setup(pth, names, how)


#: The overlay venv's folder under OUT, made where the Python's own cannot be written.
OVERLAY = "venv"
_LAYOUT = (
    "import json, site, sys, sysconfig; print(json.dumps({'site': site.getsitepackages(), "
    "'scripts': sysconfig.get_paths()['scripts'], 'executable': sys.executable}))"
)


def overlay(python: str, paths: list[Path], venv: Path, deadline: Deadline) -> Path:
    """A venv at ``venv`` of ``python``'s interpreter that sees ``python``'s packages first
    (its site folders, with their own .pth files), then ``paths``; ``python``'s console
    scripts are copied into its ``bin`` with the overlay's interpreter in their first
    line. Returns the overlay's Python; `SetupError` when it cannot be made or imports."""
    layout = _run([python, "-I", "-c", _LAYOUT], deadline)
    made = _run([python, "-I", "-m", "venv", "--without-pip", "--clear", str(venv)], deadline)
    if layout.returncode != 0 or made.returncode != 0:
        last = (made.stderr or layout.stderr).strip().splitlines() or ["no output"]
        raise SetupError(f"cannot make an overlay venv {venv} of {python}: {last[-1]}")
    facts = json.loads(layout.stdout)
    new_python = venv / "bin" / "python"
    pth = purelib(str(new_python), deadline) / PTH_NAME
    sites = [d for d in facts["site"] if Path(d).is_dir()]
    # one line, run in its own namespace (a comprehension would not see ``site``)
    lines = [f"import site; list(map(site.addsitedir, {sites!r}))\n"]
    lines += [f"{p.absolute()}\n" for p in paths]
    try:
        pth.write_text("".join(lines))
        copy_scripts(Path(facts["scripts"]), {python, facts["executable"]}, new_python)
    except OSError as err:
        raise SetupError(f"cannot write the overlay venv {venv}: {err}") from None
    ok, line = importable(str(new_python), deadline)
    if not ok:
        raise SetupError(f"milabench is not importable in the overlay {new_python}: {line}")
    return new_python


def copy_scripts(scripts: Path, pythons: set[str], new_python: Path) -> list[str]:
    """Copy each console script of ``scripts`` whose ``#!`` line runs one of ``pythons``
    into ``new_python``'s folder with ``new_python`` in that line (what the venv made
    there already, such as ``python`` and ``activate``, is kept). Returns their names."""
    runs = {os.path.realpath(p) for p in pythons}
    target = new_python.parent
    copied = []
    for script in sorted(scripts.iterdir()) if scripts.is_dir() else []:
        if (target / script.name).exists() or not script.is_file():
            continue
        try:
            with script.open("rb") as f:
                first = f.readline(4096)
                command = first[2:].strip().split(b" ")[0].decode(errors="replace")
                if not first.startswith(b"#!") or os.path.realpath(command) not in runs:
                    continue  # a binary, or another interpreter's script: not read on
                rest = f.read()
        except OSError:
            continue
        (target / script.name).write_bytes(b"#!" + str(new_python).encode() + b"\n" + rest)
        (target / script.name).chmod(0o755)
        copied.append(script.name)
    return copied


def remove_pth(setup: Setup | None) -> None:
    """Take out the .pth file `make_importable` wrote (the Python is left as it was,
    but for ``OUT/site``, which only that file pointed to)."""
    if setup is not None and setup.pth is not None:
        setup.pth.unlink(missing_ok=True)
