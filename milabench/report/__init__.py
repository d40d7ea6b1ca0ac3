"""Results: run folders -> statistics -> score -> validation verdicts -> renderings.

Contract used by `milabench run` and the commands:
``build_report(run_dirs, *, entries=None, validations=None) -> Report`` and
``render(report, fmt) -> str`` for fmt in text, markdown, csv, json, html.
Pure functions of the run folders: a report can always be rebuilt later.
``report.verdict``/``report.exit_code``/``report.verdict_reasons`` come from one call of
`milabench.rundata.outcome.run_verdict` (the one success rule), so what a report prints
and what the command exits with always agree.
"""

from __future__ import annotations

from milabench.report.build import Report, build_report

FORMATS = ("text", "markdown", "csv", "json", "html")


def render(report: Report, fmt: str = "text") -> str:
    """The report as text, markdown, csv, json or html."""
    from milabench.report import render_html, render_tables

    renderers = {
        "text": render_tables.render_text,
        "markdown": render_tables.render_markdown,
        "md": render_tables.render_markdown,
        "csv": render_tables.render_csv,
        "json": render_tables.render_json,
        "html": render_html.render_html,
    }
    if fmt not in renderers:
        from milabench.errors import UsageError

        raise UsageError(f"unknown report format '{fmt}' (choose from {', '.join(FORMATS)})")
    return renderers[fmt](report)


__all__ = ["FORMATS", "Report", "build_report", "render"]
