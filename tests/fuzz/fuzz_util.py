"""Shared hypothesis settings of the fuzz tests (imported by name: conftest puts this
folder on sys.path, since pytest runs with --import-mode=importlib)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SUPPRESS = [
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.function_scoped_fixture,
    HealthCheck.filter_too_much,
]
# ci: the same examples on every run. long: fresh random examples, ten times as many.
settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SUPPRESS
)
settings.register_profile(
    "long", derandomize=False, deadline=None, print_blob=True, suppress_health_check=_SUPPRESS
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "long"):
    PROFILE = "ci"
SCALE = float(os.environ.get("FUZZ_SCALE") or (10 if PROFILE == "long" else 1))


def fuzz_settings(examples: int) -> settings:
    """The profile's settings with ``examples`` (scaled) examples."""
    return settings(settings.get_profile(PROFILE), max_examples=max(1, int(examples * SCALE)))
