"""Rebuild `edit_prompts.jsonl`: "edit this code" prompts whose continuation repeats their input.

Prompt lookup and other copying drafters shine where the answer restates the question: code
edits, refactors, summaries that quote. These prompts make that case measurable on the shipped
target. Each holds one function from the held-out (test) split of the bundled code corpus (the
CPython 3.11 standard library, PSF licence, PROVENANCE.md), then a comment asking for it back
with one parameter renamed, then the renamed function's first line:

    def tabsize(text, width):
        ...

    # the same function, with `width` renamed to `new_width`:
    def tabsize(text, new_width):

so a model that follows the instruction copies the function with the one change. The record's
`expected` field is that continuation (the rest of the renamed function), for checking.

Candidates (`_candidates`): every top-level function and every method of a top-level class in
the test split's documents, dedented, ASCII without tabs, 5 to `_MAX_LINES` lines and at most
`_MAX_CHARS` characters, not a test. The renamed name is the first parameter (not `self`/`cls`)
that the body uses at least twice and that occurs, as a token, only as that parameter and its
uses (no attribute or keyword of the same spelling, which a plain rename would also change); its
new name is `_RENAMES[old]` or `new_<old>`. Selection, seeded by `_SEED`: the candidates of each
document (documents sorted by path) are shuffled, the documents take turns giving one each, and
the first `_COUNT` are kept, at most `_PER_DOCUMENT` per document.

minieagle never imports this at runtime; `minieagle.bench.edit_prompts` reads the file it
writes. Usage (from the repository root): `python -m minieagle.data.build_edit_prompts [--out F]`
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import random
import textwrap
import tokenize
from pathlib import Path

from minieagle.data import load_split

_OUT = Path(__file__).resolve().parent / "edit_prompts.jsonl"
_SEED = 2026
_COUNT = 8
_PER_DOCUMENT = 1
_MAX_LINES = 24
_MAX_CHARS = 900
_RENAMES = {
    "path": "filename",
    "name": "label",
    "text": "source",
    "data": "payload",
    "value": "item",
    "s": "string",
    "n": "count",
    "x": "number",
    "obj": "target",
    "node": "tree_node",
    "filename": "path",
    "width": "columns",
}


def _functions(source: str) -> list[str]:
    """Top-level functions and the methods of top-level classes, dedented."""
    tree = ast.parse(source)
    lines = source.splitlines()
    nodes = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            nodes.append(node)
        if isinstance(node, ast.ClassDef):
            nodes.extend(n for n in node.body if isinstance(n, ast.FunctionDef))
    out = []
    for node in nodes:
        if node.decorator_list or node.name.startswith("test"):
            continue
        function_lines = lines[node.lineno - 1 : node.end_lineno]
        indent = " " * node.col_offset
        if any(line.strip() and not line.startswith(indent) for line in function_lines):
            continue  # a multi-line string reaches column 0; dedenting would change it
        out.append(textwrap.dedent("\n".join(function_lines)).rstrip())
    return out


def _names(code: str) -> list[str]:
    return [
        t.string
        for t in tokenize.generate_tokens(io.StringIO(code + "\n").readline)
        if t.type == tokenize.NAME
    ]


def _rename(code: str) -> tuple[str, str] | None:
    """(old, new): the parameter to rename (see the module docstring), or None."""
    function = ast.parse(code).body[0]
    names = _names(code)
    for arg in function.args.args + function.args.kwonlyargs:
        old = arg.arg
        if old in ("self", "cls"):
            continue
        uses = sum(isinstance(n, ast.Name) and n.id == old for n in ast.walk(function))
        if uses >= 2 and names.count(old) == uses + 1:  # the parameter and its uses, nothing else
            new = _RENAMES.get(old, f"new_{old}")
            if new not in names:
                return old, new
    return None


def _apply(code: str, old: str, new: str) -> str:
    """`code` with every NAME token `old` replaced by `new` (positions kept line by line)."""
    lines = code.splitlines()
    hits = [
        t.start
        for t in tokenize.generate_tokens(io.StringIO(code + "\n").readline)
        if t.type == tokenize.NAME and t.string == old
    ]
    for row, col in reversed(hits):  # right to left, so earlier columns stay valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "\n".join(lines)


def _acceptable(code: str) -> bool:
    lines = code.splitlines()
    return (
        code.isascii()
        and "\t" not in code
        and 5 <= len(lines) <= _MAX_LINES
        and len(code) <= _MAX_CHARS
    )


def build_records() -> list[dict]:
    """The prompt records, in selection order (see the module docstring)."""
    rng = random.Random(_SEED)
    queues = []
    for document in load_split("code", "test"):
        candidates = []
        for code in _functions(document.text):
            change = _rename(code) if _acceptable(code) else None
            if change is not None:
                candidates.append((document.source, code, change))
        rng.shuffle(candidates)
        if candidates:
            queues.append(candidates[:_PER_DOCUMENT])
    records = []
    while len(records) < _COUNT and any(queues):
        for queue in queues:
            if queue and len(records) < _COUNT:
                source, code, (old, new) = queue.pop(0)
                edited = _apply(code, old, new)
                first, rest = edited.split("\n", 1)
                instruction = f"# the same function, with `{old}` renamed to `{new}`:"
                records.append(
                    {"kind": "edit", "corpus": "code", "split": "test", "source": source,
                     "license": "PSF-2.0", "change": {"rename": [old, new]},
                     "text": f"{code}\n\n{instruction}\n{first}\n", "expected": rest + "\n"}
                )  # fmt: skip
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=_OUT)
    args = parser.parse_args()
    records = build_records()
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    args.out.write_text(payload, encoding="utf-8")
    print(f"{len(records)} edit prompts from {len({r['source'] for r in records})} files")


if __name__ == "__main__":
    main()
