"""The repository's prose states contracts and names only documents that exist.

* Every document named in code, tests, scripts, benchmarks, configuration, docs and the
  README (``docs/x.md``, ``x.md``, ``x.rst``, a Markdown link, a section given by number
  or by quoted heading, a link anchor) exists in the repository, section included.
* Code and tests name no tracker issue (``issue 13``, ``issue #13``, ``(#13)``).
* Docstrings and comments of `milabench` and `benchkit` say what the code does, not what
  it did before (`HISTORY_PHRASES`).

Each failure lists the offending ``file:line`` and what is wrong there.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

# Where documents may be named, and which files there are text to read.
REFERENCE_ROOTS = (
    "milabench",
    "benchkit",
    "benchmarks",
    "scripts",
    "tests",
    "docs",
    "config",
    "docker",
    ".ci",
    "README.md",
    "pyproject.toml",
)
TEXT_SUFFIXES = {".py", ".md", ".rst", ".yaml", ".yml", ".sh", ".toml", ".txt", ".cfg", ".sbatch"}
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "node_modules"}

# File names that milabench, its scripts and its tests *write*: outputs, not documents.
# (A name given to an option, ``--markdown out.md``, is an output too: `OUTPUT_OPTION`.)
OUTPUT_NAMES = {
    "report.md",  # <run>/report.md; first-light's report.{txt,md,csv,json}
    "first-light.md",  # scripts/first_light.py's summary
    "comment.md",  # scripts/ci_ab.py's pull-request comment
    "table.md",  # the compare table of docs/ci.md's pull-request workflow
}
OUTPUT_OPTION = re.compile(r"(?:--[\w-]+|-o)[ =]$")

# A document name: a path of plain path characters ending in .md or .rst, not preceded
# by path characters (so `<base>/runs/x.md`, a path with a placeholder, is not one).
DOC_NAME = re.compile(r"(?<![\w./<>{}$-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:md|rst))(?![\w/-])")
# What may follow a name to point into it: `section 3`, `sections 2-3`, `1.7`, `"Title"`.
SECTION = re.compile(r'^,?\s+(?:sections?\s+(\d+)|(\d+\.\d+(?:\.\d+)*)\b|"([^"\n]+)")')
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
# What a file must contain to be worth parsing for document names (or `SPEC`).
MENTIONS = re.compile(r"\.(?:md|rst)\b")
# A numbered section of a specification kept outside the repository: ``(spec 1.8)``.
SPEC = re.compile(r"\bspec(?:ification)?\s+(?:(?:section\s+)?\d+(?:\.\d+)*\b|[\w-]+\.(?:md|rst)\b)")
ISSUE = re.compile(
    r"\bissues?\s*#?\d+|\(#\d+\)|\b(?:PR|pull request|ticket|bug)\s*#\d+", re.IGNORECASE
)
# History narration: phrases that tell what the code used to do instead of what it does.
HISTORY_PHRASES = (
    "used to",
    "once printed",
    "previously",
    "as before",
    "formerly",
    "no longer",
    "any more",
    "anymore",
    "until now",
    "in the past",
    "the old code",
    "earlier version",
)
HISTORY = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in HISTORY_PHRASES) + r")\b", re.I)


def text_files(roots: tuple[str, ...]) -> Iterator[Path]:
    for name in roots:
        top = ROOT / name
        if top.is_file():
            yield top
            continue
        for path in sorted(top.rglob("*")):
            if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in path.parts):
                continue
            is_text = path.suffix in TEXT_SUFFIXES or path.name.startswith("Dockerfile")
            if path.is_file() and is_text and path.resolve() != THIS:
                yield path


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- prose of a Python file: comments and docstrings ------------------------------------
Lines = tuple[tuple[int, str], ...]


@cache
def python_texts(path: Path) -> tuple[Lines, Lines]:
    """(prose, other strings) of a Python file as (line, text) pairs.

    Prose is every comment and every string statement (docstrings); the other strings
    are the remaining literals (help texts, messages). Parsed once per file.
    """
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return (), ()
    prose: list[tuple[int, str]] = []
    strings: list[tuple[int, str]] = []
    docstrings: set[int] = set()
    for node in ast.walk(tree):  # breadth first: a statement before its string
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.add(id(node.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            lines = [(node.lineno + i, line) for i, line in enumerate(node.value.splitlines())]
            (prose if id(node) in docstrings else strings).extend(lines)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            prose.append((tok.start[0], tok.string))
    return tuple(prose), tuple(strings)


def python_prose(path: Path) -> Lines:
    return python_texts(path)[0]


def python_strings(path: Path) -> Lines:
    return python_texts(path)[1]


def numbered(path: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(path.read_text(encoding="utf-8").splitlines(), 1)


# -- documents and their sections -------------------------------------------------------
def plain(heading: str) -> str:
    """A heading or a quoted title compared as words: no leading number, no backticks."""
    return re.sub(r"^\d+(?:\.\d+)*\.?\s+", "", heading.replace("`", "")).strip().lower()


@cache
def headings(path: Path) -> tuple[str, ...]:
    """The heading texts of a Markdown file, fenced code left out."""
    out = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            out.append(m.group(1))
    return tuple(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def has_section(doc: Path, number: str | None, dotted: str | None, title: str | None) -> bool:
    texts = headings(doc)
    if number is not None:
        return any(re.match(rf"{number}\.(\s|$)", h) for h in texts)
    if dotted is not None:
        return any(re.match(rf"{re.escape(dotted)}\b", h) for h in texts)
    wanted = plain(title)
    return any(plain(h).startswith(wanted) for h in texts)


def resolve(name: str, source: Path) -> Path | None:
    """The document ``name`` written in ``source`` names, or None when there is none.

    Paths are read from the repository root; a Markdown file may also name a file
    relative to its own folder (``history.md`` in docs/, ``../README.md``).
    """
    candidates = [ROOT / name]
    if source.suffix == ".md":
        candidates.insert(0, source.parent / name)
    for path in candidates:
        if path.is_file():
            return path.resolve()
    return None


def check_names(path: Path, number: int, line: str) -> Iterator[str]:
    """Problems with the documents named on one line of ``path``."""
    where = f"{rel(path)}:{number}"
    for m in SPEC.finditer(line):
        yield f"{where}: {m.group(0)!r} names a specification outside the repository"
    for m in DOC_NAME.finditer(line):
        name = m.group(1)
        section = SECTION.match(line[m.end() :])
        doc = resolve(name, path)
        if doc is None:
            written = name.split("/")[-1] in OUTPUT_NAMES or OUTPUT_OPTION.search(line[: m.start()])
            if section is None and written:
                continue  # a file that is written, not a document
            yield f"{where}: {name}: no such document"
        elif (
            section is not None and doc.suffix == ".md" and not has_section(doc, *section.groups())
        ):
            yield f"{where}: {name}: no section {section.group(0).strip(' ,')}"


def check_links(path: Path, number: int, line: str) -> Iterator[str]:
    """Problems with the relative links of one line of a Markdown file."""
    where = f"{rel(path)}:{number}"
    for m in MD_LINK.finditer(line):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        doc = (path.parent / file_part).resolve() if file_part else path
        if not doc.exists():
            yield f"{where}: link {target}: no such file"
        elif anchor and doc.suffix == ".md" and anchor not in anchors(doc):
            yield f"{where}: link {target}: no heading with anchor #{anchor}"


def fail_with(problems: list[str], what: str) -> None:
    assert not problems, f"{len(problems)} {what}:\n" + "\n".join(problems)


# -- the tests --------------------------------------------------------------------------
def test_named_documents_exist() -> None:
    problems: list[str] = []
    for path in text_files(REFERENCE_ROOTS):
        text = path.read_text(encoding="utf-8")
        if not (MENTIONS.search(text) or SPEC.search(text)):
            continue  # names no document: nothing to parse
        if path.suffix == ".py":
            for number, line in python_prose(path):
                problems += check_names(path, number, line)
            for number, line in python_strings(path):  # messages and help texts
                if "docs/" in line:
                    problems += [p for p in check_names(path, number, line) if "docs/" in p]
        else:
            for number, line in numbered(path):
                problems += check_names(path, number, line)
                if path.suffix == ".md":
                    problems += check_links(path, number, line)
    fail_with(sorted(set(problems)), "references to documents that do not exist")


def test_no_tracker_issue_numbers() -> None:
    problems = [
        f"{rel(path)}:{number}: {m.group(0)!r}"
        for path in text_files(("milabench", "benchkit", "benchmarks", "scripts", "tests"))
        for number, line in numbered(path)
        for m in ISSUE.finditer(line)
    ]
    fail_with(problems, "tracker issue numbers (state the behaviour instead)")


def test_docstrings_state_contracts_not_history() -> None:
    problems = [
        f"{rel(path)}:{number}: {m.group(0)!r} in {line.strip()!r}"
        for path in text_files(("milabench", "benchkit"))
        if path.suffix == ".py" and HISTORY.search(path.read_text(encoding="utf-8"))
        for number, line in python_prose(path)
        for m in HISTORY.finditer(line)
    ]
    fail_with(problems, "docstrings or comments that narrate history")


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """Each rule on a line written to break it, and on its corrected form."""
    source = ROOT / "milabench" / "events.py"
    assert list(check_names(source, 1, "see docs/no-such-page.md"))
    assert list(check_names(source, 1, "(spec run-data.md section 2)"))
    assert list(check_names(source, 1, "(docs/run-data.md section 9)"))
    assert list(check_names(source, 1, 'docs/config.md "No such heading"'))
    assert list(check_names(source, 1, "report.md section 1"))  # an output name is no doc
    assert list(check_names(source, 1, "Selection of benchmarks (spec 1.8)"))
    assert list(check_names(source, 1, "Contract: spec phases.md sections 2 to 5."))
    assert not list(check_names(source, 1, "--markdown stab.md"))
    assert not list(check_names(source, 1, 'docs/environments.md "milabench pin"'))
    assert not list(check_names(source, 1, "(docs/run-data.md section 2)"))
    assert not list(check_names(source, 1, 'docs/config.md "Matrix entries"'))
    assert not list(check_names(source, 1, "writes report.md in the run folder"))
    readme = ROOT / "README.md"
    assert list(check_links(readme, 1, "[x](docs/config.md#no-such-anchor)"))
    assert not list(check_links(readme, 1, "[x](docs/config.md#matrix-entries)"))
    assert ISSUE.search("GPU paths (issue 13, item 4)") and ISSUE.search("fixed (#12)")
    assert not ISSUE.search("the environment's issues are listed")
    assert HISTORY.search("each main.py used to repeat the options")
    assert not HISTORY.search("each main.py repeats the options")
