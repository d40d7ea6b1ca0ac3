"""Multi-node execution: SSH, launchers, code and folder sync, node facts, preflight.

The multi-node launch commands themselves are pure data in `milabench.plan.multinode`;
this package runs them. The names of `_EXPORTS` are imported lazily (``from
milabench.remote import SSHLauncher``), so importing the package, or one of its modules
that needs no connection, does not import asyncssh.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "SSHLauncher": "milabench.remote.launcher",
    "RemoteHandle": "milabench.remote.launcher",
    "NodeLauncher": "milabench.remote.dispatch",
    "node_launcher": "milabench.remote.dispatch",
    "needs_remote": "milabench.remote.dispatch",
    "ConnectionPool": "milabench.remote.ssh",
    "shared_pool": "milabench.remote.ssh",
    "runs_locally": "milabench.config.topology",
    "sync_to_workers": "milabench.remote.sync",
    "detect_shared_base": "milabench.remote.sync",
    "docker_wrap": "milabench.remote.docker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'milabench.remote' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
