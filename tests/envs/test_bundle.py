"""`milabench bundle` and `milabench install --offline`: real uv, real pip, real wheels, and
the offline install run with no network at all (a network namespace without routes).

The package source of the bundling step is a folder of tiny real wheels (conftest.py)
plus an sdist (``mbsrc``, built into a wheel by the bundle) and the setuptools wheel that
building it needs (virtualenv's own copy: nothing is downloaded). The slow test at the
end bundles milabench's own dependencies and the CPU suite's torch group from the real
package sources and installs both with the network off.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from systemtools import cannot_run_here, require

from milabench.envs.bundle import (
    Target,
    canonical,
    read_pins,
    same_version,
    sha256_of,
    wheel_key,
)
from milabench.envs.marker import MARKER_NAME
from milabench.errors import UsageError

from .conftest import REPO, clean_environ

PY = "{}.{}".format(*sys.version_info[:2])


def build_sdist(folder: Path, name: str, version: str) -> Path:
    """``<folder>/<name>-<version>.tar.gz``: a setuptools project holding module ``name``."""
    root = f"{name}-{version}"
    files = {
        f"{root}/pyproject.toml": (
            '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\n'
        ),
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{root}/{name}/__init__.py": f'__version__ = "{version}"\n',
    }
    path = folder / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for inner, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(inner)
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def sources(wheelhouse: Path, tmp_path: Path) -> Path:
    """The bundling machine's package source: tiny wheels, an sdist, setuptools."""
    from virtualenv.seed.wheels.embed import BUNDLE_FOLDER, BUNDLE_SUPPORT

    folder = tmp_path / "sources"
    shutil.copytree(wheelhouse, folder)
    shutil.copy(Path(BUNDLE_FOLDER) / BUNDLE_SUPPORT[PY]["setuptools"], folder)
    build_sdist(folder, "mbsrc", "1.0")
    return folder


@pytest.fixture
def no_network():
    """argv prefix running a command in a new network namespace: no interface but a
    loopback that is down, so no route to anywhere."""
    tools = require("ip")
    if os.geteuid() != 0:
        cannot_run_here("network namespaces (ip netns add) need root")
    name = f"mbnonet-{uuid.uuid4().hex[:8]}"
    made = subprocess.run([tools["ip"], "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        cannot_run_here(f"no network namespace: {made.stderr.strip()}")
    try:
        yield [tools["ip"], "netns", "exec", name]
    finally:
        subprocess.run([tools["ip"], "netns", "delete", name], capture_output=True)


NETWORK_PROBE = """\
import socket
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3)
except OSError as err:
    print("offline:", err)
else:
    print("online")
"""


def milabench(
    argv: list[str], env: dict[str, str], prefix: list[str] = (), timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "milabench", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
    )


def offline_environ(workdir: Path) -> dict[str, str]:
    """The node's environment: no pip source configured at all."""
    env = clean_environ()
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        MILABENCH_INSTALL_CONSTRAINTS_DIR=str(workdir / "constraints"),
        MILABENCH_GPU_ARCH="cpu",
    )
    return env


def bundle(workdir: Path, sources: Path, house: Path, *select: str) -> subprocess.CompletedProcess:
    env = offline_environ(workdir)
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(sources))
    suite = workdir / "suite" / "bundle-suite.yaml"
    argv = ["bundle", "--config", str(suite), "--base", str(workdir / "bbase"),
            "--select", ",".join(select), "--no-milabench", "-o", str(house)]  # fmt: skip
    return milabench(argv, env)


def install(workdir: Path, house: Path, base: Path, *select: str, prefix=(), extra=()):
    suite = workdir / "suite" / "bundle-suite.yaml"
    argv = ["install", "--config", str(suite), "--base", str(base), "--select",
            ",".join(select), "--offline", str(house), *extra]  # fmt: skip
    return milabench(argv, offline_environ(workdir), prefix)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.strip()]


@pytest.mark.slow
def test_bundle_then_install_with_no_network(workdir, sources, no_network, tmp_path):
    house = tmp_path / "house"
    proc = bundle(workdir, sources, house, "tiny-a", "tiny-b", "fromsdist")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    manifest = json.loads((house / "manifest.json").read_text())
    assert manifest["format"] == 1
    assert manifest["target"] == {"python": PY, "platform": manifest["target"]["platform"],
                                  "machine": os.uname().machine, "native": True}  # fmt: skip
    assert manifest["suite"].endswith("bundle-suite.yaml")
    assert {g: r["pins"] for g, r in manifest["groups"].items()} == {
        "alpha": ["mbtiny==1.0"],
        "beta": ["mbdep==1.0", "mbuser==1.0"],
        "sigma": ["mbsrc==1.0"],
    }
    assert all(r["variant"] == "cpu" for r in manifest["groups"].values())
    # every file of the folder is in the manifest with its real sha256, nothing else
    wheels = sorted(p.name for p in (house / "wheels").iterdir())
    assert wheels == sorted(f["name"] for f in manifest["files"])
    assert "mbsrc-1.0-py3-none-any.whl" in wheels  # the sdist, built into a wheel
    for record in manifest["files"]:
        assert sha256_of(house / "wheels" / record["name"]) == record["sha256"]
    assert read_pins(house / "requirements" / "beta.txt") == [("mbdep", "1.0"), ("mbuser", "1.0")]

    # the node: no route anywhere, no pip source configured
    probe = subprocess.run([*no_network, sys.executable, "-c", NETWORK_PROBE],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert probe.stdout.startswith("offline:"), probe.stdout + probe.stderr
    base = tmp_path / "node"
    start = time.perf_counter()
    proc = install(workdir, house, base, "tiny-a", "tiny-b", "fromsdist", prefix=no_network)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for group, module, version in (("alpha", "mbtiny", "1.0"), ("beta", "mbuser", "1.0"),
                                   ("sigma", "mbsrc", "1.0")):  # fmt: skip
        assert (base / "venv" / group / MARKER_NAME).is_file()
        out = subprocess.run([str(base / "venv" / group / "bin" / "python"), "-I", "-c",
                              f"import {module}; print({module}.__version__)"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.stdout == f"{version}\n", out.stderr
    print(f"offline install of 3 groups (uv): {seconds:.1f} s")

    # a repeat is a no-op; the pip back-end installs offline too
    again = install(workdir, house, base, "tiny-a", "tiny-b", "fromsdist", prefix=no_network)
    assert again.returncode == 0 and again.stdout.count("up to date") == 3, again.stdout
    pip_base = tmp_path / "node-pip"
    proc = install(workdir, house, pip_base, "tiny-b", prefix=no_network,
                   extra=["--backend", "pip"])  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (pip_base / "venv" / "beta" / MARKER_NAME).is_file()


@pytest.mark.slow
def test_a_bad_wheelhouse_is_one_line_naming_what_is_wrong(workdir, sources, tmp_path):
    house = tmp_path / "house"
    proc = bundle(workdir, sources, house, "tiny-a", "tiny-b")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def broken_copy(name: str) -> Path:
        copy = tmp_path / name
        shutil.copytree(house, copy)
        return copy

    cases = []
    missing = broken_copy("missing")
    (missing / "wheels" / "mbdep-1.0-py3-none-any.whl").unlink()
    cases.append((missing, ("tiny-a", "tiny-b"), 1, ["mbdep==1.0", "missing", "beta"]))
    damaged = broken_copy("damaged")
    with (damaged / "wheels" / "mbtiny-1.0-py3-none-any.whl").open("ab") as fh:
        fh.write(b"x")
    cases.append((damaged, ("tiny-a",), 1, ["mbtiny==1.0", "sha256"]))
    cases.append((house, ("fromsdist",), 2, ["'sigma' is not in this wheelhouse", "alpha, beta"]))
    cases.append((tmp_path / "nowhere", ("tiny-a",), 2, ["not a wheelhouse"]))
    other = broken_copy("other-python")
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["target"]["python"] = "3.99"
    (other / "manifest.json").write_text(json.dumps(manifest))
    cases.append((other, ("tiny-a",), 2, ["made for Python 3.99", f"this is Python {PY}"]))
    for where, select, code, words in cases:
        base = tmp_path / f"base-{where.name}"
        proc = install(workdir, where, base, *select)
        lines = error_lines(proc)
        assert proc.returncode == code, (where, proc.stdout, proc.stderr)
        assert len(lines) == 1 and lines[0].startswith("milabench: error: "), proc.stderr
        assert all(w in lines[0] for w in words), lines[0]
        assert not (base / "venv").exists()  # checked before anything is installed

    # a requirement file edited after the bundle: the pins would differ, so it says so
    req = workdir / "suite" / "tiny-a" / "requirements.cpu.txt"
    req.write_text("mbtiny==2.0\n")
    proc = install(workdir, house, tmp_path / "base-changed", "tiny-a")
    assert proc.returncode == 2 and "changed since the wheelhouse was made" in proc.stderr
    assert str(req) in proc.stderr


@pytest.mark.slow
def test_bundle_of_an_unresolvable_group_names_the_package(workdir, sources, tmp_path):
    house = tmp_path / "house"
    proc = bundle(workdir, sources, house, "tiny-a", "broken")
    assert proc.returncode == 1
    lines = error_lines(proc)
    assert len(lines) == 1 and "gamma" in lines[0] and "nonexistent-pkg-xyz" in lines[0], lines
    assert not (house / "manifest.json").exists()  # not a wheelhouse


def test_target_options():
    assert Target.parse(None, None).native
    cross = Target.parse("3.12", "aarch64-manylinux_2_28")
    assert not cross.native and cross.machine == "aarch64"
    tags = cross.pip_platforms()
    assert tags[0] == "manylinux_2_28_aarch64" and "manylinux_2_17_aarch64" in tags
    assert "manylinux2014_aarch64" in tags and "manylinux_2_29_aarch64" not in tags
    assert cross.uv_args() == ["--python-version", "3.12",
                               "--python-platform", "aarch64-manylinux_2_28"]  # fmt: skip
    assert cross.pip_args()[:4] == ["--python-version", "3.12", "--implementation", "cp"]
    for python, plat in (("3", None), ("3.11", "windows"), (None, "linux")):
        with pytest.raises(UsageError):
            Target.parse(python, plat)


def test_names_and_pins(tmp_path):
    assert canonical("Typing_Extensions") == "typing-extensions"
    assert wheel_key("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl") == (
        "torch",
        "2.13.0+cpu",
    )
    assert wheel_key("nvidia_ml_py-13.615.71-py3-none-any.whl") == ("nvidia-ml-py", "13.615.71")
    # equal versions in PEP 440 spell the same here (a pin 1.0 fetched as 1.0.0)
    assert same_version("1.0.0+CPU") == same_version("1+cpu") == "1+cpu"
    assert same_version("2026.9.0") == "2026.9" and same_version("1.10") == "1.10"
    pins = tmp_path / "pins.txt"
    pins.write_text("# comment\n--index-url x\nNvidia-ML-Py==13.0\nrich[jupyter]==15.0 ; x\n")
    assert read_pins(pins) == [("nvidia-ml-py", "13.0"), ("rich", "15.0")]
    pins.write_text("torch>=2\n")
    with pytest.raises(UsageError, match="not a pinned requirement"):
        read_pins(pins)


@pytest.mark.slow
def test_milabench_and_the_torch_group_install_with_no_network(real_env, no_network, tmp_path):
    """The real thing: milabench's own dependencies and config/cpu.yaml's torch group
    (torch 2.13.0+cpu from this machine's find-links) bundled from the real package
    sources, then milabench itself and the group installed on a 'node' with no network."""
    if not any(Path(p).glob("torch-2.13.0+cpu-*.whl")
               for p in real_env.get("PIP_FIND_LINKS", "").split()):  # fmt: skip
        cannot_run_here("no torch 2.13.0+cpu wheel in pip's find-links")
    house = tmp_path / "house"
    start = time.perf_counter()
    proc = milabench(["bundle", "--config", str(REPO / "config" / "cpu.yaml"), "--base",
                      str(tmp_path / "bbase"), "--select", "flops-fp32", "-o", str(house)],
                     real_env)  # fmt: skip
    bundle_s = time.perf_counter() - start
    if proc.returncode != 0 and "Failed to fetch" in proc.stderr + proc.stdout:
        pytest.skip(f"package index unreachable: {error_lines(proc)[-1:]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads((house / "manifest.json").read_text())
    assert "torch==2.13.0+cpu" in manifest["groups"]["torch"]["pins"]
    own = {p.partition("==")[0] for p in manifest["milabench_requirements"]["pins"]}
    assert {"voir", "ptera", "uv", "omegaconf", "setuptools"} <= own

    # the node: a copy of the repository and a fresh Python, no network, no pip source
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(
        ".git", "results", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))  # fmt: skip
    env = clean_environ()
    env.update(PIP_CONFIG_FILE=os.devnull, MILABENCH_GPU_ARCH="cpu",
               PIP_DISABLE_PIP_VERSION_CHECK="1")  # fmt: skip
    node = tmp_path / "python"
    start = time.perf_counter()
    steps = [
        [sys.executable, "-m", "venv", str(node)],
        [str(node / "bin" / "python"), "-m", "pip", "install", "--no-index", "--find-links",
         str(house / "wheels"), "-r", str(house / "requirements" / "milabench.txt"),
         "-e", str(repo)],
        [str(node / "bin" / "python"), "-m", "milabench", "install", "--config",
         str(repo / "config" / "cpu.yaml"), "--base", str(tmp_path / "base"), "--select",
         "flops-fp32", "--offline", str(house)],
    ]  # fmt: skip
    for argv in steps:
        done = subprocess.run([*no_network, *argv], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=900)  # fmt: skip
        assert done.returncode == 0, (argv[:4], done.stdout[-3000:], done.stderr[-3000:])
    install_s = time.perf_counter() - start
    torch_python = tmp_path / "base" / "venv" / "torch" / "bin" / "python"
    out = subprocess.run([str(torch_python), "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.stdout.strip() == "2.13.0+cpu", out.stderr
    size = sum(f["size"] for f in manifest["files"]) / 2**20
    print(f"bundle: {bundle_s:.1f} s, {len(manifest['files'])} wheels, {size:.0f} MiB; "
          f"offline: venv + milabench + torch group {install_s:.1f} s")  # fmt: skip


def test_the_offline_command_has_the_wheelhouse_as_its_only_source(tmp_path):
    """A group's index directives and pip's own sources never reach the offline command."""
    from milabench.envs.bundle import OfflineBackend, Wheelhouse, without_sources
    from milabench.envs.groups import InstallGroup

    assert without_sources(["install", "--no-index", "-f", "/x", "--index-url=https://a",
                            "-r", "r.txt", "--extra-index-url", "u", "--torch-backend",
                            "cu128", "-c", "c.txt", "voir"]) == [
        "install", "-r", "r.txt", "-c", "c.txt", "voir"]  # fmt: skip
    req = tmp_path / "requirements.cuda.txt"
    req.write_text("torch==2.13.0\n")
    group = InstallGroup("torch", tmp_path / "venv", "cuda", "cuda", [], requirements=[req],
                         index_args=["--extra-index-url", "https://download.pytorch.org/whl/cu128"])  # fmt: skip
    house = Wheelhouse(tmp_path / "house", {"format": 1})
    for name in ("uv", "pip"):
        spec = OfflineBackend(name, {}, wheelhouse=house).install_spec(group, tmp_path, None)
        assert not any("https://" in word for word in spec.argv), spec.argv
        assert spec.argv.count("--find-links") == 1
        at = spec.argv.index("--find-links")
        assert spec.argv[at - 1 : at + 2] == ["--no-index", "--find-links", str(house.wheels)]
        assert spec.argv[-2:] == ["-c", str(house.pins_file("torch"))] or (
            name == "uv" and spec.argv[-3:-1] == ["-c", str(house.pins_file("torch"))])  # fmt: skip
        assert ("--offline" in spec.argv) == (name == "uv")
        assert spec.env["PIP_NO_INDEX"] == "1" and spec.env["PIP_CONFIG_FILE"] == os.devnull
