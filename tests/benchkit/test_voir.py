"""Real voir runs of a third-party-style script with a benchkit voirfile."""

import json
import os
import textwrap

import pytest

from .conftest import run_voir_process

_MAIN = textwrap.dedent(
    """
    import sys, time

    def make_loader(n):
        return [list(range(8)) for _ in range(n)]

    def train_step(batch, epoch):
        time.sleep(0.002)
        if "--fail" in sys.argv and epoch == 1:
            raise RuntimeError("boom in epoch 1")
        loss = 1.0 / (1 + epoch)
        return loss

    def main():
        loader = make_loader(10)
        for epoch in range(100):
            for batch in loader:
                try:
                    train_step(batch, epoch)
                except ZeroDivisionError:
                    pass
        print("finished all epochs", flush=True)

    if __name__ == "__main__":
        main()
    """
)

_VOIRFILE = textwrap.dedent(
    """
    from benchkit.instruments import benchkit_instrument

    instrument_main = benchkit_instrument(
        loader="//main > loader", loss="//train_step > loss"
    )
    """
)


# Step counts only: these tests check voir's plumbing with exact counts, not the window.
COUNTS = {
    "BENCHKIT_MEASURE_WARMUP_MIN": "0",
    "BENCHKIT_MEASURE_WARMUP_MAX": "0",
    "BENCHKIT_MEASURE_MIN": "0",
    "BENCHKIT_MEASURE_MAX": "0",
}


def run_voir(folder, *args, env_extra=None):
    env = dict(os.environ, **COUNTS)
    env.update(env_extra or {})
    return run_voir_process(list(args), env, folder)


@pytest.fixture
def bench(tmp_path):
    (tmp_path / "main.py").write_text(_MAIN)
    (tmp_path / "voirfile.py").write_text(_VOIRFILE)
    return tmp_path


@pytest.mark.slow
def test_voir_run_measures_and_stops_early(bench):
    rc, out, err, records = run_voir(
        bench, "--stop", "12", "--skip", "3", "--interval", "10ms", "--gpu-poll", "0.05", "main.py"
    )
    assert rc == 0, err
    assert "finished all epochs" not in out  # ended by the budget, not by the script
    phases = [r["$data"]["name"] for r in records if r.get("$event") == "phase"]
    assert phases == ["init", "parse_args", "load_script", "run_script", "finalize"]
    rates = [r for r in records if "rate" in r]
    assert len(rates) == 12 and all(50 < r["rate"] < 4001 for r in rates)
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[0] == 1.0 and 0.5 in losses  # epoch 0 then epoch 1 values
    stops = [r for r in records if r.get("$event") == "stop"]
    assert len(stops) == 1 and stops[0]["$data"]["observations"] == 12
    assert stops[0]["$data"]["warmup_observations"] == 3
    # The stop is written before voir's finalize phase: nothing is lost.
    assert records.index(stops[0]) < len(records) - 1
    assert any("cpudata" in r for r in records) and any("process" in r for r in records)
    assert [r["progress"] for r in records if "progress" in r][-1] == [15, 15]


@pytest.mark.slow
def test_voir_options_from_the_entry(bench):
    entry = {"name": "tp", "voir": {"options": {"stop": 5, "skip": 1, "gpu_poll": 0}}}
    rc, _, err, records = run_voir(
        bench, "main.py", env_extra={"MILABENCH_CONFIG": json.dumps(entry)}
    )
    assert rc == 0, err
    assert len([r for r in records if "rate" in r]) == 5
    assert not any("cpudata" in r for r in records)  # gpu_poll 0: no monitor


@pytest.mark.slow
def test_voir_failure_keeps_what_was_measured(bench):
    rc, out, err, records = run_voir(
        bench, "--stop", "500", "--skip", "0", "--gpu-poll", "0", "main.py", "--fail"
    )
    assert rc != 0 and "boom in epoch 1" in err
    assert len([r for r in records if "rate" in r]) >= 9  # the first epoch was flushed
    assert not any(r.get("$event") == "stop" for r in records)
    assert any(r.get("$event") == "error" for r in records)
