"""`milabench slurm sbatch` without a cluster: the script's text, its quoting, bad input.

The real submissions are in test_slurm_real.py; these checks run everywhere, Slurm or not.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from clirun import milabench

from milabench.errors import UsageError
from milabench.slurm.batchscript import BatchJob, render_batch_script

TINY = Path(__file__).resolve().parent / "suite.yaml"


def render(**fields) -> str:
    job = BatchJob(
        **{"python": "/usr/bin/python3", "config": Path("/c/s.yaml"), "base": Path("/b"), **fields}
    )
    return render_batch_script(job, version="0", written="today")


def bash_words(script: str, variable: str) -> list[str]:
    """The words bash itself gets from the script's `variable=(...)` line."""
    line = next(x for x in script.splitlines() if x.startswith(f"{variable}=("))
    proc = subprocess.run(
        ["bash", "-c", f'{line}\nprintf "%s\\0" "${{{variable}[@]}}"'],
        capture_output=True,
        timeout=30,
        check=True,
    )
    return proc.stdout.decode().split("\0")[:-1]


def test_script_is_valid_bash_with_sbatch_lines_first():
    text = render(select=("a,b",), nodes=2, partition="gpu", sbatch_options=("--gpus=8",))
    assert subprocess.run(["bash", "-n"], input=text, text=True, timeout=30).returncode == 0
    lines = text.splitlines()
    first_command = next(i for i, x in enumerate(lines) if x and not x.startswith("#"))
    directives = [x for x in lines if x.startswith("#SBATCH")]
    assert all(lines.index(d) < first_command for d in directives)  # sbatch stops there
    assert directives == [
        "#SBATCH --job-name=milabench", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=04:00:00", "#SBATCH --output=/b/slurm/milabench-%j.out",
        "#SBATCH --exclusive", "#SBATCH --partition=gpu", "#SBATCH --gpus=8",
    ]  # fmt: skip
    assert "milabench install" in text and "milabench prepare" in text
    assert "preflight" in text and 'SLURM_JOB_NUM_NODES:-1}" > 1' in text


def test_values_reach_bash_exactly_as_given():
    odd = 'x.y=it\'s $HOME `id` "q" ; rm -rf /'
    text = render(select=("a b",), overrides=(odd,), use_current_env=True, strict=True)
    assert bash_words(text, "suite") == [
        "--config", "/c/s.yaml", "--base", "/b", "--select", "a b",
        "--override", odd, "--use-current-env", "--strict",
    ]  # fmt: skip
    run_line = next(x for x in text.splitlines() if x.startswith("    --run-name"))
    assert run_line == '    --run-name "slurm-$SLURM_JOB_ID.{time}"'
    with_args = render(run_args=("--validations", "a;b"))
    assert "--run-name \"slurm-$SLURM_JOB_ID.{time}\" --validations 'a;b'" in with_args


def test_no_prepare_and_no_exclusive():
    text = render(prepare=False, exclusive=False)
    assert "milabench install" not in text and "milabench prepare" not in text
    assert "#SBATCH --exclusive" not in text and "milabench slurm system" in text


@pytest.mark.parametrize(
    "fields, option",
    [
        ({"job_name": "a\n/bin/evil"}, "--job-name"),
        ({"job_name": "two words"}, "--job-name"),
        ({"time_limit": ""}, "--time"),
        ({"partition": "p\r"}, "--partition"),
        ({"sbatch_options": ("--x=1\nrm -rf /",)}, "--sbatch"),
        ({"sbatch_options": ("gpus=8",)}, "--sbatch"),
        ({"nodes": 0}, "--nodes"),
        ({"base": Path("/with space")}, "--base"),
    ],
)
def test_unsafe_sbatch_values_are_refused(fields, option):
    with pytest.raises(UsageError) as err:
        render(**fields)
    assert str(err.value).startswith(option) and "\n" not in str(err.value)


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "job.sbatch"
    base = ["slurm", "sbatch", "--config", str(TINY), "--base", str(tmp_path / "b")]
    cases = [
        (["--select", "nope"], "nope"),
        (["--system", str(TINY)], "--system"),
        (["--job-name", "a b"], "--job-name"),
        (["--select", "paced", "stray"], "after --"),
        (["--nodes", "0"], "--nodes"),
    ]
    for extra, needle in cases:
        proc = milabench(*base, "--output", str(out), *extra)
        assert proc.returncode == 2, (extra, proc.stderr)
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("milabench: error:") and needle in last, (extra, proc.stderr)
        assert "Traceback" not in proc.stderr and not out.exists()
    (tmp_path / "file").write_text("")
    proc = milabench(*base, "--select", "paced", "--output", str(tmp_path / "file" / "job"))
    assert proc.returncode == 2 and "--output" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_prints_the_script_and_prepares_the_output_folder(tmp_path):
    proc = milabench("slurm", "sbatch", "--config", str(TINY), "--select", "paced",
                     "--base", str(tmp_path / "b"), "--time", "0:30:00", "--",
                     "--validations", "all")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash\n") and "#SBATCH --time=0:30:00" in proc.stdout
    assert f"--output={tmp_path / 'b' / 'slurm'}/milabench-%j.out" in proc.stdout
    assert (tmp_path / "b" / "slurm").is_dir()  # sbatch opens the job's output there
    assert str(TINY) in proc.stdout and "--validations all" in proc.stdout
