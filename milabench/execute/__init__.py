"""Starting processes and turning their output into events (asyncio).

* `milabench.execute.runner`: ``run_specs(specs, sinks, ...) -> list[Outcome]`` runs the
  processes of one benchmark concurrently, with timeouts, early stop, interruption and
  cleanup; ``run_specs_sync`` for callers without an event loop.
* `milabench.execute.launcher`: the `Launcher`/`ProcessHandle` interface and
  `LocalLauncher` (own session per process, data channel pipe via ``DATA_FD``).
* `milabench.execute.cleanup`: finding and killing every process a benchmark started.
* `milabench.execute.suite`: a whole suite (skips, missing environments, repeat, resume).
* `milabench.execute.session`: one `milabench run` (sinks, signals, report, exit code).

Sinks get ``on_event(tag, event)``; a sink may also define ``on_events(tag, events)``
to receive a chunk of events at once (the data channel delivers >100k records/s). Event
keys starting with ``_`` are transport hints, not part of the event: ``_json`` on a
``data`` event is the record's original (strict, validated) JSON text, so the run-file
sink can write it without encoding it again.
"""
