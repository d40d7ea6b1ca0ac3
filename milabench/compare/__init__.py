"""Comparisons: is B different from A beyond the noise, and is it a regression?

* `comparison`: thresholds, one `BenchComparison` per benchmark, the `Comparison` verdict
  and its text, Markdown and JSON renderings;
* `significance`: the statistics (Mann-Whitney U, bootstrap of the ratio of medians);
* `sides`: what a side of a comparison is (run folders, pooled, or a stored run);
* `abtest`: control and treatment run interleaved, then confirmation rounds;
* `render_html`: the self-contained HTML page.

`render(cmp, fmt)` dispatches through `RENDERERS` (`milabench.formats`: the formats every
kind of report shares). Built on the run report (samples come from
`milabench.report.build_report`) and the results store (`milabench.history.store`, for a
stored baseline).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from milabench.compare.comparison import Comparison
from milabench.formats import Renderers


def _renderers() -> Mapping[str, Callable[[Comparison], str]]:
    from milabench.compare.comparison import render_comparison
    from milabench.compare.render_html import render_html

    return {
        "text": partial(render_comparison, fmt="text"),
        "markdown": partial(render_comparison, fmt="markdown"),
        "json": partial(render_comparison, fmt="json"),
        "html": render_html,
    }


RENDERERS: Renderers[Comparison] = Renderers(
    "comparison",
    ("text", "markdown", "json", "html"),
    _renderers,
    aliases={"md": "markdown"},
    list_aliases=True,
)
FORMATS = RENDERERS.names


def render(cmp: Comparison, fmt: str = "text") -> str:
    """The comparison as text, markdown, json or one HTML page."""
    return RENDERERS.render(cmp, fmt)


__all__ = ["FORMATS", "RENDERERS", "Comparison", "render"]
