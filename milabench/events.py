"""The event model and its JSON-lines codec: the spine between execution, sinks and reports.

Every line of a `.data` file is ``{"event": name, "data": payload, "pipe": ...}``
(docs/run-data.md section 2). Events are plain dicts, not objects: the runner produces
hundreds of thousands of them and the codec must stay cheap.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

# Version of the `.data` format (docs/reports.md "Formats and versions"): written once per
# file as the `format_version` key of its `config` line. 1: files without the key (written
# before versioning); 2: the key is written. Readers take every version up to this one.
DATA_FORMAT_VERSION = 2
FORMAT_KEY = "format_version"

# The `end` event's ``return_code`` when the process did not exit by itself
# (docs/run-data.md section 2): the words of the run-data format, defined once; `rundata.outcome` maps
# them (with the other facts of a run file) to a status, a verdict and an exit code.
RC_TIMEOUT = "TIMEOUT"  # stopped after its time limit
RC_INTERRUPTED = "INTERRUPTED"  # stopped by Ctrl-C / SIGTERM of the run
RC_SKIPPED = "SKIPPED"  # never started: a capability the system lacks
RC_ERROR = "ERROR"  # never started: missing environment, plan that cannot be built

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
_ALWAYS_SECRET = {"MILABENCH_HF_TOKEN", "HF_TOKEN"}


def is_secret_name(name: str) -> bool:
    """True for variable or key names whose values must never be written."""
    return name.upper() in _ALWAYS_SECRET or bool(_SECRET_NAME.search(name))


def redact(obj: Any) -> Any:
    """Copy of ``obj`` where every mapping value under a secret-looking key is redacted.

    Applied to every record the tool writes (config, meta, start commands' environments).
    Values inside argv lists are left alone, except ``--key=value`` style items whose
    option name looks secret.
    """
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and v not in (None, "", {}, []):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, list | tuple):
        out_list = []
        for i, x in enumerate(obj):
            prev = obj[i - 1] if i else None
            if isinstance(prev, str) and _SECRET_FLAG.match(prev) and isinstance(x, str):
                out_list.append(REDACTED)  # ``--token X`` as two argv items
            else:
                out_list.append(_redact_item(x))
        return out_list
    return obj


# An option whose value is a secret: ``--token``, ``--hf-token``, ``--password``,
# ``--api-key``, ``--secret``... (the last word of the name; ``--max-tokens`` is not one).
_SECRET_OPTION = r"--?(?:[\w-]*[-_])?(?:token|password|passwd|secret|api[-_]?key|apikey)"
_SECRET_FLAG = re.compile(rf"^{_SECRET_OPTION}$", re.IGNORECASE)
_SECRET_OPTION_TEXT = re.compile(
    rf"(?P<flag>(?<![\w-]){_SECRET_OPTION})(?P<sep>=|[ \t]+)(?P<value>(?!-)[^\s\"',;]+)",
    re.IGNORECASE,
)
_TEXT_WORDS = ("token", "passw", "secret", "key")  # cheap test before the regex
_AUTH_HEADER = re.compile(
    r"(?P<head>\b(?:proxy-)?authorization\s*:\s*(?:(?:bearer|basic|token|digest)\s+)?)"
    r"(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)


# A Hugging Face access token (``hf_`` and 30 or more letters or digits), however printed.
_HUB_TOKEN = re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of `_ALWAYS_SECRET` variables set in ``environ`` (default: this
    process's environment), longest first; values under 8 characters are left out."""
    env = os.environ if environ is None else environ
    found = {env[name] for name in _ALWAYS_SECRET if len(env.get(name) or "") >= 8}
    return sorted(found, key=len, reverse=True)


def redact_text(text: str) -> str:
    """``text`` with the secrets milabench recognises in free text replaced by REDACTED.

    URL credentials (`redact_url`), the value of ``--token X`` / ``--token=X`` (also
    ``--password``, ``--api-key``, ``--secret``, ``--hf-token``...) and of
    ``Authorization: Bearer X`` / ``Basic X`` headers, Hugging Face tokens (``hf_...``)
    and the values of ``HF_TOKEN`` / ``MILABENCH_HF_TOKEN`` of this process's environment
    (which every prepare and run process inherits), wherever they appear. Applied to every
    output line of a process (``line`` events, hence run files and the terminal) and to
    every string of the records milabench writes.
    """
    text = redact_url(text)
    for value in secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    if "hf_" in text:
        text = _HUB_TOKEN.sub(REDACTED, text)
    lowered = text.lower()
    if "-" in text and any(w in lowered for w in _TEXT_WORDS):
        text = _SECRET_OPTION_TEXT.sub(lambda m: m.group("flag") + m.group("sep") + REDACTED, text)
    if "authorization" in lowered:
        text = _AUTH_HEADER.sub(lambda m: m.group("head") + REDACTED, text)
    return text


_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s:]+(:[^/@\s]*)?@")


def redact_url(text: str) -> str:
    """``https://user:token@host/x`` -> ``https://<redacted>@host/x`` (index URLs, remotes)."""
    if "@" not in text or "://" not in text:
        return text
    return _URL_CREDENTIALS.sub(lambda m: m.group("scheme") + REDACTED + "@", text)


def _redact_item(x: Any) -> Any:
    if isinstance(x, str):
        x = redact_text(x)
    if isinstance(x, str) and "=" in x:
        name, _, _ = x.partition("=")
        if is_secret_name(name.lstrip("-")):
            return f"{name}={REDACTED}"
        return x
    return redact(x)


def _default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    tolist = getattr(obj, "tolist", None)  # numpy / torch scalars and arrays
    if callable(tolist):
        try:
            return tolist()
        except Exception:
            pass
    return {"#unrepresentable": repr(obj)}


def _sanitize_floats(obj: Any) -> Any:
    """Turn NaN/inf into strings so that every line is strict JSON."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return "NaN"
        if math.isinf(obj):
            return "Infinity" if obj > 0 else "-Infinity"
        return obj
    if isinstance(obj, dict):
        return {k: _sanitize_floats(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_sanitize_floats(v) for v in obj]
    return obj


def encode(event: str, data: Any = None, pipe: str | None = None, **extra: Any) -> str:
    """One event as one JSON line (with the trailing newline).

    Strict JSON: NaN and infinities become the strings "NaN"/"Infinity" (readers turn them
    back with `as_float`), and unserializable payloads become ``{"#unrepresentable": repr}``.
    """
    record = {"event": event, "data": data, "pipe": pipe}
    if extra:
        record.update(extra)
    try:
        text = json.dumps(record, default=_default, allow_nan=False)
    except ValueError:
        text = json.dumps(_sanitize_floats(record), default=_default, allow_nan=False)
    return text + "\n"


def decode(line: str | bytes) -> dict | None:
    """Parse one line; None when it is not a valid event (e.g. a truncated last line)."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: `[[[[...`
        return None
    if not isinstance(obj, dict) or "event" not in obj:
        return None
    return obj


def as_float(value: Any) -> float | None:
    """Numbers as written by `encode` (including "NaN"/"Infinity") back to floats."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if value in ("NaN", "nan"):
        return math.nan
    if value in ("Infinity", "inf"):
        return math.inf
    if value in ("-Infinity", "-inf"):
        return -math.inf
    return None


def check_format_version(ev: dict, path: str | Path) -> None:
    """Refuse an event line written in a newer `.data` format than this reader knows.

    The version is the ``format_version`` key of the `config` line (extra keys are allowed
    on every line: docs/run-data.md section 2); files without one are version 1.
    """
    check_version(ev.get(FORMAT_KEY, 1), DATA_FORMAT_VERSION, path, "format version")


def check_version(
    version: object, current: int, source: object, what: str = "schema version"
) -> int:
    """The one rule of every versioned file (run data, report JSON, fleet, baseline):
    versions 1 to `current` are read; anything else is one line (`UsageError`, exit 2)
    naming `source`, and a newer one says to upgrade."""
    valid = isinstance(version, int) and not isinstance(version, bool) and version >= 1
    if valid and version <= current:
        return version
    from milabench.errors import UsageError

    if not valid:
        raise UsageError(
            f"{source}: {what} {version!r} is not one this milabench reads (1 to {current})"
        )
    raise UsageError(
        f"{source}: {what} {version} is newer than this milabench reads"
        f" ({current}): upgrade milabench"
    )


def read_events(path: str | Path) -> Iterator[dict]:
    """Events of a `.data` file, skipping lines that do not parse (a cut last line).

    A line carrying a newer format version (`check_format_version`) stops the reading with
    a one-line `UsageError` rather than letting a report read numbers it may misread.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            ev = decode(line)
            if ev is not None:
                if FORMAT_KEY in ev:
                    check_format_version(ev, path)
                yield ev


def write_events(path: str | Path, events: Iterable[dict]) -> None:
    """Write already-built event dicts (used by tests and tools that synthesise runs)."""
    with open(path, "w", encoding="utf-8") as f:
        for ev in events:
            ev = dict(ev)
            f.write(encode(ev.pop("event"), ev.pop("data", None), ev.pop("pipe", None), **ev))
