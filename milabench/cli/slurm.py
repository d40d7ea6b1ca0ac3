"""`milabench slurm`: run suites on Slurm allocations.

``slurm system`` writes a system file for the nodes of the current allocation. The node
list comes from ``SLURM_JOB_NODELIST`` (or ``--nodelist``); the first node is the main
one, every node's user is ``$USER`` and its address its name (``--resolve`` writes the
resolved IP address instead). Without ``--output`` the YAML is printed.

``slurm sbatch`` writes the batch script of one job that runs a suite on its allocation
(`milabench.slurm.batchscript` says what the script does). The suite and the selection are
loaded here first, so that a typo fails now rather than after hours in the queue.
Without ``--output`` the script is printed (``milabench slurm sbatch ... | sbatch``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from milabench.cli.common import add_option, add_suite_options
from milabench.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="slurm_command", metavar="SUBCOMMAND")
    system = sub.add_parser("system", help="write a system file from SLURM_JOB_NODELIST")
    _add_system_arguments(system)
    sbatch = sub.add_parser(
        "sbatch",
        help="write the batch script of a job that installs, prepares and runs a suite",
        description="Write the batch script of a Slurm job that installs, prepares and runs "
        "a suite on its allocation; submit it with sbatch. Arguments after -- are passed "
        "to `milabench run`.",
    )
    _add_sbatch_arguments(sbatch)


def _add_system_arguments(system: argparse.ArgumentParser) -> None:
    add_option(
        system, "output", default=None, metavar="FILE", help="file to write (default: stdout)"
    )
    add_option(
        system,
        "nodelist",
        default=None,
        metavar="LIST",
        help="node list to expand (default: env SLURM_JOB_NODELIST)",
    )
    add_option(system, "user", default=None, help="ssh user of every node (default: $USER)")
    add_option(system, "port", default=22, type=int, help="ssh port of every node")
    add_option(system, "sshkey", default=None, metavar="PATH", help="ssh key for the system")
    add_option(system, "arch", default=None, help="accelerator arch (default: detected)")
    add_option(
        system,
        "resolve",
        action="store_true",
        default=False,
        help="write resolved IP addresses instead of host names",
    )


def _add_sbatch_arguments(sbatch: argparse.ArgumentParser) -> None:
    add_suite_options(sbatch)
    add_option(
        sbatch, "output", default=None, metavar="FILE", help="file to write (default: stdout)"
    )
    add_option(sbatch, "nodes", type=int, default=1, metavar="N", help="nodes (default 1)")
    add_option(
        sbatch, "time", default="04:00:00", metavar="LIMIT", help="time limit (default 04:00:00)"
    )
    add_option(sbatch, "partition", default=None, help="partition (default: the cluster's)")
    add_option(sbatch, "job-name", default="milabench", help="job name (default milabench)")
    add_option(
        sbatch,
        "no-exclusive",
        action="store_true",
        default=False,
        help="share the nodes with other jobs (default: --exclusive, as a benchmark needs)",
    )
    add_option(
        sbatch,
        "sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more #SBATCH option, e.g. --sbatch=--gpus-per-node=8 (repeatable)",
    )
    add_option(
        sbatch,
        "sshkey",
        default=None,
        metavar="PATH",
        help="key the main node reaches the other nodes with (written in the system file)",
    )
    add_option(
        sbatch,
        "python",
        default=None,
        metavar="PATH",
        help="interpreter that runs milabench in the job (default: the one running this)",
    )
    add_option(
        sbatch,
        "no-prepare",
        action="store_true",
        default=False,
        help="skip install and prepare (the base is already installed and prepared)",
    )
    sbatch.add_argument(
        "run_args", nargs="*", metavar="-- RUN_OPTION", help="options for `milabench run`"
    )


def run(args: argparse.Namespace) -> int:
    command = getattr(args, "slurm_command", None)
    if command == "sbatch":
        return _write_batch_script(args)
    if command != "system":
        raise UsageError("usage: milabench slurm {system,sbatch} [--output FILE]")
    import yaml

    from milabench.slurm.nodelist import system_from_nodelist

    nodelist = args.nodelist or os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise UsageError(
            "SLURM_JOB_NODELIST is not set: run inside an allocation or pass --nodelist"
        )
    document = system_from_nodelist(
        nodelist,
        user=args.user,
        port=args.port,
        resolve=args.resolve,
        arch=args.arch,
        sshkey=args.sshkey,
    )
    text = yaml.safe_dump(document, sort_keys=False)
    if args.output:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out} ({len(document['system']['nodes'])} nodes)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _write_batch_script(args: argparse.Namespace) -> int:
    import time

    from milabench import __version__
    from milabench.cli.common import (
        base_path,
        config_path,
        ensure_writable,
        load_suite_from_args,
        strict_mode,
    )
    from milabench.slurm.batchscript import BatchJob, render_batch_script

    if args.system:
        raise UsageError(
            "--system: the job writes the system file of its own allocation; "
            "leave --system out of `slurm sbatch`"
        )
    if args.run_args and not args.run_args[0].startswith("-"):
        raise UsageError(
            f"unexpected argument {args.run_args[0]!r}: options for `milabench run` go "
            "after -- (e.g. -- --validations all)"
        )
    suite = load_suite_from_args(args)  # a bad suite or selection fails before queueing
    if not suite.entries:
        raise UsageError(f"{config_path(args)}: no benchmark selected, nothing to submit")
    base = base_path(args)
    job = BatchJob(
        # absolute, not resolved: a virtual environment's python is a symbolic link
        python=str(Path(args.python or sys.executable).expanduser().absolute()),
        config=config_path(args).expanduser().absolute(),
        base=base,
        select=tuple(args.select),
        exclude=tuple(args.exclude),
        overrides=tuple(args.override),
        use_current_env=args.use_current_env,
        strict=strict_mode(args),
        prepare=not args.no_prepare,
        sshkey=str(Path(args.sshkey).expanduser().absolute()) if args.sshkey else None,
        nodes=args.nodes,
        time_limit=args.time,
        job_name=args.job_name,
        partition=args.partition,
        exclusive=not args.no_exclusive,
        sbatch_options=tuple(args.sbatch),
        run_args=tuple(args.run_args),
    )
    text = render_batch_script(
        job, version=__version__, written=time.strftime("%Y-%m-%d %H:%M:%S %Z")
    )
    # sbatch opens the job's --output file under this folder before the script starts:
    # it must exist at submission, on a filesystem the nodes share.
    ensure_writable(base, job.folder)
    if args.output:
        out = Path(args.output)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            out.chmod(0o755)
        except OSError as exc:
            raise UsageError(f"--output {out}: cannot write: {exc.strerror}") from None
        print(f"wrote {out}: submit it with `sbatch {out}`", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
