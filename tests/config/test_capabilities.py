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


# -- what a whole suite needs of the machine (`_requires`) ----------------------------------


def write_suites(tmp_path):
    """A GPU suite (in a sub-folder, naming its CPU sibling relatively) and a suite that
    includes it and lifts its requirement."""
    folder = tmp_path / "suites"
    folder.mkdir()
    (folder / "gpu.yaml").write_text(
        "_requires:\n"
        "  accelerator:\n"
        "    check: \"arch != 'cpu'\"\n"
        "    missing: a GPU\n"
        "    instead: small.yaml\n"
        "  memory:\n"
        "    check: \"gpu['count'] >= 0\"\n"
        "    missing: nothing\n"
        "bench:\n"
        "  definition: .\n"
    )
    (folder / "small.yaml").write_text("include: gpu.yaml\n_requires: !delete\n")
    return folder


def test_a_suite_requirement_is_read_checked_and_lifted(tmp_path):
    from milabench.config import load_suite
    from milabench.config.capabilities import requirement_line, unmet_suite_requirements

    folder = write_suites(tmp_path)
    suite = load_suite(folder / "gpu.yaml", system=dict(SYSTEM, arch="cpu", gpu={"count": 0}))
    assert [r.name for r in suite.requires] == ["accelerator", "memory"]
    accelerator = suite.requires[0]
    assert accelerator.instead == folder / "small.yaml"  # relative to the file naming it
    unmet = unmet_suite_requirements(suite.requires, suite.system)
    assert unmet == [accelerator]
    assert requirement_line("gpu.yaml", unmet, suite.system) == (
        "gpu.yaml needs a GPU, which this machine lacks (arch cpu, no accelerator, 2 nodes)"
    )
    assert unmet_suite_requirements(suite.requires, SYSTEM) == []
    assert "bench" in suite.entries and "_requires" not in suite.templates  # not an entry
    assert load_suite(folder / "small.yaml", system=dict(SYSTEM, arch="cpu")).requires == ()
    # an entry records the suite the command loaded, which its hints name
    assert suite.entries["bench"].suite_file == str(folder / "gpu.yaml")


@pytest.mark.parametrize(
    "block, message",
    [
        ("_requires: [a]", "_requires: an entry must be a mapping"),  # the document says it
        ("_requires: {gpu: 1}", "_requires.gpu: expected a mapping with check"),
        ("_requires: {gpu: {check: x}}", "_requires.gpu.missing: expected a string"),
        ("_requires: {gpu: {check: x, missing: y, why: z}}", "_requires.gpu: unknown key 'why'"),
        ("_requires: {gpu: {check: 'nodes.x', missing: y}}", "_requires.gpu.check: 'nodes.x'"),
    ],
)
def test_a_wrong_suite_requirement_names_its_file(tmp_path, block, message):
    from milabench.config import load_suite
    from milabench.config.capabilities import unmet_suite_requirements

    path = tmp_path / "suite.yaml"
    path.write_text(block + "\nbench: {definition: .}\n")
    with pytest.raises(ConfigError) as info:
        unmet_suite_requirements(load_suite(path, system=dict(SYSTEM)).requires, SYSTEM)
    assert message in str(info.value) and "suite.yaml" in str(info.value)


def test_command_lines_are_whole_and_quoted(tmp_path, monkeypatch):
    from milabench.config.commands import command_line, entry_command
    from milabench.config.entry import Entry

    monkeypatch.chdir(tmp_path)
    assert command_line("run", config=tmp_path / "a b.yaml", base=tmp_path / "results") == (
        "milabench run --config 'a b.yaml'"  # the default base is left out
    )
    assert command_line(["store", "import"], base="/elsewhere", select=["x", "y"],
                        overrides=["x.argv.--n=1"], use_current_env=True) == (
        "milabench store import --select x,y --base /elsewhere --override x.argv.--n=1"
        " --use-current-env"
    )  # fmt: skip
    entry = Entry.from_mapping({"name": "bench", "suite_file": str(tmp_path / "s.yaml"),
                                "config_file": "/other.yaml", "dirs": {"base": "/b"}})  # fmt: skip
    assert entry_command("install", entry) == (
        "milabench install --select bench --config s.yaml --base /b"
    )
