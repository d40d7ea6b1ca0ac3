"""Finding the cause of a failure in a process's standard error.

People read the Errors section to learn *why* a benchmark failed without opening files:
the exception line of the last Python traceback, a short excerpt of the frames above it,
pip/uv resolver errors for install logs, and otherwise the last lines of stderr.
Launchers prefix worker lines (torchrun: ``[rank0]: ``); the prefix is removed first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
_HEADER = "Traceback (most recent call last):"
_PIP_ERROR = re.compile(r"^(ERROR: .+|error: .+|\s*×\s.+|Because .+ we can conclude .+)$")
EXCERPT_LINES = 8


@dataclass(frozen=True)
class Failure:
    """The cause of one failed process."""

    line: str  # the exception line (or the best one-line cause found)
    excerpt: list[str]  # a few lines of context


def _clean(lines: list[str]) -> list[str]:
    return [_PREFIX.sub("", ln.rstrip("\n")) for ln in lines]


def extract_traceback(lines: list[str]) -> Failure | None:
    """The last traceback in `lines` (exception line + short excerpt), or None."""
    lines = _clean(lines)
    starts = [i for i, ln in enumerate(lines) if ln.strip() == _HEADER]
    if not starts:
        return None
    start = starts[-1]
    block = [lines[start]]
    exc_line = None
    for ln in lines[start + 1 :]:
        if exc_line is None:
            block.append(ln)
            if ln and not ln[0].isspace():
                exc_line = ln
        else:
            # continuation of a multi-line message, until an empty line or a new header
            if not ln.strip() or ln.strip() == _HEADER or ln.startswith("During handling"):
                break
            block.append(ln)
            if len(block) > 200:
                break
    if exc_line is None:  # cut traceback: report its last frame
        exc_line = block[-1].strip() if len(block) > 1 else _HEADER
    excerpt = (
        block
        if len(block) <= EXCERPT_LINES
        else [block[0], "  ...", *block[-(EXCERPT_LINES - 2) :]]
    )
    return Failure(exc_line.strip(), excerpt)


def extract_pip_errors(lines: list[str]) -> Failure | None:
    """pip (`ERROR: ...`) or uv (`error: ...`, `× ...`) resolver/installer errors."""
    hits = [ln.rstrip() for ln in _clean(lines) if _PIP_ERROR.match(ln)]
    if not hits:
        return None
    return Failure(hits[0].strip(" ×"), hits[:EXCERPT_LINES])


def read_lines(path: Path, limit: int = 20000) -> list[str]:
    """The last `limit` lines of a text file ([] when absent)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return lines[-limit:]


def explain(stderr: list[str], stdout: list[str], errors: list[dict], fallback: str) -> Failure:
    """Best cause for a failed process, from its streams and `error` events."""
    found = extract_traceback(stderr) or extract_traceback(stdout)
    if found:
        return found
    found = extract_pip_errors(stderr) or extract_pip_errors(stdout)
    if found:
        return found
    if errors:
        err = errors[-1]
        line = ": ".join(str(err[k]) for k in ("type", "message") if err.get(k)) or fallback
        trace = err.get("trace")
        excerpt = str(trace).splitlines()[-EXCERPT_LINES:] if trace else []
        return Failure(line, excerpt)
    tail = [ln for ln in _clean(stderr) if ln.strip()][-5:]
    return Failure(fallback, tail)
