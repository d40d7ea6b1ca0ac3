"""Turning an entry's `argv` (a list or a mapping) into a command-line list (docs/config.md "Arguments").

A mapping is the form that inheritance can edit: a child overrides one option, or drops it
with `null`. `false` is refused rather than guessed: it could mean "drop the flag" or
"pass the text false", and silently picking one hides configuration mistakes.
"""

from __future__ import annotations

from typing import Any

from milabench.errors import ConfigError


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def argv_list(argv: Any, *, file: object = None, name: str | None = None) -> list[str]:
    """An entry's argv as a list of strings: positionals first, then options, then `--`.

    `file` and `name` (the file that wrote argv, the entry) only serve error messages.
    """
    if argv is None:
        return []
    if isinstance(argv, list):
        return [_text(a) for a in argv]
    if not isinstance(argv, dict):
        raise ConfigError.at(file, name, "argv", "expected a list or a mapping")
    positionals: list[str] = []
    options: list[str] = []
    tail: list[str] = []
    for key, value in argv.items():
        key = str(key)
        if key == "--":
            if value is None:
                continue
            tail.extend(_text(v) for v in (value if isinstance(value, list) else [value]))
        elif value is None:
            continue
        elif value is False:
            raise ConfigError.at(
                file, name, f"argv.{key}", "false is not allowed (use null to remove an option)"
            )
        elif value is True:
            (options if key.startswith("-") else positionals).append(key)
        elif isinstance(value, list):
            options.extend([key, ",".join(_text(v) for v in value)])
        elif isinstance(value, dict):
            raise ConfigError.at(file, name, f"argv.{key}", "a mapping is not an argument value")
        else:
            options.extend([key, _text(value)])
    return positionals + options + tail
