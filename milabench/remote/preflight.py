"""Checks before a multi-node run: every node's facts, versions, then a real all-reduce.

`preflight` runs these steps in order and stops after the first one that fails, each
failure one line of ``PreflightResult.failures`` naming the node: every node probed at
once (`probe_node`: reachable, Python, torch, accelerators, the environments present,
the rendezvous port free on the main node; the first failure stops the others); each
node's package sources (`sources_node`: reported, never a failure) and `milabench
doctor`'s checks (`doctor_node`: a failure fails unless ``ignore_doctor``); the same
Python everywhere; with ``base``, the code copied to the workers (run id ``preflight``)
and every node's environment compared with the main node's (`push_and_check`); then
one torchrun per node running `ALLREDUCE`, rank 0's bandwidth and latency in
``allreduce``. Paths under the main node's base are each node's own
(`milabench.remote.sync.node_base`). `render` prints the result.
What each check looks at, and why: docs/multinode.md "milabench preflight".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from milabench.config.topology import main_node, node_label, runs_locally
from milabench.doctor.findings import FAIL, OK, WARN, Finding, refusal
from milabench.doctor.findings import summary_line as doctor_summary
from milabench.doctor.probe import parse_probe_output, probe_argv
from milabench.doctor.sources import summary_line as sources_summary
from milabench.errors import NodeError
from milabench.machine.facts import accelerator_arch, accelerator_count
from milabench.plan.spec import ProcessSpec
from milabench.remote.codesync import CodeLayout, push_and_check
from milabench.remote.dispatch import NodeLauncher
from milabench.remote.probe import ALLREDUCE, RESULT_PREFIX, node_probe_argv, prefixed_json
from milabench.remote.ssh import ConnectionPool, run_here
from milabench.remote.sync import map_to_node, node_base

PREFLIGHT_RUN_ID = "preflight"  # the code folder preflight copies to on each worker


@dataclass
class NodeFacts:
    name: str
    address: str
    main: bool
    local: bool
    connect_s: float | None = None
    facts: dict = field(default_factory=dict)
    error: str | None = None
    code: str | None = None  # how the node gets the code: local, shared, rsync, sftp
    doctor: list[Finding] = field(default_factory=list)  # `milabench doctor` there
    doctor_error: str | None = None  # the checks could not run (why)
    sources: dict | None = None  # its package sources checked there (monitor.sources)
    sources_error: str | None = None  # that check could not run (why)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def status(self) -> str:
        if self.error:
            return "FAIL"
        return "ok" if self.facts else "unchecked"


@dataclass
class PreflightResult:
    nodes: list[NodeFacts]
    allreduce: dict | None = None
    failures: list[str] = field(default_factory=list)
    environments: dict[str, dict] = field(default_factory=dict)
    layouts: dict[str, CodeLayout] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


def _parse(stdout: str) -> dict | None:
    return prefixed_json(stdout, RESULT_PREFIX)


async def probe_node(
    node: dict,
    system: dict,
    pool: ConnectionPool,
    *,
    python: str,
    envs: list[str],
    port: int,
    timeout: float = 60.0,
) -> NodeFacts:
    """Facts of one node; ``error`` set (never raised) when a check fails."""
    local = runs_locally(node, system)
    facts = NodeFacts(
        name=str(node["name"]),
        address=str(node.get("ip")),
        main=node.get("name") == main_node(system).get("name"),
        local=local,
    )
    argv = node_probe_argv(python, port, envs)
    t0 = time.monotonic()
    try:
        if local:
            facts.connect_s = 0.0
            code, out, err = await run_here(argv, timeout)
        else:
            await pool.connect(node)
            facts.connect_s = time.monotonic() - t0
            result = await pool.run(node, argv, timeout=timeout)
            code = result.exit_status or 0
            out, err = str(result.stdout or ""), str(result.stderr or "")
    except NodeError as e:
        facts.error = str(e)
        return facts
    except TimeoutError:
        facts.error = f"node {node_label(node)}: probe did not answer in {timeout:g} s"
        return facts
    except FileNotFoundError:
        code, out, err = 127, "", f"{python}: not found"
    if code == 127:
        facts.error = f"node {node_label(node)}: environment interpreter {python} not found"
        return facts
    parsed = _parse(out)
    if code != 0 or parsed is None:
        facts.error = f"node {node_label(node)}: probe failed (exit {code}): {err.strip()[-200:]}"
        return facts
    facts.facts = parsed
    missing = [e for e, present in (parsed.get("envs") or {}).items() if not present]
    if missing:
        failures = parsed.get("env_failures") or {}
        named = ", ".join(e + _failed_install(failures.get(e)) for e in missing)
        facts.error = f"node {node_label(node)}: environment missing: {named}"
    elif facts.main and not parsed.get("port_free"):
        facts.error = f"node {node_label(node)}: rendezvous port {port} is in use"
    return facts


def _failed_install(record) -> str:
    """`` (the last install on <host> failed (<step>: <why>))`` from the node's record."""
    if not isinstance(record, dict):
        return ""
    host = record.get("host") or "the node"
    return f" (the last install on {host} failed ({record.get('message') or 'no reason'}))"


def _allreduce_specs(
    nodes: list[dict],
    *,
    python: str | dict[str, str],
    port: int,
    nproc: int,
    size_mib: float,
    iters: int,
) -> list[ProcessSpec]:
    main_ip = str(nodes[0]["ip"])
    specs = []
    for rank, node in enumerate(nodes):
        exe = python.get(str(node["name"])) if isinstance(python, dict) else python
        argv = [
            exe,
            "-m",
            "torch.distributed.run",
            f"--nnodes={len(nodes)}",
            f"--node-rank={rank}",
            f"--nproc-per-node={nproc}",
            "--rdzv-backend=static",
            f"--rdzv-endpoint={main_ip}:{port}",
            f"--master-addr={main_ip}",
            f"--master-port={port}",
            "--no-python",
            exe,
            "-c",
            ALLREDUCE,
            str(size_mib),
            str(iters),
        ]
        specs.append(
            ProcessSpec(
                tag=["preflight", "allreduce", str(node["name"])],
                argv=argv,
                env={"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
                cwd="/",
                node=node,
                data_channel="smuggle",
                timeout=120,
            )
        )
    return specs


async def _drain(handle) -> tuple[list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []

    async def pull(stream, sink):
        async for batch in stream:
            sink.extend(batch)

    await asyncio.gather(pull(handle.stdout, out), pull(handle.stderr, err))
    return out, err


async def run_allreduce(
    system: dict,
    nodes: list[dict],
    *,
    python: str | dict[str, str],
    port: int,
    nproc: int = 1,
    size_mib: float = 16.0,
    iters: int = 5,
    timeout: float = 120.0,
    launcher: NodeLauncher | None = None,
) -> dict:
    """All-reduce across ``nodes`` (main first); rank 0's measurements.

    ``python`` is one interpreter path for every node, or ``{node name: path}``."""
    launcher = launcher or NodeLauncher(system)
    specs = _allreduce_specs(
        nodes, python=python, port=port, nproc=nproc, size_mib=size_mib, iters=iters
    )
    handles = []
    try:
        for spec in specs:
            handles.append(await launcher.start(spec))
        drains = [asyncio.ensure_future(_drain(h)) for h in handles]
        waits = [asyncio.ensure_future(h.wait()) for h in handles]
        try:
            codes = await asyncio.wait_for(asyncio.gather(*waits), timeout)
        except TimeoutError as err:
            raise NodeError(
                f"all-reduce across {len(nodes)} nodes did not finish in {timeout:g} s"
            ) from err
        outputs = await asyncio.gather(*drains)
    except BaseException:
        await asyncio.gather(*(h.stop(2.0) for h in handles), return_exceptions=True)
        raise
    for node, code, (_, err) in zip(nodes, codes, outputs, strict=True):
        if code != 0:
            tail = " | ".join(x for x in err[-3:] if x.strip())
            raise NodeError(
                f"node {node_label(node)}: all-reduce failed (exit {code}): {tail[-300:]}"
            )
    result = _parse("\n".join(outputs[0][0]))
    if result is None:
        raise NodeError(f"node {node_label(nodes[0])}: all-reduce printed no result")
    return result


async def _probe_all(
    system: dict,
    nodes: list[dict],
    pool: ConnectionPool,
    *,
    python: dict[str, str],
    envs: dict[str, list[str]],
    **kwargs,
) -> list[NodeFacts]:
    """Probe every node concurrently; at the first failure stop the others (fail fast).

    ``python`` and ``envs`` are given per node name (each node's own paths)."""
    tasks = {
        asyncio.ensure_future(
            probe_node(
                n, system, pool, python=python[str(n["name"])], envs=envs[str(n["name"])], **kwargs
            )
        ): i
        for i, n in enumerate(nodes)
    }
    found: dict[int, NodeFacts] = {}
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                found[tasks[task]] = task.result()
            if any(f.error for f in found.values()):
                break
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    main = main_node(system).get("name")
    return [
        found.get(i)
        or NodeFacts(
            str(n["name"]), str(n.get("ip")), n.get("name") == main, runs_locally(n, system)
        )
        for i, n in enumerate(nodes)
    ]


async def doctor_node(
    node: dict,
    system: dict,
    pool: ConnectionPool,
    facts: NodeFacts,
    *,
    python: str,
    base: str | None,
    timeout: float = 60.0,
) -> None:
    """`milabench doctor`'s checks on one node with its ``python``: into ``facts.doctor``
    (``facts.doctor_error`` when they could not run). A missing dependency of milabench
    is downgraded to a warning here: a multi-node run's workers run benchmark
    environments only."""
    argv = probe_argv(
        python,
        paths=[base] if base else [],
        modules=True,
        python_hint="--node-python PATH (or the fleet.python option)",
    )
    try:
        if runs_locally(node, system):
            code, out, err = await run_here(argv, timeout)
        else:
            result = await pool.run(node, argv, timeout=timeout)
            code = result.exit_status or 0
            out, err = str(result.stdout or ""), str(result.stderr or "")
    except (NodeError, OSError, TimeoutError) as exc:
        facts.doctor_error = str(exc) or type(exc).__name__
        return
    found = parse_probe_output(out)
    if found is None:
        tail = " | ".join(x for x in err.strip().splitlines()[-2:] if x.strip())
        facts.doctor_error = f"{python}: the checks printed no result (exit {code}): {tail[-200:]}"
        return
    for f in found:
        if f.check == "python_modules" and f.severity == FAIL:
            f.severity = WARN
            f.reason += " (needed where milabench itself runs: milabench fleet, batch jobs)"
    facts.doctor = found


async def sources_node(
    node: dict, system: dict, pool: ConnectionPool, facts: NodeFacts, *, python: str
) -> None:
    """The node's package sources, as its own pip configuration names them, checked there
    (`milabench.doctor.sources`): into ``facts.sources`` (``facts.sources_error``)."""
    from milabench.doctor import sources

    argv = sources.probe_argv(python)
    try:
        if runs_locally(node, system):
            code, out, err = await run_here(argv, 60.0)
        else:
            result = await pool.run(node, argv, timeout=60.0)
            code = result.exit_status or 0
            out, err = str(result.stdout or ""), str(result.stderr or "")
    except (NodeError, OSError, TimeoutError) as exc:
        facts.sources_error = str(exc) or type(exc).__name__
        return
    facts.sources = sources.parse(out)
    if facts.sources is None:
        tail = " | ".join(x for x in err.strip().splitlines()[-2:] if x.strip())
        facts.sources_error = f"{python}: the check printed no result (exit {code}): {tail[-200:]}"


def _here(path: str, node: dict, base: str | None, main: dict) -> str:
    """``path`` (a main-node path) as seen on ``node``: under its own base."""
    if base is None or node.get("name") == main.get("name"):
        return path
    return map_to_node(path, base, node_base(node, base))


async def preflight(
    system: dict,
    *,
    python: str,
    envs: list[str],
    port: int,
    allreduce: bool = True,
    size_mib: float = 16.0,
    iters: int = 5,
    timeout: float = 60.0,
    base: str | Path | None = None,
    code_paths: list[Path] | None = None,
    venvs: dict[str, str] | None = None,
    versions: bool = True,
    node_python: dict[str, str] | None = None,
    doctor: bool = True,
    ignore_doctor: bool = False,
) -> PreflightResult:
    """Every check, in order: node facts, versions (with ``base``), the all-reduce.

    ``venvs`` maps each install group in use to its environment on the main node (the
    versions compared per group); ``code_paths`` are the benchmark folders and config
    files a run would copy (`milabench.remote.codesync.code_paths`). ``node_python``:
    the interpreter that runs milabench on each node (by name; ``python3`` when absent),
    which runs the doctor's checks there (``doctor``); a failure among them fails the
    preflight unless ``ignore_doctor``.
    """
    launcher = NodeLauncher(system)
    pool = launcher.ssh.pool
    nodes = list(system.get("nodes") or [])
    main = main_node(system)
    nodes.sort(key=lambda n: n.get("name") != main.get("name"))  # main first
    main_base = str(Path(base).absolute()) if base is not None else None
    on_node = node_python or {}
    try:
        for node in nodes:
            if main_base is not None:
                node_base(node, main_base)  # a bad ``base:`` is one line before anything
        pythons = {str(n["name"]): _here(python, n, main_base, main) for n in nodes}
        node_envs = {str(n["name"]): [_here(e, n, main_base, main) for e in envs] for n in nodes}
        facts = await _probe_all(system, nodes, pool, python=pythons, envs=node_envs, port=port)
        result = PreflightResult(facts)
        result.failures = [f.error for f in facts if f.error]
        if not result.failures:
            await _check_sources(system, nodes, pool, facts, on_node)
        if doctor and not result.failures:
            await _check_doctor(system, nodes, pool, facts, on_node, main_base)
            if not ignore_doctor:
                result.failures += _doctor_refusals(facts)
        if not result.failures:
            result.failures += _python_differences(facts)
        if not result.failures and versions and main_base is not None:
            await _check_versions(system, pool, main_base, code_paths, venvs, result)
        if result.failures or not allreduce:
            return result
        await _check_allreduce(
            system,
            nodes,
            result,
            python=pythons,
            port=port,
            size_mib=size_mib,
            iters=iters,
            timeout=timeout,
            launcher=launcher,
        )
        return result
    finally:
        await pool.close()


async def _check_sources(
    system: dict,
    nodes: list[dict],
    pool: ConnectionPool,
    facts: list[NodeFacts],
    node_python: dict[str, str],
) -> None:
    """`sources_node` on every node at once, with the Python that runs milabench there."""
    await asyncio.gather(
        *(
            sources_node(n, system, pool, f, python=node_python.get(str(n["name"]), "python3"))
            for n, f in zip(nodes, facts, strict=True)
        )
    )


async def _check_doctor(
    system: dict,
    nodes: list[dict],
    pool: ConnectionPool,
    facts: list[NodeFacts],
    node_python: dict[str, str],
    main_base: str | None,
) -> None:
    """`doctor_node` on every node at once, each with its own Python and base."""
    await asyncio.gather(
        *(
            doctor_node(
                n,
                system,
                pool,
                f,
                python=node_python.get(str(n["name"]), "python3"),
                base=node_base(n, main_base) if main_base is not None else None,
            )
            for n, f in zip(nodes, facts, strict=True)
        )
    )


def _doctor_refusals(facts: list[NodeFacts]) -> list[str]:
    """One failure line for each node whose doctor found a failure."""
    lines = []
    for f in facts:
        line = refusal(
            f.doctor,
            lead=f"node {f.name}: milabench doctor: ",
            tail=" (--ignore-doctor goes on anyway)",
        )
        if line is not None:
            lines.append(line)
    return lines


def _python_differences(facts: list[NodeFacts]) -> list[str]:
    """One failure line for each node whose Python differs from the main node's (first)."""
    ref = facts[0].facts.get("python")
    return [
        f"node {f.name}: Python {f.facts.get('python')} differs from the main node's {ref}"
        for f in facts[1:]
        if f.facts.get("python") != ref
    ]


async def _check_versions(
    system: dict,
    pool: ConnectionPool,
    main_base: str,
    code_paths: list[Path] | None,
    venvs: dict[str, str] | None,
    result: PreflightResult,
) -> None:
    """Copy the code to the workers and compare their environments with the main
    node's (`push_and_check`): into ``result`` (layouts, environments, failures) and
    each node's ``code`` (how it got the code)."""
    try:
        layouts, environments, problems = await push_and_check(
            system,
            main_base,
            PREFLIGHT_RUN_ID,
            list(code_paths or []),
            dict(venvs or {}),
            pool=pool,
        )
    except NodeError as err:
        result.failures.append(str(err))
        return
    result.layouts, result.environments = layouts, environments
    result.failures += list(problems.values())
    for f in result.nodes:
        layout = layouts.get(f.name)
        f.code = layout.method if layout is not None else "local"


async def _check_allreduce(
    system: dict,
    nodes: list[dict],
    result: PreflightResult,
    *,
    python: dict[str, str],
    port: int,
    size_mib: float,
    iters: int,
    timeout: float,
    launcher: NodeLauncher,
) -> None:
    """`run_allreduce` with one process per accelerator of the node that has fewest
    (one on CPU): into ``result.allreduce``, or a failure line."""
    accel = [accelerator_count(f.facts) for f in result.nodes]
    nproc = min(accel) if min(accel) > 0 else 1
    try:
        result.allreduce = await run_allreduce(
            system,
            nodes,
            python=python,
            port=port,
            nproc=nproc,
            size_mib=size_mib,
            iters=iters,
            timeout=timeout,
            launcher=launcher,
        )
        if not result.allreduce.get("correct", True):
            result.failures.append("all-reduce returned a wrong sum")
    except NodeError as err:
        result.failures.append(str(err))


def describe_versions(env: dict) -> str:
    """``python 3.11.7, milabench 0.1.0 (commit 466219ba923b, code 84fd5cf0a9f0), ...``."""

    def short(value) -> str:
        return "-" if value is None else str(value)[:12]

    parts = [
        f"python {env.get('python')}",
        f"milabench {env.get('milabench')} (commit {short(env.get('milabench_commit'))}, "
        f"code {short(env.get('milabench_code'))})",
    ]
    for group, digest in sorted((env.get("packages") or {}).items()):
        torch = (env.get("torch") or {}).get(group)
        parts.append(f"{group}: packages {short(digest)}" + (f", torch {torch}" if torch else ""))
    return ", ".join(parts)


def render(result: PreflightResult) -> str:
    """The per-node table, the all-reduce line, and the failures."""
    header = [
        "node",
        "role",
        "address",
        "via",
        "reach s",
        "python",
        "torch",
        "accel",
        "port",
        "code",
        "status",
    ]
    rows = [header]
    for f in result.nodes:
        d = f.facts
        rows.append(
            [
                f.name,
                "main" if f.main else "worker",
                f.address,
                "local" if f.local else "ssh",
                "-" if f.connect_s is None else f"{f.connect_s:.2f}",
                str(d.get("python") or "-"),
                str(d.get("torch") or "-"),
                f"{accelerator_arch(d)}:{accelerator_count(d)}" if d else "-",
                "-" if not d else ("free" if d.get("port_free") else "in use"),
                f.code or "-",
                f.status,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if result.environments:
        name, env = next(iter(result.environments.items()))
        lines.append(f"versions ({name}): {describe_versions(env)}")
    if result.allreduce:
        a = result.allreduce
        lines.append(
            f"all-reduce ({a['backend']}, {a['world_size']} rank{'s' if a['world_size'] != 1 else ''}, {a['bytes'] / 2**20:.0f} MiB):"
            f" bandwidth {a['algbw_gbps']:.3f} GB/s (bus {a['busbw_gbps']:.3f} GB/s),"
            f" latency {a['latency_us']:.0f} us"
        )
    for f in result.nodes:
        problems = [x for x in f.doctor if x.severity != OK]
        if f.doctor:
            ok = len(f.doctor) - len(problems)
            lines.append(f"doctor {f.name}: {doctor_summary(f.doctor)} ({ok} checks ok)")
        lines += [f"  {x.severity}: {x.subject} {x.check}: {x.reason}" for x in problems]
        if f.doctor_error:
            lines.append(f"doctor {f.name}: not checked: {f.doctor_error}")
    for f in result.nodes:
        if f.sources is not None or f.sources_error:
            line = sources_summary(f.sources) if f.sources is not None else None
            lines.append(f"sources {f.name}: {line or 'not checked: ' + str(f.sources_error)}")
    for failure in result.failures:
        lines.append(f"FAIL {failure}")
    return "\n".join(lines)
