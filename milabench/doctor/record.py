"""``doctor.json``: the findings a run started with, as one JSON document.

`doctor_record` is the document (``milabench doctor --format json`` prints it),
`write_doctor_file` writes it into a run folder atomically and `read_doctor_file` reads
it back for the report and the fleet report (None for a run made before the doctor
existed). Its fields: docs/doctor.md "`milabench run` checks first".
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from milabench.doctor.findings import Finding, findings_of, worst
from milabench.machine.procfs import read_text

DOCTOR_FILE = "doctor.json"  # in a run folder: the findings `milabench run` started with
DOCTOR_KIND = "milabench-doctor"
DOCTOR_SCHEMA_VERSION = 1


def doctor_record(findings: Sequence[Finding], *, ignored: bool = False) -> dict[str, Any]:
    """The JSON document of a check: ``doctor.json`` in a run folder, ``milabench doctor
    --format json``. ``ignored``: the run started despite a failure (``--ignore-doctor``)."""
    import platform

    return {
        "kind": DOCTOR_KIND,
        "schema_version": DOCTOR_SCHEMA_VERSION,
        "time": time.time(),
        "hostname": platform.node(),
        "worst": worst(findings),
        "ignored": ignored,
        "findings": [f.as_dict() for f in findings],
    }


def write_doctor_file(folder: str, findings: Sequence[Finding], *, ignored: bool = False) -> str:
    """Write ``doctor.json`` into ``folder`` (created), atomically; its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, DOCTOR_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doctor_record(findings, ignored=ignored), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


def read_doctor_file(folder: str) -> list[Finding] | None:
    """The findings of a run folder's ``doctor.json`` (None when absent or unreadable: a
    run made before the doctor existed, or a file cut short)."""
    text = read_text(os.path.join(folder, DOCTOR_FILE))
    if text is None:
        return None
    try:
        return findings_of(json.loads(text))
    except ValueError:
        return None
