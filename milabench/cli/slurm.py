"""`milabench slurm system`: a system file for the nodes of the current Slurm allocation.

The node list comes from ``SLURM_JOB_NODELIST`` (or ``--nodelist``); the first node is the
main one, every node's user is ``$USER`` and its address its name (``--resolve`` writes the
resolved IP address instead). Without ``--output`` the YAML is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from milabench.cli.common import add_option
from milabench.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="slurm_command", metavar="SUBCOMMAND")
    system = sub.add_parser("system", help="write a system file from SLURM_JOB_NODELIST")
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


def run(args: argparse.Namespace) -> int:
    if getattr(args, "slurm_command", None) != "system":
        raise UsageError("usage: milabench slurm system [--output FILE]")
    import yaml

    from milabench.remote.slurm import system_from_nodelist

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
