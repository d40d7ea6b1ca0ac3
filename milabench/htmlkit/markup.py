"""Escaping and elements: the one place text becomes HTML or SVG markup.

`el(tag, *children, **attributes)` writes one element. Children that are plain strings
(or numbers) are escaped; `Markup` (what `el` and `raw` return) is kept as it is, so a
page is built from nested calls and nothing is escaped twice or forgotten. Attribute
values are always escaped; a keyword's trailing ``_`` is dropped and ``_`` becomes
``-`` (``class_`` -> ``class``, ``data_run`` -> ``data-run``, ``stroke_width`` ->
``stroke-width``); ``None`` or ``False`` leaves the attribute out, ``True`` writes it bare;
a float is a coordinate and is written with one decimal (pass a string for full
precision).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping

# HTML elements that never have content or an end tag.
VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr"})
# SVG shapes, written self-closed (``<line .../>``) when they have no content.
SVG_SHAPES = frozenset({"line", "rect", "circle", "ellipse", "polyline", "polygon", "path"})


class Markup(str):
    """Text that is already markup: joined as it is, never escaped again."""

    __slots__ = ()


Child = str | int | float | Markup | None | Iterable["Child"]
AttrValue = str | int | float | bool | None


def escape(value: object) -> Markup:
    """`value` as markup: `Markup` unchanged, anything else as escaped text."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value)))


def raw(text: str) -> Markup:
    """`text` trusted as markup (a stylesheet, a script, an entity like ``&larr;``)."""
    return Markup(text)


def join(children: Iterable[Child], sep: str = "") -> Markup:
    """The children (escaped when not markup; nested lists flattened, None dropped)."""
    return Markup(sep.join(_flatten(children)))


def _flatten(children: Iterable[Child]) -> Iterable[str]:
    for child in children:
        if child is None:
            continue
        if isinstance(child, str | int | float):
            yield escape(child)
        else:
            yield from _flatten(child)


def _name(key: str) -> str:
    return key.rstrip("_").replace("_", "-")


def _value(value: AttrValue) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return html.escape(str(value), quote=True)


def attributes(attrs: Mapping[str, AttrValue]) -> Markup:
    """`` name="value"`` for each attribute set (keys taken as they are)."""
    parts = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        parts.append(f" {key}" if value is True else f' {key}="{_value(value)}"')
    return Markup("".join(parts))


def el(tag: str, *children: Child, attrs: Mapping[str, AttrValue] | None = None,
       **named: AttrValue) -> Markup:  # fmt: skip
    """One element: ``<tag attributes>children</tag>``.

    `named` keywords are spelled as described in the module; `attrs` takes names as they
    are (``data-*`` built at run time) and comes after them."""
    mapping = {_name(k): v for k, v in named.items()}
    if attrs:
        mapping.update(attrs)
    start = f"<{tag}{attributes(mapping)}"
    if tag in VOID:
        return Markup(start + ">")
    inner = join(children)
    if not inner and tag in SVG_SHAPES:
        return Markup(start + "/>")
    return Markup(f"{start}>{inner}</{tag}>")


def bullets(items: Iterable[Child], *, class_: str | None = None) -> Markup:
    """A ``<ul>`` with one ``<li>`` per item."""
    return el("ul", [el("li", item) for item in items], class_=class_)
