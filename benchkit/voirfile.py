"""Alias of `benchkit.instruments` (the name docs/architecture.md uses for the voirfile
helpers)."""

from benchkit.instruments import (  # noqa: F401
    Config,
    Session,
    benchkit_instrument,
    early_stop,
    open_writer,
    probe_loss,
    resolve_options,
    start_monitor,
    wrap_loader,
)
