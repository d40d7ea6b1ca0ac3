"""requires_capabilities with the restricted evaluator."""

from __future__ import annotations

import pytest

from milabench.config.capabilities import unmet_requirement
from milabench.errors import ConfigError

SYSTEM = {
    "arch": "cuda",
    "nodes": [{"name": "a"}, {"name": "b"}],
    "gpu": {"count": 8, "capacity": "81920 MiB"},
    "cpu": {"count": 64},
    "options": {},
}


def entry(*reqs):
    return {"name": "bench", "config_file": "suite.yaml", "requires_capabilities": list(reqs)}


def test_all_met():
    assert unmet_requirement(entry("len(nodes) >= 2", "gpu['count'] > 1"), SYSTEM) is None
    assert unmet_requirement({"name": "x"}, SYSTEM) is None
    assert (
        unmet_requirement(entry("arch in ['cuda', 'rocm'] and not cpu['count'] < 8"), SYSTEM)
        is None
    )
    assert unmet_requirement(entry("system['arch'] == 'cuda'"), SYSTEM) is None


def test_first_failure_is_returned():
    reqs = entry("gpu['count'] >= 1", "len(nodes) >= 4", "arch == 'hpu'")
    assert unmet_requirement(reqs, SYSTEM) == "len(nodes) >= 4"


def test_single_string_counts_as_one():
    assert (
        unmet_requirement({"name": "x", "requires_capabilities": "arch == 'xpu'"}, SYSTEM)
        == "arch == 'xpu'"
    )


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('true')",
        "nodes.__class__",
        "gpu.get('count')",
        "[x for x in nodes]",
        "len(nodes) >=",
        "gpu['nope'] > 1",
        "open('/etc/passwd')",
    ],
)
def test_bad_expression_names_the_entry(expr):
    with pytest.raises(ConfigError) as info:
        unmet_requirement(entry(expr), SYSTEM)
    assert str(info.value).startswith("suite.yaml: bench.requires_capabilities: ")
