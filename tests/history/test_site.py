"""The history site opened from file:// by a real headless Chromium: no console error,
one `.point` per stored run, the change point marked, filters that hide series."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from headless import external_urls, open_page  # noqa: E402
from nightly_runs import NightlyRuns, milabench, nightly_runs  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> NightlyRuns:
    return nightly_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def site(runs: NightlyRuns, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("history-site")
    proc = milabench("history", "--url", runs.drop_url, "--output", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_pages_render_offline_without_errors(chromium: str, site: Path, tmp_path: Path):
    index_html = (site / "index.html").read_text()
    bench_html = (site / "bench-paced.html").read_text()
    for html in (index_html, bench_html):  # nothing to fetch: no external asset or link
        assert external_urls(html) == []
    dom, console = open_page(chromium, (site / "index.html").as_uri(), tmp_path / "p1")
    assert console == [], console
    assert 'data-ready="1"' in dom  # the inline script ran to its end
    assert dom.count('class="filterable series-row"') == 1
    assert 'href="bench-paced.html"' in dom
    assert re.search(r"-(9|10)\.\d% at run night20", dom)  # the open alert
    dom, console = open_page(chromium, (site / "bench-paced.html").as_uri(), tmp_path / "p2")
    assert console == [], console
    assert 'data-ready="1"' in dom
    assert dom.count('class="point"') == 30
    assert len(re.findall(r'<circle class="point"[^>]* data-run="night\d\d"', dom)) == 30
    assert dom.count('class="errorbar"') == 30  # every run has its 95% interval
    assert dom.count('class="changepoint regression"') == 1
    assert re.search(r'<line class="changepoint regression"[^>]*data-run="night20"', dom)
    assert re.search(r">-(9|10)\.\d% at run night20<", dom)


def test_filters_hide_series(chromium: str, site: Path, tmp_path: Path):
    page = site / "bench-paced.html"
    dom, console = open_page(chromium, page.as_uri() + "#tag=nightly", tmp_path / "p1")
    assert console == [] and 'data-ready="1"' in dom
    group = re.search(r'<g class="series-group filterable"[^>]*>', dom).group(0)
    assert "display: none" not in group
    dom, console = open_page(chromium, page.as_uri() + "#tag=no-such-tag", tmp_path / "p2")
    assert console == []
    group = re.search(r'<g class="series-group filterable"[^>]*>', dom).group(0)
    assert "display: none" in group
    dom, _ = open_page(chromium, (site / "index.html").as_uri() + "#machine=elsewhere",
                       tmp_path / "p3")  # fmt: skip
    row = re.search(r'<tr class="filterable series-row"[^>]*>', dom).group(0)
    assert "display: none" in row and 'id="shown-count">0<' in dom


def test_commit_axis(runs: NightlyRuns, chromium: str, tmp_path: Path):
    out = tmp_path / "site"
    proc = milabench("history", "--url", runs.drop_url, "--output", str(out), "--x", "commit")
    assert proc.returncode == 0, proc.stderr
    dom, console = open_page(chromium, (out / "bench-paced.html").as_uri(), tmp_path / "p")
    assert console == [] and dom.count('class="point"') == 30
    assert ">commit</text>" in dom
