"""The options tree: environment > system file > default; explicit falsy wins."""

from __future__ import annotations

from milabench.config.options import env_name, get_bool, get_option, parse_scalar

SYSTEM = {"options": {"cpu": {"auto": True, "n_workers": 0, "name": "x"}, "flag": False}}


def test_env_name():
    assert env_name("cpu.n_workers") == "MILABENCH_CPU_N_WORKERS"
    assert env_name("install.backend") == "MILABENCH_INSTALL_BACKEND"


def test_default_when_absent():
    assert get_option(SYSTEM, "cpu.missing", 7) == 7
    assert get_option(None, "cpu.auto", "d") == "d"
    assert get_option({"options": {"cpu": 3}}, "cpu.auto", "d") == "d"


def test_system_value_including_falsy():
    assert get_option(SYSTEM, "cpu.auto", False) is True
    assert get_option(SYSTEM, "cpu.n_workers", 8) == 0  # explicit 0 wins over the default
    assert get_option(SYSTEM, "flag", True) is False


def test_environment_wins_even_when_falsy(monkeypatch):
    monkeypatch.setenv("MILABENCH_CPU_AUTO", "0")
    assert get_option(SYSTEM, "cpu.auto", True) == 0
    assert get_bool(SYSTEM, "cpu.auto", True) is False
    monkeypatch.setenv("MILABENCH_CPU_AUTO", "false")
    assert get_option(SYSTEM, "cpu.auto", True) is False
    monkeypatch.setenv("MILABENCH_CPU_NAME", "hello")
    assert get_option(SYSTEM, "cpu.name") == "hello"
    monkeypatch.setenv("MILABENCH_FLAG", "on")
    assert get_bool(SYSTEM, "flag") is True


def test_empty_environment_counts_as_unset(monkeypatch):
    monkeypatch.setenv("MILABENCH_CPU_AUTO", "")
    assert get_option(SYSTEM, "cpu.auto") is True


def test_scalar_parsing():
    assert parse_scalar("12") == 12
    assert parse_scalar("1.5") == 1.5
    assert parse_scalar("True") is True and parse_scalar("off") is False
    assert parse_scalar("null") is None
    assert parse_scalar("'07'") == "07"
    assert parse_scalar("uv") == "uv"
