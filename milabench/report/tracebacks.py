"""Finding the cause of a failure in a process's standard error.

People read the Errors section to learn *why* a benchmark failed without opening files:
the exception line of the last Python traceback, a short excerpt of the frames above it,
pip/uv resolver errors for install logs, the last line saying ``error:``, and otherwise
the last lines of stderr. Launchers prefix worker lines (torchrun: ``[rank0]: ``); the
prefix is removed first. Warnings are never a cause: a library's start-up warning (torch's
``UserWarning: Failed to initialize NumPy``) is often the first and only thing on the
stderr of a process that was stopped, and quoting it sends the reader after the wrong
thing (`without_warnings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
_HEADER = "Traceback (most recent call last):"
_PIP_ERROR = re.compile(r"^(ERROR: .+|error: .+|\s*×\s.+|Because .+ we can conclude .+)$")
# argparse's ``parser.error``: ``<prog>: error: <message>`` (after a ``usage:`` block)
_ARGPARSE_ERROR = re.compile(r"^[^\s:][^:]*: error: \S.*$")
_USAGE = re.compile(r"^usage: ", re.I)
_ERROR_WORD = re.compile(r"\berror:", re.I)
# an exit that only says the script exited (voir logs ``SystemExit: 2`` as an error)
_BARE_EXIT = re.compile(r"^\s*(-?\d+)?\s*$")
_BARE_EXIT_LINE = re.compile(r"^SystemExit(:\s*-?\d*)?\s*$")
# Python's warning records (``file.py:12: UserWarning: message`` then the indented
# source line) and c10's (``[W1128 21:00:00.000 ProcessGroupGloo.cpp:516] Warning: ...``)
_PY_WARNING = re.compile(r"^\S.*?:\d+: (\w+\.)*\w*Warning: ")
_C10_WARNING = re.compile(r"^\[W\d{4} ")
EXCERPT_LINES = 8


@dataclass(frozen=True)
class Failure:
    """The cause of one failed process."""

    line: str  # the exception line (or the best one-line cause found)
    excerpt: list[str]  # a few lines of context


def _clean(lines: list[str]) -> list[str]:
    return [_PREFIX.sub("", ln.rstrip("\n")) for ln in lines]


def without_warnings(lines: list[str]) -> list[str]:
    """`lines` without the warnings printed in them: a Python warning record with the
    indented source lines under it, and c10's ``[W... ] Warning:`` lines."""
    out: list[str] = []
    in_warning = False
    for ln in lines:
        if _PY_WARNING.match(ln) or _C10_WARNING.match(ln):
            in_warning = True
            continue
        if in_warning and ln[:1].isspace() and ln.strip():
            continue  # the source line Python prints under its warning
        in_warning = False
        out.append(ln)
    return out


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


def extract_argparse_error(lines: list[str]) -> Failure | None:
    """The last ``<prog>: error: <message>`` line of argparse (its usage lines as excerpt).

    A script given a bad option exits with code 2 and no traceback; this line, not the
    exit code, is what the user needs to read.
    """
    lines = _clean(lines)
    hits = [i for i, ln in enumerate(lines) if _ARGPARSE_ERROR.match(ln.rstrip())]
    if not hits:
        return None
    end = hits[-1]
    start = end
    for i in range(end - 1, max(-1, end - EXCERPT_LINES), -1):
        if _USAGE.match(lines[i]):
            start = i
            break
    excerpt = [ln.rstrip() for ln in lines[start : end + 1]]
    if len(excerpt) > EXCERPT_LINES:
        excerpt = [excerpt[0], "  ...", *excerpt[-(EXCERPT_LINES - 2) :]]
    return Failure(lines[end].strip(), excerpt)


def extract_error_line(lines: list[str]) -> Failure | None:
    """The last line containing ``error:`` (any case), with the lines just before it."""
    lines = _clean(lines)
    hits = [i for i, ln in enumerate(lines) if _ERROR_WORD.search(ln)]
    if not hits:
        return None
    end = hits[-1]
    context = [ln.rstrip() for ln in lines[max(0, end - 4) : end + 1] if ln.strip()]
    return Failure(lines[end].strip(), context)


def _is_bare_exit(err: dict) -> bool:
    """``{"type": "SystemExit", "message": "2"}``: the exit, not its cause."""
    return err.get("type") == "SystemExit" and bool(_BARE_EXIT.match(str(err.get("message") or "")))


def read_lines(path: Path, limit: int = 20000) -> list[str]:
    """The last `limit` lines of a text file ([] when absent)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return lines[-limit:]


def explain(
    stderr: list[str],
    stdout: list[str],
    errors: list[dict],
    fallback: str,
    *,
    ended_by_itself: bool = True,
) -> Failure:
    """Best cause for a failed process, from its streams and `error` events.

    In order: the last Python traceback, pip/uv errors, the last `error` event, argparse's
    ``<prog>: error: <message>`` on stderr, then, for a process that ended by itself, the
    last stderr line containing ``error:``, and last the fallback (the outcome's words:
    ``exit code 1``, ``interrupted``) with the last lines of stderr. A bare exit status (a
    ``SystemExit: 2`` event, which voir logs when the script calls ``parser.error``, or
    traceback) is no cause: the argparse line, else the last stderr line containing
    ``error:``, is shown instead when there is one. Warnings are neither a cause nor an
    excerpt (`without_warnings`); a stderr of warnings only leaves the excerpt empty.
    """
    stderr = without_warnings(_clean(stderr))
    traceback = extract_traceback(stderr) or extract_traceback(stdout)
    if traceback and not _BARE_EXIT_LINE.match(traceback.line):
        return traceback
    found = extract_pip_errors(stderr) or extract_pip_errors(stdout)
    if found:
        return found
    bare_exit = traceback is not None or bool(errors and _is_bare_exit(errors[-1]))
    if not errors or bare_exit:
        found = extract_argparse_error(stderr) or (
            extract_error_line(stderr) if bare_exit else None
        )
        if found:
            return found
    if traceback:
        return traceback
    if errors:
        err = errors[-1]
        line = ": ".join(str(err[k]) for k in ("type", "message") if err.get(k)) or fallback
        trace = err.get("trace")
        excerpt = str(trace).splitlines()[-EXCERPT_LINES:] if trace else []
        return Failure(line, excerpt)
    if ended_by_itself:
        found = extract_error_line(stderr)
        if found:
            return found
    tail = [ln for ln in stderr if ln.strip()][-5:]
    return Failure(fallback, tail)
