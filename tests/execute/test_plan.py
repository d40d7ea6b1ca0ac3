"""Plan nodes: argv and environment of each layer, without starting anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from milabench.errors import ConfigError
from milabench.pack import (
    BenchmarkPackage,
    import_name,
    inputs_only_names,
    load_pack,
    requirement_names,
)
from milabench.plan import (
    NJobs,
    PerGPU,
    Script,
    TorchRun,
    Voir,
    Wrapper,
    build_plan,
    register_method,
    with_repeat,
)
from milabench.plan.environment import benchmark_env, selection_value
from milabench.plan.tree import voir_flags

from .conftest import BENCHMARKS, cpu_system, make_entry


def gpu_system(arch: str, count: int) -> dict:
    return cpu_system(arch=arch, gpu={"count": count, "capacity": "80000 MiB"}, cpu={"count": 16})


def test_script_argv_env_and_placeholders(tmp_path):
    entry = make_entry(
        "healthy", tmp_path, argv={"--workers": "{n_worker}", "--steps": 3}, env={"EXTRA": "1"}
    )
    spec = Script(
        entry,
        cpu_system(),
        "/x/main.py",
        ["--workers", "{n_worker}", "--cpus", "{cpu_per_gpu}"],
        python="/v/bin/python",
    ).processes()[0]
    assert spec.argv == ["/v/bin/python", "/x/main.py", "--workers", "4", "--cpus", "4"]
    assert spec.tag == ["healthy"]
    assert spec.cwd == str(BENCHMARKS / "healthy")
    assert spec.timeout == 30
    assert spec.data_channel == "fd"
    env = spec.env
    assert env["EXTRA"] == "1"
    assert env["OMP_NUM_THREADS"] == "4"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["MILABENCH_DIR_DATA"] == str(tmp_path / "data")
    assert env["MILABENCH_DIR_BASE"] == str(tmp_path)
    assert env["MILABENCH_DIR_RUNS"] == str(tmp_path / "runs")
    assert env["MILABENCH_DIR_EXTRA"] == str(tmp_path / "extra" / "healthy")
    assert env["XDG_CACHE_HOME"] == str(tmp_path / "cache")
    assert env["TORCH_HOME"].startswith(str(tmp_path / "cache"))
    assert env["HF_HOME"].startswith(str(tmp_path / "cache"))
    assert json.loads(env["MILABENCH_CONFIG"])["name"] == "healthy"
    assert "CUDA_VISIBLE_DEVICES" not in env
    # use_current_env: the current interpreter's bin first on PATH, no VIRTUAL_ENV
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "VIRTUAL_ENV" not in env


def test_venv_env_when_not_current(tmp_path):
    entry = make_entry("healthy", tmp_path, use_current_env=False)
    env = benchmark_env(entry, cpu_system())
    assert env["VIRTUAL_ENV"] == str(tmp_path / "venv" / "healthy")
    assert env["PATH"].split(":")[0] == str(tmp_path / "venv" / "healthy" / "bin")
    pack = load_pack(entry, cpu_system())
    assert pack.python == str(tmp_path / "venv" / "healthy" / "bin" / "python")


@pytest.mark.parametrize(
    "arch,var,value",
    [
        ("cuda", "CUDA_VISIBLE_DEVICES", ["0", "1", "2"]),
        ("rocm", "ROCR_VISIBLE_DEVICES", ["0", "1", "2"]),
        ("xpu", "ONEAPI_DEVICE_SELECTOR", ["level_zero:0", "level_zero:1", "level_zero:2"]),
        ("hpu", "HABANA_VISIBLE_MODULES", ["0", "1", "2"]),
    ],
)
def test_per_gpu_selection_variable(tmp_path, arch, var, value):
    system = gpu_system(arch, 3)
    entry = make_entry("healthy", tmp_path)
    specs = load_pack(entry, system).build_run_plan().processes()
    assert [s.tag for s in specs] == [["healthy", "D0"], ["healthy", "D1"], ["healthy", "D2"]]
    assert [s.env[var] for s in specs] == value
    assert all(s.env["OMP_NUM_THREADS"] == "5" for s in specs)  # 16 // 3


def test_per_gpu_without_accelerator_is_one_d0(tmp_path):
    specs = load_pack(make_entry("healthy", tmp_path), cpu_system()).build_run_plan().processes()
    assert [s.tag for s in specs] == [["healthy", "D0"]]
    assert specs[0].argv[:2] == [sys.executable, str(BENCHMARKS / "healthy" / "main.py")]


def test_device_placeholder_per_process(tmp_path):
    entry = make_entry("healthy", tmp_path, argv={"--device": "cuda:{device}"})
    specs = load_pack(entry, gpu_system("cuda", 2)).build_run_plan().processes()
    assert [s.argv[-1] for s in specs] == ["cuda:0", "cuda:1"]


def test_njobs_sees_all_devices(tmp_path):
    entry = make_entry("healthy", tmp_path, plan={"method": "njobs", "n": 3})
    specs = load_pack(entry, gpu_system("cuda", 2)).build_run_plan().processes()
    assert [s.tag for s in specs] == [["healthy", "0"], ["healthy", "1"], ["healthy", "2"]]
    assert all(s.env["CUDA_VISIBLE_DEVICES"] == "0,1" for s in specs)
    assert selection_value("xpu", [0, 1]) == "level_zero:0,1"


def test_voir_layer(tmp_path):
    entry = make_entry(
        "voirbench",
        tmp_path,
        argv={"--steps": 10},
        voir={"options": {"stop": 3, "gpu_poll": 1, "dash": True, "off": False, "none": None}},
    )
    pack = load_pack(entry, cpu_system())
    specs = pack.build_run_plan().processes()
    assert len(specs) == 1
    argv = specs[0].argv
    assert argv == [
        str(Path(sys.executable).parent / "voir"),
        "--stop",
        "3",
        "--gpu-poll",
        "1",
        "--dash",
        str(BENCHMARKS / "voirbench" / "main.py"),
        "--steps",
        "10",
    ]
    assert specs[0].env["VOIRFILE"] == str(BENCHMARKS / "voirbench" / "voirfile.py")
    assert specs[0].cwd == str(BENCHMARKS / "voirbench")
    assert voir_flags({"a_b": [1, 2]}) == ["--a-b", "1,2"]


def test_torchrun_layer(tmp_path):
    entry = make_entry("ddp", tmp_path, plan={"method": "torchrun"})
    specs = load_pack(entry, cpu_system()).build_run_plan().processes()
    assert len(specs) == 1
    spec = specs[0]
    assert spec.argv[:4] == [
        str(Path(sys.executable).parent / "torchrun"),
        "--nproc-per-node=2",
        "--nnodes=1",
        "--standalone",
    ]
    assert spec.argv[4] == str(BENCHMARKS / "ddp" / "main.py")
    assert spec.data_channel == "smuggle"
    # devices count on a GPU node, plan.nproc wins
    system = gpu_system("cuda", 4)
    assert "--nproc-per-node=4" in load_pack(entry, system).build_run_plan().processes()[0].argv
    entry2 = make_entry("ddp", tmp_path, plan={"method": "torchrun", "nproc": 3})
    assert "--nproc-per-node=3" in load_pack(entry2, system).build_run_plan().processes()[0].argv
    # voir under torchrun: --no-python
    voired = TorchRun(
        Voir(
            Script(entry, cpu_system(), "m.py", python="/p/python"),
            voirfile="v.py",
            executable="/p/voir",
        ),
        executable="/p/torchrun",
    )
    assert voired.processes()[0].argv == [
        "/p/torchrun",
        "--nproc-per-node=2",
        "--nnodes=1",
        "--standalone",
        "--no-python",
        "/p/voir",
        "m.py",
    ]


def test_repeat_tags_and_unknown_method(tmp_path):
    entry = make_entry("healthy", tmp_path)
    specs = with_repeat(load_pack(entry, cpu_system()).build_run_plan().processes(), 2)
    assert specs[0].tag == ["healthy", "R2", "D0"]
    assert specs[0].name == "healthy.R2.D0"
    bad = make_entry("healthy", tmp_path, plan={"method": "teleport"}, config_file="s.yaml")
    with pytest.raises(
        ConfigError, match=r"s.yaml: healthy.plan.method: unknown method 'teleport'"
    ):
        build_plan(load_pack(bad, cpu_system()))


def test_wrapper_and_registry(tmp_path, monkeypatch):
    import milabench.plan

    # the method table is the process's: a copy for this test, restored after it
    monkeypatch.setattr(milabench.plan, "_METHODS", dict(milabench.plan._METHODS))

    class Prefix(Wrapper):
        def wrap(self, spec):
            return [spec.evolve(argv=["nice", *spec.argv], tag=[*spec.tag, n]) for n in "ab"]

    register_method("test_nice", lambda pack: Prefix(PerGPU(pack.command_node())))
    entry = make_entry("healthy", tmp_path, plan={"method": "test-nice"})
    specs = load_pack(entry, cpu_system()).build_run_plan().processes()
    assert [s.name for s in specs] == ["healthy.D0.a", "healthy.D0.b"]
    assert all(s.argv[0] == "nice" and s.argv[1] == sys.executable for s in specs)
    nj = NJobs(Script(entry, cpu_system(), "m.py", python="py"), 2).processes()
    assert [s.name for s in nj] == ["healthy.0", "healthy.1"]


def test_pack_files_and_benchfile(tmp_path):
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "main.py").write_text("")
    (folder / "prepare.py").write_text("")
    (folder / "requirements.in").write_text(
        "# comment\nPyYAML>=6\ntorch==2.13.0 ; python_version>'3'\n-c constraints.txt\n"
        "scikit-learn[extra]\nsome-thing @ https://x/y.whl\n\n"
    )
    (folder / "benchfile.py").write_text(
        "from milabench.pack import BenchmarkPackage\n"
        "class Pack(BenchmarkPackage):\n"
        "    main_script = 'train.py'\n"
        "    def make_env(self):\n"
        "        return {'FROM_BENCHFILE': self.config['custom']}\n"
        "__pack__ = Pack\n"
    )
    entry = make_entry("bench", tmp_path, definition=folder, custom="yes")
    pack = load_pack(entry, cpu_system())
    assert type(pack).__name__ == "Pack" and isinstance(pack, BenchmarkPackage)
    assert pack.prepare_script == folder / "prepare.py"
    assert pack.voirfile is None
    assert pack.requirements_file("cuda") == folder / "requirements.cuda.txt"
    assert pack.requirements_file("unpinned") == folder / "requirements.in"
    assert requirement_names(folder / "requirements.in") == [
        "PyYAML",
        "torch",
        "scikit-learn",
        "some-thing",
    ]
    assert pack.key_imports == ["yaml", "torch", "sklearn", "some_thing"]
    assert import_name("Pillow") == "PIL"
    spec = pack.build_run_plan().processes()[0]
    assert spec.argv[1] == str(folder / "train.py")
    assert spec.env["FROM_BENCHFILE"] == "yes"
    prep = pack.build_prepare_plan().processes()
    assert len(prep) == 1 and prep[0].argv[1] == str(folder / "prepare.py")
    # no prepare.py -> None
    assert load_pack(make_entry("healthy", tmp_path), cpu_system()).build_prepare_plan() is None
    # broken benchfile -> one-line config error naming the file
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "benchfile.py").write_text("__pack__ = 3\n")
    with pytest.raises(ConfigError, match="benchfile.py: __pack__ must be"):
        load_pack(make_entry("broken", tmp_path, definition=broken), cpu_system())


def test_inputs_only_requirements_are_no_key_imports(tmp_path):
    """A requirement marked ``# inputs-only`` is installed but not validated: without it
    the benchmark runs its stand-in (an environment without pyarrow still works)."""
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "main.py").write_text("")
    (folder / "requirements.in").write_text(
        "torch\npyarrow  # inputs-only: read with upstream's inputs only\nPyYAML # yaml\n"
    )
    pack = load_pack(make_entry("b", tmp_path, definition=folder), cpu_system())
    assert inputs_only_names(folder / "requirements.in") == {"pyarrow"}
    assert requirement_names(folder / "requirements.in") == ["torch", "pyarrow", "PyYAML"]
    assert pack.key_imports_for("cuda") == ["torch", "yaml"]
