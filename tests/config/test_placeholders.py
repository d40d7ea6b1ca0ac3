"""Brace placeholders and the safe helpers (docs/config.md "Brace placeholders")."""

from __future__ import annotations

import warnings

import pytest

from milabench.config.placeholders import (
    PlaceholderWarning,
    placeholder_values,
    resolve_argv,
)
from milabench.errors import ConfigError


def system(arch="cuda", gpus=8, cpus=64, capacity="81920 MiB", **options):
    return {
        "arch": arch,
        "gpu": {"count": gpus, "capacity": capacity},
        "cpu": {"count": cpus},
        "options": options,
        "sshkey": "~/.ssh/id",
        "nodes": [],
    }


ENTRY = {
    "name": "bench",
    "config_file": "suite.yaml",
    "definition": "/code/bench",
    "dirs": {
        "base": "/b",
        "venv": "/b/venv/g",
        "data": "/b/data",
        "runs": "/b/runs",
        "extra": "/b/extra/g",
        "cache": "/b/cache",
        "code": "/code/bench",
    },
}


def test_value_table():
    v = placeholder_values(ENTRY, system())
    assert v["cpu_count"] == 64 and v["gpu_count"] == 8 and v["cpu_per_gpu"] == 8
    assert v["n_worker"] == 8
    assert (v["arch"], v["device_name"], v["ccl"]) == ("cuda", "cuda", "nccl")
    assert v["milabench_data"] == "/b/data" and v["milabench_code"] == "/code/bench"
    assert v["milabench_name"] == "bench" and v["milabench_venv"] == "/b/venv/g"
    assert v["sshkey"] == "~/.ssh/id"  # any top-level system key


@pytest.mark.parametrize(
    "arch,device,ccl",
    [
        ("rocm", "cuda", "nccl"),
        ("xpu", "xpu", "xccl"),
        ("hpu", "hpu", "hccl"),
        ("cpu", "cpu", "gloo"),
        ("weird", "cpu", "gloo"),
    ],
)
def test_device_name_and_ccl(arch, device, ccl):
    v = placeholder_values(ENTRY, system(arch=arch))
    assert (v["device_name"], v["ccl"]) == (device, ccl)


def test_n_worker_clamped_and_options():
    assert placeholder_values(ENTRY, system(cpus=8, gpus=8))["n_worker"] == 2  # min
    assert placeholder_values(ENTRY, system(cpus=512, gpus=2))["n_worker"] == 16  # max
    v = placeholder_values(ENTRY, system(cpus=512, gpus=2, cpu={"max": 64, "min": 1}))
    assert v["n_worker"] == 64
    assert placeholder_values(ENTRY, system(cpu={"n_workers": 5}))["n_worker"] == 5
    v = placeholder_values(ENTRY, system(cpus=64, cpu={"total_count": 40, "reserved_cores": 8}))
    assert v["cpu_count"] == 32 and v["cpu_per_gpu"] == 4


def test_n_worker_from_environment_beats_system(monkeypatch):
    monkeypatch.setenv("MILABENCH_CPU_N_WORKERS", "3")
    assert placeholder_values(ENTRY, system(cpu={"n_workers": 5}))["n_worker"] == 3


def test_resolve_argv_placeholders_and_unknown_braces():
    argv = [
        "--workers",
        "{n_worker}",
        "--data={milabench_data}/x",
        "--json",
        '{"a": 1, "b": {"c": 2}}',
        "{not_ours}",
        "--device",
        "{device_name}:{device}",
    ]
    out = resolve_argv(argv, ENTRY, system(), device=3)
    assert out == [
        "--workers",
        "8",
        "--data=/b/data/x",
        "--json",
        '{"a": 1, "b": {"c": 2}}',
        "{not_ours}",
        "--device",
        "cuda:3",
    ]


def test_extra_values():
    assert resolve_argv(["{rank}"], ENTRY, system(), extra={"rank": 7}) == ["7"]


def test_misspelled_placeholder_warns_and_is_kept():
    with pytest.warns(PlaceholderWarning, match=r"did you mean '\{n_worker\}'"):
        out = resolve_argv(["{n_workers}"], ENTRY, system())
    assert out == ["{n_workers}"]


def test_far_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_argv(["{totally_else}"], ENTRY, system()) == ["{totally_else}"]


def test_auto_follows_option(monkeypatch):
    argv = ["--workers", "auto({n_worker}, 4)"]
    assert resolve_argv(argv, ENTRY, system()) == ["--workers", "4"]
    assert resolve_argv(argv, ENTRY, system(cpu={"auto": True})) == ["--workers", "8"]
    monkeypatch.setenv("MILABENCH_CPU_AUTO", "0")  # explicit falsy wins over the file
    assert resolve_argv(argv, ENTRY, system(cpu={"auto": True})) == ["--workers", "4"]


def test_auto_batch_scales_with_capacity():
    argv = ["--batch-size", "auto_batch(64)"]
    assert resolve_argv(argv, ENTRY, system(capacity="40960 MiB")) == ["--batch-size", "64"]
    on = {"batch_resize": True}
    assert resolve_argv(argv, ENTRY, system(capacity="40960 MiB", **on))[1] == "32"
    assert resolve_argv(argv, ENTRY, system(capacity="160 GiB", **on))[1] == "128"
    assert resolve_argv(argv, ENTRY, system(capacity=None, **on))[1] == "64"
    small = system(capacity="100 MiB", **on)
    assert resolve_argv(argv, ENTRY, small)[1] == "1"


def test_expr_and_name_value_items():
    out = resolve_argv(
        [
            "expr({cpu_count} // 3)",
            "--n=expr(max(cpu_per_gpu * 2, 1))",
            "x=auto(1, 2)",
            "expr(8 / 2)",
            "expr(2 ** 10 % 1000)",
            "expr(round(7 / 2))",
            "expr(1/4)",
        ],
        ENTRY,
        system(),
    )
    assert out == ["21", "--n=16", "x=2", "4", "24", "4", "0.25"]


@pytest.mark.parametrize(
    "bad",
    [
        "expr(__import__('os').system('true'))",
        "expr(open('/etc/passwd'))",
        "expr(().__class__)",
        "expr(9 ** 9 ** 9)",
        "expr(cpu_count >)",
        "expr(unknown_name + 1)",
        "expr(lambda: 1)",
        "expr(1 / 0)",
    ],
)
def test_expr_is_restricted(bad):
    with pytest.raises(ConfigError) as info:
        resolve_argv([bad], ENTRY, system())
    assert str(info.value).startswith("suite.yaml: bench.argv: ")
