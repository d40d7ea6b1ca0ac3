"""`milabench doctor`: one table of this machine's state, a severity per finding.

Checks the host (CPU governor, steal time, CPU pressure, other processes' CPU use, free
memory, swap, free disk under the base folder) and the accelerators (NVIDIA through
NVML: persistence mode, power limit against its default, clock-event reasons, PCIe link,
ECC mode and errors, retired pages and remapped rows, MIG mode, temperature against its
slowdown threshold, the driver against the CUDA build the suite pins; AMD and Intel
through sysfs), each ``ok``, ``warn`` or ``fail`` with a one-line reason
(`milabench.doctor`, docs/doctor.md). Exit code 1 when a finding is a ``fail``.

`milabench run` runs the same checks first (`suite_findings`), prints the problems,
records every finding in the run folder (``doctor.json``) and refuses to start on a
``fail`` unless given ``--ignore-doctor``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from milabench.cli.common import add_option, add_suite_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_option(
        parser,
        "format",
        choices=("text", "json"),
        default="text",
        help="text table (default) or JSON",
    )
    add_option(
        parser,
        "sample",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds over which steal, CPU pressure and other processes' CPU use are "
        "measured (default 1)",
    )
    add_option(
        parser,
        "problems",
        action="store_true",
        default=False,
        help="list only the warnings and failures",
    )


DOCTOR_SAMPLE = 1.0  # `milabench doctor`; `milabench run` uses thresholds.DEFAULT_SAMPLE


def cuda_requirement(suite) -> tuple[tuple[int, int], str] | None:
    """The CUDA runtime the suite's pinned requirements need (cuda arch only), or None."""
    if suite.system.get("arch") != "cuda" or not suite.entries:
        return None
    from milabench.envs import driver
    from milabench.envs.groups import build_groups

    for group in build_groups(suite.entries, suite.system):
        if group.use_current_env:
            continue
        found = driver.required_by_pins(group.requirements)
        if found is not None:
            return found
    return None


def suite_findings(suite, *, sample: float | None = None) -> list:
    """Every check of this machine for ``suite`` (its base folder's disk, its pinned CUDA
    build): a list of `milabench.doctor.findings.Finding`."""
    from milabench.doctor.checks import run_checks
    from milabench.doctor.thresholds import DEFAULT_SAMPLE

    need = cuda_requirement(suite)
    return run_checks(
        sample=DEFAULT_SAMPLE if sample is None else sample,
        paths=[str(Path(suite.base).absolute())],
        cuda_needed=need[0] if need else None,
        cuda_source=need[1] if need else "",
    )


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import load_suite_from_args
    from milabench.doctor.findings import failures, render_findings, summary_line
    from milabench.doctor.record import doctor_record

    suite = load_suite_from_args(args)
    found = suite_findings(suite, sample=DOCTOR_SAMPLE if args.sample is None else args.sample)
    if args.format == "json":
        print(json.dumps(doctor_record(found), indent=2))
    else:
        print(render_findings(found, only_problems=args.problems))
        print(f"milabench doctor: {summary_line(found)}")
    return 1 if failures(found) else 0
