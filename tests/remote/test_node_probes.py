"""The programs sent to a node (preflight's node probe, the fleet's facts probe, the
doctor's checks) carry the modules they import, byte for byte (`milabench.machine.inline`),
and all report the one machine-facts record (`milabench.machine.facts`). Run here with
``python -I`` from ``/``: nothing of milabench importable but what the program carries."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import benchkit.accelerators
from milabench.doctor.probe import probe_argv
from milabench.machine.facts import (
    SHIPPED_MODULES,
    accelerator_arch,
    accelerator_count,
    commit_override,
    git_head,
    machine_facts,
    tool_commit,
)
from milabench.machine.inline import (
    MAX_ARGUMENT,
    inline_program,
    module_source,
    unpacked_sources,
)
from milabench.metadata import REPO_ROOT, machine_metadata
from milabench.remote import facts
from milabench.remote.probe import RESULT_PREFIX, node_probe_argv, prefixed_json

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "FAKE_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return {**env, **extra}


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/", env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_program_carries_the_modules_as_this_process_reads_them():
    program = inline_program("print('hi')", SHIPPED_MODULES)
    shipped = unpacked_sources(program)
    assert list(shipped) == list(SHIPPED_MODULES)
    for name, text in shipped.items():
        assert text == module_source(name)
    assert shipped["benchkit.accelerators"] == Path(benchkit.accelerators.__file__).read_text()
    with pytest.raises(ImportError, match="no Python source"):
        module_source("sys")


def test_the_carried_parser_is_the_one_that_runs_on_the_node():
    """Not the node's own copy (there is none under -I here), the one sent: same answer,
    same error on a bad value."""
    main = (
        "import sys\n"
        "from benchkit.accelerators import fake_gpus\n"
        "import benchkit.accelerators as a\n"
        "print(a.__spec__.origin, tuple(fake_gpus()))\n"
    )
    argv = [sys.executable, "-I", "-c", inline_program(main, SHIPPED_MODULES)]
    done = _run(argv, _clean_env(MILABENCH_FAKE_GPUS="rocm:4:1024:lost@9"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "<inline benchkit.accelerators> ('rocm', 4, 1024, 9)"
    done = _run(argv, _clean_env(MILABENCH_FAKE_GPUS="rocm:four"))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "benchkit.accelerators.AcceleratorSettingError: MILABENCH_FAKE_GPUS='rocm:four': "
        "count 'four' is not a whole number; expected <arch>:<count>[:<MiB>[:lost@N]] "
        "with arch one of cuda, rocm, xpu, hpu, cpu"
    )


def test_every_program_fits_one_argument_of_a_remote_shell(tmp_path):
    """Over SSH the whole command is one argument of the node's shell (Linux: 128 KiB)."""
    commands = {
        "doctor": probe_argv("python3", paths=[str(tmp_path)]),
        "preflight": node_probe_argv("python3", 29400, [str(tmp_path)]),
        "facts": facts.probe_argv({"g": str(tmp_path)}, str(tmp_path)),
    }
    for name, argv in commands.items():
        line = " ".join(shlex.quote(str(a)) for a in argv)
        assert len(line.encode()) < MAX_ARGUMENT // 2, name  # room to grow
        assert set(unpacked_sources(next(a for a in argv if "_SOURCES" in a))) >= {
            "benchkit.accelerators"
        }


def test_preflight_node_probe_reports_the_machine_facts(tmp_path):
    env_dir = tmp_path / "venv"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "python").symlink_to(sys.executable)
    # the node's record of a failed install of the missing one (milabench.envs.install)
    record = {"group": "no", "host": "node7", "message": "install: TLS: unknown issuer"}
    (tmp_path / "no.install-failed.json").write_text(json.dumps(record))
    argv = node_probe_argv(sys.executable, _free_port(), [str(env_dir), str(tmp_path / "no")])
    argv.insert(1, "-I")
    done = _run(argv, _clean_env(MILABENCH_FAKE_GPUS="cuda:2:1000"))
    assert done.returncode == 0, done.stderr
    found = prefixed_json(done.stdout, RESULT_PREFIX)
    here = machine_facts()
    assert set(here) <= set(found)  # the one record, plus what preflight adds
    assert set(found) - set(here) == {"torch", "envs", "env_failures", "port_free"}
    assert found["cpu"] == here["cpu"] and found["os"] == here["os"]
    assert found["python"] == here["python"] and found["memory"] == here["memory"]
    assert accelerator_arch(found) == "cuda" and accelerator_count(found) == 2
    assert found["accelerators"]["system"]["driver_version"] == "fake"
    assert found["envs"] == {str(env_dir): True, str(tmp_path / "no"): False}
    assert found["env_failures"] == {str(tmp_path / "no"): record}
    assert found["port_free"] is True


def test_preflight_names_why_a_missing_environment_is_missing(tmp_path):
    """A node whose environment is missing because its install failed: preflight's line
    says so with the node's own record (host, step, cause), read by the probe there."""
    from milabench.envs import FAILURE_SUFFIX
    from milabench.remote import probe
    from milabench.remote.preflight import probe_node

    assert probe.FAILURE_SUFFIX == FAILURE_SUFFIX  # the probe's copy of the file name
    env = tmp_path / "venv" / "torch"
    record = {"host": "node7", "message": "install: TLS: unknown issuer at https://idx/simple/x/"}
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / f"torch{FAILURE_SUFFIX}").write_text(json.dumps(record))
    node = {"name": "main", "ip": "127.0.0.1", "user": "me", "main": True, "local": True}
    system = {"nodes": [node]}
    found = asyncio.run(
        probe_node(node, system, None, python=sys.executable, envs=[str(env)], port=_free_port())
    )
    assert found.error == (
        f"node main (me@127.0.0.1:22): environment missing: {env} (the last install on node7 failed "
        "(install: TLS: unknown issuer at https://idx/simple/x/))"
    )


def test_fleet_environment_from_the_same_record(tmp_path):
    """The fleet's flat hardware keys come from the node's facts: here a node whose
    Python has no usable NVML and whose nvidia-smi answers."""
    path = f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}"
    env = _clean_env(PATH=path, FAKE_NVIDIA_SMI="nvidia-smi-h100.csv")
    argv = facts.probe_argv({"grp": str(tmp_path / "none")}, facts.local_package_dir())
    done = _run(argv, env)
    assert done.returncode == 0, done.stderr
    record = facts.parse_facts(done.stdout)
    assert set(machine_facts()) <= set(record)
    assert accelerator_count(record) == 3 and record["accelerators"]["system"]["backend"] in (
        "nvidia-smi",
        "nvml",  # a machine with a real driver: never the case where these tests run
    )
    assert facts.hardware(record) == {
        "cpu_model": machine_facts()["cpu"]["brand"],
        "cpu_count": os.cpu_count(),
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 3,
        "driver": "550.54.15",
    }
    assert record["milabench"] and record["milabench_commit"] == git_head(REPO_ROOT)
    assert record["packages"] == {"grp": None}


def test_node_environment_keeps_the_fleet_format(tmp_path, monkeypatch):
    for name in ("MILABENCH_FAKE_GPUS", "MILABENCH_FORCE_SSH", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:4:1024")
    node = {"name": "here", "ip": "127.0.0.1", "local": True, "main": True}
    system = {"nodes": [node]}
    env = asyncio.run(facts.node_environment(system, node, ["grp"], str(tmp_path)))
    assert set(env) == {*facts.ENVIRONMENT_KEYS, "milabench_code", "package_dir"}
    assert env["gpu_model"] == "Fake cuda device" and env["gpu_count"] == 4
    assert env["driver"] == "fake" and env["cpu_count"] == os.cpu_count()
    assert env["packages"] == {"grp": None} and env["torch"] == {"grp": None}


def test_the_meta_record_is_the_machine_facts_with_the_tool():
    meta = machine_metadata({"options": {"a": 1}})
    here = machine_facts()
    assert set(meta) == {*here, "milabench", "date", "options"}
    assert meta["cpu"] == here["cpu"] and meta["os"] == here["os"]
    assert meta["milabench"]["commit"] == git_head(REPO_ROOT) and meta["options"] == {"a": 1}
    assert json.loads(json.dumps(meta)) == meta


def test_git_head_reads_refs_without_git(tmp_path):
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    assert git_head(tmp_path) is None  # no such ref yet
    (git / "packed-refs").write_text("# pack-refs\n" + "a" * 40 + " refs/heads/main\n")
    assert git_head(tmp_path) == "a" * 40
    (git / "refs" / "heads" / "main").write_text("b" * 40 + "\n")
    assert git_head(tmp_path) == "b" * 40  # the loose ref wins
    (git / "HEAD").write_text("c" * 40 + "\n")
    assert git_head(tmp_path) == "c" * 40  # detached
    assert git_head(tmp_path / "nowhere") is None


def test_a_copy_without_git_takes_its_commit_from_milabench_commit(tmp_path, monkeypatch):
    """A container image or a copied tree has no ``.git``: ``MILABENCH_COMMIT`` names its
    commit (lowercased); a checkout's own HEAD wins over it; a value that is no commit
    raises, naming the variable (the CLI turns that into exit 2)."""
    monkeypatch.delenv("MILABENCH_COMMIT", raising=False)
    assert tool_commit(tmp_path) is None and commit_override() is None
    monkeypatch.setenv("MILABENCH_COMMIT", " ABCDEF1 ")
    assert tool_commit(tmp_path) == "abcdef1"
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("c" * 40 + "\n")
    assert tool_commit(tmp_path) == "c" * 40
    for bad in ("main", "abc", "g" * 40, "a" * 41):
        monkeypatch.setenv("MILABENCH_COMMIT", bad)
        with pytest.raises(ValueError, match=f"MILABENCH_COMMIT='{bad}': expected a git commit"):
            commit_override()
        assert tool_commit(tmp_path / "copy") is None
    assert commit_override({"MILABENCH_COMMIT": ""}) is None


def test_git_head_of_a_worktree_and_of_a_copy_without_git(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("cannot run on this machine: no git")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")  # fmt: skip
    repo, tree = tmp_path / "repo", tmp_path / "tree"

    def run(*argv: str, cwd: Path = repo) -> str:
        return subprocess.run([git, *argv], cwd=cwd, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    repo.mkdir()
    run("init", "-q", "-b", "main")
    run("commit", "-q", "--allow-empty", "-m", "one")
    run("worktree", "add", "-q", "-b", "side", str(tree))
    run("commit", "-q", "--allow-empty", "-m", "two", cwd=tree)
    assert git_head(repo) == run("rev-parse", "HEAD")
    assert git_head(tree) == run("rev-parse", "HEAD", cwd=tree) != git_head(repo)
    run("pack-refs", "--all")  # the worktree's branch now lives in the shared packed-refs
    assert git_head(tree) == run("rev-parse", "HEAD", cwd=tree)
    shutil.rmtree(repo / ".git")
    assert git_head(repo) is None and git_head(tree) is None  # a copy without git
