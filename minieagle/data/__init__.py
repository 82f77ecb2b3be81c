"""The two bundled corpora and their deterministic train/val/test splits.

- `"prose"`: English prose, the Python 3.11 documentation (reST sources, lightly cleaned).
- `"code"`: Python source, the pure-Python standard library of CPython 3.11.7.

Both are under the PSF licence (`LICENSE-PSF.txt`); `PROVENANCE.md` says where they come from and
`build_corpora.py` rebuilds them. Each corpus is a list of documents, one per source file.

The split of a document depends only on its `source` path: the first 8 bytes of
sha256(source) pick one of 100 buckets; buckets 0-89 are train, 90-94 val, 95-99 test. Adding or
removing a file therefore never moves another file between splits.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
from dataclasses import dataclass
from pathlib import Path

from minieagle.errors import InvalidInputError, MissingFileError

CORPORA = ("prose", "code")
SPLITS = ("train", "val", "test")

_DATA_DIR = Path(__file__).resolve().parent
_SPLIT_BUCKETS = {"train": range(0, 90), "val": range(90, 95), "test": range(95, 100)}


@dataclass(frozen=True)
class Document:
    """One source file of a corpus: its path relative to the source root, and its text."""

    source: str
    text: str


def _check_corpus(corpus: str) -> None:
    if corpus not in CORPORA:
        raise InvalidInputError(f"corpus={corpus!r} is unknown; pass one of {CORPORA}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise InvalidInputError(f"split={split!r} is unknown; pass one of {SPLITS}")


def split_of(source: str) -> str:
    """The split ("train", "val" or "test") that the document named `source` belongs to."""
    bucket = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "big") % 100
    for split, buckets in _SPLIT_BUCKETS.items():
        if bucket in buckets:
            return split
    raise AssertionError(f"bucket {bucket} is in no split")  # unreachable: buckets cover 0-99


@functools.cache
def _load(corpus: str) -> tuple[Document, ...]:
    path = _DATA_DIR / f"{corpus}.jsonl.xz"
    if not path.is_file():
        raise MissingFileError(
            f"{path} is missing; reinstall minieagle or rebuild it with "
            "`python -m minieagle.data.build_corpora`"
        )
    with lzma.open(path, "rt", encoding="utf-8") as lines:
        documents = tuple(Document(**json.loads(line)) for line in lines if line.strip())
    return tuple(sorted(documents, key=lambda d: d.source))


OOD_FILE = _DATA_DIR / "ood_prompts.jsonl"


@functools.cache
def ood_records() -> tuple[dict, ...]:
    """The records of `data/ood_prompts.jsonl`, the out-of-domain passages (24 prose, 24 code
    from other packages): {"kind", "package", "version", "source", "license", "text"}, in file
    order (PROVENANCE.md, data/build_ood_prompts.py)."""
    if not OOD_FILE.is_file():
        raise MissingFileError(
            f"{OOD_FILE} is missing; reinstall minieagle or rebuild it with "
            "`python -m minieagle.data.build_ood_prompts`"
        )
    with OOD_FILE.open(encoding="utf-8") as lines:
        return tuple(json.loads(line) for line in lines if line.strip())


REQUESTS_FILE = _DATA_DIR / "requests.jsonl"
# The batches of general requests, each its own file: a new batch never changes the order,
# and so the shuffled passes (`distill --source requests`), of an earlier one.
REQUEST_FILES = {
    1: REQUESTS_FILE,
    2: _DATA_DIR / "requests-2.jsonl",
    3: _DATA_DIR / "requests-3.jsonl",
    4: _DATA_DIR / "requests-4.jsonl",
    5: _DATA_DIR / "requests-5.jsonl",
}


@functools.cache
def _requests(batch: int) -> tuple[dict, ...]:
    path = REQUEST_FILES[batch]
    if not path.is_file():
        raise MissingFileError(f"{path} is missing; reinstall minieagle")
    with path.open(encoding="utf-8") as lines:
        return tuple(json.loads(line) for line in lines if line.strip())


def check_request_batch(batch) -> None:
    if isinstance(batch, bool) or batch not in REQUEST_FILES:
        raise InvalidInputError(
            f"request batch {batch!r} is not one of {sorted(REQUEST_FILES)} ("
            + ", ".join(f"{n}: data/{path.name}" for n, path in REQUEST_FILES.items())
            + "); pass one of those"
        )


def request_records(split: str | None = None, batch: int = 1) -> list[dict]:
    """The general requests of batch `batch` ({"category", "request"}, written for training by
    the minieagle team; PROVENANCE.md): batch 1 is `data/requests.jsonl`, batch N > 1
    `data/requests-N.jsonl` (`REQUEST_FILES`), 1,000 each, 50 in each of the same 20
    categories. In file order: all of them, or those of `split`, which a request's own text
    picks as a document's path picks its split (`split_of`): adding a request never moves
    another."""
    check_request_batch(batch)
    if split is None:
        return list(_requests(batch))
    _check_split(split)
    return [r for r in _requests(batch) if split_of(r["request"]) == split]


def load_documents(corpus: str) -> list[Document]:
    """All documents of `corpus` ("prose" or "code"), sorted by `source`."""
    _check_corpus(corpus)
    return list(_load(corpus))


def load_split(corpus: str, split: str) -> list[Document]:
    """The documents of `corpus` in `split` ("train" ~90%, "val" ~5%, "test" ~5%), by `source`."""
    _check_corpus(corpus)
    _check_split(split)
    return [d for d in _load(corpus) if split_of(d.source) == split]


@functools.cache
def _text(corpus: str, split: str) -> str:
    return "\n\n".join(d.text for d in load_split(corpus, split))


def load_text(corpus: str, split: str) -> str:
    """The documents of `load_split(corpus, split)` joined with a blank line ("\\n\\n")."""
    _check_corpus(corpus)
    _check_split(split)
    return _text(corpus, split)
