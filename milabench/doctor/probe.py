"""The doctor's checks on a node that has nothing but a Python: one inline program.

`probe_argv` is the command fleet and preflight start on a node before anything is
copied: a ``python -c`` program (`milabench.machine.inline`) carrying the doctor's
modules (`SHIPPED_MODULES`, standard library only) that runs `main` and prints one
``@milabench-doctor {json}`` line; `parse_probe_output` reads the findings back. Why
inline: docs/doctor.md "On every node".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from milabench.doctor.checks import run_checks
from milabench.doctor.findings import Finding, failures, findings_of, render_findings
from milabench.doctor.interpreter import PYTHON_HINT
from milabench.doctor.thresholds import DEFAULT_SAMPLE

RESULT_PREFIX = "@milabench-doctor "

#: What `main` imports beyond the standard library, sent with it to a node.
SHIPPED_MODULES = (
    "benchkit.smi",
    "benchkit.accelerators",
    "benchkit.hostmem",
    "milabench.machine.procfs",
    "milabench.doctor.findings",
    "milabench.doctor.thresholds",
    "milabench.doctor.host",
    "milabench.doctor.nvidia",
    "milabench.doctor.sysfs",
    "milabench.doctor.interpreter",
    "milabench.doctor.checks",
    "milabench.doctor.probe",
)

_MAIN = """
import sys
from milabench.doctor.probe import main
sys.exit(main())
"""


def probe_argv(
    python: str,
    *,
    paths: Sequence[str] = (),
    sample: float = DEFAULT_SAMPLE,
    modules: bool = True,
    cuda_needed: tuple[int, int] | None = None,
    cuda_source: str = "",
    python_hint: str | None = None,
) -> list[str]:
    """The command that runs these checks on a node with only its own ``python``: `main`
    inline (``-c``, with `SHIPPED_MODULES`), findings printed as ``@milabench-doctor
    {json}``."""
    from milabench.machine.inline import inline_program  # not needed on the node

    source = inline_program(_MAIN, SHIPPED_MODULES, filename="<milabench-doctor>")
    argv = [python, "-c", source, "--json", "--sample", str(sample)]
    for p in paths:
        argv += ["--path", p]
    if modules:
        argv.append("--modules")
    if cuda_needed is not None:
        argv += ["--cuda", f"{cuda_needed[0]}.{cuda_needed[1]}", "--cuda-source", cuda_source]
    if python_hint:
        argv += ["--python-hint", python_hint]
    return argv


def parse_probe_output(stdout: str) -> list[Finding] | None:
    """The findings a probe printed (None when it printed no result line)."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                return findings_of(json.loads(line[len(RESULT_PREFIX) :]))
            except ValueError:
                return None
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the checks; print the table, or the ``@milabench-doctor`` JSON line."""
    parser = argparse.ArgumentParser(prog="milabench-doctor-probe")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sample", type=float, default=DEFAULT_SAMPLE)
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--modules", action="store_true")
    parser.add_argument("--cuda", default=None)
    parser.add_argument("--cuda-source", default="")
    parser.add_argument("--python-hint", default=PYTHON_HINT)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    needed = None
    if args.cuda:
        major, _, minor = args.cuda.partition(".")
        needed = (int(major), int(minor or 0))
    found = run_checks(
        sample=args.sample,
        paths=args.path,
        cuda_needed=needed,
        cuda_source=args.cuda_source,
        modules=args.modules,
        python_hint=args.python_hint,
    )
    if args.json:
        print(RESULT_PREFIX + json.dumps({"findings": [f.as_dict() for f in found]}), flush=True)
    else:
        print(render_findings(found))
    return 1 if failures(found) else 0


if __name__ == "__main__":
    sys.exit(main())
