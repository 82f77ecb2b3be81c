"""Tests of the bundled corpora: contents, deterministic disjoint splits, licence files, errors."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from minieagle.data import (
    CORPORA,
    SPLITS,
    Document,
    load_documents,
    load_split,
    load_text,
    split_of,
)
from minieagle.data.build_corpora import _clean_rest

DATA_DIR = Path(__file__).resolve().parents[1] / "minieagle" / "data"


@pytest.mark.parametrize("corpus", CORPORA)
def test_corpus_is_large_sorted_and_unique(corpus: str) -> None:
    documents = load_documents(corpus)
    sources = [d.source for d in documents]
    assert sources == sorted(set(sources))
    assert sum(len(d.text) for d in documents) > 2_000_000
    assert all(d.text.strip() for d in documents)


def test_corpora_hold_what_they_claim() -> None:
    code = load_documents("code")
    assert all(d.source.endswith(".py") for d in code)
    assert not any("test" in d.source.split("/")[:-1] for d in code)
    assert any("def " in d.text for d in code)
    prose = load_documents("prose")
    assert all(d.source.endswith(".rst.txt") for d in prose)
    tutorial = next(d for d in prose if d.source == "tutorial/controlflow.rst.txt")
    assert "The for statement in Python differs" in tutorial.text
    assert ":keyword:" not in tutorial.text and ".. _tut-" not in tutorial.text


@pytest.mark.parametrize("corpus", CORPORA)
def test_splits_are_disjoint_cover_the_corpus_and_are_roughly_90_5_5(corpus: str) -> None:
    everything = [d.source for d in load_documents(corpus)]
    by_split = {split: [d.source for d in load_split(corpus, split)] for split in SPLITS}
    assert sorted(s for sources in by_split.values() for s in sources) == everything
    assert all(by_split.values())  # each split holds documents
    assert 0.8 < len(by_split["train"]) / len(everything) < 0.97


def test_split_rule_matches_the_documented_sha256_buckets() -> None:
    def oracle(source: str) -> str:
        digest = hashlib.sha256(source.encode("utf-8")).digest()
        bucket = int.from_bytes(digest[:8], "big") % 100
        return "train" if bucket < 90 else "val" if bucket < 95 else "test"

    for corpus in CORPORA:
        for document in load_documents(corpus):
            assert split_of(document.source) == oracle(document.source)


def test_load_text_joins_the_split_with_blank_lines() -> None:
    documents = load_split("code", "val")
    assert load_text("code", "val") == "\n\n".join(d.text for d in documents)
    assert load_text("code", "val") is load_text("code", "val")  # cached


def test_documents_are_frozen() -> None:
    document = load_documents("prose")[0]
    assert isinstance(document, Document)
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.text = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: load_documents("poetry"), r"corpus='poetry' is unknown; pass one of \('prose'"),
        (lambda: load_split("prose", "dev"), r"split='dev' is unknown; pass one of \('train'"),
        (lambda: load_text("Code", "train"), r"corpus='Code' is unknown"),
    ],
)
def test_unknown_names_raise_with_the_valid_choices(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_licence_and_provenance_ship_beside_the_corpora() -> None:
    licence = (DATA_DIR / "LICENSE-PSF.txt").read_text()
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence
    provenance = (DATA_DIR / "PROVENANCE.md").read_text()
    for needle in ("prose.jsonl.xz", "code.jsonl.xz", "python3.11-doc", "3.11.7", "PSF"):
        assert needle in provenance
    compressed = sum((DATA_DIR / f"{c}.jsonl.xz").stat().st_size for c in CORPORA)
    assert compressed < 3_000_000


def test_clean_rest_keeps_the_words_and_drops_the_markup() -> None:
    source = (
        ".. _label:\n\nTitle\n=====\n\n.. index:: single: thing\n\n"
        "Use :func:`len` or :meth:`~str.join` with ``x``, see :ref:`the guide <guide>`::\n\n"
        "   >>> len('ab')\n\n.. versionadded:: 3.2\n"
    )
    assert _clean_rest(source) == (
        "Title\n\nUse len or join with `x`, see the guide:\n\n   >>> len('ab')\n\n"
        "New in version 3.2.\n"
    )


def test_requests_split_about_90_5_5_and_stay_apart_from_the_held_out_questions() -> None:
    """data/requests.jsonl and requests-2 to -5.jsonl: distinct requests across
    them all, 50 in each of the same 20 categories in each file, every split about its share,
    and none shares a run of six words with the questions chat_tau holds out
    (benchmarks/chat_tau.py QUESTIONS), so the "questions" kind stays requests no head trained
    on."""
    import collections
    import importlib.util
    import re

    from minieagle.data import REQUEST_FILES, request_records

    everything = []
    for batch in REQUEST_FILES:
        records = request_records(batch=batch)
        assert set(collections.Counter(r["category"] for r in records).values()) == {50}
        assert {r["category"] for r in records} == {r["category"] for r in request_records()}
        parts = {split: request_records(split, batch) for split in ("train", "val", "test")}
        assert sum(len(p) for p in parts.values()) == len(records) == 1000
        assert 0.85 < len(parts["train"]) / len(records) < 0.95 and parts["val"] and parts["test"]
        everything += records
    assert all(set(r) == {"category", "request"} and r["request"].strip() for r in everything)
    texts = [" ".join(re.sub(r"[^a-z0-9 ]", " ", r["request"].lower()).split()) for r in everything]
    assert len(set(texts)) == len(texts)
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "chat_tau.py"
    spec = importlib.util.spec_from_file_location("chat_tau", path)
    chat_tau = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chat_tau)

    def grams(text: str) -> set:
        words = re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()
        return {tuple(words[i : i + 6]) for i in range(len(words) - 5)}

    held_out = set().union(*(grams(q) for q in chat_tau.QUESTIONS))
    shared = [r["request"] for r in everything if grams(r["request"]) & held_out]
    assert not shared, shared[:3]


def test_the_requests_ship_with_their_provenance() -> None:
    from minieagle.data import REQUEST_FILES

    text = (Path(__file__).resolve().parents[1] / "minieagle/data/PROVENANCE.md").read_text()
    assert all(f"\n## {path.name}\n" in text for path in REQUEST_FILES.values())
