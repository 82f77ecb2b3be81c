"""Rebuild the two bundled corpora, `prose.jsonl.xz` and `code.jsonl.xz`.

This script is how the bundled files were made; minieagle never imports it at runtime.

Sources (both under the PSF licence, see `LICENSE-PSF.txt` and `PROVENANCE.md`):

- **prose**: the reStructuredText sources of the Python 3.11 documentation, as shipped by the
  Debian 12 package `python3.11-doc` (version 3.11.2-6+deb12u9) under
  `/usr/share/doc/python3.11/html/_sources/**/*.rst.txt`. We keep the tutorial, the language
  reference, the HOWTOs, the FAQ, "using", "extending", the glossary and the library reference
  pages of at most `_MAX_PROSE_BYTES`, and lightly clean the markup (`_clean_rest`): labels,
  index entries and directive options are dropped, roles such as :func:`len` become `len`,
  heading underlines are removed. Code examples inside the prose are kept.
- **code**: the pure-Python standard library of CPython 3.11.7 (the pyenv install at
  `/root/.pyenv/versions/3.11.7/lib/python3.11`): the top-level modules and the packages in
  `_CODE_PACKAGES`, without test suites and without files over `_MAX_CODE_BYTES` (generated tables
  and the largest modules). Files are kept verbatim.

Each output line is one JSON object `{"source": <path relative to the source root>, "text": ...}`,
one per file, sorted by `source`, compressed with xz preset 9 (extreme).

Usage (from the repository root; needs `apt-get install python3.11-doc`):

    python -m minieagle.data.build_corpora [--docs DIR] [--stdlib DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
from pathlib import Path

_DOCS_ROOT = Path("/usr/share/doc/python3.11/html/_sources")
_STDLIB_ROOT = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")
_OUT = Path(__file__).resolve().parent

_PROSE_SECTIONS = ("tutorial", "reference", "howto", "faq", "using", "extending", "library")
_PROSE_FILES = ("glossary.rst.txt",)
_MAX_PROSE_BYTES = 40_000  # raw size cap per library page; keeps the corpus near 4 MB

_CODE_PACKAGES = ("asyncio", "collections", "concurrent", "importlib", "json", "re", "tomllib")
_MAX_CODE_BYTES = 100_000
_CODE_SKIP_PREFIXES = ("_sysconfigdata", "__phello__", "this.py", "antigravity.py")

# Directives whose first line carries a signature worth keeping, e.g. ".. function:: len(s)".
_SIGNATURE_DIRECTIVES = {
    "function", "method", "class", "attribute", "data", "exception", "decorator",
    "classmethod", "staticmethod", "module", "opcode", "cmdoption", "envvar", "describe",
}  # fmt: skip
_ADMONITIONS = {"note": "Note:", "warning": "Warning:", "seealso": "See also:", "tip": "Tip:"}
_VERSION_NOTES = {
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
}

_ROLE = re.compile(r":[\w.+-]+(?::[\w.+-]+)?:`([^`]+)`")
_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$", re.S)
_LINK = re.compile(r"`([^`<]+?)(?:\s*<[^>]+>)?`__?")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$")
_UNDERLINE = re.compile(r"^([=\-~^*#\"'+`])\1{2,}\s*$")


def _role_text(match: re.Match) -> str:
    text = match.group(1)
    titled = _TARGET.match(text)
    if titled and titled.group(1):
        return titled.group(1)
    text = text.lstrip("!")
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return text


def _clean_inline(line: str) -> str:
    line = _ROLE.sub(_role_text, line)
    line = line.replace("``", "`")
    line = _LINK.sub(r"\1", line)
    return re.sub(r"\s*\[#\w*\]_", "", line)


def _clean_rest(source: str) -> str:
    """Turn reST into readable plain text; keep paragraphs, lists and literal blocks."""
    out: list[str] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive:
            indent, name, argument = directive.groups()
            i += 1
            while i < len(lines) and re.match(r"^\s+:[\w -]+:", lines[i]):
                i += 1  # directive options such as ":noindex:" or ":synopsis: ..."
            if name in _SIGNATURE_DIRECTIVES or name.split(":")[-1] in _SIGNATURE_DIRECTIVES:
                out.append(indent + argument)
            elif name in _ADMONITIONS:
                out.append(indent + " ".join(filter(None, (_ADMONITIONS[name], argument))))
            elif name in _VERSION_NOTES:
                out.append(f"{indent}{_VERSION_NOTES[name]} {argument}.")
            elif name in ("index", "toctree", "only", "raw", "image", "figure", "include"):
                body_indent = len(indent)
                while i < len(lines) and (
                    not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > body_indent
                ):
                    i += 1  # skip the whole indented body
            continue
        stripped = line.strip()
        if stripped.startswith(".. ") or stripped == "..":
            # a label (".. _name:"), a substitution or a comment, possibly with an indented body
            i += 1
            while i < len(lines) and lines[i].startswith("   ") and lines[i].strip():
                i += 1
            continue
        if _UNDERLINE.match(line):
            i += 1
            continue
        if stripped == "::":
            line = ""
        elif line.endswith("::"):
            line = line[:-1]
        out.append(_clean_inline(line.rstrip()))
        i += 1
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


def _prose_documents(root: Path) -> list[dict[str, str]]:
    paths = [root / name for name in _PROSE_FILES]
    for section in _PROSE_SECTIONS:
        for path in (root / section).rglob("*.rst.txt"):
            if section == "library" and path.stat().st_size > _MAX_PROSE_BYTES:
                continue
            paths.append(path)
    return [
        {"source": str(p.relative_to(root)), "text": _clean_rest(p.read_text(encoding="utf-8"))}
        for p in paths
    ]


def _code_documents(root: Path) -> list[dict[str, str]]:
    paths = list(root.glob("*.py"))
    for package in _CODE_PACKAGES:
        paths.extend(root.joinpath(package).rglob("*.py"))
    documents = []
    for path in paths:
        relative = path.relative_to(root)
        if relative.name.startswith(_CODE_SKIP_PREFIXES) or path.stat().st_size > _MAX_CODE_BYTES:
            continue
        if any(part.startswith("test") for part in relative.parts[:-1]):
            continue
        documents.append({"source": str(relative), "text": path.read_text(encoding="utf-8")})
    return documents


def _write(documents: list[dict[str, str]], path: Path) -> None:
    documents = sorted(documents, key=lambda d: d["source"])
    payload = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents)
    path.write_bytes(lzma.compress(payload.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))
    raw = sum(len(d["text"].encode("utf-8")) for d in documents)
    print(f"{path.name}: {len(documents)} documents, {raw:,} bytes raw, "
          f"{path.stat().st_size:,} bytes xz")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=_DOCS_ROOT)
    parser.add_argument("--stdlib", type=Path, default=_STDLIB_ROOT)
    parser.add_argument("--out", type=Path, default=_OUT)
    args = parser.parse_args()
    _write(_prose_documents(args.docs), args.out / "prose.jsonl.xz")
    _write(_code_documents(args.stdlib), args.out / "code.jsonl.xz")


if __name__ == "__main__":
    main()
