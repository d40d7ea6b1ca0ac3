"""Slurm node lists (``SLURM_JOB_NODELIST``) and the system file made from them.

Slurm writes host lists in a compressed form: comma-separated items, each a name with
bracketed ranges, e.g. ``cn-d[003-004],cn-e001``, ``node[1,3-5]`` or ``a[01-02]b[1-2]``
(several brackets give every combination, in order). A range keeps the zero padding of
its lower bound (``003-004`` gives ``003``, ``004``).
"""

from __future__ import annotations

import itertools
import os
import socket

from milabench.errors import UsageError


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"node list {text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise UsageError(f"node list {text!r}: unbalanced '['")
    items.append("".join(current))
    return [i.strip() for i in items if i.strip()]


def _expand_range(spec: str, whole: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise UsageError(f"node list {whole!r}: bad range {part!r}")
            width = len(lo)
            out += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            out.append(part)
        else:
            raise UsageError(f"node list {whole!r}: bad range item {part!r}")
    return out


def _expand_item(item: str, whole: str) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    while pos < len(item):
        start = item.find("[", pos)
        if start < 0:
            pieces.append([item[pos:]])
            break
        end = item.find("]", start)
        if end < 0:
            raise UsageError(f"node list {whole!r}: unbalanced '['")
        if start > pos:
            pieces.append([item[pos:start]])
        pieces.append(_expand_range(item[start + 1 : end], whole))
        pos = end + 1
    return ["".join(combo) for combo in itertools.product(*pieces)]


def expand_nodelist(text: str) -> list[str]:
    """Every host name of a compressed Slurm node list, in order, without duplicates."""
    names: list[str] = []
    for item in _split_top(text.strip()):
        for name in _expand_item(item, text):
            if name not in names:
                names.append(name)
    return names


def _resolve(name: str, resolve: bool) -> str:
    if not resolve:
        return name
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def system_from_nodelist(
    nodelist: str,
    *,
    user: str | None = None,
    port: int = 22,
    resolve: bool = False,
    arch: str | None = None,
    sshkey: str | None = None,
) -> dict:
    """``{"system": {...}}`` for the hosts of ``nodelist``; the first host is main."""
    names = expand_nodelist(nodelist)
    if not names:
        raise UsageError("SLURM_JOB_NODELIST is empty: run inside a Slurm allocation")
    user = user or os.environ.get("USER") or "root"
    nodes = [
        {
            "name": name,
            "ip": _resolve(name, resolve),
            "port": port,
            "user": user,
            "main": i == 0,
        }
        for i, name in enumerate(names)
    ]
    system: dict = {"nodes": nodes}
    if arch:
        system["arch"] = arch
    if sshkey:
        system["sshkey"] = sshkey
    return {"system": system}
