"""Can this interpreter run milabench? The import check fleet and preflight make on a
node's Python before anything is copied.

`check_modules` imports each of `NODE_MODULES` and one of `NODE_INSTALLERS`, and gives
one `Finding` naming the first missing module, its distribution and how to point at
another interpreter. Standard library only: it is sent to nodes inline.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from milabench.doctor.findings import FAIL, OK, Finding

# What `python -m milabench install|prepare|run` imports on a node (import name, the
# distribution that provides it). `uv` or `virtualenv` is enough for install (uv is the
# fast path, virtualenv + pip the fallback). asyncssh is needed only on the machine that
# reaches other nodes; voir, ptera and nvidia-ml-py only inside benchmark environments.
NODE_MODULES = (
    ("yaml", "PyYAML"),
    ("omegaconf", "omegaconf"),
    ("psutil", "psutil"),
    ("blessed", "blessed"),
)
NODE_INSTALLERS = (("uv", "uv"), ("virtualenv", "virtualenv"))
# How the error tells a fleet or preflight user to name another interpreter.
PYTHON_HINT = "--node-python PATH or the fleet.python option"


def check_modules(
    modules: Sequence[tuple[str, str]] = NODE_MODULES,
    installers: Sequence[tuple[str, str]] = NODE_INSTALLERS,
    *,
    python_hint: str = PYTHON_HINT,
    importer: Callable[[str], Any] | None = None,
) -> Finding:
    """Can this interpreter import what milabench needs? One finding naming the first
    missing module, its distribution, and how to point at another Python."""
    import importlib

    load = importer or importlib.import_module
    missing: list[tuple[str, str, str]] = []
    for module, dist in modules:
        try:
            load(module)
        except Exception as err:  # noqa: BLE001 - an import that raises is as bad as absent
            missing.append((module, dist, f"{type(err).__name__}: {err}"))
    have_installer = False
    for module, _ in installers:
        try:
            load(module)
            have_installer = True
            break
        except Exception:  # noqa: BLE001
            continue
    exe = sys.executable or "python"
    if not have_installer and installers:
        names = " or ".join(dist for _, dist in installers)
        missing.append((names, names, "neither can be imported"))
    if not missing:
        names = ", ".join(m for m, _ in modules)
        return Finding("python_modules", "python", OK, f"{exe} imports {names}", exe)
    module, dist, detail = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    dists = " ".join(sorted({d for _, d, _ in missing}))
    return Finding(
        "python_modules",
        "python",
        FAIL,
        f"{exe} cannot import {module} ({detail}){more}, which milabench needs: "
        f"pip install {dists} for it, or point at another interpreter with {python_hint}",
        [m for m, _, _ in missing],
    )
