"""Installs through the networks people have, for real, on loopback.

A PEP 503 index serves the session's tiny wheels over HTTPS with a certificate from a
certificate authority made by the test (tests/netindex.py). Each test writes a pip
configuration file and points ``PIP_CONFIG_FILE`` at it; the environment of the
``milabench install`` under test has no certificate or proxy variable (as an SSH session
has none), its own ``HOME`` and an empty uv cache. So the only way uv can trust the index
is pip's ``cert`` (or ``trusted-host``), forwarded by `milabench.envs.pipconf`.

Failures must end in one line on standard error naming the group, the host and the cause
(`milabench.envs.netcause`), after one fallback to pip that says so on one line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from netindex import NETWORK_VARIABLES, Authority, ConnectProxy, PackageIndex, closed_port

from milabench.config.loader import load_suite
from milabench.doctor import sources
from milabench.envs import MARKER_NAME, failure_path
from milabench.envs.ready import ensure_ready
from milabench.errors import EnvironmentMissing

from .conftest import Milabench, clean_environ


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """The test's authority, the index's certificate, a client certificate, and another
    authority nobody signed with."""
    folder = tmp_path_factory.mktemp("pki")
    ca = Authority.create(folder, "milabench test CA")
    other = Authority.create(folder, "another CA")
    return {
        "ca": ca.cert,
        "wrong": other.cert,
        "server": ca.issue(folder, "index"),
        "client": ca.issue(folder, "client", server=False),
    }


def network_env(tmp_path: Path, workdir: Path, conf: dict[str, str]) -> dict[str, str]:
    """The environment of the install under test: nothing from this machine decides where
    packages come from but the pip configuration file written from ``conf``."""
    env = {k: v for k, v in clean_environ().items() if k not in NETWORK_VARIABLES}
    tmp_path.mkdir(parents=True, exist_ok=True)
    lines = ["[global]"]
    # every source key set (empty where unused) so that the machine's own files add nothing
    settings = {"index-url": "", "extra-index-url": "", "find-links": "", "proxy": ""}
    settings.update({"retries": "0", "timeout": "10", **conf})
    lines += [f"{key} = {value}" for key, value in settings.items()]
    config = tmp_path / "pip.conf"
    config.write_text("\n".join(lines) + "\n")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        PIP_CONFIG_FILE=str(config),
        PIP_NO_CACHE_DIR="1",
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        UV_NO_CONFIG="1",
        MILABENCH_INSTALL_CONSTRAINTS_DIR=str(workdir / "constraints"),
        MILABENCH_GPU_ARCH="cpu",
    )
    return env


def install(tmp_path: Path, workdir: Path, conf: dict[str, str]):
    """``milabench install --select tiny-a`` (group alpha: mbtiny) into ``tmp_path/base``."""
    env = network_env(tmp_path, workdir, conf)
    mb = Milabench(workdir / "suite" / "suite.yaml", tmp_path / "base", env)
    return mb, mb("install", "--select", "tiny-a")


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def fallback_lines(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if "trying pip once" in ln]


def marker(mb: Milabench) -> dict:
    return json.loads((mb.base / "venv" / "alpha" / MARKER_NAME).read_text())


def assert_failed_with(proc, cause: str) -> str:
    """Exit 1, no traceback, and the last line of standard error names group, host, cause."""
    print(proc.stdout, proc.stderr, sep="\n")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = last_line(proc.stderr)
    assert line.startswith("milabench: error: install failed for group(s): alpha"), line
    assert f" on {socket.gethostname()} " in line, line
    assert cause in line, line
    return line


def test_pip_cert_alone_lets_uv_install(tmp_path, workdir, wheelhouse, pki):
    """pip's ``cert`` is the only trust the index has, and uv installs (no fallback)."""
    with PackageIndex(wheelhouse, tls=pki["server"]) as index:
        mb, proc = install(tmp_path, workdir, {"index-url": index.url, "cert": str(pki["ca"])})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert fallback_lines(proc.stdout) == []
    assert marker(mb)["backend"] == "uv"
    assert any(r.startswith("GET /files/mbtiny-1.0") for r in index.requests), index.requests
    assert not failure_path(mb.base / "venv" / "alpha").exists()


def test_wrong_authority_is_one_line_naming_tls_unknown_issuer(
    tmp_path, workdir, wheelhouse, pki, monkeypatch
):
    with PackageIndex(wheelhouse, tls=pki["server"]) as index:
        mb, proc = install(tmp_path, workdir, {"index-url": index.url, "cert": str(pki["wrong"])})
    line = assert_failed_with(proc, "TLS: unknown issuer")
    assert index.url.split("/simple")[0] in line
    assert "(uv, then pip)" in line  # pip was tried once, and failed the same way
    assert len(fallback_lines(proc.stdout)) == 1, proc.stdout
    record = json.loads(failure_path(mb.base / "venv" / "alpha").read_text())
    assert record["host"] == socket.gethostname() and "TLS: unknown issuer" in record["message"]

    # `milabench run` (every node of a multi-node run goes through this check) says why
    monkeypatch.setenv("MILABENCH_GPU_ARCH", "cpu")
    suite = load_suite(mb.config, base=mb.base, select=["tiny-a"])
    with pytest.raises(EnvironmentMissing) as missing:
        ensure_ready(suite.entries["tiny-a"])
    assert f"the last install on {socket.gethostname()} failed (install: TLS: unknown issuer" in (
        str(missing.value)
    )


def test_trusted_host_skips_verification_for_uv_too(tmp_path, workdir, wheelhouse, pki):
    with PackageIndex(wheelhouse, tls=pki["server"]) as index:
        conf = {
            "index-url": index.url,
            "cert": str(pki["wrong"]),
            "trusted-host": f"127.0.0.1:{index.port}",
        }
        mb, proc = install(tmp_path, workdir, conf)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert fallback_lines(proc.stdout) == [] and marker(mb)["backend"] == "uv"


def test_index_credentials_reach_uv_and_wrong_ones_name_401(tmp_path, workdir, wheelhouse, pki):
    with PackageIndex(wheelhouse, tls=pki["server"], auth=("reader", "s3cret-ok")) as index:
        good = index.url.replace("https://", "https://reader:s3cret-ok@")
        mb, proc = install(tmp_path / "good", workdir, {"index-url": good, "cert": str(pki["ca"])})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert marker(mb)["backend"] == "uv"
        assert "s3cret-ok" not in proc.stdout + proc.stderr

        bad = index.url.replace("https://", "https://reader:wrong-pw@")
        _, proc = install(tmp_path / "bad", workdir, {"index-url": bad, "cert": str(pki["ca"])})
    line = assert_failed_with(proc, "HTTP 401 Unauthorized")
    assert "wrong-pw" not in proc.stdout + proc.stderr, line


def test_unreachable_index_names_the_refused_connection(tmp_path, workdir, pki):
    url = f"https://127.0.0.1:{closed_port()}/simple"
    _, proc = install(tmp_path, workdir, {"index-url": url, "cert": str(pki["ca"])})
    line = assert_failed_with(proc, "connection refused")
    assert url.removesuffix("/simple") in line and "(uv; pip failed too)" in line


def test_proxy_from_pip_config_carries_uv(tmp_path, workdir, wheelhouse, pki):
    with PackageIndex(wheelhouse, tls=pki["server"]) as index, ConnectProxy() as proxy:
        conf = {"index-url": index.url, "cert": str(pki["ca"]), "proxy": proxy.url}
        mb, proc = install(tmp_path, workdir, conf)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker(mb)["backend"] == "uv"
    assert f"127.0.0.1:{index.port}" in proxy.tunnels


def test_closed_proxy_names_the_proxy(tmp_path, workdir, wheelhouse, pki):
    with PackageIndex(wheelhouse, tls=pki["server"]) as index:
        conf = {
            "index-url": index.url,
            "cert": str(pki["ca"]),
            "proxy": f"http://127.0.0.1:{closed_port()}",
        }
        _, proc = install(tmp_path, workdir, conf)
    assert_failed_with(proc, "proxy refused the connection")
    assert index.requests == []


def test_client_certificate_from_pip_config_reaches_uv(tmp_path, workdir, wheelhouse, pki):
    with PackageIndex(wheelhouse, tls=pki["server"], client_ca=pki["ca"]) as index:
        conf = {"index-url": index.url, "cert": str(pki["ca"]), "client-cert": str(pki["client"])}
        mb, proc = install(tmp_path, workdir, conf)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker(mb)["backend"] == "uv"


def test_uv_network_failure_falls_back_to_pip_once(tmp_path, workdir, wheelhouse, pki):
    """An index that refuses HEAD (uv asks for a wheel's size with one; pip only GETs):
    uv fails with an HTTP status, pip installs, and the output says so once."""
    with PackageIndex(wheelhouse, tls=pki["server"], head=False) as index:
        mb, proc = install(tmp_path, workdir, {"index-url": index.url, "cert": str(pki["ca"])})
    print(proc.stdout, proc.stderr, sep="\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = fallback_lines(proc.stdout)
    assert len(lines) == 1 and "HTTP 501" in lines[0], proc.stdout
    assert marker(mb)["backend"] == "pip"
    assert "installed with pip" in proc.stdout
    assert any(r.startswith("HEAD ") for r in index.requests)


def sources_line(tmp_path: Path, workdir: Path, conf: dict[str, str]) -> str:
    """`milabench.doctor.sources`' probe, run as fleet and preflight run it on a node."""
    argv = sources.probe_argv(sys.executable)
    env = network_env(tmp_path, workdir, conf)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return sources.summary_line(sources.parse(proc.stdout))


def test_sources_probe_names_each_cause_before_any_install(tmp_path, workdir, wheelhouse, pki):
    """The check fleet and preflight run on every node before copying anything: the same
    settings (read by the node from its own files) and the same words as the install."""
    ca, wrong = str(pki["ca"]), str(pki["wrong"])
    with (
        PackageIndex(wheelhouse, tls=pki["server"]) as index,
        PackageIndex(wheelhouse, tls=pki["server"], auth=("reader", "pw")) as private,
        ConnectProxy() as proxy,
    ):
        bad_pw = private.url.replace("https://", "https://reader:nope@")
        good_pw = private.url.replace("https://", "https://reader:pw@")
        closed = f"https://127.0.0.1:{closed_port()}/simple"
        proxied = {"index-url": index.url, "cert": ca, "proxy": proxy.url}
        cases = {
            "ok": ({"index-url": index.url, "cert": ca}, f"ok: {index.url}"),
            "proxy": (proxied, f"ok: {index.url}"),
            "credentials": ({"index-url": good_pw, "cert": ca}, "ok: https://<redacted>@"),
            "wrong": ({"index-url": index.url, "cert": wrong}, "TLS: unknown issuer at"),
            "401": ({"index-url": bad_pw, "cert": ca}, "HTTP 401 Unauthorized at https://<red"),
            "closed": ({"index-url": closed, "cert": ca}, f"connection refused at {closed}"),
            "closed proxy": (
                {**proxied, "proxy": f"http://127.0.0.1:{closed_port()}"},
                "proxy refused the connection at",
            ),
            "folder": (
                {"index-url": index.url, "cert": ca, "find-links": str(tmp_path / "gone")},
                f"no such folder on this node at {tmp_path / 'gone'}",
            ),
        }
        for name, (conf, expected) in cases.items():
            line = sources_line(tmp_path / name.replace(" ", "-"), workdir, conf)
            assert expected in line, (name, line)
            assert "nope" not in line and ":pw@" not in line
        assert f"127.0.0.1:{index.port}" in proxy.tunnels
