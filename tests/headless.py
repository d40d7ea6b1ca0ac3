"""Pages drawn by a real headless Chromium (the `chromium` fixture of tests/conftest.py).

`open_page` loads a page from ``file://`` and gives back the DOM after its scripts ran
and every console message the page printed (an error in an inline script, a refused
fetch); `external_urls` lists what a page would ask the network for. Each HTML page of
milabench has one test that uses both.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def open_page(chromium: str, url: str | Path, profile: Path) -> tuple[str, list[str]]:
    """(DOM of `url` (a path or a URL) once its scripts ran, its console messages)."""
    if isinstance(url, Path):
        url = url.as_uri()
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.stdout, console


def external_urls(html: str) -> list[str]:
    """Every URL the page names other than the SVG namespace, plus any ``<link`` or
    ``src=``: a page that opens offline has none."""
    urls = [u for u in re.findall(r"https?://[^\s\"'<>]+", html) if u != SVG_NAMESPACE]
    return urls + re.findall(r"<link\b[^>]*>|\bsrc=\S+", html)
