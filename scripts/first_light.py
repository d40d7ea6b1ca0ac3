"""First light on a GPU: the standard suite on one machine, in calls of a few minutes each.

For a single-GPU machine with no network whose Python already has CUDA PyTorch and the
suite's frameworks (transformers, timm, torchvision, torch_geometric, lightning, JAX with
its CUDA plugin): every entry runs in that Python (``--use-current-env``), milabench's
own dependencies come from a wheelhouse of ``milabench bundle``, and the work is cut
into calls that each end within ``--budget`` seconds (default 540: under a 10-minute
limit per command). Run the same command again until it exits 0::

    python scripts/first_light.py OUT [--wheelhouse DIR] [--config config/standard.yaml]
        [--select A,B] [--exclude A,B] [--budget 540] [--max-entries N] [--retry-failed]

Exit codes: 0 = every entry has run and the reports are in OUT; 3 = more to do, call
again; 1 = the procedure itself could not go on (the line says why); 2 = bad arguments.

What one call does, saving its progress in ``OUT/first-light.json`` after each step (a
call killed from outside loses at most the entry it was running, which runs again):

1. milabench importable in this Python, else installed from the wheelhouse
   (``pip install --no-index --find-links DIR/wheels -r DIR/requirements/milabench.txt
   -e <repository>``);
2. once: ``milabench machine`` -> ``OUT/machine.json``; ``milabench install
   --use-current-env`` (the key imports of every group, checked in this Python) ->
   ``OUT/logs/install.txt``; the selected entries (``milabench list``);
3. entry after entry, in suite order: ``milabench prepare`` then ``milabench run``, the
   first into the run folder ``<base>/runs/first-light``, the next ones with ``--resume``
   into the same folder. An entry starts only when the time left in the call is at least
   ``--min-start`` seconds (or when it is the call's first); a run still going when the
   budget ends is interrupted like a Ctrl-C (partial report) and, unless it was the
   call's first entry, runs again in the next call;
4. when no entry is left: ``milabench report`` of the run folder as ``OUT/report.{txt,md,
   csv,json}``, and ``OUT/first-light.md``: per entry, its status, wall time, rate, TFLOPS,
   MFU and peak GPU memory.

Only the standard library is used: the script runs before milabench is installed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_NAME = "first-light"
STATE = "first-light.json"
MORE_TO_DO = 3


class Stop(Exception):
    """The procedure cannot go on: one line for the user, exit code 1."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder of the reports (and of the state)")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python with the frameworks (default: this one)")  # fmt: skip
    parser.add_argument("--wheelhouse", type=Path, default=None,
                        help="wheelhouse of 'milabench bundle', to install milabench from")  # fmt: skip
    parser.add_argument("--config", type=Path, default=REPO / "config" / "standard.yaml")
    parser.add_argument("--base", type=Path, default=None, help="default: OUT/base")
    parser.add_argument("--select", default=None, metavar="A,B")
    parser.add_argument("--exclude", default=None, metavar="A,B")
    parser.add_argument("--budget", type=float, default=540.0,
                        help="seconds one call may take (default 540)")  # fmt: skip
    parser.add_argument("--min-start", type=float, default=240.0,
                        help="start another entry only with this many seconds left")  # fmt: skip
    parser.add_argument("--max-entries", type=int, default=None,
                        help="run at most N entries in this call")  # fmt: skip
    parser.add_argument("--retry-failed", action="store_true",
                        help="run the entries that failed again")  # fmt: skip
    args = parser.parse_args(argv)
    if args.budget <= 0 or (args.max_entries is not None and args.max_entries < 1):
        parser.error("--budget and --max-entries must be positive")
    args.out = args.out.absolute()
    args.base = (args.base or args.out / "base").absolute()
    return args


class Call:
    """One invocation: its deadline, the state file and the command logs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.budget
        self.logs = args.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.state_path = args.out / STATE
        self.state = self.load()

    def load(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {"config": str(self.args.config), "select": self.args.select,
                    "exclude": self.args.exclude, "entries": None, "calls": 0}  # fmt: skip
        except (OSError, ValueError) as err:
            raise Stop(f"{self.state_path}: unreadable ({err}); remove it to start again") from None
        if (state.get("config"), state.get("select"), state.get("exclude")) != (
            str(self.args.config), self.args.select, self.args.exclude):  # fmt: skip
            raise Stop(f"{self.state_path}: made for --config {state.get('config')} --select "
                       f"{state.get('select')} --exclude {state.get('exclude')}; use the same "
                       "options, or another OUT folder")  # fmt: skip
        return state

    def save(self) -> None:
        tmp = self.state_path.with_name(STATE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        os.replace(tmp, self.state_path)

    @property
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def milabench(self, *argv: str, log: str, suite: bool = True, timeout: float | None = None,
                  stdout: Path | None = None) -> tuple[int | None, float]:  # fmt: skip
        """Run ``python -m milabench ARGV`` (suite options added), output in ``logs/LOG``
        (standard output in ``stdout`` when given); (exit code, or None when interrupted at
        ``timeout``, default the time left in the call; seconds)."""
        command = [self.args.python, "-m", "milabench", *argv]
        if suite:
            command += ["--config", str(self.args.config), "--base", str(self.args.base),
                        "--use-current-env"]  # fmt: skip
        return self.run(command, log=log, timeout=timeout, stdout=stdout)

    def run(self, command: list[str], *, log: str, timeout: float | None = None,
            stdout: Path | None = None) -> tuple[int | None, float]:  # fmt: skip
        timeout = self.left if timeout is None else timeout
        env = {**os.environ, "MILABENCH_DASH": "no", "PYTHONUNBUFFERED": "1"}
        start = time.monotonic()
        with (
            open(self.logs / log, "a") as err,
            open(stdout, "w") if stdout else open(self.logs / log, "a") as out,
        ):
            err.write(f"$ {' '.join(command)}\n")
            err.flush()
            proc = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=REPO)
            try:
                code: int | None = proc.wait(timeout=max(timeout, 1.0))
            except subprocess.TimeoutExpired:
                code = None
                interrupt(proc)
        return code, time.monotonic() - start


def interrupt(proc: subprocess.Popen) -> None:
    """Stop milabench as Ctrl-C does (it stops its benchmarks and writes a partial
    report; its own watchdog ends everything within 15 s), then harder if it does not end:
    at most 35 s past the budget."""
    for sig, wait in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def ensure_milabench(call: Call) -> None:
    """milabench importable in ``--python``; installed from the wheelhouse when it is not."""
    probe = [call.args.python, "-c", "import milabench, voir, uv"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return
    house = call.args.wheelhouse
    if house is None:
        raise Stop(f"milabench is not importable in {call.args.python}; give --wheelhouse DIR "
                   "(made by 'milabench bundle') to install it from")  # fmt: skip
    pins = house / "requirements" / "milabench.txt"
    if not pins.is_file():
        raise Stop(f"{house}: no requirements/milabench.txt (bundle made with --no-milabench?)")
    code, _ = call.run([call.args.python, "-m", "pip", "install", "--no-index", "--find-links",
                        str(house / "wheels"), "-r", str(pins), "-e", str(REPO)],
                       log="setup.txt")  # fmt: skip
    if code != 0:
        raise Stop(f"installing milabench from {house} failed; see {call.logs / 'setup.txt'}")


def selection_args(args: argparse.Namespace) -> list[str]:
    out = []
    if args.select:
        out += ["--select", args.select]
    if args.exclude:
        out += ["--exclude", args.exclude]
    return out


def first_call(call: Call) -> None:
    """Machine record, key imports, and the list of entries to run."""
    call.milabench("machine", "--base", str(call.args.base), suite=False, log="machine.txt",
                   stdout=call.args.out / "machine.json")  # fmt: skip
    code, _ = call.milabench("install", *selection_args(call.args), log="install.txt")
    call.state["install_rc"] = code  # a failed import shows again in its entries' runs
    listing = call.logs / "list.json"
    listing.unlink(missing_ok=True)
    code, _ = call.milabench("list", "--format", "json", *selection_args(call.args),
                             log="list.txt", stdout=listing)  # fmt: skip
    try:
        rows = json.loads(listing.read_text())
    except (OSError, ValueError):
        rows = None
    if code != 0 or not isinstance(rows, list):
        raise Stop(f"milabench list failed; see {call.logs / 'list.txt'}")
    names = [r["name"] for r in rows if r.get("selected")]
    if not names:
        raise Stop("no entry selected")
    call.state["entries"] = [{"name": n, "status": "pending"} for n in names]
    call.save()


def run_dir(call: Call) -> Path:
    return call.args.base / "runs" / RUN_NAME


def run_entry(call: Call, entry: dict, first_in_call: bool) -> bool:
    """Prepare and run one entry; False when the call's time ran out during it."""
    name = entry["name"]
    entry["status"] = "running"
    entry["calls"] = entry.get("calls", 0) + 1
    call.save()
    start = time.monotonic()
    code, _ = call.milabench("prepare", "--select", name, log=f"{name}.prepare.txt")
    entry["prepare_rc"] = code  # a failed prepare shows again in the run's report
    if code is None:
        entry["status"] = "timeout" if first_in_call else "pending"
        call.save()
        return False
    if run_dir(call).is_dir():
        where = ["--resume", str(run_dir(call))]
    else:
        where = ["--run-name", RUN_NAME]
    code, _ = call.milabench("run", "--select", name, *where, log=f"{name}.run.txt")
    entry["seconds"] = round(time.monotonic() - start, 1)
    if code is None:
        # over the call's budget: again in a fresh call, unless it had a whole call already
        entry["status"] = "timeout" if first_in_call else "pending"
        call.save()
        return False
    entry["status"] = "done" if code == 0 else "failed"
    entry["rc"] = code
    call.save()
    return True


def write_reports(call: Call) -> None:
    """The run folder's report in every format, and the first-light summary."""
    folder = run_dir(call)
    rows: dict[str, dict] = {}
    if not folder.is_dir():  # no entry got as far as its run
        (call.args.out / "first-light.md").write_text(summary(call.state, rows))
        return
    for fmt, suffix in (("text", "txt"), ("markdown", "md"), ("csv", "csv"), ("json", "json")):
        call.milabench("report", "--runs", str(folder), "--format", fmt, "--output",
                       str(call.args.out / f"report.{suffix}"), suite=False,
                       log="report.txt", timeout=120)  # fmt: skip
    try:
        with open(call.args.out / "report.csv", newline="") as fh:
            rows = {r["name"]: r for r in csv.DictReader(fh)}
    except OSError:
        pass
    (call.args.out / "first-light.md").write_text(summary(call.state, rows))


def _num(value: str | None, scale: float = 1.0) -> str:
    """A report cell: 3 significant digits below 100, whole numbers above, "-" if empty."""
    try:
        number = float(value) * scale if value not in (None, "") else None
    except ValueError:
        number = None
    if number is None:
        return "-"
    return f"{number:.0f}" if abs(number) >= 100 else f"{number:.3g}"


def summary(state: dict, rows: dict[str, dict]) -> str:
    """Markdown: one line per entry (status, time, rate, TFLOPS, MFU, peak memory)."""
    lines = [
        "# First light", "",
        "| entry | status | wall s | rate | units | TFLOPS | MFU % | peak GPU MiB |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]  # fmt: skip
    for entry in state.get("entries") or []:
        row = rows.get(entry["name"], {})
        lines.append(
            f"| {entry['name']} | {entry['status']} | {entry.get('seconds', '-')} | "
            f"{_num(row.get('rate'))} | {row.get('units') or '-'} | {_num(row.get('tflops'))} | "
            f"{_num(row.get('mfu'), 100.0)} | {_num(row.get('peak_memory'))} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        call = Call(args)
        call.state["calls"] = call.state.get("calls", 0) + 1
        ensure_milabench(call)
        if call.state.get("entries") is None:
            first_call(call)
        entries = call.state["entries"]
        for entry in entries:
            if entry["status"] == "running":  # the previous call was killed during it
                entry["status"] = "pending"
            if args.retry_failed and entry["status"] in ("failed", "timeout"):
                entry["status"] = "pending"
        ran = 0
        for entry in entries:
            if entry["status"] != "pending":
                continue
            if ran and (call.left < args.min_start or ran == args.max_entries):
                break
            if not run_entry(call, entry, first_in_call=ran == 0):
                ran += 1
                break
            ran += 1
        call.save()
        pending = [e["name"] for e in entries if e["status"] == "pending"]
        if pending:
            print(f"first light: {len(entries) - len(pending)} of {len(entries)} entries done; "
                  f"call again for {len(pending)} more ({pending[0]} next)")  # fmt: skip
            return MORE_TO_DO
        write_reports(call)
        failed = [e["name"] for e in entries if e["status"] != "done"]
        print(f"first light: all {len(entries)} entries ran"
              + (f", not successful: {', '.join(failed)}" if failed else "")
              + f"; reports in {args.out}")  # fmt: skip
        return 0
    except Stop as err:
        print(f"first_light: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
