"""`milabench compare A A`: a run compared with itself is said, never compared silently."""

from __future__ import annotations

import sys
from pathlib import Path

from clirun import milabench

sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
from synth import entry, write_file  # noqa: E402


def test_comparing_a_run_with_itself_is_a_warning(tmp_path: Path):
    run = tmp_path / "runs" / "one"
    write_file(run, "a.D0", entry("a"), rates=[10.0, 10.5, 9.8, 10.1, 10.2, 9.9])
    other = tmp_path / "runs" / "two"
    write_file(other, "a.D0", entry("a"), rates=[10.0, 10.5, 9.8, 10.1, 10.2, 9.9])
    proc = milabench("compare", str(run), str(run))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"warning: A and B are the same run folder ({run}): a run compared with itself shows "
        "no difference; give two different runs"
    ) in proc.stderr
    # the same folder spelled another way is still the same folder
    proc = milabench("compare", str(run), str(tmp_path / "runs" / ".." / "runs" / "one"))
    assert "the same run folder" in proc.stderr
    proc = milabench("compare", str(run), str(other))
    assert "same run folder" not in proc.stderr
    proc = milabench("compare", "--baseline", str(run), f"{run},{other}")
    assert f"A and B share the same run folder ({run})" in proc.stderr
