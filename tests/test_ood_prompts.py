"""The out-of-domain prompts (`data/ood_prompts.jsonl`): out of the training corpora, long enough,
licensed and recorded, rebuilt identically by their builder; and the prompt-set functions."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from pathlib import Path

import pytest

from minieagle.bench import OOD_KINDS, PROMPT_SETS, heldout_prompts, ood_prompts, prompt_set
from minieagle.cli import DEFAULT_MODEL
from minieagle.data import CORPORA, SPLITS, load_text
from minieagle.data import build_ood_prompts as builder
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.tokenizer import Tokenizer

DATA_DIR = Path(__file__).resolve().parents[1] / "minieagle" / "data"
FIELDS = {"kind", "package", "version", "source", "license", "text"}
SOURCES = {spec.package: spec for spec in builder._SOURCES}
WINDOW = 60  # a prompt shares no 60-character run with the corpora
WINDOW_STRIDE = 30  # every window of a prompt starting at a multiple of 30 is checked


@pytest.fixture(scope="module")
def records() -> list[dict]:
    lines = (DATA_DIR / "ood_prompts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.load(DEFAULT_MODEL / "minieagle_tokenizer.json")


@pytest.fixture(scope="module")
def corpus_texts() -> list[str]:
    return [load_text(corpus, split) for corpus in CORPORA for split in SPLITS]


def _windows_in_corpora(text: str, corpus_texts: list[str]) -> list[str]:
    """The `WINDOW`-character windows of `text` (every `WINDOW_STRIDE`) found in a corpus text."""
    starts = range(0, max(1, len(text) - WINDOW + 1), WINDOW_STRIDE)
    windows = [text[i : i + WINDOW] for i in starts]
    return [w for w in windows if any(w in corpus for corpus in corpus_texts)]


def test_file_loads_with_both_kinds_and_the_documented_fields(records):
    assert all(set(r) == FIELDS for r in records)
    assert [r["kind"] for r in records] == ["prose"] * 24 + ["code"] * 24
    assert all(0 < len(r["text"]) <= 600 and r["text"] == r["text"].strip() for r in records)
    assert len({r["text"] for r in records}) == len(records)
    for record in records:
        spec = SOURCES[record["package"]]
        assert record["source"].split("/")[0] in spec.roots and record["source"].endswith(".py")
        assert "tests" not in record["source"].split("/")


@pytest.mark.parametrize("kind", ["prose", "code"])
def test_the_packages_take_turns_so_a_few_prompts_mix_them(records, kind):
    packages = [r["package"] for r in records if r["kind"] == kind]
    assert packages == [spec.package for spec in builder._SOURCES] * 6


def test_every_prompt_encodes_to_at_least_32_tokens(records, tokenizer):
    assert all(len(tokenizer.encode(r["text"])) >= 32 for r in records)
    prompts = ood_prompts(tokenizer, per_kind=24)
    assert [kind for kind, _ in prompts] == ["ood-prose"] * 24 + ["ood-code"] * 24
    assert all(len(ids) == 32 and ids[0] == tokenizer.bos_id for _, ids in prompts)
    assert all(tokenizer.bos_id not in ids[1:] for _, ids in prompts)


def test_no_prompt_occurs_in_the_training_corpora(records, corpus_texts):
    """The out-of-domain property: no 60-character window of a prompt (one every 30 characters,
    over the whole passage) occurs anywhere in either corpus, in any split."""
    found = {
        r["source"]: hits for r in records if (hits := _windows_in_corpora(r["text"], corpus_texts))
    }
    assert found == {}


def test_the_corpus_check_catches_a_passage_from_the_corpora(corpus_texts):
    code = load_text("code", "test")
    prose = load_text("prose", "val")
    for copied in (code[1000:1400], "An aside.\n" + prose[5000:5200]):
        assert _windows_in_corpora(copied, corpus_texts)
    assert not _windows_in_corpora("An original sentence, written for this test only. " * 4, [])


@pytest.fixture(scope="module")
def checker() -> builder._Checker:
    return builder._Checker()


@pytest.mark.parametrize("start", [0, 12_345, 987_654, 2_000_001])
def test_the_builder_rejects_any_59_character_run_of_a_corpus(checker, start):
    """The builder's documented bound: a shared run of `_WINDOW + _STRIDE - 1` = 59 characters,
    wherever it starts in the corpus, is found (the test split is not in the training split, but
    the builder keeps all splits out)."""
    run_length = builder._WINDOW + builder._STRIDE - 1
    for corpus in ("prose", "code"):
        text = load_text(corpus, "train")
        run = text[start : start + run_length]
        assert checker.in_corpora("\x00" * 7 + run + "\x00" * 7), (corpus, start)
        assert not checker.in_corpora("\x00" + run[: builder._WINDOW - 1] + "\x00")


def test_licences_are_recorded(records):
    licence_file = (DATA_DIR / "LICENSE-OOD.txt").read_text(encoding="utf-8")
    provenance = (DATA_DIR / "PROVENANCE.md").read_text(encoding="utf-8")
    for package in {r["package"] for r in records}:
        spec = SOURCES[package]
        assert all(
            (r["license"], r["version"]) == (spec.license, spec.version)
            for r in records
            if r["package"] == package
        )
        assert f"{package} {spec.version} ({spec.license})" in licence_file
        assert f"| {package} | {spec.version} | {spec.license} |" in provenance
    assert licence_file.count("Redistribution and use in source and binary forms") == 3  # BSD
    assert licence_file.count("Permission is hereby granted, free of charge") == 1  # MIT
    assert "Name: OpenBLAS" not in licence_file  # numpy's wheel-only section is left out
    assert "ood_prompts.jsonl" in provenance and "LICENSE-OOD.txt" in provenance


def _sources_unavailable() -> str | None:
    """Why the builder cannot reproduce the committed file here, or None when it can."""
    for spec in builder._SOURCES:
        try:
            version = importlib.metadata.version(spec.package)
        except importlib.metadata.PackageNotFoundError:
            return f"{spec.package} is not installed (the prompts need {spec.version})"
        if version != spec.version:
            return (
                f"{spec.package} {version} is installed; the prompts were built from {spec.version}"
            )
    return None


def test_the_builder_is_deterministic(tmp_path):
    reason = _sources_unavailable()
    if reason is not None:
        pytest.skip(f"cannot rebuild the prompts: {reason}")
    builder.write(tmp_path)
    for name in ("ood_prompts.jsonl", "LICENSE-OOD.txt"):
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes(), name


def test_the_builder_names_a_missing_or_other_version_package(monkeypatch):
    spec = SOURCES["click"]
    monkeypatch.setattr(builder, "_SOURCES", (dataclasses.replace(spec, version="0.0"),))
    with pytest.raises(
        InvalidInputError, match=r"click .* installed.*0\.0.*pip install click==0\.0"
    ):
        builder.license_text()
    missing = dataclasses.replace(spec, package="no-such-package-minieagle")
    monkeypatch.setattr(builder, "_SOURCES", (missing,))
    with pytest.raises(MissingFileError, match="'no-such-package-minieagle' is not installed"):
        builder.license_text()


@pytest.mark.parametrize("name", PROMPT_SETS)
def test_prompt_set_concatenates_heldout_then_ood(tokenizer, name):
    heldout = heldout_prompts(tokenizer, per_corpus=3)
    ood = ood_prompts(tokenizer, per_kind=3)
    expected = {"heldout": heldout, "ood": ood, "both": heldout + ood}[name]
    prompts = prompt_set(tokenizer, name, per_kind=3)
    assert prompts == expected
    assert all(len(ids) == 32 for _, ids in prompts)
    assert {kind for kind, _ in ood} == set(OOD_KINDS)


def test_prompt_set_rejects_an_unknown_name(tokenizer):
    with pytest.raises(InvalidInputError, match=r"prompt set 'ood-prose' is unknown.*'heldout'"):
        prompt_set(tokenizer, "ood-prose", per_kind=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"per_kind": 0}, r"per_kind=0 is outside \[1, 24\]"),
        ({"per_kind": 25}, r"per_kind=25 is outside \[1, 24\].*pass a count such as 2"),
        ({"length": 500}, r"length=500 exceeds the \d+ tokens .* of an ood-prose prompt"),
    ],
)
def test_ood_prompts_rejects_bad_counts(tokenizer, kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        ood_prompts(tokenizer, **kwargs)


def test_ood_prompts_need_a_tokenizer():
    with pytest.raises(InvalidInputError, match="no tokenizer.*'heldout'"):
        prompt_set(None, "ood")
    assert len(prompt_set(None, "heldout")) == 4  # held-out prompts fall back to random ids


def test_a_missing_prompt_file_says_how_to_rebuild_it(monkeypatch, tmp_path, tokenizer):
    import minieagle.data as data

    data.ood_records.cache_clear()
    monkeypatch.setattr(data, "OOD_FILE", tmp_path / "ood_prompts.jsonl")
    try:
        with pytest.raises(MissingFileError, match="python -m minieagle.data.build_ood_prompts"):
            ood_prompts(tokenizer)
    finally:
        data.ood_records.cache_clear()
