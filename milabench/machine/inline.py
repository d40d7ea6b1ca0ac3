"""Programs sent to a node as one ``python -c`` text, with the modules they import.

A probe runs on a node before anything is copied there, with whatever Python the node
has, so the modules it imports travel inside its text. `inline_program(main, modules)`
returns one program that serves each named module from the source this process would
import (read through `importlib`, so the node runs exactly the code tested here, never a
second copy of it) and then runs ``main`` as ``__main__``. The modules are served by an
import hook placed first, so a node's own, possibly older, copy of them is not used.

Sources travel zlib-compressed and base64-encoded: a command sent over SSH becomes one
argument of the node's shell, which Linux caps at `MAX_ARGUMENT` bytes. The program needs
the standard library only.
"""

from __future__ import annotations

import ast
import base64
import importlib.util
import zlib
from collections.abc import Sequence
from pathlib import Path

#: Linux's limit on one argument of a command (MAX_ARG_STRLEN, 32 pages of 4 KiB).
MAX_ARGUMENT = 128 * 1024

_BOOT = """\
import base64, importlib.abc, importlib.util, sys, zlib
_SOURCES = {sources}


def _text(data):
    return zlib.decompress(base64.b64decode(data)).decode("utf-8")


class _InlineModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in _SOURCES:
            return importlib.util.spec_from_loader(name, self, origin="<inline " + name + ">")
        if any(m.startswith(name + ".") for m in _SOURCES):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def exec_module(self, module):
        data = _SOURCES.get(module.__name__)
        if data is not None:
            code = compile(_text(data), module.__spec__.origin, "exec", dont_inherit=True)
            exec(code, module.__dict__)


sys.meta_path.insert(0, _InlineModules())
exec(compile(_text({main}), {filename}, "exec", dont_inherit=True))
"""


def module_source(name: str) -> str:
    """The text of the module ``name`` as this process would import it."""
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec is not None else None
    if origin is None or not origin.endswith(".py"):
        raise ImportError(f"{name}: no Python source to send to a node (found {origin!r})")
    return Path(origin).read_text(encoding="utf-8")


def _packed(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def inline_program(main: str, modules: Sequence[str], *, filename: str = "<probe>") -> str:
    """One program: ``main`` (source text, run as ``__main__``) with ``modules`` (dotted
    names, importable here) importable by their names, their parent packages holding
    nothing else."""
    sources = {name: _packed(module_source(name)) for name in modules}
    return _BOOT.format(sources=repr(sources), main=repr(_packed(main)), filename=repr(filename))


def unpacked_sources(program: str) -> dict[str, str]:
    """The modules a program of `inline_program` carries, as text (for tests and for
    reading what a node was sent)."""
    start = program.index("_SOURCES = ") + len("_SOURCES = ")
    literal = program[start : program.index("\n", start)]
    packed = ast.literal_eval(literal)
    return {name: zlib.decompress(base64.b64decode(data)).decode() for name, data in packed.items()}
