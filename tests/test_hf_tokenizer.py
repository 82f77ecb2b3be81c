"""HF tokenizers: our BPE exported to tokenizer.json gives the same ids in the `tokenizers`
library, GGUF tokenizer metadata becomes a working tokenizer.json, and a model directory's
tokenizer is read in either format. Each checker is shown to catch a broken implementation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle.checkpoint import load_checkpoint, save_checkpoint
from minieagle.config import preset
from minieagle.data import load_split
from minieagle.errors import InvalidInputError
from minieagle.hf_tokenizer import (
    HFTokenizer,
    byte_alphabet,
    export_hf_tokenizer_json,
    hf_pattern,
    load_tokenizer,
    tokenizer_files_from_gguf,
    write_tokenizer_files,
)
from minieagle.model import init_params
from minieagle.tokenizer import PATTERN, Tokenizer

tokenizers = pytest.importorskip("tokenizers")

PRETRAINED = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained"

# Where Python's `re` and Oniguruma could part ways: classes (\w takes marks? connector
# punctuation? \s takes U+001C?), lookbehind at the start, the Unicode version, whitespace runs.
EDGE_CASES = [
    "",
    " ",
    "it's we'll they're I'd 'quoted' don't'",
    "x'y _'s 1's é's",
    "👨\u200d👩\u200d👧\u200d👦 family, ❤️ 🇫🇷 flag",  # emoji with ZWJ, variation selector
    "e\u0301te\u0301 cafe\u0301 n\u0303 a\u20dd",  # combining marks after letters
    "\u0301leading mark \u0301",
    "中文字符 日本語のテキスト 한국어",  # CJK
    "٠١٢٣٤٥٦٧٨٩ ۱۲۳ १२३ 12345 1234567",  # Arabic-Indic, Persian, Devanagari digits
    "² ³ ½ Ⅻ ⅷ ① 〇",  # numerals that are \w but not \d
    "a\u00a0b\u00a0\u00a0c",  # no-break space
    "line\r\nnext\r\n\r\n",
    "\ttab\t\tx\t",
    "a\x1cb \x1dc \x1e\x1fd",  # separators: \s to Python, not to Oniguruma
    "a\x85b\u2028c\u2029d\u3000e\u1680f\u200bg\ufeffh",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈 🀄 \U0001f9ea",  # astral letters, digits, symbols
    "word    word         end        ",  # long space runs, trailing spaces
    "    ",
    "\n\n\n  \n",
    "a‿b ＿c x_y __init__",  # connector punctuation: \w to Oniguruma only ('_' to both)
    "def read_config(path):\n    with open(path) as f:\n        return json.load(f)  # ok\n",
    "x += 1; y = x**2 // 3 if x != 0 else -1.5e-3",
    "if (a && b || !c) { return <T>[0]; } // [:alpha:] -- ~~",
    "'''docstring''' \"\"\"more\"\"\"",
    "ǅ ǈ ᾈ ʰ ˢ ⁿ ª º",  # titlecase and modifier letters
    "\u0600\u0601 \u200e\u200f \u061c",  # format characters
    "\U000e0001\U000e0041 \U000f0000 \uffff",  # tags, private use, noncharacter
]

# the shipped tokenizers, loaded once
SHIPPED = {
    "small": PRETRAINED / "small" / "minieagle_tokenizer.json",
    "512": PRETRAINED / "tokenizer-512.json",
    "320": PRETRAINED / "tokenizer-320.json",
}


@pytest.fixture(scope="module")
def small() -> Tokenizer:
    return Tokenizer.load(SHIPPED["small"])


def _hf(tokenizer_json: dict):
    """The `tokenizers` library itself reading a tokenizer.json dict (no minieagle code)."""
    return tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json))


@pytest.fixture(scope="module")
def small_hf(small):
    return _hf(export_hf_tokenizer_json(small))


@pytest.fixture(scope="module")
def small_hf_plain(small):
    """The export with HF's matching of special tokens in text turned off."""
    hf = _hf(export_hf_tokenizer_json(small))
    hf.encode_special_tokens = True
    return hf


def _first_mismatch(ours: Tokenizer, hf, texts) -> str | None:
    """The first text on which the HF tokenizer's ids (BOS added by its post-processor) differ
    from ours, or None."""
    for text in texts:
        if hf.encode(text).ids != ours.encode(text, add_bos=True):
            return text
    return None


def _corpus_strings(count: int) -> list[str]:
    """`count` strings from the bundled corpora: paragraphs of prose, blocks of code."""
    strings = []
    for corpus in ("prose", "code"):
        for document in load_split(corpus, "val"):
            strings += [part for part in re.split(r"\n\s*\n", document.text) if part.strip()]
            if len(strings) >= count * (1 if corpus == "code" else 0.5):
                break
    return strings[:count]


# --------------------------------------------------------------------------- the byte alphabet


def test_byte_alphabet_is_gpt2s_table():
    """Against the `tokenizers` library's own ByteLevel mapping, byte by byte."""
    alphabet = byte_alphabet()
    assert set(alphabet) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    # every byte that valid UTF-8 can hold: ASCII, lead bytes C2..F4, continuation bytes
    text = "".join(map(chr, range(0x100))) + "\u0800\uffff\U00010000\U0010ffff"
    text += "".join(chr(c) for c in range(0xBF, 0x110000, 0x3C1) if not 0xD800 <= c < 0xE000)
    for ch in text:
        ((piece, _),) = byte_level.pre_tokenize_str(ch)
        assert piece == "".join(alphabet[b] for b in ch.encode("utf-8")), repr(ch)
    assert alphabet[0x20] == "Ġ" and alphabet[0x0A] == "Ċ" and alphabet[0xE9] == "é"


# ------------------------------------------------------------------ the regex, in both engines


def _onig_pieces(pattern: str, text: str) -> list[str]:
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "isolated")
    return [piece for piece, _ in split.pre_tokenize_str(text)]


@pytest.fixture(scope="module")
def explicit() -> str:
    return hf_pattern()


@pytest.mark.parametrize("text", EDGE_CASES)
def test_explicit_pattern_splits_edge_cases_as_python(explicit, text):
    expected = re.findall(PATTERN, text)
    assert "".join(expected) == text  # our pattern tiles the text, so Split loses nothing
    assert re.findall(explicit, text) == expected  # the rewrite means the same to Python
    assert _onig_pieces(explicit, text) == expected  # and to Oniguruma


@settings(max_examples=300)
@given(text=st.text(max_size=80))
def test_explicit_pattern_splits_any_text_as_python(explicit, text):
    assert _onig_pieces(explicit, text) == re.findall(PATTERN, text)


_TRICKY = st.sampled_from(list(" \t\n\r\x1c\x85\xa0\u2028\u3000'_‿0٣²é\u0301中😀\u200d-#"))


@settings(max_examples=300)
@given(text=st.text(alphabet=st.one_of(_TRICKY, st.characters()), max_size=40))
def test_explicit_pattern_splits_tricky_mixtures_as_python(explicit, text):
    assert _onig_pieces(explicit, text) == re.findall(PATTERN, text)


def test_our_pattern_unchanged_in_oniguruma_would_split_differently():
    """Why the rewrite exists: Oniguruma reads \\w and \\s otherwise (negative control)."""
    differ = [t for t in EDGE_CASES if _onig_pieces(PATTERN, t) != re.findall(PATTERN, t)]
    assert "e\u0301te\u0301 cafe\u0301 n\u0303 a\u20dd" in differ  # marks are \w to Oniguruma
    assert "a\x1cb \x1dc \x1e\x1fd" in differ  # U+001C..U+001F are \s to Python only
    assert "a‿b ＿c x_y __init__" in differ


def test_only_our_pattern_is_rewritten(small):
    with pytest.raises(InvalidInputError, match="PATTERN"):
        hf_pattern(r"\w+|\s+")
    with pytest.raises(InvalidInputError, match="PATTERN"):
        export_hf_tokenizer_json(Tokenizer(small.merges, r"\S+|\s+"))


# -------------------------------------------------------------- our BPE through `tokenizers`


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_export_gives_our_ids_on_edge_cases_and_corpora(name):
    ours = Tokenizer.load(SHIPPED[name])
    hf = _hf(export_hf_tokenizer_json(ours))
    texts = EDGE_CASES + _corpus_strings(1500 if name == "small" else 300)
    assert len(texts) > (1000 if name == "small" else 250)
    assert _first_mismatch(ours, hf, texts) is None
    for text in texts[:200]:
        assert hf.decode(hf.encode(text).ids, skip_special_tokens=True) == text


@settings(max_examples=200)
@given(text=st.text(max_size=120))
def test_export_gives_our_ids_on_any_text(small, small_hf, small_hf_plain, text):
    """Any text: equal ids with HF's special-token matching off; equal ids with it on unless
    the text spells a special token (see the next test)."""
    ids = small.encode(text, add_bos=True)
    assert small_hf_plain.encode(text).ids == ids
    if not any(name in text for name in small.special_tokens):
        assert small_hf.encode(text).ids == ids
        assert small_hf.decode(ids) == text


def _rename_characters(tokenizer_json: dict, table: dict[str, str]) -> dict:
    """The same tokenizer.json with every vocabulary and merge string spelled through `table`."""
    broken = json.loads(json.dumps(tokenizer_json))
    model = broken["model"]

    def spell(token: str) -> str:
        return "".join(table.get(ch, ch) for ch in token)

    model["vocab"] = {(token if i < 3 else spell(token)): i for token, i in model["vocab"].items()}
    model["merges"] = [" ".join(spell(part) for part in m.split(" ")) for m in model["merges"]]
    return broken


def test_checker_catches_a_wrong_byte_table(small):
    """Negative control: spell bytes 'e' and 'o' swapped in the vocabulary (a wrong
    byte-to-unicode table); the id comparison must notice."""
    broken = _rename_characters(export_hf_tokenizer_json(small), {"e": "o", "o": "e"})
    assert _first_mismatch(small, _hf(broken), EDGE_CASES + _corpus_strings(50)) is not None


def test_checker_catches_a_wrong_space_symbol(small):
    """Negative control: the space spelled ' ' instead of 'Ġ' in the vocabulary."""
    broken = _rename_characters(export_hf_tokenizer_json(small), {"Ġ": "\u2581"})
    assert _first_mismatch(small, _hf(broken), EDGE_CASES) is not None


def test_checker_catches_a_dropped_merge(small):
    exported = export_hf_tokenizer_json(small)
    for rank in (0, len(small.merges) // 2, len(small.merges) - 1):
        broken = json.loads(json.dumps(exported))
        dropped = broken["model"]["merges"].pop(rank)
        texts = EDGE_CASES + _corpus_strings(400)
        assert _first_mismatch(small, _hf(broken), texts) is not None, dropped


def _bytes_merged(*words: str) -> Tokenizer:
    """A tokenizer whose merges join each of `words` (UTF-8 bytes, left to right) into one id."""
    merges, known = [], {bytes([b]): 3 + b for b in range(256)}
    for word in words:
        data = word.encode("utf-8")
        for end in range(2, len(data) + 1):
            if data[:end] not in known:
                merges.append((known[data[: end - 1]], known[data[end - 1 : end]]))
                known[data[:end]] = 259 + len(merges) - 1
    return Tokenizer(merges)


def test_checker_catches_pythons_classes_left_to_oniguruma():
    """Negative control: the export with our pattern as written (\\w, \\s) instead of the
    explicit classes. Merges across the places where the engines split differently (a letter
    and its combining mark, a space and U+001C) tell the two apart."""
    tokenizer = _bytes_merged("e\u0301", " \x1c", "a\u203f")
    texts = ["cafe\u0301", "a \x1cb", "a\u203fb"]
    assert _first_mismatch(tokenizer, _hf(export_hf_tokenizer_json(tokenizer)), texts) is None
    broken = export_hf_tokenizer_json(tokenizer)
    broken["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = PATTERN
    for text in texts:
        assert _first_mismatch(tokenizer, _hf(broken), [text]) == text


def test_special_tokens_in_text_are_matched_by_hf_not_by_ours(small, small_hf):
    """HF's convention: `<|eos|>` written in text is the special token; ours encodes the
    characters (with HF's matching off the two agree: the test above)."""
    text = "end<|eos|> <|bos|>"
    assert 2 in small_hf.encode(text).ids and 1 in small_hf.encode(text).ids[1:]
    assert small.decode(small.encode(text)) == text and 2 not in small.encode(text)


def test_two_ids_with_the_same_bytes_cannot_be_exported():
    a, b, c = (3 + ord(ch) for ch in "abc")
    tokenizer = Tokenizer([(a, b), (b, c), (259, c), (a, 260)])  # "ab"+"c" and "a"+"bc"
    with pytest.raises(InvalidInputError, match="261 and 262 both spell b'abc'"):
        export_hf_tokenizer_json(tokenizer)


def test_hf_tokenizer_wraps_the_export_with_our_interface(small, tmp_path):
    write_tokenizer_files(tmp_path, small)
    hf = HFTokenizer.load(tmp_path)
    assert (hf.vocab_size, hf.bos_id, hf.eos_id, hf.pad_id) == (2048, 1, 2, 0)
    assert hf.add_bos_token and hf.special_tokens == small.special_tokens
    for text in EDGE_CASES:
        for bos in (False, True):
            assert hf.encode(text, add_bos=bos, add_eos=True) == small.encode(
                text, add_bos=bos, add_eos=True
            )
        ids = small.encode(text, add_bos=True, add_eos=True)
        assert hf.decode(ids) == small.decode(ids) == text
        assert hf.decode_bytes(ids) == small.decode_bytes(ids)
    for token_id in (0, 1, 2, 3, 3 + 0x20, 3 + 0xE2, 300, 2047):
        assert hf.token_bytes(token_id) == small.token_bytes(token_id)
        assert hf.token_text(token_id) == small.token_text(token_id)
    assert hf.encode("a<|eos|>") == [small.encode("a")[0], 2]
    assert hf.encode("a<|eos|>", split_special_tokens=True) == small.encode("a<|eos|>")


def test_hf_tokenizer_errors_name_the_problem(small, tmp_path):
    write_tokenizer_files(tmp_path, small)
    hf = HFTokenizer.load(tmp_path)
    with pytest.raises(InvalidInputError, match=r"token id 2048 is outside \[0, vocab_size=2048\)"):
        hf.decode([5, 2048])
    with pytest.raises(InvalidInputError, match="token id -1"):
        hf.decode_bytes([-1])
    with pytest.raises(InvalidInputError, match="unpaired surrogates"):
        hf.encode("bad \ud800 text")
    with pytest.raises(TypeError, match="must be a str"):
        hf.encode(b"bytes")
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "<|x|>"}))
    with pytest.raises(InvalidInputError, match=r"eos_token='<\|x\|>' is not a token of"):
        HFTokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Nonsense"}}')
    with pytest.raises(InvalidInputError, match="not a tokenizer.json the `tokenizers` library"):
        HFTokenizer.load(tmp_path)


# ------------------------------------------------------------------------- from GGUF metadata

_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_MERGES = ["Ġ t", "h e", "Ġt he", "1 2", "l l", "e ll"]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def gguf_fields(**changes) -> dict:
    """A tiny synthetic GGUF tokenizer: 3 control tokens, the 256 bytes, 6 merges, a
    user-defined `<tool>`; SmolLM2's pre-tokenizer, ids and template conventions."""
    merged = []
    for merge in _MERGES:
        left, right = merge.split(" ")
        merged.append(left + right)
    tokens = [*_SPECIALS, *byte_alphabet(), *merged, "<tool>"]
    types = [3] * 3 + [1] * (256 + len(merged)) + [4]
    fields = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": list(_MERGES),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHATML,
    }
    fields.update(changes)
    return fields


def _gguf_tokenizer(**changes) -> HFTokenizer:
    files = tokenizer_files_from_gguf(gguf_fields(**changes))
    return HFTokenizer(files["tokenizer.json"], files["tokenizer_config.json"])


def _byte(ch: str) -> int:
    return 3 + ord(ch)  # the byte tokens follow the 3 specials, in byte order


def test_gguf_tokenizer_encodes_a_tiny_vocabulary_by_hand():
    tok = _gguf_tokenizer()
    he, the, ll, ell = (3 + 256 + rank for rank in (1, 2, 4, 5))
    assert tok.encode("the") == [_byte("t"), he]
    assert tok.encode(" the") == [the]
    assert tok.encode("ell") == [ell]
    assert tok.encode("hell") == [he, ll]  # "h e" (rank 1) first takes the e from "e ll"
    # smollm: every digit alone (llama.cpp's \p{N} pass), so the merge "1 2" never applies
    assert tok.encode("12") == [_byte("1"), _byte("2")]
    assert tok.encode("x <tool> y") == [_byte("x"), _byte(" "), 3 + 256 + 6, _byte(" "), _byte("y")]
    assert tok.encode("<|im_start|>user") == [1, *(_byte(c) for c in "user")]
    assert tok.decode(tok.encode("<|im_start|>x<tool>y<|im_end|>")) == "x<tool>y"  # no specials
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id) == (1, 2, 2, 0)
    assert tok.encode("the", add_bos=True) == tok.encode("the")  # SmolLM2 adds no BOS
    assert tok.chat_template == CHATML
    assert tok.special_tokens == {t: i for i, t in enumerate(_SPECIALS)}


def test_gguf_gpt2_pretokenizer_keeps_digit_runs():
    tok = _gguf_tokenizer(**{"tokenizer.ggml.pre": "gpt2"})
    assert tok.encode("12") == [3 + 256 + 3]
    assert tok.encode(" 12") == [_byte(" "), 3 + 256 + 3]  # no " 1" merge in this vocabulary


def test_gguf_default_pretokenizer_follows_llama_cpps_cascade():
    """llama.cpp's "default": punctuation runs, GPT-2's regex, digit runs, then threes."""
    files = tokenizer_files_from_gguf(gguf_fields(**{"tokenizer.ggml.pre": "default"}))
    pre = tokenizers.Tokenizer.from_str(json.dumps(files["tokenizer.json"])).pre_tokenizer
    pieces = [piece for piece, _ in pre.pre_tokenize_str("a+=b, 12345 x")]
    assert pieces == ["a", "+=", "b", ",", "Ġ", "123", "45", "Ġx"]


def test_gguf_add_bos_and_eos_flags_become_a_post_processor():
    fields = gguf_fields(
        **{"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": True}
    )
    files = tokenizer_files_from_gguf(fields)
    hf = tokenizers.Tokenizer.from_str(json.dumps(files["tokenizer.json"]))
    assert hf.encode("the").ids == [1, _byte("t"), 3 + 256 + 1, 2]
    assert files["tokenizer_config.json"]["add_bos_token"] is True
    tok = HFTokenizer(files["tokenizer.json"], files["tokenizer_config.json"])
    assert tok.encode("the", add_bos=True) == [1, _byte("t"), 3 + 256 + 1]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tokenizer.ggml.model": "llama"}, "tokenizer.ggml.model='llama'"),
        ({"tokenizer.ggml.pre": "qwen2"}, "tokenizer.ggml.pre='qwen2' is a pre-tokenizer"),
        ({"tokenizer.ggml.merges": ["h e", "x q"]}, r"merges\[1\]='x q'"),
        ({"tokenizer.ggml.merges": ["he"]}, r"merges\[0\]='he'"),
        ({"tokenizer.ggml.bos_token_id": 9999}, "bos_token_id=9999 is outside"),
        ({"tokenizer.ggml.token_type": [1, 3]}, "token_type has 2 entries"),
        ({"tokenizer.ggml.tokens": None}, "no tokenizer.ggml.tokens"),
        ({"tokenizer.ggml.eos_token_id": "2"}, "eos_token_id is a str, expected int"),
    ],
)
def test_gguf_metadata_problems_are_named(changes, message):
    with pytest.raises(InvalidInputError, match=message):
        tokenizer_files_from_gguf(gguf_fields(**changes))


def test_gguf_vocabulary_must_hold_every_byte_and_each_token_once():
    fields = gguf_fields()
    tokens = fields["tokenizer.ggml.tokens"]
    without = [t for t in tokens if t not in ("Ċ", "Ġ")]  # no newline, no space
    with pytest.raises(InvalidInputError, match=r"lacks the byte tokens \['0x20'\]"):
        tokenizer_files_from_gguf(
            {**fields, "tokenizer.ggml.tokens": without, "tokenizer.ggml.token_type": None}
        )
    without = [t for t in tokens if t != "Ċ"]  # a rare byte may be missing: it is dropped
    files = tokenizer_files_from_gguf(
        {**fields, "tokenizer.ggml.tokens": without, "tokenizer.ggml.token_type": None}
    )
    tok = HFTokenizer(files["tokenizer.json"], files["tokenizer_config.json"])
    assert tok.decode(tok.encode("a\nb")) == "ab"
    twice = [*tokens[:-1], "he"]
    with pytest.raises(InvalidInputError, match="holds 'he' twice"):
        tokenizer_files_from_gguf({**fields, "tokenizer.ggml.tokens": twice})


# ------------------------------------------------------------------ model directories


@pytest.fixture(scope="module")
def nano_params():
    return init_params(preset("nano"))


def test_shipped_directories_still_read_as_ours():
    for name in ("small", "small-draft"):
        tokenizer = load_tokenizer(PRETRAINED / name, vocab_size=2048)
        assert isinstance(tokenizer, Tokenizer) and tokenizer.vocab_size == 2048


def test_a_saved_checkpoint_holds_both_formats(tmp_path, nano_params):
    ours = Tokenizer.load(SHIPPED["320"])
    config = preset("nano")
    save_checkpoint(tmp_path / "m", nano_params, config, ours)
    names = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert names == [
        "config.json",
        "minieagle_tokenizer.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    _, _, loaded = load_checkpoint(tmp_path / "m")
    assert isinstance(loaded, Tokenizer) and loaded.merges == ours.merges  # ours is preferred
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    assert _first_mismatch(ours, hf, EDGE_CASES) is None
    (tmp_path / "m" / "minieagle_tokenizer.json").unlink()  # an HF-only directory
    _, _, loaded = load_checkpoint(tmp_path / "m")
    assert isinstance(loaded, HFTokenizer) and loaded.encode("x y", add_bos=True) == ours.encode(
        "x y", add_bos=True
    )


def test_an_hf_tokenizer_saves_and_loads_with_a_checkpoint(tmp_path, nano_params):
    tok = _gguf_tokenizer()
    config = preset("nano")
    save_checkpoint(tmp_path / "m", nano_params, config, tok)
    assert not (tmp_path / "m" / "minieagle_tokenizer.json").exists()
    _, _, loaded = load_checkpoint(tmp_path / "m")
    assert isinstance(loaded, HFTokenizer) and loaded.chat_template == CHATML
    assert loaded.encode("<|im_start|>the 12") == tok.encode("<|im_start|>the 12")


def test_a_tokenizer_with_more_ids_than_the_model_is_refused(tmp_path, nano_params):
    config = preset("nano")
    assert config.vocab_size == 320
    bigger = Tokenizer.load(SHIPPED["small"])
    save_checkpoint(tmp_path / "m", nano_params, config, bigger)
    with pytest.raises(InvalidInputError, match="has 2048 token ids but .* vocab_size=320"):
        load_checkpoint(tmp_path / "m")
    assert load_checkpoint(tmp_path / "m", with_tokenizer=False)[2] is None
    smaller = Tokenizer(Tokenizer.load(SHIPPED["320"]).merges[:20])
    save_checkpoint(tmp_path / "m", nano_params, config, smaller)
    assert load_checkpoint(tmp_path / "m")[2].vocab_size == 279  # fewer ids: fine


def test_a_tokenizer_json_of_neither_kind_is_refused(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"vocab": {}}')
    with pytest.raises(InvalidInputError, match="neither minieagle's tokenizer"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    assert load_tokenizer(tmp_path) is None


# -------------------------------------------------------------------------- the real SmolLM2

SMOLLM2_SYSTEM_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28]
SMOLLM2_SYSTEM_IDS += [7018, 411, 407, 19712, 8182, 2, 198]  # its template's default system turn
# Prompt ids that transformers gives for one user turn under SmolLM2-Instruct's template, as
# published beside code that checks itself against it (HF SmolLM2 sizes share one tokenizer).
SMOLLM2_CHAT_IDS = {
    "hello world": [28120, 905],
    "What is the capital of France?": [1780, 314, 260, 3575, 282, 4649, 47],
    "Explain in three short sentences why plants need sunlight.": [
        36971, 281, 1296, 1890, 8545, 1701, 2109, 737, 8118, 30,
    ],
    "Quelle est la capitale de la France ? Réponds en une phrase.": [
        65, 2726, 290, 1264, 2618, 47765, 1121, 367, 2618, 4649, 9148, 428, 2756, 96, 19870, 430,
        16520, 8715, 30,
    ],
}  # fmt: skip


def smollm2_chat_ids(question: str) -> list[int]:
    user = [1, 4093, 198, *SMOLLM2_CHAT_IDS[question], 2, 198]
    return SMOLLM2_SYSTEM_IDS + user + [1, 520, 9531, 198]  # ... <|im_start|>assistant\n


_SMOLLM2_CACHE: dict = {}  # read once per session


def smollm2_tokenizer_fields(gguf_path) -> dict:
    """The tokenizer metadata of SmolLM2's GGUF."""
    if "fields" not in _SMOLLM2_CACHE:
        from gguf import GGUFReader

        from minieagle.importers.gguf_llama import tokenizer_fields

        reader = GGUFReader(gguf_path)
        metadata = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
        _SMOLLM2_CACHE["fields"] = tokenizer_fields(metadata)
    return _SMOLLM2_CACHE["fields"]


@pytest.mark.real_model
def test_smollm2_tokenizer_gives_transformers_ids(smollm2_dir):
    from minieagle.chat import encode_chat, load_chat_template

    tok = load_tokenizer(smollm2_dir, vocab_size=49152)
    assert isinstance(tok, HFTokenizer) and tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id) == (1, 2) and not tok.add_bos_token
    template = load_chat_template(smollm2_dir, tok)
    for question in SMOLLM2_CHAT_IDS:
        messages = [{"role": "user", "content": question}]
        assert encode_chat(tok, template, messages) == smollm2_chat_ids(question), question
    # the chats of tests/fixtures/smollm2, whose ids transformers 4.57.6 gave (its README)
    fixtures = Path(__file__).parent / "fixtures" / "smollm2"
    prompts = json.loads((fixtures / "reference.json").read_text())["prompts"]
    reference = np.load(fixtures / "reference.npz")
    chats = [name for name, prompt in prompts.items() if prompt.get("messages")]
    assert len(chats) == 2
    for name in chats:
        ids = encode_chat(tok, template, prompts[name]["messages"])
        assert ids == reference[f"{name}.input_ids"].tolist(), name
    reply = [19556, 17, 1073, 416, 339, 724, 346, 1834, 47]  # llama.cpp's, in an Ollama log
    assert tok.encode("Hello! How can I help you today?") == reply
    assert [tok.token_text(i) for i in tok.encode("2024")] == ["2", "0", "2", "4"]  # digits alone
    ids = tok.encode("<|im_start|>user\nWhat is 2+2?<|im_end|>\n")
    assert ids[0] == 1 and 2 in ids and tok.decode(ids) == "user\nWhat is 2+2?\n"
    # bytes SmolLM2's vocabulary lacks are dropped from the text (as by HF and llama.cpp)
    dropped = {b for b in range(256) if byte_alphabet()[b] not in tok._tk.get_vocab()}
    rare = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D}  # and lead bytes of unassigned planes, non-UTF-8
    assert dropped == rare | {0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}
    for text in EDGE_CASES:
        kept = bytes(b for b in text.encode("utf-8") if b not in dropped)
        assert tok.decode(tok.encode(text)) == kept.decode("utf-8", errors="replace")


TRANSFORMERS_GGUF_REFERENCE = Path(__file__).parent / "fixtures/smollm2/tokenizer_reference.json.xz"


@pytest.mark.real_model
@pytest.mark.skipif(
    not TRANSFORMERS_GGUF_REFERENCE.is_file(), reason="no transformers reference in fixtures"
)
def test_smollm2_against_transformers_own_gguf_tokenizer(smollm2_gguf):
    """transformers' GGUF loader (AutoTokenizer.from_pretrained(dir, gguf_file=...), 2 761
    strings: tests/fixtures/smollm2) ignores tokenizer.ggml.pre and splits with GPT-2's regex
    alone. Built with pre "gpt2", ours gives its ids on every string; with SmolLM2's "smollm"
    (llama.cpp: every number character alone first) it gives, on every string, the ids that
    `tokenizers` gives with Digits(individual_digits) + ByteLevel over the same vocabulary
    (stored where they differ from transformers': 21 strings, each with a numeral)."""
    import lzma

    cases = json.loads(lzma.open(TRANSFORMERS_GGUF_REFERENCE).read())["cases"]
    fields = smollm2_tokenizer_fields(smollm2_gguf)

    def tokenizer(pre: str) -> HFTokenizer:
        files = tokenizer_files_from_gguf({**fields, "tokenizer.ggml.pre": pre})
        return HFTokenizer(files["tokenizer.json"], files["tokenizer_config.json"])

    gpt2, smollm = tokenizer("gpt2"), tokenizer("smollm")
    assert len(cases) > 2000
    assert [c["text"] for c in cases if gpt2.encode(c["text"]) != c["ids"]] == []
    expected = {c["text"]: c.get("ids_smollm_pretokenizer", c["ids"]) for c in cases}
    assert [text for text, ids in expected.items() if smollm.encode(text) != ids] == []
    differ = [c["text"] for c in cases if "ids_smollm_pretokenizer" in c]
    assert 0 < len(differ) < 40 and all(any(ch.isnumeric() for ch in t) for t in differ)
    assert "        3" in differ  # ours: 8 spaces, "3"; GPT-2's regex: 7 spaces, " ", "3"
