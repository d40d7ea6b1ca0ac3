"""Results: run folders -> statistics -> score -> validation verdicts -> renderings.

Contract used by `milabench run` and the commands:
``build_report(run_dirs, *, entries=None, validations=None) -> Report`` and
``render(report, fmt) -> str`` for fmt in text, markdown (md), csv, json, html
(`RENDERERS`, a `milabench.formats.Renderers`: the formats every kind of report shares).
Pure functions of the run folders: a report can always be rebuilt later.
``report.verdict``/``report.exit_code``/``report.verdict_reasons`` come from one call of
`milabench.rundata.outcome.run_verdict` (the one success rule), so what a report prints
and what the command exits with always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from milabench.formats import Renderers
from milabench.report.build import Report, build_report


def _renderers() -> Mapping[str, Callable[[Report], str]]:
    from milabench.report import render_html, render_tables

    return {
        "text": render_tables.render_text,
        "markdown": render_tables.render_markdown,
        "csv": render_tables.render_csv,
        "json": render_tables.render_json,
        "html": render_html.render_html,
    }


RENDERERS: Renderers[Report] = Renderers(
    "report", ("text", "markdown", "csv", "json", "html"), _renderers, aliases={"md": "markdown"}
)
FORMATS = RENDERERS.formats


def render(report: Report, fmt: str = "text") -> str:
    """The report as text, markdown, csv, json or html."""
    return RENDERERS.render(report, fmt)


__all__ = ["FORMATS", "RENDERERS", "Report", "build_report", "render"]
