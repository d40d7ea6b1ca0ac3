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
from pathlib import Path

from milabench.cli.common import (
    add_option,
    add_suite_options,
    add_validations_option,
    base_path,
    ensure_writable,
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
    if args.repeat < 1:
        from milabench.errors import UsageError

        raise UsageError("--repeat must be at least 1")
    validations = list(args.validations or [])
    from milabench.report.validation import select_layers

    select_layers(validations)  # unknown layer names fail before anything runs

    from milabench.cli.common import load_suite_from_args
    from milabench.envs.ready import ensure_ready
    from milabench.execute.session import run_session

    suite = load_suite_from_args(args)
    run_dir, resuming = _run_dir(args)
    if not resuming:
        ensure_writable(base_path(args), run_dir.parent)
    return run_session(
        suite,
        run_dir,
        repeat=args.repeat,
        resume=resuming,
        dash=_dash_mode(args),
        validations=validations,
        launcher=remote_launcher(suite.system, suite, run_dir.name),
        check_environment=ensure_ready,
    )


def remote_launcher(system: dict, suite=None, run_id: str | None = None):
    """The SSH-capable launcher when some node is reached over SSH, else None (local
    processes only; asyncssh is then never imported). With ``suite`` and ``run_id``, the
    code is first copied to every worker under ``<node base>/code/<run_id>`` and the
    nodes' versions checked (`milabench.remote.codesync.push_for_run`)."""
    from milabench.config.nodes import remote_nodes

    if not remote_nodes(system):
        return None
    if suite is not None and run_id:
        from milabench.remote.codesync import push_for_run

        print(push_for_run(suite, run_id), flush=True)
    from milabench.remote.dispatch import node_launcher

    return node_launcher(system)
