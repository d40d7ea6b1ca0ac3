"""scripts/install_test_deps.py: which torch build the test dependencies get, decided by
asking the real pip (offline, from wheels made here) and probing a real HTTP index on
loopback."""

from __future__ import annotations

import base64
import hashlib
import http.server
import importlib.util
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_test_deps.py"
_spec = importlib.util.spec_from_file_location("install_test_deps", SCRIPT)
deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deps)


def _wheel(folder: Path, version: str, requires: list[str], project: str = "torch") -> Path:
    """A real (empty) wheel of ``project`` at `version`, pure Python, with `requires`."""
    name = f"{project}-{version}-py3-none-any.whl"
    dist = f"{project}-{version}.dist-info"
    files = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: "
        + version
        + "\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{project}/__init__.py": "",
    }
    lines = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        lines.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    lines.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(lines) + "\n"
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
    return path


@pytest.fixture
def offline_pip(tmp_path, monkeypatch):
    """pip with no index and no machine settings: it sees only the wheels of a folder."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip then reads no config file
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(var, raising=False)
    return wheels


class _Index(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        ok = self.path == "/whl/cpu/torch/"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b"<html></html>" if ok else b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def index_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()


PIP = [sys.executable, "-m", "pip"]
NVIDIA = ['nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"']


def test_a_cpu_build_from_pips_settings_is_kept(offline_pip, index_url):
    _wheel(offline_pip, "2.13.0+cpu", [])
    said = []
    command = deps.install_command(PIP, index_url, say=said.append)
    assert command == [*PIP, "install", "-e", ".[test]"]
    assert said == ["install_test_deps: torch 2.13.0+cpu from pip's settings (no CUDA build)"]


def test_pypis_cuda_build_brings_in_the_cpu_index_when_it_answers(offline_pip, index_url):
    _wheel(offline_pip, "2.13.0", NVIDIA)
    said = []
    command = deps.install_command(PIP, index_url, say=said.append)
    on_linux = sys.platform.startswith("linux")
    if on_linux:  # PyPI's Linux wheel needs NVIDIA's runtime: a CUDA build
        assert command[-2:] == ["--extra-index-url", index_url]
        assert said == [f"install_test_deps: torch's CPU build from {index_url} (pip's "
                        "settings give CUDA)"]  # fmt: skip
    else:  # the same requirements never apply elsewhere (macOS wheels are CPU builds)
        assert command == [*PIP, "install", "-e", ".[test]"]


def test_no_cpu_index_is_one_line_and_the_install_goes_on(offline_pip, index_url):
    _wheel(offline_pip, "2.13.0+cu130", [])
    said = []
    command = deps.install_command(PIP, index_url.replace("/whl/cpu", "/nothing"), said.append)
    assert command == [*PIP, "install", "-e", ".[test]"]
    assert len(said) == 1 and "no CPU build of torch reachable" in said[0]
    assert "HTTP 404" in said[0] and "torch 2.13.0+cu130, a CUDA build" in said[0]


def test_the_build_is_read_from_the_version_or_the_requirements():
    meta = lambda version, req=(): {"metadata": {"version": version, "requires_dist": list(req)}}  # noqa: E731
    assert deps.is_cuda_build(meta("2.13.0+cu130"))
    assert not deps.is_cuda_build(meta("2.13.0+cpu", NVIDIA), "linux")
    assert deps.is_cuda_build(meta("2.13.0", NVIDIA), "linux")
    assert not deps.is_cuda_build(meta("2.13.0", NVIDIA), "darwin")
    assert not deps.is_cuda_build(meta("2.13.0"), "linux")


def test_a_closed_port_is_a_reason_not_an_exception():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert deps.index_answers(f"http://127.0.0.1:{port}/whl/cpu", timeout=2) is not None


def _venv(tmp_path: Path, *options: str) -> str:
    """A new virtual environment (with pip), its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", *options, str(tmp_path / "venv")], check=True)
    return str(tmp_path / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python")


def _installed(python: str, project: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({project!r}))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def test_uv_is_handed_pips_sources_and_the_cpu_index(tmp_path):
    wheels = tmp_path / "wheels"
    environ = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(wheels)}
    extra = ["--extra-index-url", "https://cpu.example/whl/cpu"]
    argv, env = deps.uv_command("/venv/bin/python", deps.TARGET, extra, environ)
    assert argv[:8] == ["/venv/bin/python", "-m", "uv", "pip", "install", "--python",
                        "/venv/bin/python", "--compile-bytecode"]  # fmt: skip
    assert argv[8:] == ["-e", ".[test]", "--find-links", str(wheels),
                        "--index-strategy", "unsafe-best-match", *extra]  # fmt: skip
    assert env["PIP_FIND_LINKS"] == str(wheels) and "UV_HTTP_TIMEOUT" not in env


def test_uv_installs_from_pips_find_links(offline_pip, index_url, tmp_path, monkeypatch):
    """uv reads no pip configuration: the package only in pip's find-links folder is
    installed because the script hands the folder over (uv of the running interpreter,
    seen through the environment's system site-packages)."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    _wheel(offline_pip, "2.13.0+cpu", [])
    _wheel(offline_pip, "1.0", [], project="tinydep")
    python = _venv(tmp_path, "--system-site-packages")
    said = []
    assert deps.install(python, ["tinydep==1.0"], index_url, cwd=tmp_path, say=said.append) == 0
    assert _installed(python, "tinydep") == "1.0"
    assert said == ["install_test_deps: torch 2.13.0+cpu from pip's settings (no CUDA build)"]


def test_pip_installs_when_uv_fails_and_its_status_is_returned(
    offline_pip, index_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    python = _venv(tmp_path, "--system-site-packages")
    said = []
    status = deps.install(python, ["absent-project==1.0"], index_url, cwd=tmp_path,
                          say=said.append)  # fmt: skip
    assert status != 0
    assert said[-1].startswith("install_test_deps: note: the uv install failed (exit ")
    assert said[-1].endswith("); installing with pip")
