"""`milabench install` with real environments, real uv and pip, offline wheels."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from milabench.envs.helperlib import helper_sources, package_hash, site_packages
from milabench.envs.marker import MARKER_NAME


def venv(base: Path, group: str) -> Path:
    return base / "venv" / group


def python_in(base: Path, group: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv(base, group) / "bin" / "python"), "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def summary_row(stdout: str, group: str) -> str:
    rows = [ln for ln in stdout.splitlines() if ln.split()[:1] == [group]]
    assert rows, stdout
    return rows[0]


def install_logs(base: Path) -> list[Path]:
    return sorted((base / "runs").glob("install.*"))


def test_install_failures_do_not_stop_other_groups(mb):
    proc = mb("install")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "install failed for group(s): gamma, delta" in proc.stderr

    # good groups: installed, marked, their packages importable
    assert "installed" in summary_row(proc.stdout, "alpha")
    assert "installed" in summary_row(proc.stdout, "beta")
    for group in ("alpha", "beta"):
        marker = json.loads((venv(mb.base, group) / MARKER_NAME).read_text())
        assert marker["backend"] == "uv"
    assert python_in(mb.base, "alpha", "import mbtiny; print(mbtiny.__version__)").stdout == "1.0\n"
    assert python_in(mb.base, "beta", "import mbuser, mbdep").returncode == 0

    # broken requirement: failed with uv's error line naming the package, not marked
    row = summary_row(proc.stdout, "gamma")
    assert "failed" in row and "nonexistent-pkg-xyz" in row and "install:" in row
    assert not (venv(mb.base, "gamma") / MARKER_NAME).exists()

    # key import that fails: failed at validation with the import error, not marked
    row = summary_row(proc.stdout, "delta")
    assert "failed" in row
    assert "validate: validation: import module_that_is_not_installed failed" in row
    assert not (venv(mb.base, "delta") / MARKER_NAME).exists()

    # output streamed into runs/install.<time>/<group>.{data,stdout,stderr}
    (logs,) = install_logs(mb.base)
    assert "nonexistent-pkg-xyz" in (logs / "gamma.stderr").read_text()
    events = [json.loads(ln) for ln in (logs / "alpha.data").read_text().splitlines()]
    assert [e["event"] for e in events].count("start") == 3  # create, install, validate
    assert all(e["data"]["return_code"] == 0 for e in events if e["event"] == "end")
    assert f'"prefix": "{venv(mb.base, "alpha")}"' in (logs / "alpha.stdout").read_text()


def test_benchkit_importable_without_orchestrator_dependencies(mb):
    assert mb("install", "--select", "alpha").returncode == 0
    proc = python_in(
        mb.base,
        "alpha",
        (
            "import benchkit.channel, benchshared.datasets, importlib.util as u\n"
            "print([m for m in ('milabench', 'omegaconf', 'yaml', 'asyncssh') if u.find_spec(m)])"
        ),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_fresh_environment_has_this_checkouts_benchshared(mb):
    """A new environment gets a copy of benchshared beside benchkit: every module imports
    there with the standard library alone, the install's validation imports it, and the
    marker records the content the copy was made from."""
    assert mb("install", "--select", "alpha").returncode == 0
    proc = python_in(
        mb.base,
        "alpha",
        (
            "import sys, benchshared, benchshared.datasets, benchshared.vision, benchshared.vit\n"
            "print(benchshared.__file__)\n"
            "print(sorted(m for m in ('torch', 'PIL', 'numpy', 'milabench') if m in sys.modules))"
        ),
    )
    assert proc.returncode == 0, proc.stderr
    where, heavy = proc.stdout.splitlines()
    copy = site_packages(venv(mb.base, "alpha")) / "benchshared"
    assert Path(where) == copy / "__init__.py"
    assert heavy == "[]"
    source = helper_sources()["benchshared"]
    assert source.parts[-3:] == ("benchmarks", "_shared", "benchshared")
    assert package_hash(copy) == package_hash(source)
    marker = json.loads((venv(mb.base, "alpha") / MARKER_NAME).read_text())
    assert marker["inputs"]["benchshared"] == package_hash(source)
    assert marker["inputs"]["benchkit"] == package_hash(helper_sources()["benchkit"])
    (logs,) = install_logs(mb.base)
    checked = [ln for ln in (logs / "alpha.stdout").read_text().splitlines() if "validation:" in ln]
    assert checked and '"benchshared": ""' in checked[-1], checked


@pytest.mark.quiet  # bounds the time of a no-op command
def test_repeat_install_is_a_fast_no_op(mb):
    assert mb("install", "--select", "alpha,beta").returncode == 0
    logs_before = install_logs(mb.base)
    marker_before = (venv(mb.base, "alpha") / MARKER_NAME).read_text()
    elapsed, proc = mb.timed("install", "--select", "alpha,beta")
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in summary_row(proc.stdout, "alpha")
    assert "up to date" in summary_row(proc.stdout, "beta")
    assert elapsed < 2.0
    assert install_logs(mb.base) == logs_before  # no process started, no log folder
    assert (venv(mb.base, "alpha") / MARKER_NAME).read_text() == marker_before


def test_the_same_files_in_another_folder_are_up_to_date(mb, workdir, milabench_runner):
    """The inputs are the files' contents, not their paths: the suite, its benchmark
    folders and the constraints copied elsewhere (a moved clone; the code `milabench
    fleet` pushes to a new folder of a node on every run) find the environment made."""
    assert mb("install", "--select", "alpha").returncode == 0
    moved = workdir / "moved"
    shutil.copytree(workdir / "suite", moved / "suite")
    shutil.copytree(workdir / "constraints", moved / "constraints")
    env = {**mb.env, "MILABENCH_INSTALL_CONSTRAINTS_DIR": str(moved / "constraints")}
    again = milabench_runner(moved / "suite" / "suite.yaml", mb.base, env)
    proc = again("install", "--select", "alpha")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "up to date" in summary_row(proc.stdout, "alpha")
    # ...while a changed content in the new folder is still seen
    (moved / "constraints" / "cpu.txt").write_text("# test constraints\nmbtiny<2\n")
    proc = again("install", "--select", "alpha")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed" in summary_row(proc.stdout, "alpha")
    assert "changed: constraints" in proc.stdout


def test_changed_requirements_reinstall(mb):
    assert mb("install", "--select", "alpha").returncode == 0
    req = mb.config.parent / "tiny-a" / "requirements.cpu.txt"
    req.write_text("mbtiny==2.0\n")
    proc = mb("install", "--select", "alpha")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed" in summary_row(proc.stdout, "alpha")
    assert python_in(mb.base, "alpha", "import mbtiny; print(mbtiny.__version__)").stdout == "2.0\n"


def test_failed_reinstall_removes_the_stale_marker(mb):
    assert mb("install", "--select", "alpha").returncode == 0
    assert (venv(mb.base, "alpha") / MARKER_NAME).exists()
    (mb.config.parent / "tiny-a" / "requirements.cpu.txt").write_text("mbtiny==9.9\n")
    proc = mb("install", "--select", "alpha")
    assert proc.returncode == 1
    assert "mbtiny" in summary_row(proc.stdout, "alpha")
    assert not (venv(mb.base, "alpha") / MARKER_NAME).exists()
    # ... and the next install retries instead of saying "up to date"
    (mb.config.parent / "tiny-a" / "requirements.cpu.txt").write_text("mbtiny==1.0\n")
    proc = mb("install", "--select", "alpha")
    assert "installed" in summary_row(proc.stdout, "alpha")


def test_force_recreates_the_environment(mb):
    assert mb("install", "--select", "alpha").returncode == 0
    sentinel = venv(mb.base, "alpha") / "lib" / "sentinel.txt"
    sentinel.write_text("left by a previous environment")
    proc = mb("install", "--select", "alpha", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "installed" in summary_row(proc.stdout, "alpha")
    assert not sentinel.exists()
    assert (venv(mb.base, "alpha") / MARKER_NAME).exists()
    # the old environment was moved aside and deleted before the command returned
    assert not list((mb.base / "venv").glob("alpha.trash-*"))


def test_entry_pip_constraints_and_args(mb):
    mb.config = mb.config.parent / "extra.yaml"
    proc = mb("install", "--select", "loose,nodeps")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # unpinned variant: requirements.in with the entry's constraint mbtiny<2
    out = python_in(mb.base, "loose", "import mbtiny; print(mbtiny.__version__)").stdout
    assert out == "1.0\n"
    # pip.args --no-deps: mbuser without its dependency
    proc = python_in(
        mb.base,
        "nodeps",
        "import importlib.util as u; "
        "print(bool(u.find_spec('mbuser')), bool(u.find_spec('mbdep')))",
    )
    assert proc.stdout == "True False\n"


def test_use_current_env_creates_nothing(mb):
    mb.config = mb.config.parent / "extra.yaml"
    proc = mb("install", "--select", "current", "--use-current-env")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checked" in summary_row(proc.stdout, "current")
    assert not (mb.base / "venv").exists()
    proc = mb("install", "--select", "current", "--into-current-env")
    assert proc.returncode == 2 and "--use-current-env" in proc.stderr


def test_unknown_backend_is_a_usage_error(mb):
    mb.env["MILABENCH_INSTALL_BACKEND"] = "conda"
    proc = mb("install", "--select", "alpha")
    assert proc.returncode == 2
    assert "install.backend" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_pip_backend(mb):
    proc = mb("install", "--select", "alpha,gamma", "--backend", "pip")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "installed" in summary_row(proc.stdout, "alpha")
    row = summary_row(proc.stdout, "gamma")
    assert "ERROR:" in row and "nonexistent-pkg-xyz" in row
    marker = json.loads((venv(mb.base, "alpha") / MARKER_NAME).read_text())
    assert marker["backend"] == "pip"
    assert python_in(mb.base, "alpha", "import pip, mbtiny").returncode == 0  # virtualenv seeds pip
    # the back-end is not an input: the uv path now finds the group up to date
    proc = mb("install", "--select", "alpha")
    assert "up to date" in summary_row(proc.stdout, "alpha")


def test_disagreeing_pins_suggest_pin(mb):
    mb.config = mb.config.parent / "extra.yaml"
    proc = mb("install", "--select", "clash")
    assert proc.returncode == 1
    row = summary_row(proc.stdout, "clash")
    assert "mbdep==" in row and "'milabench pin' compiles them together" in row
    proc = mb("pin", "--select", "clash")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = mb("install", "--select", "clash")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def active_python(folder: Path, env: dict[str, str], extra: tuple[Path, ...] = ()) -> str:
    """A venv at ``folder`` that sees the test environment's packages (and the folders
    ``extra``); its interpreter, to run milabench from as the active environment.

    It sees them through a ``.pth`` file, not the machine's global Python through
    ``--system-site-packages``: what a global Python holds differs between machines."""
    subprocess.run(
        [sys.executable, "-m", "uv", "venv", "-q", "--python", sys.executable, str(folder)],
        check=True,
        env=env,
    )
    seen = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site,) = (folder / "lib").glob("python3.*/site-packages")
    # as --system-site-packages does: addsitedir also runs the folders' own .pth files
    lines = [f"import site; site.addsitedir({p!r})\n" for p in sorted(seen)]
    lines += [f"{path}\n" for path in extra]
    (site / "test-environment.pth").write_text("".join(lines))
    return str(folder / "bin" / "python")


def test_into_current_env_installs_into_the_active_interpreter(mb, tmp_path):
    """Run milabench from a venv that sees other packages; install goes into it."""
    python = active_python(tmp_path / "active", mb.env)
    argv = [
        python,
        "-m",
        "milabench",
        "install",
        "--config",
        str(mb.config.parent / "extra.yaml"),
        "--base",
        str(mb.base),
        "--select",
        "intocurrent",
        "--use-current-env",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=mb.env, timeout=120)
    assert proc.returncode == 1  # only checked: mbtiny is not there
    assert "import mbtiny failed" in proc.stdout
    proc = subprocess.run(
        [*argv, "--into-current-env"], capture_output=True, text=True, env=mb.env, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed" in summary_row(proc.stdout, "intocurrent")
    out = subprocess.run(
        [python, "-c", "import mbtiny; print(mbtiny.__version__)"], capture_output=True, text=True
    ).stdout
    assert out == "2.0\n"
    assert not (mb.base / "venv").exists()


# Group -> what importing the module its benchmark requires does. `broken` fails first
# and `slow2` ends before `slow1`: the completion order is not the suite order.
SLEEP = 2.0
SLOW_IMPORTS = {
    "slow1": f"import time\ntime.sleep({SLEEP})\n",
    "broken": f"import time\ntime.sleep({SLEEP * 0.6})\nraise ImportError('mbbroken needs a GPU')\n",
    "slow2": f"import time\ntime.sleep({SLEEP * 0.8})\n",
}


def step_times(logs: Path, group: str) -> tuple[float, float]:
    """(start, end) of a group's one step, from its ``.data`` run file."""
    events = [json.loads(ln) for ln in (logs / f"{group}.data").read_text().splitlines()]
    (start,) = [e["data"]["time"] for e in events if e["event"] == "start"]
    (end,) = [e["data"]["time"] for e in events if e["event"] == "end"]
    return start, end


def test_use_current_env_checks_groups_side_by_side(offline_env, tmp_path):
    """The import checks of ``--use-current-env`` overlap (real interpreter, real
    processes): the same three checks take at least one import's time less than one
    after another (``install.check_jobs=1``), their run files show them running
    together, the summary keeps the suite's order and the failing group its cause."""
    modules, suite = tmp_path / "modules", tmp_path / "slow-suite"
    modules.mkdir()
    for group, code in SLOW_IMPORTS.items():
        (modules / f"mb{group}.py").write_text(code)
        (suite / group).mkdir(parents=True)
        (suite / group / "requirements.in").write_text(f"mb{group}\n")
        (suite / group / "main.py").write_text("")
    (suite / "suite.yaml").write_text("".join(f"{g}:\n  definition: {g}\n" for g in SLOW_IMPORTS))
    python = active_python(tmp_path / "active", offline_env, (modules,))

    def check(jobs: str, base: Path) -> tuple[float, subprocess.CompletedProcess]:
        argv = [python, "-m", "milabench", "install", "--config", str(suite / "suite.yaml"),
                "--base", str(base), "--use-current-env"]  # fmt: skip
        env = {**offline_env, "MILABENCH_INSTALL_CHECK_JOBS": jobs}
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        return time.perf_counter() - start, proc

    one_by_one, before = check("1", tmp_path / "sequential")
    side_by_side, proc = check("3", tmp_path / "concurrent")
    assert side_by_side + SLEEP < one_by_one, (side_by_side, one_by_one)
    for done in (before, proc):
        assert done.returncode == 1, done.stdout + done.stderr
        rows = [ln.split()[0] for ln in done.stdout.splitlines()[1:4]]
        assert rows == list(SLOW_IMPORTS), done.stdout
        assert "checked" in summary_row(done.stdout, "slow1")
        assert "checked" in summary_row(done.stdout, "slow2")
        row = summary_row(done.stdout, "broken")
        assert (
            "failed" in row and "import mbbroken failed: ImportError: mbbroken needs a GPU" in row
        )
        assert "install failed for group(s): broken " in done.stderr

    # one log folder, each group's own files; the concurrent steps overlap, the others not
    for base, together in ((tmp_path / "sequential", False), (tmp_path / "concurrent", True)):
        (logs,) = install_logs(base)
        assert sorted(p.name for p in logs.iterdir() if p.suffix == ".data") == sorted(
            f"{g}.data" for g in SLOW_IMPORTS
        )
        assert "mbbroken needs a GPU" in (logs / "broken.stderr").read_text()
        for group in ("slow1", "slow2"):  # each file holds its own group's check only
            out = (logs / f"{group}.stdout").read_text()
            assert f'"mb{group}": ""' in out and "mbbroken" not in out
        times = [step_times(logs, g) for g in SLOW_IMPORTS]
        overlap = max(s for s, _ in times) < min(e for _, e in times)
        assert overlap is together, times
