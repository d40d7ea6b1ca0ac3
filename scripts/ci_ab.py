"""A/B benchmark of two source trees for CI: base and head, interleaved, then compared.

    python scripts/ci_ab.py BASE_TREE HEAD_TREE --suite benchmarks/ci.yaml --rounds 3 \
        --base-dir /tmp/mb --output table.md [--separate-envs] [-- RUN ARGS...]

BASE_TREE and HEAD_TREE are two checkouts of the same repository (e.g. two `git worktree`s:
the PR's base and head). ``--suite`` is the suite file's path relative to each tree. The
script runs ``milabench run`` from each tree in turn, alternating which goes first (base
head, head base, base head, ...), so that drift of the machine (clocks, temperature, other
tenants, caches) hits both sides alike. Run folders are ``<base-dir>/runs/base-<i>`` and
``<base-dir>/runs/head-<i>``. Then ``milabench compare`` pools each side's rounds
(``base-0,base-1,... head-0,head-1,...``), the Markdown table goes to ``--output``, and the
exit code is compare's: 0 no regression, 1 a regression (significant and beyond its
threshold), other values an error. A ``milabench run`` that fails is not fatal here: its
missing benchmarks show as regressions in the comparison (a run that made no run folder
is left out; exit 2 when a side has none).

Before the rounds it runs ``milabench install`` (not with ``--use-current-env``) and
``milabench prepare`` from each tree (``--no-setup``: neither). Environments and data live
under ``--base-dir``, shared by the two sides unless ``--separate-envs`` (each side gets
``<base-dir>/base`` or ``<base-dir>/head`` as its milabench base: use it when the change
touches a benchmark's requirements). Arguments after ``--`` go to every ``milabench run``
(``--use-current-env``, ``--select a,b``, ``--system system.yaml``, ``--override k=v``...),
and those that are not run-only to install and prepare. Stdlib only: copy it into your
repository.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

SIDES = ("base", "head")
# `milabench run` options that take a value and that install/prepare do not have
RUN_ONLY = {"--run-name", "--run_name", "--repeat", "--validations", "--dash", "--resume"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base_tree", type=Path, help="checkout of the base (control)")
    parser.add_argument("head_tree", type=Path, help="checkout of the head (treatment)")
    parser.add_argument("--suite", required=True, help="suite file, relative to each tree")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--base-dir", type=Path, required=True, help="milabench base directory")
    parser.add_argument("--output", type=Path, default=Path("comment.md"), help="Markdown file")
    parser.add_argument("--thresholds", default=None, help="thresholds file for compare")
    parser.add_argument("--no-setup", action="store_true", help="skip install and prepare")
    parser.add_argument("--separate-envs", action="store_true", help="one base per side")
    parser.add_argument(
        "--milabench",
        default=f"{shlex.quote(sys.executable)} -m milabench",
        help="command that starts milabench (default: this Python's -m milabench)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - (1 if "--" in argv else 0)])
    args.run_args = extra  # after --: extra `milabench run` arguments
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def side_base(args: argparse.Namespace, side: str) -> Path:
    base = args.base_dir.absolute()
    return base / side if args.separate_envs else base


def milabench(args: argparse.Namespace, side: str, *words: str) -> list[str]:
    tree = {"base": args.base_tree, "head": args.head_tree}[side].absolute()
    return [*shlex.split(args.milabench), *words, "--config", str(tree / args.suite),
            "--base", str(side_base(args, side))]  # fmt: skip


def suite_args(run_args: list[str]) -> list[str]:
    """The `milabench run` arguments that `install` and `prepare` accept too."""
    kept, skip = [], False
    for arg in run_args:
        if skip:
            skip = False
        elif arg.split("=")[0] in RUN_ONLY:
            skip = "=" not in arg
        else:
            kept.append(arg)
    return kept


def call(argv: list[str], cwd: Path) -> int:
    print("+ " + shlex.join(argv), file=sys.stderr, flush=True)
    # milabench's own report goes to stderr: stdout carries only the Markdown table
    return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=sys.stderr).returncode


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trees = {"base": args.base_tree.absolute(), "head": args.head_tree.absolute()}
    root = args.base_dir.absolute()
    root.mkdir(parents=True, exist_ok=True)
    for side, tree in trees.items():
        if not (tree / args.suite).is_file():
            print(f"ci_ab: {tree / args.suite}: no such suite file ({side})", file=sys.stderr)
            return 2
    if not args.no_setup:
        setup = suite_args(args.run_args)
        current = any(a in ("--use-current-env", "--use_current_env") for a in setup)
        for side in SIDES:
            for command in ("prepare",) if current else ("install", "prepare"):
                code = call([*milabench(args, side, command), *setup], trees[side])
                if code:
                    print(f"ci_ab: milabench {command} failed for {side} (exit {code})",
                          file=sys.stderr)  # fmt: skip
                    return code
    folders: dict[str, list[str]] = {side: [] for side in SIDES}
    for i in range(args.rounds):
        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
            name = f"{side}-{i}"
            started = time.monotonic()
            argv = milabench(args, side, "run", "--run-name", name, "--dash", "no")
            code = call([*argv, *args.run_args], trees[side])
            print(f"ci_ab: round {i} {side}: exit {code} in {time.monotonic() - started:.1f}s",
                  file=sys.stderr, flush=True)  # fmt: skip
            folder = side_base(args, side) / "runs" / name
            if folder.is_dir():  # relative to --base-dir, where compare runs: short labels
                folders[side].append(str(folder.relative_to(root)))
            else:
                print(f"ci_ab: {name} made no run folder: left out", file=sys.stderr)
    for side in SIDES:
        if not folders[side]:
            print(f"ci_ab: no {side} run made a run folder: nothing to compare", file=sys.stderr)
            args.output.write_text("")
            return 2
    # thresholds: the `compare:` keys of head's suite (loaded as the runs saw it), then
    # --thresholds
    compare = [*shlex.split(args.milabench), "compare", ",".join(folders["base"]),
               ",".join(folders["head"]), "--format", "markdown",
               "--config", str(trees["head"] / args.suite), *suite_args(args.run_args)]  # fmt: skip
    if args.thresholds:
        compare += ["--thresholds", str(Path(args.thresholds).absolute())]
    print("+ " + shlex.join(compare), file=sys.stderr, flush=True)
    proc = subprocess.run(compare, cwd=root, stdout=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    args.output.write_text(proc.stdout)
    sys.stdout.write(proc.stdout)
    print(f"ci_ab: compare exit {proc.returncode}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    os.environ.setdefault("MILABENCH_DASH", "no")
    sys.exit(main())
