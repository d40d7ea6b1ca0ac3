"""Starting processes and turning their output into events (asyncio).

`runner.run_specs` runs the processes of one benchmark concurrently (timeouts, early
stop, interruption, cleanup; `run_specs_sync` for callers without an event loop);
`launcher` starts them (`LocalLauncher`: own session, data pipe via ``DATA_FD``);
`cleanup` kills every process a benchmark started; `suite` runs a whole suite;
`session` is one `milabench run`. Sinks get ``on_event(tag, event)`` and may define
``on_events(tag, events)`` to receive a chunk at once; event keys starting with ``_``
are transport hints, not part of the event (``_json``: a ``data`` record's validated
JSON text, written as is). Each module: docs/architecture.md "Execution".
"""
