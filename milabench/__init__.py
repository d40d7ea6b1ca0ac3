"""milabench: a benchmark suite runner for machine-learning hardware.

This module must stay import-free (no third-party imports): the command line imports it
before deciding which command to load, and `--help` must start in well under 0.3 s.
"""

__version__ = "0.1.0"
