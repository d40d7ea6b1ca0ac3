"""``MILABENCH_INPUTS_CATALOGUE``: a site's own catalogue records (a mirror that re-hosts
upstream's inputs at other revisions) in place of, or besides, the built-in ones.

Checked: without the variable the built-in catalogue; a record for a catalogue name
replaces only the fields it gives; new hub and URL records with their defaults; entries'
input lists; `fetch` from a loopback hub verifying the override's revision and sha256
pins (a wrong pin deletes the file); the file reread when it changes; and each kind of
bad file as one `CatalogueError` naming the file and the key.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hubserver import HubServer, json_bytes

from benchshared import catalogue, inputs
from benchshared.catalogue import CatalogueError, HubInput, UrlInput

VARIABLE = "MILABENCH_INPUTS_CATALOGUE"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write(tmp_path: Path, content: Any, name: str = "mirror.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture
def use(tmp_path, monkeypatch):
    """``use(content)``: the override file holding `content`, named by the variable."""

    def set_file(content: Any, name: str = "mirror.json") -> Path:
        path = write(tmp_path, content, name)
        monkeypatch.setenv(VARIABLE, str(path))
        return path

    return set_file


def test_without_the_variable_the_catalogue_is_the_built_in_one(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    assert catalogue.load_override() is None
    assert catalogue.get("alpaca") is catalogue.CATALOGUE["alpaca"]
    assert catalogue.inputs_for("llama") == catalogue.ENTRY_INPUTS["llama"]
    monkeypatch.setenv(VARIABLE, "  ")  # empty: none either
    assert catalogue.effective_catalogue() is catalogue.CATALOGUE


def test_a_record_replaces_only_the_fields_it_gives(use):
    pin = hashlib.sha256(b"x").hexdigest()
    use({"inputs": {"alpaca": {"revision": COMMIT, "sha256": {"data/a.parquet": pin},
                               "files": ["data/a.parquet"]}}})  # fmt: skip
    built_in, record = catalogue.CATALOGUE["alpaca"], catalogue.get("alpaca")
    assert isinstance(record, HubInput) and record is not built_in
    assert (record.revision, record.files, dict(record.sha256)) == (
        COMMIT, ("data/a.parquet",), {"data/a.parquet": pin}
    )  # fmt: skip
    assert record.pinned and record.repo_id == built_in.repo_id == "tatsu-lab/alpaca"
    assert (record.repo_type, record.licence) == ("dataset", built_in.licence)
    assert catalogue.get("wikitext-103") is catalogue.CATALOGUE["wikitext-103"]  # untouched
    assert catalogue.CATALOGUE["alpaca"].revision != COMMIT  # the built-in record is kept


def test_new_records_and_entries(use):
    use(
        {
            "inputs": {
                "site-data": {"repo_id": "site/data", "repo_type": "dataset",
                              "files": ["*.parquet"], "gated": True},
                "site-proxy": {"files": [{"url": "https://files.site/p.gz", "path": "p.gz",
                                          "md5": "0" * 32}]},
            },
            "entries": {"llama": ["site-data", "wikitext-103"], "my-entry": ["site-proxy"]},
        }
    )  # fmt: skip
    data, proxy = catalogue.get("site-data"), catalogue.get("site-proxy")
    assert isinstance(data, HubInput) and data.source == "hf://datasets/site/data"
    assert data.revision == catalogue.MAIN and data.gated and not data.pinned
    assert "accept the licence" in data.fix()
    assert isinstance(proxy, UrlInput) and proxy.source == "https://files.site/p.gz"
    assert proxy.files[0].md5 == "0" * 32 and "files.site" in proxy.fix()
    assert catalogue.inputs_for("llama") == ("site-data", "wikitext-103")
    assert catalogue.inputs_for("my-entry") == ("site-proxy",)
    assert catalogue.inputs_for("rlhf-single") == catalogue.ENTRY_INPUTS["rlhf-single"]
    with pytest.raises(KeyError, match="site-data"):  # the known names include the file's
        catalogue.get("nothing")


def test_the_file_is_read_again_when_it_changes(use):
    path = use({"inputs": {"alpaca": {"revision": COMMIT}}})
    assert catalogue.get("alpaca").revision == COMMIT
    path.write_text(json.dumps({"inputs": {"alpaca": {"revision": "f" * 40}}}))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert catalogue.get("alpaca").revision == "f" * 40


@pytest.fixture
def hub(tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "MILABENCH_HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("MILABENCH_URL_MIRROR", server.url_mirror)
        yield server


def test_fetch_follows_the_override_revision_and_pins(tmp_path, hub, use, capsys):
    """The mirror holds alpaca at its own commit with its own file: fetched and verified
    against the override's pin; the same file under a wrong pin is refused and deleted."""
    content = json_bytes([{"instruction": "Say hi.", "input": "", "output": "Hi."}])
    rel = "data/train-00000-of-00001.parquet"
    hub.add_repo("tatsu-lab/alpaca", {rel: content}, repo_type="dataset", commit=COMMIT)
    good = hashlib.sha256(content).hexdigest()
    use({"inputs": {"alpaca": {"revision": COMMIT, "files": [rel], "sha256": {rel: good}}}})
    found = inputs.fetch(["alpaca"], entry="llm-full-mp-gpus", root=tmp_path / "in")
    assert found["alpaca"] == tmp_path / "in" / "alpaca" and not capsys.readouterr().err
    manifest = inputs.read_manifest(found["alpaca"])
    assert manifest["revision"] == COMMIT
    assert manifest["files"] == {rel: {"sha256": good, "size": len(content)}}
    assert [r for r in hub.requests if f"/datasets/tatsu-lab/alpaca/resolve/{COMMIT}/" in r.path]

    use({"inputs": {"alpaca": {"revision": COMMIT, "files": [rel], "sha256": {rel: "e" * 64}}}},
        name="wrong.json")  # fmt: skip
    found = inputs.fetch(["alpaca"], entry="llm-full-mp-gpus", root=tmp_path / "other")
    (line,) = capsys.readouterr().err.splitlines()
    assert found == {"alpaca": None} and "input alpaca for llm-full-mp-gpus" in line
    assert f"{rel}: sha256 {good[:16]}" in line and "deleted" in line
    assert not (tmp_path / "other" / "alpaca" / rel).exists()


BAD = [
    ("{not json", "not JSON"),
    ([], "(top level): not an object"),
    ({"records": {}}, "records: unknown key"),
    ({"inputs": []}, "inputs: not an object"),
    ({"inputs": {"alpaca": "x"}}, "inputs.alpaca: not an object of fields"),
    ({"inputs": {"alpaca": {"revison": COMMIT}}}, "inputs.alpaca.revison: unknown field"),
    ({"inputs": {"alpaca": {"files": "a.json"}}}, "inputs.alpaca.files: not a non-empty list"),
    ({"inputs": {"alpaca": {"revision": 3}}}, "inputs.alpaca.revision: not a non-empty string"),
    ({"inputs": {"alpaca": {"gated": "no"}}}, "inputs.alpaca.gated: not true or false"),
    ({"inputs": {"alpaca": {"repo_type": "space"}}}, "inputs.alpaca.repo_type: 'space'"),
    ({"inputs": {"alpaca": {"sha256": {"a": "ABC"}}}}, "inputs.alpaca.sha256.a: not 64"),
    ({"inputs": {"alpaca": {"name": "other"}}}, "inputs.alpaca.name: 'other' differs"),
    ({"inputs": {"alpaca": {"kind": "url"}}}, "inputs.alpaca.kind: alpaca is a hub input"),
    ({"inputs": {"new": {"repo_type": "model"}}}, "inputs.new.repo_id: required"),
    ({"inputs": {"new": {"repo_id": "a/b"}}}, "inputs.new.files: required"),
    ({"inputs": {"pcqm4mv2": {"files": [{"url": "ftp://x/y", "path": "y"}]}}},
     "inputs.pcqm4mv2.files[0].url: 'ftp://x/y' is not an http(s) URL"),
    ({"inputs": {"pcqm4mv2": {"files": [{"url": "https://x/y"}]}}},
     "inputs.pcqm4mv2.files[0].path: required"),
    ({"inputs": {"pcqm4mv2": {"files": [{"url": "https://x/y", "path": "y", "crc": "1"}]}}},
     "inputs.pcqm4mv2.files[0].crc: unknown field"),
    ({"inputs": {"pcqm4mv2": {"sha256": {}}}}, "inputs.pcqm4mv2.sha256: unknown field of a url"),
    ({"inputs": {"new": {"revision": "v1"}}}, "inputs.new: a new input needs repo_id"),
    ({"entries": {"llama": "wikitext-103"}}, "entries.llama: not a list of input names"),
    ({"entries": {"llama": ["nothing"]}}, "entries.llama: no input 'nothing'"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "says"), BAD, ids=[s.split(":")[0] for _, s in BAD])
def test_a_bad_file_is_one_error_naming_the_file_and_the_key(use, content, says):
    path = use(content)
    with pytest.raises(CatalogueError) as raised:
        catalogue.get("alpaca")
    message = str(raised.value)
    assert message.startswith(f"{path} ({VARIABLE}): ") and says in message, message
    assert "\n" not in message


def test_a_missing_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(VARIABLE, str(tmp_path / "absent.json"))
    with pytest.raises(CatalogueError, match=r"absent\.json \(MILABENCH_INPUTS_CATALOGUE\): "
                       "cannot read it"):  # fmt: skip
        catalogue.inputs_for("llama")
