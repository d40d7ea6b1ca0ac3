"""How far a score stands next to upstream milabench's: the report counts upstream's
weighted entries measured with upstream's work and inputs, names the others with the
reason, and `compare` warns when two scores are over different entries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchshared.inputs import MANIFEST, inputs_record
from milabench.report import build_report, render
from milabench.report.upstream import UPSTREAM_WEIGHTED

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402


def _data(record: dict) -> dict:
    return {"event": "data", "pipe": "data", "data": record}


def _real_input(root: Path, name: str) -> Path:
    """An input folder as `benchshared.inputs.fetch` leaves it (one file, its manifest)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "data.json").write_text("[]")
    manifest = {"name": name, "source": "hub", "revision": "0" * 40,
                "files": {"data.json": {"sha256": "x", "size": 2}}}  # fmt: skip
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


def _run(d: Path, inputs_root: Path, *, llm_real: bool) -> Path:
    write_file(d, "resnet50.D0", entry("resnet50", parity="same"), rates=[10, 11, 12])
    used = {"alpaca-cleaned": _real_input(inputs_root, "alpaca-cleaned") if llm_real else None}
    record = inputs_record("llm-lora-single", used, "512-token random sequences")
    write_file(
        d, "llm-lora-single", entry("llm-lora-single", parity="same", plan={"method": "torchrun"}),
        rates=[100, 101, 102], extra=[_data(record)],
    )  # fmt: skip
    write_file(
        d, "dimenet.D0", entry("dimenet", parity="different: stand-in molecules"),
        rates=[5, 5, 6],
    )  # fmt: skip
    write_file(d, "pna.D0", entry("pna", parity="same"), rates=[], rc=1)
    return d


def test_the_report_counts_what_can_stand_next_to_upstream(tmp_path: Path):
    d = _run(tmp_path / "runs" / "a", tmp_path / "inputs", llm_real=False)
    rep = build_report([d], validations=["all,-usage"])
    text = render(rep, "text")
    section = text.split("Comparison with upstream milabench")[1].split("\n\n")[0]
    assert f"1 of {len(UPSTREAM_WEIGHTED)} comparable with upstream milabench v1.3.2" in section
    assert "llm-lora-single: ran 512-token random sequences (alpaca-cleaned not prepared)" in (
        section
    )
    assert "dimenet: stand-in molecules" in section
    assert "pna: " in section  # failed: not measured, with the report's reason
    absent = next(ln for ln in section.splitlines() if "not in this run: " in ln)
    assert "brax" in absent and "resnet50" not in absent
    md = render(rep, "markdown")
    assert "1 of 25 comparable with upstream milabench v1.3.2" in md
    assert "1 of 25 comparable" in render(rep, "html")
    up = json.loads(render(rep, "json"))["upstream"]
    assert up["version"] == "v1.3.2" and up["weighted"] == 25 and up["comparable"] == ["resnet50"]
    reasons = {row["name"]: row["reason"] for row in up["not_comparable"]}
    assert reasons["llm-lora-single"].startswith("ran 512-token random sequences")
    assert reasons["brax"] == "not in this run"


def test_upstreams_inputs_make_the_entry_comparable(tmp_path: Path):
    d = _run(tmp_path / "runs" / "b", tmp_path / "inputs", llm_real=True)
    up = json.loads(render(build_report([d], validations=["all,-usage"]), "json"))["upstream"]
    assert up["comparable"] == ["llm-lora-single", "resnet50"]


def test_a_run_without_upstreams_entries_says_nothing_of_upstream(tmp_path: Path):
    d = tmp_path / "runs" / "cpu"
    write_file(d, "convnet.D0", entry("convnet"), rates=[1, 2, 3])
    rep = build_report([d], validations=["all,-usage"])
    assert "Comparison with upstream" not in render(rep, "text")
    assert json.loads(render(rep, "json"))["upstream"] is None


def test_a_gpus_entry_on_one_gpu_is_said_to_have_run_on_one_gpu(tmp_path: Path):
    d = tmp_path / "runs" / "one"
    gpu = {"0": {"memory": [1000, 81920], "load": 0.9, "power": 300}}
    write_file(
        d, "lightning-gpus", entry("lightning-gpus", parity="same", plan={"method": "torchrun"}),
        rates=[10, 11, 12], gpudata=[gpu, gpu],
    )  # fmt: skip
    text = render(build_report([d], validations=["all,-usage"]), "text")
    assert "ran on 1 GPU (as upstream runs them on a 1-GPU node): lightning-gpus" in text


def test_compare_warns_when_the_scores_cover_different_entries(tmp_path: Path):
    a = _run(tmp_path / "runs" / "a", tmp_path / "in-a", llm_real=False)
    b = _run(tmp_path / "runs" / "b", tmp_path / "in-b", llm_real=True)
    write_file(b, "brax", entry("brax", parity="same", plan={"method": "njobs"}), rates=[3, 3, 4])
    proc = subprocess.run(
        [sys.executable, "-m", "milabench", "compare", str(a), str(b)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr
    assert (
        "warning: the two scores are over different entries (only B measured brax): compare "
        "the benchmarks they share, not the scores"
    ) in proc.stderr
    assert "A is comparable with upstream milabench on 1 of its weighted entries, B on 3" in (
        proc.stderr
    )
