"""The batch script `milabench slurm sbatch` writes: a whole suite run as one Slurm job.

Everything the job needs (interpreter, suite file, base, selection) is decided on the
login node and baked into the script as absolute paths; its output and the system file
it writes go to ``<base>/slurm/``. On the allocation the script writes the system file
of the allocation's nodes (``milabench slurm system``), runs ``milabench install`` and
``prepare`` (``prepare=False`` skips both), ``milabench preflight`` when the job has
more than one node, then ``milabench run`` into ``<base>/runs/slurm-<job id>.<time>``.
The job's exit code is the first failing step's, else the run's verdict. Values that
reach a shell line are quoted with `shlex.quote`; a value that reaches an ``#SBATCH``
line (read by sbatch without a shell) must be one printable word, since a line break
there would start a new command. The job, step by step: docs/multinode.md "Slurm".
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from milabench.errors import UsageError


@dataclass(frozen=True)
class BatchJob:
    """What one job runs; every path absolute (the job may start in any folder)."""

    python: str
    config: Path
    base: Path
    select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    use_current_env: bool = False
    strict: bool = False
    prepare: bool = True
    sshkey: str | None = None
    nodes: int = 1
    time_limit: str = "04:00:00"
    job_name: str = "milabench"
    partition: str | None = None
    exclusive: bool = True
    sbatch_options: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        """Where the job's output and its system file go."""
        return self.base / "slurm"


def _sbatch_value(option: str, value: str) -> str:
    """`value` if it can stand on an ``#SBATCH`` line, else a one-line usage error.

    sbatch splits those lines on white space (no shell quoting), and a line break would
    end the directive and start a command: one printable word only.
    """
    if not value or not value.isprintable() or any(ch.isspace() for ch in value):
        raise UsageError(
            f"--{option}: {value!r} must be one printable word (no spaces or line breaks)"
        )
    return value


def sbatch_lines(job: BatchJob) -> list[str]:
    """The ``#SBATCH`` directives, in the order sbatch reads them (later ones win)."""
    if job.nodes < 1:
        raise UsageError(f"--nodes: {job.nodes} must be at least 1")
    lines = [
        f"--job-name={_sbatch_value('job-name', job.job_name)}",
        f"--nodes={job.nodes}",
        "--ntasks-per-node=1",
        f"--time={_sbatch_value('time', job.time_limit)}",
        f"--output={_sbatch_value('base', str(job.folder))}/milabench-%j.out",
    ]
    if job.exclusive:
        lines.append("--exclusive")
    if job.partition:
        lines.append(f"--partition={_sbatch_value('partition', job.partition)}")
    for option in job.sbatch_options:
        _sbatch_value("sbatch", option)
        if not option.startswith("-"):
            raise UsageError(f"--sbatch: {option!r} is not an sbatch option (starts with '-')")
        lines.append(option)
    return [f"#SBATCH {line}" for line in lines]


def _suite_words(job: BatchJob) -> list[str]:
    words = ["--config", str(job.config), "--base", str(job.base)]
    for option, values in (
        ("--select", job.select),
        ("--exclude", job.exclude),
        ("--override", job.overrides),
    ):
        for value in values:
            words += [option, value]
    if job.use_current_env:
        words.append("--use-current-env")
    if job.strict:
        words.append("--strict")
    return words


def _quoted(words: list[str] | tuple[str, ...]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def render_batch_script(job: BatchJob, *, version: str, written: str) -> str:
    """The script's text (bash). `version` and `written` (a date) go in its header only."""
    slurm_system = ["slurm", "system", "--output", '"$system"']
    if job.sshkey:
        slurm_system += ["--sshkey", shlex.quote(job.sshkey)]
    python = shlex.quote(job.python)
    steps = "install + prepare, " if job.prepare else ""
    lines = [
        "#!/bin/bash",
        f"# milabench job, written by `milabench slurm sbatch` (milabench {version}, {written}).",
        "# Submit it with `sbatch FILE`; sbatch options on its command line override the",
        "# #SBATCH lines. On the allocation: the system file of the job's nodes (the first",
        f"# is main), {steps}preflight when there are several nodes, then the run into",
        "# <base>/runs/slurm-<job id>.<time>. Exit code: the first failing step's, else the",
        "# run's verdict.",
        *sbatch_lines(job),
        "",
        "set -euo pipefail",
        "",
        f'milabench() {{ {python} -m milabench "$@"; }}',
        f"suite=({_quoted(_suite_words(job))})",
        f"folder={shlex.quote(str(job.folder))}",
        "",
        'if [[ -z "${SLURM_JOB_NODELIST:-}" || -z "${SLURM_JOB_ID:-}" ]]; then',
        '    echo "milabench job: SLURM_JOB_NODELIST is not set: submit this script with'
        ' sbatch" >&2',
        "    exit 2",
        "fi",
        'mkdir -p "$folder"',
        'system="$folder/system.$SLURM_JOB_ID.yaml"',
        'echo "milabench job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, system file $system"',
        " ".join(["milabench", *slurm_system]),
    ]
    if job.prepare:
        lines += [
            'milabench install --system "$system" "${suite[@]}"',
            'milabench prepare --system "$system" "${suite[@]}"',
        ]
    lines += [
        "# One node has no interconnect to check; several must all answer before the run.",
        'if (( "${SLURM_JOB_NUM_NODES:-1}" > 1 )); then',
        '    milabench preflight --system "$system" "${suite[@]}"',
        "fi",
        f'exec {python} -m milabench run --system "$system" "${{suite[@]}}" \\',
        '    --run-name "slurm-$SLURM_JOB_ID.{time}"'
        + (" " + _quoted(job.run_args) if job.run_args else ""),
        "",
    ]
    return "\n".join(lines)
