"""scripts/first_light.py: the entries it chooses, its hard budget against an entry that
hangs, milabench installed from a wheelhouse into a Python without pip, and a whole call
on the smoke suite's flops entries in this Python (``--use-current-env``)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "first_light.py"
SMOKE = ROOT / "config" / "standard-smoke.yaml"
sys.path.insert(0, str(ROOT / "scripts"))

from firstlight import procs, selection, setup, summary  # noqa: E402


def first_light(out: Path, *args: str, config: Path = SMOKE, python: str = sys.executable,
                timeout: float = 600, **variables: str) -> subprocess.CompletedProcess:  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    env["MILABENCH_GPU_ARCH"] = "cpu"
    env.update(variables)
    return subprocess.run([python, str(SCRIPT), str(out), "--config", str(config), *args],
                          capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=ROOT)  # fmt: skip


def state(out: Path) -> dict[str, str]:
    """Each entry's status, in the order run."""
    data = json.loads((out / "first-light.json").read_text())
    return {e["name"]: e["status"] for e in data["entries"]}


# ------------------------------------------------------------------- the entries chosen


def row(name: str, weight: float = 1, skip: str | None = None, **kw) -> dict:
    return {"name": name, "weight": weight, "skip": skip, "enabled": True, "selected": True,
            "install_group": "torch", **kw}  # fmt: skip


def test_the_default_is_the_peak_then_weighted_entries_in_order_of_value():
    rows = [row("resnet50"), row("resnet50-noio", 0), row("lightning-gpus",
            skip="requires gpu['count'] > 1"), row("vjepa-single"), row("reformer"),
            row("brax"), row("fp32", 0), row("bf16", 0), row("pna"), row("newcomer")]  # fmt: skip
    choice = selection.choose(rows)
    assert choice.run == ["bf16", "resnet50", "reformer", "pna", "newcomer"]
    assert choice.left_out["lightning-gpus"] == "skipped on this machine: requires gpu['count'] > 1"
    assert "24 GB of video" in choice.left_out["vjepa-single"]
    assert "600 s" in choice.left_out["brax"]
    assert "resnet50-noio" not in choice.left_out and "fp32" not in choice.left_out


def test_an_explicit_selection_runs_in_suite_order_less_what_cannot_run():
    rows = [row("vjepa-single"), row("fp32", 0), row("ppo"), row("x"),
            row("dinov2-giant-gpus", skip="requires gpu['count'] > 1")]  # fmt: skip
    choice = selection.choose(rows, select=["ppo", "dinov2-giant-gpus", "fp32", "vjepa-single"],
                              not_carried={"ppo": "needs brax (52 MiB)"})  # fmt: skip
    assert choice.run == ["vjepa-single", "fp32"]
    assert choice.left_out == {
        "ppo": "not in the wheelhouse: needs brax (52 MiB)",
        "dinov2-giant-gpus": "skipped on this machine: requires gpu['count'] > 1",
    }
    default = selection.choose(rows, exclude=["ppo"])
    assert "ppo" not in default.run and "ppo" not in default.left_out
    with pytest.raises(selection.UnknownEntry, match="--select ppp: no entry .*'ppo'"):
        selection.choose(rows, select=["ppp"])


def test_an_entry_is_selected_alone_by_its_name():
    """milabench's --select matches groups and tags: `lightning` would also run
    `lightning-gpus` (group lightning); first light excludes it by name."""
    rows = [row("lightning", group="lightning", tags=["lightning", "monogpu"]),
            row("lightning-gpus", group="lightning", tags=["lightning", "multigpu"]),
            row("resnet50", group="torchvision", tags=["resnet"])]  # fmt: skip
    assert selection.only("lightning", rows) == [
        "--select", "lightning", "--exclude", "lightning-gpus"]  # fmt: skip
    assert selection.only("resnet50", rows) == ["--select", "resnet50"]
    choice = selection.choose(rows, select=["lightning"])
    assert choice.run == ["lightning"]


def test_an_entry_that_would_not_fit_waits_and_a_cheaper_one_runs():
    """The first call on an H200 started llama with 70 s left, 46 s of them for its run,
    which its cap cut off; it never reached the two 30-s LLM entries after it. Replayed
    with the call's own figures: llama waits, llm-lora-single runs, none is cut off."""
    h200, suite = ["NVIDIA H200"], "first-light.yaml"
    assert selection.expected_seconds("llama", suite, h200) == 55.0 * selection.MARGIN
    assert selection.expected_seconds("llama", suite, ["NVIDIA H100 80GB HBM3"]) is not None
    for other in (("llama", "first-light-smoke.yaml", h200), ("llama", suite, []),
                  ("llama", suite, ["NVIDIA A100-SXM4-80GB"]), ("newcomer", suite, h200)):  # fmt: skip
        assert selection.expected_seconds(*other) is None, other
    why = selection.wait_reason("llama", 46, 127, suite, h200)
    assert why == "waits for the next call: expected 69 s, 46 s left"
    assert selection.wait_reason("llm-lora-single", 46, 127, suite, h200) is None
    assert selection.wait_reason("llama", 46, 40, suite, h200) is None  # the cap rules
    assert selection.wait_reason("llama", 46, 127, "other.yaml", h200) is None
    fl = _script()
    left, ran, cut = 69.5, [], []  # what the call had left when dinov2-giant-gpus ended
    for name in ("llama", "llm-lora-single", "llm-lora-ddp-gpus"):
        usable = left - fl.GRACE - fl.RUN_OVERHEAD  # as the call gives it to the run
        if selection.wait_reason(name, usable, 127, suite, h200) is None:
            ran.append(name)
            cut += [name] if selection.MEASURED_SECONDS[name] > usable else []
            left -= selection.MEASURED_SECONDS[name]
    assert ran == ["llm-lora-single"] and not cut


def _script():
    """scripts/first_light.py as a module."""
    spec = __import__("importlib").util.spec_from_file_location("fl", SCRIPT)
    module = __import__("importlib").util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_install_failures_are_read_from_the_install_table():
    script = __import__("importlib").util.spec_from_file_location("fl", SCRIPT)
    module = __import__("importlib").util.module_from_spec(script)
    script.loader.exec_module(module)
    table = (
        "group  status   time   benchmarks\n"
        "hf     checked  3.5 s  bert-tf32-fp16\n"
        "torch  failed   1.9 s  resnet50,bf16  validate: No module named 'torchvision'\n"
        "jax    failed   0.4 s  ppo\n"
    )
    assert module.install_failures(table) == {
        "torch": "validate: No module named 'torchvision'",
        "jax": "failed",
    }


def test_mfu_against_the_measured_peak_only_for_entries_counted_against_bf16(tmp_path):
    """The H200's first light held fp32 graph entries against the bf16 matmul (pna: 3.9%
    of the fp32 datasheet, "0.4%" of the measured bf16 peak): an entry whose datasheet
    peak is not bf16's gets no measured-peak MFU; fp16 and bf16 entries do."""
    state = {"entries": [{"name": n, "status": "done", "seconds": 20}
                         for n in ("bf16", "resnet50", "pna")]}  # fmt: skip
    rows = {
        "bf16": {"tflops": "655.0", "mfu": "0.662", "peak_tflops": "989.4"},
        "resnet50": {"tflops": "65.5", "mfu": "0.0662", "peak_tflops": "989.4"},
        "pna": {"tflops": "2.63", "mfu": "0.0393", "peak_tflops": "66.9"},
    }
    lines = {x.split(" | ")[0][2:]: x.split(" | ")
             for x in summary.render(state, rows, tmp_path).splitlines()
             if x.startswith("| ") and x.split(" | ")[0][2:] in rows}  # fmt: skip
    mfu_datasheet, mfu_measured = 7, 8  # the table's columns
    assert lines["bf16"][mfu_measured] == "100"
    assert lines["resnet50"][mfu_datasheet] == "6.62" and lines["resnet50"][mfu_measured] == "10"
    assert lines["pna"][mfu_datasheet] == "3.93" and lines["pna"][mfu_measured] == "-"
    assert summary.measured_mfu(rows["pna"], {"pna": rows["pna"]}) is None  # no bf16 row


def test_the_summary_puts_peak_memory_beside_estimate_and_upstream(tmp_path):
    """The summary's memory columns: the report's peak and start-up estimate, and
    upstream's observation on a GPU of the machine's name (from the recorded data)."""
    machine = tmp_path / "machine.json"
    machine.write_text(json.dumps({"accelerators": {"gpus": {"0": {"product": "NVIDIA H200"}}}}))
    upstream = summary.upstream_memory(summary.gpu_names(machine))
    assert upstream["bert-tf32-fp16"] > 10_000 and summary.upstream_memory(["cpu"]) == {}
    assert summary.upstream_memory(["NVIDIA H200 NVL"]) == {}  # another card
    state = {"entries": [{"name": "bert-tf32-fp16", "status": "done", "seconds": 30}]}
    rows = {"bert-tf32-fp16": {"rate": "500", "peak_memory": "15100", "memory_estimate": "16000",
                               "mean_load": "0.875"}}  # fmt: skip
    text = summary.render(state, rows, tmp_path, upstream)
    assert (
        "| GPU load % | peak GPU MiB | estimate MiB | torch MiB (allocated / reserved) "
        "| upstream MiB |"
    ) in text
    assert "Warnings" not in text  # none in the report
    rows["bert-tf32-fp16"]["warnings"] = "jpeg loader: prefetching 2 batches per worker"
    warned = summary.render(state, rows, tmp_path, upstream)
    assert "\n* bert-tf32-fp16: jpeg loader: prefetching 2 batches per worker\n" in warned
    line = next(x for x in text.splitlines() if x.startswith("| bert-tf32-fp16 |"))
    assert f"| 87.5 | 15100 | 16000 | - | {upstream['bert-tf32-fp16']:.0f} |" in line
    rows["bert-tf32-fp16"].update(torch_peak_allocated="13000", torch_peak_reserved="14500")
    line = next(x for x in summary.render(state, rows, tmp_path, upstream).splitlines()
                if x.startswith("| bert-tf32-fp16 |"))  # fmt: skip
    assert "| 15100 | 16000 | 13000 / 14500 |" in line  # the tensors, then the reserve


def test_the_summary_names_the_machine_as_the_record_needs_it(tmp_path):
    """Device, driver and versions on one line of first-light.md (what docs/benchmarks.md
    records with the figures), read from ``milabench machine``'s JSON."""
    machine = tmp_path / "machine.json"
    machine.write_text(json.dumps({
        "python": "3.12.3", "date": "2026-12-01T10:00:00+00:00",
        "milabench": {"commit": "0123456789abcdef"}, "torch": {"version": "2.11.0+cu130"},
        "accelerators": {"arch": "cuda", "gpus": {"0": {"product": "NVIDIA H200",
                                                        "memory": {"total": 143771}}},
                         "system": {"driver_version": "580.159.04",
                                    "cuda_driver_version": "13000"}},
        "memory": {"total": 16 * 2**30, "may_grow": "virtio-mem", "shm": 8 * 2**30}}))  # fmt: skip
    line = summary.machine_line(machine)
    assert line == (
        "machine: 1 x NVIDIA H200 (143771 MiB), driver 580.159.04 (CUDA 13.0), torch "
        "2.11.0+cu130, host 16.0 GiB (virtio-mem), /dev/shm 8.0 GiB, Python 3.12.3, "
        "milabench 01234567; 2026-12-01T10:00:00+00:00"
    )
    # a VM's memory that grew while the call ran: both figures
    grown = summary.machine_line(machine, 120 * 2**30)
    assert "host 16.0 GiB (120.0 GiB later; virtio-mem), /dev/shm 8.0 GiB" in grown
    text = summary.render({"entries": []}, {}, tmp_path, machine=line)
    assert f"\n\n{line}\n" in text
    assert summary.machine_line(tmp_path / "absent.json") is None


def test_the_summary_puts_each_rate_beside_upstreams_and_names_a_parity_question(tmp_path):
    """Upstream's rate on the machine's GPU family at the same batch size beside ours:
    within 5%, a parity question beyond, not comparable where the report says so, not
    compared for a figure of upstream's whole node; another form factor never matched."""
    rates = summary.upstream_rates(["NVIDIA H200"])
    assert rates is not None and rates.gpu == "H200" and "config/scaling/H200.yaml" in rates.source
    assert summary.upstream_rates(["NVIDIA H100 80GB HBM3"]).gpu == "H100"
    assert summary.upstream_rates(["AMD Instinct MI325X"]).gpu == "MI325"
    for other in (["NVIDIA H200 NVL"], ["NVIDIA H100 PCIe"], ["cpu"], []):
        assert summary.upstream_rates(other) is None, other
    up = {n: rates.entries[n]["median"] for n in ("resnet50", "bert-tf32-fp16", "llava-single")}
    assert rates.entries["lightning-gpus"]["per"] == "node"
    mem = {n: rates.entries[n]["memory"] for n in ("resnet50", "bert-tf32-fp16")}
    rows = {
        "resnet50": {
            "perf": str(up["resnet50"] * 0.97),
            "parity": "same",
            "peak_memory": str(mem["resnet50"] * 1.02),
        },
        "bert-tf32-fp16": {
            "perf": str(up["bert-tf32-fp16"] * 0.8),
            "peak_memory": str(mem["bert-tf32-fp16"] * 0.9),
        },
        "llava-single": {"perf": str(up["llava-single"] * 2)},
        "lightning-gpus": {"perf": "1200"},
        "reformer": {},
    }
    names = ["resnet50", "bert-tf32-fp16", "llava-single", "lightning-gpus", "reformer"]
    state = {"entries": [{"name": n, "status": "failed" if n == "reformer" else "done"}
                         for n in names]}  # fmt: skip
    (tmp_path / "report.json").write_text(json.dumps({"upstream": {"not_comparable": [
        {"name": "llava-single", "reason": "stand-in input: llava-instruct not prepared"}]}}))  # fmt: skip
    notes = summary.not_comparable(tmp_path / "report.json")
    text = summary.render(state, rows, tmp_path, {}, rates, notes)
    section = text.split("Against upstream's H200", 1)[1]
    cells = {c[1]: c for c in (x.split("|") for x in section.splitlines())
             if len(c) > 2 and c[1].strip() not in ("", "entry", "---")}  # fmt: skip
    verdict = {k.strip(): c[7].strip() for k, c in cells.items()}
    memory = {k.strip(): c[11].strip() for k, c in cells.items()}
    assert memory == {"resnet50": "within 5%", "bert-tf32-fp16": "parity question: less memory "
                      "by 10%", "llava-single": "-", "lightning-gpus": "-"}  # fmt: skip
    assert verdict == {
        "resnet50": "within 5%",
        "bert-tf32-fp16": "parity question: slower by 20%",
        "llava-single": "not comparable: stand-in input: llava-instruct not prepared",
        "lightning-gpus": "not compared: upstream's figure is for every GPU of its node",
    }
    line = next(x for x in text.splitlines() if x.startswith("| bert-tf32-fp16 | done"))
    assert "| -20.0% |" in line
    assert summary.render(state, rows, tmp_path).count("Against upstream") == 0


# ------------------------------------------------------------- processes and the budget


def bounded_by_a_subreaper(code: str, log: Path, *, timeout: float) -> list[str]:
    """``procs.run_bounded`` of ``python -c code`` (grace 1 s) in a process of its own
    that is its subreaper, as first light is: [rc, killed, seconds] as printed."""
    driver = (
        f"import sys, time; sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
        "from pathlib import Path\n"
        "from firstlight import procs\n"
        "assert procs.become_subreaper()\n"
        "start = time.monotonic()\n"
        f"done = procs.run_bounded([sys.executable, '-c', {code!r}], timeout={timeout}, "
        f"grace=1, log=Path({str(log)!r}))\n"
        "print(done.rc, done.killed, round(time.monotonic() - start, 1))\n"
    )
    result = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_a_bounded_command_is_stopped_and_nothing_it_started_survives(tmp_path):
    """A command that ignores Ctrl-C and leaves a grandchild in a session of its own:
    stopped at its timeout plus the grace, and both processes are gone. Run in a Python
    of its own, which becomes the subreaper (never the test worker)."""
    pids = tmp_path / "pids"
    code = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(300)'], "
        "start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(300)\n"
    )
    rc, killed, seconds = bounded_by_a_subreaper(code, tmp_path / "log.txt", timeout=2)
    assert rc == "None" and int(killed) >= 1 and float(seconds) < 5
    assert "stopped at its time limit" in (tmp_path / "log.txt").read_text()
    assert_gone(pids)


def test_a_process_left_behind_after_a_normal_exit_is_named_in_the_log(tmp_path):
    """On the H200, two prepares left a process behind and the log said only "1
    process(es) left behind, killed": the log names each one (pid and command line)."""
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', "
        "'leftover-marker'], start_new_session=True)\n"
    )
    assert bounded_by_a_subreaper(code, tmp_path / "log.txt", timeout=30)[:2] == ["0", "1"]
    *_, line, took = (tmp_path / "log.txt").read_text().splitlines()
    assert line.startswith("first light: 1 process(es) left behind, killed: ")
    assert "import time; time.sleep(300) leftover-marker" in line
    assert re.fullmatch(r"first light: \d+\.\d s, exit code 0", took)  # the command's time


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


QUICK = '''\
"""Paced steps of 10 ms."""
import time
from benchkit.timing import TimedIterator
start = time.perf_counter()
for k, _ in enumerate(TimedIterator([[0] * 8] * 100_000), 1):
    time.sleep(max(0.0, start + k * 0.01 - time.perf_counter()))
'''

HANG = '''\
"""Hangs: ignores Ctrl-C and SIGTERM, and leaves a grandchild in a session of its own."""
import os, signal, subprocess, sys, time
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGINT, signal.SIG_IGN); "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(900)"],
                         start_new_session=True)
with open(os.environ["HANG_PIDS"], "w") as fh:
    fh.write(f"{os.getpid()} {child.pid}")
time.sleep(900)
'''

SUITE = """\
_bench:
  weight: 1
  plan:
    method: per_gpu
  measure: {warmup_min: 0.1s, warmup_max: 0.3s, min: 0.5s, max: 1s, min_observations: 3,
            startup: 200s}
quick:
  inherits: _bench
  definition: quick
hang:
  inherits: _bench
  definition: hang
  env:
    HANG_PIDS: "@PIDFILE@"
stuck:
  inherits: _bench
  definition: stuck
  env:
    HANG_PIDS: "@PIDFILE@"
after:
  inherits: _bench
  definition: later
"""


def hang_suite(tmp_path: Path) -> tuple[Path, Path]:
    for name, text in (("quick", QUICK), ("hang", HANG), ("stuck", QUICK), ("later", QUICK)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "main.py").write_text(text)
    (tmp_path / "stuck" / "prepare.py").write_text(HANG)  # its prepare hangs
    pids = tmp_path / "hang.pids"
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.replace("@PIDFILE@", str(pids)))
    return suite, pids


def assert_gone(pids: Path) -> None:
    for pid in map(int, pids.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"process {pid} left"


@pytest.mark.slow
def test_an_entry_that_hangs_is_capped_and_the_others_run(tmp_path):
    suite, pids = hang_suite(tmp_path)
    out = tmp_path / "out"
    start = time.monotonic()
    done = first_light(out, "--budget", "75", "--entry-cap", "20", "--min-start", "10",
                       "--select", "quick,hang,after", config=suite)  # fmt: skip
    wall = time.monotonic() - start
    assert wall <= 75, wall
    assert done.returncode == 4, done.stdout + done.stderr
    assert state(out) == {"quick": "done", "hang": "timeout", "after": "done"}
    assert_gone(pids)
    with open(out / "report.csv", newline="") as fh:
        rows = {r["name"]: r for r in csv.DictReader(fh)}
    assert float(rows["quick"]["rate"]) > 0 and float(rows["after"]["rate"]) > 0
    summary = (out / "first-light.md").read_text()
    assert "| hang | timeout |" in summary and "| after | done |" in summary
    assert "not successful: hang (timeout)" in done.stdout


@pytest.mark.slow
def test_the_budget_holds_when_an_entry_hangs_past_it(tmp_path):
    """An entry's prepare hangs, deaf to Ctrl-C and SIGTERM, and its cap is longer than
    the call: the call still ends within its budget, the hung processes are killed, the
    reports of the entry that finished are there, and it says what is left."""
    suite, pids = hang_suite(tmp_path)
    out = tmp_path / "out"
    start = time.monotonic()
    done = first_light(out, "--budget", "45", "--entry-cap", "300", "--min-start", "5",
                       "--select", "quick,stuck,after", config=suite)  # fmt: skip
    wall = time.monotonic() - start
    assert wall <= 45, wall
    assert done.returncode == 3, done.stdout + done.stderr
    assert state(out) == {"quick": "done", "stuck": "timeout", "after": "pending"}
    assert_gone(pids)
    assert "| quick | done |" in (out / "first-light.md").read_text()
    with open(out / "report.csv", newline="") as fh:
        assert float(next(r for r in csv.DictReader(fh) if r["name"] == "quick")["rate"]) > 0
    assert "out of time before after" in done.stdout


@pytest.mark.slow
def test_a_call_killed_from_outside_leaves_its_record_in_the_mirror(tmp_path):
    """A lent machine's command limit kills the whole call (SIGKILL, no teardown) while
    an entry hangs: the folder given to ``--mirror`` holds whole files of the record as
    of the entry that finished (the summary, the state, the reports, the logs), nothing
    half-copied."""
    import signal

    suite, pids = hang_suite(tmp_path)
    out, back = tmp_path / "out", tmp_path / "back"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    argv = [sys.executable, str(SCRIPT), str(out), "--config", str(suite), "--budget", "300",
            "--entry-cap", "300", "--select", "quick,stuck,after", "--mirror", str(back)]  # fmt: skip
    call = subprocess.Popen(argv, cwd=ROOT, env={**env, "MILABENCH_GPU_ARCH": "cpu"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text().split()):  # the stuck prepare runs
            assert call.poll() is None and time.monotonic() < deadline, "stuck never started"
            time.sleep(0.2)
    finally:
        os.killpg(call.pid, signal.SIGKILL)
        call.wait()
        for pid in map(int, pids.read_text().split()) if pids.exists() else ():
            try:
                os.kill(pid, signal.SIGKILL)  # in sessions of their own: the subreaper is gone
            except ProcessLookupError:
                pass
    # three files, none in a folder: what a lent machine gives back (8 files at most)
    assert sorted(p.name for p in back.iterdir()) == [
        "first-light.json", "first-light.md", "first-light.tar.gz"
    ]  # fmt: skip
    assert "| quick | done |" in (back / "first-light.md").read_text()
    saved = json.loads((back / "first-light.json").read_text())
    assert {e["name"]: e["status"] for e in saved["entries"]}["quick"] == "done"
    with tarfile.open(back / "first-light.tar.gz") as tar:
        names = set(tar.getnames())
        assert {"out/machine.json", "out/logs/quick.run.txt", "out/report.csv"} <= names
        rows = csv.DictReader(tar.extractfile("out/report.csv").read().decode().splitlines())
        assert float(next(r for r in rows if r["name"] == "quick")["rate"]) > 0
    assert not any(n.startswith(("out/site", "out/base/data")) for n in names)


# ------------------------------------------------------------- milabench from a wheelhouse


def wheel_of_installed(name: str, dest: Path) -> Path:
    """A wheel holding an installed distribution's files as they are (its dist-info keeps
    the WHEEL and RECORD it was installed with): real wheels of this Python's packages,
    made without the network."""
    dist = metadata.distribution(name)
    info = Path(dist._path)  # type: ignore[attr-defined]
    wheel_text = (info / "WHEEL").read_text()
    tag = next(x.split(":", 1)[1].strip() for x in wheel_text.splitlines() if x.startswith("Tag:"))
    base = info.parent
    path = dest / f"{info.name.removesuffix('.dist-info')}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for file in dist.files or []:
            full = (base / file).resolve()
            if full.is_file() and "__pycache__" not in file.parts and ".." not in file.parts:
                zf.write(full, str(file))
    return path


def pipless_venv_and_wheelhouse(tmp_path: Path) -> tuple[str, Path, str, list[str]]:
    """A venv made without pip and without this Python's packages, and a wheelhouse of
    milabench's needs (pip's wheel from ensurepip, the others repacked from this Python):
    (its python, the wheelhouse, pip's wheel name, the projects)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode
    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    names = ["omegaconf", "PyYAML", "psutil"]
    try:  # omegaconf 2.3 needs it, 2.4 does not
        metadata.distribution("antlr4-python3-runtime")
        names.append("antlr4-python3-runtime")
    except metadata.PackageNotFoundError:
        pass
    for name in names:
        wheel_of_installed(name, house / "wheels")
    bundled = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (pip_wheel,) = (bundled / "ensurepip" / "_bundled").glob("pip-*.whl")
    (house / pip_wheel.name).write_bytes(pip_wheel.read_bytes())
    (house / "manifest.json").write_text(json.dumps({"pip": pip_wheel.name}))
    return python, house, pip_wheel.name, names


@pytest.mark.slow
def test_milabench_is_installed_from_a_wheelhouse_into_a_python_without_pip(tmp_path):
    """milabench's needs come from the wheelhouse, installed with pip run from its wheel,
    no index, into OUT/site; a .pth in the venv points at it and is removed at the end."""
    python, house, pip_wheel, names = pipless_venv_and_wheelhouse(tmp_path)
    out = tmp_path / "out"
    deadline = procs.Deadline(300)
    made = setup.make_importable(python, ROOT, house, out, deadline)
    try:
        assert made.how == f"pip from {pip_wheel}" and len(made.installed) == len(names)
        assert made.pth is not None and made.pth.is_file() and made.python is None
        probe = subprocess.run([python, "-I", "-c", "import milabench, omegaconf, benchkit; "
                                "print(omegaconf.__file__)"], capture_output=True, text=True)  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.startswith(str(out / "site"))
    finally:
        setup.remove_pth(made)
    assert not made.pth.exists()
    ok, line = setup.importable(python, deadline)
    assert not ok and "No module named" in line


SETUP_IN_NAMESPACE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from firstlight import procs, setup
made = setup.make_importable(sys.argv[2], setup.Path(sys.argv[3]), setup.Path(sys.argv[4]),
                             setup.Path(sys.argv[5]), procs.Deadline(300))
print(json.dumps({"pth": made.pth and str(made.pth), "python": made.python, "how": made.how}))
"""


@pytest.mark.system
def test_a_read_only_python_gets_an_overlay_venv_that_sees_its_packages_first(tmp_path):
    """In a private mount namespace (``unshare -rm``: nothing changes on the machine) the
    venv's site-packages is mounted read-only, as an image's may be: no .pth can go
    there, so milabench runs from an overlay venv OUT/venv. The overlay imports what the
    venv has before what the wheelhouse brought, and the venv's console scripts run
    under it; the venv itself is left untouched."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    python, house, _, _ = pipless_venv_and_wheelhouse(tmp_path)
    venv = Path(python).parents[1]
    (site_dir,) = (venv / "lib").glob("python3.*/site-packages")
    (site_dir / "psutil.py").write_text("WHERE = 'the image'\n")  # the image's own copy
    (site_dir / "mine.pth").write_text(f"{tmp_path / 'extra'}\n")  # its own .pth files
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "extramod.py").write_text("")
    hello = venv / "bin" / "hello"
    hello.write_text(f"#!{python}\nimport sys, psutil, omegaconf, milabench\n"
                     "print(sys.executable, psutil.WHERE, omegaconf.__file__)\n")  # fmt: skip
    hello.chmod(0o755)
    out = tmp_path / "out"
    script = tmp_path / "setup_ro.py"
    script.write_text(SETUP_IN_NAMESPACE)
    shell = (f"mount --bind {site_dir} {site_dir} && mount -o remount,ro,bind {site_dir} && "
             f"exec {sys.executable} {script} {ROOT / 'scripts'} {python} {ROOT} {house} {out}")  # fmt: skip
    done = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    made = json.loads(done.stdout.splitlines()[-1])
    overlay = str(out / "venv" / "bin" / "python")
    assert made["pth"] is None and made["python"] == overlay
    assert "cannot be written: Read-only file system" in made["how"]
    assert not (site_dir / setup.PTH_NAME).exists()
    probe = subprocess.run([overlay, "-I", "-c", "import extramod, benchkit, psutil, omegaconf; "
                            "print(psutil.WHERE, omegaconf.__file__)"],
                           capture_output=True, text=True)  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith(f"the image {out / 'site'}")
    ran = subprocess.run([str(out / "venv" / "bin" / "hello")], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"{overlay} the image {out / 'site'}")
    assert subprocess.run([python, "-I", "-c", "import omegaconf"]).returncode != 0


def test_without_pip_or_a_pip_wheel_the_error_says_what_to_do(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    (house / "wheels" / "x-1-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(setup.SetupError, match="no pip and .* carries no pip wheel"):
        setup.make_importable(str(venv / "bin" / "python"), ROOT, house, tmp_path / "out",
                              procs.Deadline(120))  # fmt: skip


# ----------------------------------------------------------------------- a whole call


@pytest.mark.slow
def test_runs_the_selection_and_writes_the_reports(tmp_path):
    out = tmp_path / "out"
    archive = tmp_path / "back" / "first-light.tar.gz"
    done = first_light(out, "--select", "fp32,bf16", "--budget", "200", "--archive", str(archive))
    assert done.returncode == 0, done.stdout + done.stderr
    with tarfile.open(archive) as tar:
        packed = set(tar.getnames())
    assert {"out/first-light.md", "out/report.json", "out/machine.json",
            "out/base/runs/first-light/bf16.D0.data"} <= packed  # fmt: skip
    assert not any(n.startswith(("out/site", "out/base/data")) for n in packed)
    assert "2 of 2 entries passed" in done.stdout
    assert state(out) == {"bf16": "done", "fp32": "done"}  # suite order
    assert json.loads((out / "machine.json").read_text())["python"]
    runs = out / "base" / "runs" / "first-light"
    assert {p.name for p in runs.glob("*.data")} >= {"fp32.D0.data", "bf16.D0.data"}
    for name in ("report.txt", "report.md", "report.csv", "report.json"):
        assert (out / name).stat().st_size > 0, name
    summary = (out / "first-light.md").read_text()
    assert "| entry | status | wall s | rate | 95% interval |" in summary
    assert "| fp32 | done |" in summary and "| bf16 | done |" in summary
    assert "measured bf16 peak: " in summary and "measured bf16 peak: -" not in summary
    machine = next(x for x in summary.splitlines() if x.startswith("machine: "))
    assert ", host " in machine and ", /dev/shm " in machine  # a lent VM's memory, recorded
    # the doctor ran and the run carried on (--ignore-doctor): its record is in the run
    assert (runs / "doctor.json").is_file()

    # done: a further call changes nothing but the reports; other options are refused
    again = first_light(out, "--select", "fp32,bf16")
    assert again.returncode == 0 and state(out) == {"bf16": "done", "fp32": "done"}
    inside = first_light(out, "--select", "fp32,bf16", "--mirror", str(out / "copy"))
    assert inside.returncode == 2 and "--mirror must be outside OUT" in inside.stderr
    other = first_light(out, "--select", "fp32")
    assert other.returncode == 1
    assert other.stderr.startswith("first_light: error: ") and len(other.stderr.splitlines()) == 1


def test_a_group_that_cannot_import_is_not_started(tmp_path):
    """An import check that fails names the group and the cause; its entries do not
    start, and the exit code says something failed."""
    suite = tmp_path / "suite.yaml"
    (tmp_path / "needs").mkdir()
    (tmp_path / "needs" / "main.py").write_text("import no_such_module_anywhere\n")
    (tmp_path / "needs" / "requirements.in").write_text("no-such-module-anywhere\n")
    suite.write_text("needs:\n  definition: needs\n  weight: 1\n  plan: {method: per_gpu}\n")
    out = tmp_path / "out"
    done = first_light(out, "--budget", "120", config=suite)
    assert done.returncode == 4, done.stdout + done.stderr
    assert state(out) == {"needs": "not installed"}
    text = (out / "first-light.md").read_text()
    assert "no_such_module_anywhere" in text and "| needs | not installed |" in text
    assert not (out / "logs" / "needs.run.txt").exists()


def test_bad_arguments_exit_2(tmp_path):
    done = first_light(tmp_path / "out", "--budget", "3")
    assert done.returncode == 2 and "--budget must be at least" in done.stderr


def test_a_setting_milabench_refuses_stops_the_call_before_any_entry(tmp_path):
    """A bad MILABENCH_COMMIT would fail every entry's run: the call stops at
    ``milabench machine`` with its line, before preparing anything."""
    out = tmp_path / "out"
    done = first_light(out, "--budget", "120", MILABENCH_COMMIT="HEAD")
    assert done.returncode == 1, done.stderr
    assert "milabench machine refused to start: milabench: error: MILABENCH_COMMIT='HEAD'" in (
        done.stderr
    )
    assert not (out / "base" / "runs").exists()


def test_the_rehearsal_lists_what_the_mirror_would_bring_back(tmp_path):
    """The rehearsal's limit on the mirror: every file under it with its MiB (a lent
    machine gives back 8 files of 16 MiB at most)."""
    import first_light_rehearsal as rehearsal

    (tmp_path / "logs").mkdir()
    (tmp_path / "first-light.md").write_text("x" * 2**20)
    (tmp_path / "logs" / "a.txt").write_text("")
    assert rehearsal.returned_files(tmp_path) == {"first-light.md": 1.0, "logs/a.txt": 0.0}
    assert rehearsal.returned_files(tmp_path / "none") == {}
    assert (rehearsal.RETURNED_FILES, rehearsal.RETURNED_MIB) == (8, 16)


def test_the_rehearsal_sets_what_the_documented_command_sets(monkeypatch):
    """Its call's variables: this machine's less pip's, uv's and milabench's own, with the
    CPU standing in for the GPU and MILABENCH_COMMIT naming this checkout's HEAD."""
    import first_light_rehearsal as rehearsal

    from milabench.machine.facts import git_head

    monkeypatch.setenv("MILABENCH_BASE", "/elsewhere")
    monkeypatch.setenv("PIP_INDEX_URL", "http://mirror.invalid")
    env = rehearsal.machine_env()
    assert "MILABENCH_BASE" not in env and "PIP_INDEX_URL" not in env
    assert env["MILABENCH_GPU_ARCH"] == "cpu"
    assert env.get("MILABENCH_COMMIT") == git_head(ROOT)


@pytest.mark.system
def test_the_rehearsal_s_call_is_offline_and_can_see_the_image_read_only(tmp_path):
    """The rehearsal's wrapper: no route out, and with ``read_only`` that folder cannot be
    written inside the call (a private mount namespace) while it stays writable outside."""
    import first_light_rehearsal as rehearsal

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("unshare --net --mount needs root here")
    image = tmp_path / "image"
    image.mkdir()
    probe = ("import socket, sys\n"
             "try:\n    open(sys.argv[1] + '/x', 'w')\nexcept OSError as e:\n    print(e.strerror)\n"
             "try:\n    socket.create_connection(('1.1.1.1', 443), timeout=3)\n"
             "except OSError:\n    print('offline')\n")  # fmt: skip
    argv = [sys.executable, "-c", probe, str(image)]
    sealed = subprocess.run(rehearsal.offline(argv, image), capture_output=True, text=True)
    assert sealed.stdout.split("\n")[:2] == ["Read-only file system", "offline"], sealed.stderr
    plain = subprocess.run(rehearsal.offline(argv), capture_output=True, text=True)
    assert plain.stdout.strip() == "offline" and (image / "x").is_file(), plain.stderr


def test_the_rehearsal_runs_from_the_tree_a_lent_machine_receives(tmp_path):
    """`tree_copy`: the files git tracks and the untracked ones it does not ignore, as
    they are in the working tree, and no .git; what git ignores stays behind."""
    import first_light_rehearsal as rehearsal

    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    present = [n for n in listed.stdout.splitlines() if (ROOT / n).is_file()]
    tree = tmp_path / "tree"
    assert rehearsal.tree_copy(tree) == len(set(present))
    assert not (tree / ".git").exists() and (tree / "scripts" / "first_light.py").is_file()
    assert (tree / "README.md").read_bytes() == (ROOT / "README.md").read_bytes()
    ignored = [p for p in (".whl-fl", "results", "milabench.egg-info") if (ROOT / p).exists()]
    assert not any((tree / p).exists() for p in ignored)
    (tree / "stale").write_text("")
    rehearsal.tree_copy(tree)
    assert not (tree / "stale").exists()  # replaced, not merged


# ------------------------------------------------------- the estimates the GPU will make


def test_the_gpu_s_estimates_are_the_entries_at_first_light_sizes_on_one_gpu():
    """What an entry estimates when it starts on the lent H200: first-light.yaml's options
    resolved for one GPU of that machine, one rank."""
    from firstlight import estimates

    todo = estimates.jobs(ROOT / "config" / "first-light.yaml", ["pna", "llama", "unknown"])
    assert [job.name for job in todo] == ["pna", "llama"]
    pna = todo[0]
    assert Path(pna.folder) == ROOT / "benchmarks" / "geo_gnn"
    assert (pna.world, pna.ranks_per_node) == (1, 1)
    options = dict(zip(pna.argv, pna.argv[1:], strict=False))
    assert options["--device"] == "cuda" and options["--batch-size"] == "4096"
    assert options["--threads"] == str(estimates.LENT_CPUS)


def test_an_estimate_is_timed_and_one_that_fails_is_one_line(tmp_path):
    """Each estimate in a process of its own, in the entry's folder: its GiB and its
    seconds; a bad option is an error line naming what argparse said, not a traceback."""
    from firstlight import estimates

    good = estimates.jobs(ROOT / "config" / "first-light.yaml", ["bf16"])[0]
    bad = estimates.Job("broken", good.folder, ["--no-such-option"], 1, 1)
    paths = [str(ROOT), str(ROOT / "benchmarks" / "_shared")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    results = estimates.estimate(sys.executable, [good, bad], env)
    assert results["bf16"]["per_gpu"] > 2**30 and results["bf16"]["estimate_s"] >= 0
    assert results["bf16"]["torch"] == __import__("torch").__version__
    error = results["broken"]["error"]
    assert "\n" not in error and "--no-such-option" in error, error
    said = estimates.lines(results)
    assert said[0].startswith("bf16: ") and "GiB per GPU" in said[0]
    assert said[1].startswith("broken: NO ESTIMATE: ")
    assert said[-1].startswith("estimates: ") and "for 2 entries" in said[-1]


def test_the_rehearsal_weighs_what_travels_as_a_lent_machine_does(tmp_path):
    """Files and links count by their own size (a link is sent as a link)."""
    import first_light_rehearsal as rehearsal

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.bin").write_bytes(b"x" * 2**20)
    (tmp_path / "link").symlink_to(tmp_path / "sub" / "a.bin")
    assert 1.0 < rehearsal.folder_mib(tmp_path) < 1.001
    assert rehearsal.TRAVELS_MIB == 64


def test_the_rehearsal_prepares_at_the_gpu_s_sizes_and_leaves_no_data(tmp_path):
    """Step 5: first-light.yaml prepared as for one H200 (the suite needs a GPU: fake
    ones stand in), offline, timed, its data removed afterwards."""
    import first_light_rehearsal as rehearsal

    paths = [str(ROOT), str(ROOT / "benchmarks" / "_shared")]
    env = dict(rehearsal.machine_env(), PYTHONPATH=os.pathsep.join(paths))
    base = tmp_path / "gpu-prepare"
    done = rehearsal.gpu_prepare(sys.executable, ROOT, ["bf16"], env, base)
    assert done["gpu_prepare_rc"] == 0, base.with_suffix(".log").read_text()[-2000:]
    assert done["gpu_prepare_s"] > 0 and done["gpu_prepare_gib"] == 0.0
    assert "bf16" in base.with_suffix(".log").read_text() and not base.exists()
