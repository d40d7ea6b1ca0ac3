"""Reading pip's sources like pip does, for uv."""

from __future__ import annotations

import os
import subprocess
import sys

from milabench.envs.pipconf import config_files, read_pip_settings


def environ(tmp_path, **extra) -> dict[str, str]:
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "XDG_CONFIG_DIRS": str(tmp_path / "etcxdg"),
    }
    env.update(extra)
    return env


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_files_then_variables_in_pips_order(tmp_path):
    write(
        tmp_path / "home" / ".pip" / "pip.conf",
        "[global]\nindex-url = https://legacy.example/simple\nfind-links = /legacy\n",
    )
    write(
        tmp_path / "xdg" / "pip" / "pip.conf",
        "[global]\nfind-links = /wheels\n"
        "extra-index-url = file:///opt/a/simple file:///opt/b/simple\n"
        "[install]\nfind_links = /install-wheels /more\n",
    )
    env = environ(tmp_path, PIP_INDEX_URL="https://mirror.example/simple")
    settings = read_pip_settings(env)
    assert settings.index_url == "https://mirror.example/simple"  # variable beats files
    assert settings.find_links == ["/install-wheels", "/more"]  # [install] beats [global]
    assert settings.extra_index_urls == ["file:///opt/a/simple", "file:///opt/b/simple"]
    assert settings.uv_args() == [
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///opt/a/simple",
        "--extra-index-url",
        "file:///opt/b/simple",
        "--find-links",
        "/install-wheels",
        "--find-links",
        "/more",
    ]
    assert "PIP_INDEX_URL" in settings.sources


def test_pip_config_file_and_devnull(tmp_path):
    write(tmp_path / "xdg" / "pip" / "pip.conf", "[global]\nfind-links = /user\n")
    explicit = write(tmp_path / "explicit.conf", "[global]\nfind-links = /explicit\n")
    assert read_pip_settings(environ(tmp_path, PIP_CONFIG_FILE=str(explicit))).find_links == [
        "/explicit"
    ]
    off = read_pip_settings(
        environ(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="yes", PIP_FIND_LINKS="/a /b")
    )
    assert config_files(environ(tmp_path, PIP_CONFIG_FILE=os.devnull)) == []
    assert off.no_index and off.find_links == ["/a", "/b"]
    assert off.uv_args() == ["--no-index", "--find-links", "/a", "--find-links", "/b"]


def test_agrees_with_pip_config_list_on_this_machine():
    """Whatever this machine configures, we read the same find-links and indexes as pip."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    )
    listed: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        listed[key.split(".", 1)[-1]] = value.strip().strip("'")
    ours = read_pip_settings()
    if "find-links" in listed:
        assert ours.find_links == listed["find-links"].split()
    if "extra-index-url" in listed:
        assert ours.extra_index_urls == listed["extra-index-url"].split()
    if "index-url" in listed:
        assert ours.index_url == listed["index-url"]
    for key in ("cert", "client-cert", "proxy"):
        if key in listed:
            assert getattr(ours, key.replace("-", "_")) == listed[key]
    if "trusted-host" in listed:
        assert ours.trusted_hosts == listed["trusted-host"].split()


def test_index_credentials_stay_out_of_command_lines(tmp_path):
    env = environ(
        tmp_path,
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL="https://user:s3cret@pypi.example/simple",
        PIP_EXTRA_INDEX_URL="https://other.example/simple",
        PIP_FIND_LINKS="/w",
    )
    settings = read_pip_settings(env)
    assert settings.has_credentials
    assert "s3cret" not in " ".join(settings.uv_args())
    assert settings.uv_args() == ["--find-links", "/w"]
    assert settings.uv_env((0, 13)) == {
        "UV_INDEX_URL": "https://user:s3cret@pypi.example/simple",
        "UV_EXTRA_INDEX_URL": "https://other.example/simple",
        "UV_SYSTEM_CERTS": "1",
    }
    plain = read_pip_settings(
        environ(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="https://pypi.example/simple")
    )
    assert plain.uv_env((0, 13)) == {"UV_SYSTEM_CERTS": "1"} and plain.uv_args() == [
        "--index-url",
        "https://pypi.example/simple",
    ]


def test_index_strategy_only_with_several_sources():
    from milabench.envs.pipconf import PipSettings

    # PyPI alone (or one replacing index): nothing to choose between, no option
    assert PipSettings().index_strategy_args(None) == []
    assert PipSettings(index_url="https://idx/simple").index_strategy_args(None) == []
    assert PipSettings(no_index=True, find_links=["/w"]).index_strategy_args(None) == []
    # an extra index or a find-links folder beside the default index: pip's behaviour
    best = ["--index-strategy", "unsafe-best-match"]
    assert PipSettings(extra_index_urls=["file:///x"]).index_strategy_args(None) == best
    assert PipSettings(find_links=["/w"]).index_strategy_args(None) == best
    # a constraint file's directive counts as a source too
    directive = ["--extra-index-url", "https://download.pytorch.org/whl/cu128"]
    assert PipSettings().index_strategy_args(None, directive) == best
    # an explicit install.index_strategy is always passed
    assert PipSettings().index_strategy_args("first-index") == ["--index-strategy", "first-index"]


def test_compile_argv_has_index_strategy_only_when_needed(tmp_path):
    from milabench.envs.pin import compile_argv
    from milabench.envs.pipconf import PipSettings

    plain = compile_argv(["r.in"], tmp_path / "o", [], [], PipSettings(), "cpu", None)
    assert "--index-strategy" not in plain
    many = compile_argv(
        ["r.in"], tmp_path / "o", [], [], PipSettings(find_links=["/w"]), "cpu", None
    )
    assert many[many.index("--index-strategy") + 1] == "unsafe-best-match"


def test_network_settings_become_uvs_in_pips_order(tmp_path):
    """cert, client-cert, trusted-host, proxy, timeout and retries, from files and PIP_*."""
    write(
        tmp_path / "etcxdg" / "pip" / "pip.conf",
        "[global]\nproxy = proxy.corp:3128\ntimeout = 60\n",
    )
    write(  # the user's file comes after /etc/pip.conf, whatever this machine's says
        tmp_path / "xdg" / "pip" / "pip.conf",
        "[global]\ncert = /etc/corp-ca.pem\ntrusted-host = mirror.corp\n  other.corp:8443\n"
        "[install]\nclient_cert = /home/me/client.pem\n",
    )
    env = environ(tmp_path, PIP_DEFAULT_TIMEOUT="7.5", PIP_RETRIES="2")
    settings = read_pip_settings(env)
    assert settings.cert == "/etc/corp-ca.pem" and settings.timeout == "7.5"
    assert settings.uv_args() == [
        "--allow-insecure-host", "mirror.corp", "--allow-insecure-host", "other.corp:8443",
    ]  # fmt: skip
    assert settings.uv_env((0, 13)) == {
        "SSL_CERT_FILE": "/etc/corp-ca.pem",
        "SSL_CLIENT_CERT": "/home/me/client.pem",
        "HTTPS_PROXY": "http://proxy.corp:3128",
        "https_proxy": "http://proxy.corp:3128",
        "HTTP_PROXY": "http://proxy.corp:3128",
        "http_proxy": "http://proxy.corp:3128",
        "UV_HTTP_TIMEOUT": "8",
        "UV_HTTP_RETRIES": "2",
        "UV_SYSTEM_CERTS": "1",
    }
    assert "PIP_DEFAULT_TIMEOUT" in settings.sources


def test_ca_bundle_variables_win_over_cert_as_for_pip(tmp_path):
    """pip's requests session lets REQUESTS_CA_BUNDLE (then CURL_CA_BUNDLE) win over its
    ``cert``; SSL_CERT_FILE alone is left for uv to read itself."""
    conf = write(tmp_path / "pip.conf", "[global]\ncert = /from/pip.pem\n")
    base = environ(tmp_path, PIP_CONFIG_FILE=str(conf))
    assert read_pip_settings(base).uv_env((0, 13))["SSL_CERT_FILE"] == "/from/pip.pem"
    curl = read_pip_settings({**base, "CURL_CA_BUNDLE": "/curl.pem"})
    assert curl.uv_env((0, 13))["SSL_CERT_FILE"] == "/curl.pem"
    both = read_pip_settings(
        {**base, "CURL_CA_BUNDLE": "/curl.pem", "REQUESTS_CA_BUNDLE": "/r.pem"}
    )
    assert both.uv_env((0, 13))["SSL_CERT_FILE"] == "/r.pem"
    none = read_pip_settings(environ(tmp_path, PIP_CONFIG_FILE=os.devnull, SSL_CERT_FILE="/s"))
    assert "SSL_CERT_FILE" not in none.uv_env((0, 13))


def test_uv_variables_the_user_set_are_kept(tmp_path):
    env = environ(
        tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_TIMEOUT="60", PIP_RETRIES="1",
        UV_HTTP_TIMEOUT="300", UV_NATIVE_TLS="0",
    )  # fmt: skip
    assert read_pip_settings(env).uv_env((0, 13)) == {"UV_HTTP_RETRIES": "1"}
    # before uv 0.11 the system-certificates switch had its old name
    old = read_pip_settings(environ(tmp_path, PIP_CONFIG_FILE=os.devnull))
    assert old.uv_env((0, 10, 4)) == {"UV_NATIVE_TLS": "1"}
    assert old.uv_env((0, 11, 0)) == {"UV_SYSTEM_CERTS": "1"}


def test_proxy_credentials_stay_out_of_command_lines(tmp_path):
    env = environ(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_PROXY="http://me:pw@proxy:3128")
    settings = read_pip_settings(env)
    assert "pw" not in " ".join(settings.uv_args())
    assert settings.uv_env((0, 13))["HTTPS_PROXY"] == "http://me:pw@proxy:3128"
