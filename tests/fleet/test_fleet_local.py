"""`milabench fleet` without SSH: nodes that are this machine, the pure parts, bad input.

The SSH tests (test_fleet_nodes.py) take minutes; these take seconds: the per-node plan
(argv, variables, one-node system files, selection), the fleet folder's atomic writes,
the bounded concurrency of the preparation, and one-line errors for bad input.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from clirun import milabench

from milabench.errors import ConfigError, UsageError
from milabench.fleet.folder import FleetFolder, NodeRecord, write_json_atomic
from milabench.fleet.nodeplan import (
    TOKEN_VAR,
    NodeCommandSettings,
    check_node_names,
    node_run_base,
    node_system,
    parse_phases,
    phase_argv,
    phase_env,
    short_reason,
    single_node_selection,
)

REPO = Path(__file__).resolve().parents[2]
CPU_SUITE = REPO / "config" / "cpu.yaml"


def _settings(**changes) -> NodeCommandSettings:
    values = dict(
        python="/opt/py/bin/python3",
        config="/b/code/f/tree/suite dir/cpu.yaml",
        system_file="/b/nodes/n1/system.yaml",
        base="/b/nodes/n1",
        select=("flops-fp32", "bert"),
        overrides=("ddp.enabled=false",),
    )
    values.update(changes)
    return NodeCommandSettings(**values)


def test_phase_argv_is_an_argv_list_with_the_node_paths():
    argv = phase_argv(_settings(), "run", run_name="fleet.2026-01-02_03-04-05")
    assert argv[:4] == ["/opt/py/bin/python3", "-m", "milabench", "run"]
    assert argv[argv.index("--config") + 1] == "/b/code/f/tree/suite dir/cpu.yaml"  # one word
    assert argv[argv.index("--base") + 1] == "/b/nodes/n1"
    assert argv[argv.index("--select") + 1] == "flops-fp32,bert"
    assert argv[argv.index("--override") + 1] == "ddp.enabled=false"
    assert argv[argv.index("--run-name") + 1] == "fleet.2026-01-02_03-04-05"
    assert "--dash" in argv and "--use-current-env" not in argv
    install = phase_argv(_settings(use_current_env=True, strict=True), "install")
    assert "--run-name" not in install and {"--use-current-env", "--strict"} <= set(install)
    with pytest.raises(ValueError):
        phase_argv(_settings(), "dance")


def test_phase_env_runs_the_node_locally_and_marks_every_process():
    env = phase_env("/b/code/f/pkg", "tok", pythonpath="/x")
    assert env["MILABENCH_FORCE_SSH"] == "0"
    assert env[TOKEN_VAR] == "tok"
    assert env["PYTHONPATH"] == "/b/code/f/pkg" + os.pathsep + "/x"
    assert "PYTHONPATH" not in phase_env(None, "tok")


def test_node_system_keeps_the_users_settings_but_only_this_node():
    raw = {
        "arch": "cuda",
        "sshkey": "~/.ssh/k",
        "docker_image": "img",
        "options": {"ssh": {"connect_timeout": 3}, "install": {"constraints_dir": "/main/c"}},
        "nodes": [{"name": "a", "ip": "10.0.0.1", "user": "u"}],
    }
    doc = node_system(
        raw, {"name": "n1", "ip": "10.0.0.2", "user": "bench"}, constraints_dir="/n/c"
    )
    system = doc["system"]
    assert system["arch"] == "cuda"
    assert "sshkey" not in system and "docker_image" not in system
    assert system["nodes"] == [
        {"name": "n1", "ip": "127.0.0.1", "user": "bench", "main": True, "local": True}
    ]
    assert system["options"]["install"]["constraints_dir"] == "/n/c"
    assert system["options"]["ssh"] == {"connect_timeout": 3}
    assert raw["options"]["install"]["constraints_dir"] == "/main/c"  # the input is untouched


def test_each_node_gets_its_own_base_even_when_bases_are_shared():
    main = "/data/bench"
    a = node_run_base({"name": "a"}, main)
    b = node_run_base({"name": "b"}, main)
    c = node_run_base({"name": "c", "base": "/scratch/x"}, main)
    assert a == "/data/bench/nodes/a" and b == "/data/bench/nodes/b"
    assert c == "/scratch/x/nodes/c"


def test_node_names_must_be_folder_names():
    check_node_names({"nodes": [{"name": "cn-d003.cluster"}, {"name": "n_1"}]})
    for bad in ("a/b", "..", "", " x"):
        with pytest.raises(ConfigError, match="node"):
            check_node_names({"nodes": [{"name": bad}], "config_file": "sys.yaml"})


def test_phases_are_kept_in_pipeline_order():
    assert parse_phases(None) == ("install", "prepare", "run")
    assert parse_phases("run,install") == ("install", "run")
    with pytest.raises(UsageError, match="bogus"):
        parse_phases("install,bogus")


def test_short_reason_is_the_last_meaningful_line():
    assert short_reason(["first", "\x1b[31mmilabench: error: boom\x1b[0m", "  "]) == (
        "milabench: error: boom"
    )
    assert short_reason([]) == "no output"


def test_multi_node_entries_are_left_out_with_a_note():
    from milabench.config import load_suite

    suite = load_suite(
        CPU_SUITE,
        select=["flops-fp32", "ddp"],
        overrides=["ddp.num_machines=2"],
        use_current_env=True,
    )
    selection = single_node_selection(suite)
    assert selection.run == ("flops-fp32",)
    assert [name for name, _ in selection.left_out] == ["ddp"]
    assert "num_machines 2" in selection.left_out[0][1]
    assert selection.overrides == ("ddp.enabled=false",)
    # the node, given the user's selection plus these overrides, resolves the same set
    again = load_suite(
        CPU_SUITE,
        select=["flops-fp32", "ddp"],
        overrides=["ddp.num_machines=2", *selection.overrides],
        use_current_env=True,
    )
    assert list(again.entries) == ["flops-fp32"]


def test_fleet_json_is_replaced_atomically(tmp_path):
    path = tmp_path / "fleet.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2, "é": "ü"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": 2, "é": "ü"}
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.json"]  # no temporary file left


def test_fleet_folders_never_share_a_name(tmp_path):
    nodes = [NodeRecord("n0", "127.0.0.1")]
    first = FleetFolder.create(tmp_path, config="c", select=[], exclude=[], nodes=nodes, name="f")
    second = FleetFolder.create(tmp_path, config="c", select=[], exclude=[], nodes=nodes, name="f")
    assert (first.name, second.name) == ("f", "f.2")
    doc = json.loads(second.json_path.read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "milabench-fleet"
    assert doc["nodes"][0]["status"] is None and doc["ended"] is None
    second.nodes[0].finish("unreachable", "connection refused")
    second.close()
    doc = json.loads(second.json_path.read_text())
    assert doc["ended"] and doc["nodes"][0]["status"] == "unreachable"
    with pytest.raises(ValueError):
        second.nodes[0].finish("sleepy")


def _local_system(path: Path, names: list[str]) -> Path:
    nodes = [{"name": n, "ip": "127.0.0.1", "user": "root", "local": True} for n in names]
    path.write_text(yaml.safe_dump({"system": {"arch": "cpu", "nodes": nodes}}))
    return path


def test_concurrency_bounds_the_preparation(tmp_path):
    """Four nodes that are this machine, two at a time: never more than two nodes between
    their first step and the end of their preparation at once; ddp left out with a note."""
    system = _local_system(tmp_path / "system.yaml", ["n0", "n1", "n2", "n3"])
    base = tmp_path / "base"
    done = milabench(
        "fleet",
        "--config",
        str(CPU_SUITE),
        "--system",
        str(system),
        "--base",
        str(base),
        "--select",
        "flops-fp32,ddp",
        "--override",
        "ddp.num_machines=2",
        "--use-current-env",
        "--node-python",
        sys.executable,
        "--phases",
        "install,prepare",
        "--concurrency",
        "2",
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left out" in done.stderr and "ddp" in done.stderr
    (folder,) = [p for p in (base / "fleet").iterdir()]
    doc = json.loads((folder / "fleet.json").read_text())
    assert doc["left_out"][0]["name"] == "ddp" and doc["entries"] == ["flops-fp32"]
    spans = []
    for node in doc["nodes"]:
        assert node["status"] == "ok", node
        assert node["run"] is None  # no run phase asked for
        assert node["base"] == str(base / "nodes" / node["name"])
        assert (base / "nodes" / node["name"] / "system.yaml").is_file()
        timeline = node["timeline"]
        spans.append((timeline["reach"][0], timeline["prepare"][1]))
    for begin, _ in spans:
        busy = sum(1 for b, e in spans if b <= begin < e)
        assert busy <= 2, spans
    assert max(b for b, _ in spans) >= min(e for _, e in spans)  # some node waited its turn


def test_bad_input_is_one_line_before_any_node_is_touched(tmp_path):
    base = tmp_path / "base"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"system": {"nodes": [{"name": "a/b", "ip": "h", "user": "u"}]}}))
    relative = tmp_path / "relative.yaml"
    node = {"name": "n1", "ip": "127.0.0.1", "user": "u", "local": True, "base": "rel/dir"}
    relative.write_text(yaml.safe_dump({"system": {"nodes": [node]}}))
    cases = [
        (["--phases", "install,bogus"], "--phases: unknown phase 'bogus'"),
        (["--system", str(bad)], "node 'a/b'"),
        (["--system", str(relative)], "(n1).base: expected an absolute path"),
        (["--select", "ddp", "--override", "ddp.num_machines=2"], "no single-node benchmark"),
        (["--select", "nosuchbench"], "nosuchbench"),
    ]
    for extra, message in cases:
        done = milabench("fleet", "--config", str(CPU_SUITE), "--base", str(base), *extra)
        assert done.returncode == 2, (extra, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (extra, done.stderr)
    assert not (base / "fleet").exists() or not any((base / "fleet").iterdir())
    done = milabench("fleet", "--concurrency", "0")
    assert done.returncode == 2 and "--concurrency" in done.stderr
