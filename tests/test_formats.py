"""The one table of report formats (`milabench.formats`) and the one --format/--output
handling of the commands (`milabench.cli.common`): names, aliases, each kind's
unknown-format error, the writer."""

from __future__ import annotations

import argparse
import json

import pytest

from milabench import compare, report
from milabench.cli.common import add_render_options, write_rendered
from milabench.compare.comparison import compare_samples
from milabench.errors import UsageError
from milabench.fleet import report as fleet
from milabench.formats import Renderers
from milabench.history import outliers, series

# Each kind: its renderers, the --format choices its command offers, its error (None:
# an unknown name renders text, the CLI's choices never passing one).
KINDS = {
    "report": (report.RENDERERS, ("text", "markdown", "md", "csv", "json", "html"),
               "unknown report format 'x' (choose from text, markdown, csv, json, html)"),
    "compare": (compare.RENDERERS, ("text", "markdown", "md", "json", "html"),
                "unknown comparison format 'x' (choose from text, markdown, md, json, html)"),
    "fleet": (fleet.RENDERERS, ("text", "markdown", "md", "json", "html"),
              "unknown fleet report format 'x' (choose from text, markdown, json, html)"),
    "history-series": (series.RENDERERS, ("text", "markdown", "json"), None),
    "history-outliers": (outliers.RENDERERS, ("text", "markdown", "json"), None),
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_names_are_the_formats_each_kind_has(kind: str) -> None:
    renderers, names, _ = KINDS[kind]
    assert renderers.names == names
    assert set(renderers.load()) == set(renderers.formats)  # a function for every format


@pytest.mark.parametrize("kind", ["report", "compare", "fleet"])
def test_unknown_format_is_one_usage_error_in_the_kinds_words(kind: str) -> None:
    renderers, _, message = KINDS[kind]
    with pytest.raises(UsageError) as caught:
        renderers.render(None, "x")  # refused before anything is rendered
    assert str(caught.value) == message


def test_history_renders_text_for_an_unknown_name() -> None:
    assert series.render([], "x", series=3) == series.render([], "text", series=3)
    assert series.render([], "x", series=3) == "No regression in 3 series."
    assert outliers.render({}, "x") == outliers.render({}, "text")


def test_md_is_markdown_and_each_format_renders() -> None:
    cmp = compare_samples({"bench": [10.0, 10.1, 9.9, 10.0]},
                          {"bench": [8.0, 8.1, 7.9, 8.0]}, resamples=50)  # fmt: skip
    assert compare.render(cmp, "md") == compare.render(cmp, "markdown")
    assert compare.render(cmp, "markdown").startswith("### milabench compare")
    assert json.loads(compare.render(cmp, "json"))
    assert compare.render(cmp, "html").startswith("<!DOCTYPE html>")
    assert compare.render(cmp, "text") != compare.render(cmp, "markdown")


def test_an_alias_must_name_a_format() -> None:
    with pytest.raises(ValueError):
        Renderers("thing", ("text",), dict, aliases={"md": "markdown"})


def test_format_option_offers_the_names() -> None:
    parser = argparse.ArgumentParser(prog="x")
    add_render_options(parser, report.RENDERERS, output_help="write it to FILE")
    args = parser.parse_args(["--format", "md", "--output", "f.txt"])
    assert (args.format, args.output) == ("md", "f.txt")
    assert parser.parse_args([]).format == "text"
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "yaml"])
    bare = argparse.ArgumentParser(prog="y")
    add_render_options(bare, series.RENDERERS)  # history: --output is its site folder
    assert "--output" not in bare.format_help()


def test_writer_writes_the_file_or_standard_output(tmp_path, capsys) -> None:
    write_rendered("hello\n", None, "report")
    assert capsys.readouterr() == ("hello\n", "")
    path = tmp_path / "sub" / "r.md"
    write_rendered("# r\n", str(path), "fleet report")
    assert path.read_text(encoding="utf-8") == "# r\n"
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"created folder {path.parent} for --output\nfleet report written to {path}\n"
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is not a folder"):
        write_rendered("x", str(tmp_path / "file" / "r.md"), "comparison")
