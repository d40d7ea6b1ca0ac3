"""benchkit: the in-benchmark helper library.

Standard library only: it is made importable inside every benchmark environment without
the orchestrator's dependencies. Optional accelerations (torch events, pynvml, psutil)
are used only when the benchmark's own environment already has them.

Modules: `benchkit.channel` (data channel writer), `benchkit.options` (budget and
settings), `benchkit.timing` (`TimedIterator`), `benchkit.monitors` (background
sampling), `benchkit.instruments` (helpers for ``voirfile.py``), `benchkit.stopping`
(ending a run once its budget is spent).
"""

from benchkit.stopping import StopProgram, budget, run_main

__version__ = "0.1.0"
__all__ = ["StopProgram", "TimedIterator", "budget", "run_main"]


def __getattr__(name: str):
    # TimedIterator lives in its own module; import it only when asked for.
    if name == "TimedIterator":
        from benchkit.timing import TimedIterator

        return TimedIterator
    raise AttributeError(f"module 'benchkit' has no attribute {name!r}")
