"""Run data: the format of a run folder's `.data` files, read in one place.

The layer between the event stream (`milabench.events`: one event shape, its codec) and
everything that reads what a benchmark wrote (docs/run-data.md):

* `records`: the one decoder, event and metric record -> typed values; every event name,
  record kind and format version is known here, and an unknown kind is ignored and
  counted here only;
* `outcome`: the one success rule (a process's facts -> status; a run's counts ->
  verdict and exit code) and the early-stop rule, with `file_facts` for a run file;
* `numbers`: how numbers are printed for people (3 significant digits);
* `reader`: run folder -> `FileResult`s (the report, the store, the fleet report and
  ``run --resume`` read run folders through it); the live dashboard and the executor
  use it too, so neither needs `milabench.report`.
"""
