"""`milabench resolve` through the real command line, and error reporting."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from cfgtest_util import REPO, SUITES, run_cli

BAD = SUITES / "bad"


@pytest.mark.parametrize(
    "suite,expected",
    [
        (
            "unknown_parent.yaml",
            "unknown_parent.yaml: bench.inherits: no entry named '_templat' "
            "(did you mean '_template'?)",
        ),
        ("inherit_cycle.yaml", "inherit_cycle.yaml: b.inherits: inheritance cycle: a -> b -> a"),
        (
            "include_cycle.yaml",
            "include_cycle_b.yaml: include: include cycle: include_cycle.yaml -> "
            "include_cycle_b.yaml -> include_cycle.yaml",
        ),
        ("false_argv.yaml", "false_argv.yaml: bench.argv.--amp: false is not allowed"),
        (
            "matrix_dup.yaml",
            "matrix_dup.yaml: grid.job.name: two generated entries are named 'grid-0.1'",
        ),
        ("invalid_yaml.yaml", "invalid_yaml.yaml: invalid YAML: line 4, column 6: "),
        ("non_mapping.yaml", "non_mapping.yaml: bench: an entry must be a mapping, not list"),
        (
            "plan_method.yaml",
            "plan_method.yaml: bench.plan.method: unknown method 'torchrunn' "
            "(did you mean 'torchrun'?)",
        ),
        (
            "missing_include.yaml",
            "missing_include.yaml: include: no such file 'does-not-exist.yaml'",
        ),
        ("weight.yaml", "weight.yaml: bench.weight: expected a number"),
        ("machines.yaml", "machines.yaml: bench.num_machines: expected a whole number >= 1"),
        ("bad_interp.yaml", "bad_interp.yaml: bench.env.X: cannot interpolate"),
    ],
)
def test_malformed_suites_give_one_line(suite, expected):
    done = run_cli("resolve", "--config", suite, cwd=BAD)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("milabench: error: " + expected), lines[0]
    assert done.stdout == ""


def test_debug_shows_the_traceback():
    done = run_cli("resolve", "--config", "weight.yaml", "--debug", cwd=BAD)
    assert done.returncode != 0 and "Traceback" in done.stderr and "ConfigError" in done.stderr


def test_resolve_yaml_output(tmp_path):
    done = run_cli(
        "resolve",
        "--config",
        str(SUITES / "main.yaml"),
        "--base",
        str(tmp_path),
        "--select",
        "noio",
        "--exclude",
        "grid-adam-bs16,grid-adam-bs32",
    )
    assert done.returncode == 0, done.stderr
    data = yaml.safe_load(done.stdout)
    assert list(data) == ["resnet", "grid-sgd-bs16", "grid-sgd-bs32"]
    assert list(data["resnet"])[:2] == ["name", "tag"]  # insertion order kept
    assert data["resnet"]["dirs"]["base"] == str(tmp_path)


def test_resolve_json_output_with_overrides_and_system(tmp_path):
    done = run_cli(
        "resolve",
        "--config",
        str(SUITES / "main.yaml"),
        "--format",
        "json",
        "--select",
        "resnet",
        "--override",
        "resnet.argv.--batch-size=16",
        "--override",
        "*.max_duration=30",
        "--system",
        str(REPO / "config" / "examples" / "system.yaml"),
        "--use-current-env",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert list(data) == ["resnet"]
    resnet = data["resnet"]
    assert resnet["argv"]["--batch-size"] == 16 and resnet["max_duration"] == 30
    assert resnet["install_variant"] == "cuda"  # arch of the system file
    assert resnet["dirs"]["venv"] == sys.prefix


def test_environment_variables_for_paths(tmp_path):
    done = run_cli(
        "resolve",
        "--format",
        "json",
        env={"MILABENCH_CONFIG": str(SUITES / "main.yaml"), "MILABENCH_BASE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["first"]["dirs"]["base"] == str(tmp_path)


def test_unknown_selection_is_a_usage_error():
    done = run_cli("resolve", "--config", str(SUITES / "main.yaml"), "--select", "resnte")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "milabench: error: no benchmark, group, tag or folder named 'resnte' "
        "(did you mean 'resnet'?)"
    )


@pytest.mark.parametrize("name", ["standard.yaml", "cpu-small.yaml"])
def test_example_suites_resolve(name):
    done = run_cli(
        "resolve", "--config", str(REPO / "config" / "examples" / name), "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {"convnet", "convnet-noio", "flops-fp32-1", "flops-bf16-2"} <= set(data)
    assert "convnet-big" not in data  # disabled


HELP_PROBE = """
import sys
from milabench.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
heavy = sorted(m for m in ("yaml", "omegaconf", "milabench.config", "psutil") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


def test_help_imports_no_configuration_machinery():
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="


def test_resolve_does_not_import_omegaconf_without_interpolation(tmp_path):
    import subprocess

    (tmp_path / "s.yaml").write_text("a: {definition: .}\n")
    code = (
        "import sys; from milabench.config import load_suite; "
        f"load_suite({str(tmp_path / 's.yaml')!r}, base={str(tmp_path)!r}); "
        "print('omegaconf' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
