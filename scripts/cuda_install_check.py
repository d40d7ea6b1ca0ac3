"""Install every group of a GPU suite with its CUDA wheels on a machine without a GPU.

Usage::

    python scripts/cuda_install_check.py [--driver 580.65.06] [--driver 535.183.01]
        [--config config/standard.yaml] [--select a,b] [--base DIR] [--keep]
        [--markdown FILE]

For each driver version (default: 580.65.06, CUDA 13.0, and 535.183.01, CUDA 12.2) the
script runs ``milabench install --config <suite>`` in a fresh base with the NVIDIA driver
faked at that version: the fake NVML module of tests/fakes (``FAKE_PYNVML_DRIVER``) stands
in for the real one, the only mock; installs, wheels and imports are real. CUDA wheels
install and import without a GPU (nothing initialises a device), so the install's own
validation step imports every benchmark's modules (torch, torchvision, timm, diffusers,
peft, torch_geometric, jax and its CUDA plugin...). The script then reads what each
environment holds (`milabench.metadata.probe_environment`: install variant, torch's CUDA
version, the CUDA runtime wheel) and prints, per driver and group: the chosen build, the
status, the time, the disk used (per group, and for all groups with each file counted
once: uv hard-links the files of its cache, so the groups share torch's) and the build
found. Exit code 1 when a group failed or holds another build than chosen.

The bases are deleted at the end unless ``--keep``; uv's cache keeps the wheels (its
growth is printed). Figures are quoted in docs/environments.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
sys.path.insert(0, str(REPO))

from milabench.machine.cudabuild import by_variant  # noqa: E402
from milabench.metadata import probe_environment  # noqa: E402

DEFAULT_DRIVERS = ("580.65.06", "535.183.01")


@dataclass
class GroupOutcome:
    group: str
    status: str
    seconds: str
    message: str
    disk: int = 0
    variant: str | None = None
    torch_cuda: str | None = None
    runtime: str | None = None
    imports: dict[str, str] = field(default_factory=dict)


@dataclass
class DriverOutcome:
    driver: str
    choice: str
    seconds: float
    rc: int
    cache_growth: int
    groups: list[GroupOutcome]
    venvs_disk: int = 0  # every environment of the base, each inode once

    @property
    def chosen(self) -> str | None:
        """The variant install printed (``CUDA build: cuda12 (...``), None if it stopped."""
        if not self.choice.startswith("CUDA build:"):
            return None
        return self.choice.removeprefix("CUDA build:").split()[0]


def disk_use(root: Path) -> int:
    """Bytes allocated under ``root``, each inode once (uv hard-links its cache)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                total += st.st_blocks * 512
    return total


def uv_cache_dir() -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "uv", "cache", "dir"], capture_output=True, text=True, check=True
    )
    return Path(done.stdout.strip())


def fake_driver_env(driver: str) -> dict[str, str]:
    """This process's environment with the driver faked and nothing milabench reads left."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MILABENCH_", "CUDA_", "VIRTUAL_ENV"))
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKES), env.get("PYTHONPATH")) if p)
    env["FAKE_PYNVML_DRIVER"] = driver
    return env


def parse_summary(stdout: str) -> list[GroupOutcome]:
    """The rows of install's summary table (``group  status  time  benchmarks  message``)."""
    lines = stdout.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["group", "status"])
    except StopIteration:
        return []
    out = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith(("note:", "logs:", "milabench:")):
            break
        words = line.split()
        status = "up to date" if words[1:3] == ["up", "to"] else words[1]
        rest = words[4:] if status == "up to date" else words[2:]
        seconds = " ".join(rest[:2])
        message = line.split(" install: ", 1)[1] if " install: " in line else ""
        if not message and " validate: " in line:
            message = line.split(" validate: ", 1)[1]
        out.append(GroupOutcome(words[0], status, seconds, message))
    return out


def validated_imports(base: Path, group: str) -> dict[str, str]:
    """Module -> version printed by the install's validation step of ``group``."""
    for logs in sorted((base / "runs").glob("install.*"), reverse=True):
        stdout = logs / f"{group}.stdout"
        if not stdout.is_file():
            continue
        for line in stdout.read_text(errors="replace").splitlines():
            if line.startswith("validation: {"):
                return json.loads(line.removeprefix("validation: "))["versions"]
    return {}


def check_driver(driver: str, config: Path, select: str | None, base: Path) -> DriverOutcome:
    cache = uv_cache_dir()
    cache_before = disk_use(cache)
    argv = [sys.executable, "-m", "milabench", "install", "--config", str(config)]
    argv += ["--base", str(base)] + (["--select", select] if select else [])
    print(f"$ FAKE_PYNVML_DRIVER={driver} {' '.join(argv[1:])}", flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=fake_driver_env(driver),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    captured = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        captured.append(line)
    rc = proc.wait()
    seconds = time.perf_counter() - start
    stdout = "".join(captured)
    choice = next((ln for ln in captured if ln.startswith(("CUDA build:", "milabench: error"))), "")
    groups = parse_summary(stdout)
    for outcome in groups:
        venv = base / "venv" / outcome.group
        if venv.is_dir():
            outcome.disk = disk_use(venv)
        python = venv / "bin" / "python"
        if python.exists():
            env = probe_environment(str(python))
            install = env.get("install") or {}
            outcome.variant = install.get("variant")
            outcome.runtime = install.get("cuda_runtime")
            outcome.torch_cuda = (env.get("torch") or {}).get("cuda")
        outcome.imports = validated_imports(base, outcome.group)
    growth = disk_use(cache) - cache_before
    venvs = disk_use(base / "venv") if (base / "venv").is_dir() else 0
    return DriverOutcome(driver, choice.strip(), seconds, rc, growth, groups, venvs)


def build_problem(outcome: GroupOutcome, chosen: str | None) -> str:
    """Why an installed group does not hold the chosen build ('' when it does)."""
    if outcome.status not in ("installed", "up to date"):
        return ""
    build = by_variant(outcome.variant or "")
    if chosen and outcome.variant != chosen:
        return f"installed as {outcome.variant}, chosen {chosen}"
    if build is None:
        return ""
    if outcome.torch_cuda and int(outcome.torch_cuda.split(".")[0]) != build.cuda[0]:
        return f"torch is a CUDA {outcome.torch_cuda} build"
    if outcome.runtime and int(outcome.runtime.split(".")[0]) != build.cuda[0]:
        return f"CUDA runtime {outcome.runtime}"
    if not outcome.runtime:
        return "no CUDA runtime wheel installed"
    return ""


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def markdown(results: list[DriverOutcome]) -> str:
    rows = [
        "| driver | build chosen | group | status | time | disk | torch CUDA | CUDA runtime "
        "| imports checked |",
        "|---|---|---|---|---:|---:|---|---|---|",
    ]
    for res in results:
        chosen = res.chosen or res.choice or "?"
        for g in res.groups:
            imports = ", ".join(
                sorted(m for m in g.imports if m not in ("benchkit", "benchshared"))
            )
            status = g.status + (f": {g.message}" if g.message else "")
            rows.append(
                f"| {res.driver} | {chosen} | {g.group} | {status} | {g.seconds} | "
                f"{gib(g.disk)} | {g.torch_cuda or '-'} | {g.runtime or '-'} | {imports} |"
            )
        rows.append(
            f"| {res.driver} | {chosen} | **all** | exit {res.rc} | "
            f"{res.seconds:.0f} s | {gib(res.venvs_disk)} | | "
            f"uv cache +{gib(res.cache_growth)} | |"
        )
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", action="append", help="NVIDIA driver to fake (repeat)")
    parser.add_argument("--config", default=str(REPO / "config" / "standard.yaml"))
    parser.add_argument("--select", default=None, help="entries to install (default: all)")
    parser.add_argument("--base", default=None, help="folder for the bases (default: a temp)")
    parser.add_argument("--keep", action="store_true", help="keep the environments")
    parser.add_argument("--markdown", default=None, help="also write the table to FILE")
    args = parser.parse_args()
    root = Path(args.base or tempfile.mkdtemp(prefix="cuda-install-")).absolute()
    results: list[DriverOutcome] = []
    failed = False
    try:
        for driver in args.driver or DEFAULT_DRIVERS:
            base = root / driver
            res = check_driver(driver, Path(args.config).absolute(), args.select, base)
            results.append(res)
            for g in res.groups:
                problem = build_problem(g, res.chosen)
                if problem:
                    g.status, g.message = "wrong build", problem
            failed |= res.rc != 0 or any(g.status != "installed" for g in res.groups)
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    table = markdown(results)
    print("\n" + table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
