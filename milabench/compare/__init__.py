"""Comparisons: is B different from A beyond the noise, and is it a regression?

* `comparison`: thresholds, one `BenchComparison` per benchmark, the `Comparison` verdict
  and its text, Markdown and JSON renderings;
* `significance`: the statistics (Mann-Whitney U, bootstrap of the ratio of medians);
* `sides`: what a side of a comparison is (run folders, pooled, or a stored run);
* `abtest`: control and treatment run interleaved, then confirmation rounds;
* `render_html`: the self-contained HTML page.

Built on the run report (samples come from `milabench.report.build_report`) and the
results store (`milabench.history.store`, for a stored baseline).
"""

from __future__ import annotations

from milabench.compare.comparison import Comparison

FORMATS = ("text", "markdown", "md", "json", "html")


def render(cmp: Comparison, fmt: str = "text") -> str:
    """The comparison as text, markdown, json or one HTML page."""
    if fmt == "html":
        from milabench.compare.render_html import render_html

        return render_html(cmp)
    if fmt not in FORMATS:
        from milabench.errors import UsageError

        raise UsageError(f"unknown comparison format '{fmt}' (choose from {', '.join(FORMATS)})")
    from milabench.compare.comparison import render_comparison

    return render_comparison(cmp, fmt)


__all__ = ["FORMATS", "Comparison", "render"]
