"""scripts/first_light_wheelhouse.py (scripts/firstlight/wheelhouse.py): what fits the size
limit and what is left out with its reason, the target's tags, the dependency closure
beyond the image, the manifest's size, bad arguments, and a wheelhouse installed with its
own pip wheel into a Python 3.12 venv made without pip, with no index. Nothing here uses
the network (the real command does: its figures are in the module's report)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from firstlight import wheelhouse as wh  # noqa: E402

M = wh.MIB

# ------------------------------------------------------------------ what fits (pure)


def test_milabench_first_then_entries_in_order_each_whole_or_left_out_with_its_reason():
    sizes = {"omegaconf": M // 4, "decord2": 26 * M, "brax": 30 * M, "mujoco": 10 * M,
             "small": M}  # fmt: skip
    units = [
        wh.Unit("bf16", frozenset()),
        wh.Unit("ppo", frozenset({"brax", "mujoco"})),
        wh.Unit("vjepa-single", frozenset({"decord2"})),
        wh.Unit("brax", frozenset({"brax", "mujoco"})),
        wh.Unit("tiny", frozenset({"small", "omegaconf"})),
    ]
    fit = wh.fit_entries({"omegaconf": sizes["omegaconf"]}, units, sizes, 40 * M, fixed=2 * M)
    assert fit.entries_in == ["bf16", "vjepa-single", "tiny"]
    assert list(fit.kept) == ["omegaconf", "decord2", "small"]
    assert fit.kept["omegaconf"] == ["milabench", "tiny"] and fit.kept["decord2"] == [
        "vjepa-single"
    ]
    assert fit.total == 2 * M + M // 4 + 26 * M + M <= 40 * M
    # ppo did not fit in the 37.8 MiB left, brax not in the 11.8 left after vjepa
    assert fit.left["ppo"] == (("brax", "mujoco"), 40 * M, 40 * M - 2 * M - M // 4)
    assert (
        fit.reason("ppo") == "needs brax, mujoco (40.0 MiB), over the 40 MiB limit (37.8 MiB left)"
    )
    assert fit.left_out_lines() == [
        "ppo, brax: needs brax, mujoco (40.0 MiB), over the 40 MiB limit (37.8 MiB left)"
    ]
    assert fit.left_projects == {"brax": ["ppo", "brax"], "mujoco": ["ppo", "brax"]}


def test_what_an_earlier_entry_brought_costs_a_later_one_nothing():
    sizes = {"a": 10 * M, "b": 25 * M, "c": 5 * M}
    units = [wh.Unit("one", frozenset({"a"})), wh.Unit("two", frozenset({"a", "b"})),
             wh.Unit("three", frozenset({"a", "b", "c"}))]  # fmt: skip
    fit = wh.fit_entries({}, units, sizes, 36 * M)
    assert fit.entries_in == ["one", "two"]
    assert fit.kept == {"a": ["one", "two"], "b": ["two"]}
    assert fit.left["three"] == (("c",), 5 * M, M)


def test_a_project_lacked_by_an_entry_left_out_but_brought_by_a_later_one_is_not_left_out():
    sizes = {"big": 50 * M, "shared": M}
    units = [
        wh.Unit("first", frozenset({"big", "shared"})),
        wh.Unit("second", frozenset({"shared"})),
    ]
    fit = wh.fit_entries({}, units, sizes, 40 * M)
    assert fit.entries_in == ["second"] and fit.left_projects == {"big": ["first"]}
    assert fit.left["first"][0] == ("big", "shared")  # largest first


def test_when_milabench_and_pip_alone_exceed_the_limit_it_is_one_error():
    with pytest.raises(wh.TooBig, match=r"milabench's needs \(omegaconf\) and pip's wheel take "
                       r"3\.0 MiB, over the 2 MiB limit"):  # fmt: skip
        wh.fit_entries({"omegaconf": M}, [], {"omegaconf": M}, 2 * M, fixed=2 * M)


def test_many_projects_are_named_largest_first_then_counted():
    sizes = {f"p{i}": (i + 1) * M for i in range(10)}
    fit = wh.fit_entries({}, [wh.Unit("e", frozenset(sizes))], sizes, 5 * M)
    assert fit.reason("e", most=3).startswith("needs p9, p8, p7 and 7 more (55.0 MiB)")


# ------------------------------------------------------------------------ the target


def test_the_target_takes_manylinux_2_28_and_older_cp312_abi3_and_py3_wheels():
    target = wh.Target("3.12", "manylinux_2_28_x86_64")
    plats = target.platforms
    assert plats[0] == "manylinux_2_28_x86_64" and plats[-1] == "manylinux1_x86_64"
    assert plats.index("manylinux2014_x86_64") == plats.index("manylinux_2_17_x86_64") + 1
    assert "manylinux2010_x86_64" in plats and "manylinux_2_29_x86_64" not in plats
    ok = target.tags()
    for name in ("decord2-3.2.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                 "opencv_python_headless-4.13.0.92-cp37-abi3-manylinux_2_28_x86_64.whl",
                 "ml_dtypes-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
                 "glfw-2.11.0-py2.py3-none-manylinux_2_28_x86_64.whl",
                 "omegaconf-2.4.0-py3-none-any.whl"):  # fmt: skip
        assert wh.wheel_fits(name, ok), name
    for name in ("x-1-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "x-1-cp312-cp312-manylinux_2_34_x86_64.whl",
                 "x-1-cp312-cp312-musllinux_1_2_x86_64.whl",
                 "x-1-cp312-cp312-manylinux_2_28_aarch64.whl",
                 "x-1-cp312-cp312-linux_x86_64.whl", "x-1-py2-none-any.whl", "not-a-wheel.zip"):  # fmt: skip
        assert not wh.wheel_fits(name, ok), name
    assert target.marker_env()["python_version"] == "3.12"
    with pytest.raises(wh.UsageError, match="--platform win_amd64"):
        wh.Target("3.12", "win_amd64").platforms  # noqa: B018


# ---------------------------------------------------------- the closure beyond the image


def item(name: str, version: str, *requires: str) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}


def test_the_closure_stops_at_the_image_and_follows_extras_and_the_targets_markers():
    report = {"install": [
        item("jax", "0.11.2", "numpy", 'jax-cuda13-plugin[with-cuda]; extra == "cuda13"'),
        item("jax-cuda13-plugin", "0.11.2", 'nvidia-cublas; extra == "with-cuda"'),
        item("nvidia-cublas", "13"), item("numpy", "2.5.2"),
        item("brax", "0.14.2", "jax", "mujoco", "absl-py",
             'dataclasses; python_version < "3.7"', 'tomli; python_version < "3.12"',
             'pytest; extra == "develop"'),
        item("mujoco", "4.0.0", "glfw", "numpy"), item("glfw", "2.11"),
        item("optax", "0.2.8", "absl-py", "jax"), item("absl-py", "2.5"),
        item("Ruamel.Yaml", "0.18", "ghost"),
    ]}  # fmt: skip
    graph = wh.Graph.from_report(report, wh.Target("3.12"))
    image = ["jax", "jax-cuda13-plugin", "numpy", "optax"]
    present, _ = graph.closure((n, ()) for n in image)
    assert present == {"jax", "jax-cuda13-plugin", "numpy", "optax", "absl-py"}
    # jax[cuda13] is the image's: its plugin's CUDA libraries are never carried
    found, missing = graph.closure([("jax", {"cuda13"}), ("brax", ())], stop=present)
    assert found == {"brax", "mujoco", "glfw"} and not missing  # no tomli on 3.12
    # outside the image, extras are followed
    found, _ = graph.closure([("jax", {"cuda13"})])
    assert found == {"jax", "jax-cuda13-plugin", "nvidia-cublas", "numpy"}
    # on 3.11 brax would need tomli, which the report lacks: said, not hidden
    old = wh.Graph.from_report(report, wh.Target("3.11"))
    assert old.closure([("brax", ())], stop=present)[1] == {"tomli"}
    assert graph.closure([("ruamel.yaml", ())])[1] == {"ghost"}


def test_requirement_files_follow_includes_and_skip_comments_and_options(tmp_path):
    (tmp_path / "requirements.in").write_text(
        "# jax and friends: comment lines go\njax  # inline too\ngymnax\n\n"
        "--extra-index-url https://example.invalid/simple\n-c pins.txt\n"
        "tomli; python_version < '3.12'\n"
    )  # fmt: skip
    (tmp_path / "requirements.cuda.in").write_text("-r requirements.in\njax[cuda13]\n")
    reqs = wh.read_requirements(tmp_path / "requirements.cuda.in")
    assert [str(r) for r in reqs] == ["jax", "gymnax", 'tomli; python_version < "3.12"',
                                      "jax[cuda13]"]  # fmt: skip
    assert [r.name for r in wh._applicable(reqs, wh.Target("3.12"))] == ["jax", "gymnax", "jax"]
    (tmp_path / "bad.in").write_text("jax ==\n")
    with pytest.raises(wh.WheelhouseError, match=r"bad\.in:1:"):
        wh.read_requirements(tmp_path / "bad.in")


def test_the_image_list_and_milabench_s_ranges_are_read_from_their_files(tmp_path):
    image = wh.read_image(wh.IMAGE_LIST)
    assert image.python == "3.12" and image.versions["torch"] == "2.11.0"
    assert "pyyaml" in image.versions and image.versions["pyyaml"] is None
    assert image.names["pyyaml"] == "pyyaml"
    specs = wh.pyproject_specs(["omegaconf", "PyYAML"])
    assert specs[0].startswith("omegaconf") and specs[1].startswith("PyYAML")
    assert not set(wh.MILABENCH_NEEDS) & set(wh.NOT_NEEDED)
    (tmp_path / "image.txt").write_text("torch==2.11.0\ntorch >= 2\n")
    with pytest.raises(wh.UsageError, match="image.txt:2"):
        wh.read_image(tmp_path / "image.txt")


def test_pips_no_matching_distribution_line_names_the_requirement():
    err = ("ERROR: Could not find a version that satisfies the requirement "
           "antlr4-python3-runtime==4.9.* (from omegaconf) (from versions: 4.11.0)\n"
           "ERROR: No matching distribution found for antlr4-python3-runtime==4.9.* "
           "(from omegaconf)\n")  # fmt: skip
    assert wh.no_distribution(err) == "antlr4-python3-runtime==4.9.*"
    assert wh._error_line(err).startswith("No matching distribution found for antlr4")
    assert wh.no_distribution("ERROR: ResolutionImpossible") is None


def test_the_manifest_counts_every_file_of_the_folder_itself_included(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"x" * 1000)
    (tmp_path / "pip-26.3-py3-none-any.whl").write_bytes(b"y" * 99_000)
    manifest = {"python": "3.12", "total_bytes": 0, "wheels": [], "_private": "not written"}
    wh.write_manifest(tmp_path, manifest)
    written = json.loads((tmp_path / "manifest.json").read_text())
    assert "_private" not in written
    assert written["total_bytes"] == wh.folder_bytes(tmp_path) == manifest["total_bytes"]


def test_bad_arguments_exit_2(tmp_path, capsys):
    for args in (["--max-mib", "0"], ["--select", ","], ["--config", str(tmp_path / "no.yaml")],
                 ["--python-version", "twelve"]):  # fmt: skip
        with pytest.raises(SystemExit) as stop:
            wh.main([str(tmp_path / "out"), *args])
        assert stop.value.code == 2, args
    assert wh.main([str(tmp_path / "out"), "--select", "nosuchentry"]) == 2
    assert "nosuchentry" in capsys.readouterr().err
    assert wh.main([str(tmp_path / "out"), "--select", "bf16", "--platform", "win_amd64"]) == 2
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert wh.main([str(tmp_path / "busy"), "--select", "bf16"]) == 2
    assert "neither empty nor a wheelhouse" in capsys.readouterr().err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_a_checkout_s_milabench_is_used_and_a_missing_dependency_is_one_line(tmp_path):
    """The command runs from a checkout with no milabench installed (the repository root
    goes on sys.path); a Python lacking ``packaging`` or milabench's own dependencies
    gets one line naming the module and the install, exit 1, and no folder."""
    import packaging

    script = str(ROOT / "scripts" / "first_light_wheelhouse.py")
    only_packaging = tmp_path / "site"
    only_packaging.mkdir()
    (only_packaging / "packaging").symlink_to(Path(packaging.__file__).parent)
    for lacking, path in (("packaging", ""), ("yaml", str(only_packaging))):
        out = tmp_path / f"house-{lacking}"
        done = subprocess.run([sys.executable, "-S", script, str(out), "--select", "bf16"],
                              capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": path})  # fmt: skip
        assert done.returncode == 1, done.stderr
        line = f"cannot import {lacking!r}; making the wheelhouse needs milabench's"
        assert done.stderr.count("\n") == 1 and line in done.stderr, done.stderr
        assert f"pip install -e {ROOT} packaging" in done.stderr
        assert not out.exists()


def test_a_previous_wheelhouse_is_replaced_and_nothing_else_is_touched(tmp_path):
    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    (house / "wheels" / "old-1-py3-none-any.whl").write_bytes(b"old")
    (house / "pip-23.2.1-py3-none-any.whl").write_bytes(b"pip")  # no manifest: cut short
    wh.prepare_out(house)
    assert list(house.iterdir()) == []
    (house / "manifest.json").write_text("{}")
    (house / "mine.txt").write_text("mine")
    with pytest.raises(wh.UsageError, match=r"holds mine\.txt"):
        wh.prepare_out(house)
    assert sorted(p.name for p in house.iterdir()) == ["manifest.json", "mine.txt"]


# ------------------------------------------------- installed into a venv without pip


def make_wheel(dest: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel written by hand (METADATA, WHEEL, RECORD): no build tool."""
    info = f"{name}-{version}.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.mark.slow
def test_a_wheelhouse_installs_with_its_own_pip_into_a_python_3_12_venv_without_pip(tmp_path):
    python312 = wh.find_python("3.12")
    if python312 is None:
        pytest.skip("no Python 3.12 here (the GPU machine's version): python3.12 not on PATH "
                    "nor in pyenv's versions")  # fmt: skip
    bundled = subprocess.run(
        [python312, "-c", "import ensurepip, pathlib; "
         "print(pathlib.Path(ensurepip.__file__).parent / '_bundled')"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (pip_wheel,) = Path(bundled).glob("pip-*.whl")

    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    (house / pip_wheel.name).write_bytes(pip_wheel.read_bytes())
    make_wheel(house / "wheels", "fl_dep", "1.0", {"fl_dep/__init__.py": "VALUE = 42\n"})
    make_wheel(house / "wheels", "fl_top", "2.0",
               {"fl_top/__init__.py": "from fl_dep import VALUE\nANSWER = VALUE\n"})  # fmt: skip
    wh.write_manifest(house, {"python": "3.12", "pip": pip_wheel.name, "total_bytes": 0,
                              "wheels": [], "entries": []})  # fmt: skip
    assert json.loads((house / "manifest.json").read_text())["total_bytes"] == wh.folder_bytes(
        house
    )

    venv = tmp_path / "venv"
    subprocess.run([python312, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode
    site = tmp_path / "site"
    manifest = json.loads((house / "manifest.json").read_text())
    wheels = sorted(map(str, (house / "wheels").glob("*.whl")))
    # no index: a package missing from the folder would fail here instead of downloading
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(
        [python, str(house / manifest["pip"] / "pip"), "install", "--no-index", "--no-deps",
         "--target", str(site), *wheels],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    probe = subprocess.run(
        [python, "-c", "import fl_top, sys; print(fl_top.ANSWER, fl_top.__file__, "
         "sys.version_info[:2])"],
        capture_output=True, text=True, env={**env, "PYTHONPATH": str(site)},
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    answer, path, version = probe.stdout.split(" ", 2)
    assert answer == "42" and path.startswith(str(site)) and version.strip() == "(3, 12)"


def _top_level_imports(path: Path) -> set[str]:
    """The top-level package of every import of `path` outside a function body."""
    import ast

    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.add(child.module.split(".")[0])
            walk(child)

    walk(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_what_is_marked_inputs_only_is_imported_only_inside_functions():
    """A requirement marked ``# inputs-only`` is not carried to the GPU machine, whose entries
    run their stand-ins: so no file of its benchmark folder imports it when loaded."""
    marked = {
        folder: wh.inputs_only(folder / "requirements.in")
        for folder in sorted((ROOT / "benchmarks").iterdir())
        if (folder / "requirements.in").is_file()
    }
    assert {f.name for f, names in marked.items() if "pyarrow" in names} == {
        "llama", "llava", "llm", "rlhf"
    }  # fmt: skip
    assert "rdkit" in marked[ROOT / "benchmarks" / "geo_gnn"]
    assert "rdkit" not in marked[ROOT / "benchmarks" / "recursiongfn"]  # its molecules
    for folder, names in marked.items():
        for path in folder.rglob("*.py"):
            assert not _top_level_imports(path) & names, (path, names)
    # and the wheelhouse leaves them out of each entry's needs
    needs = wh.entry_needs(ROOT / "config" / "standard.yaml", ["llm-lora-single"], "cuda")
    assert needs[0].inputs_only == ["pyarrow"]
    assert "pyarrow" not in {wh.canonical(r.name) for r in needs[0].requirements}
