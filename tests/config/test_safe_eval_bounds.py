"""safe_eval refuses expressions whose result would be huge, without building it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from milabench.config.capabilities import unmet_requirement
from milabench.errors import ConfigError

HUGE = [
    "[0]*10**12",
    "10**12*[0]",
    "'x'*10**10",
    "10**10**10",
    "(2**4000)*(2**4000)",
    "'%0999999999d' % 1 == ''",
    "len([0]*10**9) > 0",
    "(10**256)**256",
    "[1, 2]*5001",
]


def entry(text):
    return {"name": "bench", "config_file": "suite.yaml", "requires_capabilities": [text]}


@pytest.mark.parametrize("text", HUGE)
def test_huge_results_are_a_config_error_naming_the_expression(text):
    with pytest.raises(ConfigError) as info:
        unmet_requirement(entry(text), {"arch": "cpu", "nodes": []})
    assert repr(text) in str(info.value)


def test_huge_results_are_refused_quickly():
    """All of them in a child process that must be done well within the timeout."""
    code = textwrap.dedent(
        f"""
        from milabench.config.capabilities import unmet_requirement
        from milabench.errors import ConfigError
        for text in {HUGE!r}:
            try:
                unmet_requirement({{"name": "b", "requires_capabilities": [text]}}, {{}})
            except ConfigError:
                continue
            raise SystemExit("accepted: " + text)
        print("all refused")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=True
    )
    assert "all refused" in out.stdout


def test_small_results_still_work():
    system = {"arch": "cpu", "nodes": [{"name": "a"}]}
    ok = ["[0]*3 == [0, 0, 0]", "2**10 == 1024", "len(nodes)*100 >= 100", "[1]+[2] == [1, 2]"]
    for text in ok:
        assert unmet_requirement(entry(text), system) is None
