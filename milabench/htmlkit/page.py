"""The page skeleton: doctype, head with its title and the shared stylesheet, the body,
and an optional inline script, in one self-contained file that opens offline."""

from __future__ import annotations

from milabench.htmlkit.markup import Child, el, join, raw
from milabench.htmlkit.style import STYLESHEET


def page(title: str, *body: Child, script: str | None = None) -> str:
    """A whole HTML document: `body` parts one per line, then `script` (inline
    JavaScript, run once the page is built) when given."""
    if script is not None and "</script" in script.lower():
        raise ValueError("an inline script cannot contain '</script'")
    head = el("head", el("meta", charset="utf-8"), el("title", title),
              el("style", raw(STYLESHEET)))  # fmt: skip
    lines = ["<!DOCTYPE html>", f'<html lang="en">{head}<body>']
    lines += [join([part]) for part in body]
    if script is not None:
        lines.append(el("script", raw(script)))
    lines.append("</body></html>")
    return "\n".join(line for line in lines if line) + "\n"
