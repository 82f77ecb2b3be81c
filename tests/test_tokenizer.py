"""Tests of the byte-level BPE tokenizer: round trips, exact merges, specials, files, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle.data import load_text
from minieagle.tokenizer import FORMAT, PATTERN, Tokenizer

PRETRAINED = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    text = load_text("prose", "train")[:40_000] + "\n\n" + load_text("code", "train")[:40_000]
    return Tokenizer.train(text, 400)


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_decode_inverts_encode_for_any_text(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.decode(tokenizer.encode(text, add_bos=True, add_eos=True)) == text


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(" \t\n\r_(),.:'\"#=abcXYZ019é€😀"), max_size=60))
def test_tokens_never_cross_chunk_boundaries(tokenizer: Tokenizer, text: str) -> None:
    chunk_ends, offset = set(), 0
    for chunk in re.findall(PATTERN, text):
        offset += len(chunk.encode("utf-8"))
        chunk_ends.add(offset)
    token_ends, offset = set(), 0
    for i in tokenizer.encode(text):
        offset += len(tokenizer.token_bytes(i))
        token_ends.add(offset)
    assert offset == len(text.encode("utf-8"))
    assert chunk_ends <= token_ends


def test_round_trips_real_code_and_prose(tokenizer: Tokenizer) -> None:
    for corpus in ("prose", "code"):
        text = load_text(corpus, "val")[:20_000]
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
        assert len(ids) < len(text.encode("utf-8")) / 1.3  # the merges compress


def test_known_merges_with_repeated_pair() -> None:
    # "aaabdaaabac" is one chunk; (a, a) occurs 4 times, then (a, b) twice, then (aa, ab) twice.
    tokenizer = Tokenizer.train("aaabdaaabac", 300)
    a, b, c, d = (3 + ord(ch) for ch in "abcd")
    assert tokenizer.merges == [(a, a), (a, b), (259, 260)]
    assert tokenizer.vocab_size == 262  # stops early: no pair occurs twice any more
    assert tokenizer.encode("aaabdaaabac") == [261, d, 261, a, c]
    assert tokenizer.token_bytes(261) == b"aaab"


def test_ties_go_to_the_lowest_pair_ids() -> None:
    # chunks "ab", " cd", " ab", " cd": (a,b), (' ',c) and (c,d) all occur twice.
    tokenizer = Tokenizer.train("ab cd ab cd", 262)
    a, b, c, d, space = (3 + ord(ch) for ch in "abcd ")
    assert tokenizer.merges == [(space, c), (a, b), (259, d)]


def test_training_is_deterministic() -> None:
    text = load_text("code", "val")[:30_000]
    assert Tokenizer.train(text, 320).merges == Tokenizer.train(text, 320).merges


def test_pretokenisation_keeps_words_indentation_and_contractions_apart() -> None:
    text = "It's f'x' 12345\n    def load_text(self):\n"
    assert re.findall(PATTERN, text) == [
        "It", "'s", " f", "'", "x", "'", " ", "123", "45",
        "\n", "   ", " def", " load_text", "(", "self", "):", "\n",
    ]  # fmt: skip


def test_special_tokens(tokenizer: Tokenizer) -> None:
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2)
    ids = tokenizer.encode("hi", add_bos=True, add_eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and ids[1:-1] == tokenizer.encode("hi")
    assert tokenizer.token_bytes(2) == b"<|eos|>"
    assert tokenizer.token_bytes(3 + ord("A")) == b"A"
    assert tokenizer.decode([0, 1, 3 + ord("x"), 2, 3 + ord("y")]) == "xy"
    # the characters of a special token's name are plain text, never the special id
    assert not {0, 1, 2} & set(tokenizer.encode("<|eos|><|bos|><|pad|>"))


def test_decode_accepts_numpy_ids_and_replaces_invalid_utf8(tokenizer: Tokenizer) -> None:
    ids = np.asarray(tokenizer.encode("héllo"), dtype=np.int64)
    assert tokenizer.decode(ids) == "héllo"
    assert tokenizer.decode([3 + 0xC3]) == "\ufffd"  # a lone UTF-8 lead byte
    assert tokenizer.decode_bytes([3 + 0xC3]) == b"\xc3"


@pytest.mark.parametrize("bad", [-1, 400, 10**6])
def test_decode_rejects_ids_outside_the_vocabulary(tokenizer: Tokenizer, bad: int) -> None:
    with pytest.raises(ValueError, match=f"token id {bad} is outside"):
        tokenizer.decode([5, bad])


@pytest.mark.parametrize("vocab_size", [0, 258, -5, 300.0, "512"])
def test_train_rejects_vocab_size_below_259(vocab_size) -> None:
    with pytest.raises(ValueError, match="pass at least 259"):
        Tokenizer.train("some text", vocab_size)


def test_encode_rejects_bytes_and_unpaired_surrogates(tokenizer: Tokenizer) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        tokenizer.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="surrogate"):
        tokenizer.encode("a\ud800b")


def test_save_load_round_trip(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    assert json.loads(path.read_text())["format"] == FORMAT
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o644
    loaded = Tokenizer.load(path)
    assert loaded.merges == tokenizer.merges and loaded.vocab_size == tokenizer.vocab_size
    text = "def f(x):\n    return x ** 2  # squares 😀\n"
    assert loaded.encode(text) == tokenizer.encode(text)


def test_load_errors_name_the_problem(tokenizer: Tokenizer, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        Tokenizer.load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "minieagle-byte')
    with pytest.raises(ValueError, match="not valid JSON"):
        Tokenizer.load(broken)
    hf = tmp_path / "hf.json"
    hf.write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "merges": []}}))
    with pytest.raises(ValueError, match="Hugging Face"):
        Tokenizer.load(hf)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    payload = json.loads(path.read_text())
    payload["merges"][0] = [3, 259]  # refers to itself: not yet learned
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="merge 0"):
        Tokenizer.load(path)
    del payload["merges"]
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="malformed"):
        Tokenizer.load(path)


@pytest.mark.parametrize(
    ("name", "vocab_size"),
    [
        ("small/minieagle_tokenizer.json", 2048),
        ("tokenizer-512.json", 512),
        ("tokenizer-320.json", 320),
    ],
)
def test_shipped_tokenizers_load_and_round_trip(name: str, vocab_size: int) -> None:
    path = PRETRAINED / name
    if not path.exists():
        pytest.skip(f"{path} has not been trained yet")
    tokenizer = Tokenizer.load(path)
    assert tokenizer.vocab_size == vocab_size
    text = load_text("prose", "test")[:5_000]
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_token_text_shows_spaces_and_newlines():
    tok = Tokenizer.load(PRETRAINED / "small" / "minieagle_tokenizer.json")
    ids = tok.encode(" x\n")
    assert "".join(tok.token_text(i) for i in ids) == "·x\\n"
    assert tok.token_text(tok.eos_id) == Tokenizer.EOS
