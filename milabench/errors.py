"""The small family of user-facing errors.

A user error (bad YAML, unknown entry, unreachable node, missing environment) is one
sentence naming the file/entry/key or node; the command line prints it without a
traceback and exits with the error's code. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class MilabenchError(Exception):
    """Base of every error meant for a person rather than a developer."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class ConfigError(MilabenchError):
    """A suite or system file is wrong. Exit code 2, as for usage errors.

    Build messages with `ConfigError.at(file, entry, key, what)` so that every message has
    the same shape: ``config/standard.yaml: resnet50.inherits: no entry named '_x'``.
    """

    exit_code = 2

    @classmethod
    def at(
        cls,
        file: object | None,
        entry: str | None,
        key: str | None,
        what: str,
    ) -> ConfigError:
        where = ".".join(str(p) for p in (entry, key) if p not in (None, ""))
        prefix = f"{file}: " if file else ""
        if where:
            return cls(f"{prefix}{where}: {what}")
        return cls(f"{prefix}{what}")


class UsageError(MilabenchError):
    """The command line itself is wrong (unknown benchmark name, bad option value)."""

    exit_code = 2


class NotAvailableYet(MilabenchError):
    """A command whose capability is not built in this version."""

    exit_code = 2


class EnvironmentMissing(MilabenchError):
    """A benchmark's virtual environment is absent or not installed successfully."""

    exit_code = 1


class NodeError(MilabenchError):
    """A node of the system cannot be reached or fails a pre-flight check."""

    exit_code = 1
