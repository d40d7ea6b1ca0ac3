"""The Errors section quotes what explains a failure, never a warning printed before it.

torch prints ``UserWarning: Failed to initialize NumPy`` at import when numpy is missing;
on the stderr of a process that was then stopped or failed without a traceback, that
warning was the only line, and the report quoted it as the failure's detail.
"""

from __future__ import annotations

import sys
from pathlib import Path

from milabench.report import build_report, render
from milabench.report.tracebacks import explain, without_warnings

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

NUMPY = [
    "/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:368: "
    "UserWarning: Failed to initialize NumPy: No module named 'numpy' (Triggered internally "
    "at /pytorch/torch/csrc/utils/tensor_numpy.cpp:84.)",
    '  cpu = _conversion_method_template(device=torch.device("cpu"))',
]
C10 = "[W1128 21:00:00.000000000 ProcessGroupGloo.cpp:516] Warning: unable to find interface"
TRACE = [
    "Traceback (most recent call last):",
    '  File "main.py", line 3, in <module>',
    "ValueError: bad batch",
]


def test_warnings_are_dropped_with_their_source_lines():
    assert without_warnings([*NUMPY, "step 1", C10, "done"]) == ["step 1", "done"]
    deprecation = "x.py:3: torch.jit.TracerWarning: converting a tensor"
    assert without_warnings([deprecation, "    y = f(x)", "real output"]) == ["real output"]
    assert without_warnings(["RuntimeError: x", "warning: not a record"]) == [
        "RuntimeError: x",
        "warning: not a record",
    ]


def test_a_stopped_process_with_only_a_warning_has_no_excerpt():
    cause = explain(NUMPY, [], [], "interrupted", ended_by_itself=False)
    assert (cause.line, cause.excerpt) == ("interrupted", [])
    cause = explain([*NUMPY, "epoch 3"], [], [], "timed out", ended_by_itself=False)
    assert (cause.line, cause.excerpt) == ("timed out", ["epoch 3"])


def test_the_exception_or_the_last_error_line_is_the_cause():
    assert explain([*NUMPY, *TRACE], [], [], "exit code 1").line == "ValueError: bad batch"
    stderr = [*NUMPY, "loading", "fatal error: no such data set /data/x", C10]
    assert explain(stderr, [], [], "exit code 1").line == "fatal error: no such data set /data/x"
    # a stopped process: its last error line may be old news; the outcome is the cause
    assert explain(stderr, [], [], "interrupted", ended_by_itself=False).line == "interrupted"
    assert explain(NUMPY, [], [], "exit code 1").excerpt == []


def test_the_report_of_an_interrupted_benchmark_does_not_quote_the_warning(tmp_path: Path):
    d = tmp_path / "run"
    write_file(d, "a.D0", entry("a"), rc="INTERRUPTED", stderr="\n".join(NUMPY) + "\n")
    write_file(d, "b.D0", entry("b"), rc=1, stderr="\n".join([*NUMPY, *TRACE]) + "\n")
    rep = build_report([d])
    causes = {g.bench: (g.line, g.excerpt) for g in rep.errors}
    assert causes["a"] == ("interrupted", [])
    assert causes["b"][0] == "ValueError: bad batch"
    for fmt in ("text", "markdown", "json", "html"):
        assert "NumPy" not in render(rep, fmt), fmt
