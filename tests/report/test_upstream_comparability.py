"""How far a score stands next to upstream milabench's: the report counts upstream's
weighted entries measured with upstream's work and inputs, names the others with the
reason, holds each rate against upstream's on the same GPU, and `compare` warns when two
scores are over different entries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchshared.inputs import MANIFEST, inputs_record
from milabench.report import build_report, render
from milabench.report.aggregate import batch_size_of
from milabench.report.upstream import UPSTREAM_WEIGHTED
from milabench.report.upstream_rates import load, versus

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


H200 = {
    "cpu": {"count": 16, "brand": "Test CPU"},
    "os": {"sysname": "Linux", "nodename": "gpuhost"},
    "accelerators": {"arch": "cuda", "gpus": {"0": {"product": "NVIDIA H200",
                                                    "memory": {"total": 143771}}}},
}  # fmt: skip


def upstream_memory(name: str) -> float:
    """Upstream's median peak memory (MiB) for ``name`` on an H200, from the data file."""
    return load(["NVIDIA H200"]).entries[name]["memory"]


def _gpu_run(d: Path, product: str = "NVIDIA H200") -> tuple[Path, dict[str, float]]:
    """A run on one GPU named ``product``: resnet50 3% under upstream's H200 figure (2%
    more memory), bert-tf32-fp16 20% under (25% more memory), reformer at another batch size, lightning-gpus (a node's
    figure upstream), llm-lora-single on its stand-in; upstream's medians returned."""
    meta = {**H200, "accelerators": {"arch": "cuda", "gpus": {"0": {"product": product}}}}
    up = {n: load(["NVIDIA H200"]).entries[n]["median"]
          for n in ("resnet50", "bert-tf32-fp16", "reformer", "llm-lora-single")}  # fmt: skip
    runs = {
        "resnet50": (0.97, 256, {}, 1.02),
        "bert-tf32-fp16": (0.8, 32, {}, 1.25),
        "reformer": (1.0, 64, {}, None),
        "lightning-gpus": (None, 256, {"plan": {"method": "torchrun"}}, None),
    }
    for name, (share, batch, extra, memory) in runs.items():
        rate = 1200.0 if share is None else up[name] * share
        config = entry(name, parity="same", argv={"--batch-size": batch}, **extra)
        gpu = [] if memory is None else [
            {"0": {"memory": [upstream_memory(name) * memory, 143771], "load": 0.9}}]  # fmt: skip
        write_file(d, f"{name}.D0", config, rates=[rate] * 3, meta=meta, gpudata=gpu)
    record = inputs_record("llm-lora-single", {"alpaca-cleaned": None}, "random sequences")
    write_file(
        d, "llm-lora-single.D0",
        entry("llm-lora-single", parity="same", argv=["--batch-size", "8"]),
        rates=[up["llm-lora-single"]] * 3, meta=meta, extra=[_data(record)],
    )  # fmt: skip
    return d, up


def test_each_rate_stands_beside_upstreams_on_the_same_gpu(tmp_path: Path):
    """The report holds every measured entry against upstream's figure on the run's GPU
    family at the same batch size: within 5%, a parity question, not comparable (another
    batch size, a stand-in), not compared (a node's figure), in every format."""
    d, up = _gpu_run(tmp_path / "runs" / "h200")
    rep = build_report([d], validations=["all,-usage"])
    text = render(rep, "text")
    section = text.split("Comparison with upstream milabench")[1].split("\n\n")[0]
    assert "Against upstream's H200 (mila-iqia/milabench faf39234, config/scaling/H200.yaml)" in (
        section
    )
    lines = {ln.strip().split(":")[0]: ln.strip() for ln in section.splitlines()}
    assert lines["resnet50"].endswith(
        "items/s (-3.0%): within 5%; memory 14,100 vs 13,900 MiB (+2.0%): within 5%")  # fmt: skip
    assert lines["bert-tf32-fp16"].endswith(
        "(-20.0%): parity question: slower by 20%; memory 20,100 vs 16,000 MiB (+25.0%): "
        "parity question: more memory by 25%")  # fmt: skip
    assert "memory" not in lines["reformer"]  # no GPU samples: no peak to compare
    assert lines["reformer"].endswith("not comparable: batch 64, upstream's figure is at 32")
    assert lines["lightning-gpus"].endswith(
        "not compared: upstream's figure is for every GPU of its node")  # fmt: skip
    assert "(+0.0%): not comparable: ran random sequences" in lines["llm-lora-single"]
    rates = json.loads(render(rep, "json"))["upstream"]["rates"]
    assert rates["gpu"] == "H200"
    rows = {r["name"]: r for r in rates["entries"]}
    assert rows["bert-tf32-fp16"]["upstream"] == up["bert-tf32-fp16"]
    assert rows["bert-tf32-fp16"]["gap"] == pytest.approx(-0.2)
    assert rows["resnet50"]["batch_size"] == 256 and rows["resnet50"]["runs"] == 1
    assert rows["bert-tf32-fp16"]["memory_gap"] == pytest.approx(0.25)
    assert rows["bert-tf32-fp16"]["upstream_memory_mib"] == upstream_memory("bert-tf32-fp16")
    assert rows["lightning-gpus"]["memory_verdict"] is None
    assert "parity question: slower by 20%" in render(rep, "markdown")
    assert "parity question: slower by 20%" in render(rep, "html")


def test_a_gap_inside_our_own_interval_says_to_measure_longer():
    """The H200's resnet50 was 9.2% under upstream with a 95% interval of ±14%: still a
    parity question (over 5%), but one our own noise could make, and the verdict says so."""
    rates = load(["NVIDIA H200"])
    up = rates.entries["resnet50"]["median"]
    noisy = versus(rates, "resnet50", up * 0.908, halfwidth=0.14)
    assert noisy.verdict == (
        "parity question: slower by 9% (inside our 95% interval, ±14%: measure longer)")  # fmt: skip
    assert versus(rates, "resnet50", up * 0.908, halfwidth=0.02).verdict == (
        "parity question: slower by 9%")  # fmt: skip
    assert versus(rates, "resnet50", up * 0.97, halfwidth=0.14).verdict == "within 5%"
    assert versus(rates, "resnet50", up * 0.908).verdict == "parity question: slower by 9%"


def test_another_form_factor_or_no_gpu_has_no_upstream_rates(tmp_path: Path):
    d, _ = _gpu_run(tmp_path / "runs" / "nvl", product="NVIDIA H200 NVL")
    rep = build_report([d], validations=["all,-usage"])
    assert "Against upstream's" not in render(rep, "text")
    assert "rates" not in json.loads(render(rep, "json"))["upstream"]


def test_the_batch_size_is_read_from_either_form_of_argv():
    assert batch_size_of({"--batch-size": 256, "--lr": 0.1}) == 256
    assert batch_size_of(["--model", "x", "--batch-size", "32"]) == 32
    assert batch_size_of(["--batch-size"]) is None
    assert batch_size_of({"--batch-size": "{batch}"}) is None
    assert batch_size_of({"--batch-size": True}) is None
    assert batch_size_of(None) is None and batch_size_of({"--lr": 1}) is None
