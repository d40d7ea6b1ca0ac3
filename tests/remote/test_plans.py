"""Multi-node plan methods: torchrun and accelerate command lines per node, tags, skips."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from milabench.plan.multinode import (
    AccelerateNodes,
    NotEnoughNodes,
    TorchRunNodes,
    select_nodes,
    unmet_nodes,
)
from milabench.plan.tree import Script


def _system(n=3, **extra):
    nodes = [
        {"name": f"n{i}", "ip": f"10.0.0.{i + 1}", "user": "u", "port": 22, "main": i == 1}
        for i in range(n)
    ]
    return {"arch": "cpu", "nodes": nodes, "options": {}, **extra}


def _entry(tmp_path: Path, **extra):
    return {
        "name": "ddp-nodes",
        "tag": ["ddp-nodes"],
        "definition": str(tmp_path),
        "num_machines": 2,
        "use_current_env": True,
        "plan": {"method": "torchrun", "nproc": 2},
        "dirs": {"base": str(tmp_path), "venv": str(tmp_path / "venv")},
        **extra,
    }


class _Inner(Script):
    """A Script whose environment is fixed (the plan layer above is what is tested)."""

    def specs(self, device=None):
        from milabench.plan.spec import ProcessSpec

        return [
            ProcessSpec(
                tag=list(self.tag),
                argv=[self.python, self.script, *self.argv],
                env={"A": "1"},
                cwd=self.cwd,
                entry=self.entry,
            )
        ]


def test_select_nodes_main_first_and_skip_reason(tmp_path):
    system = _system(3)
    entry = _entry(tmp_path)
    assert [n["name"] for n in select_nodes(entry, system)] == ["n1", "n0"]
    assert unmet_nodes(entry, _system(1)) == "needs 2 nodes (num_machines), the system has 1"
    with pytest.raises(NotEnoughNodes, match="needs 2 nodes"):
        select_nodes(entry, _system(1))


def test_torchrun_nodes_command_lines(tmp_path):
    system = _system(3)
    entry = _entry(tmp_path)
    inner = _Inner(entry, system, "main.py", ["--epochs", "1"], python=sys.executable)
    specs = TorchRunNodes(inner, executable="/v/bin/torchrun").processes()
    assert [s.tag for s in specs] == [["ddp-nodes", "0", "n1"], ["ddp-nodes", "0", "n0"]]
    assert [s.node["name"] for s in specs] == ["n1", "n0"]
    for rank, spec in enumerate(specs):
        assert spec.argv == [
            "/v/bin/torchrun",
            "--nnodes=2",
            f"--node-rank={rank}",
            "--nproc-per-node=2",
            "--rdzv-backend=static",
            "--rdzv-endpoint=10.0.0.2:29400",
            "--master-addr=10.0.0.2",
            "--master-port=29400",
            "main.py",
            "--epochs",
            "1",
        ]
        assert spec.data_channel == "smuggle"
        assert spec.env["A"] == "1" and spec.env["MILABENCH_NODE_RANK"] == str(rank)


def test_port_option_and_accelerate(tmp_path, monkeypatch):
    system = _system(2, options={"multinode": {"port": 30123}})
    entry = _entry(tmp_path, plan={"method": "accelerate", "nproc": 4})
    inner = _Inner(entry, system, "main.py", [], python=sys.executable)
    specs = AccelerateNodes(inner, executable="accelerate").processes()
    assert specs[1].argv == [
        "accelerate",
        "launch",
        "--cpu",
        "--machine_rank=1",
        "--num_machines=2",
        "--num_processes=8",
        "--main_process_ip=10.0.0.2",
        "--main_process_port=30123",
        "--rdzv_backend=static",
        "main.py",
    ]
    monkeypatch.setenv("MILABENCH_MULTINODE_PORT", "31000")
    specs = TorchRunNodes(inner, executable="torchrun").processes()
    assert "--master-port=31000" in specs[0].argv


def test_methods_are_registered():
    from milabench.plan import methods

    assert {"torchrun", "accelerate", "multinode"} <= set(methods())
