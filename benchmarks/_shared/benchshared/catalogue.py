"""The catalogue of upstream milabench's real inputs: one record per data set, tokenizer,
weights or file that upstream's entries fetch, with the facts read from upstream's code.

Two kinds:

* `HubInput`: files of a Hugging Face Hub repository at a revision. `files` holds exact
  paths or `fnmatch` patterns (``"*.safetensors"``); a pattern is resolved against the
  repository's listing at the revision when fetched. Only what the benchmark reads is
  listed, never a whole repository.
* `UrlInput`: plain files from other hosts (`UrlFile`: URL, path in the input folder,
  optional sha256 / md5).

`CATALOGUE` maps each name to its record; `ENTRY_INPUTS` maps each upstream entry to the
names it needs; `inputs_for(entry)` and `get(name)` read them, with the records of the file
``MILABENCH_INPUTS_CATALOGUE`` names (a site's mirror that re-hosts inputs at other
revisions; `load_override`) in place of, or besides, the built-in ones. Standard library
only. docs/inputs.md lists the same facts, with the sources of every pin and the known gaps.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

MAIN = "main"
"""The revision of an input not pinned to a commit (a known gap, docs/inputs.md)."""

GFLOWNET_PROXY_COMMIT = "45dd2f90dbd4f433718eddde573010b225585a4c"
"""The commit of GFNOrg/gflownet that wrote the SEH proxy's weights (2021-06-07)."""


@dataclass(frozen=True)
class HubInput:
    """Files of one Hugging Face Hub repository.

    `revision` is a 40-hex commit when it could be established from a citable source
    (`revision_source` says which), else `MAIN`. `sha256` pins some files' hashes; other
    LFS files are checked against the hub's own sha256 (ETag) at fetch time. `gated`
    repositories need an accepted licence and ``HF_TOKEN``.
    """

    name: str
    repo_id: str
    repo_type: Literal["model", "dataset"]
    files: tuple[str, ...]
    revision: str
    revision_source: str
    gated: bool
    licence: str
    licence_page: str
    upstream: str
    sha256: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))

    kind = "hub"

    @property
    def source(self) -> str:
        """``hf://<models|datasets>/<repo_id>`` (the manifest's ``source``)."""
        return f"hf://{self.repo_type}s/{self.repo_id}"

    @property
    def page(self) -> str:
        """The repository's page on huggingface.co."""
        prefix = "datasets/" if self.repo_type == "dataset" else ""
        return f"https://huggingface.co/{prefix}{self.repo_id}"

    @property
    def pinned(self) -> bool:
        """True when `revision` is a commit (not a branch)."""
        return _is_commit(self.revision)

    def fix(self) -> str:
        """One phrase saying what a person does to make the input available."""
        if self.gated:
            return f"accept the licence at {self.page} and set HF_TOKEN (then milabench prepare)"
        return f"let milabench prepare reach {self.page} (or set HF_ENDPOINT to a mirror)"


@dataclass(frozen=True)
class UrlFile:
    """One file of a `UrlInput`: where it is served, where it goes in the input folder,
    and the checksums known for it (sha256 preferred; md5 when only that is published)."""

    url: str
    path: str
    sha256: str | None = None
    md5: str | None = None


@dataclass(frozen=True)
class UrlInput:
    """Plain files served over HTTP(S) by a host other than the hub."""

    name: str
    files: tuple[UrlFile, ...]
    revision: str
    revision_source: str
    licence: str
    licence_page: str
    upstream: str

    kind = "url"
    gated = False

    @property
    def source(self) -> str:
        """The first file's URL (the manifest's ``source``)."""
        return self.files[0].url

    def fix(self) -> str:
        """One phrase saying what a person does to make the input available."""
        hosts = sorted({f.url.split("/")[2] for f in self.files})
        return f"let milabench prepare reach {', '.join(hosts)} (or bundle the input)"


Input = HubInput | UrlInput


def _is_commit(revision: str) -> bool:
    return len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)


def _pins(**files: str) -> MappingProxyType[str, str]:
    return MappingProxyType(dict(files))


_LLAMA31 = "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/LICENSE"
_LLAMA31_70 = "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/LICENSE"
_CACHE_PATH = "a Hugging Face cache snapshot path in public code (docs/inputs.md)"

_INPUTS: tuple[Input, ...] = (
    # -- llm-*: torchtune recipes (benchmarks/llm/prepare.py: `tune download <repo_id>`
    #    ignoring "*consolidated.*.pth" since the entries pass safetensors=true).
    HubInput(
        name="llama3.1-8b",
        repo_id="meta-llama/Llama-3.1-8B",
        repo_type="model",
        files=(
            "config.json",
            "generation_config.json",
            "model.safetensors.index.json",
            "model-0000?-of-00004.safetensors",
        ),
        revision="d04e592bb4f6aa9cfee91e2e20afa771667e1d4b",
        revision_source=_CACHE_PATH,
        gated=True,
        licence="Llama 3.1 Community License",
        licence_page=_LLAMA31,
        upstream="llm-lora-* weights (FullModelHFCheckpointer, 4 safetensors shards)",
    ),
    HubInput(
        name="llama3.1-8b-tokenizer",
        repo_id="meta-llama/Llama-3.1-8B",
        repo_type="model",
        files=(
            "original/tokenizer.model",
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ),
        revision="d04e592bb4f6aa9cfee91e2e20afa771667e1d4b",
        revision_source=_CACHE_PATH,
        gated=True,
        licence="Llama 3.1 Community License",
        licence_page=_LLAMA31,
        upstream="llm-lora-* tokenizer (tokenizer.path=.../llama3_8B/original/tokenizer.model)",
    ),
    HubInput(
        name="llama3.1-70b",
        repo_id="meta-llama/Llama-3.1-70B",
        repo_type="model",
        files=(
            "config.json",
            "generation_config.json",
            "model.safetensors.index.json",
            "model-000??-of-00030.safetensors",
        ),
        revision="349b2ddb53ce8f2849a6c168a81980ab25258dac",
        revision_source=_CACHE_PATH,
        gated=True,
        licence="Llama 3.1 Community License",
        licence_page=_LLAMA31_70,
        upstream="llm-lora-mp-gpus, llm-full-mp-* weights (30 safetensors shards)",
    ),
    HubInput(
        name="llama3.1-70b-tokenizer",
        repo_id="meta-llama/Llama-3.1-70B",
        repo_type="model",
        files=(
            "original/tokenizer.model",
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ),
        revision="349b2ddb53ce8f2849a6c168a81980ab25258dac",
        revision_source=_CACHE_PATH,
        gated=True,
        licence="Llama 3.1 Community License",
        licence_page=_LLAMA31_70,
        upstream="llm-lora-mp-gpus, llm-full-mp-* tokenizer (.../llama3_70B/original/tokenizer.model)",
    ),
    HubInput(
        name="alpaca-cleaned",
        repo_id="yahma/alpaca-cleaned",
        repo_type="dataset",
        files=("alpaca_data_cleaned.json",),
        revision=MAIN,
        revision_source="not pinned: no citable commit found (known gap)",
        gated=False,
        licence="CC BY 4.0",
        licence_page="https://huggingface.co/datasets/yahma/alpaca-cleaned",
        upstream="llm-lora-single/-ddp-* data (torchtune alpaca_cleaned_dataset, split train)",
    ),
    HubInput(
        name="alpaca",
        repo_id="tatsu-lab/alpaca",
        repo_type="dataset",
        files=("data/train-00000-of-00001-a09b74b3ef9c3b56.parquet",),
        revision="dce01c9b08f87459cf36a430d809084718273017",
        revision_source="a pinned source list (revision and sha256) in public code",
        gated=False,
        licence="CC BY-NC 4.0",
        licence_page="https://huggingface.co/datasets/tatsu-lab/alpaca",
        upstream="llm-lora-mp-gpus, llm-full-mp-* data (torchtune alpaca_dataset, split train)",
        sha256=_pins(
            **{
                "data/train-00000-of-00001-a09b74b3ef9c3b56.parquet": (
                    "06391b656a06fd3fb9d213160ef2398796c3b7f3dc75ef1e3ced30d461517073"
                )
            }
        ),
    ),
    # -- llama: benchmarks/llama/main.py (--pretrained in upstream's config).
    HubInput(
        name="llama2-7b-chat",
        repo_id="meta-llama/Llama-2-7b-chat-hf",
        repo_type="model",
        files=(
            "config.json",
            "generation_config.json",
            "model.safetensors.index.json",
            "model-0000?-of-00002.safetensors",
        ),
        revision="f5db02db724555f92da89c216ac04704f23d4590",
        revision_source=_CACHE_PATH,
        gated=True,
        licence="Llama 2 Community License",
        licence_page="https://huggingface.co/meta-llama/Llama-2-7b-chat-hf/blob/main/LICENSE.txt",
        upstream="llama weights (LlamaForCausalLM.from_pretrained, bf16)",
    ),
    HubInput(
        name="llama2-tokenizer",
        repo_id="hf-internal-testing/llama-tokenizer",
        repo_type="model",
        files=(
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "tokenizer.model",
        ),
        revision="d02ad6cb9dd2c2296a6332199fa2fdca5938fef0",
        revision_source="`hf cache scan` output naming it main, in public documentation",
        gated=False,
        licence="Llama 2 tokenizer (no licence file in the repository)",
        licence_page="https://huggingface.co/hf-internal-testing/llama-tokenizer",
        upstream="llama tokenizer (LlamaTokenizerFast, model_max_length=256)",
    ),
    HubInput(
        name="wikitext-103",
        repo_id="Salesforce/wikitext",
        repo_type="dataset",
        files=("wikitext-103-v1/*.parquet",),
        revision="b08601e04326c79dfdd32d625aee71d232d685c3",
        revision_source="a `datasets` download record (hf://...@revision) in public code",
        gated=False,
        licence="CC BY-SA 3.0 / GFDL",
        licence_page="https://huggingface.co/datasets/Salesforce/wikitext",
        upstream='llama prompts (load_dataset("wikitext", "wikitext-103-v1"), every split)',
    ),
    # -- llava: benchmarks/llava/prepare.py, main.py (revision pinned by upstream).
    HubInput(
        name="llava-1.5-7b",
        repo_id="llava-hf/llava-1.5-7b-hf",
        repo_type="model",
        files=("*.json", "*.safetensors", "tokenizer.model"),
        revision="e2214c2851fadaf9241c9f9ac91dcdee51981021",
        revision_source="upstream's benchmarks/llava/main.py (from_pretrained revision=)",
        gated=False,
        licence="Llama 2 Community License",
        licence_page="https://huggingface.co/llava-hf/llava-1.5-7b-hf",
        upstream="llava-* weights and processor (LlavaForConditionalGeneration, AutoProcessor)",
    ),
    HubInput(
        name="the-cauldron-aokvqa",
        repo_id="HuggingFaceM4/the_cauldron",
        repo_type="dataset",
        files=("aokvqa/train-*.parquet",),
        revision=MAIN,
        revision_source="not pinned: no citable commit found (known gap)",
        gated=False,
        licence="per subset (A-OKVQA: Apache 2.0)",
        licence_page="https://huggingface.co/datasets/HuggingFaceM4/the_cauldron",
        upstream='llava-* data (load_dataset("HuggingFaceM4/the_cauldron", "aokvqa")["train"])',
    ),
    # -- rlhf: benchmarks/rlhf/prepare.py, main.py; trl's PPOConfig defaults.
    HubInput(
        name="pythia-1b-deduped",
        repo_id="EleutherAI/pythia-1b-deduped",
        repo_type="model",
        files=("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
        revision="7199d8fc61a6d565cd1f3c62bf11525b563e13b2",
        revision_source=_CACHE_PATH,
        gated=False,
        licence="Apache 2.0",
        licence_page="https://huggingface.co/EleutherAI/pythia-1b-deduped",
        upstream="rlhf-* tokenizer (--model_name_or_path; trl keeps pythia-160m for the models)",
    ),
    HubInput(
        name="pythia-160m",
        repo_id="EleutherAI/pythia-160m",
        repo_type="model",
        files=("config.json", "model.safetensors"),
        revision="50f5173d932e8e61f858120bcb800b97af589f46",
        revision_source=_CACHE_PATH,
        gated=False,
        licence="Apache 2.0",
        licence_page="https://huggingface.co/EleutherAI/pythia-160m",
        upstream="rlhf-* policy, reference, value and reward weights (trl's default paths)",
    ),
    HubInput(
        name="descriptiveness-sentiment",
        repo_id="trl-internal-testing/descriptiveness-sentiment-trl-style",
        repo_type="dataset",
        files=("data/descriptiveness-*.parquet",),
        revision=MAIN,
        revision_source="not pinned: no citable commit found (known gap)",
        gated=False,
        licence="not stated in the repository",
        licence_page="https://huggingface.co/datasets/trl-internal-testing/descriptiveness-sentiment-trl-style",
        upstream="rlhf-* prompts (split descriptiveness)",
    ),
    # -- dimenet: benchmarks/geo_gnn/pcqm4m_subset.py (torch_geometric's PCQM4Mv2 + 3D).
    UrlInput(
        name="pcqm4mv2",
        files=(
            UrlFile(
                url="https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip",
                path="pcqm4m-v2.zip",
            ),
            UrlFile(
                url="http://ogb-data.stanford.edu/data/lsc/pcqm4m-v2-train.sdf.tar.gz",
                path="pcqm4m-v2-train.sdf.tar.gz",
                md5="fd72bce606e7ddf36c2a832badeec6ab",
            ),
        ),
        revision="v2",
        revision_source="OGB-LSC release 2; md5 of the conformers from upstream's comment",
        licence="CC BY 4.0",
        licence_page="https://ogb.stanford.edu/docs/lsc/pcqm4mv2/",
        upstream="dimenet molecules (PCQM4Mv2 SMILES graphs + DFT conformers of the train split)",
    ),
    # -- recursiongfn: gflownet.models.bengio2021flow.load_original_model.
    UrlInput(
        name="bengio2021flow-proxy",
        files=(
            UrlFile(
                url=(
                    "https://github.com/GFNOrg/gflownet/raw/"
                    f"{GFLOWNET_PROXY_COMMIT}/mols/data/pretrained_proxy/best_params.pkl.gz"
                ),
                path="bengio2021flow_proxy.pkl.gz",
                sha256="f76ab480b62e23dda04fd45fefe0e7ae2374b3f8c3f18fb7e00651cad05b9e1f",
            ),
        ),
        revision=GFLOWNET_PROXY_COMMIT,
        revision_source=(
            "the one commit of GFNOrg/gflownet's master that wrote the file, whose bytes"
            " gflownet's load_original_model downloads from master (2,597,445 bytes)"
        ),
        licence="MIT",
        licence_page="https://github.com/GFNOrg/gflownet/blob/master/LICENSE",
        upstream="recursiongfn SEH reward proxy (MPNNet weights)",
    ),
)

CATALOGUE: MappingProxyType[str, Input] = MappingProxyType({i.name: i for i in _INPUTS})
"""Every input by name."""

_LLM_8B = ("llama3.1-8b", "llama3.1-8b-tokenizer", "alpaca-cleaned")
_LLM_70B = ("llama3.1-70b", "llama3.1-70b-tokenizer", "alpaca")
_LLAVA = ("llava-1.5-7b", "the-cauldron-aokvqa")
_RLHF = ("pythia-1b-deduped", "pythia-160m", "descriptiveness-sentiment")

ENTRY_INPUTS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "llm-lora-single": _LLM_8B,
        "llm-lora-ddp-gpus": _LLM_8B,
        "llm-lora-ddp-nodes": _LLM_8B,
        "llm-lora-mp-gpus": _LLM_70B,
        "llm-full-mp-gpus": _LLM_70B,
        "llm-full-mp-nodes": _LLM_70B,
        "llama": ("llama2-7b-chat", "llama2-tokenizer", "wikitext-103"),
        "llava-single": _LLAVA,
        "llava-gpus": _LLAVA,
        "rlhf-single": _RLHF,
        "rlhf-gpus": _RLHF,
        "dimenet": ("pcqm4mv2",),
        "pna": ("pcqm4mv2",),  # upstream's pna reads the same first molecules, in 2D
        "recursiongfn": ("bengio2021flow-proxy",),
    }
)
"""The inputs each upstream entry reads (entries not listed read none)."""


def get(name: str) -> Input:
    """The record `name` (the override file's when it has one, `load_override`); KeyError
    naming the known names otherwise."""
    records = effective_catalogue()
    try:
        return records[name]
    except KeyError:
        known = ", ".join(records)
        raise KeyError(f"no input {name!r} in the catalogue (known: {known})") from None


def inputs_for(entry: str) -> tuple[str, ...]:
    """The names of the inputs upstream's `entry` reads (the override file's list when it
    gives one; empty for any other entry)."""
    return effective_entries().get(entry, ())


# -- a site's own catalogue: MILABENCH_INPUTS_CATALOGUE ------------------------------------

OVERRIDE_VARIABLE = "MILABENCH_INPUTS_CATALOGUE"


class CatalogueError(ValueError):
    """The override file cannot be used: the message names the file and the key."""


@dataclass(frozen=True)
class Override:
    """What an override file holds: records by name, entries' input lists by entry."""

    path: Path
    inputs: MappingProxyType[str, Input]
    entries: MappingProxyType[str, tuple[str, ...]]


_HUB_TEXT = ("repo_id", "revision", "revision_source", "licence", "licence_page", "upstream")
_URL_TEXT = ("revision", "revision_source", "licence", "licence_page", "upstream")
_HUB_KEYS = frozenset(f.name for f in fields(HubInput)) | {"kind"}
_URL_KEYS = frozenset(f.name for f in fields(UrlInput)) | {"kind"}
_URL_FILE_KEYS = frozenset(f.name for f in fields(UrlFile))
_cache: dict[tuple[str, int, int], Override] = {}


def load_override(path: str | os.PathLike[str] | None = None) -> Override | None:
    """The override file `path` (default: ``$MILABENCH_INPUTS_CATALOGUE``; None when unset
    or empty), read and checked; reread when the file changes.

    The file is JSON: ``{"inputs": {NAME: RECORD}, "entries": {ENTRY: [NAME, ...]}}``, both
    optional. A RECORD for a catalogue name replaces the fields it gives (``revision``,
    ``files``, ``sha256``, ... as in `HubInput` / `UrlInput`; ``sha256`` as a whole); a
    new name needs ``repo_id`` and ``files`` (a hub input, ``repo_type`` default
    ``model``, ``revision`` default ``main``) or ``files`` of ``{"url", "path", "sha256",
    "md5"}`` objects (a URL input). An unreadable file, an unknown key or a value of the
    wrong type raises `CatalogueError` naming the file and the key (``inputs.NAME.files``).
    """
    if path is None:
        path = os.environ.get(OVERRIDE_VARIABLE, "").strip()
        if not path:
            return None
    file = Path(path)
    try:
        stat = file.stat()
        key = (str(file.resolve()), stat.st_mtime_ns, stat.st_size)
        if key in _cache:
            return _cache[key]
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogueError(
            f"{file} ({OVERRIDE_VARIABLE}): cannot read it ({exc.strerror or exc})"
        ) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CatalogueError(f"{file} ({OVERRIDE_VARIABLE}): not JSON ({exc})") from None
    override = _parse_override(file, data)
    _cache.clear()
    _cache[key] = override
    return override


def effective_catalogue() -> MappingProxyType[str, Input]:
    """`CATALOGUE` with the override file's records in place or added."""
    override = load_override()
    if override is None or not override.inputs:
        return CATALOGUE
    return MappingProxyType({**CATALOGUE, **override.inputs})


def effective_entries() -> MappingProxyType[str, tuple[str, ...]]:
    """`ENTRY_INPUTS` with the override file's entries' lists in place or added."""
    override = load_override()
    if override is None or not override.entries:
        return ENTRY_INPUTS
    return MappingProxyType({**ENTRY_INPUTS, **override.entries})


def _parse_override(file: Path, data: Any) -> Override:
    def fail(where: str, problem: str) -> CatalogueError:
        return CatalogueError(f"{file} ({OVERRIDE_VARIABLE}): {where}: {problem}")

    if not isinstance(data, dict):
        raise fail("(top level)", 'not an object {"inputs": {...}, "entries": {...}}')
    for key in data:
        if key not in ("inputs", "entries"):
            raise fail(key, 'unknown key (the file holds "inputs" and "entries")')
    raw_inputs, raw_entries = data.get("inputs", {}), data.get("entries", {})
    if not isinstance(raw_inputs, dict):
        raise fail("inputs", "not an object of records by name")
    if not isinstance(raw_entries, dict):
        raise fail("entries", "not an object of name lists by entry")
    records: dict[str, Input] = {}
    for name, raw in raw_inputs.items():
        records[name] = _parse_record(name, raw, lambda key, p, n=name: fail(f"inputs.{n}{key}", p))
    known = {**CATALOGUE, **records}
    entries: dict[str, tuple[str, ...]] = {}
    for entry, names in raw_entries.items():
        where = f"entries.{entry}"
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise fail(where, "not a list of input names")
        for name in names:
            if name not in known:
                raise fail(where, f"no input {name!r} in the catalogue or this file")
        entries[entry] = tuple(names)
    return Override(file, MappingProxyType(records), MappingProxyType(entries))


def _parse_record(name: str, raw: Any, fail: Any) -> Input:
    """One record of the file: the built-in record `name` with `raw`'s fields, or a new
    one. `fail(".key", problem)` makes the error."""
    if not isinstance(raw, dict):
        raise fail("", "not an object of fields")
    base = CATALOGUE.get(name)
    kind = raw.get("kind")
    if kind is None and base is not None:
        kind = base.kind
    elif kind is None:
        files = raw.get("files")
        if {"repo_id", "repo_type", "gated", "sha256"} & set(raw) or (
            isinstance(files, list) and files and all(isinstance(f, str) for f in files)
        ):
            kind = "hub"
        elif isinstance(files, list) and files and all(isinstance(f, dict) for f in files):
            kind = "url"
        else:
            raise fail(
                "",
                'a new input needs repo_id and files (a hub input) or files of {"url", '
                '"path"} objects (a URL input)',
            )
    if kind not in ("hub", "url"):
        raise fail(".kind", f'{kind!r} is not "hub" or "url"')
    if base is not None and base.kind != kind:
        raise fail(".kind", f"{name} is a {base.kind} input in the catalogue, not {kind}")
    allowed = _HUB_KEYS if kind == "hub" else _URL_KEYS
    for key in raw:
        if key not in allowed:
            raise fail(
                f".{key}", f"unknown field of a {kind} input (known: {', '.join(sorted(allowed))})"
            )
    if raw.get("name", name) != name:
        raise fail(".name", f"{raw['name']!r} differs from the record's key {name!r}")
    values: dict[str, Any] = {}
    for key in _HUB_TEXT if kind == "hub" else _URL_TEXT:
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise fail(f".{key}", "not a non-empty string")
            values[key] = raw[key]
    if "files" in raw:
        values["files"] = (_hub_files if kind == "hub" else _url_files)(raw["files"], fail)
    if kind == "hub":
        if "repo_type" in raw:
            if raw["repo_type"] not in ("model", "dataset"):
                raise fail(".repo_type", f'{raw["repo_type"]!r} is not "model" or "dataset"')
            values["repo_type"] = raw["repo_type"]
        if "gated" in raw:
            if not isinstance(raw["gated"], bool):
                raise fail(".gated", "not true or false")
            values["gated"] = raw["gated"]
        if "sha256" in raw:
            values["sha256"] = _pinned_hashes(raw["sha256"], fail)
    if base is not None:
        return replace(base, **values)
    missing = [
        k for k in (("repo_id", "files") if kind == "hub" else ("files",)) if k not in values
    ]
    if missing:
        raise fail(f".{missing[0]}", "required for an input the catalogue does not have")
    source = f"{OVERRIDE_VARIABLE} file"
    common = {"revision": MAIN, "revision_source": source, "licence": "not stated",
              "licence_page": "not stated", "upstream": source}  # fmt: skip
    if kind == "hub":
        return HubInput(name=name, **{"repo_type": "model", "gated": False, **common, **values})
    return UrlInput(name=name, **{**common, **values})


def _hub_files(raw: Any, fail: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(f, str) and f for f in raw):
        raise fail(".files", "not a non-empty list of repository paths or patterns")
    return tuple(raw)


def _url_files(raw: Any, fail: Any) -> tuple[UrlFile, ...]:
    if not isinstance(raw, list) or not raw:
        raise fail(".files", 'not a non-empty list of {"url", "path", "sha256", "md5"} objects')
    out = []
    for i, item in enumerate(raw):
        where = f".files[{i}]"
        if not isinstance(item, dict):
            raise fail(where, 'not an object {"url", "path", "sha256", "md5"}')
        for key in item:
            if key not in _URL_FILE_KEYS:
                raise fail(f"{where}.{key}", "unknown field (known: md5, path, sha256, url)")
        for key in ("url", "path"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise fail(f"{where}.{key}", "required, a non-empty string")
        if not item["url"].startswith(("http://", "https://")):
            raise fail(f"{where}.url", f"{item['url']!r} is not an http(s) URL")
        for key, length in (("sha256", 64), ("md5", 32)):
            value = item.get(key)
            if value is not None and not _is_hex(value, length):
                raise fail(f"{where}.{key}", f"not {length} lower-case hexadecimal digits")
        out.append(UrlFile(**item))
    return tuple(out)


def _pinned_hashes(raw: Any, fail: Any) -> MappingProxyType[str, str]:
    if not isinstance(raw, dict):
        raise fail(".sha256", "not an object {path: sha256}")
    for path, value in raw.items():
        if not _is_hex(value, 64):
            raise fail(f".sha256.{path}", "not 64 lower-case hexadecimal digits")
    return MappingProxyType(dict(raw))


def _is_hex(value: Any, length: int) -> bool:
    return (
        isinstance(value, str)
        and len(value) == length
        and all(c in "0123456789abcdef" for c in value)
    )
