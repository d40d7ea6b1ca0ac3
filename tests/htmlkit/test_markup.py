"""Escaping and elements (milabench/htmlkit/markup.py): text is escaped exactly once."""

from __future__ import annotations

from html.parser import HTMLParser

from milabench.htmlkit.markup import Markup, attributes, bullets, el, escape, join, raw


class _Text(HTMLParser):
    """The text and attributes a browser would read back."""

    def __init__(self):
        super().__init__()
        self.text: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)


def _read(markup: str) -> _Text:
    parser = _Text()
    parser.feed(markup)
    parser.close()
    return parser


def test_text_and_attributes_are_escaped_and_read_back():
    nasty = """<script>alert("x")</script> & 'q'"""
    out = el("p", nasty, title=nasty)
    assert "<script>" not in out
    parsed = _read(out)
    assert "".join(parsed.text) == nasty
    assert parsed.attrs == [("title", nasty)]


def test_markup_is_never_escaped_twice():
    inner = el("b", "a < b")
    assert el("p", inner) == "<p><b>a &lt; b</b></p>"
    assert escape(inner) is inner
    assert escape("a&b") == "a&amp;b" and isinstance(escape("x"), Markup)
    assert el("p", raw("&larr; back")) == "<p>&larr; back</p>"
    # str methods return plain str: joining must go through `join`
    assert join([inner, "&"], " ") == "<b>a &lt; b</b> &amp;"


def test_attribute_names_and_values():
    out = el("circle", class_="point", cx=1.26, r=3, stroke_width="1.5", data_run="n1",
             checked=True, hidden=False, title=None)  # fmt: skip
    assert out == '<circle class="point" cx="1.3" r="3" stroke-width="1.5" data-run="n1" checked/>'
    assert attributes({"data-x": 'a"b', "viewBox": "0 0 1 1"}) == (
        ' data-x="a&quot;b" viewBox="0 0 1 1"'
    )
    # `attrs` takes names as they are, after the keywords
    assert el("g", attrs={"data-key": "a / b"}, class_="s") == '<g class="s" data-key="a / b"></g>'


def test_void_shapes_and_children():
    assert el("br") == "<br>" and el("meta", charset="utf-8") == '<meta charset="utf-8">'
    assert el("line", x1=0) == '<line x1="0"/>'
    assert el("circle", el("title", "tip")) == "<circle><title>tip</title></circle>"
    assert el("td") == "<td></td>"
    assert el("p", ["a", None, ["b", 3]], 1.5) == "<p>ab31.5</p>"  # text numbers stay as given
    assert bullets(["x<", el("i", "y")], class_="notes") == (
        '<ul class="notes"><li>x&lt;</li><li><i>y</i></li></ul>'
    )
