"""Run a suite under emulated hardware profiles and tabulate what milabench says about each.

Why: a benchmark tool is judged on the machines it was *not* tuned on. A host without
native bf16, a node with fewer cores than the suite expects, a container held to a CPU
quota: each should give a slower but honest number, a clear warning when the window was
too short to be precise, and a verdict and exit code that agree. This script runs the
real command line (``milabench run``, one subprocess per profile, argv lists, no shell)
once per profile and reads the outcome back with ``milabench report --format json``.

Profiles (all of them available on an ordinary Linux host, no special hardware):

* ``native``: nothing changed, the reference row.
* ``avx2``: ``ATEN_CPU_CAPABILITY=default`` (PyTorch's own kernels without vector code)
  and ``ONEDNN_MAX_CPU_ISA=AVX2`` (oneDNN may not use AVX-512, so no native bf16): a
  CPU of an older generation. On an AVX-512 host a bf16 matmul becomes ~100x slower,
  which is what step-count budgets could not survive.
* ``onecore``: ``taskset -c 0`` in front of ``milabench run``: one core for a suite
  that expects the machine's count. The benchmarks still read the core count from the
  system (their thread count does not change): that mismatch is the point.
* ``quota``: a cgroup v1 CPU quota (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
  ``--quota-cpus`` CPUs' worth, default 1.0), the way a container limit looks from
  inside: every core is visible, but the time on them is capped. ``milabench run``
  joins the cgroup before it execs, so every benchmark process inherits it; the cgroup
  is removed afterwards, also after Ctrl-C or an error. Skipped, with the reason, when
  the controller is missing or not writable.

Usage::

    python scripts/emulated_hosts.py [--config config/cpu.yaml] [--base /tmp/emu-base] \
        [--profiles native,avx2,onecore,quota] [--select a,b] [--override k=v ...] \
        [--quota-cpus 1.0] [--markdown emu.md] [--json emu.json]

Install and prepare the suite with the same ``--base`` first (``milabench install
--base B && milabench prepare --base B``), or pass ``--use-current-env``. Each run's
folder is ``<base>/runs/emu-<profile>-<time>``; each run's console output is kept in
``<base>/emu-logs/emu-<profile>-<time>.log``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CGROUP_ROOT = Path("/sys/fs/cgroup/cpu")
CFS_PERIOD_US = 100_000
PROFILE_NAMES = ("native", "avx2", "onecore", "quota")
DEFAULT_MIN_OBSERVATIONS = 10  # docs/measurement.md; a report row may carry its own
MISSING = "-"


# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """One emulated host: what changes in the environment and in front of the command."""

    name: str
    what: str
    env: dict[str, str] = field(default_factory=dict)
    prefix: tuple[str, ...] = ()
    quota_cpus: float | None = None

    def argv(self, command: Sequence[str]) -> list[str]:
        """The command as this profile starts it (a wrapper such as taskset goes first)."""
        return [*self.prefix, *command]

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of the run: ``base`` (default ``os.environ``) plus the profile's."""
        env = dict(os.environ if base is None else base)
        env.update(self.env)
        return env


def make_profiles(quota_cpus: float = 1.0) -> dict[str, Profile]:
    """Every profile, by name (the order is the order of the tables)."""
    return {
        "native": Profile("native", "the host as it is"),
        "avx2": Profile(
            "avx2",
            "no AVX-512/native bf16: ATen kernels without vector code, oneDNN up to AVX2",
            env={"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        ),
        "onecore": Profile(
            "onecore",
            "one core (taskset -c 0), benchmarks still sized for every core",
            prefix=("taskset", "-c", "0"),
        ),
        "quota": Profile(
            "quota",
            f"cgroup v1 CPU quota of {quota_cpus:g} CPU(s), every core visible",
            quota_cpus=quota_cpus,
        ),
    }


def parse_profiles(text: str, known: dict[str, Profile]) -> list[Profile]:
    """``native,avx2`` -> profiles; an unknown name is an error naming the known ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(
            f"--profiles: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}"
        )
    return [known[n] for n in dict.fromkeys(names)]


def host_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """What the host has that the profiles take away (printed with the tables)."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        flags = set()
    return {
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "taskset": shutil.which("taskset"),
    }


def unavailable(profile: Profile) -> str | None:
    """Why ``profile`` cannot run on this host (None: it can); the quota is checked later."""
    if profile.prefix and not shutil.which(profile.prefix[0]):
        return f"{profile.prefix[0]} not found on PATH"
    return None


# --------------------------------------------------------------------------- cgroup quota


class CgroupUnavailable(RuntimeError):
    """The CPU controller cannot be used here (the reason is the message)."""


class CpuQuota:
    """A cgroup v1 ``cpu`` group with a CFS quota, created for one run and removed after.

    ``root`` is the mounted controller (``/sys/fs/cgroup/cpu``); tests pass a temporary
    folder. The group is ``<root>/milabench-emu-<pid>`` so that two studies never share
    one. `join` is meant as ``preexec_fn``: it runs in the child between fork and exec,
    so the command and every process it starts are in the group from their first
    instruction.
    """

    def __init__(
        self,
        cpus: float,
        root: Path = CGROUP_ROOT,
        name: str | None = None,
        period_us: int = CFS_PERIOD_US,
    ) -> None:
        if not cpus > 0:
            raise ValueError(f"quota: cpus must be > 0, got {cpus}")
        self.cpus = cpus
        self.root = Path(root)
        self.path = self.root / (name or f"milabench-emu-{os.getpid()}")
        self.period_us = int(period_us)
        self.quota_us = max(1000, round(cpus * self.period_us))  # the kernel's minimum: 1 ms
        self.created = False

    def check(self) -> None:
        """Raise `CgroupUnavailable` unless a group can be made under the root."""
        if not self.root.is_dir():
            raise CgroupUnavailable(f"no cgroup v1 cpu controller at {self.root}")
        if not (self.root / "cpu.cfs_quota_us").exists():
            raise CgroupUnavailable(f"{self.root} is not a cgroup v1 cpu controller")
        if not os.access(self.root, os.W_OK):
            raise CgroupUnavailable(f"{self.root} is not writable (needs root)")

    def create(self) -> None:
        """Make the group and set its quota (`CgroupUnavailable` when it cannot)."""
        self.check()
        try:
            self.path.mkdir()
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create {self.path}: {exc}") from exc
        self.created = True
        try:
            (self.path / "cpu.cfs_period_us").write_text(f"{self.period_us}\n")
            (self.path / "cpu.cfs_quota_us").write_text(f"{self.quota_us}\n")
        except OSError as exc:
            self.remove(timeout=0)
            raise CgroupUnavailable(f"cannot set the quota in {self.path}: {exc}") from exc

    def join(self) -> None:
        """Move the calling process into the group (``preexec_fn``: runs in the child)."""
        with open(self.path / "cgroup.procs", "w") as procs:
            procs.write(f"{os.getpid()}\n")

    def pids(self) -> list[int]:
        """Live processes in the group (a stale pid in a stand-in file does not count)."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split() if p.isdigit() and _alive(int(p))]

    def contains(self, pid: int) -> bool:
        """Whether ``pid`` is in the group, as the kernel sees it (``/proc/<pid>/cgroup``)."""
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return False
        suffix = "/" + self.path.name
        for line in lines:
            _hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
            if "cpu" in controllers.split(",") and path.endswith(suffix):
                return True
        return False

    def remove(self, timeout: float = 30.0) -> str | None:
        """Remove the group once empty; returns what went wrong (None: removed).

        A cgroup can only be removed when no process is left in it. The run's processes
        normally end with it; a straggler (a benchmark's orphaned worker) gets ``timeout``
        seconds, then SIGKILL: every process in this group was started by this script.
        """
        if not self.created:
            return None
        deadline = time.monotonic() + max(0.0, timeout)
        killed = False
        while True:
            left = self.pids()
            if not left:
                break
            if time.monotonic() >= deadline:
                if killed:
                    return f"{self.path}: processes {left} did not leave; remove it by hand"
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                killed = True
                deadline = time.monotonic() + 5.0
            time.sleep(0.1)
        for attempt in range(20):
            try:
                self.path.rmdir()
                self.created = False
                return None
            except FileNotFoundError:
                self.created = False
                return None
            except OSError as exc:
                if attempt == 19:
                    return f"cannot remove {self.path}: {exc}"
                time.sleep(0.1)  # the kernel releases an emptied group asynchronously
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- one run


@dataclass
class ProfileResult:
    """Everything one profile's run said (the JSON output is a list of these)."""

    profile: str
    what: str
    skipped: str | None = None
    run_dir: str | None = None
    log: str | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    wall_s: float | None = None
    exit_code: int | None = None
    printed_verdict: str | None = None
    printed_failure_rate: float | None = None
    printed_score: float | None = None
    verdict: str | None = None
    report_exit_code: int | None = None
    score: float | None = None
    failure_rate: float | None = None
    verdict_reasons: list[str] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_FAILURE = re.compile(r"Failure rate:\s*([0-9.]+)%\s*\((\w+)\)")
_VERDICT = re.compile(r"^Verdict:\s*(\w+)", re.MULTILINE)
_SCORE = re.compile(r"^Score:\s*([-+0-9.eE]+|nan|inf)\s*$", re.MULTILINE)


def parse_printed(text: str) -> tuple[str | None, float | None, float | None]:
    """(verdict, failure rate as a fraction, score) as ``milabench run`` printed them."""
    verdict = failure = score = None
    found = _FAILURE.findall(text)
    if found:
        failure = float(found[-1][0]) / 100
        verdict = found[-1][1]
    said = _VERDICT.findall(text)  # newer reports print the verdict on a line of its own
    if said:
        verdict = said[-1]
    scores = _SCORE.findall(text)
    if scores:
        try:
            score = float(scores[-1])
        except ValueError:
            score = None
    return verdict, failure, score


def suite_args(args: argparse.Namespace) -> list[str]:
    """The options that say which suite and which entries (shared by run and report)."""
    out = ["--config", str(args.config), "--base", str(args.base)]
    for sel in args.select or []:
        out += ["--select", sel]
    for exc in args.exclude or []:
        out += ["--exclude", exc]
    for ov in args.override or []:
        out += ["--override", ov]
    if args.use_current_env:
        out.append("--use-current-env")
    return out


def run_command(args: argparse.Namespace, run_name: str) -> list[str]:
    """``milabench run`` for one profile (before the profile's own prefix)."""
    return [
        sys.executable,
        "-m",
        "milabench",
        "run",
        *suite_args(args),
        "--run-name",
        run_name,
        "--dash",
        "no",
    ]


def report_args(args: argparse.Namespace) -> list[str]:
    """Suite options for ``milabench report``, so that its verdict is the one run printed.

    ``milabench run`` judges the entries it selected; ``milabench report --config`` counts
    every entry of the suite (the unselected ones as "not run"). With a selection, the
    report therefore reads the entries from the run folder itself.
    """
    if args.select or args.exclude:
        return []
    return [a for a in suite_args(args) if a != "--use-current-env"]


def read_report(args: argparse.Namespace, run_dir: Path) -> dict[str, Any] | None:
    """``milabench report --format json`` of the run folder (None when it gave none)."""
    cmd = [
        sys.executable,
        "-m",
        "milabench",
        "report",
        "--runs",
        str(run_dir),
        "--format",
        "json",
        *report_args(args),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    try:
        return json.loads(done.stdout)
    except ValueError:
        sys.stderr.write(f"milabench report gave no JSON (rc {done.returncode}):\n")
        sys.stderr.write(done.stderr[-2000:])
        return None


def _stream(
    proc: subprocess.Popen, log, echo: Callable[[str], None] | None, keep: list[str]
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        keep.append(line)
        if echo is not None:
            echo(line)


def _stop(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """Stop the run the way milabench expects: one SIGINT (orderly stop, partial report),
    a second one if it hangs (milabench cancels the run), SIGKILL last.

    The run has its own session, so a Ctrl-C in the terminal reaches only this script and
    the signals milabench gets are exactly these: a terminal's SIGINT plus ours would
    count as two and skip the orderly path.
    """
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGINT, 30.0), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_profile(
    profile: Profile,
    args: argparse.Namespace,
    *,
    stamp: str,
    cgroup_root: Path = CGROUP_ROOT,
    echo: Callable[[str], None] | None = None,
) -> ProfileResult:
    """Run the suite once under ``profile``; the result holds what the report said."""
    result = ProfileResult(profile.name, profile.what, env=dict(profile.env))
    reason = unavailable(profile)
    quota: CpuQuota | None = None
    if reason is None and profile.quota_cpus is not None:
        quota = CpuQuota(profile.quota_cpus, root=cgroup_root)
        try:
            quota.check()
        except CgroupUnavailable as exc:
            reason = str(exc)
    if reason is not None:
        result.skipped = reason
        return result

    run_name = f"emu-{profile.name}-{stamp}"
    runs = Path(args.base) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = runs / run_name
    logs = Path(args.base) / "emu-logs"  # not in runs/: tools read every entry there
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{run_name}.log"
    argv = profile.argv(run_command(args, run_name))
    result.argv, result.run_dir, result.log = argv, str(run_dir), str(log_path)
    lines: list[str] = []
    interrupted = False
    try:
        if quota is not None:
            quota.create()
            result.notes.append(
                f"cgroup {quota.path}: cfs_quota_us={quota.quota_us} "
                f"cfs_period_us={quota.period_us}"
            )
        start = time.perf_counter()
        with open(log_path, "w", buffering=1) as log:
            proc = subprocess.Popen(
                argv,
                env=profile.environ(),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=quota.join if quota is not None else None,
                start_new_session=True,
            )
            if quota is not None and not quota.contains(proc.pid):
                result.notes.append("the run's process was not seen in the cgroup")
            # A thread drains the output whatever the main thread does: a run that is
            # being stopped writes its partial report, and must never block on a full pipe.
            reader = threading.Thread(target=_stream, args=(proc, log, echo, lines), daemon=True)
            reader.start()
            try:
                proc.wait(timeout=args.profile_timeout or None)
            except subprocess.TimeoutExpired:
                result.notes.append(f"stopped after --profile-timeout {args.profile_timeout}s")
                _stop(proc)
            except KeyboardInterrupt:
                interrupted = True
                print("interrupted: stopping the run (partial report)...", file=sys.stderr)
                _stop(proc)
            reader.join(timeout=30)
        result.wall_s = time.perf_counter() - start
        result.exit_code = proc.returncode
    except CgroupUnavailable as exc:
        result.skipped = str(exc)
        return result
    except subprocess.SubprocessError as exc:  # e.g. the preexec_fn failed to join
        result.skipped = f"could not start: {exc}"
        return result
    finally:
        if quota is not None:
            problem = quota.remove()
            if problem:
                result.notes.append(problem)
                print(f"warning: {problem}", file=sys.stderr)

    text = "".join(lines)
    result.printed_verdict, result.printed_failure_rate, result.printed_score = parse_printed(text)
    if run_dir.is_dir():
        report = read_report(args, run_dir)
        if report is not None:
            apply_report(result, report)
    else:
        result.notes.append("no run folder (milabench stopped before running anything)")
    if interrupted:
        result.notes.append("interrupted (Ctrl-C)")
        raise KeyboardInterrupt(result)
    return result


def apply_report(result: ProfileResult, report: dict[str, Any]) -> None:
    """Copy the report's verdict, score and per-entry figures into ``result``."""
    result.verdict = report.get("verdict")
    result.report_exit_code = report.get("exit_code")
    result.score = _number(report.get("score"))
    result.failure_rate = _number(report.get("failure_rate"))
    reasons = report.get("verdict_reasons") or []
    result.verdict_reasons = [str(r) for r in reasons] if isinstance(reasons, list) else []
    result.entries = [entry_figures(row) for row in report.get("benchmarks") or []]
    if result.printed_verdict and result.verdict and result.printed_verdict != result.verdict:
        result.notes.append(
            f"printed verdict {result.printed_verdict} != report verdict {result.verdict}"
        )


# --------------------------------------------------------------------------- figures


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def entry_figures(row: dict[str, Any]) -> dict[str, Any]:
    """One report row reduced to what the tables show; a key the report lacks is None.

    The report's JSON grows (observations, interval, target); rows from an older report
    still give name, rate and units, so the script reads every key defensively.
    """
    rate = _number(row.get("perf"))
    median = _number(row.get("median"))
    low, high = _number(row.get("ci95_low")), _number(row.get("ci95_high"))
    halfwidth = _number(row.get("halfwidth"))
    centre = rate if rate else median
    if halfwidth is None and low is not None and high is not None and centre:
        halfwidth = (high - low) / 2 / abs(centre)
    observations = row.get("observations")
    observations = int(observations) if isinstance(observations, (int, float)) else None
    min_obs = row.get("min_observations")
    target_met = row.get("target_met")
    warnings = row.get("warnings") or []
    return {
        "name": row.get("name") or row.get("bench") or "?",
        "units": row.get("units"),
        "rate": rate,
        "median": median,
        "ci95_low": low,
        "ci95_high": high,
        "halfwidth": halfwidth,
        "target": _number(row.get("target")),
        "target_met": target_met if isinstance(target_met, bool) else None,
        "observations": observations,
        "min_observations": int(min_obs) if isinstance(min_obs, (int, float)) else None,
        "warmup_s": _number(row.get("warmup_s")),
        "measured_s": _number(row.get("measured_s")),
        "fail": row.get("fail"),
        "n": row.get("n"),
        "reason": row.get("reason"),
        "warnings": [str(w) for w in warnings] if isinstance(warnings, list) else [str(warnings)],
    }


def fmt_sig(x: float | None, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits (``-`` when unknown)."""
    if x is None or not math.isfinite(x):
        return MISSING
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= 6 or magnitude < -4:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - magnitude)
    return f"{round(x, digits - 1 - magnitude):,.{decimals}f}"


def fmt_time(seconds: float | None) -> str:
    """m:ss (``-`` when unknown)."""
    if seconds is None:
        return MISSING
    total = round(seconds)
    return f"{total // 60}:{total % 60:02d}"


def missed(entry: dict[str, Any], min_obs: int) -> list[str]:
    """Why an entry's figure is weak: target missed, too few observations, failed."""
    flags = []
    if entry.get("rate") is None:
        flags.append("no rate")
    if entry.get("target_met") is False:
        flags.append("target missed")
    n = entry.get("observations")
    need = entry.get("min_observations") or min_obs
    if n is not None and n < need:
        flags.append(f"n={n}<{need}")
    if entry.get("fail"):
        flags.append(f"{entry['fail']} failed")
    return flags


def entry_cell(entry: dict[str, Any] | None, native: dict[str, Any] | None, min_obs: int) -> str:
    """``0.203 ±1.2% (x0.51) [n=4<10]`` for one entry under one profile."""
    if entry is None:
        return MISSING
    if entry.get("rate") is None:
        reason = entry.get("reason")
        return "FAILED" + (f" ({reason})" if reason else "")
    text = fmt_sig(entry["rate"])
    if entry.get("halfwidth") is not None:
        text += f" ±{fmt_sig(entry['halfwidth'] * 100, 2)}%"
    ref = native.get("rate") if native else None
    if ref and native is not entry:
        text += f" (x{fmt_sig(entry['rate'] / ref, 2)})"
    flags = missed(entry, min_obs)
    if flags:
        text += " **[" + ", ".join(flags) + "]**"
    return text


def summary_row(result: ProfileResult, min_obs: int) -> list[str]:
    """The profile's cells of the summary table."""
    if result.skipped:
        return [result.profile, MISSING, "skipped", MISSING, MISSING, MISSING, MISSING,
                MISSING, result.skipped]  # fmt: skip
    entries = result.entries
    weak = sum(1 for e in entries if missed(e, min_obs))
    known = [e["observations"] for e in entries if e.get("observations") is not None]
    verdict = result.printed_verdict or result.verdict or MISSING
    failure = result.failure_rate
    if failure is None:
        failure = result.printed_failure_rate
    score = result.score if result.score is not None else result.printed_score
    notes = list(result.verdict_reasons) + list(result.notes)
    return [
        result.profile,
        fmt_time(result.wall_s),
        verdict,
        MISSING if result.exit_code is None else str(result.exit_code),
        fmt_sig(score),
        MISSING if failure is None else f"{failure * 100:.2f}%",
        f"{weak} / {len(entries)}" if entries else MISSING,
        str(min(known)) if known else MISSING,
        "; ".join(notes).replace("|", "\\|") or "",
    ]


SUMMARY_HEADER = [
    "profile", "time", "verdict", "exit", "score", "failure rate",
    "entries below target / total", "min obs", "notes",
]  # fmt: skip


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def summary_table(results: list[ProfileResult], min_obs: int = DEFAULT_MIN_OBSERVATIONS) -> str:
    """Profiles as rows: time, verdict, exit code, score, weak entries, fewest observations."""
    rows = [summary_row(r, min_obs) for r in results]
    align = [":---", "---:", ":---", "---:", "---:", "---:", "---:", "---:", ":---"]
    return _table(SUMMARY_HEADER, rows, align)


def entries_table(results: list[ProfileResult], min_obs: int = DEFAULT_MIN_OBSERVATIONS) -> str:
    """Entries as rows, profiles as columns: rate ±half-width, ratio to native, flags."""
    ran = [r for r in results if not r.skipped]
    names: list[str] = []
    units: dict[str, str] = {}
    for r in ran:
        for e in r.entries:
            if e["name"] not in names:
                names.append(e["name"])
            if e.get("units") and e["name"] not in units:
                units[e["name"]] = str(e["units"])
    by_profile = {r.profile: {e["name"]: e for e in r.entries} for r in ran}
    native = by_profile.get("native", {})
    rows = []
    for name in names:
        cells = [name, units.get(name, MISSING)]
        for r in ran:
            cells.append(entry_cell(by_profile[r.profile].get(name), native.get(name), min_obs))
        rows.append([c.replace("|", "\\|") for c in cells])
    header = ["entry", "units", *[r.profile for r in ran]]
    return _table(header, rows, [":---", ":---"] + ["---:"] * len(ran))


def host_line(features: dict[str, Any]) -> str:
    yes = {True: "yes", False: "no"}
    return (
        f"Host: {features.get('cpus')} CPUs ({features.get('affinity')} in this process's "
        f"affinity), avx512f: {yes[bool(features.get('avx512f'))]}, avx512_bf16: "
        f"{yes[bool(features.get('avx512_bf16'))]}, amx_bf16: "
        f"{yes[bool(features.get('amx_bf16'))]}."
        + (
            ""
            if features.get("avx512_bf16")
            else " Without native bf16 here, the avx2 profile changes less than on an AVX-512 host."
        )
    )


def markdown(
    results: list[ProfileResult], features: dict[str, Any], min_obs: int, suite: str
) -> str:
    out = [
        f"Suite: `{suite}`. {host_line(features)}",
        "",
        summary_table(results, min_obs),
        "",
        "Per entry: rate (3 significant digits) ±half-width of its 95% interval (relative), "
        "(x ratio to native), flags in brackets: target missed, fewer observations than "
        f"the minimum ({min_obs} unless the report says otherwise), failures.",
        "",
        entries_table(results, min_obs),
    ]
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config" / "cpu.yaml"))
    parser.add_argument("--base", default="/tmp/emu-base")
    parser.add_argument("--select", action="append", default=[], help="passed to milabench")
    parser.add_argument("--exclude", action="append", default=[], help="passed to milabench")
    parser.add_argument(
        "--override", action="append", default=[], help="KEY=VALUE passed to milabench"
    )
    parser.add_argument("--use-current-env", action="store_true", help="passed to milabench")
    parser.add_argument(
        "--profiles",
        default=",".join(PROFILE_NAMES),
        help=f"comma list (default: {','.join(PROFILE_NAMES)})",
    )
    parser.add_argument(
        "--quota-cpus", type=float, default=1.0, help="CPUs' worth of quota (default 1.0)"
    )
    parser.add_argument(
        "--profile-timeout",
        type=float,
        default=0,
        help="stop one profile's run after this many seconds (0: no limit)",
    )
    parser.add_argument(
        "--min-observations",
        type=int,
        default=DEFAULT_MIN_OBSERVATIONS,
        help="flag entries with fewer (when the report does not say its own minimum)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo the runs' output")
    parser.add_argument("--markdown", default=None, help="write the tables here")
    parser.add_argument("--json", default=None, help="write the raw results here")
    return parser


def main(argv: list[str] | None = None, *, cgroup_root: Path = CGROUP_ROOT) -> int:
    args = build_parser().parse_args(argv)
    args.base = str(Path(args.base).absolute())
    args.config = str(Path(args.config).absolute())
    profiles = parse_profiles(args.profiles, make_profiles(args.quota_cpus))
    features = host_features()
    print(host_line(features), file=sys.stderr, flush=True)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    results: list[ProfileResult] = []
    interrupted = False
    for profile in profiles:
        print(f"== {profile.name}: {profile.what}", file=sys.stderr, flush=True)

        def echo(line: str, name: str = profile.name) -> None:
            if not args.quiet and " train rate " not in line:
                sys.stderr.write(f"[{name}] {line}")
                sys.stderr.flush()

        try:
            result = run_profile(profile, args, stamp=stamp, cgroup_root=cgroup_root, echo=echo)
        except KeyboardInterrupt as stop:
            partial = stop.args[0] if stop.args else None
            if isinstance(partial, ProfileResult):
                results.append(partial)
            print("interrupted: the tables cover the profiles run so far", file=sys.stderr)
            interrupted = True
            break
        results.append(result)
        if result.skipped:
            print(f"== {profile.name}: skipped ({result.skipped})", file=sys.stderr)
        else:
            print(
                f"== {profile.name}: {fmt_time(result.wall_s)}, exit {result.exit_code}, "
                f"verdict {result.printed_verdict or result.verdict}",
                file=sys.stderr,
                flush=True,
            )

    text = markdown(results, features, args.min_observations, args.config)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        payload = {
            "host": features,
            "config": args.config,
            "base": args.base,
            "results": [asdict(r) for r in results],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    # The study describes what each profile gave (a FAIL under emulation is a finding):
    # non-zero only when it could not run what was asked.
    if interrupted:
        return 130
    return 0 if any(r.exit_code is not None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
