"""`milabench fleet`: the single-node suite on every node of a system at once.

Cluster admins receiving a rack want to know which node is slow or broken, not one
score. A fleet run treats every node of the system file as its own single-node machine:

* `nodeplan` (pure data): which entries run (single-node ones), where each node keeps its
  own base folder, the argv of each phase, the one-node system file each node gets;
* `phases`: one phase command (``milabench install|prepare|run``) on one node through the
  executor's launchers (local, or SSH with its remote process group), its output in log
  files, a stop that reaches every process it started, and the "lost" diagnosis;
* `collect`: a node's run folder copied back to the main node (local copy, rsync or SFTP);
* `folder`: the fleet folder and its ``fleet.json`` (the contract with `report`), always
  rewritten atomically, and which fleet run a command means (`find_fleet_run`);
* `orchestrate`: the pipeline (reach, push code, install, prepare with bounded
  concurrency; then every run at the same time; then collect), signals included.

The fleet report reads a fleet folder back: `model` (its records, flag kinds,
thresholds, versions: plain data), `report` (`load_fleet`, the rules, baselines) and
`render` (text, markdown, json, html); the renderers import only the records. The
command lines (`milabench.cli.fleet`, `milabench.cli.fleet_report`) parse and call.
"""
