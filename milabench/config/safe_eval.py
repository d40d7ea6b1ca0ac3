"""A small expression evaluator for configuration strings, with no `eval`.

The expression is parsed with `ast` and walked by hand: only the node types listed here
are accepted, names come from an explicit table, and calls only reach the functions given
by the caller. Suite and system files may come from anywhere (a shared cluster config, a
pull request), so nothing in them may reach Python's builtins or attributes.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any


class UnsafeExpression(ValueError):
    """The expression uses something outside the allowed subset, or cannot be evaluated."""


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
MAX_EXPONENT = 256
MAX_LENGTH = 2000
# Bounds on what one operation may produce, checked before computing it: a sequence or
# string of more items, or an int of more bits, is refused (``[0]*10**12``).
MAX_ITEMS = 10_000
MAX_INT_BITS = 4096


def evaluate(
    text: str,
    names: Mapping[str, Any],
    functions: Mapping[str, Callable[..., Any]] | None = None,
    *,
    allow_compare: bool = True,
) -> Any:
    """Value of the expression `text` over `names`, calling only `functions`."""
    if len(text) > MAX_LENGTH:
        raise UnsafeExpression("expression too long")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as err:
        raise UnsafeExpression(f"not a valid expression: {text!r}") from err
    walker = _Walker(names, functions or {}, allow_compare)
    try:
        return walker.visit(tree.body)
    except UnsafeExpression:
        raise
    except (
        ArithmeticError,
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        RecursionError,
        MemoryError,
    ) as e:
        raise UnsafeExpression(f"cannot evaluate {text!r}: {type(e).__name__}: {e}") from e


def _size(value: Any) -> int:
    """How big ``value`` is for the bounds: items of a sequence, bits of an int."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return value.bit_length()
    if isinstance(value, str | list | tuple | dict | bytes):
        return len(value)
    return 1


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse, before computing it, a result over MAX_ITEMS items or MAX_INT_BITS bits."""
    seqs = (str, list, tuple, bytes)
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, seqs) and isinstance(count, int):
                if len(seq) * max(count, 0) > MAX_ITEMS:
                    raise UnsafeExpression(f"result would have more than {MAX_ITEMS} items")
        if isinstance(left, int) and isinstance(right, int):
            if _size(left) + _size(right) > MAX_INT_BITS:
                raise UnsafeExpression(f"result would exceed {MAX_INT_BITS} bits")
    elif isinstance(op, ast.Add):
        if isinstance(left, seqs) and isinstance(right, seqs):
            if len(left) + len(right) > MAX_ITEMS:
                raise UnsafeExpression(f"result would have more than {MAX_ITEMS} items")


class _Walker:
    def __init__(self, names, functions, allow_compare: bool):
        self.names = names
        self.functions = functions
        self.allow_compare = allow_compare

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise UnsafeExpression(f"'{type(node).__name__}' is not allowed here")
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, bool | int | float | str) or node.value is None:
            return node.value
        raise UnsafeExpression(f"constant {node.value!r} is not allowed")

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id in self.names:
            return self.names[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise UnsafeExpression(f"unknown name '{node.id}'")

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise UnsafeExpression(f"operator '{type(node.op).__name__}' is not allowed")
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow) and (
            not isinstance(right, int | float) or abs(right) > MAX_EXPONENT
        ):
            raise UnsafeExpression(f"exponent {right!r} is too large")
        if (
            isinstance(node.op, ast.Pow)
            and isinstance(left, int)
            and (left.bit_length() * abs(right) > MAX_INT_BITS)
        ):
            raise UnsafeExpression("power result is too large")
        if isinstance(node.op, ast.Mult) and (isinstance(left, str) or isinstance(right, str)):
            raise UnsafeExpression("string repetition is not allowed")
        if isinstance(node.op, ast.Mod) and isinstance(left, str | bytes):
            raise UnsafeExpression("string formatting is not allowed")
        _check_size(node.op, left, right)
        return op(left, right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise UnsafeExpression(f"operator '{type(node.op).__name__}' is not allowed")
        return op(self.visit(node.operand))

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        if not self.allow_compare:
            raise UnsafeExpression("boolean operators are not allowed here")
        if isinstance(node.op, ast.And):
            result: Any = True
            for value in node.values:
                result = self.visit(value)
                if not result:
                    return result
            return result
        result = False
        for value in node.values:
            result = self.visit(value)
            if result:
                return result
        return result

    def visit_Compare(self, node: ast.Compare) -> Any:
        if not self.allow_compare:
            raise UnsafeExpression("comparisons are not allowed here")
        left = self.visit(node.left)
        for op_node, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.visit(comparator)
            if not _COMPARE[type(op_node)](left, right):
                return False
            left = right
        return True

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        value = self.visit(node.value)
        if isinstance(node.slice, ast.Slice):
            raise UnsafeExpression("slices are not allowed")
        key = self.visit(node.slice)
        if not isinstance(value, dict | list | tuple | str):
            raise UnsafeExpression(f"cannot index a {type(value).__name__}")
        return value[key]

    def visit_List(self, node: ast.List) -> Any:
        return [self.visit(e) for e in node.elts]

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.visit(e) for e in node.elts)

    def visit_Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in self.functions:
            what = node.func.id if isinstance(node.func, ast.Name) else "this"
            raise UnsafeExpression(f"calling '{what}' is not allowed")
        if node.keywords:
            raise UnsafeExpression("keyword arguments are not allowed")
        args = [self.visit(a) for a in node.args]
        return self.functions[node.func.id](*args)
