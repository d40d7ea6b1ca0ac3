"""The accelerators of the machine milabench runs on, as a configuration fact.

Detection, the back-ends and the ``MILABENCH_FAKE_GPUS`` parser are
`benchkit.accelerators` (shared with the benchmarks' monitor and the node probes); what
is milabench's is only this: a variable that cannot be read is a user's configuration
error (`ConfigError`, exit 2, one line naming the variable and its accepted form).
"""

from __future__ import annotations

from benchkit.accelerators import Accelerators, AcceleratorSettingError
from benchkit.accelerators import detect as _detect
from milabench.errors import ConfigError


def detect(*, refresh: bool = False) -> Accelerators:
    """`benchkit.accelerators.detect` (cached per process and variables), its setting
    errors raised as `ConfigError`."""
    try:
        return _detect(refresh=refresh)
    except AcceleratorSettingError as err:
        raise ConfigError(str(err)) from None
