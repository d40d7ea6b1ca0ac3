"""Real inputs travel in the wheelhouse of ``milabench bundle`` and are placed, checked,
where ``benchshared.inputs.locate`` finds them on an air-gapped node, so that prepare's
``fetch`` there needs no network (milabench.envs.bundle: bundle_inputs, place_inputs)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from benchshared.inputs import MANIFEST, fetch, locate, read_manifest
from milabench.config.entry import Dirs, Entry
from milabench.envs.bundle import (
    INPUTS,
    Target,
    bundle_inputs,
    data_folders,
    entry_inputs,
    make_bundle,
    place_inputs,
    read_wheelhouse,
)
from milabench.errors import UsageError


def prepare_input(data, name: str, files: dict[str, bytes], revision: str = "c0ffee" * 6 + "ab"):
    """An input folder as `fetch` leaves it (files, hub metadata folder, manifest last)."""
    folder = data / "inputs" / name
    for rel, content in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(content)
    cache = folder / ".cache" / "huggingface" / "download"
    cache.mkdir(parents=True)
    (cache / "x.metadata").write_text("client bookkeeping\n")
    manifest = {
        "name": name,
        "source": f"hf://models/test/{name}",
        "revision": revision,
        "files": {
            rel: {"sha256": hashlib.sha256(c).hexdigest(), "size": len(c)}
            for rel, c in files.items()
        },
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


TOKENIZER = {"tokenizer.json": b'{"model": {}}\n', "tokenizer.model": b"\x0a\x03<s>" * 9}
WIKITEXT = {"wikitext-103-v1/test-00000-of-00001.parquet": b"PAR1 tiny PAR1"}


@pytest.fixture
def bundled(tmp_path):
    """A wheelhouse (no wheels) carrying two of llama's three inputs."""
    here = tmp_path / "connected" / "data"
    prepare_input(here, "llama2-tokenizer", TOKENIZER)
    prepare_input(here, "wikitext-103", WIKITEXT)
    entries = [Entry(name="llama", dirs=Dirs(data=here))]
    names = entry_inputs(entries)
    assert names == ["llama2-7b-chat", "llama2-tokenizer", "wikitext-103"]

    output = tmp_path / "wheelhouse"
    said: list[str] = []
    record, missing = bundle_inputs(output, names, data_folders(entries), say=said.append)
    assert missing == ["llama2-7b-chat"]
    results, _, manifest = make_bundle(
        [], {}, output, tmp_path / "runs", Target.parse(None, None),
        with_milabench=False, real_inputs=record, say=said.append,
    )  # fmt: skip
    assert manifest is not None and all(r.ok for r in results)
    return output


def test_the_wheelhouse_carries_the_prepared_inputs(bundled):
    house = read_wheelhouse(bundled)
    carried = house.manifest["inputs"]
    assert sorted(carried) == ["llama2-tokenizer", "wikitext-103"]
    assert carried["wikitext-103"] == {
        "source": "hf://models/test/wikitext-103",
        "revision": "c0ffee" * 6 + "ab",
        "files": 1,
        "size": len(WIKITEXT["wikitext-103-v1/test-00000-of-00001.parquet"]),
    }
    folder = bundled / INPUTS / "llama2-tokenizer"
    assert locate("llama2-tokenizer", bundled / INPUTS) == folder
    assert not (folder / ".cache").exists()  # only the files the manifest lists


def test_a_second_bundle_keeps_what_is_unchanged(bundled, tmp_path):
    copied = bundled / INPUTS / "wikitext-103" / "wikitext-103-v1" / "test-00000-of-00001.parquet"
    before = copied.stat().st_ino
    said: list[str] = []
    record, _ = bundle_inputs(
        bundled, ["wikitext-103"], [tmp_path / "connected" / "data"], say=said.append
    )
    assert said == [] and copied.stat().st_ino == before and "wikitext-103" in record


def test_the_node_gets_the_inputs_where_locate_and_fetch_find_them(bundled, tmp_path, monkeypatch):
    node_data = tmp_path / "node" / "data"
    said: list[str] = []
    placed = place_inputs(bundled, [node_data], say=said.append)
    assert sorted(placed) == ["llama2-tokenizer", "wikitext-103"]
    root = node_data / "inputs"
    for name, files in (("llama2-tokenizer", TOKENIZER), ("wikitext-103", WIKITEXT)):
        folder = locate(name, root)
        assert folder == root / name
        for rel, content in files.items():
            assert (folder / rel).read_bytes() == content
        assert read_manifest(folder) == read_manifest(bundled / INPUTS / name)

    # prepare on the node: no network, the bundled inputs found, one line for the other
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = io.StringIO()
    found = fetch(
        ["llama2-7b-chat", "llama2-tokenizer", "wikitext-103"], entry="llama", root=root, err=err
    )
    assert found == {
        "llama2-7b-chat": None,
        "llama2-tokenizer": root / "llama2-tokenizer",
        "wikitext-103": root / "wikitext-103",
    }
    assert len(err.getvalue().splitlines()) == 1
    assert "input llama2-7b-chat for llama unavailable: offline" in err.getvalue()

    # placing again changes nothing
    assert place_inputs(bundled, [node_data], say=said.append) == []


def test_a_damaged_bundled_input_is_refused_and_nothing_of_it_placed(bundled, tmp_path):
    damaged = bundled / INPUTS / "llama2-tokenizer" / "tokenizer.model"
    os.chmod(damaged, 0o644)
    damaged.write_bytes(b"truncated")
    node_data = tmp_path / "node" / "data"
    with pytest.raises(
        UsageError, match=r"tokenizer\.model: bundled input llama2-tokenizer is damaged"
    ):
        place_inputs(bundled, [node_data], ["llama2-tokenizer"])
    assert locate("llama2-tokenizer", node_data / "inputs") is None


def test_inputs_can_be_selected_or_left_out(bundled, tmp_path):
    node_data = tmp_path / "node" / "data"
    assert place_inputs(bundled, [node_data], ["wikitext-103"], say=lambda _: None) == [
        "wikitext-103"
    ]
    assert locate("llama2-tokenizer", node_data / "inputs") is None
    assert place_inputs(bundled, [node_data], [], say=lambda _: None) == []


def test_the_bundle_command_refuses_unknown_or_contradictory_input_options(tmp_path):
    from clirun import milabench

    config = str(Path(__file__).resolve().parents[2] / "config" / "standard.yaml")
    common = ["bundle", "-o", str(tmp_path / "wh"), "--config", config, "--base", str(tmp_path)]
    done = milabench(*common, "--select", "llama", "--inputs", "llama2-tokenizer,nosuch")
    assert done.returncode == 2
    assert "milabench: error: --inputs: nosuch not in the catalogue (known: " in done.stderr
    done = milabench(*common, "--no-inputs", "--inputs", "wikitext-103")
    assert done.returncode == 2
    assert "--inputs and --no-inputs contradict each other" in done.stderr
    assert not (tmp_path / "wh" / "manifest.json").exists()


def test_install_offline_places_the_inputs_its_entries_read(bundled, tmp_path):
    from milabench.envs.bundle import install_offline
    from milabench.envs.groups import InstallGroup

    node_data = tmp_path / "node" / "data"
    group = InstallGroup(
        name="current", venv=tmp_path / "venv", variant="cpu", arch="cpu",
        entries=[Entry(name="llama", dirs=Dirs(data=node_data))], use_current_env=True,
    )  # fmt: skip
    said: list[str] = []
    install_offline([group], {}, tmp_path / "runs", bundled, say=said.append)
    for name in ("llama2-tokenizer", "wikitext-103"):
        assert locate(name, node_data / "inputs") == node_data / "inputs" / name
        assert f"[inputs] {name} (c0ffee" in "\n".join(said)
