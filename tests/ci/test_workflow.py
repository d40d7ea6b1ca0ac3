"""The CI recipes of docs/ci.md work as written.

* docs/examples/github-pr-benchmark.yml: its shape (trigger, permissions), and every
  command and file its `run:` steps name exists. Then the workflow's own `run:` steps are
  executed, in order, with bash as GitHub runs them, on two commits of a scratch git
  repository (a tiny benchmark that sleeps 10 ms per step; the head commit sleeps 13 ms:
  a 23% regression, or 10 ms again: no change). GitHub's part is emulated: the checkout is
  a `git clone`, `${{ ... }}` expressions are evaluated from a local context, and `gh` is
  a shim on PATH that records what it was asked to post.
* docs/examples/nightly.sh: run, store import, `milabench history --output --notify`, exit
  code; the webhook secret is never printed. The systemd units pass `systemd-analyze
  verify`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml
from systemtools import require

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
WORKFLOW = EXAMPLES / "github-pr-benchmark.yml"
NIGHTLY = EXAMPLES / "nightly.sh"
CI_AB = ROOT / "scripts" / "ci_ab.py"

BENCH = '''\
"""Tiny deterministic benchmark: paced steps of STEP seconds."""

import time

from benchkit.timing import TimedIterator

STEP = {step}

start = time.perf_counter()
for k, _batch in enumerate(TimedIterator([[0] * 8] * 100_000), 1):
    time.sleep(max(0.0, start + k * STEP - time.perf_counter()))
'''

SUITE = """\
sleeper:
  definition: sleeper
  weight: 1
  plan:
    method: per_gpu
  measure: {warmup_min: 0.1s, warmup_max: 0.3s, min: 0.4s, max: 0.6s, min_observations: 3,
            startup: 60s}
"""


def load_workflow() -> dict:
    wf = yaml.safe_load(WORKFLOW.read_text())
    if True in wf:  # YAML 1.1: the key `on` reads as the boolean True
        wf["on"] = wf.pop(True)
    return wf


def steps() -> list[dict]:
    (job,) = load_workflow()["jobs"].values()
    return job["steps"]


def milabench_help(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "milabench", *words, "--help"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


# --------------------------------------------------------------------------- shape


def test_workflow_shape():
    wf = load_workflow()
    assert "pull_request" in wf["on"]
    assert wf["permissions"] == {"contents": "read", "pull-requests": "write"}
    (job,) = wf["jobs"].values()
    for step in job["steps"]:
        assert ("uses" in step) != ("run" in step), step
    checkout = job["steps"][0]  # emulated by run_workflow: a clone at the PR head
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"] == {"path": "src", "fetch-depth": 0,
                                "ref": "${{ github.event.pull_request.head.sha }}"}  # fmt: skip
    ids = [s.get("id") for s in job["steps"]]
    assert {"install", "trees", "ab"} <= set(ids)
    # the job fails on the last step, after the summary and the comment were written
    verdict = job["steps"][-1]
    assert "steps.ab.outputs.exit" in verdict["env"]["COMPARE_EXIT"]
    assert 'exit "$COMPARE_EXIT"' in verdict["run"]
    comment = next(s for s in job["steps"] if "gh pr comment" in s.get("run", ""))
    assert comment["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert "--edit-last" in comment["run"]


def run_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_run_steps_name_real_commands_and_files():
    text = "\n".join(s["run"] for s in steps() if "run" in s)
    # files: every script path, relative to the checkout (`src/`) or a worktree
    files = set(re.findall(r"(?:src|base|head)/([\w./-]+\.(?:py|sh))", text))
    assert files == {"scripts/ci_ab.py"}
    for f in files:
        assert (ROOT / f).is_file(), f
    # commands: `milabench <sub>` in the workflow and in the driver it calls
    subs = set(re.findall(r"milabench\s+([a-z][\w-]*)", text))
    src = CI_AB.read_text()
    subs |= set(re.findall(r'milabench\(args, side, "(\w+)"', src))
    line = next(ln for ln in src.splitlines() if "for command in" in ln)
    subs |= set(re.findall(r'"(\w+)"', line))
    subs |= {"compare"} if '"compare"' in src else set()
    assert {"run", "compare", "install", "prepare"} <= subs
    for sub in sorted(subs):
        proc = milabench_help(sub)
        assert proc.returncode == 0, f"milabench {sub}: {proc.stderr[-500:]}"
    # options the driver passes exist
    assert "--run-name" in milabench_help("run").stdout
    assert "markdown" in milabench_help("compare").stdout
    for line in run_lines(text):
        if line.startswith(("gh ", "|| gh ")):
            assert "--body-file comment.md" in line


def test_ci_ab_setup_arguments():
    spec = importlib.util.spec_from_file_location("ci_ab", CI_AB)
    ci_ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ci_ab)
    run_args = ["--use-current-env", "--repeat", "2", "--select", "a,b", "--dash=no",
                "--override", "x.y=1", "--validations", "all"]  # fmt: skip
    assert ci_ab.suite_args(run_args) == ["--use-current-env", "--select", "a,b",
                                          "--override", "x.y=1"]  # fmt: skip
    args = ci_ab.parse_args(["b", "h", "--suite", "s.yaml", "--base-dir", "d", "--", "--x"])
    assert (args.rounds, args.run_args, args.output) == (3, ["--x"], Path("comment.md"))


def test_nightly_names_real_commands():
    text = NIGHTLY.read_text()
    subs = re.findall(r'"\$\{mb\[@\]\}" ([a-z]+(?: [a-z]+)?)', text)
    assert subs == ["run", "store import", "history"]
    assert milabench_help("run").returncode == 0
    assert milabench_help("store", "import").returncode == 0
    assert subprocess.run(["bash", "-n", str(NIGHTLY)]).returncode == 0
    assert os.access(NIGHTLY, os.X_OK)


def test_systemd_units_verify(tmp_path):
    analyze = require("systemd-analyze")["systemd-analyze"]
    for name in ("milabench-nightly.service", "milabench-nightly.timer"):
        text = (EXAMPLES / name).read_text()
        text = text.replace("ExecStart=/srv/bench/nightly.sh", f"ExecStart={NIGHTLY}")
        (tmp_path / name).write_text(text)
    proc = subprocess.run(
        [analyze, "verify", *(str(p) for p in sorted(tmp_path.iterdir()))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "nightly" not in proc.stderr, proc.stderr


# --------------------------------------------------------------- the workflow, run


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")  # fmt: skip
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    return proc.stdout.strip()


def scratch_repo(path: Path, head_step: float) -> tuple[str, str]:
    """A user's repository with the workflow, the driver, a suite and one benchmark:
    commit 1 (base) sleeps 10 ms per step, commit 2 (head) `head_step`."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(WORKFLOW, path / ".github" / "workflows" / "benchmark.yml")
    (path / "scripts").mkdir()
    shutil.copy(CI_AB, path / "scripts" / "ci_ab.py")
    (path / "benchmarks" / "sleeper").mkdir(parents=True)
    (path / "benchmarks" / "ci.yaml").write_text(SUITE)
    main = path / "benchmarks" / "sleeper" / "main.py"
    main.write_text(BENCH.format(step=0.010))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    base = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "pr")
    main.write_text(BENCH.format(step=head_step))
    (path / "README.md").write_text("the PR\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "head")
    return base, git(path, "rev-parse", "HEAD")


def evaluate(value: str, ctx: dict) -> str:
    """`${{ a.b || 'x' }}` with dotted names and string literals: all this workflow uses
    in the values a `run:` step sees (anything else fails the test)."""

    def one(match: re.Match) -> str:
        for operand in match.group(1).split("||"):
            operand = operand.strip()
            if re.fullmatch(r"'[^']*'", operand):
                result = operand[1:-1]
            else:
                assert re.fullmatch(r"[\w.-]+", operand), f"unsupported: {operand}"
                result = ctx
                for part in operand.split("."):
                    result = result.get(part, "") if isinstance(result, dict) else ""
            if result:
                return str(result)
        return ""

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


GH_SHIM = """#!/bin/sh
# fake GitHub CLI: records its arguments and the body it was given
printf '%s\\n' "$*" >> "$GH_LOG"
[ "$GH_TOKEN" = "fake-token" ] || exit 4
case "$*" in
  *--edit-last*) echo "no comments found for current user" >&2; exit 1 ;;
esac
while [ $# -gt 0 ]; do
  if [ "$1" = "--body-file" ]; then cp "$2" "$GH_LOG.body"; fi
  shift
done
"""


def run_workflow(tmp_path: Path, head_step: float) -> dict:
    origin = tmp_path / "origin"
    base_sha, head_sha = scratch_repo(origin, head_step)
    ws, temp, bin_dir = tmp_path / "ws", tmp_path / "runner-temp", tmp_path / "bin"
    for d in (ws, temp, bin_dir):
        d.mkdir()
    # actions/checkout with `path: src`, fetch-depth 0 (at the head: no merge commit here)
    git(ws, "clone", "-q", str(origin), "src")
    git(ws / "src", "checkout", "-q", "--detach", head_sha)
    # `python` is this interpreter (milabench installed), `gh` the recording shim
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (bin_dir / "gh").write_text(GH_SHIM)
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    summary = tmp_path / "step-summary.md"
    summary.touch()
    ctx = {
        "github": {"token": "fake-token",
                   "event": {"pull_request": {"number": 7, "base": {"sha": base_sha},
                                              "head": {"sha": head_sha}}}},
        "vars": {"MILABENCH_ROUNDS": "2", "MILABENCH_RUN_ARGS": "--use-current-env"},
        "runner": {"temp": str(temp)},
        "steps": {},
    }  # fmt: skip
    wf = load_workflow()
    (job,) = wf["jobs"].values()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    base_env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        GITHUB_WORKSPACE=str(ws),
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_REPOSITORY="me/project",
        RUNNER_TEMP=str(temp),
        RUNNER_NAME="local",
        GH_LOG=str(tmp_path / "gh.log"),
        MILABENCH_RUN_DOCTOR="off",  # its half-second look at the machine is not tested here
    )
    results, skipped = {}, []
    for k, step in enumerate(job["steps"]):
        name = step.get("name") or step.get("uses")
        if "uses" in step or step.get("id") == "install":
            # actions: emulated above or irrelevant here; install: milabench is installed
            skipped.append(step.get("id") or step["uses"].split("@")[0])
            continue
        env = dict(base_env)
        for scope in (wf.get("env", {}), job.get("env", {}), step.get("env", {})):
            env.update({key: evaluate(v, ctx) for key, v in scope.items()})
        output = tmp_path / f"output-{k}"
        output.touch()
        env["GITHUB_OUTPUT"] = str(output)
        script = tmp_path / f"step-{k}.sh"
        script.write_text(step["run"])
        started = time.monotonic()
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=ws, env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        results[name] = proc
        print(f"step {name!r}: exit {proc.returncode} in {time.monotonic() - started:.1f}s")
        if "id" in step:
            outputs = dict(ln.split("=", 1) for ln in output.read_text().splitlines() if ln)
            ctx["steps"][step["id"]] = {"outputs": outputs, "outcome": "success"}
    assert skipped == ["actions/checkout", "actions/setup-python", "install",
                       "actions/upload-artifact"]  # fmt: skip
    return {"results": results, "ws": ws, "summary": summary, "gh": tmp_path / "gh.log",
            "temp": temp, "head": head_sha}  # fmt: skip


def check_common(out: dict) -> str:
    results = out["results"]
    names = list(results)
    for name in names[:-1]:
        proc = results[name]
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-3000:])
    comment = (out["ws"] / "comment.md").read_text()
    print(comment)
    assert comment.startswith("<!-- milabench-ab -->\n**Benchmarks**: base `")
    assert f"vs head `{out['head'][:7]}`, 2 interleaved rounds each on `local`" in comment
    assert "| bench | n_a | n_b | median_a | median_b | ratio |" in comment
    assert re.search(r"^\| sleeper \|", comment, re.M)
    assert "`runs/base-0,runs/base-1` (A) vs `runs/head-0,runs/head-1` (B)" in comment
    runs = out["temp"] / "milabench" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["base-0", "base-1", "head-0", "head-1"]
    # interleaved: base head, head base
    ab_log = results["Interleaved A/B rounds and comparison"].stderr
    order = re.findall(r"ci_ab: round (\d) (base|head): exit 0", ab_log)
    assert order == [("0", "base"), ("0", "head"), ("1", "head"), ("1", "base")], ab_log
    # the job summary got the comment; gh tried --edit-last, then posted a new comment
    assert out["summary"].read_text() == comment
    calls = out["gh"].read_text().splitlines()
    assert calls == [
        "pr comment 7 --repo me/project --body-file comment.md --edit-last",
        "pr comment 7 --repo me/project --body-file comment.md",
    ]
    assert Path(str(out["gh"]) + ".body").read_text() == comment
    return comment


@pytest.mark.slow
def test_workflow_fails_on_a_regression(tmp_path):
    started = time.monotonic()
    out = run_workflow(tmp_path, head_step=0.013)
    comment = check_common(out)
    row = next(ln for ln in comment.splitlines() if ln.startswith("| sleeper |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    ratio = float(cells[5])
    assert 0.72 < ratio < 0.82, row  # 10 ms / 13 ms = 0.77
    assert cells[-1] == "REGRESSION", row
    assert "Regressions: sleeper" in comment
    assert "compare exit code 1." in comment
    verdict = out["results"]["Verdict"]
    assert verdict.returncode == 1
    assert "::error title=milabench::regression confirmed over 2 interleaved rounds" in (
        verdict.stdout
    )
    print(f"regression case: {time.monotonic() - started:.1f}s")


@pytest.mark.slow
def test_workflow_passes_when_head_is_as_fast(tmp_path):
    started = time.monotonic()
    out = run_workflow(tmp_path, head_step=0.010)
    comment = check_common(out)
    row = next(ln for ln in comment.splitlines() if ln.startswith("| sleeper |"))
    assert row.endswith("| ok |") and "Regressions: none" in comment, comment
    assert "compare exit code 0." in comment
    assert out["results"]["Verdict"].returncode == 0
    print(f"no-change case: {time.monotonic() - started:.1f}s")


# --------------------------------------------------------------------- nightly


class Hook(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Hook.received.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    Hook.received = []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook/s3cr3t-t0ken", Hook.received
    server.shutdown()
    server.server_close()


FAKE_MB = """\
import json, os, sys
if sys.argv[1] == "history":  # stands in for `milabench history`: records its arguments
    with open(os.environ["HISTORY_LOG"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
    sys.exit(int(os.environ.get("HISTORY_EXIT", "0")))
os.execv(sys.executable, [sys.executable, "-m", "milabench", *sys.argv[1:]])
"""


def nightly_setup(tmp_path: Path, step: float) -> tuple[Path, dict]:
    suite_dir = tmp_path / "suite"
    (suite_dir / "sleeper").mkdir(parents=True, exist_ok=True)
    (suite_dir / "ci.yaml").write_text(SUITE)
    (suite_dir / "sleeper" / "main.py").write_text(BENCH.format(step=step))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    env.update(MILABENCH_CONFIG=str(suite_dir / "ci.yaml"), MILABENCH_BASE=str(tmp_path / "mb"),
               SITE=str(tmp_path / "site"), RUN_ARGS="--use-current-env",
               MILABENCH=f"{shlex.quote(sys.executable)} -m milabench",
               MILABENCH_RUN_DOCTOR="off")  # fmt: skip
    return suite_dir, env


def nightly(env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(NIGHTLY)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("history_exit", [0, 1])
def test_nightly_runs_imports_and_calls_history(tmp_path, webhook, history_exit):
    url, _ = webhook
    _, env = nightly_setup(tmp_path, 0.010)
    (tmp_path / "fake_mb.py").write_text(FAKE_MB)
    env.update(MILABENCH=f"{shlex.quote(sys.executable)} {tmp_path / 'fake_mb.py'}",
               WEBHOOK_URL=url, HISTORY_LOG=str(tmp_path / "history.log"),
               HISTORY_EXIT=str(history_exit))  # fmt: skip
    proc = nightly(env, tmp_path)
    assert proc.returncode == history_exit, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "mb" / "runs").iterdir()
    assert re.fullmatch(r"nightly\.\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", run_dir.name)
    calls = [json.loads(ln) for ln in (tmp_path / "history.log").read_text().splitlines()]
    assert calls == [["history", "--output", str(tmp_path / "site"), "--new", "3", "--notify", url]]
    assert "s3cr3t" not in proc.stdout + proc.stderr  # the webhook URL is never printed
    assert "--notify <WEBHOOK_URL>" in proc.stdout
    assert f"history exit {history_exit}" in proc.stdout
    # the run is in the store
    runs = subprocess.run([sys.executable, "-m", "milabench", "store", "runs"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run_dir.name in runs.stdout, runs.stdout + runs.stderr


@pytest.mark.slow
def test_nightly_with_real_history_alerts_on_a_slowdown(tmp_path, webhook):
    """7 nights at 10 ms a step, then 13 ms: the change point needs 3 runs after it, so
    the alert comes with the second or third slow night: the split may land one run early,
    with the last fast night inside the slow segment of three (its median is still slow;
    seen once in the full test run). That night fails (exit 1) and posts the alert; every
    night before it passes and posts nothing. --alpha 0.05: 10 runs are too few for the
    default 0.01 (a permutation test of 10 values)."""
    url, received = webhook
    suite_dir, env = nightly_setup(tmp_path, 0.010)
    env.update(WEBHOOK_URL=url, HISTORY_ARGS="--alpha 0.05")
    codes = []
    first_alert = None
    for night in range(10):
        if night == 7:
            (suite_dir / "sleeper" / "main.py").write_text(BENCH.format(step=0.013))
        proc = nightly(env, tmp_path)
        codes.append(proc.returncode)
        assert "s3cr3t" not in proc.stdout + proc.stderr
        assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
        if night == 0:
            assert (tmp_path / "site" / "index.html").is_file()
        if received and first_alert is None:
            first_alert = night
            assert proc.returncode == 1 and len(received) == 1, (night, codes, received)
    assert first_alert in (8, 9), (codes, received)
    assert codes[:first_alert] == [0] * first_alert, codes
    assert received[0][0] == "/hook/s3cr3t-t0ken"
    assert b"sleeper" in received[0][1]
