"""The one line that explains a failed install step (uv, pip, validation)."""

from __future__ import annotations

from milabench.envs.steps import error_line


def test_uv_plain_output():
    lines = [
        "Using Python 3.11.7 environment at: /b/venv/g",
        "error: No solution found when resolving dependencies",
        "  cause: Because nope was not found in the package registry and you require nope,"
        " we can conclude that your requirements are unsatisfiable.",
    ]
    assert error_line(lines) == (
        "error: No solution found when resolving dependencies: Because nope was not found in"
        " the package registry and you require nope, we can conclude that your requirements"
        " are unsatisfiable."
    )


def test_uv_terminal_output():
    lines = [
        "  × No solution found when resolving dependencies:",
        "  ╰─▶ Because nope was not found in the package registry and you require nope.",
    ]
    assert error_line(lines) == (
        "error: No solution found when resolving dependencies: Because nope was not found in"
        " the package registry and you require nope."
    )


def test_pip_output():
    lines = [
        "Looking in links: /w",
        "ERROR: Could not find a version that satisfies the requirement nope (from versions: none)",
        "ERROR: No matching distribution found for nope",
    ]
    assert error_line(lines).startswith("ERROR: Could not find a version")


def test_validation_and_fallback():
    lines = [
        "noise",
        "validation: import x failed: ModuleNotFoundError: No module named 'x'",
        "more",
    ]
    assert error_line(lines).startswith("validation: import x failed")
    assert error_line(["", "something broke", "  "]) == "something broke"
    assert error_line([]) == ""
    assert len(error_line(["ERROR: " + "x" * 1000])) == 400
