"""Slurm node-list expansion, the `slurm system` command and docker command lines."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
import yaml

from milabench.errors import UsageError
from milabench.plan.spec import ProcessSpec
from milabench.remote.docker import docker_wrap
from milabench.remote.launcher import SSHLauncher
from milabench.slurm.nodelist import expand_nodelist, system_from_nodelist


@pytest.mark.parametrize(
    "text, expected",
    [
        ("cn-d[003-004],cn-e001", ["cn-d003", "cn-d004", "cn-e001"]),
        ("node[1,3-5]", ["node1", "node3", "node4", "node5"]),
        ("a[01-02]b[1-2]", ["a01b1", "a01b2", "a02b1", "a02b2"]),
        ("single", ["single"]),
        ("gpu[8-11],cpu01", ["gpu8", "gpu9", "gpu10", "gpu11", "cpu01"]),
        ("x[098-101]", ["x098", "x099", "x100", "x101"]),
        ("n[1-2],n[2-3]", ["n1", "n2", "n3"]),
    ],
)
def test_expand_nodelist(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize("bad", ["cn[1-", "cn]1[", "cn[5-3]", "cn[a-b]"])
def test_expand_nodelist_errors(bad):
    with pytest.raises(UsageError):
        expand_nodelist(bad)


def test_system_from_nodelist_first_is_main(monkeypatch):
    monkeypatch.setenv("USER", "alice")
    doc = system_from_nodelist("cn-d[003-004],cn-e001")
    nodes = doc["system"]["nodes"]
    assert [n["name"] for n in nodes] == ["cn-d003", "cn-d004", "cn-e001"]
    assert [n["main"] for n in nodes] == [True, False, False]
    assert all(n["user"] == "alice" and n["ip"] == n["name"] for n in nodes)


def test_slurm_system_command_writes_file(tmp_path):
    out = tmp_path / "sys" / "system.yaml"
    env = {"SLURM_JOB_NODELIST": "node[1,3-4]", "USER": "bob", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "milabench", "slurm", "system", "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(out.read_text())
    assert [n["name"] for n in doc["system"]["nodes"]] == ["node1", "node3", "node4"]
    assert doc["system"]["nodes"][0]["main"] is True
    missing = subprocess.run(
        [sys.executable, "-m", "milabench", "slurm", "system"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "SLURM_JOB_NODELIST" in missing.stderr and "Traceback" not in missing.stderr


def test_docker_wrap_command_line():
    argv = docker_wrap(
        ["python", "main.py", "--x", "a b"],
        {"A": "1", "B": "x y"},
        image="ghcr.io/org/milabench:cuda",
        base="/data/mb",
        cwd="/data/mb/code",
    )
    assert argv == [
        "docker", "run", "--rm", "--network", "host", "--ipc", "host", "--gpus", "all",
        "-v", "/data/mb:/data/mb", "-w", "/data/mb/code",
        "-e", "A", "-e", "B",
        "ghcr.io/org/milabench:cuda", "python", "main.py", "--x", "a b",
    ]  # fmt: skip
    rocm = docker_wrap(["true"], {}, image="img", base=None, arch="rocm")
    assert "--gpus" not in rocm and ["--device", "/dev/kfd"] == rocm[7:9]


def test_ssh_launcher_wraps_remote_command_in_docker():
    system = {"arch": "cuda", "docker_image": "img:tag", "nodes": []}
    spec = ProcessSpec(
        tag=["b", "0", "n1"],
        argv=["/base/venv/torch/bin/torchrun", "--nnodes=2", "main.py"],
        env={"SECRET_TOKEN": "it's", "X": "$y"},
        cwd="/base/code",
        node={"name": "n1", "ip": "10.0.0.2", "user": "u"},
        entry={"dirs": {"base": "/base"}},
        data_channel="smuggle",
    )
    words = shlex.split(SSHLauncher(system).command_for(spec))
    docker = words[words.index("docker") :]
    assert docker[:9] == [
        "docker",
        "run",
        "--rm",
        "--network",
        "host",
        "--ipc",
        "host",
        "--gpus",
        "all",
    ]
    assert ["-v", "/base:/base"] == docker[9:11]
    # names only: docker copies the values from the environment the env file set
    assert ["-e", "SECRET_TOKEN"] in [docker[i : i + 2] for i in range(len(docker))]
    assert "DATA_FD" in docker and "X" in docker
    command = SSHLauncher(system).command_for(spec, env_file="/tmp/tmp.abc")
    assert "it's" not in command and "$y" not in command
    assert shlex.split(command)[:5] == ["set", "-a", "&&", ".", "/tmp/tmp.abc"]
    assert docker[-4:] == ["img:tag", "/base/venv/torch/bin/torchrun", "--nnodes=2", "main.py"]


def test_dockerfiles_and_sbatch_are_plausible():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for arch in ("cuda", "rocm", "cpu"):
        text = (root / "docker" / f"Dockerfile-{arch}").read_text()
        assert text.count("\nFROM ") == 1
        assert "MILABENCH_BASE=" in text and "MILABENCH_CONFIG=" in text
        assert "milabench install" in text and f"MILABENCH_GPU_ARCH={arch}" in text
        # no .git in the image: the commit it was built from is passed in and recorded
        assert "ARG MILABENCH_COMMIT=" in text and "MILABENCH_COMMIT=${MILABENCH_COMMIT}" in text
    script = root / "scripts" / "slurm" / "milabench.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    missing = subprocess.run(
        ["bash", str(script)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "SLURM_JOB_NODELIST" in missing.stderr
