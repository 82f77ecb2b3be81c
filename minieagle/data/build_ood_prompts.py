"""Rebuild `ood_prompts.jsonl` and `LICENSE-OOD.txt`: prompts from outside the training corpora.

The bundled corpora are the Python 3.11 documentation (prose) and the CPython 3.11 standard library
(code), so acceptance length measured on their held-out windows flatters every drafter. This
script picks passages from four permissively licensed packages that are neither: the prose of
their docstrings and the source of their functions. minieagle never imports it at runtime;
`minieagle.bench.ood_prompts` reads the file it writes.

Sources (`_SOURCES`: exact versions, licences, the files left out): numpy 2.4.6 (BSD-3-Clause),
pytest 9.0.3 (MIT), click 8.4.0 (BSD-3-Clause) and networkx 3.6.1 (BSD-3-Clause), as installed by
pip. The `.py` files listed in each distribution's RECORD under its import packages are candidates,
except test suites (`tests/` folders, `test_*.py`, `conftest.py`) and the files in `_SKIP_FILES`:
code copied from or derived from the standard library (the training data) or carrying another
licence.

Passages:

- **prose**: one paragraph (split on blank lines) of a module, class or function docstring
  (`ast.get_docstring`, cleaned), kept when `_is_prose` accepts it: ASCII, at least
  `_MIN_PROSE_CHARS`, starts with a capital letter and ends with a full stop (not a colon that
  introduces a list or an example), no indented line, no doctest, reST directive or role, list
  item, section underline or URL, at most 4 backquotes, and at least 85 % letters and spaces.
  Nothing, in either kind, that mentions a derivation from the standard library or its docs
  (`_DERIVED_MARKERS`: "copied from", "cpython", "python.org", ...).
- **code**: a function or method (a `def` at module level or in a top-level class), from its first
  decorator, dedented, kept when `_code_passage` accepts it: ASCII without tabs, not a test or an
  `@overload` stub, and at least 4 lines of code beyond the docstring within the first
  `_MAX_CHARS` characters.

A passage is cut to at most `_MAX_CHARS` characters: prose at the last sentence end (or space),
code at the last whole line. It must encode to at least `_MIN_TOKENS` tokens of the shipped
tokenizer (`pretrained/small/minieagle_tokenizer.json`), so a 32-token prompt leaves at least 32
tokens of reference continuation, and it may share no run of 59 characters (`_WINDOW + _STRIDE -
1`) with either corpus, any split (`_Checker.in_corpora`): the prompts are out of domain by
construction.

Selection, seeded by `_SEED`: for each package and kind, its candidate files (sorted) are shuffled
by `random.Random(f"{_SEED}/{kind}/{package}")`; each file in turn gives its first acceptable
passage, in an order shuffled the same way, until `_PER_PACKAGE` passages are taken. A file gives
one passage per round; a second round (`_ROUNDS`) only runs when a package has too few files with
an acceptable passage (click's prose). The output lists the prose, then the code; within a kind
the packages take turns (numpy, pytest, click, networkx, numpy, ...), so the first k prompts of a
kind mix the packages.

Each output line is `{"kind", "package", "version", "source", "license", "text"}`: `source` is
the file's path relative to site-packages, `license` an SPDX identifier. `LICENSE-OOD.txt`
concatenates the licence of each package, copied from its `*.dist-info/licenses/` folder.

Usage (from the repository root; needs the exact versions, e.g.
`pip install numpy==2.4.6 pytest==9.0.3 click==8.4.0 networkx==3.6.1`):

    python -m minieagle.data.build_ood_prompts [--out DIR]
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from minieagle.data import CORPORA, SPLITS, load_text
from minieagle.errors import InvalidInputError, MissingFileError

_OUT = Path(__file__).resolve().parent
_TOKENIZER = _OUT.parent / "pretrained" / "small" / "minieagle_tokenizer.json"

_SEED = 2024
_PER_PACKAGE = 6  # per kind: 4 packages x 6 = 24 prose and 24 code passages
_ROUNDS = 2  # a second passage from a file only when a package has too few files
_MAX_CHARS = 600
_MIN_PROSE_CHARS = 250
_MIN_TOKENS = 64
_WINDOW = 50  # corpus windows of 50 characters every 10: any shared run of 59 is found
_STRIDE = 10
KINDS = ("prose", "code")


@dataclass(frozen=True)
class _Source:
    """A distribution whose import packages give passages, and the licence they are under."""

    package: str  # the distribution name, as pip knows it
    version: str
    license: str  # SPDX identifier
    roots: tuple[str, ...]  # import packages (top-level folders in site-packages)
    license_file: str  # path inside the .dist-info folder
    license_note: str = ""


_SOURCES = (
    _Source(
        "numpy", "2.4.6", "BSD-3-Clause", ("numpy",), "licenses/LICENSE.txt",
        "The NumPy licence, the first section of LICENSE.txt; the rest of that file covers "
        "libraries bundled in the binary wheel (OpenBLAS, LAPACK, ...), none of them excerpted.",
    ),
    _Source("pytest", "9.0.3", "MIT", ("_pytest", "pytest"), "licenses/LICENSE"),
    _Source("click", "8.4.0", "BSD-3-Clause", ("click",), "licenses/LICENSE.txt"),
    _Source("networkx", "3.6.1", "BSD-3-Clause", ("networkx",), "licenses/LICENSE.txt"),
)  # fmt: skip

# Copied from or derived from the standard library, or under another licence.
_SKIP_FILES = (
    "numpy/_utils/",  # _inspect.py is a subset of the stdlib inspect, _pep440.py is from packaging
    "numpy/distutils/",  # extends the stdlib distutils (deprecated, removed in Python 3.12)
    "_pytest/_io/pprint.py",  # imported from CPython's pprint
    "_pytest/pathlib.py",  # parts copied from CPython's pathlib
    "_pytest/recwarn.py",  # WarningsRecorder is adapted from the stdlib warnings.catch_warnings
    "click/parser.py",  # derived from the stdlib optparse (PSF)
    "click/_textwrap.py",  # mirrors the stdlib textwrap.TextWrapper._wrap_chunks
)
# A passage (or, for code, its whole function) that mentions one of these may be derived from the
# standard library, or point into its documentation: left out.
_DERIVED_MARKERS = ("copied from", "adapted from `", "cpython", "python.org", "standard library")

_UNDERLINE = re.compile(r"^\s*([-=~^*#+])\1{2,}\s*$", re.M)
_FIELD = re.compile(r"^\w[\w, ]*\s:(\s|$)")  # numpydoc "name : type" lines
_NOT_PROSE_LINE = (">>>", "...", "..", "-", "*", "+", "|", ":", "#")
_ROLE = re.compile(r":\w+:`")
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def _mentions_derivation(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _DERIVED_MARKERS)


def _is_prose(paragraph: str) -> bool:
    """Whether a docstring paragraph reads as plain English prose (see the module docstring)."""
    lines = paragraph.splitlines()
    if len(paragraph) < _MIN_PROSE_CHARS or not paragraph.isascii() or not paragraph[0].isupper():
        return False
    if any(line != line.lstrip() or line.startswith(_NOT_PROSE_LINE) for line in lines):
        return False
    if _FIELD.match(lines[0]) or _UNDERLINE.search(paragraph) or "::" in paragraph:
        return False
    if "http" in paragraph or "www." in paragraph or paragraph.count("`") > 4:
        return False
    if _ROLE.search(paragraph) or not paragraph.endswith("."):
        return False  # a reST role, or a paragraph that introduces a list or an example
    letters = sum(c.isalpha() or c == " " for c in paragraph)
    return letters >= 0.85 * len(paragraph)


def _cut_prose(paragraph: str) -> str:
    """At most `_MAX_CHARS` characters: up to the last sentence end, else the last space."""
    if len(paragraph) <= _MAX_CHARS:
        return paragraph
    head = paragraph[: _MAX_CHARS + 1]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= _MIN_PROSE_CHARS:
        return head[: ends[-1]]
    return head[: head.rstrip().rfind(" ")].rstrip()


def _definitions(tree: ast.Module) -> list[ast.AST]:
    """The module, its top-level classes and functions, and the methods of those classes."""
    nodes: list[ast.AST] = [tree]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nodes.append(node)
        if isinstance(node, ast.ClassDef):
            nodes.extend(
                n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    return nodes


def _prose_passages(tree: ast.Module, lines: list[str]) -> list[str]:
    """The prose paragraphs of the docstrings of `_definitions(tree)`, cut to `_MAX_CHARS`."""
    del lines  # docstrings come from the tree
    passages = []
    for node in _definitions(tree):
        docstring = ast.get_docstring(node, clean=True)
        if docstring and not _mentions_derivation(docstring):
            paragraphs = (p.strip() for p in re.split(r"\n\s*\n", docstring))
            passages.extend(_cut_prose(p) for p in paragraphs if _is_prose(p))
    return passages


def _code_passage(node: ast.AST, lines: list[str]) -> str | None:
    """A function's source from its first decorator, dedented and cut at a whole line, or None."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    decorators = [ast.unparse(d).split(".")[-1] for d in node.decorator_list]
    if node.name.startswith("test") or "overload" in decorators:
        return None
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    function_lines = lines[start - 1 : node.end_lineno]
    whole = "\n".join(function_lines)
    if not whole.isascii() or "\t" in whole or _mentions_derivation(whole):
        return None
    indent = " " * node.col_offset
    if any(line.strip() and not line.startswith(indent) for line in function_lines):
        return None  # a multi-line string reaches column 0; dedenting would change it
    kept, size = [], 0
    for line in textwrap.dedent(whole).splitlines():
        if size + len(line) + 1 > _MAX_CHARS:
            break
        kept.append(line)
        size += len(line) + 1
    docstring_end = 0  # lines (from `start`) up to the end of the docstring, if there is one
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        docstring_end = first.end_lineno - start + 1
    code_after = [line for line in kept[docstring_end:] if line.strip()]
    if len(code_after) < 4 or len(kept) < 6:
        return None
    return "\n".join(kept).rstrip()


def _code_passages(tree: ast.Module, lines: list[str]) -> list[str]:
    """The functions and methods of `_definitions(tree)` that `_code_passage` accepts."""
    passages = (_code_passage(node, lines) for node in _definitions(tree))
    return [p for p in passages if p is not None]


def _distribution(spec: _Source) -> importlib.metadata.Distribution:
    try:
        dist = importlib.metadata.distribution(spec.package)
    except importlib.metadata.PackageNotFoundError:
        raise MissingFileError(
            f"package {spec.package!r} is not installed; the prompts were built from "
            f"{spec.package}=={spec.version}: pip install {spec.package}=={spec.version}"
        ) from None
    if dist.version != spec.version:
        raise InvalidInputError(
            f"{spec.package} {dist.version} is installed, but the prompts were built from "
            f"{spec.version}; another version gives other passages: "
            f"pip install {spec.package}=={spec.version}"
        )
    return dist


def _candidate_files(spec: _Source, dist: importlib.metadata.Distribution) -> list[str]:
    """The `.py` files of the distribution's import packages, sorted, without tests and skips."""
    files = []
    for path in dist.files or ():
        name = str(path)
        parts = path.parts
        if not name.endswith(".py") or parts[0] not in spec.roots:
            continue
        if "tests" in parts or parts[-1].startswith("test_") or parts[-1] == "conftest.py":
            continue
        if name.startswith(_SKIP_FILES):
            continue
        files.append(name)
    return sorted(files)


class _Checker:
    """The two acceptance tests that need data: token count, and no overlap with the corpora."""

    def __init__(self) -> None:
        from minieagle.tokenizer import Tokenizer

        self.tokenizer = Tokenizer.load(_TOKENIZER)
        self.corpus_windows: set[str] = set()  # ~0.9 M strings, ~100 MB
        for corpus in CORPORA:
            for split in SPLITS:
                text = load_text(corpus, split)
                starts = range(0, len(text) - _WINDOW + 1, _STRIDE)
                self.corpus_windows.update(text[i : i + _WINDOW] for i in starts)

    def in_corpora(self, text: str) -> bool:
        """Whether `text` shares a run of `_WINDOW + _STRIDE - 1` characters with a corpus.

        Such a run contains a whole corpus window (they start every `_STRIDE` characters), which
        is one of the passage's windows starting at every position."""
        starts = range(len(text) - _WINDOW + 1)
        return any(text[i : i + _WINDOW] in self.corpus_windows for i in starts)

    def accepts(self, text: str) -> bool:
        return len(self.tokenizer.encode(text)) >= _MIN_TOKENS and not self.in_corpora(text)


def _select(spec: _Source, kind: str, checker: _Checker, taken: set[str]) -> list[dict]:
    """`_PER_PACKAGE` passages of `kind` from `spec`, at most one per file in each round."""
    dist = _distribution(spec)
    rng = random.Random(f"{_SEED}/{kind}/{spec.package}")
    files = _candidate_files(spec, dist)
    rng.shuffle(files)
    extract = _prose_passages if kind == "prose" else _code_passages
    remaining: dict[str, list[str]] = {}  # per file, its passages not yet tried, shuffled
    records = []
    for _ in range(_ROUNDS):
        for name in files:
            if name not in remaining:
                source = Path(dist.locate_file(name)).read_text(encoding="utf-8")
                remaining[name] = extract(ast.parse(source), source.splitlines())
                rng.shuffle(remaining[name])
            while remaining[name]:
                text = remaining[name].pop(0)
                if text[:_WINDOW] not in taken and checker.accepts(text):
                    taken.add(text[:_WINDOW])
                    records.append(
                        {"kind": kind, "package": spec.package, "version": spec.version,
                         "source": name, "license": spec.license, "text": text}
                    )  # fmt: skip
                    break
            if len(records) == _PER_PACKAGE:
                return records
    raise InvalidInputError(
        f"{spec.package} gave {len(records)} {kind} passages, expected {_PER_PACKAGE}; "
        "loosen the filters or add a package to _SOURCES"
    )


def build_records() -> list[dict]:
    """All prompt records, prose then code, the packages taking turns within each kind."""
    checker = _Checker()
    taken: set[str] = set()
    records = []
    for kind in KINDS:
        by_package = [_select(spec, kind, checker, taken) for spec in _SOURCES]
        records.extend(r for turn in zip(*by_package, strict=True) for r in turn)
    return records


def license_text() -> str:
    """The licences of the packages in `_SOURCES`, each under a header naming its origin."""
    sections = []
    for spec in _SOURCES:
        dist = _distribution(spec)
        text = dist.read_text(spec.license_file)
        if text is None:
            raise MissingFileError(
                f"{spec.package}: {spec.license_file} is missing from its dist-info"
            )
        if spec.package == "numpy":
            text = text.split("\n----\n")[0]
        origin = f"{spec.package}-{spec.version}.dist-info/{spec.license_file}"
        header = f"{spec.package} {spec.version} ({spec.license}), from {origin}"
        note = f"\n{textwrap.fill(spec.license_note, 79)}" if spec.license_note else ""
        sections.append(f"{'=' * 79}\n{header}{note}\n{'=' * 79}\n\n{text.strip()}\n")
    intro = (
        "Licences of the packages whose docstrings and source excerpts make up ood_prompts.jsonl\n"
        "(see PROVENANCE.md and build_ood_prompts.py). Each excerpt keeps its package's licence.\n"
    )
    return intro + "\n" + "\n".join(sections)


def write(out: Path) -> list[dict]:
    """Write `ood_prompts.jsonl` and `LICENSE-OOD.txt` into the folder `out`; return the records."""
    records = build_records()
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (out / "ood_prompts.jsonl").write_text(payload, encoding="utf-8")
    (out / "LICENSE-OOD.txt").write_text(license_text(), encoding="utf-8")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=_OUT)
    args = parser.parse_args()
    records = write(args.out)
    for kind in KINDS:
        chosen = [r for r in records if r["kind"] == kind]
        files = sorted({r["source"] for r in chosen})
        print(f"{kind}: {len(chosen)} passages from {len(files)} files")


if __name__ == "__main__":
    main()
