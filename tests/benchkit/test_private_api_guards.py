"""A torch whose private APIs differ from the pinned one's costs an estimate, never a run:
the start-up memory estimate (`benchkit.memory`: ``torch._subclasses``' fake tensors) and
the FLOP count (`benchkit.flops`: ``torch.utils._python_dispatch``, the formulas of
``torch.utils.flop_counter``) degrade to "none", with one line saying so (the
GPU image's torch 2.11 against the pins' 2.13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchkit import memory
from benchkit.flops import count_and_declare, count_flops

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
FLOPS = ROOT / "benchmarks" / "flops"
FAKE = "torch._subclasses.fake_tensor"


class Writer:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.records: list[dict] = []

    def event(self, name, data) -> None:
        self.events.append((name, data))

    def write(self, record) -> None:
        self.records.append(record)

    def flush(self) -> None:
        pass


def flops_args():
    bench = memory.sibling_main(str(FLOPS / "footprint.py"))
    return bench.parse_args(["--size", "64", "--device", "cpu"])


def _fake_mode_changed(monkeypatch) -> None:
    """FakeTensorMode takes other arguments (a torch whose private API moved on)."""
    import torch._subclasses.fake_tensor as fake

    def changed(*args, **kwargs):
        raise TypeError("__init__() got an unexpected keyword argument 'allow_non_fake_inputs'")

    monkeypatch.setattr(fake, "FakeTensorMode", changed)


def _fake_module_gone(monkeypatch) -> None:
    """The module is not there at all."""
    monkeypatch.setitem(sys.modules, FAKE, None)


@pytest.mark.parametrize("breakage", [_fake_mode_changed, _fake_module_gone],
                         ids=["api-changed", "module-gone"])  # fmt: skip
def test_a_failed_memory_estimate_is_one_note_and_no_estimate(breakage, monkeypatch, capsys):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:1:81920")  # a GPU: the estimate runs
    writer = Writer()
    import benchkit.channel

    monkeypatch.setattr(benchkit.channel, "default_writer", lambda: writer)
    args = flops_args()
    assert isinstance(memory.check_memory(str(FLOPS / "main.py"), args, "cpu"), memory.Footprint)
    assert capsys.readouterr().err == ""  # the guard hides nothing when the estimate works
    [(name, data)] = writer.events  # the estimate of an entry that starts, recorded
    assert name == "message" and data["estimate"] is True
    writer.events.clear()

    breakage(monkeypatch)
    assert memory.check_memory(str(FLOPS / "main.py"), args, "cpu") is None
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"flops: no memory estimate (torch {torch.__version__}: ")
    assert lines[0].endswith("); running without it")
    assert "Error" in lines[0]  # the exception's type, then its first line
    assert writer.events == [("message", {"message": lines[0], "warning": "memory"})]


def test_a_failed_estimate_that_is_not_an_exception_still_ends_the_run(monkeypatch):
    """Only errors are forgiven: a skip (SystemExit) or a Ctrl-C go through."""
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:1:81920")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        memory.skip_unless_it_fits(interrupted, "cpu", label="x")


@pytest.mark.slow
def test_a_benchmark_runs_when_the_fake_tensor_api_is_missing(tmp_path):
    """The flops benchmark under a fake 80 GB GPU (the estimate runs at its start) with
    ``torch._subclasses.fake_tensor`` unimportable: it measures, and says once that it had
    no estimate (stderr, and a ``message`` record the report lists as a warning)."""
    read_fd, write_fd = os.pipe()
    code = (
        "import runpy, sys, torch\n"
        f"sys.modules[{FAKE!r}] = None\n"
        "sys.argv = ['main.py', '--size', '64', '--device', 'cpu']\n"
        "runpy.run_path('main.py', run_name='__main__')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "BENCHKIT_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        MILABENCH_FAKE_GPUS="cuda:1:81920",
        DATA_FD=str(write_fd),
        BENCHKIT_MEASURE_WARMUP_MIN="0.1s",
        BENCHKIT_MEASURE_WARMUP_MAX="0.2s",
        BENCHKIT_MEASURE_MIN="0.2s",
        BENCHKIT_MEASURE_MAX="0.5s",
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=FLOPS, env=env, pass_fds=[write_fd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    os.close(write_fd)
    with os.fdopen(read_fd, encoding="utf-8") as pipe:
        data = pipe.read()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    notes = [ln for ln in err.splitlines() if "memory estimate" in ln]
    assert len(notes) == 1 and notes[0].startswith("flops: no memory estimate (torch "), err
    assert "ModuleNotFoundError" in notes[0] and "Traceback" not in err
    records = [json.loads(line) for line in data.splitlines() if line.strip()]
    assert any(r.get("rate") for r in records), data[-2000:]
    warned = [r for r in records if r.get("$event") == "message"]
    assert [r["$data"].get("warning") for r in warned] == ["memory"], warned


# -- the FLOP count --------------------------------------------------------------------


def test_a_formula_that_fails_leaves_the_step_run_once_and_nothing_declared(monkeypatch, capsys):
    from torch.utils.flop_counter import flop_registry

    a, b = torch.ones(8, 16), torch.ones(16, 4)
    calls = []

    def step():
        calls.append(1)
        return a @ b

    assert count_flops(step) == 2 * 8 * 16 * 4 and capsys.readouterr().err == ""

    def changed(*args, **kwargs):
        raise TypeError("mm_flop() got an unexpected keyword argument 'out_val'")

    monkeypatch.setitem(flop_registry, torch.ops.aten.mm, changed)
    calls.clear()
    writer = Writer()
    assert count_and_declare(step, 8, precision="fp32", writer=writer) == 0.0
    assert calls == [1] and writer.records == []  # ran once, declared nothing
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"FLOPs not counted (torch {torch.__version__}: TypeError: mm_flop() got an "
        "unexpected keyword argument 'out_val'); no TFLOPS or MFU for this run"
    ]


def test_without_the_dispatch_mode_api_the_step_runs_uncounted(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils._python_dispatch", None)
    calls = []
    assert count_flops(lambda: calls.append(torch.ones(2, 2) @ torch.ones(2, 2))) == 0
    assert len(calls) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"FLOPs not counted (torch {torch.__version__}: ModuleNotFoundError")


def test_a_dispatch_mode_that_cannot_be_entered_runs_the_step_uncounted(monkeypatch, capsys):
    import torch.utils._python_dispatch as dispatch

    class Refusing(dispatch.TorchDispatchMode):
        def __enter__(self):
            raise RuntimeError("modes are entered otherwise in this torch")

    monkeypatch.setattr(dispatch, "TorchDispatchMode", Refusing)
    calls = []
    assert count_flops(lambda: calls.append(torch.ones(2, 2) @ torch.ones(2, 2))) == 0
    assert len(calls) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "RuntimeError: modes are entered otherwise in this torch" in line
