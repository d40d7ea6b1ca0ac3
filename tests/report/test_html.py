"""The HTML report drawn by a real headless Chromium: non-blank, no console error, tables
and plots present, offline."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from milabench.report import build_report, render

sys.path.insert(0, str(Path(__file__).parent))
from headless import external_urls, open_page  # noqa: E402
from synth import entry, write_file  # noqa: E402

pytestmark = pytest.mark.slow


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of pixels) of an 8-bit RGB/RGBA PNG, with filters undone."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def test_html_report_renders_in_chromium(chromium, real_runs, tmp_path):
    # a run with accelerator samples (synthetic: no GPU here) next to a real CPU run
    gpu_run = tmp_path / "gpu-run"
    for dev in (0, 1):
        write_file(gpu_run, f"gpubench.D{dev}", entry("gpubench"), rates=[100 + 5 * i + dev for i in range(12)],
                   gpudata=[{str(dev): {"memory": [1000 + 300 * i, 81920], "load": 0.5 + 0.04 * i,
                                        "power": 250 + i}} for i in range(12)])  # fmt: skip
    report = build_report([real_runs["full"], gpu_run])
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"))
    shot = tmp_path / "shot.png"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400"]  # fmt: skip
    proc = subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    assert shot.exists(), proc.stderr[-2000:]
    shutil.copy(shot, Path(os.environ.get("H6_KEEP_SHOT", tmp_path / "kept.png")))
    width, bpp, rows = decode_png(shot.read_bytes())
    pixels = {row[i : i + 3] for row in rows[::4] for i in range(0, len(row), bpp * 4)}
    non_white = sum(1 for row in rows[::4] for i in range(0, len(row), bpp * 4)
                    if row[i : i + 3] != b"\xff\xff\xff")  # fmt: skip
    assert len(pixels) > 20, "screenshot is blank"
    assert non_white > 2000
    assert external_urls(page.read_text()) == []
    # the rendered DOM has the tables, the plots and their drawn elements, and no error
    dom, console = open_page(chromium, page, tmp_path / "profile-dom")
    assert console == [], console
    assert '<table class="breakdown">' in dom
    for bench in ("steady", "steady-jobs", "broken", "gpubench"):
        assert f"<td>{bench}</td>" in dom and f'id="bench-{bench}"' in dom
    # steady, steady-jobs, broken (its steps before the crash), gpubench
    assert dom.count('class="plot plot-throughput"') == 4
    assert 'class="plot plot-load"' in dom and 'class="plot plot-memory"' in dom
    assert 'class="plot plot-bars"' in dom and 'class="bar"' in dom and 'class="errorbar"' in dom
    assert 'class="series" data-label="gpubench.D1:gpu1"' in dom
    assert 'data-label="steady-jobs.1"' in dom
