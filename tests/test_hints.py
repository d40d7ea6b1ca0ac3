"""What a machine cannot run is said before it costs anything, and every command a
message tells a person to run works when pasted.

The GPU suite on a machine without a GPU: `run`, `prepare` and `install` refuse it in one
line naming the missing GPU and the smoke suite, before anything is written under the
base; `list` says the same as a note. Every hint is then pasted, as a person would,
into the real command line (an install with ``--dry-run`` added, so that nothing is
downloaded): the suite, base and selection it names are the failing command's, so the
pasted command selects what it promises instead of answering "no benchmark named ...".
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU = {"MILABENCH_GPU_ARCH": "cpu"}
HINT = re.compile(r"`(milabench [^`]+)`")


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`milabench ARGS` from the repository (hints show paths relative to it), on the
    CPU unless `env` says otherwise."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args], capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=180, cwd=REPO,
        env={**base, "MILABENCH_DASH": "no", **(CPU if env is None else env)},
    )  # fmt: skip


def hints(text: str) -> list[list[str]]:
    """Every backquoted ``milabench ...`` command of a message, as argv."""
    return [shlex.split(found) for found in HINT.findall(text)]


def paste(argv: list[str], *extra: str) -> subprocess.CompletedProcess:
    assert argv[0] == "milabench", argv
    return cli(*argv[1:], *extra)


def accepted(proc: subprocess.CompletedProcess) -> None:
    """A pasted command that its parser and its suite accept."""
    out = proc.stdout + proc.stderr
    assert proc.returncode != 2, out
    for refusal in ("no benchmark named", "unrecognized arguments", "which this machine lacks"):
        assert refusal not in out, out


def test_the_gpu_suite_on_a_cpu_is_refused_in_one_line_before_anything_is_written(tmp_path):
    base = tmp_path / "base"
    start = time.monotonic()
    proc = cli("run", "--config", "config/standard.yaml", "--select", "resnet50",
               "--base", str(base))  # fmt: skip
    assert time.monotonic() - start < 10
    assert proc.returncode == 2 and proc.stdout == ""
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith("milabench: error: config/standard.yaml needs a GPU")
    assert "which this machine lacks (arch cpu, no accelerator)" in line
    assert "config/standard-smoke.yaml" in line and "--ignore-requirements" in line
    assert not base.exists()  # no run folder, no doctor.json, nothing prepared
    assert hints(line) == [["milabench", "run", "--select", "resnet50", "--config",
                            "config/standard-smoke.yaml", "--base", str(base)]]  # fmt: skip
    for command in ("prepare", "install"):
        proc = cli(command, "--config", "config/standard.yaml", "--base", str(base))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "needs a GPU" in proc.stderr and not base.exists(), proc.stderr
        assert hints(proc.stderr) == [["milabench", command, "--config",
                                       "config/standard-smoke.yaml", "--base", str(base)]]  # fmt: skip
    proc = cli("install", "--config", "config/standard.yaml", "--dry-run")
    assert proc.returncode == 2 and "needs a GPU" in proc.stderr  # a dry run says it too


def test_list_says_it_once_and_every_row_says_why():
    proc = cli("list", "--config", "config/standard.yaml", "--format", "json")
    assert proc.returncode == 0
    note = proc.stderr.strip()
    assert len(note.splitlines()) == 1 and note.startswith("milabench: note: ")
    assert "needs a GPU" in note and "config/standard-smoke.yaml" in note
    rows = json.loads(proc.stdout)
    assert {row["skip"] for row in rows} == {"requires arch != 'cpu'"}
    proc = cli("list", "--config", "config/standard.yaml", "--format", "json",
               "--ignore-requirements")  # fmt: skip
    assert "going on (--ignore-requirements)" in proc.stderr
    skips = {row["name"]: row["skip"] for row in json.loads(proc.stdout)}
    assert skips["resnet50"] is None and skips["resnet152-ddp-gpus"] == "requires gpu['count'] > 1"
    proc = cli("list", "--config", "config/standard-smoke.yaml", "--format", "json")
    assert proc.returncode == 0 and "needs" not in proc.stderr  # made for this machine


def test_a_gpu_machine_is_told_nothing():
    proc = cli("list", "--config", "config/standard.yaml", "--select", "resnet50",
               env={"MILABENCH_FAKE_GPUS": "cuda:1:81920"})  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == ""


def test_every_hint_works_when_pasted(tmp_path):
    """From the refusal to the smoke suite's run, from its missing environment to the
    install that makes it: each step is the previous message's command, pasted."""
    base = tmp_path / "base"
    refused = cli("run", "--config", "config/standard.yaml", "--select", "resnet50",
                  "--base", str(base))  # fmt: skip
    [smoke_run] = hints(refused.stderr)
    ran = paste(smoke_run, "--run-name", "pasted")
    accepted(ran)
    assert ran.returncode == 1  # its environment is not installed: the report says how
    report = json.loads((base / "runs" / "pasted" / "report.json").read_text())
    [error] = report["errors"]
    [install] = hints(error["line"])
    assert install[:4] == ["milabench", "install", "--select", "resnet50"], install
    assert install[4:] == ["--config", "config/standard-smoke.yaml", "--base", str(base)]
    dry = paste(install, "--dry-run")
    accepted(dry)
    assert dry.returncode == 0 and f"[torch] variant cpu, {base / 'venv' / 'torch'}" in dry.stdout
    where = ("--config", "config/standard-smoke.yaml", "--base", str(base))
    for args in (("prepare", "--select", "resnet50", *where), ("dev", "resnet50", *where, "--",
                 "true")):  # fmt: skip
        proc = cli(*args)  # the same hint where they find no environment
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert hints(proc.stdout + proc.stderr) == [install], proc.stdout + proc.stderr
    # the doctor a refused run names is this run's, and the report's "start one" too
    proc = cli("report", "--base", str(tmp_path / "empty"))
    [start] = hints(proc.stderr)
    assert start == ["milabench", "run", "--base", str(tmp_path / "empty")]
    from milabench.cli import build_parser

    parser, _ = build_parser("run")
    parser.parse_args(start[1:])  # a command the parser takes, in the base asked about


def test_the_doctor_command_of_a_refused_run_is_whole(tmp_path, monkeypatch):
    from milabench.cli import build_parser
    from milabench.cli.common import suite_command

    monkeypatch.chdir(REPO)  # hints show paths relative to the working folder
    parser, _ = build_parser("run")
    args = parser.parse_args(["run", "--config", "config/standard-smoke.yaml", "--select",
                              "resnet50", "--base", str(tmp_path)])  # fmt: skip
    doctor = shlex.split(suite_command(args, "doctor"))
    assert doctor == ["milabench", "doctor", "--select", "resnet50", "--config",
                      "config/standard-smoke.yaml", "--base", str(tmp_path)]  # fmt: skip
    proc = paste(doctor, "--problems", "--sample", "0.1")
    accepted(proc)
    assert "milabench doctor:" in proc.stdout


def test_an_empty_store_names_the_import_of_the_latest_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests" / "report"))
    from synth import entry, write_file

    base = tmp_path / "base"
    proc = cli("history", "--base", str(base))
    assert proc.returncode == 2
    assert hints(proc.stderr) == [["milabench", "run", "--base", str(base)]]
    write_file(base / "runs" / "first", "a.D0", entry("a"), rates=[10.0] * 6)
    proc = cli("history", "--base", str(base))
    [command] = hints(proc.stderr)
    assert command == ["milabench", "store", "import", str(base / "runs" / "first"),
                       "--base", str(base)]  # fmt: skip
    imported = paste(command)
    assert imported.returncode == 0 and "first: imported 1 benchmark(s)" in imported.stdout
    proc = cli("history", "--base", str(base), "--format", "json")
    assert proc.returncode == 0, proc.stderr  # the store the hint named is the one read
