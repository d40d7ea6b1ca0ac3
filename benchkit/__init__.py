"""benchkit: the in-benchmark helper library.

Standard library only: it is made importable inside every benchmark environment without
the orchestrator's dependencies. Optional accelerations (torch events, pynvml, psutil)
are used only when the benchmark's own environment already has them.
"""

__version__ = "0.1.0"
