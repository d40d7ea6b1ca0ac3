"""The fleet pipeline: every node of the system measured as its own single-node machine.

`run_fleet` takes each node, at most ``concurrency`` at a time, through **reach** (its
connection and Python, else ``unreachable``; then `milabench doctor`'s checks and, when
it installs, its package sources), **code** (`milabench.remote.codesync.push_each`),
**install** and **prepare** (its own ``milabench install|prepare`` in its own base,
`nodeplan`) and its environment facts; once every node is ready or out, **run** starts
on every ready node at the same time (not bounded by ``concurrency``), and each node's
run folder is **collected** into ``<base>/fleet/<name>/nodes/<node>/``. A node's failure
never stops the others: its status and reason go to ``fleet.json``, rewritten after
every step and valid at every moment. The first SIGINT/SIGTERM stops every running
phase (SIGTERM, SIGKILL after ``grace`` seconds, then sweeps) and the partial run
folders are still collected; a second signal kills at once and skips the collection.
Why, and what each step does: docs/multinode.md "Validate a new rack".
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from milabench.config.topology import get_option, runs_locally
from milabench.errors import ConfigError, MilabenchError, NodeError, UsageError
from milabench.fleet.collect import MissingRunFolder, collect_run
from milabench.fleet.folder import FleetFolder, NodeRecord
from milabench.fleet.nodeplan import (
    PHASES,
    TOKEN_VAR,
    NodeCommandSettings,
    Selection,
    check_node_names,
    node_run_base,
    node_system,
    phase_argv,
    phase_env,
    raw_system,
    short_reason,
    single_node_selection,
)
from milabench.fleet.phases import NodeRunner, PhaseOutcome
from milabench.plan.spec import ProcessSpec
from milabench.remote.ssh import ConnectionPool, SSHSettings

# A node that goes silent (powered off, cable pulled, hung kernel) sends no FIN: without
# keepalives its connection would look alive until TCP gives up (many minutes). 15 s x 4
# unanswered probes: a silent node is "lost" about a minute after it stopped answering.
# Options fleet.keepalive_interval / fleet.keepalive_count (env MILABENCH_FLEET_...).
KEEPALIVE_INTERVAL = 15.0
KEEPALIVE_COUNT = 4
DEFAULT_GRACE = 20.0  # the node's `milabench run` needs ~3-8 s to stop and write its report
INTERRUPTED_COLLECT_TIMEOUT = 120.0

_PYTHON_PROBE = "import platform, sys; print(sys.prefix); print(platform.python_version())"


def _positive_option(system: dict, key: str, default: float) -> float:
    """A positive number from the option tree (env > system file > default), or one line."""
    value = get_option(system, key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf"):
        where = system.get("config_file") or "system"
        raise ConfigError(f"{where}: options.{key}: expected a positive number, got {value!r}")
    return number


class _KeepaliveSettings(SSHSettings):
    """The system's SSH settings plus keepalives (see `KEEPALIVE_INTERVAL`)."""

    def __init__(self, system: dict) -> None:
        super().__init__(system)
        self.keepalive = _positive_option(system, "fleet.keepalive_interval", KEEPALIVE_INTERVAL)
        self.keepalive_count = int(
            _positive_option(system, "fleet.keepalive_count", KEEPALIVE_COUNT)
        )

    def connect_kwargs(self, node: dict) -> dict:
        kwargs = super().connect_kwargs(node)
        kwargs["keepalive_interval"] = self.keepalive
        kwargs["keepalive_count_max"] = self.keepalive_count
        return kwargs


@dataclass
class FleetOptions:
    """What `milabench fleet` was asked for, beyond the suite itself."""

    select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    use_current_env: bool = False
    strict: bool = False
    concurrency: int = 8
    node_python: str | None = None
    phases: tuple[str, ...] = PHASES
    grace: float = DEFAULT_GRACE
    ignore_doctor: bool = False  # measure nodes whose doctor found a failure anyway

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")


@dataclass
class FleetResult:
    """The fleet folder, and the signal that stopped the fleet (None when none did)."""

    folder: FleetFolder
    signal: int | None = None
    selection: Selection | None = None


@dataclass
class _Job:
    """One node's state through the pipeline."""

    node: dict
    record: NodeRecord
    runner: NodeRunner
    token: str
    run_base: str
    python: str
    layout: object | None = None
    settings: NodeCommandSettings | None = None
    prefix: str | None = None
    run_outcome: PhaseOutcome | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def token_entry(self) -> str:
        return f"{TOKEN_VAR}={self.token}"

    @property
    def active(self) -> bool:
        return self.record.status is None


def node_python(options: FleetOptions, system: dict, local: bool) -> str:
    """``--node-python``, else the ``fleet.python`` option (env MILABENCH_FLEET_PYTHON),
    else this interpreter for a local node and ``python3`` on the others."""
    if options.node_python:
        return options.node_python
    configured = get_option(system, "fleet.python", None)
    if configured:
        return str(configured)
    return sys.executable if local else "python3"


class Fleet:
    """One fleet run (see the module's description)."""

    def __init__(self, suite, options: FleetOptions, *, out: TextIO | None = None) -> None:
        self.suite = suite
        self.options = options
        self.system = suite.system
        self.out = out or sys.stderr
        check_node_names(self.system)
        self.selection = single_node_selection(suite)
        if not self.selection.run:
            left = ", ".join(n for n, _ in self.selection.left_out) or "none"
            raise UsageError(
                f"fleet: no single-node benchmark selected (left out: {left}); a fleet "
                "runs entries with num_machines 1 on every node"
            )
        self.main_base = Path(suite.base).absolute()
        from milabench.envs.constraints import constraints_dir

        constraints = constraints_dir(self.system)
        self.constraints = str(constraints) if constraints.is_dir() else None
        self.code_paths = suite_code_paths(suite) + ([constraints] if self.constraints else [])
        self.raw_system = raw_system(self.system)
        self.pool = ConnectionPool(self.system)
        self.pool.settings = _KeepaliveSettings(self.system)
        self.stop = asyncio.Event()
        self.hard = asyncio.Event()
        self.signal: int | None = None
        self.jobs: list[_Job] = []
        for node in self.system.get("nodes") or []:
            local = runs_locally(node, self.system)
            record = NodeRecord(name=str(node["name"]), host=str(node["ip"]))
            run_base = node_run_base(node, self.main_base)
            record.extra.update({"via": "local" if local else "ssh", "base": run_base})
            self.jobs.append(
                _Job(
                    node=node,
                    record=record,
                    runner=NodeRunner(self.system, node, self.pool, local=local),
                    token=uuid.uuid4().hex,
                    run_base=run_base,
                    python=node_python(options, self.system, local),
                )
            )
        self.folder = FleetFolder.create(
            self.main_base,
            config=str(Path(suite.config_path).absolute()),
            select=list(options.select),
            exclude=list(options.exclude),
            nodes=[job.record for job in self.jobs],
        )
        self.folder.extra.update(
            {
                "entries": list(self.selection.run),
                "left_out": [{"name": n, "why": w} for n, w in self.selection.left_out],
                "phases": list(options.phases),
            }
        )
        self.folder.write()
        self._limit: asyncio.Semaphore | None = None
        self.t0 = time.monotonic()

    # -- messages and records -------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"fleet: {text}", file=self.out, flush=True)

    def save(self) -> None:
        self.folder.write()

    def set_phase(self, job: _Job, phase: str) -> None:
        job.record.phase = phase
        self.save()

    def timed(self, job: _Job, step: str, started: float) -> None:
        """Record how long ``step`` took, and when (``timeline``: seconds since the fleet
        started, ``[begin, end]``; it shows which nodes worked at the same time)."""
        now = time.monotonic()
        job.record.phase_seconds[step] = now - started
        timeline = job.record.extra.setdefault("timeline", {})
        timeline[step] = [round(started - self.t0, 3), round(now - self.t0, 3)]

    def finish(self, job: _Job, status: str, reason: str | None = None) -> None:
        job.record.finish(status, reason)
        self.save()
        self.say(f"{job.name}: {status}" + (f": {reason}" if reason else ""))

    def _interrupted(self) -> str:
        name = signal.Signals(self.signal).name if self.signal else "a signal"
        return f"interrupted ({name})"

    # -- the pipeline ---------------------------------------------------------------------

    def run(self) -> FleetResult:
        return asyncio.run(self.main())

    async def main(self) -> FleetResult:
        loop = asyncio.get_running_loop()
        self._limit = asyncio.Semaphore(self.options.concurrency)
        handled = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, self._on_signal, signum)
                handled.append(signum)
            except (ValueError, RuntimeError):  # not the main thread
                pass
        if self.selection.left_out:
            notes = "; ".join(f"{n} ({w})" for n, w in self.selection.left_out)
            self.say(f"left out (a fleet runs single-node entries): {notes}")
        self.say(
            f"{len(self.jobs)} node(s), entries: {', '.join(self.selection.run)}; "
            f"folder {self.folder.path}"
        )
        try:
            await asyncio.gather(*(self.prepare_node(job) for job in self.jobs))
            ready = [job for job in self.jobs if job.active]
            if "run" in self.options.phases and ready and not self.stop.is_set():
                self.say(f"run on {len(ready)} node(s) at once: {', '.join(j.name for j in ready)}")
                await asyncio.gather(*(self.run_node(job) for job in ready))
                await asyncio.gather(*(self.collect_node(job) for job in ready))
            for job in self.jobs:
                if job.active:
                    if self.stop.is_set():
                        self.finish(job, _failed(job.record.phase), self._interrupted())
                    else:
                        self.finish(job, "ok")
        finally:
            for signum in handled:
                loop.remove_signal_handler(signum)
            try:
                await asyncio.wait_for(self.pool.close(), 15.0)
            except Exception:
                pass
            self.folder.close()
        return FleetResult(self.folder, self.signal, self.selection)

    def _on_signal(self, signum: int) -> None:
        if self.signal is None:
            self.signal = signum
            self.stop.set()
            self.say(
                f"{signal.Signals(signum).name}: stopping every node "
                f"(SIGKILL after {self.options.grace:g} s; again to kill at once)"
            )
        else:
            self.hard.set()
            self.say("second signal: killing every node's processes now")

    async def prepare_node(self, job: _Job) -> None:
        assert self._limit is not None
        async with self._limit:
            if self.stop.is_set():
                self.finish(job, "install-failed", f"not started: {self._interrupted()}")
                return
            try:
                if not await self.reach(job) or not await self.push(job):
                    return
                for phase in ("install", "prepare"):
                    if phase in self.options.phases and not await self.phase(job, phase):
                        return
                if not self.stop.is_set():
                    await self.environment(job)
                if job.active:
                    self.set_phase(job, "ready")
            except (MilabenchError, OSError) as err:  # a node's trouble no step expected
                self.finish(job, _failed(job.record.phase), _reason_of(err, type(err).__name__))

    async def reach(self, job: _Job) -> bool:
        self.set_phase(job, "reach")
        started = time.monotonic()
        try:
            await job.runner.connect()
            code, out, err = await job.runner.short([job.python, "-c", _PYTHON_PROBE])
        except (NodeError, OSError, TimeoutError) as err:
            self.finish(job, "unreachable", _reason_of(err, "no answer"))
            return False
        self.timed(job, "reach", started)
        if code != 0:
            why = short_reason(err.splitlines() or out.splitlines())
            self.finish(
                job,
                "install-failed",
                f"python {job.python!r} does not run on the node (exit {code}: {why}); "
                "set --node-python or the fleet.python option",
            )
            return False
        job.prefix = (out.splitlines() or [""])[0].strip() or None
        return await self.doctor(job) and await self.sources(job)

    async def sources(self, job: _Job) -> bool:
        """Can the node reach its package sources, as its own pip configuration names them
        (`milabench.doctor.sources`, before anything is copied)? One line per node; a
        node that reaches none of them cannot install and is finished (``install-failed``,
        with the cause); one that reaches some goes on with the line as a warning. Only
        when the node installs (the install phase, not ``--use-current-env``)."""
        from milabench.doctor import sources

        if "install" not in self.options.phases or self.options.use_current_env:
            return True
        try:
            code, out, err = await job.runner.short(sources.probe_argv(job.python))
        except (NodeError, OSError, TimeoutError) as exc:
            job.record.extra["sources_error"] = _reason_of(exc, "no answer")
            return True
        found = sources.parse(out)
        if found is None:
            why = short_reason(err.splitlines() or out.splitlines())
            job.record.extra["sources_error"] = f"the check printed no result (exit {code}: {why})"
            self.save()
            return True
        job.record.extra["sources"] = found
        self.save()
        line = sources.summary_line(found)
        bad = sources.failures(found)
        if bad and len(bad) == len(found.get("sources", [])):
            self.finish(job, "install-failed", f"package sources: {line}")
            return False
        self.say(f"{job.name}: package sources: {line}")
        return True

    async def doctor(self, job: _Job) -> bool:
        """`milabench doctor`'s checks on the node, by its own Python, before anything is
        copied (`milabench.doctor.probe.probe_argv`). The findings go to fleet.json
        (``doctor``); a Python that cannot import milabench's dependencies ends the node
        (``install-failed``, naming the module and how to point at another Python), and
        so does a failure (``run-failed``: its run would refuse) unless --ignore-doctor."""
        from milabench.doctor.findings import FAIL, refusal
        from milabench.doctor.probe import parse_probe_output, probe_argv

        started = time.monotonic()
        argv = probe_argv(job.python, paths=[job.run_base], modules=True)
        try:
            code, out, err = await job.runner.short(argv)
        except (NodeError, OSError, TimeoutError) as exc:
            job.record.extra["doctor_error"] = _reason_of(exc, "no answer")
            return True
        found = parse_probe_output(out)
        if found is None:
            why = short_reason(err.splitlines() or out.splitlines())
            job.record.extra["doctor_error"] = f"the checks printed no result (exit {code}: {why})"
            self.save()
            return True
        job.record.extra["doctor"] = [f.as_dict() for f in found]
        job.record.extra["doctor_seconds"] = round(time.monotonic() - started, 3)
        self.save()
        modules = [f for f in found if f.check == "python_modules" and f.severity == FAIL]
        if modules:
            self.finish(job, "install-failed", f"{job.python!r} on the node: {modules[0].reason}")
            return False
        line = refusal(
            found,
            lead="milabench doctor: ",
            tail="; not measured (its run would refuse to start; --ignore-doctor measures "
            "it anyway)",
        )
        if line is not None and not self.options.ignore_doctor:
            self.finish(job, "run-failed", line)
            return False
        return True

    async def push(self, job: _Job) -> bool:
        from milabench.remote.codesync import push_each

        self.set_phase(job, "code")
        started = time.monotonic()
        try:
            layouts, errors = await push_each(
                self.system,
                self.main_base,
                self.folder.name,
                self.code_paths,
                nodes=[job.node],
                pool=self.pool,
            )
        except (NodeError, OSError) as err:
            layouts, errors = {}, {job.name: err}
        if job.name in errors:
            lost = await job.runner.lost_reason("code copy")
            if lost:
                self.finish(job, "lost", lost)
            else:
                self.finish(job, "install-failed", f"code copy failed: {errors[job.name]}")
            return False
        layout = layouts[job.name]
        job.layout = layout
        self.timed(job, "code", started)
        job.record.extra["code"] = layout.method
        config = layout.remote_path(str(Path(self.suite.config_path).absolute()))
        system_file = f"{job.run_base}/system.yaml"
        import yaml

        constraints = layout.remote_path(self.constraints) if self.constraints else None
        document = node_system(self.raw_system, job.node, constraints_dir=constraints)
        text = yaml.safe_dump(document, sort_keys=False)
        try:
            await job.runner.write_file(system_file, text)
        except (OSError, NodeError) as err:
            self.finish(job, "install-failed", f"cannot write the node's system file: {err}")
            return False
        job.settings = NodeCommandSettings(
            python=job.python,
            config=config,
            system_file=system_file,
            base=job.run_base,
            select=tuple(self.options.select),
            exclude=tuple(self.options.exclude),
            overrides=tuple(self.options.overrides) + self.selection.overrides,
            use_current_env=self.options.use_current_env,
            strict=self.options.strict,
            ignore_doctor=self.options.ignore_doctor,
        )
        return True

    def spec(self, job: _Job, phase: str) -> ProcessSpec:
        import os

        assert job.settings is not None
        package_dir = getattr(job.layout, "package_dir", None)
        pythonpath = os.environ.get("PYTHONPATH") if job.runner.local else None
        return ProcessSpec(
            tag=[job.name, phase],
            argv=phase_argv(job.settings, phase, run_name=self.folder.name),
            env=phase_env(package_dir, job.token, pythonpath),
            cwd=job.run_base,
            node=None if job.runner.local else job.node,
            data_channel="smuggle",
        )

    async def phase(self, job: _Job, phase: str) -> PhaseOutcome | bool:
        """Run ``phase`` on the node; for install/prepare, True when it succeeded (the node
        is finished with the reason otherwise); for run, the outcome (judged later)."""
        if self.stop.is_set() and phase != "run":
            self.finish(job, f"{phase}-failed", f"{self._interrupted()} before {phase}")
            return False
        self.set_phase(job, phase)
        self.say(f"{job.name}: {phase}")
        outcome = await job.runner.run_phase(
            phase,
            self.spec(job, phase),
            self.folder.log_folder(job.name),
            stop=self.stop,
            hard=self.hard,
            grace=self.options.grace,
            token_entry=job.token_entry,
        )
        self.timed(job, phase, time.monotonic() - outcome.seconds)
        if outcome.swept:
            job.record.extra["swept"] = job.record.extra.get("swept", 0) + outcome.swept
        if phase == "run":
            self.save()
            return outcome
        if outcome.lost:
            self.finish(job, "lost", outcome.lost)
            return False
        if outcome.interrupted:
            self.finish(job, f"{phase}-failed", f"{self._interrupted()} during {phase}")
            return False
        if outcome.start_error:
            self.finish(job, f"{phase}-failed", f"{phase} could not start: {outcome.start_error}")
            return False
        if outcome.code != 0:
            why = short_reason(outcome.stderr_tail or outcome.stdout_tail)
            self.finish(job, f"{phase}-failed", f"{phase} exited {outcome.code}: {why}")
            return False
        self.save()
        return True

    async def environment(self, job: _Job) -> None:
        """The node's facts (Python, code, packages of each environment, hardware)."""
        from milabench.remote.codesync import run_venvs
        from milabench.remote.facts import node_environment
        from milabench.remote.sync import map_to_node

        if self.options.use_current_env:
            venvs = {"current-env": job.prefix} if job.prefix else {}
        else:
            venvs = {
                group: map_to_node(path, self.main_base, job.run_base)
                for group, path in run_venvs(self.suite).items()
            }
        try:
            facts = await node_environment(
                self.system,
                job.node,
                sorted(venvs),
                job.run_base,
                package_dir=getattr(job.layout, "package_dir", None),
                venvs=venvs,
                python=job.python,
                pool=self.pool,
            )
        except (NodeError, OSError, TimeoutError) as err:
            lost = await job.runner.lost_reason("the environment probe")
            if lost:
                self.finish(job, "lost", lost)
                return
            job.record.extra["environment_error"] = str(err)
            facts = None
        job.record.environment = facts
        self.save()

    async def run_node(self, job: _Job) -> None:
        if self.stop.is_set():
            return
        outcome = await self.phase(job, "run")
        assert isinstance(outcome, PhaseOutcome)
        job.run_outcome = outcome
        if outcome.lost:
            self.finish(job, "lost", outcome.lost)
        elif outcome.start_error:
            self.finish(job, "run-failed", f"run could not start: {outcome.start_error}")
        else:
            self.say(f"{job.name}: run ended (exit {outcome.code}, {outcome.seconds:.1f} s)")

    async def collect_node(self, job: _Job) -> None:
        outcome = job.run_outcome
        if not job.active or outcome is None or self.hard.is_set():
            return
        assert self._limit is not None
        async with self._limit:
            self.set_phase(job, "collect")
            src = f"{job.run_base}/runs/{self.folder.name}"
            dst = self.folder.node_folder(job.name)
            shared = getattr(job.layout, "method", "") in ("local", "shared")
            timeout = INTERRUPTED_COLLECT_TIMEOUT if self.stop.is_set() else 3600.0
            started = time.monotonic()
            try:
                method = await collect_run(
                    job.runner, src, dst, same_filesystem=shared, timeout=timeout
                )
            except MissingRunFolder:
                why = short_reason(outcome.stderr_tail or outcome.stdout_tail)
                self.finish(
                    job, "run-failed", f"run exited {outcome.code} without a run folder: {why}"
                )
                return
            except (NodeError, OSError, TimeoutError) as err:
                lost = await job.runner.lost_reason("the copy of the run folder")
                status, reason = ("lost", lost) if lost else ("run-failed", _reason_of(err, "copy"))
                self.finish(job, status, f"run folder not copied back: {reason}")
                return
            self.timed(job, "collect", started)
            job.record.extra["collected_by"] = method
            job.record.run = f"nodes/{job.name}"
            if outcome.interrupted:
                self.finish(job, "run-failed", f"{self._interrupted()} during run")
            elif _run_completed(outcome.code, dst):
                job.record.extra["run_exit"] = outcome.code
                self.finish(job, "ok")
            else:
                why = short_reason(outcome.stderr_tail or outcome.stdout_tail)
                self.finish(job, "run-failed", f"run exited {outcome.code}: {why}")


def suite_code_paths(suite) -> list[Path]:
    """What every node needs of the suite (`codesync.code_paths`: benchmark folders, and
    the suite file with every file it includes, since a node re-reads the whole suite)."""
    from milabench.remote.codesync import code_paths

    return list(dict.fromkeys(code_paths(suite)))


def _run_completed(code: int | None, folder: Path) -> bool:
    """The node's ``milabench run`` got to its report: exit 0 (PASS) or 1 (FAIL, whose
    failed benchmarks the fleet report reads from the run files), and report.json written."""
    return code in (0, 1) and (folder / "report.json").is_file()


def _failed(phase: str) -> str:
    return {
        "install": "install-failed",
        "prepare": "prepare-failed",
        "run": "run-failed",
        "collect": "run-failed",
        "ready": "run-failed",
    }.get(phase, "install-failed")


def _reason_of(err: BaseException, fallback: str) -> str:
    text = str(err).strip()
    if isinstance(err, TimeoutError) and not text:
        return "timed out"
    if text.startswith("node ") and "): " in text:
        text = text.split("): ", 1)[1]
    return text or fallback


def run_fleet(suite, options: FleetOptions, *, out: TextIO | None = None) -> FleetResult:
    """Run the fleet and return its folder; see the module's description."""
    return Fleet(suite, options, out=out).run()
