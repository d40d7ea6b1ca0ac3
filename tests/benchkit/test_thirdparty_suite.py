"""End to end: the three third-party examples of docs/thirdparty.md, measured as they are.

Real `milabench prepare` and `milabench run` of `config/thirdparty.yaml` (shrunk to CI
sizes by a suite that includes it), real voir, the scripts byte-identical to the files
the docs publish. Each reports rate, loss and its instrumentation overhead; a wrong step
selector fails its entry with one line naming it while a right one passes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from clirun import milabench as run_milabench

from milabench.events import read_events

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "thirdparty-regression": "regression.py",
    "thirdparty-wordlm": "word_language_model.py",
    "thirdparty-sine": "sine_wave.py",
}

SUITE = """
include: {config}

"*":
  measure: {{warmup_min: 0.2s, warmup_max: 1s, min: 0.5s, max: 1.5s, min_observations: 3,
             startup: 90s}}
  voir:
    options: {{gpu_poll: 0}}

thirdparty-regression:
  argv: {{--features: 32, --outputs: 16, --num-samples: 2048, --batch-size: 64}}

thirdparty-wordlm:
  argv: {{--emsize: 32, --nhid: 32, --nlayers: 1, --bptt: 10, --batch-size: 8}}

thirdparty-sine:
  argv: {{--hidden: 8, --num-waves: 8, --length: 20, --future: 5}}
"""


def milabench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_milabench(*args, env={"MILABENCH_GPU_ARCH": "cpu"}, timeout=timeout)


def test_scripts_are_the_published_ones():
    """The checksums docs/thirdparty.md refers to: measured scripts are never edited."""
    listed = {}
    for line in (ROOT / "benchmarks" / "thirdparty-examples.sha256").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        listed[path.lstrip("*")] = digest
    for folder, script in EXAMPLES.items():
        data = (ROOT / "benchmarks" / folder / script).read_bytes()
        assert listed[f"{folder}/{script}"] == hashlib.sha256(data).hexdigest()


def test_voirfiles_are_at_most_ten_lines():
    for folder in EXAMPLES:
        lines = (ROOT / "benchmarks" / folder / "voirfile.py").read_text().splitlines()
        assert len(lines) <= 10, (folder, len(lines))


@pytest.mark.slow
def test_examples_measured_from_outside(tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(config=ROOT / "config" / "thirdparty.yaml"))
    common = ["--config", str(suite), "--base", str(tmp_path / "base"), "--use-current-env",
              "--select", ",".join(EXAMPLES)]  # fmt: skip
    prep = milabench("prepare", *common)
    assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    assert (tmp_path / "base" / "data" / "wordlm" / "train.txt").is_file()

    run = milabench("run", *common, "--run-name", "tp")
    out = run.stdout
    assert run.returncode == 0, out[-4000:] + run.stderr[-3000:]
    assert re.search(r"^Verdict: +PASS \(exit code 0\)$", out, re.M), out[-3000:]

    run_dir = tmp_path / "base" / "runs" / "tp"
    for name in EXAMPLES:
        (data,) = run_dir.glob(f"{name}.*.data")
        records = [e["data"] for e in read_events(data) if e["event"] == "data"]
        rates = [r for r in records if r.get("task") == "train" and "rate" in r]
        losses = [r["loss"] for r in records if "loss" in r]
        overheads = [r["overhead"] for r in records if "overhead" in r]
        assert len(rates) >= 3 and all(r["rate"] > 0 for r in rates), name
        assert losses and all(v == v for v in losses), name
        assert len(overheads) == 1 and overheads[0]["fraction"] > 0, name
    units = {
        name: {r.get("units") for r in (e["data"] for e in read_events(d) if e["event"] == "data")}
        for name in EXAMPLES
        for d in run_dir.glob(f"{name}.*.data")
    }
    assert "Tok/s" in units["thirdparty-wordlm"]
    # the sine script ran in its working directory, created before it started (it writes
    # predictions.txt there only after its last epoch: the window ends it before)
    assert list((tmp_path / "base" / "extra").glob("*/sine"))

    # the report carries the overhead figure of every example
    report = milabench("report", "--runs", str(run_dir), "--format", "json")
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    rows = {row["name"]: row for row in json.loads(report.stdout)["benchmarks"]}
    for name in EXAMPLES:
        assert rows[name]["overhead"] > 0, rows[name]


@pytest.mark.slow
def test_wrong_step_selector_fails_with_one_line(tmp_path: Path):
    """The sine example with `trian()` for `train()`: the entry fails, naming it."""
    folder = tmp_path / "thirdparty-sine"
    shutil.copytree(ROOT / "benchmarks" / "thirdparty-sine", folder)
    voirfile = folder / "voirfile.py"
    voirfile.write_text(voirfile.read_text().replace('step="train()"', 'step="trian()"'))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        SUITE.format(config=ROOT / "config" / "thirdparty.yaml") + f"  definition: {folder}\n"
    )
    run = milabench("run", "--config", str(suite), "--base", str(tmp_path / "base"),
                    "--use-current-env", "--select", "thirdparty-sine")  # fmt: skip
    out = run.stdout
    assert run.returncode == 1, out[-3000:] + run.stderr[-2000:]
    assert re.search(r"^Verdict: +FAIL \(exit code 1\)$", out, re.M)
    assert "probe `trian()` cannot be installed" in out
    (data,) = (tmp_path / "base" / "runs").glob("*/thirdparty-sine.*.data")
    printed = [e["data"] for e in read_events(data) if e["event"] == "line"]
    assert printed and not any("epoch 0:" in line for line in printed)  # not run unmeasured


def test_docs_show_the_voirfiles_verbatim():
    """docs/thirdparty.md quotes each example's voirfile: the quote is the file."""
    docs = (ROOT / "docs" / "thirdparty.md").read_text()
    for folder in EXAMPLES:
        voirfile = (ROOT / "benchmarks" / folder / "voirfile.py").read_text()
        assert f"```python\n{voirfile}```" in docs, folder
