"""POST the alerts of `milabench history` to a webhook (standard library only).

The payload is ``{"alerts": [...], "site": DIR or null, "generated": ISO time}``. A
failed POST never fails the command: it is reported as one line, and the URL in that
line shows only its scheme and host, since webhook URLs carry their token in the user
part, the path (Slack, Teams) or the query.
"""

from __future__ import annotations

import datetime
import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

TIMEOUT_S = 10.0


def safe_url(url: str) -> str:
    """``https://user:tok@hooks.example/services/T/B/X?token=Y`` -> ``https://hooks.example/...``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid URL>"
    if not parts.scheme or not host:
        return "<invalid URL>"
    rest = "/..." if (parts.path.strip("/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{host}{port}{rest}"


def payload(alerts: list[dict[str, Any]], site: str | None) -> dict[str, Any]:
    return {
        "alerts": alerts,
        "site": site,
        "generated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def post(url: str, body: dict[str, Any], timeout: float = TIMEOUT_S) -> str | None:
    """POST `body` as JSON; None when it went through, else a one-line reason (no secret)."""
    shown = safe_url(url)
    if urlsplit(url).scheme not in ("http", "https"):
        return f"notify URL {shown}: only http and https URLs are supported"
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "milabench-history"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as err:
        reason = f"HTTP {err.code} {err.reason}"
    except urllib.error.URLError as err:
        reason = str(err.reason)
    except (OSError, ValueError, http.client.HTTPException) as err:  # timeouts, resets
        reason = str(err) or type(err).__name__
    else:
        return None
    reason = " ".join(reason.replace(url, shown).split())
    return f"notify POST to {shown} failed: {reason}"
