"""The vocabulary of the fleet report: its records, flag kinds, thresholds and versions.

Plain data shared by `milabench.fleet.report` (reading a fleet folder, the rules,
baselines) and `milabench.fleet.render` (the renderings), so that neither imports
the other's functions: the renderers format these records, the rules fill them.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.doctor.findings import Finding
from milabench.errors import UsageError
from milabench.report.build import Report

FLEET_FILE = "fleet.json"
FLEET_KIND = "milabench-fleet"
# Versions this reader knows: fleet.json (written by `milabench fleet`), the baseline file
# and the JSON rendering of this report. Older versions are read, newer ones refused.
FLEET_SCHEMA_VERSION = 1
BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "milabench-fleet-baseline"
FLEET_REPORT_SCHEMA_VERSION = 1

NODE_OK = "ok"
# `status` null: the node has not finished (a fleet run still going rewrites fleet.json).
NODE_IN_PROGRESS = "in progress"
NODE_STATUSES = ("ok", "unreachable", "install-failed", "prepare-failed", "run-failed", "lost")

# Flag kinds.
SLOW = "slow"
FAILED = "failed"
ENVIRONMENT = "environment"
BELOW_BASELINE = "below-baseline"
# a node measured although `milabench doctor` found a failure on it (--ignore-doctor)
DOCTOR = "doctor"
FLAG_KINDS = (FAILED, SLOW, BELOW_BASELINE, ENVIRONMENT, DOCTOR)

# Cell statuses (one benchmark on one node).
CELL_OK = "ok"  # measured, every process succeeded
CELL_FAILED = "failed"  # some process failed (a rate may remain from the others)
CELL_SKIPPED = "skipped"  # capability skip on that node
CELL_MISSING = "missing"  # no file for it in the node's run folder
CELL_NO_RUN = "no run"  # the node has no readable run folder

# 1.4826 x MAD estimates the standard deviation of normally distributed values (1/Phi^-1(3/4)).
MAD_SCALE = 1.4826
# A median and a spread need at least three values: with two nodes that disagree, nothing
# says which one is off.
MIN_NODES = 3

DEFAULT_MAD_K = 3.0
DEFAULT_MIN_GAP = 0.10
DEFAULT_TOLERANCE = 0.10

# Environment keys compared across nodes (fleet.json `environment`); the last two hold
# one value per install group, compared as `torch[<group>]` and `packages[<group>]`.
SCALAR_ENV_KEYS = (
    "python",
    "milabench",
    "milabench_commit",
    "milabench_code",
    "driver",
    "gpu_model",
    "gpu_count",
    "cpu_model",
    "cpu_count",
)
GROUP_ENV_KEYS = ("torch", "packages")
GROUP_KEY_PATTERN = re.compile(r"^(torch|packages)\[(.+)\]$")


# -- thresholds --------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetThresholds:
    """The knobs of the flag rules (docs/fleet.md gives the defaults and why)."""

    mad_k: float = DEFAULT_MAD_K  # --mad-k: how many robust standard deviations
    min_gap: float = DEFAULT_MIN_GAP  # --min-gap: smallest gap flagged, fraction of median
    tolerance: float = DEFAULT_TOLERANCE  # --tolerance: allowed shortfall from a baseline
    ignore_env: tuple[str, ...] = ()  # --ignore-env: environment keys not compared

    def __post_init__(self) -> None:
        if not is_number(self.mad_k) or self.mad_k < 0:
            raise UsageError(f"--mad-k {self.mad_k}: must be a number >= 0 (default 3)")
        for option, value in (("--min-gap", self.min_gap), ("--tolerance", self.tolerance)):
            if not is_number(value) or not 0 <= value < 1:
                raise UsageError(
                    f"{option} {value}: must be a fraction from 0 to below 1 (0.10 = 10%)"
                )
        object.__setattr__(self, "ignore_env", tuple(self.ignore_env))
        for key in self.ignore_env:
            check_env_key(key)

    def ignores(self, key: str) -> bool:
        """True when `key` (``torch[main]`` included) is not to be compared."""
        if key in self.ignore_env:
            return True
        found = GROUP_KEY_PATTERN.match(key)
        return bool(found and found.group(1) in self.ignore_env)


def check_env_key(key: str) -> str:
    """An `--ignore-env` key: a known key, ``torch``/``packages`` or ``torch[<group>]``."""
    if key in SCALAR_ENV_KEYS or key in GROUP_ENV_KEYS or GROUP_KEY_PATTERN.match(key):
        return key
    known = [*SCALAR_ENV_KEYS, *GROUP_ENV_KEYS]
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise UsageError(
        f"--ignore-env {key}: not an environment key{hint}; known: {', '.join(known)}, "
        "or torch[<group>] / packages[<group>]"
    )


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# -- the fleet folder --------------------------------------------------------------------


@dataclass
class BenchCell:
    """One benchmark on one node, as that node's own report gives it."""

    bench: str
    status: str  # CELL_*
    rate: float | None = None  # the report's `rate` (per_gpu: sum over the devices)
    ci_low: float | None = None  # its 95% interval (`ci95_low`/`ci95_high`)
    ci_high: float | None = None
    units: str | None = None
    n: int = 0
    fail: int = 0
    reason: str | None = None  # why it is not `ok`, from the run files
    # interference seen during the measured window (`milabench.report.interference`)
    causes: list[str] = field(default_factory=list)

    @property
    def halfwidth(self) -> float | None:
        """Relative half-width of the 95% interval (None when unknown)."""
        if self.rate is None or self.ci_low is None or self.ci_high is None or self.rate <= 0:
            return None
        return (self.ci_high - self.ci_low) / 2 / self.rate


@dataclass
class FleetNode:
    """One node of fleet.json, with its run folder read by the ordinary report."""

    name: str
    host: str | None
    status: str
    reason: str | None
    phase_seconds: dict[str, float]
    run: str | None  # as written in fleet.json, relative to the fleet folder
    environment: dict[str, Any] | None
    phase: str | None = None  # extra key of a running fleet: where the node is now
    run_dir: Path | None = None
    report: Report | None = None
    problem: str | None = None  # why the run folder could not be used
    cells: dict[str, BenchCell] = field(default_factory=dict)
    # `milabench doctor`'s findings: the node's run folder's (at the start of its run),
    # else fleet.json's (checked by the fleet when it reached the node)
    doctor: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == NODE_OK

    @property
    def hardware(self) -> str | None:
        """The hardware model baselines are kept for: the GPU model, else the CPU model."""
        env = self.environment or {}
        model = env.get("gpu_model") or env.get("cpu_model")
        return str(model) if model else None


@dataclass
class FleetData:
    """A fleet folder as read: fleet.json's fields and every node."""

    folder: Path
    name: str
    schema_version: int
    config: str | None
    select: list[str]
    exclude: list[str]
    started: str | None
    ended: str | None
    nodes: list[FleetNode]

    @property
    def benchmarks(self) -> list[str]:
        """Every benchmark some node ran, in the order they first appear."""
        seen: dict[str, None] = {}
        for node in self.nodes:
            for name in node.cells:
                seen.setdefault(name, None)
        return list(seen)

    def node(self, name: str) -> FleetNode:
        return next(n for n in self.nodes if n.name == name)


# -- the report's records ---------------------------------------------------------------


@dataclass(frozen=True)
class SlowCheck:
    """The slow rule applied to one value (docs/fleet.md, "slow")."""

    slow: bool
    gap: float  # median - rate: positive when below the median
    threshold: float  # slow_threshold(...)
    mad: float  # the spread it used: MAD of the *other* nodes' values (spread_without)
    others: int  # how many other nodes that spread came from
    by_mad: bool  # the MAD term set the threshold (else the minimum gap did)
    beyond: bool  # gap > threshold
    ci_reaches: bool  # the value's 95% interval reaches the median: noise, not flagged
    ci_known: bool


@dataclass(frozen=True)
class Flag:
    """One reason to look at a node: what, where, and why in one sentence."""

    node: str
    benchmark: str | None  # None: about the node as a whole
    kind: str  # FLAG_KINDS
    reason: str
    key: str | None = None  # the environment key, for `environment` flags


@dataclass
class BenchRow:
    """One benchmark across the fleet: its median, spread, threshold and every cell."""

    name: str
    units: str | None
    cells: dict[str, BenchCell]  # node -> cell (nodes without a file for it included)
    reporting: int = 0  # nodes with a rate
    median: float | None = None
    mad: float | None = None  # over every reporting node (shown as the row's spread)
    compared: bool = False  # at least MIN_NODES nodes reported a rate
    relative: dict[str, float] = field(default_factory=dict)  # node -> rate / median
    slow: dict[str, SlowCheck] = field(default_factory=dict)  # node -> rule applied
    baseline: dict[str, float] = field(default_factory=dict)  # node -> expected rate

    @property
    def allowed_gaps(self) -> tuple[float, float] | None:
        """The smallest and largest allowed gap over the nodes, as fractions of the median
        (each node's spread is that of the others, so the gap differs per node)."""
        return allowed_gaps(self.median, self.slow)


@dataclass
class SummaryRow:
    """Per node: geometric mean over the compared benchmarks of rate / fleet median."""

    values: dict[str, float]  # node -> geometric mean
    halfwidths: dict[str, float | None]  # node -> relative 95% half-width
    counts: dict[str, int]  # node -> benchmarks in its mean
    median: float | None = None
    mad: float | None = None
    compared: bool = False
    slow: dict[str, SlowCheck] = field(default_factory=dict)

    @property
    def allowed_gaps(self) -> tuple[float, float] | None:
        """As `BenchRow.allowed_gaps`, for the geometric means."""
        return allowed_gaps(self.median, self.slow)


def allowed_gaps(median: float | None, checks: dict[str, SlowCheck]) -> tuple[float, float] | None:
    """(min, max) of the nodes' slow thresholds as fractions of the median; None when
    nothing was compared."""
    if not median or not checks:
        return None
    fractions = [c.threshold / median for c in checks.values()]
    return min(fractions), max(fractions)


@dataclass
class EnvRow:
    """One environment key across the nodes that reported an environment."""

    key: str
    values: dict[str, Any]  # node -> value
    majority: Any = None
    majority_count: int = 0
    tie: bool = False  # no single most common value
    differing: list[str] = field(default_factory=list)
    ignored: bool = False

    @property
    def differs(self) -> bool:
        return len(set(map(comparable_value, self.values.values()))) > 1


@dataclass
class BaselineEntry:
    rate: float
    units: str | None = None
    nodes: int | None = None


@dataclass
class Baseline:
    """Expected rate per benchmark per hardware model (`load_baseline`)."""

    models: dict[str, dict[str, BaselineEntry]]
    source: str | None = None  # the fleet run it was written from
    path: Path | None = None
    schema_version: int = BASELINE_SCHEMA_VERSION


@dataclass
class DoctorRow:
    """One doctor check across the nodes (``check`` on ``subject``): each node's finding,
    and the nodes whose severity is not ``ok``."""

    check: str
    subject: str
    findings: dict[str, Finding]  # node -> its finding (absent: not checked there)
    problems: list[str] = field(default_factory=list)


@dataclass
class FleetReport:
    """Everything the renderers print; `exit_code` is 0 exactly when nothing is flagged."""

    data: FleetData
    thresholds: FleetThresholds
    benchmarks: list[BenchRow]
    summary: SummaryRow | None
    environment: list[EnvRow]
    flagged: list[Flag]
    notes: list[str]
    baseline: Baseline | None = None
    doctor: list[DoctorRow] = field(default_factory=list)

    @property
    def flagged_nodes(self) -> list[str]:
        """Flagged nodes, in fleet.json's order."""
        names = {f.node for f in self.flagged}
        return [n.name for n in self.data.nodes if n.name in names]

    @property
    def exit_code(self) -> int:
        """0 when no node is flagged, 1 when one is (2 is for usage errors)."""
        return 1 if self.flagged else 0

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.data.nodes]

    def flags_of(self, node: str, benchmark: str | None = None) -> list[Flag]:
        return [f for f in self.flagged if f.node == node and f.benchmark == benchmark]

    def row(self, name: str) -> BenchRow:
        return next(r for r in self.benchmarks if r.name == name)


def comparable_value(value: Any) -> Any:
    """A value that can be counted (`Counter`) and compared: mappings and lists as JSON."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def short_value(value: Any) -> str:
    """An environment value for people: hashes cut to 12 hex digits, None as "none" (no
    GPU, no driver, an install group without that environment or without torch)."""
    if value is None:
        return "none"
    text = str(value)
    if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return text[:12]
    return text
