"""System file loading and validation (docs/config.md section 2)."""

from __future__ import annotations

import getpass
import socket

import pytest
from cfgtest_util import REPO, write

from milabench.config.system import capacity_mib, is_local, load_system, main_node
from milabench.errors import ConfigError


def test_without_a_file_a_single_local_node():
    system = load_system(None)
    assert system["arch"] == "cpu"
    [node] = system["nodes"]
    assert node["name"] == socket.gethostname()
    assert node["ip"] == "127.0.0.1" and node["user"] == getpass.getuser()
    assert node["main"] is True and node["local"] is True and node["port"] == 22
    assert system["gpu"] == {"count": 0, "capacity": None}
    assert system["cpu"]["count"] >= 1
    assert system["options"] == {}


def test_example_system_file_with_two_nodes():
    system = load_system(REPO / "config" / "examples" / "system.yaml")
    manager, node1 = system["nodes"]
    assert main_node(system) is manager
    assert (manager["name"], manager["port"], manager["main"]) == ("manager", 22, True)
    assert (node1["port"], node1["main"]) == (2222, False)  # sshport accepted
    assert "sshport" not in node1
    assert manager["local"] is False and node1["local"] is False
    assert system["arch"] == "cuda"  # the user's value, not the detected cpu
    assert system["docker_image"] == "ghcr.io/example/milabench:cuda-nightly"
    assert system["gpu"]["capacity"] == "81920 MiB"


def test_bare_mapping_and_first_node_is_main(tmp_path):
    path = write(
        tmp_path / "s.yaml",
        "nodes:\n  - {name: a, ip: 10.255.0.1, user: u}\n  - {name: b, ip: 10.255.0.2, user: u}\n",
    )
    system = load_system(path)
    assert [n["main"] for n in system["nodes"]] == [True, False]
    assert main_node(system)["name"] == "a"


@pytest.mark.parametrize(
    "nodes,match",
    [
        ("  - {name: a, ip: 1.2.3.4}", r"system\.nodes\[0\] \(a\)\.user: required"),
        ("  - {ip: 1.2.3.4, user: u}", r"system\.nodes\[0\]\.name: required"),
        (
            "  - {name: a, ip: 1.2.3.4, user: u, main: true}\n"
            "  - {name: b, ip: 1.2.3.5, user: u, main: true}",
            r"only one node may be main",
        ),
        (
            "  - {name: a, ip: 1.2.3.4, user: u}\n  - {name: a, ip: 1.2.3.5, user: u}",
            r"two nodes are named 'a'",
        ),
        ("  - {name: a, ip: 1.2.3.4, user: u, port: http}", r"\(a\)\.port: not a port"),
        ("  - {name: a, ip: 1.2.3.4, user: u, port: 70000}", r"\(a\)\.port: out of range"),
        ("  - just-a-string", r"system\.nodes\[0\]: a node must be a mapping"),
    ],
)
def test_node_validation(tmp_path, nodes, match):
    path = write(
        tmp_path / "sys.yaml",
        "system:\n  nodes:\n" + "\n".join("  " + ln for ln in nodes.splitlines()),
    )
    with pytest.raises(ConfigError, match=match) as info:
        load_system(path)
    assert str(info.value).startswith(str(path))


def test_local_detection():
    host = socket.gethostname()
    assert is_local({"name": "x", "ip": "127.0.0.1"})
    assert is_local({"name": "x", "ip": "::1"})
    assert is_local({"name": "x", "ip": "localhost"})
    assert is_local({"name": host, "ip": "203.0.113.9"})
    assert not is_local({"name": "elsewhere", "ip": "203.0.113.9"})
    import psutil

    ours = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    for address in ours:
        assert is_local({"name": "x", "ip": address})


def test_detected_facts_fill_only_missing_values(tmp_path, monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:4:40960")
    system = load_system(None)
    assert system["arch"] == "cuda"
    assert system["gpu"] == {"count": 4, "capacity": "40960 MiB"}
    path = write(
        tmp_path / "s.yaml", "system:\n  arch: rocm\n  gpu: {count: 2}\n  cpu: {count: 3}\n"
    )
    system = load_system(path)
    assert system["arch"] == "rocm"  # the user's value wins over detection
    assert system["gpu"] == {"count": 2, "capacity": "40960 MiB"}
    assert system["cpu"]["count"] == 3


def test_gpu_arch_variable_forces(tmp_path, monkeypatch):
    monkeypatch.setenv("MILABENCH_GPU_ARCH", "xpu")
    assert load_system(None)["arch"] == "xpu"
    path = write(tmp_path / "s.yaml", "system: {arch: cuda}\n")
    assert load_system(path)["arch"] == "xpu"


def test_interpolation_inside_the_system_file(tmp_path):
    path = write(
        tmp_path / "s.yaml",
        "system:\n  arch: hpu\n  docker_image: 'img:${system.arch}'\n"
        "  options: {tag: '${system.arch}-${system.nodes.0.name}'}\n"
        "  nodes: [{name: n0, ip: 127.0.0.1, user: me}]\n",
    )
    system = load_system(path)
    assert system["docker_image"] == "img:hpu"
    assert system["options"]["tag"] == "hpu-n0"


@pytest.mark.parametrize(
    "text,match",
    [
        ("system: [1, 2]", r"system: expected a mapping"),
        ("system: {gpu: 3}", r"system\.gpu: expected a mapping"),
        ("system: {options: [a]}", r"system\.options: expected a mapping"),
        ("system: {gpu: {count: many}}", r"system\.gpu\.count"),
        ("system: {gpu: {capacity: lots}}", r"system\.gpu\.capacity"),
        ("system: {nodes: []}", r"system\.nodes: expected a non-empty list"),
        ("system: {x: '${system.nope}'}", r"cannot interpolate"),
        ("system: {a: [b", r"invalid YAML: line 2, column 1"),
    ],
)
def test_system_errors(tmp_path, text, match):
    path = write(tmp_path / "s.yaml", text + "\n")
    with pytest.raises(ConfigError, match=match):
        load_system(path)


def test_missing_system_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_system(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    "value,mib",
    [
        ("81920 MiB", 81920),
        ("80 GiB", 81920),
        ("80GB", 81920),
        (4096, 4096),
        ("1.5 TiB", 1572864),
        (None, None),
        ("lots", None),
    ],
)
def test_capacity_parsing(value, mib):
    assert capacity_mib(value) == mib
