"""First light on a GPU: what one GPU can measure in one call, inside a hard time budget.

For a machine lent briefly (one command of at most 10 minutes, no network) whose Python
already has CUDA PyTorch and the suite's frameworks: the chosen entries run in that Python
(``--use-current-env``); milabench's own dependencies come from a wheelhouse made where
the network is (``scripts/first_light_wheelhouse.py``)::

    python scripts/first_light.py OUT [--wheelhouse DIR] [--budget 540] [--entry-cap 150]
        [--config config/first-light.yaml] [--system FILE] [--select A,B] [--exclude A,B]
        [--python PY] [--retry-failed] [--archive FILE.tar.gz] [--mirror DIR]

The call returns within ``--budget`` seconds of wall clock, reports and teardown included,
even when an entry hangs. Exit codes: 0 = every chosen entry ran and passed; 3 = time
ran out before some entries (the same command continues them); 4 = every entry had its
turn but some failed, timed out or could not import what they need; 1 = the procedure
itself could not go on (the line says why); 2 = bad arguments.

What one call does (docs/benchmarks.md, "First light on a GPU"):

1. milabench importable in that Python, else installed from the wheelhouse into
   ``OUT/site`` and made visible through a ``.pth`` file, removed at the end
   (`firstlight.setup`);
2. ``milabench machine`` -> ``OUT/machine.json``; ``milabench list`` and the choice of
   entries (`firstlight.selection`: by default the bf16 matmul peak, then every weighted
   entry this machine runs, cheapest first; the others are listed with their reason);
   ``milabench install --use-current-env`` checks the chosen entries' imports: an entry
   whose group fails is marked ``not installed`` with the cause, and does not start;
3. entry after entry: ``milabench prepare`` then ``milabench run --ignore-doctor`` (a
   borrowed machine is what it is: a failed doctor check is recorded in the report and
   the summary, and the run carries on), each entry capped at ``--entry-cap`` seconds and
   at what is left of the call (its ``max_duration`` is set so that milabench stops it
   itself; whatever is left after that is killed); an entry starts only when at least
   ``--min-start`` seconds are left;
4. after every entry: ``report.{csv,json}`` of the run folder (``<base>/runs/first-light``;
   ``report.{md,txt}`` too at the end) and ``first-light.md`` (status, rate with interval,
   TFLOPS, MFU against the datasheet and against the bf16 peak measured in the call, peak
   GPU memory, what was left out and why, the doctor's failed checks), so a call cut off
   from outside still brings back what it measured (``--mirror DIR``: the summary, the
   state and the rest packed, kept there too, for a lent machine that gives back a few
   files of one folder and keeps nothing else).

Only the standard library is used: the script runs before milabench's dependencies are
installed. It kills every process left below it at the end of each command (it is their
subreaper): run it as a command of its own, never imported into a longer-lived process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from firstlight import procs, selection, setup, summary  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RUN_NAME = "first-light"
STATE = "first-light.json"
EXIT_ERROR, EXIT_USAGE, EXIT_MORE, EXIT_FAILED = 1, 2, 3, 4

#: Seconds kept at the end of the call for the last reports and the teardown.
FINAL_RESERVE = 15.0
#: Seconds a command gets after its SIGINT before everything left below us is killed.
GRACE = 8.0
#: What milabench needs around a benchmark's own time (start, doctor, run files, exit).
RUN_OVERHEAD = 15.0


class Stop(Exception):
    """The procedure cannot go on: one line for the user, exit code 1."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder of the reports (and of the state)")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python with the frameworks (default: this one)")  # fmt: skip
    parser.add_argument("--wheelhouse", type=Path, default=None,
                        help="made by scripts/first_light_wheelhouse.py")  # fmt: skip
    parser.add_argument("--config", type=Path, default=REPO / "config" / "first-light.yaml")
    parser.add_argument("--system", type=Path, default=None, help="system file (optional)")
    parser.add_argument("--base", type=Path, default=None, help="default: OUT/base")
    parser.add_argument("--select", default=None, metavar="A,B",
                        help="these entries instead of the default choice")  # fmt: skip
    parser.add_argument("--exclude", default=None, metavar="A,B")
    parser.add_argument("--budget", type=float, default=540.0,
                        help="wall-clock seconds the whole call may take (default 540)")  # fmt: skip
    parser.add_argument("--entry-cap", type=float, default=150.0,
                        help="seconds at most for one entry, prepare and run (default 150)")  # fmt: skip
    parser.add_argument("--min-start", type=float, default=40.0,
                        help="start an entry only with this many seconds left (default 40)")  # fmt: skip
    parser.add_argument("--archive", type=Path, default=None, metavar="FILE.tar.gz",
                        help="also pack the reports, logs and run folder into one file")  # fmt: skip
    parser.add_argument("--mirror", type=Path, default=None, metavar="DIR",
                        help="after every entry, copy the summary and state here, and "
                        "the rest of the record packed")  # fmt: skip
    parser.add_argument("--retry-failed", action="store_true",
                        help="run entries that failed or timed out in an earlier call again")  # fmt: skip
    args = parser.parse_args(argv)
    if args.budget < FINAL_RESERVE + 5 or args.entry_cap <= 0 or args.min_start <= 0:
        parser.error(f"--budget must be at least {FINAL_RESERVE + 5:.0f} s; --entry-cap and "
                     "--min-start must be positive")  # fmt: skip
    args.out = args.out.absolute()
    if args.mirror is not None and args.mirror.absolute().is_relative_to(args.out):
        parser.error("--mirror must be outside OUT (it holds a pack of OUT)")
    args.base = (args.base or args.out / "base").absolute()
    args.config = args.config.absolute()
    return args


class Call:
    """One invocation: its deadline, the state file and the command logs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = procs.Deadline(args.budget)
        self.logs = args.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.state_path = args.out / STATE
        self.state = self.load()
        # the GPU machine reaches nothing: no input fetch waits on a name that never
        # resolves (entries that read upstream's inputs run their stand-ins, said so).
        # A lent VM's MemTotal may be what it holds so far, not what it can have: an
        # entry is not skipped for the host memory it needs (one that truly lacks it
        # fails, named), unless the caller states the node's memory.
        self.env = {**os.environ, "MILABENCH_DASH": "no", "PYTHONUNBUFFERED": "1",
                    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                    "MILABENCH_HOST_MEMORY": os.environ.get("MILABENCH_HOST_MEMORY")
                    or "unchecked"}  # fmt: skip

    def options(self) -> dict:
        return {"config": str(self.args.config), "select": self.args.select,
                "exclude": self.args.exclude}  # fmt: skip

    def load(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {**self.options(), "entries": None, "calls": 0}
        except (OSError, ValueError) as err:
            raise Stop(f"{self.state_path}: unreadable ({err}); remove it to start again") from None
        if {k: state.get(k) for k in self.options()} != self.options():
            raise Stop(f"{self.state_path}: made for --config {state.get('config')} --select "
                       f"{state.get('select')} --exclude {state.get('exclude')}; use the same "
                       "options, or another OUT folder")  # fmt: skip
        return state

    def save(self) -> None:
        self.state["wall"] = round(self.deadline.elapsed(), 1)
        tmp = self.state_path.with_name(STATE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        os.replace(tmp, self.state_path)

    def bounded_timeout(self, wanted: float, *, keep: float = 0.0) -> float:
        """``wanted`` seconds, cut so that the command, its grace and ``keep`` seconds more
        still end before the deadline (0 when nothing is left)."""
        return max(0.0, min(wanted, self.deadline.left() - GRACE - keep - 1.0))

    def milabench(self, *argv: str, log: str, timeout: float, suite: bool = True,
                  stdout: Path | None = None) -> procs.Outcome | None:  # fmt: skip
        """``python -m milabench ARGV`` (suite options added) for at most ``timeout``
        seconds; None when the deadline leaves no time to start it."""
        if timeout < 0.5:
            return None
        command = [self.args.python, "-m", "milabench", *argv]
        if suite:
            command += ["--config", str(self.args.config), "--base", str(self.args.base),
                        "--use-current-env"]  # fmt: skip
            if self.args.system:
                command += ["--system", str(self.args.system)]
        return procs.run_bounded(command, timeout=timeout, grace=GRACE, log=self.logs / log,
                                 stdout=stdout, env=self.env, cwd=REPO)  # fmt: skip


def names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


_INSTALL_ROW = re.compile(r"^(\S+)\s+failed\s+\S+ s\s+(\S+)(?:\s+(.*))?$")


def install_failures(text: str) -> dict[str, str]:
    """Failed groups of ``milabench install``'s table: group -> its one-line cause."""
    out = {}
    for line in text.splitlines():
        match = _INSTALL_ROW.match(line.strip())
        if match:
            out[match.group(1)] = (match.group(3) or "failed").strip()
    return out


def first_call(call: Call, not_carried: dict[str, str]) -> None:
    """Machine record, the entries chosen and left out, and their import check."""
    args = call.args
    machine = call.milabench("machine", "--base", str(args.base), suite=False,
                             log="machine.txt", stdout=args.out / "machine.json",
                             timeout=call.bounded_timeout(60, keep=FINAL_RESERVE))  # fmt: skip
    if machine is not None and machine.rc == 2:  # a bad setting, e.g. MILABENCH_COMMIT
        lines = [x for x in (call.logs / "machine.txt").read_text(errors="replace").splitlines()
                 if x.strip() and not x.startswith("first light: ")]  # fmt: skip
        raise Stop(f"milabench machine refused to start: {lines[-1] if lines else 'exit 2'}")
    listing = call.logs / "list.json"
    listing.unlink(missing_ok=True)
    done = call.milabench("list", "--format", "json", log="list.txt", stdout=listing,
                          timeout=call.bounded_timeout(60, keep=FINAL_RESERVE))  # fmt: skip
    try:
        rows = json.loads(listing.read_text())
    except (OSError, ValueError):
        rows = None
    if done is None or done.rc != 0 or not isinstance(rows, list):
        raise Stop(f"milabench list failed; see {call.logs / 'list.txt'}")
    try:
        choice = selection.choose(rows, select=names(args.select) if args.select else None,
                                  exclude=names(args.exclude), not_carried=not_carried)  # fmt: skip
    except selection.UnknownEntry as err:
        raise Stop(str(err)) from None
    if not choice.run:
        raise Stop("no entry to run: " + "; ".join(f"{k}: {v}" for k, v in choice.left_out.items()))
    by_name = {row["name"]: row for row in rows}
    call.state["left_out"] = choice.left_out
    call.state["entries"] = [{"name": n, "status": "pending", "group": by_name[n].get(
        "install_group"), "only": selection.only(n, rows)} for n in choice.run]  # fmt: skip
    call.save()
    check_imports(call)


def check_imports(call: Call) -> None:
    """``milabench install --use-current-env`` for the pending entries; an entry whose
    group fails its import check is ``not installed``, with the cause."""
    pending = [e for e in call.state["entries"] if e["status"] == "pending"]
    if not pending:
        return
    out = call.logs / "install.stdout.txt"
    done = call.milabench("install", "--select", ",".join(e["name"] for e in pending),
                          *exclusions(pending),
                          log="install.txt", stdout=out,
                          timeout=call.bounded_timeout(180, keep=FINAL_RESERVE))  # fmt: skip
    text = out.read_text(errors="replace") if out.is_file() else ""
    failed = install_failures(text)
    lines = [f"{group}: {cause}" for group, cause in failed.items()]
    if done is None or (done.rc != 0 and not failed):
        why = "stopped at its time limit" if done is not None and done.timed_out else (
            "no time left" if done is None else f"exit code {done.rc}")  # fmt: skip
        lines.append(f"the import check did not finish ({why}); see {call.logs / 'install.txt'}")
        for entry in pending:  # nothing is known to work: do not start blind
            entry["status"], entry["note"] = "not installed", "import check did not finish"
    for entry in pending:
        if entry.get("group") in failed:
            entry["status"] = "not installed"
            entry["note"] = f"group {entry['group']}: {failed[entry['group']]}"
    call.state["install_failures"] = lines
    call.save()


def exclusions(entries: list[dict]) -> list[str]:
    """``--exclude`` of the entries that selecting ``entries`` by name would add."""
    names_in = {e["name"] for e in entries}
    out: list[str] = []
    for entry in entries:
        only = entry.get("only") or []
        if "--exclude" in only:
            out += [n for n in only[only.index("--exclude") + 1].split(",") if n not in names_in]
    return ["--exclude", ",".join(dict.fromkeys(out))] if out else []


def announce(call: Call, gpus: list[str]) -> None:
    """One line: the pending entries' expected seconds on this GPU (`selection`'s
    measured figures, where they hold) against the time left, so that a call that
    cannot take them all says so before it starts."""
    pending = [e["name"] for e in call.state["entries"] if e["status"] == "pending"]
    known = [selection.expected_seconds(n, call.args.config.name, gpus) for n in pending]
    if not pending or any(x is None for x in known):
        return
    left = call.deadline.left() - FINAL_RESERVE
    print(f"first light: {len(pending)} entries to run, about {sum(known):.0f} s expected on "
          f"this GPU ({selection.MARGIN:g} x an H200's times), {left:.0f} s left"
          + ("" if sum(known) <= left else "; those that do not fit wait for the next call"),
          flush=True)  # fmt: skip


def run_dir(call: Call) -> Path:
    return call.args.base / "runs" / RUN_NAME


def run_entry(call: Call, entry: dict) -> None:
    """Prepare and run one entry within ``--entry-cap`` and the call's time."""
    name = entry["name"]
    entry["status"] = "running"
    call.save()
    cap = call.bounded_timeout(call.args.entry_cap, keep=FINAL_RESERVE)
    end = call.deadline.left() - cap  # the entry must be over when this much is left
    only = entry.get("only") or ["--select", name]
    done = call.milabench("prepare", *only, log=f"{name}.prepare.txt", timeout=cap)
    if done is None:  # no time left to start it after all
        entry["status"] = "pending"
        return
    spent = done.seconds
    if done.rc != 0:
        entry["seconds"] = round(spent, 1)
        if done.timed_out:
            entry["status"], entry["note"] = "timeout", f"prepare stopped at {cap:.0f} s"
        else:
            entry["status"] = "failed"
            cause = last_error(call.logs / f"{name}.prepare.txt")
            entry["note"] = f"prepare failed (exit code {done.rc})" + (
                f": {cause}" if cause else ""
            )
        return
    left = max(0.0, call.deadline.left() - end)
    where = ["--resume", str(run_dir(call))] if run_dir(call).is_dir() else ["--run-name", RUN_NAME]
    max_duration = max(5.0, left - GRACE - RUN_OVERHEAD)
    done = call.milabench("run", *only, *where, "--ignore-doctor", "--override",
                          f"{name}.max_duration={max_duration:.0f}", log=f"{name}.run.txt",
                          timeout=call.bounded_timeout(left, keep=FINAL_RESERVE))  # fmt: skip
    entry["seconds"] = round(spent + (done.seconds if done else 0.0), 1)
    if done is None:
        entry["status"], entry["note"] = "timeout", "no time left to start its run"
        return
    write_reports(call)
    entry["status"], entry["note"] = outcome(call, name)
    if done.timed_out:  # milabench itself had to be stopped
        entry["status"] = "timeout"
        entry["note"] = f"stopped at the entry's cap ({cap:.0f} s); " + entry["note"]


def outcome(call: Call, name: str) -> tuple[str, str]:
    """The entry's status and note, from the run folder's report (``milabench run``'s exit
    code is the verdict of the whole folder, which holds the earlier entries too)."""
    try:
        report = json.loads((call.args.out / "report.json").read_text())
    except (OSError, ValueError):
        return "failed", last_error(call.logs / f"{name}.run.txt") or "no report"
    rows = {b.get("name"): b for b in report.get("benchmarks") or [] if isinstance(b, dict)}
    errors = [e.get("line", "") for e in report.get("errors") or []
              if isinstance(e, dict) and e.get("bench") == name]  # fmt: skip
    row = rows.get(name)
    if row is None:
        return "failed", last_error(call.logs / f"{name}.run.txt") or "no result in the run"
    if not row.get("fail") and row.get("rate") is not None:
        return "done", ""
    note = (errors[0] if errors else last_error(call.logs / f"{name}.run.txt"))[:200]
    status = "timeout" if re.search(r"timed out|timeout", note, re.I) else "failed"
    return status, note.replace("|", "/")


def last_error(log: Path) -> str:
    """The last line of a log that looks like a cause (for the summary's note)."""
    try:
        lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if re.search(r"error|failed|Error|exception|Killed|timed out", line):
            return line[:200].replace("|", "/")
    return ""


#: The report's formats written after every entry (what ``first-light.md`` reads), and
#: those written once more at the end of the call: each is a ``milabench report`` run
#: (0.15 s on the 2-core development machine), and the time is the GPU's.
EVERY_ENTRY = (("csv", "csv"), ("json", "json"))
AT_THE_END = (("markdown", "md"), ("text", "txt"))


def write_reports(call: Call, *, last: bool = False) -> None:
    """The run folder's report (`EVERY_ENTRY`'s formats, and `AT_THE_END`'s on the
    ``last`` call) and ``first-light.md``, each report call bounded by what is left of
    the call."""
    folder = run_dir(call)
    if folder.is_dir():
        for fmt, suffix in EVERY_ENTRY + (AT_THE_END if last else ()):
            keep = 0.0 if last else FINAL_RESERVE
            call.milabench("report", "--runs", str(folder), "--format", fmt, "--output",
                           str(call.args.out / f"report.{suffix}"), suite=False,
                           log="report.txt", timeout=call.bounded_timeout(20, keep=keep))  # fmt: skip
    write_summary(call)


def write_summary(call: Call) -> None:
    """The state file and ``first-light.md``, from the state and the reports as they are
    (every entry's status as last set), copied to ``--mirror``. No command runs."""
    folder = run_dir(call)
    rows = summary.read_rows(call.args.out / "report.csv")
    call.state["budget"] = call.args.budget
    call.save()
    names = summary.gpu_names(call.args.out / "machine.json")
    upstream = summary.upstream_memory(names)
    rates = summary.upstream_rates(names)
    notes = summary.not_comparable(call.args.out / "report.json")
    machine = summary.machine_line(call.args.out / "machine.json", summary.hostmem.mem_total())
    text = summary.render(call.state, rows, folder, upstream, rates, notes, machine)
    (call.args.out / "first-light.md").write_text(text)
    if call.args.mirror is not None:
        mirror(call.args.out, call.args.mirror)


#: What `mirror` copies as they are; the rest of the record travels packed (`pack`).
MIRRORED = ("first-light.md", STATE)
#: The pack `mirror` keeps up to date.
MIRROR_PACK = "first-light.tar.gz"


def mirror(out: Path, to: Path) -> None:
    """Copy the summary and the state of ``out`` (`MIRRORED`) into ``to``, and pack the
    rest of the record there (`pack`: reports, logs, the run folder), each file written
    beside its place and renamed into it: a call killed from outside (a lent machine's
    command limit) leaves three whole files there, as of the last entry it finished (a
    lent machine gives back few files). A copy that fails is one line, never the end."""
    import shutil

    try:
        to.mkdir(parents=True, exist_ok=True)
        for name in MIRRORED:
            if (out / name).is_file():
                shutil.copyfile(out / name, to / f"{name}.partial")
                os.replace(to / f"{name}.partial", to / name)
        pack(out, to / f"{MIRROR_PACK}.partial")
        os.replace(to / f"{MIRROR_PACK}.partial", to / MIRROR_PACK)
    except OSError as err:
        print(f"first light: could not copy the record to {to}: {err}", file=sys.stderr)


def not_carried(house: Path | None) -> dict[str, str]:
    """Entries the wheelhouse says it could not carry: entry -> reason."""
    if house is None:
        return {}
    manifest = setup.read_manifest(house)
    left = manifest.get("entries_left_out") or {}
    return {str(k): str(v) for k, v in left.items()} if isinstance(left, dict) else {}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    procs.become_subreaper()
    made: setup.Setup | None = None
    call: Call | None = None
    try:
        call = Call(args)
        call.state["calls"] = call.state.get("calls", 0) + 1
        made = setup.make_importable(args.python, REPO, args.wheelhouse, args.out, call.deadline)
        if made.pth is not None or made.python is not None:
            print(f"first light: milabench made importable ({made.how}, "
                  f"{len(made.installed)} wheels)")  # fmt: skip
        if made.python is not None:  # the Python's folder is read-only: its overlay runs
            args.python = made.python
        if call.state.get("entries") is None:
            first_call(call, not_carried(args.wheelhouse))
        entries = call.state["entries"]
        for entry in entries:
            if entry["status"] == "running":  # an earlier call was killed during it
                entry["status"] = "pending"
            if args.retry_failed and entry["status"] in ("failed", "timeout", "not installed"):
                entry["status"] = "pending"
        if args.retry_failed:
            check_imports(call)
        gpus = summary.gpu_names(args.out / "machine.json")
        announce(call, gpus)
        for entry in entries:
            if entry["status"] != "pending":
                continue
            left = call.bounded_timeout(args.entry_cap, keep=FINAL_RESERVE)
            if left < min(args.min_start, args.entry_cap):
                break  # not enough time left to start any: the rest stay pending
            # what it gets before milabench is told to stop it (`run_entry`)
            why = selection.wait_reason(entry["name"], left - GRACE - RUN_OVERHEAD,
                                        args.entry_cap - GRACE - RUN_OVERHEAD,
                                        args.config.name, gpus)  # fmt: skip
            if why:
                entry["note"] = why
                continue  # a cheaper entry further on may still fit
            run_entry(call, entry)
            write_summary(call)  # its status as set after its reports were written
        write_reports(call, last=True)
        return finish(call)
    except Stop as err:
        print(f"first_light: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except setup.SetupError as err:
        print(f"first_light: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        setup.remove_pth(made)
        procs.kill_descendants()
        if args.archive is not None:
            pack(args.out, args.archive)


#: What `pack` leaves out of the archive: the wheels installed, the data sets generated.
NOT_PACKED = ("site", "venv", "base/data", "base/cache", "base/venv", "base/extra")


def pack(out: Path, archive: Path) -> None:
    """``OUT`` as one ``.tar.gz`` (reports, state, logs, the run folder; not the installed
    wheels nor the generated data), for a machine that gives back only a few files."""
    import tarfile

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = info.name.partition("/")[2]
        return None if any(rel == x or rel.startswith(x + "/") for x in NOT_PACKED) else info

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(out, arcname=out.name, filter=keep)


def finish(call: Call) -> int:
    """The closing lines and the exit code."""
    entries = call.state["entries"]
    pending = [e["name"] for e in entries if e["status"] == "pending"]
    bad = [f"{e['name']} ({e['status']})" for e in entries if e["status"] not in
           ("done", "pending")]  # fmt: skip
    for name, reason in (call.state.get("left_out") or {}).items():
        print(f"first light: left out {name}: {reason}")
    wall = call.deadline.elapsed()
    done = sum(e["status"] == "done" for e in entries)
    print(f"first light: {done} of {len(entries)} entries passed in {wall:.0f} s "
          f"(budget {call.args.budget:.0f} s); summary in {call.args.out / 'first-light.md'}")  # fmt: skip
    if bad:
        print(f"first light: not successful: {', '.join(bad)}")
    if pending:
        print(f"first light: out of time before {', '.join(pending)}; the same command "
              "continues them")  # fmt: skip
        return EXIT_MORE
    return EXIT_FAILED if bad else 0


if __name__ == "__main__":
    sys.exit(main())
