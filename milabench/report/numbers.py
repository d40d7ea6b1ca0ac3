"""Kept for the call sites that import the formatting from here: number formatting is
`milabench.rundata.numbers` (docs/architecture.md)."""

from milabench.rundata.numbers import (
    MISSING,
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    fmt_seconds,
    fmt_sig,
)

__all__ = ["MISSING", "fmt_bytes", "fmt_duration", "fmt_pct", "fmt_seconds", "fmt_sig"]
