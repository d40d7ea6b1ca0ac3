"""Step mode pieces, in process: StepTimer, wrap_calls, LineTracer, size_of, parse_line,
and the overhead arithmetic (benchkit/steps.py, benchkit/overhead.py)."""

import math
import os
import sys
import textwrap
import time
import types

import pytest
import torch

from benchkit import overhead
from benchkit.channel import DataWriter
from benchkit.instruments import step_kind
from benchkit.steps import (
    LineTracer,
    StepTimer,
    parse_line,
    resolve_callable,
    size_of,
    wrap_calls,
)
from benchkit.window import WindowSettings

# Step counts only (no time window): what these tests check is the bookkeeping, exactly.
COUNTS = {"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}


def rates(records, task="train"):
    return [r for r in records if r.get("task") == task and "rate" in r]


def make(pipe, **kw):
    kw.setdefault("monitor", False)
    kw.setdefault("interval", 3600)
    if "window" not in kw:
        kw.setdefault("measure", COUNTS)
    return StepTimer(writer=DataWriter(pipe.write_fd, flush_interval=3600), **kw)


class Clock:
    """A perf_counter that only moves when told: step durations are exact."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(time, "perf_counter", fake)
    return fake


# -- StepTimer ----------------------------------------------------------------------------


def test_boundaries_make_contiguous_steps_with_exact_rates(pipe, clock):
    stops = []
    timer = make(pipe, stop=4, skip=1, on_stop=lambda: stops.append(True))
    timer.boundary(999)  # the first boundary starts the clock: its size is not a step's
    assert timer.in_step and timer.count == 0
    for seconds in (0.5, 0.01, 0.02, 0.04, 0.05):  # the first is the warm-up step
        clock.advance(seconds)
        timer.boundary(5)
    assert timer.done and timer.count == 5 and not timer.in_step
    assert stops == [True]  # on_stop runs once, when the window ends
    timer.boundary(5)  # after the end: ignored
    assert timer.count == 5
    timer.close()
    records = pipe.records()
    rs = rates(records)
    assert [r["rate"] for r in rs] == pytest.approx([500, 250, 125, 100])
    assert {r["units"] for r in rs} == {"items/s"}
    window = [r["window"] for r in records if "window" in r]
    assert len(window) == 1 and window[0]["observations"] == 4
    assert window[0]["warmup_observations"] == 1 and window[0]["reason"] == "stop_count"
    stop = [r["$data"] for r in records if r.get("$event") == "stop"]
    assert len(stop) == 1 and stop[0]["observations"] == 4


def test_enter_exit_times_the_calls_not_the_gaps_between_them(pipe, clock):
    timer = make(pipe, stop=3, skip=1)
    timer.exit(7)  # an exit without an enter is no step
    assert timer.count == 0 and not timer.in_step
    for seconds in (0.3, 0.02, 0.04, 0.05):
        clock.advance(1.0)  # between two calls: not a step
        timer.enter()
        assert timer.in_step
        clock.advance(seconds)
        timer.exit(5)
    assert timer.done and timer.count == 4
    timer.close()
    rs = rates(pipe.records())
    assert [r["rate"] for r in rs] == pytest.approx([250, 125, 100])


def test_window_settings_give_exact_step_counts(pipe):
    settings = WindowSettings(warmup_min=0, warmup_max=0, min=0, max=0, skip=2, stop=6)
    timer = make(pipe, window=settings, units="samples/s")
    boundaries = 0
    while not timer.done and boundaries < 1000:
        timer.boundary(16)
        boundaries += 1
        sum(range(2000))  # a little work per step: a real, non-zero duration
    assert boundaries == 9 and timer.count == 8  # 1 opening boundary + 2 + 6 steps
    timer.close()
    records = pipe.records()
    rs = rates(records)
    assert len(rs) == 6 and all(r["rate"] > 0 for r in rs)
    assert {r["units"] for r in rs} == {"samples/s"}
    assert [r["window"]["observations"] for r in records if "window" in r] == [6]


def test_enter_exit_with_window_settings(pipe):
    settings = WindowSettings(warmup_min=0, warmup_max=0, min=0, max=0, skip=3, stop=5)
    timer = make(pipe, window=settings)
    calls = 0
    while not timer.done and calls < 1000:
        timer.enter()
        sum(range(2000))
        timer.exit(torch.zeros(4, 2).shape[0])
        calls += 1
    assert calls == 8
    timer.close()
    rs = rates(pipe.records())
    assert len(rs) == 5 and all(r["rate"] > 0 for r in rs)


def test_a_time_window_ends_by_itself(pipe):
    measure = {"warmup_min": 0, "warmup_max": "0.05s", "min": "0.1s", "max": "0.3s"}
    timer = make(pipe, measure=measure, stop=0, skip=0)
    deadline = time.perf_counter() + 30
    while not timer.done and time.perf_counter() < deadline:
        timer.boundary(8)
        time.sleep(0.001)
    assert timer.done
    timer.close()
    records = pipe.records()
    window = [r["window"] for r in records if "window" in r]
    assert len(window) == 1 and window[0]["reason"] in ("precision", "max_time")
    rs = rates(records)
    assert len(rs) == window[0]["observations"] > 0 and all(r["rate"] > 0 for r in rs)


def test_no_budget_close_summarises_and_keeps_losses(pipe):
    timer = make(pipe, stop=0, skip=0)
    for i in range(6):
        timer.boundary(2)
        timer.record_loss(torch.tensor(float(i)))
        sum(range(500))
    assert not timer.done
    timer.close()
    records = pipe.records()
    assert len(rates(records)) == 5
    assert [r["loss"] for r in records if "loss" in r] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    window = [r["window"] for r in records if "window" in r]
    assert len(window) == 1 and window[0]["reason"] == "ended"
    assert not [r for r in records if r.get("$event") == "stop"]


def test_step_timer_is_not_iterable():
    timer = StepTimer(writer=DataWriter(fd=None), monitor=False)
    with pytest.raises(TypeError):
        iter(timer)


def test_steps_are_counted_for_the_overhead(pipe, clock):
    timer = make(pipe, stop=0, skip=0)
    timer.boundary(1)
    for _ in range(4):
        clock.advance(0.25)
        timer.boundary(1)
    timer.close()
    assert timer.steps_timed == 4 and timer.step_seconds == pytest.approx(1.0)


# -- wrap_calls ---------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.entered = 0
        self.exits = []

    def enter(self):
        self.entered += 1

    def exit(self, values):
        self.exits.append(values)


SCRIPT = textwrap.dedent(
    """
    def train(inputs, epoch, scale=2):
        return len(inputs) * scale

    def main():
        return [train([1, 2, 3], epoch) for epoch in range(2)]
    """
)


def test_wrap_a_function_of_the_script_globals():
    ns = {}
    exec(compile(SCRIPT, "script.py", "exec"), ns)
    original = ns["train"]
    owner, attr, value = resolve_callable("train()", ns)
    assert attr == "train" and value is original
    rec = Recorder()
    undo = wrap_calls(owner, attr, rec.enter, rec.exit)
    assert ns["train"] is not original and ns["train"].__name__ == "train"
    assert ns["main"]() == [6, 6]  # the script's own calls go through the wrapper
    assert rec.entered == 2
    # arguments by name, defaults included, and the returned value
    assert rec.exits == [
        {"inputs": [1, 2, 3], "epoch": 0, "scale": 2, "return": 6},
        {"inputs": [1, 2, 3], "epoch": 1, "scale": 2, "return": 6},
    ]
    assert ns["train"]([1], epoch=5, scale=10) == 10
    assert rec.exits[-1] == {"inputs": [1], "epoch": 5, "scale": 10, "return": 10}
    undo()
    assert ns["train"] is original
    ns["main"]()
    assert rec.entered == 3  # no longer reported


def test_a_call_that_raises_is_not_a_step():
    ns = {}
    exec("def train(x):\n    raise KeyError(x)\n", ns)
    owner, attr, _ = resolve_callable("train", ns)
    rec = Recorder()
    undo = wrap_calls(owner, attr, rec.enter, rec.exit)
    with pytest.raises(KeyError):
        ns["train"](1)
    assert rec.entered == 1 and rec.exits == []
    undo()


class Model:
    def step(self, x, k=1):
        return x + k

    @staticmethod
    def add(a, b):
        return a + b

    @classmethod
    def make(cls, n):
        return cls, n


class Sub(Model):
    pass


def test_wrap_a_method_self_is_passed_once():
    original = Model.__dict__["step"]
    rec = Recorder()
    undo = wrap_calls(Model, "step", rec.enter, rec.exit)
    try:
        m = Model()
        assert m.step(1) == 2 and m.step(1, k=3) == 4
        assert Sub().step(10) == 11  # subclasses inherit the wrapper
        assert rec.entered == 3
        assert rec.exits[0] == {"self": m, "x": 1, "k": 1, "return": 2}
        assert rec.exits[1]["k"] == 3
    finally:
        undo()
    assert Model.__dict__["step"] is original
    assert Model().step(1) == 2 and rec.entered == 3


def test_wrap_a_staticmethod():
    rec = Recorder()
    undo = wrap_calls(Model, "add", rec.enter, rec.exit)
    try:
        assert isinstance(Model.__dict__["add"], staticmethod)
        assert Model.add(1, 2) == 3 and Model().add(2, 3) == 5  # no instance slipped in
        assert rec.exits == [{"a": 1, "b": 2, "return": 3}, {"a": 2, "b": 3, "return": 5}]
    finally:
        undo()
    assert isinstance(Model.__dict__["add"], staticmethod) and Model.add(1, 1) == 2


def test_wrap_a_classmethod_keeps_the_class_it_is_called_on():
    original = Model.__dict__["make"]
    rec = Recorder()
    undo = wrap_calls(Model, "make", rec.enter, rec.exit)
    try:
        assert Model.make(1) == (Model, 1)
        assert Model().make(2) == (Model, 2)
        assert Sub.make(3) == (Sub, 3)  # not Model: the class is bound at each call
        assert rec.entered == 3
        assert rec.exits[0] == {"n": 1, "return": (Model, 1)}  # no `cls` among arguments
    finally:
        undo()
    assert Model.__dict__["make"] is original and Sub.make(4) == (Sub, 4)


def test_wrap_an_inherited_method_on_a_subclass_then_undo():
    rec = Recorder()
    undo = wrap_calls(Sub, "step", rec.enter, rec.exit)
    assert Sub().step(1) == 2 and Model().step(1) == 2
    assert rec.entered == 1  # only the subclass is wrapped
    undo()
    assert "step" not in Sub.__dict__ and Sub.step is Model.step


def test_wrap_a_method_of_one_instance_then_undo():
    m, other = Model(), Model()
    rec = Recorder()
    undo = wrap_calls(m, "step", rec.enter, rec.exit)
    assert m.step(1) == 2 and other.step(1) == 2
    assert rec.entered == 1 and rec.exits == [{"x": 1, "k": 1, "return": 2}]
    undo()
    assert "step" not in vars(m) and m.step(5) == 6  # the instance is as it was


def test_resolve_an_importable_path(monkeypatch):
    mod = types.ModuleType("stepfixture_mod")
    mod.Model = Model
    mod.value = 3
    monkeypatch.setitem(sys.modules, "stepfixture_mod", mod)
    owner, attr, value = resolve_callable("stepfixture_mod.Model.step", {})
    assert owner is Model and attr == "step" and value is Model.step
    owner, attr, _ = resolve_callable("Model.add()", {"Model": Model})  # script's class
    assert owner is Model and attr == "add"
    with pytest.raises(ValueError, match="not found"):
        resolve_callable("trian()", {"train": print})
    with pytest.raises(ValueError, match="not callable"):
        resolve_callable("stepfixture_mod.value", {})
    with pytest.raises(ValueError, match="no importable module"):
        resolve_callable("no_such_module_xyz.f", {})


# -- LineTracer ---------------------------------------------------------------------------


def compile_file(tmp_path, name, src):
    path = tmp_path / name
    path.write_text(src)
    return str(path), compile(src, str(path), "exec")


def line_of(src, text):
    return next(i for i, line in enumerate(src.splitlines(), 1) if text in line)


FUNCTION_SRC = textwrap.dedent(
    """\
    def helper():
        return 1

    def loop(n):
        total = 0
        for i in range(n):
            x = i * 2
            total += x + helper()
        return total
    """
)


def test_line_inside_a_function(tmp_path):
    path, code = compile_file(tmp_path, "fn.py", FUNCTION_SRC)
    ns = {}
    exec(code, ns)
    seen = []
    tracer = LineTracer(
        path, line_of(FUNCTION_SRC, "x = i * 2"), lambda f: seen.append(f.f_locals["i"])
    )
    tracer.install()
    try:
        assert ns["loop"](5) == 25
    finally:
        tracer.uninstall()
    assert tracer.hits == 5 and seen == [0, 1, 2, 3, 4]
    assert tracer.lines > 0  # the other lines of `loop` went through the hook too
    ns["loop"](3)
    assert tracer.hits == 5  # uninstalled


MODULE_SRC = textwrap.dedent(
    """\
    def helper():
        return 1

    helper()
    helper()
    for i in range(4):
        y = helper()
    done = True
    """
)


def test_line_of_module_level_code_and_events_after_the_first_hit(tmp_path):
    path, code = compile_file(tmp_path, "top.py", MODULE_SRC)
    hits = []
    tracer = LineTracer(
        path, line_of(MODULE_SRC, "y = helper()"), lambda f: hits.append(f.f_lineno)
    )
    ns = {}
    tracer.install()
    try:
        exec(code, ns)
        events = tracer.events  # read before uninstall(), itself a function entry
    finally:
        tracer.uninstall()
    assert ns["done"] and tracer.hits == 4 and hits == [7] * 4
    # the module frame and the two calls before the first hit are no step's cost; the
    # four calls of `helper` after it are
    assert events == 4
    assert tracer.lines >= 3


def test_line_never_run_and_other_files_are_not_hits(tmp_path):
    path, code = compile_file(tmp_path, "top.py", MODULE_SRC)
    tracer = LineTracer(path, 3, lambda f: None)  # the blank line
    tracer.install()
    try:
        exec(code, {})
    finally:
        tracer.uninstall()
    assert tracer.hits == 0 and tracer.events == 0 and tracer.lines == 0
    other = LineTracer(str(tmp_path / "elsewhere.py"), 7, lambda f: None)
    other.install()
    try:
        exec(code, {})
    finally:
        other.uninstall()
    assert other.hits == 0


def test_a_comprehension_on_the_line_starts_it_once(tmp_path):
    src = textwrap.dedent(
        """\
        def f(items):
            out = []
            for v in items:
                out.append(sum([w * v for w in range(3)]) + sum(w for w in range(2)))
            return out
        """
    )
    path, code = compile_file(tmp_path, "comp.py", src)
    ns = {}
    exec(code, ns)
    tracer = LineTracer(path, 4, lambda f: None)
    tracer.install()
    try:
        ns["f"]([1, 2, 3, 4])
    finally:
        tracer.uninstall()
    assert tracer.hits == 4  # once per run of the statement, not once per element


def test_uninstall_gives_back_the_previous_trace_function(tmp_path):
    def other(frame, event, arg):
        return None

    previous = sys.gettrace()
    sys.settrace(other)
    try:
        tracer = LineTracer(str(tmp_path / "x.py"), 1, lambda f: None)
        tracer.install()
        assert sys.gettrace() == tracer._global
        tracer.uninstall()
        assert sys.gettrace() is other
    finally:
        sys.settrace(previous)


# -- sizes, lines, kinds ------------------------------------------------------------------


def test_size_of():
    assert size_of(3) == 3.0 and isinstance(size_of(3), float)
    assert size_of(2.5) == 2.5
    assert size_of(torch.zeros(7, 3)) == 7.0
    assert size_of(torch.tensor(5)) == 5.0  # a 0-d tensor holding a count
    assert size_of([1, 2, 3]) == 3.0
    assert size_of({"a": 1, "b": 2}) == 2.0
    with pytest.raises(TypeError):
        size_of(True)
    with pytest.raises(TypeError):
        size_of(object())


def test_parse_line(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    (tmp_path / "other.py").write_text("pass\n")
    monkeypatch.chdir(os.path.dirname(tmp_path))  # not the script's folder
    real = os.path.realpath
    assert parse_line(":42", str(script)) == (real(script), 42)
    assert parse_line(" train.py:15 ", str(script)) == (real(script), 15)
    assert parse_line("other.py:3", str(script)) == (real(tmp_path / "other.py"), 3)
    assert parse_line(f"{tmp_path}/other.py:9", None) == (real(tmp_path / "other.py"), 9)
    for not_a_line in ("train()", "//train > loss", "//train(x) > loss", "pkg.mod.f", "a.py:x"):
        assert parse_line(not_a_line, str(script)) is None
    with pytest.raises(ValueError, match="which file"):
        parse_line(":42", None)


def test_step_kind():
    assert step_kind("//train(x) > loss") == "probe"
    assert step_kind("train()") == "call"
    assert step_kind("torch.optim.SGD.step") == "call"
    assert step_kind("script.py:15") == "line"
    assert step_kind(":15") == "line"


# -- overhead -----------------------------------------------------------------------------


def test_overhead_record_arithmetic(monkeypatch):
    monkeypatch.setattr(
        overhead, "_cache", {"probe": 1e-6, "trace": 2e-7, "line": math.nan, "loader": 5e-7}
    )
    rec = overhead.record(
        steps=10,
        step_seconds=1.0,
        timed_seconds=0.01,
        counts={"probe": 20, "trace": 0, "line": 50, "loader": 0},
    )
    assert rec["steps"] == 10 and rec["fires"] == 20
    assert rec["counts"] == {"probe": 20, "line": 50}  # kinds that did not happen: omitted
    # a kind without a calibration (NaN) is left out of the sum and of the parts
    assert rec["parts"] == pytest.approx({"timed_s": 0.001, "probe_s": 2e-6})
    assert rec["per_step_s"] == pytest.approx((0.01 + 20e-6) / 10)
    assert rec["step_s"] == pytest.approx(0.1)
    assert rec["fraction"] == pytest.approx(rec["per_step_s"] / rec["step_s"])
    assert rec["fraction"] == pytest.approx(0.01002)
    assert overhead.record(steps=0, step_seconds=1.0, timed_seconds=0.1, counts={}) is None
    assert overhead.record(steps=5, step_seconds=0.0, timed_seconds=0.1, counts={}) is None


def test_overhead_record_without_calibrated_kinds(monkeypatch):
    monkeypatch.setattr(overhead, "_cache", {})
    rec = overhead.record(steps=4, step_seconds=2.0, timed_seconds=0.2, counts={})
    assert rec["per_step_s"] == pytest.approx(0.05) and rec["fraction"] == pytest.approx(0.1)
    assert rec["counts"] == {} and rec["fires"] == 0 and set(rec["parts"]) == {"timed_s"}


@pytest.mark.parametrize("kind", ["probe", "trace", "line", "loader"])
def test_overhead_costs_are_calibrated(monkeypatch, kind):
    monkeypatch.setattr(overhead, "_cache", {})
    previous = sys.gettrace()
    unit = overhead.cost(kind)
    assert math.isfinite(unit) and 0 <= unit < 0.01  # seconds per unit: far below 10 ms
    assert overhead.cost(kind) == unit  # calibrated once
    assert sys.gettrace() is previous  # the trace calibrations leave no hook behind


def test_overhead_unknown_kind_is_nan(monkeypatch):
    monkeypatch.setattr(overhead, "_cache", {})
    assert math.isnan(overhead.cost("nope"))
