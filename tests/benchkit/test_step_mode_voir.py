"""Step mode under real voir runs: an unmodified script with no loader (it slices batches
out of a tensor and calls ``train()`` from top-level code) measured by a one-call
voirfile, each way of telling a step, and the ways a voirfile can be wrong."""

import os
import textwrap
from pathlib import Path

import pytest

from .conftest import run_voir_process

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository: benchkit is imported from there
SCRIPT = HERE / "stepscripts" / "regression.py"
SOURCE = SCRIPT.read_text()

# A short window: each run lasts about a second once torch is imported.
WINDOW = {
    "BENCHKIT_MEASURE_WARMUP_MIN": "0.05",
    "BENCHKIT_MEASURE_WARMUP_MAX": "0.2",
    "BENCHKIT_MEASURE_MIN": "0.2",
    "BENCHKIT_MEASURE_MAX": "0.5",
}


def line_of(text):
    """Line number of the script's line that contains ``text`` (exactly one)."""
    found = [i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def run_voir(tmp_path, voirfile, *script_args):
    """Run ``voir regression.py ARGS`` with the given voirfile text; records from the
    data descriptor (a pipe, as the orchestrator gives it)."""
    vf = tmp_path / "voirfile_steps.py"
    vf.write_text(textwrap.dedent(voirfile))
    env = dict(
        os.environ,
        VOIRFILE=str(vf),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PYTHONWARNINGS="ignore",
        **WINDOW,
    )
    return run_voir_process([str(SCRIPT), *script_args], env, tmp_path)


def errors(records):
    return [r["$data"] for r in records if r.get("$event") == "error"]


MODES = {
    "probe": """
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(
            step="//train(x) > loss", batch_size="x", loss="//train > loss"
        )
        """,
    "call": """
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(
            step="train()", batch_size=("inputs", len), loss="//train > loss"
        )
        """,
    # The line that assigns `x`: when it starts, `x` is the batch of the step that ends
    # there (the previous call's last one at the first line of an epoch).
    "line-in-function": f"""
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(
            step="regression.py:{line_of("x = inputs[i")}", batch_size="x", loss="loss"
        )
        """,
    # A library function called once per iteration (the way into code ptera cannot
    # probe): each return of Tensor.backward ends a step; the loss is its tensor.
    "library-call": """
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(
            step="torch.Tensor.backward", batch_size=16, loss="self"
        )
        """,
    "line-at-top-level": f"""
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(
            step=":{line_of("out = train(data, epoch)")}", batch_size="data", loss="out"
        )
        """,
}


@pytest.mark.parametrize("mode", list(MODES))
def test_step_modes_measure_the_script(tmp_path, mode):
    rc, out, err, records = run_voir(tmp_path, MODES[mode], "--epochs", "2000", "--n", "256")
    assert rc == 0, err
    assert "epoch 0 loss" in out  # argparse at the top of the script saw its arguments
    assert "done training" not in out, "the window should have ended the script"
    assert errors(records) == [], errors(records)
    rates = [r for r in records if "rate" in r]
    windows = [r["window"] for r in records if "window" in r]
    assert len(windows) == 1 and windows[0]["reason"] in ("precision", "max_time")
    # a precise window holds the observations it asks for; one that ran out of time on a
    # loaded machine (a step stalled by a neighbour) may hold fewer, never none
    assert len(rates) >= (5 if windows[0]["reason"] == "precision" else 2), windows[0]
    assert {r["units"] for r in rates} == {"items/s"} and all(r["rate"] > 0 for r in rates)
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(isinstance(v, float) for v in losses)
    assert windows[0]["observations"] == len(rates)
    assert len([r for r in records if r.get("$event") == "stop"]) == 1
    overheads = [r["overhead"] for r in records if "overhead" in r]
    assert len(overheads) == 1, overheads
    cost = overheads[0]
    # CPU timing is noisy and the steps are tiny: only sane bounds
    assert 0 < cost["fraction"] < 10, cost
    assert cost["steps"] > 0 and cost["per_step_s"] > 0 and cost["step_s"] > 0
    assert cost["fraction"] == pytest.approx(cost["per_step_s"] / cost["step_s"])
    if mode.startswith("line"):
        assert cost["counts"].get("trace", 0) > 0  # function entries went through the hook
    elif mode != "library-call":  # a wrapped function: no ptera probe at all
        assert cost["fires"] > 0  # the loss probe, at least
    assert records.index(next(r for r in records if "overhead" in r)) > records.index(
        next(r for r in records if "window" in r)
    )


def test_a_batch_size_that_raises_names_the_selector_and_the_script_goes_on(tmp_path):
    voirfile = """
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(
            step="//train > loss", batch_size=lambda values: values["nope"]
        )
        """
    rc, out, err, records = run_voir(tmp_path, voirfile, "--epochs", "2", "--n", "64")
    assert rc == 0, err
    assert "epoch 1 loss" in out and "done training" in out  # the script ran to its end
    errs = errors(records)
    assert len(errs) == 1 and errs[0]["type"] == "ProbeError", errs
    assert errs[0]["message"].startswith("probe `//train > loss` raised: KeyError")
    assert "probe `//train > loss` raised" in err
    assert not [r for r in records if "rate" in r]


def test_a_misspelt_step_function_is_not_installed_and_the_script_not_run(tmp_path):
    voirfile = """
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(step="trian()", batch_size=10)
        """
    rc, out, err, records = run_voir(tmp_path, voirfile, "--epochs", "2", "--n", "64")
    assert "epoch 0" not in out and "done training" not in out
    assert "Traceback" not in err
    errs = errors(records)
    assert len(errs) == 1, errs
    assert "probe `trian()` cannot be installed" in errs[0]["message"]
    assert "trian" in errs[0]["message"].split("installed", 1)[1]
    assert not [r for r in records if "rate" in r or "overhead" in r]


@pytest.mark.parametrize(
    "text", ["# one step of gradient descent", None], ids=["comment-line", "blank-line"]
)
def test_a_line_that_never_runs_is_named(tmp_path, text):
    if text is None:  # the blank line inside the loop body, just before the comment
        lineno = line_of("# one step of gradient descent") - 1
        assert SOURCE.splitlines()[lineno - 1].strip() == ""
    else:
        lineno = line_of(text)
    voirfile = f"""
        from benchkit.instruments import benchkit_instrument

        instrument_main = benchkit_instrument(step="regression.py:{lineno}", batch_size=1)
        """
    rc, out, err, records = run_voir(tmp_path, voirfile, "--epochs", "2", "--n", "64")
    assert rc == 0, err
    assert "done training" in out
    errs = errors(records)
    assert len(errs) == 1 and errs[0]["type"] == "ProbeNeverFired", errs
    assert f"probe `regression.py:{lineno}` never fired" in errs[0]["message"]
    assert not [r for r in records if "rate" in r]


def test_a_bad_script_argument_is_argparse_s_exit_code(tmp_path):
    rc, out, err, records = run_voir(tmp_path, MODES["probe"], "--epochs", "x")
    assert rc == 2, (out, err)
    assert "argument --epochs: invalid int value: 'x'" in err
    assert "epoch 0" not in out
    assert not [r for r in records if "rate" in r]
