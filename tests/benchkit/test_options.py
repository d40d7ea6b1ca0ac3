import json

import pytest

from benchkit.options import BenchOptions, load_options, parse_duration


def test_defaults_when_run_by_hand():
    opts = load_options(environ={})
    assert opts == BenchOptions(stop=60, skip=5, interval=1.0, gpu_poll=1.0)
    assert opts.budget == 65


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
    assert opts.stop == 60
    opts = load_options(environ={"MILABENCH_CONFIG": "{not json"})
    assert opts.stop == 60


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
