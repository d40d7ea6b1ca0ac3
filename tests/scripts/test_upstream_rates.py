"""scripts/upstream_rates.py: upstream's recorded rates read from its sizing files in a real
git repository, and the committed data file held against upstream_memory.yaml and the
suite (the same entries, batch sizes and runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import upstream_rates as ur  # noqa: E402

H200 = """\
resnet50:
  observations:
  - {batch_size: 256, cpu: 8, memory: 13862 MiB, perf: 2204.13, time: 1}
  - {batch_size: 512, cpu: 8, memory: 27000 MiB, perf: 2500.0, time: 2}
lightning-gpus:
  observations:
  - {batch_size: 256, cpu: 8, memory: 28452 MiB, perf: 9024.8, time: 3}
llava-single:
  observations:
  - {batch_size: 1, cpu: 4, memory: 73048 MiB, perf: 4.35, time: 4}
  - {batch_size: 1, cpu: 4, memory: 15321 MiB, perf: 4.25, time: 5}
  - {batch_size: 1, cpu: 4, memory: 73100 MiB, perf: 4.45, time: 6}
version: 2.0
"""

MEMORY = """\
source:
  repository: mila-iqia/milabench
  commit: {commit}
gpus:
  H200: {{memory_mib: 143771, file: config/scaling/H200.yaml}}
  A100-40GB: {{memory_mib: 40960}}
entries:
  resnet50:
    batch_size: 256
    observations: [{{gpu: H200, memory_mib: 13862}}]
  lightning-gpus:
    batch_size: 256
    observations: [{{gpu: H200, memory_mib: 28452}}]
  llava-single:
    batch_size: 1
    observations:
      - {{gpu: H200, memory_mib: 73048}}
      - {{gpu: H200, memory_mib: 15321, excluded: an older llava}}
  ppo:
    batch_size: null
    observations: []
  reformer:
    batch_size: 32
    observations: []
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def upstream(tmp_path):
    """A git repository holding one sizing file, and a memory file naming its commit."""
    repo = tmp_path / "upstream"
    (repo / "config" / "scaling").mkdir(parents=True)
    (repo / "config" / "scaling" / "H200.yaml").write_text(H200)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "scaling")
    commit = git(repo, "rev-parse", "HEAD")
    memory = tmp_path / "upstream_memory.yaml"
    memory.write_text(MEMORY.format(commit=commit))
    return repo / ".git", commit, memory


def test_rates_at_our_batch_size_with_the_memory_files_exclusions(upstream):
    git_dir, commit, memory = upstream
    data = ur.build(git_dir, None, memory)
    assert data["source"] == {"repository": "mila-iqia/milabench", "commit": commit,
                              "files": {"H200": "config/scaling/H200.yaml"}}  # fmt: skip
    entries = data["entries"]
    assert set(entries) == {"resnet50", "lightning-gpus", "llava-single"}
    assert entries["resnet50"] == {"batch_size": 256, "per": "gpu", "observations": [
        {"gpu": "H200", "rates": [{"perf": 2204.13, "memory_mib": 13862}], "n": 1,
         "median": 2204.13, "memory_median": 13862}]}  # fmt: skip
    assert entries["lightning-gpus"]["per"] == "node"
    llava = entries["llava-single"]["observations"][0]
    assert [r.get("excluded") for r in llava["rates"]] == [None, "an older llava", None]
    assert llava["n"] == 2 and llava["median"] == pytest.approx(4.4)
    assert llava["memory_median"] == 73074  # the excluded run's 15,321 MiB left out
    text = ur.dump(data)
    assert f"at commit {commit}," in text
    assert "- {perf: 2204.13, memory_mib: 13862}" in text
    assert yaml.safe_load(text) == yaml.safe_load(ur.dump(ur.build(git_dir, commit, memory)))


def test_a_missing_file_or_commit_is_one_line_naming_it(upstream, tmp_path, capsys):
    git_dir, commit, memory = upstream
    memory.write_text(memory.read_text().replace("H200.yaml", "H999.yaml"))
    out = tmp_path / "rates.yaml"
    assert ur.main([str(git_dir), "--memory", str(memory), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{commit}:config/scaling/H999.yaml" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    memory.write_text(MEMORY.format(commit="").replace("commit: \n", "commit: null\n"))
    with pytest.raises(ur.RatesError, match="no source.commit"):
        ur.build(git_dir, None, memory)


def test_an_entry_the_suite_does_not_have_is_an_error(upstream):
    git_dir, _, memory = upstream
    memory.write_text(memory.read_text().replace("  resnet50:\n", "  resnet5O:\n"))
    (git_dir.parent / "config" / "scaling" / "H200.yaml").write_text(
        H200.replace("resnet50:", "resnet5O:"))  # fmt: skip
    repo = git_dir.parent
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "renamed")
    with pytest.raises(ur.RatesError, match="resnet5O is no entry"):
        ur.build(git_dir, git(repo, "rev-parse", "HEAD"), memory)


def test_the_committed_rates_are_upstream_memorys_runs_at_the_suites_batch_sizes():
    """Every entry of upstream_rates.yaml is an entry of upstream_memory.yaml at the same
    batch size, with the suite's scope, and each GPU's runs include every observation
    that upstream_memory.yaml records for it (the same runs, read from the same files)."""
    rates = yaml.safe_load(ur.OUT.read_text())
    memory = yaml.safe_load(ur.MEMORY.read_text())
    assert rates["source"]["commit"] == memory["source"]["commit"]
    scopes = ur.scopes()
    for name, info in rates["entries"].items():
        mem = memory["entries"][name]
        assert info["batch_size"] == mem["batch_size"], name
        assert info["per"] == scopes[name], name
        seen = {(o["gpu"], r["memory_mib"]) for o in info["observations"] for r in o["rates"]}
        recorded = {(o["gpu"], o["memory_mib"]) for o in mem["observations"]}
        assert recorded <= seen, (name, recorded - seen)
        for obs in info["observations"]:
            kept = [r["perf"] for r in obs["rates"] if not r.get("excluded")]
            assert obs["n"] == len(kept) and all(p > 0 for p in kept), (name, obs["gpu"])
    with_runs = {n for n, e in memory["entries"].items() if e["observations"]}
    assert set(rates["entries"]) == with_runs
