"""Everyday use, through the real command line on real run folders.

`report`/`compare` without run arguments (latest runs under the base), a folder of runs
given to `--runs`, `report.json`/`report.md` written by `milabench run`, `milabench list`,
`compare --format html`, and the bash/zsh completion scripts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from clirun import milabench
from systemtools import require

HERE = Path(__file__).parent
SUITE = HERE / "report" / "suite.yaml"
SLEEPY = HERE / "report" / "benchmarks" / "sleepy"
# Names in the opposite order of their start: the latest is found by time, not by name.
RUNS = ("zz-first", "mm-second", "aa-third")


def real_run(base: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return milabench("run", "--config", str(SUITE), "--base", str(base), "--use-current-env",
                     "--run-name", name, "--select", "steady", *extra)  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Three real runs of one tiny benchmark, then an `install.*` log folder (newer)."""
    base = tmp_path_factory.mktemp("everyday")
    for name in RUNS:
        proc = real_run(base, name)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    logs = base / "runs" / "install.2099-01-01_00-00-00"
    logs.mkdir()
    (logs / "steady.data").write_text(
        json.dumps({"event": "start", "data": {"time": 4102444800.0}}) + "\n"
    )
    return base


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# -- 1. no run argument: the latest run under the base --------------------------------
@pytest.mark.slow
def test_report_without_runs_uses_the_latest_run(base: Path):
    latest = base / "runs" / "aa-third"
    proc = milabench("report", "--base", str(base), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sources"] == [str(latest)]
    assert one_line(proc.stderr) == (
        f"milabench: report of {latest} (latest run under {base / 'runs'})"
    )
    # MILABENCH_BASE, when there is no --base
    proc = milabench("report", "--format", "json", env={"MILABENCH_BASE": str(base)})
    assert proc.returncode == 0 and json.loads(proc.stdout)["sources"] == [str(latest)]


@pytest.mark.slow
def test_report_honours_milabench_config(base: Path):
    """MILABENCH_CONFIG gives the suite's entries, as --config does (weights, not run)."""
    proc = milabench("report", "--base", str(base), "--format", "json",
                     env={"MILABENCH_CONFIG": str(SUITE)})  # fmt: skip
    names = {row["name"]: row for row in json.loads(proc.stdout)["benchmarks"]}
    assert names["steady-jobs"]["reason"] == "not run"
    assert names["switched-off"]["reason"] == "disabled"
    assert names["steady-jobs"]["weight"] == 2.0


@pytest.mark.slow
def test_compare_without_runs_compares_the_two_latest(base: Path):
    runs = base / "runs"
    proc = milabench("compare", "--base", str(base), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["a"], out["b"]) == (str(runs / "mm-second"), str(runs / "aa-third"))
    assert one_line(proc.stderr) == (
        f"milabench: compare {runs / 'mm-second'} (A) with {runs / 'aa-third'} (B): "
        f"the two latest runs under {runs}"
    )


def test_no_run_is_a_one_line_error(tmp_path: Path):
    for command in ("report", "compare"):
        proc = milabench(command, "--base", str(tmp_path))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == ""
        assert one_line(proc.stderr) == (
            f"milabench: error: no run under {tmp_path / 'runs'} "
            f"(start one with `milabench run --base {tmp_path}`, or give a run folder)"
        )
    # only install/prepare logs: not a run of benchmarks
    (tmp_path / "runs" / "prepare.2024-01-01_00-00-00").mkdir(parents=True)
    (tmp_path / "runs" / "prepare.2024-01-01_00-00-00" / "x.data").write_text("")
    proc = milabench("report", "--base", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "only install/prepare logs: prepare.2024-01-01_00-00-00" in one_line(proc.stderr)


def test_compare_needs_two_runs(tmp_path: Path):
    run = tmp_path / "runs" / "only"
    run.mkdir(parents=True)
    (run / "report.json").write_text("{}")
    proc = milabench("compare", "--base", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "only one run under" in one_line(proc.stderr)


# -- 2. a folder of runs given to --runs ------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("given", ["runs", "base"])
def test_runs_folder_of_runs_picks_the_latest_and_names_the_others(base: Path, given: str):
    folder = base / "runs" if given == "runs" else base
    latest = base / "runs" / "aa-third"
    proc = milabench("report", "--runs", str(folder), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sources"] == [str(latest)]
    assert one_line(proc.stderr) == (
        f"milabench: report of {latest} (latest run under {base / 'runs'}; "
        "also there: mm-second, zz-first; pass one of them to choose)"
    )


@pytest.mark.slow
def test_compare_folder_of_runs(base: Path):
    runs = base / "runs"
    proc = milabench("compare", str(runs), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["a"], out["b"]) == (str(runs / "mm-second"), str(runs / "aa-third"))
    assert "also there: zz-first; pass one of them to choose" in one_line(proc.stderr)


def test_folder_without_run_data_is_a_one_line_error(tmp_path: Path):
    (tmp_path / "venv" / "lib").mkdir(parents=True)
    proc = milabench("report", "--runs", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line(proc.stderr) == (
        f"milabench: error: {tmp_path}: no run data (no .data file in it, "
        "and no run folder under it)"
    )
    proc = milabench("report", "--runs", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no such run folder" in one_line(proc.stderr)


# -- 3. milabench run writes report.json and report.md ----------------------------------
@pytest.mark.slow
def test_run_writes_its_report_files(base: Path):
    run_dir = base / "runs" / "aa-third"
    for name, fmt in (("report.json", "json"), ("report.md", "markdown")):
        proc = milabench("report", "--runs", str(run_dir), "--config", str(SUITE),
                         "--select", "steady", "--format", fmt)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert (run_dir / name).read_text() == proc.stdout
    assert json.loads((run_dir / "report.json").read_text())["verdict"] == "PASS"


@pytest.mark.slow
def test_report_files_that_cannot_be_written_are_a_warning(tmp_path: Path):
    run_dir = tmp_path / "runs" / "blocked"
    (run_dir / "report.json").mkdir(parents=True)  # a folder where the file should go
    proc = real_run(tmp_path, "unused", "--resume", str(run_dir))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "report.json" in line]
    assert warnings == [f"milabench: warning: could not write {run_dir / 'report.json'}: "
                        "Is a directory"]  # fmt: skip
    assert (run_dir / "report.md").read_text().strip()
    assert "Verdict" in proc.stdout and "PASS" in proc.stdout


# -- 4. milabench list ------------------------------------------------------------------
LIST_SUITE = f"""
_base:
  definition: {SLEEPY}
  weight: 2
  tags: [tiny]
one:
  inherits: _base
  group: first
two:
  inherits: _base
  install_group: shared
  weight: 0.5
  tags: [tiny, other]
pair:
  inherits: _base
  requires_capabilities: ["len(nodes) >= 2"]
switched-off:
  inherits: _base
  enabled: false
"""


@pytest.fixture
def list_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(LIST_SUITE)
    return suite


def test_list_json(list_suite: Path, tmp_path: Path):
    proc = milabench("list", "--config", str(list_suite), "--base", str(tmp_path),
                     "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert list(rows) == ["one", "two", "pair", "switched-off"]  # no private `_base`
    assert rows["one"] | {} == {"name": "one", "group": "first", "install_group": "first",
                                "tags": ["tiny"], "weight": 2, "enabled": True,
                                "selected": True, "skip": None}  # fmt: skip
    assert rows["two"]["install_group"] == "shared" and rows["two"]["weight"] == 0.5
    assert rows["pair"]["skip"] == "requires len(nodes) >= 2"
    assert rows["switched-off"]["enabled"] is False and rows["switched-off"]["selected"] is False


def test_list_text_markdown_and_selection(list_suite: Path, tmp_path: Path):
    common = ("--config", str(list_suite), "--base", str(tmp_path))
    text = milabench("list", *common).stdout.splitlines()
    assert text[0].split(" | ")[0].strip() == "name"
    assert "skipped because" in text[0]
    pair = next(line for line in text if line.startswith("pair"))
    assert pair.rstrip().endswith("requires len(nodes) >= 2")
    assert "_base" not in "\n".join(text)
    assert text[-1] == "4 entries, 3 enabled, 1 skipped on this system"
    md = milabench("list", *common, "--format", "markdown").stdout.splitlines()
    assert md[0] == ("| name | group | install group | tags | weight | enabled | "
                     "skipped because |")  # fmt: skip
    assert "| two | two | shared | other,tiny | 0.5 | yes | - |" in md
    proc = milabench("list", *common, "--select", "other", "--format", "json")
    assert [r["name"] for r in json.loads(proc.stdout)] == ["two"]
    proc = milabench("list", *common, "--exclude", "first", "--format", "json")
    assert [r["name"] for r in json.loads(proc.stdout)] == ["two", "pair"]


# -- 5. compare --format html -----------------------------------------------------------
@pytest.mark.slow
def test_compare_html(base: Path, tmp_path: Path):
    runs = base / "runs"
    out = tmp_path / "cmp.html"
    proc = milabench("compare", str(runs / "zz-first"), str(runs / "aa-third"),
                     "--format", "html", "--output", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and f"comparison written to {out}" in proc.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert '<table class="comparison">' in page and "<td>steady</td>" in page
    assert 'class="plot plot-ratios"' in page and 'class="ratio"' in page
    assert "no regression (exit code 0)" in page
    for external in ("<script", "src=", "href=", "http://", "https://"):
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    # to standard output by default, the same page
    proc = milabench("compare", str(runs / "zz-first"), str(runs / "aa-third"), "--format", "html")
    assert proc.stdout == page


# -- 6. shell completion ----------------------------------------------------------------
def complete_bash(script: Path, *words: str) -> list[str]:
    code = (
        'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); '
        '_milabench; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    proc = subprocess.run(["bash", "-c", code, str(script), *words], capture_output=True,
                          text=True, check=True, timeout=30)  # fmt: skip
    return [w for w in proc.stdout.splitlines() if w]


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> Path:
    proc = milabench("completion", "bash")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path_factory.mktemp("completion") / "milabench.bash"
    path.write_text(proc.stdout)
    return path


def test_bash_completion(bash_script: Path, tmp_path: Path):
    assert complete_bash(bash_script, "milabench", "rep") == ["report"]
    assert complete_bash(bash_script, "milabench", "run", "--con") == ["--config"]
    assert complete_bash(bash_script, "milabench", "--debug", "li") == ["list"]
    assert complete_bash(bash_script, "milabench", "compare", "--format", "h") == ["html"]
    assert set(complete_bash(bash_script, "milabench", "store", "")) == {"import", "runs"}
    assert complete_bash(bash_script, "milabench", "history", "--method", "") == [
        "changepoints", "outliers"
    ]  # fmt: skip
    assert complete_bash(bash_script, "milabench", "store", "import", "--u") == ["--url"]
    assert complete_bash(bash_script, "milabench", "completion", "z") == ["zsh"]
    # option values: folders for --base, after an option that takes a value
    (tmp_path / "results-x").mkdir()
    (tmp_path / "results-file").write_text("")
    prefix = str(tmp_path / "results-")
    assert complete_bash(bash_script, "milabench", "report", "--base", prefix) == [
        str(tmp_path / "results-x")
    ]
    words = complete_bash(bash_script, "milabench", "report", "--config", "x", "--")
    assert "--runs" in words and "--format" in words and "--config" in words


def test_eval_in_an_interactive_bash_registers_the_completion(bash_script: Path):
    proc = subprocess.run(["bash", "-c", f'eval "$(cat {bash_script})"; complete -p milabench'],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert proc.stdout.strip() == "complete -o filenames -F _milabench milabench"


def test_zsh_completion(tmp_path: Path):
    zsh = require("zsh")["zsh"]
    proc = milabench("completion", "zsh")
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "_milabench"
    script.write_text(proc.stdout)
    assert proc.stdout.startswith("#compdef milabench\n")
    subprocess.run([zsh, "-n", str(script)], check=True, timeout=30)
    # the completion function's logic, with zsh's completion builtins stubbed
    stubs = (
        "compdef() {}; _describe() { local arr=${@[-1]}; print -l -- ${(P)arr}; }; "
        'compadd() { shift; print -l -- "$@"; }; _files() { print "<files $*>"; }; '
        "_message() { print '<value>'; }; "
        'source "$0"; words=("$@"); CURRENT=${#words}; _milabench'
    )

    def complete(*words: str) -> list[str]:
        out = subprocess.run([zsh, "-c", stubs, str(script), *words], capture_output=True,
                             text=True, check=True, timeout=30).stdout  # fmt: skip
        return out.splitlines()

    assert "report:print or write the report of run folders" in complete("milabench", "rep")
    assert any(w.startswith("--config:") for w in complete("milabench", "run", "--con"))
    assert complete("milabench", "report", "--format", "") == [
        "text", "markdown", "md", "csv", "json", "html"
    ]  # fmt: skip
    assert complete("milabench", "compare", "") == ["<files -/>"]
