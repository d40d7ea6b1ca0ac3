"""The benchmark package class: what a benchmark folder can customise.

A benchmark folder may hold a ``benchfile.py`` whose ``__pack__`` is a subclass of
`BenchmarkPackage`; without one the base class is used, which is enough for a folder
with ``main.py`` (+ optional ``prepare.py``/``voirfile.py``/requirements). Every hook
returns data (paths, argv lists, variables, plans), never runs anything: `milabench.envs`
and `milabench.execute` do the running, so a pack can be inspected and tested freely.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from milabench.config.argv import argv_list
from milabench.config.entry import Dirs, Entry, as_entry
from milabench.errors import ConfigError
from milabench.plan.tree import PlanNode, Script, Voir, entry_working_dir

# requirement name (lower case) -> module to import when it differs from the name
IMPORT_NAMES: dict[str, str] = {
    "pyyaml": "yaml",
    "pillow": "PIL",
    "scikit-learn": "sklearn",
    "scikit-image": "skimage",
    "opencv-python": "cv2",
    "opencv-python-headless": "cv2",
    "decord2": "decord",
    "beautifulsoup4": "bs4",
    "protobuf": "google.protobuf",
    "nvidia-ml-py": "pynvml",
    "python-dateutil": "dateutil",
    "pytorch-lightning": "pytorch_lightning",
    "lightning": "lightning",
    "tensorflow-cpu": "tensorflow",
    "faiss-cpu": "faiss",
    "faiss-gpu": "faiss",
    "msgpack-python": "msgpack",
    "typing-extensions": "typing_extensions",
    "sentencepiece": "sentencepiece",
    "jax[cuda12]": "jax",
    "jax[cuda13]": "jax",
    # JAX's CUDA plugins (requirements.cuda*.in): importing them proves they are there
    "jax-cuda12-plugin": "jax_cuda12_plugin",
    "jax-cuda12-pjrt": "jax_plugins.xla_cuda12",
    "jax-cuda13-plugin": "jax_cuda13_plugin",
    "jax-cuda13-pjrt": "jax_plugins.xla_cuda13",
    "torch-geometric": "torch_geometric",
    "ptera": "ptera",
    "voir": "voir",
}
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_names(path: Path, _seen: frozenset[Path] = frozenset()) -> list[str]:
    """Distribution names listed in a requirements file, and in the files it includes with
    ``-r FILE`` (relative to it); other options, URLs and comments are skipped."""
    names: list[str] = []
    if not path.is_file() or path.resolve() in _seen:
        return names
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            included = path.parent / line.split(None, 1)[1].strip()
            names += [
                n for n in requirement_names(included, _seen | {path.resolve()}) if n not in names
            ]
            continue
        if not line or line.startswith("-"):
            continue
        match = _REQ_NAME.match(line)
        if match and match.group(1) not in names:
            names.append(match.group(1))
    return names


INPUTS_ONLY = re.compile(r"#\s*inputs-only\b")
"""The comment marking a requirement that only upstream's real inputs need (its modules
are imported where those are read): ``pyarrow  # inputs-only: ...``. Without it the
benchmark runs its stand-in, so it is no key import, and first light does not carry it."""


def inputs_only_names(path: Path) -> set[str]:
    """Canonical names of the requirements of `path` (not of its includes) marked
    `INPUTS_ONLY`; empty when the file does not exist."""
    if not path.is_file():
        return set()
    names = set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        match = _REQ_NAME.match(raw.split("#", 1)[0])
        if match and INPUTS_ONLY.search(raw):
            names.add(_canonical(match.group(1)))
    return names


def _canonical(name: str) -> str:
    """PEP 503 normalised distribution name (``Pillow`` == ``pillow``, ``a_b`` == ``a-b``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def import_name(requirement: str) -> str:
    """Module name for a distribution name (``PyYAML`` -> ``yaml``)."""
    key = requirement.lower()
    return IMPORT_NAMES.get(key, key.replace("-", "_").replace(".", "_"))


class BenchmarkPackage:
    """Default behaviour of a benchmark folder; subclass it in ``benchfile.py``.

    Class attributes a subclass typically sets: ``main_script`` (file run by ``run``,
    relative to the folder; an entry's ``script`` field overrides it), ``prepare_name``
    (prepare script), ``key_imports`` (modules whose import proves the environment works).
    Processes run in `working_dir` (the entry's ``working_dir``, else the folder).
    """

    main_script: str = "main.py"
    prepare_name: str = "prepare.py"
    voirfile_name: str = "voirfile.py"

    def __init__(self, entry: Entry | Mapping[str, Any], system: dict) -> None:
        self.entry: Entry = as_entry(entry)
        self.system = system

    # -- identity and places (fields of the typed entry) -----------------------------
    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def definition(self) -> Path:
        return self.entry.code

    @property
    def config(self) -> Mapping[str, Any]:
        """The resolved entry as a mapping: where a benchfile reads its own settings
        (keys starting with ``_``, which the loader never reports as unknown)."""
        return self.entry.raw

    @property
    def dirs(self) -> Dirs:
        return self.entry.dirs

    @property
    def use_current_env(self) -> bool:
        return self.entry.use_current_env

    @property
    def venv(self) -> Path:
        """The environment the benchmark runs in (the current one with use_current_env)."""
        return self.entry.venv

    @property
    def bindir(self) -> Path:
        return self.entry.bindir

    @property
    def python(self) -> str:
        """Interpreter of the benchmark's environment."""
        return self.entry.python

    def executable(self, name: str) -> str:
        """A console script of the environment (``voir``, ``torchrun``)."""
        return str(self.bindir / name)

    # -- files of the folder ---------------------------------------------------------
    @property
    def main_path(self) -> Path:
        """The file run by ``run``: the entry's ``script`` (relative to the folder, absolute
        allowed), else the class's ``main_script``."""
        script = self.entry.script
        if script:
            path = Path(os.path.expandvars(script)).expanduser()
            return path if path.is_absolute() else self.definition / path
        return self.definition / self.main_script

    @property
    def working_dir(self) -> Path:
        """The processes' working directory: the entry's ``working_dir`` (placeholders such
        as ``{milabench_extra}`` resolved, relative to the folder), else the folder."""
        return Path(entry_working_dir(self.entry, self.system))

    @property
    def prepare_script(self) -> Path | None:
        path = self.definition / self.prepare_name
        return path if path.exists() else None

    @property
    def voirfile(self) -> Path | None:
        path = self.definition / self.voirfile_name
        return path if path.exists() else None

    def requirements_file(self, variant: str | None = None) -> Path:
        """``requirements.<variant>.txt`` (``requirements.in`` for variant ``unpinned``)."""
        variant = variant or self.entry.install_variant or self.system.get("arch")
        if variant in (None, "", "unpinned"):
            return self.definition / "requirements.in"
        return self.definition / f"requirements.{variant}.txt"

    def pin_input(self, variant: str | None) -> Path:
        """What `milabench pin` compiles into ``requirements.<variant>.txt``: the folder's
        ``requirements.<variant>.in`` when it has one (the CPU pins of the vision folders
        leave torchvision out, the CUDA ones of the JAX folder ask for ``jax[cuda13]`` and
        its plugin), else ``requirements.in``."""
        if variant and variant != "unpinned":
            own = self.definition / f"requirements.{variant}.in"
            if own.is_file():
                return own
        return self.definition / "requirements.in"

    @property
    def key_imports(self) -> list[str]:
        """Modules to import to validate the environment (from ``requirements.in``).

        A benchfile overrides this with a plain class attribute list.
        """
        return [import_name(n) for n in requirement_names(self.definition / "requirements.in")]

    def key_imports_for(self, variant: str) -> list[str]:
        """The modules of the variant's `pin_input` that its pinned file installs: a
        variant may leave a package out on purpose (the ``cpu`` pins of the vision folders
        have no torchvision: PyPI's wheel is a CUDA build that fails at import next to the
        CPU torch) or add one (JAX's CUDA plugin), and validating an import that was never
        installed would fail the group. Requirements marked `INPUTS_ONLY` are left out:
        the environment runs the stand-ins without them. A benchfile's own `key_imports`
        win."""
        if type(self).key_imports is not BenchmarkPackage.key_imports:
            return list(self.key_imports)
        source = self.pin_input(variant)
        skip = inputs_only_names(source)
        names = [n for n in requirement_names(source) if _canonical(n) not in skip]
        pinned_file = Path(self.requirements_file(variant))
        if pinned_file.is_file():
            pinned = {_canonical(n) for n in requirement_names(pinned_file)}
            names = [n for n in names if _canonical(n) in pinned]
        return [import_name(n) for n in names]

    # -- command line and environment ------------------------------------------------
    @property
    def argv(self) -> list[str]:
        """The assembled argv; placeholders are resolved per process by the plan."""
        e = self.entry
        return argv_list(e.argv, file=e.config_file, name=e.name)

    def make_env(self) -> dict[str, str]:
        """Extra variables for this benchmark's processes (added to `benchmark_env`)."""
        return {}

    # -- plans -------------------------------------------------------------------------
    def script_node(
        self,
        script: str | Path | None = None,
        argv: list[str] | None = None,
        tag: list[str] | None = None,
    ) -> Script:
        # absolute: the working directory need not be the folder the path is relative to
        path = Path(script or self.main_path)
        if not path.is_absolute():
            path = Path(os.path.normpath(path.absolute()))
        return Script(
            self.entry,
            self.system,
            path,
            self.argv if argv is None else argv,
            python=self.python,
            env=self.make_env(),
            tag=tag,
            cwd=self.working_dir,
        )

    def command_node(self) -> PlanNode:
        """The main script, under voir when the folder has a voirfile."""
        node: PlanNode = self.script_node()
        if self.voirfile is not None:
            voirfile = os.path.normpath(self.voirfile.absolute())  # read from working_dir
            node = Voir(node, voirfile=voirfile, executable=self.executable("voir"))
        return node

    def build_run_plan(self) -> PlanNode:
        """The plan for ``plan.method`` (override for a custom launcher)."""
        from milabench.plan import build_plan

        return build_plan(self)

    def build_prepare_plan(self) -> PlanNode | None:
        """``python prepare.py <argv>`` once, or None when the folder has no prepare step."""
        script = self.prepare_script
        if script is None:
            return None
        return self.script_node(script)

    # upstream milabench's names for the same hooks (docs/phases.md section 3)
    def run(self) -> PlanNode:
        return self.build_run_plan()

    def prepare(self) -> PlanNode | None:
        return self.build_prepare_plan()


_loaded: dict[str, type[BenchmarkPackage]] = {}


def pack_class(definition: str | Path) -> type[BenchmarkPackage]:
    """The ``__pack__`` class of ``<definition>/benchfile.py`` (base class when absent)."""
    path = Path(definition) / "benchfile.py"
    key = str(path.resolve()) if path.exists() else ""
    if not key:
        return BenchmarkPackage
    if key in _loaded:
        return _loaded[key]
    modname = "milabench_benchfile_" + re.sub(r"\W", "_", key)
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(modname, None)
        raise ConfigError(f"{path}: cannot be imported: {type(err).__name__}: {err}") from err
    cls = getattr(module, "__pack__", None)
    if not (isinstance(cls, type) and issubclass(cls, BenchmarkPackage)):
        raise ConfigError(f"{path}: __pack__ must be a subclass of milabench.pack.BenchmarkPackage")
    _loaded[key] = cls
    return cls


def load_pack(entry: Entry | Mapping[str, Any], system: dict) -> BenchmarkPackage:
    """The package object of ``entry`` (its benchfile's class, or the base class)."""
    entry = as_entry(entry)
    return pack_class(entry.code)(entry, system)
