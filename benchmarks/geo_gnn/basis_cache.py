"""DimeNet's symbolic bases, computed once per machine.

torch_geometric's ``DimeNet.__init__`` derives its spherical Bessel and spherical
harmonic bases with sympy (``dimenet_utils.bessel_basis`` and ``real_sph_harm``, each term
put through ``sympy.simplify``): about 25 s of one CPU core for upstream's 7 x 6 basis,
paid by every process that builds the model (the run, its memory check, each test). The
result depends only on the two sizes and on the sympy and torch_geometric versions, so
`cache_bases` keeps it in ``$XDG_CACHE_HOME/milabench/dimenet`` (``~/.cache`` by default;
milabench points ``XDG_CACHE_HOME`` at the base's ``cache/``) and later builds read the
same expressions back: the model, its numbers and the measured step are unchanged.

A file is written whole (a temporary name, then renamed), so concurrent processes never
read half of one; an unreadable file is computed again.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_folder() -> Path:
    """Where the bases are kept."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "milabench" / "dimenet"


def _versions() -> str:
    import sympy
    import torch_geometric

    return f"sympy{sympy.__version__}-pyg{torch_geometric.__version__}"


def _cached(name: str, compute: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compute)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = "-".join([name, *map(str, args), *(f"{k}={v}" for k, v in sorted(kwargs.items()))])
        path = cache_folder() / f"{key}-{_versions()}.pickle"
        try:
            with open(path, "rb") as handle:
                return pickle.load(handle)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ValueError):
            pass
        value = compute(*args, **kwargs)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with open(partial, "wb") as handle:
                pickle.dump(value, handle)
            os.replace(partial, path)
        except OSError:
            pass  # a read-only cache costs time, not results
        return value

    wrapper.__wrapped_compute__ = compute  # type: ignore[attr-defined]
    return wrapper


def cache_bases() -> None:
    """Make ``dimenet_utils.bessel_basis`` and ``real_sph_harm`` read and fill the cache
    (``DimeNet`` imports them from that module when it is built). Idempotent."""
    from torch_geometric.nn.models import dimenet_utils

    for name in ("bessel_basis", "real_sph_harm"):
        current = getattr(dimenet_utils, name)
        if not hasattr(current, "__wrapped_compute__"):
            setattr(dimenet_utils, name, _cached(name, current))
