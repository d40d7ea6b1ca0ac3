"""Suite and system configuration: pure data in, pure data out (docs/config.md).

    from milabench.config import load_suite
    suite = load_suite("config/cpu.yaml", system=None, base="results", select=["flops"])

Submodules, one job each: `yamlio` (YAML with `!delete`), `document` (includes),
`merge`, `matrix`, `inherit`, `interpolate` (OmegaConf, imported lazily), `validate`,
`select`, `argv`, `placeholders`, `system`, `options`, `capabilities`, `safe_eval`,
`entry` (the typed `Entry` every later layer reads), `nodes` (which nodes are remote).
`load_suite` and `Suite` are imported on first use so that importing a light helper such
as `milabench.config.options` does not pull in the whole pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from milabench.config.loader import Suite, load_suite

__all__ = ["Suite", "load_suite"]


def __getattr__(name: str) -> Any:
    if name in ("load_suite", "Suite"):
        from milabench.config import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'milabench.config' has no attribute {name!r}")
