"""Which CUDA build `milabench install` picks for the node's NVIDIA driver, where the choice
shows (install, `milabench machine`, the run metadata, the report's System block,
`milabench compare`), and the pins that back each build.

The driver is the fake `pynvml` of tests/fakes at the version ``FAKE_PYNVML_DRIVER`` names
(the only mock: no GPU here); every command runs as a real ``python -m milabench``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from milabench.envs import MARKER_NAME
from milabench.machine.cudabuild import BUILDS, FIRST_DRIVER, choose, installed_runtime
from milabench.metadata import INSTALL_MARKER, install_build, meta_record

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"
STANDARD = REPO / "config" / "standard.yaml"
BENCHMARKS = REPO / "benchmarks"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s+]+)")


def nvml(driver: str, cuda: int) -> dict:
    return {"driver_version": driver, "cuda_driver_version": str(cuda)}


@pytest.mark.parametrize(
    ("driver", "cuda", "variant", "compat"),
    [
        ("525.60.13", 12000, "cuda12", True),  # the first CUDA 12 driver
        ("535.183.01", 12020, "cuda12", True),  # CUDA 12.2 < 12.8: minor-version compat.
        ("570.86.10", 12080, "cuda12", False),  # CUDA 12.8: native
        ("575.57.08", 12090, "cuda12", False),
        ("580.65.06", 13000, "cuda", False),  # CUDA 13.0
        ("590.44.01", 13010, "cuda", False),
    ],
)
def test_the_newest_build_the_driver_runs(driver, cuda, variant, compat):
    choice = choose(nvml(driver, cuda))
    assert (choice.variant, choice.how, choice.compat, choice.error) == (
        variant,
        "driver",
        compat,
        None,
    )
    line = choice.line()
    assert line.startswith(f"CUDA build: {variant} (CUDA ") and driver in line
    assert ("minor-version compatibility" in line) == compat
    assert json.loads(json.dumps(choice.record()))["variant"] == variant


def test_a_driver_too_old_for_every_build_is_one_line():
    choice = choose(nvml("470.82.01", 11040))
    assert choice.error == (
        "NVIDIA driver 470.82.01 supports CUDA 11.4 at most; the oldest CUDA build milabench "
        "pins, cuda12 (CUDA 12.8), needs driver 525.60.13 or newer: update the driver"
    )
    assert "\n" not in choice.error and choice.record()["error"] == choice.error


def test_unknown_driver_and_the_option():
    assert choose({"driver_version": "fake"}).variant == "cuda"  # fake GPUs, forced arch
    assert choose({}).how == "default"
    forced = choose(nvml("580.65.06", 13000), "cuda12")
    assert (forced.variant, forced.how, forced.error) == ("cuda12", "option", None)
    assert choose(nvml("535.183.01", 12020), "auto").variant == "cuda12"
    bad = choose(nvml("580.65.06", 13000), "cu128")
    assert (bad.variant, bad.how) == ("cuda", "option")  # other commands go on with it
    assert bad.error == (
        "option install.cuda_build: unknown CUDA build 'cu128' (use auto, cuda, cuda12)"
    )


def test_every_build_has_its_constraints_and_pins():
    for build in BUILDS:
        assert (REPO / "constraints" / f"{build.variant}.txt").is_file(), build.variant
        assert build.min_driver == FIRST_DRIVER[build.cuda[0]]
        for pinned in BENCHMARKS.glob(f"*/requirements.{build.variant}.txt"):
            runtime = [line for line in pinned.read_text().splitlines() if "cuda-runtime" in line]
            assert runtime, pinned  # every CUDA pin file brings its runtime
            major = int(runtime[0].split("==")[1].split(".")[0])
            assert major == build.cuda[0], (pinned, runtime)


def _cuda_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for path in BENCHMARKS.glob("*/requirements.cuda.txt"):
        for line in path.read_text().splitlines():
            found = PIN.match(line)
            if found:
                pins.setdefault(found.group(1).lower(), found.group(2))
    return pins


def test_cuda12_pins_the_frameworks_of_the_cuda_build():
    """Same framework versions, another CUDA build: every version constraints/cuda12.txt
    pins is the one of the committed CUDA 13 pins (local label aside)."""
    pins = _cuda_pins()
    text = (REPO / "constraints" / "cuda12.txt").read_text()
    checked = 0
    for line in text.splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s+]+)(\+cu128)?$", line)
        if not found:
            continue
        name = found.group(1).lower()
        if name in pins:
            assert pins[name] == found.group(2), (name, pins[name], line)
            checked += 1
    assert checked >= 15
    assert "torch==2.13.0+cu128" in text.splitlines()
    assert "# milabench: --torch-backend cu128" in text


def test_installed_build_is_read_from_the_environment(tmp_path):
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "nvidia_cuda_runtime_cu12-12.8.90.dist-info").mkdir(parents=True)
    assert installed_runtime(site) == ((12, 8), "nvidia_cuda_runtime_cu12-12.8.90")
    assert installed_runtime(tmp_path / "absent") is None
    assert INSTALL_MARKER == MARKER_NAME
    (tmp_path / MARKER_NAME).write_text(json.dumps({"inputs": {"variant": "cuda12"}}))
    assert install_build(tmp_path, [site]) == {
        "variant": "cuda12",
        "cuda_runtime": "12.8",
        "runtime_package": "nvidia_cuda_runtime_cu12-12.8.90",
    }
    chosen = choose(nvml("535.183.01", 12020)).record()
    record = meta_record({"cuda_build": chosen}, {"install": {"variant": "cuda12"}})
    assert record["cuda_build"] == chosen  # the node's choice, in every run's meta record
    assert record["environment"]["install"] == {"variant": "cuda12"}
    assert "cuda_build" not in meta_record({}, None)


def fake_driver_env(driver: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "CUDA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")])
    env["FAKE_PYNVML_DRIVER"] = driver
    return env


def milabench(driver: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        env=fake_driver_env(driver),
        cwd=REPO,
        timeout=300,
    )


def _groups(stdout: str) -> dict[str, tuple[str, list[str]]]:
    """group -> (variant, requirement lines) from ``install --dry-run``."""
    out: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in stdout.splitlines():
        head = re.match(r"^\[(\S+)\] variant (\S+),", line)
        if head:
            current = head.group(1)
            out[current] = (head.group(2), [])
        elif current and line.strip().startswith("requirements: "):
            out[current][1].append(line.strip().removeprefix("requirements: "))
    return out


@pytest.mark.parametrize(
    ("driver", "variant"),
    [("535.183.01", "cuda12"), ("570.86.10", "cuda12"), ("580.65.06", "cuda")],
)
def test_install_chooses_the_build_of_the_driver(tmp_path, driver, variant):
    proc = milabench(
        driver, "install", "--config", str(STANDARD), "--base", str(tmp_path), "--dry-run"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"CUDA build: {variant} (CUDA ") and driver in first, first
    assert ("minor-version compatibility" in first) == driver.startswith("535")
    groups = _groups(proc.stdout)
    assert set(groups) == {"torch", "hf", "jax", "pyg"}
    for group, (got, requirements) in groups.items():
        assert got == variant, group
        for line in requirements:
            pinned = f"requirements.{variant}.txt (pinned)"
            # cuda12 pins of the torch groups need PyTorch's index (docs/environments.md)
            assert line.endswith(pinned) or (
                variant == "cuda12" and line.endswith("requirements.in (unpinned)")
            ), (group, line)
    jax = groups["jax"][1]
    assert jax == [f"benchmarks/purejaxrl/requirements.{variant}.txt (pinned)"]
    plugin = "jax_plugins.xla_cuda13" if variant == "cuda" else "jax_plugins.xla_cuda12"
    assert plugin in proc.stdout  # the JAX plugin is imported by the validation
    assert not (tmp_path / "venv").exists()  # a dry run installs nothing


def test_install_stops_on_a_driver_too_old(tmp_path):
    proc = milabench("470.82.01", "install", "--config", str(STANDARD), "--base", str(tmp_path))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == (
        "milabench: error: NVIDIA driver 470.82.01 supports CUDA 11.4 at most; the oldest "
        "CUDA build milabench pins, cuda12 (CUDA 12.8), needs driver 525.60.13 or newer: "
        "update the driver"
    )
    assert not (tmp_path / "venv").exists()


def test_checking_the_current_environment_needs_no_pinned_build(tmp_path):
    """``install --use-current-env`` installs nothing: the interpreter's own CUDA build
    runs, so an old driver does not stop the import check, and no pinned build is
    announced (on the H200 it printed "torch 2.13.0 from PyPI" beside torch 2.11)."""
    for driver in ("470.82.01", "580.65.06"):
        proc = milabench(driver, "install", "--config", str(STANDARD), "--base",
                         str(tmp_path), "--use-current-env", "--select", "bf16")  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "CUDA build" not in proc.stdout and "driver" not in proc.stderr, proc.stdout
        assert re.search(r"^torch\s+checked\s", proc.stdout, re.M), proc.stdout
    proc = milabench("470.82.01", "install", "--config", str(STANDARD), "--base",
                     str(tmp_path), "--use-current-env", "--into-current-env", "--dry-run")  # fmt: skip
    assert proc.returncode == 1 and "update the driver" in proc.stderr  # it would install


def test_an_unknown_build_option_is_a_configuration_error(tmp_path):
    env_run = subprocess.run(
        [sys.executable, "-m", "milabench", "install", "--config", str(STANDARD),
         "--base", str(tmp_path), "--dry-run"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**fake_driver_env("580.65.06"), "MILABENCH_INSTALL_CUDA_BUILD": "cu128"},
    )  # fmt: skip
    assert env_run.returncode == 2, env_run.stderr
    assert env_run.stderr.strip() == (
        "milabench: error: option install.cuda_build: unknown CUDA build 'cu128' "
        "(use auto, cuda, cuda12)"
    )


def test_machine_shows_the_choice():
    proc = milabench("535.183.01", "machine")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["cuda_build"]["variant"] == "cuda12"
    assert record["cuda_build"]["driver_cuda"] == "12.2"
    assert record["cuda_build"]["minor_version_compatibility"] is True
    assert record["accelerators"]["system"]["driver_version"] == "535.183.01"


def test_report_and_compare_name_the_build(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "report"))
    try:
        from synth import META, entry, write_file
    finally:
        sys.path.pop(0)

    def run(name: str, variant: str, runtime: str, rate: float) -> Path:
        meta = {**META, "environment": {"install": {"variant": variant, "cuda_runtime": runtime}}}
        folder = tmp_path / name
        write_file(folder, "bench", entry("bench"), rates=[rate] * 30, meta=meta)
        return folder

    a = run("a", "cuda", "13.0", 100.0)
    b = run("b", "cuda12", "12.8", 100.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    report = subprocess.run(
        [sys.executable, "-m", "milabench", "report", "--runs", str(b)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert "build:    cuda12 (CUDA 12.8)" in report.stdout.splitlines(), report.stdout
    compare = subprocess.run(
        [sys.executable, "-m", "milabench", "compare", str(a), str(b)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert (
        "warning: A ran build cuda (CUDA 13.0) and B build cuda12 (CUDA 12.8): a difference "
        "may come from the CUDA build, not from what you changed"
    ) in compare.stderr, compare.stderr
