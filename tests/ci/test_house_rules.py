"""The house rules of `milabench`'s code that a parser can check.

* Every module docstring is at most `MAX_DOCSTRING_LINES` lines of text (its closing
  quotes left out): it states the contract; the design behind it belongs in the docs.
* Every function (``def`` or ``async def``, methods and nested functions each on their
  own) is at most `MAX_FUNCTION_LINES` lines, counted from its ``def`` line to its last
  line, decorators left out.

Each failure lists every offender as ``file:line name length``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "milabench"
MAX_DOCSTRING_LINES = 15
MAX_FUNCTION_LINES = 80


def modules() -> Iterator[tuple[Path, ast.Module]]:
    """Each source file of `milabench` (sorted), parsed."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def long_docstrings(limit: int = MAX_DOCSTRING_LINES) -> list[str]:
    """``file:line <module docstring> length`` of each module docstring whose text is
    over ``limit`` lines."""
    found = []
    for path, tree in modules():
        text = ast.get_docstring(tree, clean=False)
        length = len(text.splitlines()) if text is not None else 0
        if length > limit:
            found.append(f"{where(path, tree.body[0].lineno)} <module docstring> {length}")
    return found


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:line name length`` of each function longer than ``limit`` lines."""
    found = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{where(path, node.lineno)} {node.name} {length}")
    return sorted(found)


def test_the_checks_see_the_package() -> None:
    parsed = list(modules())
    assert len(parsed) > 50, f"only {len(parsed)} modules found under {PACKAGE}"
    assert any(path.name == "__init__.py" for path, _ in parsed)


def test_module_docstrings_state_the_contract_briefly() -> None:
    found = long_docstrings()
    assert not found, (
        f"module docstrings over {MAX_DOCSTRING_LINES} lines (state the contract; move the "
        "design to the docs):\n" + "\n".join(found)
    )


def test_functions_are_short() -> None:
    found = long_functions()
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them into functions with one job "
        "each):\n" + "\n".join(found)
    )
