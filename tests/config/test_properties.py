"""Property-based tests (hypothesis) of merge and matrix expansion, and a fuzz test of
load_suite: whatever the YAML, only our ConfigError may come out."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from milabench.config.loader import load_suite
from milabench.config.matrix import combinations, expand_entry
from milabench.config.merge import deep_merge, strip_markers
from milabench.config.system import load_system
from milabench.config.yamlio import DELETE
from milabench.errors import ConfigError

keys = st.sampled_from(["a", "b", "c", "d", "--x", "argv", "tags"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text("xyz", max_size=3))
plain = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
plain_dicts = st.dictionaries(keys, plain, max_size=5)


@settings(max_examples=60)
@given(plain_dicts)
def test_merge_identity(a):
    assert deep_merge(a, {}) == a
    assert deep_merge({}, a) == a


@settings(max_examples=60)
@given(plain_dicts, plain_dicts, plain_dicts)
def test_merge_is_associative(a, b, c):
    # Holds as long as no layer replaces a mapping by a non-mapping at the same key
    # ({"d": {...}} then {"d": None} then {"d": {}} depends on grouping, by design).
    assume(_shapes_agree(a, b) and _shapes_agree(b, c) and _shapes_agree(a, c))
    assert deep_merge(deep_merge(a, b), c) == deep_merge(a, deep_merge(b, c))


def _shapes_agree(x: dict, y: dict) -> bool:
    for key in x.keys() & y.keys():
        dx, dy = isinstance(x[key], dict), isinstance(y[key], dict)
        if dx != dy or (dx and not _shapes_agree(x[key], y[key])):
            return False
    return True


@settings(max_examples=60)
@given(plain_dicts, plain_dicts)
def test_merge_keys_and_values(a, b):
    out = deep_merge(a, b)
    assert list(out) == list(a) + [k for k in b if k not in a]  # first-seen order
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(a.get(key), dict):
            assert deep_merge(a[key], value) == out[key]
        else:
            assert out[key] == value  # scalars and lists replace
    for key in a:
        if key not in b:
            assert out[key] == a[key]


@settings(max_examples=60)
@given(plain_dicts, plain_dicts)
def test_merge_never_aliases_its_inputs(a, b):
    before_a, before_b = repr(a), repr(b)
    out = deep_merge(a, b)

    def scribble(node):
        if isinstance(node, dict):
            for v in node.values():
                scribble(v)
            node["__mutated__"] = 1
        elif isinstance(node, list):
            for v in node:
                scribble(v)
            node.append("__mutated__")

    scribble(out)
    assert repr(a) == before_a and repr(b) == before_b


@settings(max_examples=60)
@given(plain_dicts, st.lists(keys, max_size=3))
def test_delete_removes_keys(a, doomed):
    out = strip_markers(deep_merge(a, {k: DELETE for k in doomed}))
    assert set(out) == set(a) - set(doomed)


@given(st.lists(scalars, max_size=4), st.lists(scalars, max_size=4), st.lists(scalars, max_size=4))
def test_append_concatenates(base, more, again):
    merged = deep_merge({"k": base}, {"k": {"append": more}})
    assert merged["k"] == base + more
    # Markers that find nothing below them wait for a later merge (inheritance).
    pending = deep_merge({}, {"k": {"append": more}})
    pending = deep_merge(pending, {"k": {"append": again}})
    assert deep_merge({"k": base}, pending)["k"] == base + more + again
    assert strip_markers(pending)["k"] == more + again


matrices = st.dictionaries(
    st.sampled_from(["bs", "lr", "opt", "n"]),
    st.one_of(
        st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=3,
)


@given(matrices)
def test_matrix_expansion(matrix):
    name = "job" + "".join(f"-{{{k}}}" for k in matrix)
    entry = {
        "matrix": matrix,
        "weight": 2,
        "job": {
            "name": name,
            "argv": {f"--{k}": f"{{{k}}}" for k in matrix},
            "note": "keeps {other}",
        },
    }
    out = expand_entry("m", entry, "suite.yaml")
    sizes = [len(v) if isinstance(v, list) else 1 for v in matrix.values()]
    expected = 1
    for size in sizes:
        expected *= size
    assert len(out) == expected == len(combinations(matrix))
    seen = set()
    for job_name, job in out.items():
        values = job["matrix"]
        assert job_name == "job" + "".join(f"-{values[k]}" for k in matrix)
        assert job["argv"] == {f"--{k}": values[k] for k in matrix}
        assert job["note"] == "keeps {other}" and job["weight"] == 2
        seen.add(tuple(values.items()))
    assert len(seen) == expected


@given(matrices)
def test_matrix_name_without_every_key_collides(matrix):
    sizes = {k: len(v) if isinstance(v, list) else 1 for k, v in matrix.items()}
    varying = [k for k, s in sizes.items() if s > 1]
    if not varying:
        return
    entry = {"matrix": matrix, "job": {"name": "fixed"}}
    try:
        expand_entry("m", entry, "suite.yaml")
    except ConfigError as err:
        assert str(err).startswith("suite.yaml: m.job.name: two generated entries")
    else:
        raise AssertionError("duplicate names were accepted")


# --- fuzz ----------------------------------------------------------------------------
# CONFIG_FUZZ_EXAMPLES=5000 runs a long fuzzing session; CI keeps it short.
FUZZ = int(os.environ.get("CONFIG_FUZZ_EXAMPLES", "120"))

_SYSTEM = None


def _system():
    global _SYSTEM
    if _SYSTEM is None:
        _SYSTEM = load_system(None)
    return _SYSTEM


vocab = st.sampled_from(
    [
        "inherits",
        "matrix",
        "job",
        "argv",
        "tags",
        "definition",
        "plan",
        "method",
        "enabled",
        "weight",
        "include",
        "name",
        "n",
        "num_machines",
        "dirs",
        "requires_capabilities",
        "max_duration",
        "group",
        "install_group",
        "append",
        "--x",
        "-",
        "*",
        "_defaults",
        "_t",
        "a",
        "b",
        "env",
        "voir",
    ]
)
values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.floats(allow_nan=True),
        st.sampled_from(
            [
                "a",
                "b",
                "_t",
                ".",
                "per-gpu",
                "njobs",
                "torchrun",
                "x/y",
                "${.name}",
                "${..group}",
                "${system.arch}",
                "${nope}",
                "${",
                "{a}",
                "{n_worker}",
                "len(nodes) > 1",
                "",
                "*",
            ]
        ),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(vocab, inner, max_size=4)),
    max_leaves=15,
)
documents = st.dictionaries(vocab, values, max_size=6)


def _load_text(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "suite.yaml"
        path.write_text(text)
        try:
            suite = load_suite(path, system=_system(), base=tmp)
        except ConfigError as err:
            message = str(err)
            assert message and "\n" not in message.strip()
            return
        for entry in suite.all_entries.values():
            assert entry.name and isinstance(entry.tags, tuple)


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
@example({"inherits": {"definition": "a"}})  # loads: an entry named "inherits"
def test_fuzz_structured_documents(doc):
    _load_text(yaml.safe_dump(doc, sort_keys=False))


yaml_chars = st.sampled_from(
    list("ab_:-[]{},*&!|>'\"#%@` \n\t.$0123456789")
    + ["!delete", "inherits", "matrix", "job", "include", "\n  ", "${", "{n}"]
)


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(yaml_chars, max_size=60).map("".join))
def test_fuzz_random_text(text):
    _load_text(text)


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    documents,
    st.integers(0, 400),
    st.sampled_from(["", ":", "[", "]", "{", "- ", "&a", "*a", "!delete ", "\t", "'"]),
)
def test_fuzz_mutated_documents(doc, position, junk):
    text = yaml.safe_dump(doc, sort_keys=False)
    position = min(position, len(text))
    _load_text(text[:position] + junk + text[position:])


system_vocab = st.sampled_from(
    [
        "system",
        "nodes",
        "name",
        "ip",
        "user",
        "port",
        "sshport",
        "main",
        "arch",
        "gpu",
        "count",
        "capacity",
        "cpu",
        "options",
        "sshkey",
        "docker_image",
    ]
)
system_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-2, 70000),
        st.sampled_from(
            ["a", "127.0.0.1", "10.0.0.1", "cuda", "80 GiB", "${system.arch}", "${nope}", ""]
        ),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(system_vocab, inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=FUZZ, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(system_vocab, system_values, max_size=5))
def test_fuzz_system_files(doc):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "system.yaml"
        path.write_text(yaml.safe_dump(doc))
        try:
            system = load_system(path)
        except ConfigError as err:
            assert "\n" not in str(err).strip()
            return
        assert sum(1 for n in system["nodes"] if n["main"]) == 1
        assert isinstance(system["gpu"]["count"], int)
