"""The comparison page (`compare --format html`) drawn by headless Chromium: no console
error, offline, one table row and one forest-plot row per benchmark, the regression
marked, names escaped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from headless import external_urls, open_page

from milabench.compare import render
from milabench.compare.comparison import compare_samples

pytestmark = pytest.mark.slow


def _samples(rng: random.Random, center: float) -> list[float]:
    return [center + rng.gauss(0, 1) for _ in range(30)]


def test_comparison_page_in_chromium(chromium: str, tmp_path: Path):
    rng = random.Random(0)
    names = ("same", "slower", "faster", "fp16<amp>")
    a = {name: _samples(rng, 100) for name in names}
    a["gone"] = _samples(rng, 50)
    b = {"same": _samples(rng, 100), "slower": _samples(rng, 80), "faster": _samples(rng, 120),
         "fp16<amp>": _samples(rng, 100)}  # fmt: skip
    cmp = compare_samples(a, b, a_label="runs/<a>", b_label="runs/b&c", resamples=200)
    html = render(cmp, "html")
    assert external_urls(html) == [] and "<script" not in html
    page = tmp_path / "cmp.html"
    page.write_text(html, encoding="utf-8")
    dom, console = open_page(chromium, page, tmp_path / "profile")
    assert console == [], console
    assert "REGRESSION: slower, gone (exit code 1)" in dom
    assert "<code>runs/&lt;a&gt;</code>" in dom and "<code>runs/b&amp;c</code>" in dom
    table = dom[dom.index('<table class="comparison">') :].split("</table>")[0]
    assert table.count("<tr") == 1 + 5
    assert '<tr class="fail"><td>slower</td>' in table
    assert '<tr class="pass"><td>faster</td>' in table
    assert "<td>fp16&lt;amp&gt;</td>" in table
    assert 'class="plot plot-ratios"' in dom
    assert dom.count('class="ratio"') == 4  # "gone" has no ratio to draw
    assert dom.count('class="interval"') == 4 and 'class="one"' in dom
