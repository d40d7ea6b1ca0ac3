"""`milabench fleet`: the single-node suite on every node of a system at once.

A fleet run treats every node of the system file as its own single-node machine:
`nodeplan` says what each node runs (pure data), `phases` runs one phase on one node
through the executor's launchers, `collect` copies a node's run folder back, `folder`
writes ``fleet.json`` atomically and finds fleet runs (`find_fleet_run`), `orchestrate`
is the pipeline. The fleet report reads a fleet folder back: `model` (the records, plain
data), `report` (`load_fleet`, the rules, baselines) and `render` (the formats, importing
only the records). The command lines (`milabench.cli.fleet`, `milabench.cli.fleet_report`)
parse and call. Each module: docs/architecture.md "Fleet"; running a fleet:
docs/multinode.md "Validate a new rack"; the report: docs/fleet.md.
"""
