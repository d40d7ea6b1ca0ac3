"""`milabench run`: run the selected benchmarks into a run folder and print the report.

Exit code: the report's verdict (0 when every enabled validation layer passed), 130 after
Ctrl-C (the partial report is printed first). Each benchmark's outcome, including skips
and missing environments, is recorded in ``<base>/runs/<run-name>/``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from functools import partial
from pathlib import Path

from milabench.cli.common import (
    add_option,
    add_requirements_option,
    add_suite_options,
    add_validations_option,
    base_path,
    ensure_writable,
    suite_command,
)

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def random_word(syllables: int = 3) -> str:
    """A short pronounceable word (``bavoki``) that makes run names easy to say."""
    rng = random.SystemRandom()
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))


def format_run_name(template: str | None, now: float | None = None) -> str:
    """``{time}`` -> ``YYYY-MM-DD_HH-MM-SS``; default ``<word>.{time}``."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now))
    template = template or f"{random_word()}.{{time}}"
    name = template.replace("{time}", stamp)
    if not name or "/" in name or name in (".", ".."):
        from milabench.errors import UsageError

        raise UsageError(f"--run-name: invalid run name {template!r}")
    return name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_requirements_option(parser)
    add_option(
        parser,
        "run-name",
        default=None,
        metavar="NAME",
        help="run folder name under <base>/runs ({time} is replaced; default: word.{time})",
    )
    add_option(
        parser,
        "repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the suite N times (tags gain R<k>)",
    )
    add_validations_option(
        parser, "validation layers deciding the exit code (comma list, 'all', '-name')"
    )
    add_option(
        parser,
        "dash",
        choices=["long", "short", "no"],
        default=None,
        help="live display (env MILABENCH_DASH; default long on a terminal, else no)",
    )
    add_option(
        parser,
        "resume",
        default=None,
        metavar="RUN",
        help="run folder (path or name under <base>/runs) to complete: benchmarks "
        "that succeeded there are skipped, the others run again into it",
    )
    add_option(
        parser,
        "ignore-doctor",
        action="store_true",
        default=False,
        help="start even when `milabench doctor` finds a failure (a capped or erroring "
        "GPU, a full disk); the findings are still printed and recorded "
        "(option run.doctor: check, ignore or off)",
    )


def _run_dir(args: argparse.Namespace) -> tuple[Path, bool]:
    from milabench.errors import UsageError

    runs = base_path(args) / "runs"
    if args.resume:
        candidate = Path(args.resume)
        if not candidate.is_dir():
            candidate = runs / args.resume
        if not candidate.is_dir():
            raise UsageError(f"--resume: no run folder {args.resume!r} (looked in {runs})")
        return candidate.absolute(), True
    return runs / format_run_name(args.run_name), False


def _dash_mode(args: argparse.Namespace) -> str:
    mode = args.dash or os.environ.get("MILABENCH_DASH")
    if mode not in ("long", "short", "no"):
        mode = "long" if sys.stdout.isatty() else "no"
    return mode


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError

    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    validations = list(args.validations or [])
    from milabench.report.validation import select_layers

    select_layers(validations)  # unknown layer names fail before anything runs
    from benchkit.memory import host_override
    from milabench.machine.facts import commit_override

    try:
        host_override()  # a bad MILABENCH_HOST_MEMORY fails here, not in every benchmark
        commit_override()  # a bad MILABENCH_COMMIT too, before the meta records
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    from milabench.cli.common import check_requirements, load_suite_from_args
    from milabench.envs.ready import ensure_ready
    from milabench.execute.session import run_session
    from milabench.report.run_end import print_run_report

    suite = load_suite_from_args(args)
    check_requirements(suite, args)  # before the run folder, the doctor, anything
    run_dir, resuming = _run_dir(args)
    if not resuming:
        ensure_writable(base_path(args), run_dir.parent)
    check_machine(
        suite,
        run_dir,
        ignore=bool(getattr(args, "ignore_doctor", False)),
        doctor_command=suite_command(args, "doctor"),
    )
    return run_session(
        suite,
        run_dir,
        repeat=args.repeat,
        resume=resuming,
        dash=_dash_mode(args),
        launcher=remote_launcher(suite.system, suite, run_dir.name),
        check_environment=ensure_ready,
        report=partial(print_run_report, entries=suite.entries, validations=validations),
    )


def remote_launcher(system: dict, suite=None, run_id: str | None = None):
    """The SSH-capable launcher when some node is reached over SSH, else None (local
    processes only; asyncssh is then never imported). With ``suite`` and ``run_id``, the
    code is first copied to every worker under ``<node base>/code/<run_id>`` and the
    nodes' versions checked (`milabench.remote.codesync.push_for_run`)."""
    from milabench.config.topology import remote_nodes

    if not remote_nodes(system):
        return None
    if suite is not None and run_id:
        from milabench.remote.codesync import push_for_run

        print(push_for_run(suite, run_id), flush=True)
    from milabench.remote.dispatch import node_launcher

    return node_launcher(system)


DOCTOR_MODES = ("check", "ignore", "off")


def check_machine(
    suite, run_dir: Path, *, ignore: bool = False, doctor_command: str = "milabench doctor"
) -> None:
    """`milabench doctor`'s checks before the first benchmark (docs/doctor.md).

    Prints the warnings and failures, records every finding in ``<run>/doctor.json`` (the
    report and the fleet report read it) and refuses to start on a failure, one line
    naming it, unless ``ignore`` (``--ignore-doctor``) or the ``run.doctor`` option says
    ``ignore``; ``off`` skips the checks (nothing recorded). `doctor_command`: the
    `milabench doctor` line the refusal names (this run's suite, base and selection).
    """
    from milabench.config.options import get_option
    from milabench.errors import MilabenchError, UsageError

    value = get_option(suite.system, "run.doctor", "check")
    mode = {False: "off", True: "check"}.get(value, str(value).strip().lower())
    if mode not in DOCTOR_MODES:
        raise UsageError(f"option run.doctor: {mode!r} is not one of {', '.join(DOCTOR_MODES)}")
    if mode == "off":
        return
    ignore = ignore or mode == "ignore"
    from milabench.cli.doctor import suite_findings
    from milabench.doctor.findings import OK, failures, refusal
    from milabench.doctor.record import write_doctor_file

    found = suite_findings(suite)
    problems = [f for f in found if f.severity != OK]
    for f in problems:
        print(
            f"milabench doctor: {f.severity}: {f.subject} {f.check}: {f.reason}",
            file=sys.stderr,
            flush=True,
        )
    failed = failures(found)
    line = refusal(
        found,
        lead="refused to start: ",
        tail=f"; `{doctor_command}` lists every check, --ignore-doctor runs anyway",
    )
    if line is not None and not ignore:
        raise MilabenchError(line)
    write_doctor_file(str(run_dir), found, ignored=bool(failed))
