"""`milabench list`: the suite's entries, one line each, after resolution.

    milabench list [--config SUITE] [--select A,B] [--exclude A,B] [--system FILE]
                   [--format text|json|markdown]

Columns: name, group, install group, tags, weight, enabled, and why an entry would be
skipped on this system (the suite's `_requires` check this machine fails, which a note
on stderr explains with the suite to use instead, else the entry's first
`requires_capabilities` expression that does not hold).
Without `--select`/`--exclude` every entry is listed, disabled ones included; with them,
the entries `milabench run` would run. Private entries (`_templates`) are never listed.
"""

from __future__ import annotations

import argparse
import json
import sys

from milabench.cli.common import add_option, add_requirements_option, add_suite_options

COLUMNS = ("name", "group", "install_group", "tags", "weight", "enabled", "skip")
HEADINGS = ("name", "group", "install group", "tags", "weight", "enabled", "skipped because")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_requirements_option(parser)
    add_option(
        parser,
        "format",
        choices=("text", "json", "markdown", "md"),
        default="text",
        help="output format (default: text)",
    )


def entry_rows(suite, unmet_suite: list | tuple = ()) -> list[dict]:
    """One dict per listed entry (the JSON output). `unmet_suite`: the suite's own
    requirements that this machine lacks (`check_requirements`): every entry is skipped
    for the first of them."""
    from milabench.config.capabilities import unmet_requirement

    selected = suite.entries
    entries = suite.all_entries
    rows = []
    for name, entry in entries.items():
        if name.startswith("_"):
            continue
        reason = unmet_suite[0].check if unmet_suite else unmet_requirement(entry, suite.system)
        rows.append(
            {
                "name": name,
                "group": entry.group,
                "install_group": entry.install_group,
                "tags": list(entry.tags),
                "weight": entry.weight,
                "enabled": entry.enabled,
                "selected": name in selected,
                "skip": f"requires {reason}" if reason else None,
            }
        )
    return rows


def _cell(row: dict, key: str) -> str:
    value = row[key]
    if key == "tags":
        return ",".join(str(t) for t in value) or "-"
    if key == "enabled":
        return "yes" if value else "no"
    if key == "weight":
        return "-" if value is None else f"{float(value):g}"
    return "-" if value in (None, "") else str(value)


def render(rows: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    table = [[_cell(r, k) for k in COLUMNS] for r in rows]
    if fmt in ("markdown", "md"):
        lines = ["| " + " | ".join(HEADINGS) + " |",
                 "|" + "|".join([":---"] * 4 + ["---:", ":---", ":---"]) + "|"]  # fmt: skip
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
                  for cells in table]  # fmt: skip
        return "\n".join(lines) + "\n"
    cells = [list(HEADINGS)] + table
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADINGS))]
    lines = [
        " | ".join(
            v.rjust(w) if i == 4 else v.ljust(w)
            for i, (v, w) in enumerate(zip(c, widths, strict=True))
        ).rstrip()  # fmt: skip
        for c in cells
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    skipped = sum(1 for r in rows if r["skip"])
    lines += ["", f"{len(rows)} entries, {sum(r['enabled'] for r in rows)} enabled"
              + (f", {skipped} skipped on this system" if skipped else "")]  # fmt: skip
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import check_requirements, load_suite_from_args

    suite = load_suite_from_args(args)
    unmet = check_requirements(suite, args, refuse=False)
    rows = entry_rows(suite, [] if args.ignore_requirements else unmet)
    if getattr(args, "select", None) or getattr(args, "exclude", None):
        rows = [r for r in rows if r["selected"]]
    sys.stdout.write(render(rows, args.format))
    return 0
