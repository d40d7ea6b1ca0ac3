"""The fleet report: the same suite run on every node of a cluster, compared node by node.

`load_fleet(folder) -> FleetData` reads a fleet folder: ``fleet.json`` and every node's
run folder, each through the ordinary report (`build_report`, then `breakdown_rows`), so
a node's rate, interval and status are exactly what `milabench report` says; nothing
here re-derives the success rule. `build_fleet_report(data, thresholds, baseline)` puts
the nodes side by side and flags them: slow (`check_slow`, a robust median/MAD rule),
failed, environment differs (`compare_environments`), below baseline;
`write_baseline`/`load_baseline` keep expected rates per hardware model. The records
live in `fleet/model.py`, so that `fleet/render.py` reads them without importing this
module, and are re-exported here. A user error is one `UsageError` line; a broken node
is a flag, never a traceback. The rules and why: docs/fleet.md.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from milabench.doctor.findings import FAIL, OK, Finding
from milabench.errors import MilabenchError, UsageError
from milabench.events import check_version
from milabench.fleet.model import (
    BASELINE_KIND,
    BASELINE_SCHEMA_VERSION,
    BELOW_BASELINE,
    CELL_FAILED,
    CELL_MISSING,
    CELL_NO_RUN,
    CELL_OK,
    CELL_SKIPPED,
    DEFAULT_MAD_K,
    DEFAULT_MIN_GAP,
    DEFAULT_TOLERANCE,
    DOCTOR,
    ENVIRONMENT,
    FAILED,
    FLAG_KINDS,
    FLEET_FILE,
    FLEET_KIND,
    FLEET_REPORT_SCHEMA_VERSION,
    FLEET_SCHEMA_VERSION,
    GROUP_ENV_KEYS,
    GROUP_KEY_PATTERN,
    MAD_SCALE,
    MIN_NODES,
    NODE_IN_PROGRESS,
    NODE_OK,
    NODE_STATUSES,
    SCALAR_ENV_KEYS,
    SLOW,
    Baseline,
    BaselineEntry,
    BenchCell,
    BenchRow,
    DoctorRow,
    EnvRow,
    Flag,
    FleetData,
    FleetNode,
    FleetReport,
    FleetThresholds,
    SlowCheck,
    SummaryRow,
    check_env_key,
    comparable_value,
    is_number,
    short_value,
)
from milabench.formats import Renderers
from milabench.report.build import Report, build_report
from milabench.report.render_tables import breakdown_rows
from milabench.rundata.numbers import fmt_sig


def _read_text(path: Path, shown: str) -> str:
    """The UTF-8 text of ``path``; a file that cannot be read is one `UsageError`
    starting with ``shown``."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{shown}: not UTF-8 text (a corrupt file?)") from None


def load_fleet(folder: str | Path) -> FleetData:
    """Read a fleet folder (fleet.json and every node's run folder).

    fleet.json that cannot be read, is not JSON, is not a fleet file or has a newer
    `schema_version` is a `UsageError` (one line, exit 2). A node whose run folder is
    missing, outside the fleet folder or unreadable keeps a `problem` (a failed flag).
    """
    folder = Path(folder)
    path = folder / FLEET_FILE
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such fleet folder")
    if not path.is_file():
        raise UsageError(f"{folder}: not a fleet folder (no {FLEET_FILE} in it)")
    text = _read_text(path, str(path))
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    version = check_fleet_schema(doc, path)
    nodes = _parse_nodes(doc.get("nodes"), path)
    data = FleetData(
        folder=folder,
        name=str(doc.get("name") or folder.name),
        schema_version=version,
        config=_opt_str(doc.get("config")),
        select=_str_list(doc.get("select")),
        exclude=_str_list(doc.get("exclude")),
        started=_opt_str(doc.get("started")),
        ended=_opt_str(doc.get("ended")),
        nodes=nodes,
    )
    for node in nodes:
        _read_node_run(folder, node)
    return data


def check_fleet_schema(doc: Any, source: object) -> int:
    """fleet.json's `schema_version` (refused in one line when newer than this reader)."""
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: not a fleet file (a JSON object is expected)")
    kind = doc.get("kind")
    if kind is not None and kind != FLEET_KIND:
        raise UsageError(f"{source}: kind {kind!r} is not a fleet file ({FLEET_KIND!r})")
    return check_version(doc.get("schema_version"), FLEET_SCHEMA_VERSION, source)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _str_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _parse_nodes(raw: Any, source: Path) -> list[FleetNode]:
    if not isinstance(raw, list):
        raise UsageError(f"{source}: nodes: a list of nodes is expected")
    nodes: list[FleetNode] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise UsageError(f"{source}: nodes[{i}]: an object is expected")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise UsageError(f"{source}: nodes[{i}].name: a non-empty string is expected")
        if name in seen:
            raise UsageError(f"{source}: nodes[{i}].name: node '{name}' is listed twice")
        seen.add(name)
        status = item.get("status")
        phases = item.get("phase_seconds")
        env = item.get("environment")
        nodes.append(
            FleetNode(
                name=name,
                host=_opt_str(item.get("host")),
                status=str(status) if status is not None else NODE_IN_PROGRESS,
                reason=_opt_str(item.get("reason")),
                phase_seconds={str(k): float(v) for k, v in (phases or {}).items() if is_number(v)}
                if isinstance(phases, dict)
                else {},
                run=_opt_str(item.get("run")),
                environment=env if isinstance(env, dict) else None,
                phase=_opt_str(item.get("phase")),
            )
        )
        found = item.get("doctor")
        if isinstance(found, list):
            nodes[-1].doctor = [Finding.from_dict(x) for x in found if isinstance(x, dict)]
    return nodes


def _read_node_run(folder: Path, node: FleetNode) -> None:
    """Read the node's run folder with the ordinary report; trouble becomes `problem`."""
    if node.run is None:
        if node.ok:
            node.problem = "fleet.json names no run folder for this node"
        return
    run_dir = folder / node.run
    try:
        inside = run_dir.resolve().is_relative_to(folder.resolve())
    except OSError:
        inside = False
    if not inside:
        node.problem = f"run folder {node.run} is outside the fleet folder: not read"
        return
    if not run_dir.is_dir():
        node.problem = f"run folder {node.run} is missing from the fleet folder"
        return
    node.run_dir = run_dir
    try:
        node.report = build_report([run_dir])
    except MilabenchError as exc:
        node.problem = f"run folder {node.run} cannot be read: {exc}"
        return
    except OSError as exc:  # a file that cannot be read (a folder in its place, rights)
        what = Path(exc.filename).name if exc.filename else ""
        node.problem = f"run folder {node.run} cannot be read: {exc.strerror or exc}" + (
            f" ({what})" if what else ""
        )
        return
    except Exception as exc:  # one node's corrupt files must not stop the fleet's report
        node.problem = f"run folder {node.run} cannot be read: {type(exc).__name__}: {exc}"
        return
    node.cells = _cells(node.report)
    if node.report.doctor:  # the checks at the start of its run: closer to what it measured
        node.doctor = [f for _, f in node.report.doctor]
    if not node.cells:
        why = "; ".join(node.report.verdict_reasons) or "no .data file"
        node.problem = f"run folder {node.run} holds no benchmark result ({why})"


def _cells(report: Report) -> dict[str, BenchCell]:
    """One cell per benchmark, from the rows `milabench report --format json` prints."""
    causes: dict[str, list[str]] = {}
    for group in report.errors:
        causes.setdefault(group.bench, [])
        if group.line not in causes[group.bench]:
            causes[group.bench].append(group.line)
    cells = {}
    for row in breakdown_rows(report):
        name = row["name"]
        reason = row.get("reason")
        rate = row.get("rate")
        if rate is not None and row["fail"] == 0:
            status = CELL_OK
        elif rate is None and isinstance(reason, str) and reason.startswith("skipped"):
            status = CELL_SKIPPED
        else:
            status = CELL_FAILED
            if reason is None:
                reason = f"{row['fail']} of {row['n']} processes failed"
            if causes.get(name):
                reason += ": " + "; ".join(causes[name][:2])
        cells[name] = BenchCell(
            bench=name,
            status=status,
            rate=rate,
            ci_low=row.get("ci95_low"),
            ci_high=row.get("ci95_high"),
            units=row.get("units"),
            n=row["n"],
            fail=row["fail"],
            reason=reason,
            causes=list((row.get("interference_detail") or {}).get("causes") or []),
        )
    return cells


# -- the rules (pure functions) ----------------------------------------------------------


def median_abs_deviation(values: list[float]) -> float:
    """The median of the absolute deviations from the median (0 for one value)."""
    centre = statistics.median(values)
    return statistics.median(abs(v - centre) for v in values)


def slow_threshold(median: float, mad: float, *, mad_k: float, min_gap: float) -> float:
    """The largest gap below the median that is not flagged:
    ``max(mad_k x 1.4826 x MAD, min_gap x median)``."""
    return max(mad_k * MAD_SCALE * mad, min_gap * median)


def spread_without(values: dict[str, float], name: str) -> tuple[float, int]:
    """The MAD of every value but ``name``'s, and how many values that is.

    Why leave the judged node out: with few nodes, the MAD of all of them is set by the
    healthy ones' own differences *and* grows with the slow one's, so a slow node widens
    its own allowance (three nodes at 0.035, 0.041 and 0.013 Tflops gave an allowed gap of
    77%: the 0.37x node passed). The others are the reference a node is held to.
    """
    others = [v for n, v in values.items() if n != name]
    return median_abs_deviation(others), len(others)


def check_slow(
    rate: float,
    ci_high: float | None,
    median: float,
    mad: float,
    *,
    mad_k: float = DEFAULT_MAD_K,
    min_gap: float = DEFAULT_MIN_GAP,
    others: int = 0,
) -> SlowCheck:
    """Slow when ``median - rate > max(mad_k x 1.4826 x MAD, min_gap x median)`` and the
    value's own 95% interval stays below the median (``ci_high < median``). Without an
    interval (a single observation) only the gap decides; the reason says so. ``mad`` is
    the spread of the other nodes (`spread_without`), ``others`` their number."""
    gap = median - rate
    mad_term = mad_k * MAD_SCALE * mad
    threshold = max(mad_term, min_gap * median)
    beyond = gap > threshold
    ci_reaches = ci_high is not None and ci_high >= median
    return SlowCheck(
        slow=beyond and not ci_reaches,
        gap=gap,
        threshold=threshold,
        mad=mad,
        others=others,
        by_mad=mad_term > min_gap * median,
        beyond=beyond,
        ci_reaches=ci_reaches,
        ci_known=ci_high is not None,
    )


def check_below_baseline(
    rate: float, ci_high: float | None, expected: float, tolerance: float
) -> bool:
    """Below baseline when ``rate < expected x (1 - tolerance)`` and the rate's 95%
    interval does not reach the expected rate (``ci_high < expected``)."""
    if rate >= expected * (1.0 - tolerance):
        return False
    return ci_high is None or ci_high < expected


# -- the report --------------------------------------------------------------------------


def build_fleet_report(
    data: FleetData,
    thresholds: FleetThresholds | None = None,
    baseline: Baseline | None = None,
) -> FleetReport:
    """Compare every node with the fleet (and the baseline); flag what an admin must see."""
    th = thresholds or FleetThresholds()
    flags: list[Flag] = []
    notes: list[str] = []
    if data.ended is None:
        notes.append("the fleet run has not ended (fleet.json has no end time): partial report")
    for node in data.nodes:
        if node.status == NODE_IN_PROGRESS and data.ended is None:
            where = f" (phase: {node.phase})" if node.phase else ""
            notes.append(f"{node.name}: not finished yet{where}")
        elif node.status == NODE_IN_PROGRESS:
            flags.append(
                Flag(node.name, None, FAILED, "no final status: the fleet run ended without one")
            )
        elif not node.ok:
            word = node.status if node.status in NODE_STATUSES else f"status {node.status!r}"
            flags.append(
                Flag(node.name, None, FAILED, f"{word}: {node.reason or 'no reason given'}")
            )
        elif node.problem:
            flags.append(Flag(node.name, None, FAILED, node.problem))
    rows = [_bench_row(data, name, th, flags, notes) for name in data.benchmarks]
    _failed_benchmarks(data, rows, flags)
    summary = _summary(data, rows, th, flags)
    env_rows = compare_environments(data.nodes, th)
    for row in env_rows:
        if row.ignored:
            continue
        for name in row.differing:
            flags.append(Flag(name, None, ENVIRONMENT, _env_reason(row, name), key=row.key))
    missing_env = [n.name for n in data.nodes if n.ok and n.environment is None]
    if missing_env:
        notes.append("no environment recorded for " + ", ".join(missing_env) + ": not compared")
    if baseline is not None:
        _apply_baseline(data, rows, baseline, th, flags, notes)
    flags[:] = with_causes(data, flags)
    flags += doctor_flags(data)
    order = {n.name: i for i, n in enumerate(data.nodes)}
    kinds = {k: i for i, k in enumerate(FLAG_KINDS)}
    bench_order = {r.name: i for i, r in enumerate(rows)}
    flags.sort(
        key=lambda f: (
            order.get(f.node, len(order)),
            kinds.get(f.kind, len(kinds)),
            -1 if f.benchmark is None else bench_order.get(f.benchmark, len(bench_order)),
        )
    )
    return FleetReport(
        data=data,
        thresholds=th,
        benchmarks=rows,
        summary=summary,
        environment=env_rows,
        flagged=flags,
        notes=notes,
        baseline=baseline,
        doctor=compare_doctor(data.nodes),
    )


# -- causes: interference during the window, the doctor's findings -------------------------


def _problems(node: FleetNode) -> list[Finding]:
    return [f for f in node.doctor if f.severity != OK]


def with_causes(data: FleetData, flags: list[Flag]) -> list[Flag]:
    """Slow and failed flags with what may explain them appended to the reason: the
    interference seen during that benchmark's window on that node (other processes,
    steal, GPU slowdowns, XIDs) and the node's doctor warnings and failures."""
    out = []
    for flag in flags:
        if flag.kind not in (SLOW, FAILED, BELOW_BASELINE):
            out.append(flag)
            continue
        try:
            node = data.node(flag.node)
        except (KeyError, StopIteration):
            out.append(flag)
            continue
        extra = []
        cell = node.cells.get(flag.benchmark) if flag.benchmark else None
        if cell is not None and cell.causes:
            extra.append("seen during its window: " + "; ".join(cell.causes[:2]))
        problems = _problems(node)
        if problems:
            listed = "; ".join(f"{f.subject} {f.check}: {f.reason}" for f in problems[:3])
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            extra.append(f"milabench doctor on this node: {listed}{more}")
        if extra and not flag.reason.endswith(tuple(extra)):
            flag = replace(flag, reason=flag.reason + "; " + "; ".join(extra))
        out.append(flag)
    return out


def doctor_flags(data: FleetData) -> list[Flag]:
    """A node that was measured although the doctor found a failure on it (the fleet or
    its run was told --ignore-doctor): its figures describe a degraded machine."""
    out = []
    for node in data.nodes:
        failed = [f for f in node.doctor if f.severity == FAIL]
        if failed and node.ok:
            listed = "; ".join(f"{f.subject} {f.check}: {f.reason}" for f in failed[:3])
            out.append(Flag(node.name, None, DOCTOR, f"measured despite doctor failures: {listed}"))
    return out


def compare_doctor(nodes: list[FleetNode]) -> list[DoctorRow]:
    """Every doctor check that is not ``ok`` on some node, with each node's finding, so
    that a node's warning reads next to its peers' state (``pcie_link`` x8 on one node,
    x16 on the others)."""
    keys: dict[tuple[str, str], None] = {}
    per_node: dict[str, dict[tuple[str, str], Finding]] = {}
    for node in nodes:
        found = per_node.setdefault(node.name, {})
        for f in node.doctor:
            found[(f.check, f.subject)] = f
            keys.setdefault((f.check, f.subject), None)
    rows = []
    for check, subject in keys:
        findings = {
            n: per_node[n][(check, subject)] for n in per_node if (check, subject) in per_node[n]
        }
        problems = [n for n, f in findings.items() if f.severity != OK]
        if problems:
            rows.append(DoctorRow(check, subject, findings, problems))
    return rows


def _units(units: str | None) -> str:
    return f" {units}" if units else ""


def _pct(fraction: float) -> str:
    return f"{fmt_sig(100.0 * fraction, 2)}%"


def _interval(cell: BenchCell) -> str:
    """A cell's 95% interval for a sentence: ``±0.41%, up to 1,610``."""
    hw = cell.halfwidth
    rel = f"±{_pct(hw)}, " if hw is not None else ""
    return f"{rel}up to {fmt_sig(cell.ci_high)}"


def _bench_row(
    data: FleetData, name: str, th: FleetThresholds, flags: list[Flag], notes: list[str]
) -> BenchRow:
    cells: dict[str, BenchCell] = {}
    for node in data.nodes:
        cell = node.cells.get(name)
        if cell is None:
            status = CELL_MISSING if node.report is not None else CELL_NO_RUN
            reason = (
                f"not run (no .data file for it in {node.run})"
                if node.report is not None
                else (node.problem or f"{node.status}: {node.reason or 'no run folder'}")
            )
            cell = BenchCell(bench=name, status=status, reason=reason)
        cells[node.name] = cell
    measured = {n: c for n, c in cells.items() if c.rate is not None and c.rate > 0}
    units = next((c.units for c in measured.values() if c.units), None)
    row = BenchRow(name=name, units=units, cells=cells, reporting=len(measured))
    if not measured:
        return row
    values = [c.rate for c in measured.values()]
    row.median = statistics.median(values)
    row.mad = median_abs_deviation(values)
    row.relative = {n: c.rate / row.median for n, c in measured.items()}
    row.compared = len(measured) >= MIN_NODES
    if not row.compared:
        notes.append(
            f"{name}: fleet comparison not possible, only {len(measured)} node(s) reported a "
            f"rate ({MIN_NODES} are needed for a median and a spread); baselines still apply"
        )
        return row
    rates = {n: c.rate for n, c in measured.items()}
    for node_name, cell in measured.items():
        mad, others = spread_without(rates, node_name)
        check = check_slow(
            cell.rate,
            cell.ci_high,
            row.median,
            mad,
            mad_k=th.mad_k,
            min_gap=th.min_gap,
            others=others,
        )
        row.slow[node_name] = check
        if check.slow:
            flags.append(Flag(node_name, name, SLOW, _slow_reason(row, cell, check, th)))
        elif check.beyond and check.ci_reaches:
            notes.append(
                f"{node_name}: {name} is {_pct(check.gap / row.median)} below the fleet median, "
                f"but its own 95% interval ({_interval(cell)}{_units(units)}) reaches the "
                "median: too noisy to tell, not flagged"
            )
    return row


def _threshold_words(median: float, check: SlowCheck, th: FleetThresholds) -> str:
    """How the allowed gap was set, for the reason sentences."""
    mad_term = th.mad_k * MAD_SCALE * check.mad
    return (
        f"the allowed gap is {_pct(check.threshold / median)}, the larger of --min-gap "
        f"{_pct(th.min_gap)} and {th.mad_k:g} x 1.4826 x MAD of the other {check.others} "
        f"nodes = {_pct(mad_term / median)}"
    )


def _slow_reason(row: BenchRow, cell: BenchCell, check: SlowCheck, th: FleetThresholds) -> str:
    assert row.median is not None and row.mad is not None
    ratio = cell.rate / row.median
    text = (
        f"{fmt_sig(cell.rate)}{_units(row.units)} is {ratio:.2f}x the fleet median "
        f"({fmt_sig(row.median)}{_units(row.units)} over {row.reporting} nodes): "
        f"{_pct(check.gap / row.median)} slower; " + _threshold_words(row.median, check, th)
    )
    if check.ci_known:
        text += (
            f"; its own 95% interval ({_interval(cell)}) stays below the median, so this is "
            "not measurement noise"
        )
    else:
        text += "; its 95% interval is unknown (a single observation)"
    return text


def _failed_benchmarks(data: FleetData, rows: list[BenchRow], flags: list[Flag]) -> None:
    """Benchmarks that failed on a node, or gave it no result while others measured them.

    Nodes already flagged as a whole (not ok, unreadable run folder) get no per-benchmark
    flag: the node's flag says why. A node whose run report says FAIL for a reason no
    benchmark flag explains (a validation layer, nothing measured) gets one node flag.
    """
    for node in data.nodes:
        if not node.ok or node.report is None or node.problem:
            continue
        before = len(flags)
        for row in rows:
            cell = row.cells[node.name]
            if cell.status == CELL_FAILED:
                flags.append(Flag(node.name, row.name, FAILED, cell.reason or "failed"))
            elif cell.status in (CELL_SKIPPED, CELL_MISSING):
                others = [n for n, c in row.cells.items() if n != node.name and c.rate is not None]
                if others:
                    flags.append(
                        Flag(
                            node.name,
                            row.name,
                            FAILED,
                            f"no result ({cell.reason or cell.status}) while "
                            f"{len(others)} other node(s) measured it",
                        )
                    )
        if len(flags) == before and node.report.exit_code != 0:
            flags.append(
                Flag(
                    node.name,
                    None,
                    FAILED,
                    "its run report says FAIL: " + "; ".join(node.report.verdict_reasons),
                )
            )


def _summary(
    data: FleetData, rows: list[BenchRow], th: FleetThresholds, flags: list[Flag]
) -> SummaryRow | None:
    """Geometric mean of each node's relative rates over the compared benchmarks (when
    there are two or more), flagged by the slow rule when no single benchmark of that node
    was (a slowdown spread over benchmarks, each inside its own threshold)."""
    compared = [r for r in rows if r.compared]
    if len(compared) < 2:  # with one benchmark the summary would repeat its row
        return None
    values: dict[str, float] = {}
    halfwidths: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for node in data.nodes:
        rel = [
            (r.relative[node.name], r.cells[node.name]) for r in compared if node.name in r.relative
        ]
        if not rel:
            continue
        values[node.name] = math.exp(math.fsum(math.log(x) for x, _ in rel) / len(rel))
        counts[node.name] = len(rel)
        hws = [c.halfwidth for _, c in rel]
        # log(g) is the mean of the m log-ratios: relative errors add in quadrature / m.
        halfwidths[node.name] = (
            None
            if any(h is None for h in hws)
            else math.sqrt(math.fsum(h * h for h in hws)) / len(hws)
        )
    summary = SummaryRow(values=values, halfwidths=halfwidths, counts=counts)
    if len(values) < MIN_NODES:
        return summary
    summary.compared = True
    vals = list(values.values())
    summary.median = statistics.median(vals)
    summary.mad = median_abs_deviation(vals)
    slow_nodes = {f.node for f in flags if f.kind == SLOW}
    for name, g in values.items():
        hw = halfwidths[name]
        mad, others = spread_without(values, name)
        check = check_slow(
            g,
            None if hw is None else g * (1 + hw),
            summary.median,
            mad,
            mad_k=th.mad_k,
            min_gap=th.min_gap,
            others=others,
        )
        summary.slow[name] = check
        if check.slow and name not in slow_nodes:
            flags.append(
                Flag(
                    name,
                    None,
                    SLOW,
                    f"over its {counts[name]} compared benchmarks it runs at {g:.2f}x the fleet "
                    f"(geometric mean of rate / median; fleet median of that mean "
                    f"{summary.median:.2f}x): no single benchmark is beyond its threshold, "
                    "but together they are; " + _threshold_words(summary.median, check, th),
                )
            )
    return summary


# -- environment -------------------------------------------------------------------------


def env_values(env: dict[str, Any]) -> dict[str, Any]:
    """The compared keys of one node's environment, install-group keys spelled out
    (``torch[main]``); keys the writer did not record are absent, not None."""
    out: dict[str, Any] = {}
    for key in SCALAR_ENV_KEYS:
        if key in env:
            out[key] = env[key]
    for key in GROUP_ENV_KEYS:
        groups = env.get(key)
        if isinstance(groups, dict):
            for group, value in groups.items():
                out[f"{key}[{group}]"] = value
    return out


def compare_environments(nodes: list[FleetNode], th: FleetThresholds) -> list[EnvRow]:
    """Every compared key over the nodes that recorded an environment, with its majority
    value and the nodes that differ from it.

    The majority is the most common value. When two values tie for most common there is
    no majority: every node is listed as differing (nothing says which side is right).
    An install group one node lacks counts as the value None ("missing") there.
    """
    envs = {n.name: n.environment for n in nodes if n.environment is not None}
    per_node = {name: env_values(env) for name, env in envs.items()}
    keys: dict[str, None] = {}
    for values in per_node.values():
        for key in values:
            keys.setdefault(key, None)
    rows = []
    for key in keys:
        found = GROUP_KEY_PATTERN.match(key)
        values = {
            name: vals.get(key)
            for name, vals in per_node.items()
            if key in vals or (found and isinstance(envs[name].get(found.group(1)), dict))
        }
        counts = Counter(comparable_value(v) for v in values.values())
        ranked = counts.most_common()
        top, top_count = ranked[0]
        tie = len(ranked) > 1 and ranked[1][1] == top_count
        majority = next(v for v in values.values() if comparable_value(v) == top)
        row = EnvRow(
            key=key,
            values=values,
            majority=None if tie else majority,
            majority_count=0 if tie else top_count,
            tie=tie,
            ignored=th.ignores(key),
        )
        if len(ranked) > 1:
            row.differing = [n for n, v in values.items() if tie or comparable_value(v) != top]
        rows.append(row)
    return rows


def _env_reason(row: EnvRow, node: str) -> str:
    mine = short_value(row.values[node])
    total = len(row.values)
    hint = f" (accept it with --ignore-env {row.key.split('[')[0]})"
    if row.tie:
        spread = Counter(short_value(v) for v in row.values.values())
        listed = ", ".join(f"{v!s} on {c}" for v, c in spread.most_common())
        return f"{row.key} is {mine} here; no majority across {total} nodes ({listed}){hint}"
    return (
        f"{row.key} is {mine} here, {short_value(row.majority)} on {row.majority_count} of "
        f"{total} nodes{hint}"
    )


# -- baselines ---------------------------------------------------------------------------


def _apply_baseline(
    data: FleetData,
    rows: list[BenchRow],
    baseline: Baseline,
    th: FleetThresholds,
    flags: list[Flag],
    notes: list[str],
) -> None:
    where = str(baseline.path) if baseline.path else "the baseline"
    unknown_models: dict[str, list[str]] = {}
    missing_bench: dict[tuple[str, str], None] = {}
    for row in rows:
        for node in data.nodes:
            cell = row.cells[node.name]
            if cell.rate is None:
                continue
            model = node.hardware
            if model is None:
                continue
            expected = baseline.models.get(model)
            if expected is None:
                names = unknown_models.setdefault(model, [])
                if node.name not in names:
                    names.append(node.name)
                continue
            entry = expected.get(row.name)
            if entry is None:
                missing_bench.setdefault((row.name, model), None)
                continue
            if entry.units and cell.units and entry.units != cell.units:
                notes.append(
                    f"{node.name}: {row.name} is in {cell.units}, the baseline in {entry.units}: "
                    "not compared"
                )
                continue
            row.baseline[node.name] = entry.rate
            if check_below_baseline(cell.rate, cell.ci_high, entry.rate, th.tolerance):
                ratio = cell.rate / entry.rate
                ci = (
                    f"; its own 95% interval ({_interval(cell)}) stays below the baseline"
                    if cell.ci_high is not None
                    else "; its 95% interval is unknown"
                )
                flags.append(
                    Flag(
                        node.name,
                        row.name,
                        BELOW_BASELINE,
                        f"{fmt_sig(cell.rate)}{_units(cell.units)} is {ratio:.2f}x the baseline "
                        f"{fmt_sig(entry.rate)}{_units(entry.units or cell.units)} for {model} "
                        f"({_pct(1 - ratio)} below, --tolerance {_pct(th.tolerance)}){ci}",
                    )
                )
    for model, names in unknown_models.items():
        notes.append(f"no baseline for hardware model {model!r} ({', '.join(names)}) in {where}")
    for bench, model in missing_bench:
        notes.append(f"{bench}: no baseline for {model!r} in {where}")


def baseline_from_report(report: FleetReport) -> Baseline:
    """The expected rates a fleet run gives: per hardware model and benchmark, the median
    rate of the nodes of that model that were not flagged failed or slow for it (nodes
    flagged for their environment count: a different CPU model is its own hardware model)."""
    bad = {(f.node, f.benchmark) for f in report.flagged if f.kind in (FAILED, SLOW)}
    models: dict[str, dict[str, list[tuple[float, str | None]]]] = {}
    for row in report.benchmarks:
        for node in report.data.nodes:
            cell = row.cells[node.name]
            model = node.hardware
            if (
                cell.rate is None
                or cell.status != CELL_OK
                or model is None
                or not node.ok
                or (node.name, None) in bad
                or (node.name, row.name) in bad
            ):
                continue
            models.setdefault(model, {}).setdefault(row.name, []).append((cell.rate, cell.units))
    out: dict[str, dict[str, BaselineEntry]] = {}
    for model, benches in models.items():
        out[model] = {
            bench: BaselineEntry(
                rate=statistics.median([r for r, _ in found]),
                units=next((u for _, u in found if u), None),
                nodes=len(found),
            )
            for bench, found in benches.items()
        }
    return Baseline(models=out, source=report.data.name)


def baseline_dict(baseline: Baseline) -> dict[str, Any]:
    return {
        "schema_version": BASELINE_SCHEMA_VERSION,
        "kind": BASELINE_KIND,
        "source": baseline.source,
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "models": {
            model: {
                bench: {"rate": e.rate, "units": e.units, "nodes": e.nodes}
                for bench, e in benches.items()
            }
            for model, benches in baseline.models.items()
        },
    }


def write_baseline(report: FleetReport, path: str | Path) -> Baseline:
    """Write the baseline of a fleet run (`baseline_from_report`) to `path`: YAML for a
    ``.yaml``/``.yml`` name, else JSON; parent folders created; written atomically."""
    path = Path(path)
    baseline = baseline_from_report(report)
    if not baseline.models:
        raise UsageError(
            f"--write-baseline {path}: no node gave a rate that can serve as a baseline "
            "(every one failed, was flagged slow, or recorded no hardware model)"
        )
    doc = baseline_dict(baseline)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(doc, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(
            f"--write-baseline {path}: cannot write: {exc.strerror or type(exc).__name__}"
        ) from None
    baseline.path = path
    return baseline


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline file (JSON or YAML); any fault is one `UsageError` line naming the
    file and the key."""
    import yaml

    path = Path(path)
    text = _read_text(path, f"--baseline {path}")
    try:
        doc = yaml.safe_load(text)  # JSON is YAML: one parser for both
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML or JSON{where}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a baseline file (a mapping is expected)")
    kind = doc.get("kind")
    if kind is not None and kind != BASELINE_KIND:
        raise UsageError(f"{path}: kind {kind!r} is not a baseline file ({BASELINE_KIND!r})")
    version = check_version(doc.get("schema_version"), BASELINE_SCHEMA_VERSION, path)
    raw = doc.get("models")
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: models: a mapping of hardware model -> benchmarks is expected")
    models: dict[str, dict[str, BaselineEntry]] = {}
    for model, benches in raw.items():
        if not isinstance(benches, dict):
            raise UsageError(f"{path}: models.{model}: a mapping of benchmark -> rate is expected")
        models[str(model)] = {}
        for bench, value in benches.items():
            where = f"{path}: models.{model}.{bench}"
            if is_number(value):  # a bare number is accepted: `steady: 1600`
                value = {"rate": value}
            if not isinstance(value, dict):
                raise UsageError(f"{where}: a mapping with `rate` is expected")
            rate = value.get("rate")
            if not is_number(rate) or rate <= 0:
                raise UsageError(f"{where}.rate: a positive number is expected, not {rate!r}")
            units = value.get("units")
            nodes = value.get("nodes")
            models[str(model)][str(bench)] = BaselineEntry(
                rate=float(rate),
                units=str(units) if units is not None else None,
                nodes=nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else None,
            )
    return Baseline(
        models=models, source=_opt_str(doc.get("source")), path=path, schema_version=version
    )


# -- rendering ---------------------------------------------------------------------------


def _renderers() -> dict[str, Any]:
    from milabench.fleet import render as renderers

    return {
        "text": renderers.render_text,
        "markdown": renderers.render_markdown,
        "json": renderers.render_json,
        "html": renderers.render_html,
    }


RENDERERS: Renderers[FleetReport] = Renderers(
    "fleet report", ("text", "markdown", "json", "html"), _renderers, aliases={"md": "markdown"}
)
FORMATS = RENDERERS.formats


def render_fleet(report: FleetReport, fmt: str = "text") -> str:
    """The fleet report as text, markdown (md), json or html (`fleet/render.py`), through
    `RENDERERS` (`milabench.formats`: the formats every kind of report shares)."""
    return RENDERERS.render(report, fmt)


__all__ = [
    "BASELINE_SCHEMA_VERSION",
    "BELOW_BASELINE",
    "DEFAULT_MAD_K",
    "DEFAULT_MIN_GAP",
    "DEFAULT_TOLERANCE",
    "ENVIRONMENT",
    "FAILED",
    "FLEET_REPORT_SCHEMA_VERSION",
    "FLEET_SCHEMA_VERSION",
    "FORMATS",
    "RENDERERS",
    "MAD_SCALE",
    "MIN_NODES",
    "NODE_OK",
    "SLOW",
    "Baseline",
    "BenchCell",
    "BenchRow",
    "FleetData",
    "FleetNode",
    "FleetReport",
    "FleetThresholds",
    "Flag",
    "SlowCheck",
    "build_fleet_report",
    "check_below_baseline",
    "check_env_key",
    "check_slow",
    "compare_environments",
    "load_baseline",
    "load_fleet",
    "median_abs_deviation",
    "render_fleet",
    "slow_threshold",
    "spread_without",
    "write_baseline",
]
