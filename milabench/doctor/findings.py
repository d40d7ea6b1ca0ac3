"""A finding of the doctor, its severities, and the words every command prints of them.

`Finding` is one fact of the machine with a severity (`OK`, `WARN`, `FAIL`) and a
one-line reason; `worst` and `failures` sort them; `merge_alike` folds devices that all
passed a check into one line; `render_findings` is the table of `milabench doctor`,
`summary_line` its last line, `refusal` the one line naming the failure that stops a
run, a fleet node or a preflight. Standard library only: it is sent to nodes inline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

OK = "ok"
WARN = "warn"
FAIL = "fail"
SEVERITIES = (OK, WARN, FAIL)


@dataclass
class Finding:
    """One fact about the machine: ``check`` (what was looked at), ``subject`` (``host``,
    ``gpu3``, ``disk /data``, ``python``), ``severity`` (ok, warn, fail), ``reason`` (one
    line for a person) and ``value`` (the measured value, JSON-able, for comparisons)."""

    check: str
    subject: str
    severity: str
    reason: str
    value: Any = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        """A finding read back from JSON (unknown severities become ``warn``)."""
        severity = str(data.get("severity") or WARN)
        return cls(
            check=str(data.get("check") or "?"),
            subject=str(data.get("subject") or "host"),
            severity=severity if severity in SEVERITIES else WARN,
            reason=str(data.get("reason") or ""),
            value=data.get("value"),
        )


def findings_of(data: object) -> list[Finding] | None:
    """The findings of a decoded ``{"findings": [...]}`` document (``doctor.json``, a
    node's probe line); None when it holds no such list."""
    items = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return [Finding.from_dict(x) for x in items if isinstance(x, dict)]


def worst(findings: Iterable[Finding]) -> str:
    """The highest severity of ``findings`` (``ok`` for none)."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return max((f.severity for f in findings), key=lambda s: rank.get(s, 1), default=OK)


def failures(findings: Iterable[Finding]) -> list[Finding]:
    """The ``fail`` findings, in their order."""
    return [f for f in findings if f.severity == FAIL]


def merge_alike(findings: list[Finding], prefix: str = "gpu") -> list[Finding]:
    """One ``ok`` line per check for devices that all passed it (``gpu0-7``), instead of
    one per device; non-ok findings stay one per device, so each says which GPU."""
    out: list[Finding] = []
    by_check: dict[str, list[Finding]] = {}
    order: list[str] = []
    for f in findings:
        if f.check not in by_check:
            order.append(f.check)
        by_check.setdefault(f.check, []).append(f)
    for check in order:
        group = by_check[check]
        good = [f for f in group if f.severity == OK]
        bad = [f for f in group if f.severity != OK]
        if len(good) > 1 and all(f.subject.startswith(prefix) for f in good):
            ids = [f.subject[len(prefix) :] for f in good]
            span = (
                f"{prefix}{ids[0]}-{ids[-1]}"
                if all(i.isdigit() for i in ids)
                and [int(i) for i in ids] == list(range(int(ids[0]), int(ids[0]) + len(ids)))
                else prefix + ",".join(ids)
            )
            reasons = {f.reason for f in good}
            reason = good[0].reason if len(reasons) == 1 else f"{good[0].reason} (and others)"
            out.append(Finding(check, span, OK, reason, [f.value for f in good]))
        else:
            out.extend(good)
        out.extend(bad)
    return out


def render_findings(findings: Sequence[Finding], *, only_problems: bool = False) -> str:
    """The findings as one table: check, subject, severity, reason."""
    rows = [f for f in findings if not only_problems or f.severity != OK]
    header = ("check", "subject", "severity", "reason")
    cells = [header] + [(f.check, f.subject, f.severity, f.reason) for f in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    return "\n".join(
        "  ".join(c[i].ljust(widths[i]) for i in range(3)) + "  " + c[3] for c in cells
    )


def summary_line(findings: Sequence[Finding]) -> str:
    """``2 warnings, 1 failure`` / ``no problem`` (ok findings counted apart)."""
    n_warn = sum(f.severity == WARN for f in findings)
    n_fail = sum(f.severity == FAIL for f in findings)
    parts = []
    if n_fail:
        parts.append(f"{n_fail} failure{'s' if n_fail != 1 else ''}")
    if n_warn:
        parts.append(f"{n_warn} warning{'s' if n_warn != 1 else ''}")
    return ", ".join(parts) or "no problem"


def refusal(findings: Iterable[Finding], *, lead: str, tail: str) -> str | None:
    """``<lead><subject> <check>: <reason>[ (and N more)]<tail>``, naming the first
    failure of ``findings`` (and how many more there are); None when none failed.

    The one wording of a refusal: `milabench run` (``refused to start: ``), `milabench
    preflight` (``node <name>: milabench doctor: ``) and `milabench fleet` (``milabench
    doctor: ``) each add only their own ``lead`` and ``tail``."""
    failed = failures(findings)
    if not failed:
        return None
    first = failed[0]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{lead}{first.subject} {first.check}: {first.reason}{more}{tail}"


def pct(fraction: float) -> str:
    """A share as people read it: ``7.5%`` under 10%, ``42%`` above."""
    value = 100.0 * fraction
    return f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def gib(n: float) -> str:
    """Bytes in GiB, one decimal."""
    return f"{n / 2**30:.1f} GiB"
