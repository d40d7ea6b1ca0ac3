"""Fuzz of the suite loader: whatever the file says, `load_suite` returns a suite or raises
one of milabench's user errors with a one-line message; never another exception.

Two generators: YAML-ish text made of the punctuation that breaks parsers (indentation,
tags, anchors, flow collections), and structurally plausible suites built from the real
vocabulary with hostile values (NaN, huge numbers, placeholders, interpolations, nested
containers, None), sometimes split over an included second file.
Run longer with ``HYPOTHESIS_PROFILE=long python -m pytest tests/fuzz`` (see conftest).
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from fuzz_util import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from milabench.config.loader import load_suite
from milabench.errors import MilabenchError

REPO = Path(__file__).resolve().parents[2]
# Short max_duration values warn (by design); the warnings are not what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
_SYSTEM = {"arch": "cpu", "nodes": [{"name": "local", "ip": "127.0.0.1", "main": True}]}

# --- values ---------------------------------------------------------------------------
strings = st.one_of(
    st.sampled_from(
        [
            "",
            "a",
            "_t",
            "_private",
            "*",
            ".",
            "..",
            "x/y",
            "benches/a",
            "{bs}",
            "{n_worker}",
            "{",
            "}",
            "{{}}",
            "{0}",
            "{a.b}",
            "{a[0]}",
            "{!r}",
            "${.name}",
            "${..group}",
            "${system.arch}",
            "${system.nodes.0.ip}",
            "${packs.a.argv}",
            "${nope}",
            "${",
            "${}",
            "${${x}}",
            "$${x}",
            "per-gpu",
            "njobs",
            "torchrun",
            "nproc",
            "len(nodes) > 1",
            "1e999",
            "nan",
            "-inf",
            "~",
            "null",
            "!delete",
            "\x00",
            "\ud800",
            "é\u202e",
            "a\nb",
        ]
    ),
    st.text(max_size=8),
)
numbers = st.one_of(
    st.integers(-3, 3),
    st.integers(),
    st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
nested = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(strings, numbers), inner, max_size=3)
    ),
    max_leaves=10,
)
argv_values = st.one_of(st.none(), st.booleans(), numbers, strings, st.lists(scalars, max_size=3))
argv = st.one_of(
    st.dictionaries(
        st.sampled_from(["--lr", "--bs", "-x", "pos", "--a.b", "", "--n={n}"]),
        argv_values,
        max_size=4,
    ),
    st.lists(st.one_of(strings, numbers, st.none()), max_size=4),
    scalars,
)
plan = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "method": st.one_of(st.sampled_from(["per-gpu", "njobs", "nope", "torchrun"]), scalars),
            "n": st.one_of(numbers, strings, st.none()),
            "nproc": st.one_of(numbers, strings, st.none()),
        },
    ),
    scalars,
)
measure = st.one_of(
    st.dictionaries(
        st.sampled_from(
            ["warmup_min", "warmup_max", "window", "steps", "min_window", "unit", "nope"]
        ),
        scalars,
        max_size=4,
    ),
    scalars,
)


def mostly(good, bad=scalars):
    """Three times out of four a plausible value, else anything."""

    @st.composite
    def pick(draw):
        return draw(bad) if draw(st.integers(0, 3)) == 3 else draw(good)

    return pick()


names = st.sampled_from(["a", "b", "_t", "_private", "nope", "x/y"])
field_values = {
    "definition": mostly(st.sampled_from(["benches/a", "benches/{bs}", "${..group}", "/tmp"])),
    "inherits": mostly(st.one_of(names, st.lists(names, max_size=3))),
    "include": st.one_of(strings, st.lists(strings, max_size=2)),
    "matrix": mostly(
        st.dictionaries(
            st.sampled_from(["bs", "lr", "n", "name"]),
            st.one_of(st.lists(scalars, min_size=1, max_size=3), scalars),
            min_size=1,
            max_size=3,
        )
    ),
    "job": mostly(
        st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["job-{bs}", "job", "{lr}-{bs}", "{nope}", "{"]),
                "argv": argv,
                "inherits": st.sampled_from(["_t", "a"]),
                "definition": st.just("benches/a"),
            },
        )
    ),
    "argv": argv,
    "plan": mostly(
        st.fixed_dictionaries(
            {"method": st.sampled_from(["per-gpu", "njobs"])},
            optional={"n": st.integers(1, 4)},
        ),
        plan,
    ),
    "weight": mostly(st.one_of(st.integers(0, 5), st.floats(0, 10)), numbers),
    "enabled": mostly(st.booleans()),
    "tags": mostly(st.lists(st.sampled_from(["vision", "nlp", "x y", ""]), max_size=3)),
    "measure": mostly(
        st.fixed_dictionaries(
            {}, optional={"warmup_min": st.integers(0, 5), "warmup_max": st.integers(0, 50)}
        ),
        measure,
    ),
    "requires_capabilities": mostly(
        st.lists(st.sampled_from(["len(nodes) > 1", "arch == 'cuda'", "nope(", ""]), max_size=2)
    ),
    "max_duration": mostly(st.integers(1, 1000), st.one_of(numbers, strings, st.none())),
    "env": mostly(st.dictionaries(st.sampled_from(["A", "B_TOKEN", ""]), strings, max_size=3)),
    "voir": mostly(
        st.fixed_dictionaries({}, optional={"options": st.dictionaries(strings, scalars)})
    ),
    "dirs": mostly(st.dictionaries(st.sampled_from(["data", "extra", "x"]), strings)),
    "group": mostly(names),
    "install_group": mostly(names),
    "name": mostly(names),
    "num_machines": mostly(st.integers(1, 3), st.one_of(numbers, strings)),
    "nope": nested,
}


@st.composite
def entries(draw):
    keys = draw(st.lists(st.sampled_from(sorted(field_values)), unique=True, max_size=6))
    entry = {k: draw(field_values[k]) for k in keys}
    if draw(st.integers(0, 3)):
        entry.setdefault("definition", "benches/a")
    return entry


entry_names = st.sampled_from(
    ["a", "b", "_t", "_private", "_defaults", "*", "job-{bs}", "x.y", "1", "-", "a b"]
)
structured = st.dictionaries(
    entry_names, mostly(entries(), st.one_of(scalars, entries())), max_size=5
)

# --- text -----------------------------------------------------------------------------
yaml_pieces = st.sampled_from(
    list("ab_:-[]{},*&!|>'\"#%@` \n\t.$0123456789?\\")
    + [
        "!delete",
        "!!python/object:os.system",
        "!!binary",
        "!!float",
        "!!int",
        "!!set",
        "!!omap",
        "&x ",
        "*x",
        "<<: *x",
        "inherits",
        "matrix",
        "include",
        "argv",
        "plan",
        "definition",
        "\n  ",
        "\n    ",
        "\n- ",
        "${",
        "{n}",
        "---\n",
        "...\n",
        "%YAML 1.1\n",
        "\ufeff",
        "\x85",
        ": ",
        "? ",
        "1e999",
        ".nan",
        "0x",
        "0o",
    ]
)
yaml_text = st.lists(yaml_pieces, max_size=60).map("".join)


def _dump(doc) -> str:
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        return yaml.safe_dump({"a": None})


def check_load(main: str, other: str | None = None) -> None:
    """Load `main` (with `other.yaml` beside it); only a one-line user error may escape."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "suite.yaml"
        path.write_text(main, encoding="utf-8", errors="surrogatepass")
        if other is not None:
            (Path(tmp) / "other.yaml").write_text(other, encoding="utf-8", errors="surrogatepass")
        try:
            suite = load_suite(path, system=dict(_SYSTEM), base=tmp)
        except MilabenchError as err:
            message = str(err)
            assert message.strip(), f"{type(err).__name__} with an empty message"
            assert "\n" not in message.strip(), f"multi-line message: {message!r}"
            return
        for name, entry in suite.all_entries.items():
            assert entry.name == name and not name.startswith("_")
            assert isinstance(entry.raw["tags"], list) and entry.tags == tuple(entry.raw["tags"])
            # the typed entry's invariants hold for every document the loader accepts
            assert entry.num_machines >= 1 and math.isfinite(entry.weight)
            assert entry.max_duration is None or entry.max_duration > 0


@fuzz_settings(400)
@given(yaml_text)
def test_fuzz_yaml_text(text):
    check_load(text)


@fuzz_settings(400)
@given(structured)
def test_fuzz_structured_suite(doc):
    check_load(_dump(doc))


@fuzz_settings(250)
@given(structured, structured, st.sampled_from(["other.yaml", ["other.yaml"], "suite.yaml"]))
def test_fuzz_suite_with_include(doc, included, include):
    main = {"include": include, **doc}
    check_load(_dump(main), _dump(included))


@fuzz_settings(200)
@given(structured, st.integers(0, 600), yaml_pieces)
def test_fuzz_mutated_suite(doc, position, junk):
    text = _dump(doc)
    position = min(position, len(text))
    check_load(text[:position] + junk + text[position:])


# --- the command line on the nastiest examples ------------------------------------------
NASTY = {
    "tabs": "a:\n\tdefinition: x\n",
    "python_tag": "a: !!python/object/apply:os.system ['true']\n",
    "alias_loop": "a: &x\n  b: *x\n",
    "merge_key": "_t: &t {definition: benches/a}\na:\n  <<: *t\n  inherits: _t\n",
    "nan_weight": "a: {definition: benches/a, weight: .nan, max_duration: .inf}\n",
    "huge_int": "a: {definition: benches/a, weight: " + "9" * 500 + "}\n",
    "deep": "a: " + "[" * 2000 + "]" * 2000 + "\n",
    "placeholder": "a: {definition: benches/a, argv: {--x: '{nope'}, plan: {method: njobs, n: x}}\n",
    "interp_loop": "a: {definition: benches/a, x: '${.y}', y: '${.x}'}\n",
    "matrix": "m: {matrix: {bs: [1, 1]}, job: {name: m, definition: benches/a}}\n",
    "delete_top": "!delete\n",
    "surrogate": 'a: {definition: "\\ud800"}\n',
    "bom_nul": "\ufeffa: \x00\n",
    "inherits_self": "a: {inherits: a, definition: x}\n",
}


def test_cli_on_nasty_suites(tmp_path):
    for label, text in NASTY.items():
        path = tmp_path / f"{label}.yaml"
        path.write_text(text, encoding="utf-8")
        check_load(text)
        proc = subprocess.run(
            [sys.executable, "-m", "milabench", "resolve", "--config", str(path)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
            timeout=60,
        )
        assert proc.returncode in (0, 2), (label, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr, (label, proc.stderr)
        if proc.returncode == 2:
            assert len(proc.stderr.strip().splitlines()) == 1, (label, proc.stderr)
