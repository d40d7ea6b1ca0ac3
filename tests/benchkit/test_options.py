import json

import pytest

from benchkit.options import (
    BenchOptions,
    MeasureSettings,
    load_options,
    parse_duration,
    parse_measure,
)


def test_defaults_when_run_by_hand():
    opts = load_options(environ={})
    assert opts == BenchOptions(stop=0, skip=0, interval=1.0, gpu_poll=1.0)
    assert opts.budget == 0  # no step count: the time window ends a measurement
    assert opts.measure == MeasureSettings()
    assert opts.window.max == 30.0 and opts.window.precision == 0.02


def test_measure_block_is_read_with_units_and_env_overrides():
    entry = {"measure": {"min": "2s", "max": "1m", "precision": "1%", "warmup_max": 500}}
    env = {"MILABENCH_CONFIG": json.dumps(entry), "BENCHKIT_MEASURE_MIN_OBSERVATIONS": "4"}
    m = load_options(environ=env).measure
    assert (m.min, m.max, m.precision, m.warmup_max, m.min_observations) == (
        2.0,
        60.0,
        0.01,
        500.0,
        4,
    )
    assert m.timeout == m.startup + 500.0 + 60.0
    # an explicit partial mapping goes over the entry's
    assert load_options(measure={"max": "10s"}, environ=env).measure.max == 10.0


@pytest.mark.parametrize(
    "block,message",
    [
        ({"precission": 3}, "measure.precission: unknown setting (did you mean 'precision'?)"),
        ({"min": "soon"}, "not a duration"),
        ({"precision": 2}, "measure.precision must be between 0 and 1"),
        ({"min": 10, "max": 5}, "measure.min (10 s) is longer than measure.max (5 s)"),
        ({"min_observations": 2.5}, "measure.min_observations must be a non-negative integer"),
        ({"warmup_min": -1}, "measure.warmup_min must not be negative"),
        ("fast", "measure must be a mapping"),
    ],
)
def test_bad_measure_values_name_the_key(block, message):
    with pytest.raises(ValueError) as err:
        parse_measure(block)
    assert message in str(err.value)


def test_timeout_is_zero_without_a_time_bound():
    assert parse_measure({"min": 0, "max": 0}).timeout == 0.0


def test_entry_voir_options_are_read():
    entry = {
        "name": "x",
        "voir": {"options": {"stop": 30, "skip": 2, "interval": "250ms", "gpu_poll": 3}},
    }
    opts = load_options(environ={"MILABENCH_CONFIG": json.dumps(entry)})
    assert (opts.stop, opts.skip, opts.interval, opts.gpu_poll) == (30, 2, 0.25, 3.0)


def test_explicit_beats_env_beats_entry():
    entry = {"voir": {"options": {"stop": 30, "skip": 2}}}
    env = {"MILABENCH_CONFIG": json.dumps(entry), "BENCHKIT_SKIP": "7"}
    opts = load_options(environ=env)
    assert (opts.stop, opts.skip) == (30, 7)
    opts = load_options(stop=4, skip=0, environ=env)
    assert (opts.stop, opts.skip) == (4, 0)  # an explicit 0 wins


def test_config_path_in_shell_is_ignored():
    opts = load_options(environ={"MILABENCH_CONFIG": "config/standard.yaml"})
    assert opts == BenchOptions()
    opts = load_options(environ={"MILABENCH_CONFIG": "{not json"})
    assert opts == BenchOptions()


def test_stop_zero_means_unbounded():
    assert load_options(stop=0, environ={}).budget == 0


@pytest.mark.parametrize(
    "text,seconds", [(1, 1.0), (0.5, 0.5), ("1s", 1.0), ("250ms", 0.25), ("2m", 120.0), ("3", 3.0)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "bad", [{"stop": "lots"}, {"skip": -1}, {"stop": 1.5}, {"interval": "soon"}]
)
def test_bad_values_name_the_option(bad):
    entry = {"voir": {"options": bad}}
    with pytest.raises(ValueError, match=next(iter(bad)) + "|duration"):
        load_options(environ={"MILABENCH_CONFIG": json.dumps(entry)})
