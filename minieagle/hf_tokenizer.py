"""Hugging Face tokenizers beside minieagle's own: read an HF `tokenizer.json`, write ours as one,
and turn a GGUF's tokenizer metadata into one.

- `HFTokenizer`: an HF `tokenizer.json` (+ `tokenizer_config.json`), read by the `tokenizers`
  library, behind the interface of `minieagle.tokenizer.Tokenizer` (`encode`, `decode`,
  `decode_bytes`, `token_bytes`, `token_text`, `vocab_size`, `bos_id`, `eos_id`, `pad_id`).
- `export_hf_tokenizer_json`: our byte-level BPE as an HF `tokenizer.json` that gives the same ids.
- `tokenizer_files_from_gguf`: `tokenizer.json` and `tokenizer_config.json` from GGUF metadata.
- `load_tokenizer`: a model directory's tokenizer, in either format.

File layout of a checkpoint directory (docs/real_models.md, "Tokenizers and chat"):
`minieagle_tokenizer.json` holds our own format, `tokenizer.json` + `tokenizer_config.json` the
HF files, so transformers loads the directory as it is. Directories written before this layout
hold our format in `tokenizer.json`; `load_tokenizer` tells the two apart by content.

Byte-level BPE in HF's files spells every byte as one printable character (GPT-2's
byte-to-unicode table, `byte_alphabet`): vocabulary entries and merges are strings over that
alphabet, and a `ByteLevel` pre-tokenizer maps the text's UTF-8 bytes onto it before BPE.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Iterable
from pathlib import Path

from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.tokenizer import FORMAT, PATTERN, Tokenizer

OWN_TOKENIZER_FILE = "minieagle_tokenizer.json"  # minieagle's format, beside the HF files
HF_TOKENIZER_FILE = "tokenizer.json"
HF_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where newer transformers keep the template
TOKENIZER_FILES = (OWN_TOKENIZER_FILE, HF_TOKENIZER_FILE, HF_CONFIG_FILE)

_CONTROL, _USER_DEFINED = 3, 4  # GGUF token types that become HF added tokens


@functools.cache
def byte_alphabet() -> tuple[str, ...]:
    """GPT-2's byte-to-unicode table: entry b is the printable character that stands for byte b.

    Bytes that are printable Latin-1 characters ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
    themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) take the code points 256,
    257, ... in byte order, so the space 0x20 is 'Ġ' (U+0120) and the newline 0x0A is 'Ċ'."""
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    table, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            table.append(chr(byte))
        else:
            table.append(chr(256 + shifted))
            shifted += 1
    return tuple(table)


def _alphabet_string(data: bytes) -> str:
    alphabet = byte_alphabet()
    return "".join(alphabet[b] for b in data)


# ------------------------------------------------------------------ our regex in explicit classes


@functools.cache
def _python_classes() -> dict[str, frozenset[int]]:
    """The code points Python's `re` puts in \\w, \\d and \\s (str patterns), asked of `re`
    itself over every code point but the surrogates. They follow this Python's Unicode version."""
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    return {
        name: frozenset(ord(m.group()) for m in re.finditer(rf"\{name}", every)) for name in "wds"
    }


def _class_body(code_points: Iterable[int]) -> str:
    """The inside of a character class `[...]` holding exactly `code_points`, as ranges.

    ASCII other than letters and digits is written `\\xHH`, everything else literally: Python's
    `re` and Oniguruma read both alike (Oniguruma reads `\\xHH` above 0x7F as a raw byte, so
    only ASCII is escaped that way), and no ASCII punctuation is left to mean `[:`, `&&` or
    `--` to either engine."""

    def char(c: int) -> str:
        if c < 0x80 and not chr(c).isalnum():
            return f"\\x{c:02X}"
        return chr(c)

    runs: list[list[int]] = []
    for c in sorted(code_points):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return "".join(
        char(a) if a == b else char(a) + char(b) if b == a + 1 else f"{char(a)}-{char(b)}"
        for a, b in runs
    )


def hf_pattern(pattern: str = PATTERN) -> str:
    """`pattern` (minieagle.tokenizer.PATTERN) rewritten so that Oniguruma, HF's regex engine,
    splits text exactly as Python's `re` does with the original.

    The two engines disagree on \\w, \\d and \\s: Oniguruma's \\w also takes combining marks
    and connector punctuation such as '‿', its \\s leaves out U+001C..U+001F, and the Unicode
    versions differ. Each class is therefore replaced by the explicit set of code points
    Python puts in it: `[^\\W\\d]` (letters, '_', other numerals), `\\d`, `[^\\s\\w]`
    (punctuation and symbols), `\\s`, `\\S`. Lookbehind, lookahead and `{1,3}` read the same
    in both engines."""
    if pattern != PATTERN:
        raise InvalidInputError(
            f"this tokenizer splits text with a pattern other than minieagle.tokenizer.PATTERN "
            f"({pattern[:60]!r}...); the HF export knows how to rewrite PATTERN only, so keep "
            "PATTERN or write the HF pre-tokenizer by hand"
        )
    classes = _python_classes()
    word, digit, space = classes["w"], classes["d"], classes["s"]
    spelled = {
        r"[^\W\d]": f"[{_class_body(word - digit)}]",
        r"[^\s\w]": f"[^{_class_body(space | word)}]",
        r"\d": f"[{_class_body(digit)}]",
        r"\s": f"[{_class_body(space)}]",
        r"\S": f"[^{_class_body(space)}]",
    }
    return re.sub(r"\[\^\\W\\d\]|\[\^\\s\\w\]|\\[dsS]", lambda m: spelled[m.group()], pattern)


# ------------------------------------------------------------------------ writing tokenizer.json


def _added_token(token_id: int, content: str, *, special: bool) -> dict:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _byte_level(*, use_regex: bool) -> dict:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": use_regex,
    }


def _split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def _bos_eos_template(bos: str | None, eos: str | None, ids: dict[str, int]) -> dict | None:
    """A TemplateProcessing post-processor adding `bos` before and `eos` after the text (what HF
    does on `add_special_tokens=True`), or None when neither is added."""
    if bos is None and eos is None:
        return None

    def sequence(name: str, type_id: int) -> list[dict]:
        piece = [{"Sequence": {"id": name, "type_id": type_id}}]
        before = [{"SpecialToken": {"id": bos, "type_id": type_id}}] if bos else []
        after = [{"SpecialToken": {"id": eos, "type_id": type_id}}] if eos else []
        return before + piece + after

    used = [t for t in (bos, eos) if t is not None]
    return {
        "type": "TemplateProcessing",
        "single": sequence("A", 0),
        "pair": sequence("A", 0) + sequence("B", 1),
        "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in used},
    }


def _tokenizer_json(
    vocab: dict[str, int],
    merges: list[str],
    added: list[dict],
    pre_tokenizers: list[dict],
    post_processor: dict | None,
) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre_tokenizers},
        "post_processor": post_processor,
        "decoder": _byte_level(use_regex=True),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def export_hf_tokenizer_json(tok: Tokenizer) -> dict:
    """Our byte-level BPE `tok` as an HF `tokenizer.json` (a dict to dump as JSON).

    The `tokenizers` library reading it gives `tok.encode(text, add_bos=True)` for
    `encode(text).ids` on every text that does not spell one of the three special tokens
    (HF matches `<|eos|>` written in text as the special token; ours never does, see
    `HFTokenizer.encode`). Pieces: the BPE vocabulary and merges in GPT-2's byte alphabet,
    `PATTERN` as a `Split` pre-tokenizer (in explicit classes, `hf_pattern`) followed by
    `ByteLevel` without its own regex, the ByteLevel decoder, the specials as added tokens and
    a post-processor adding `<|bos|>`. Refuses a tokenizer in which two ids spell the same
    bytes (an HF vocabulary maps each string to one id)."""
    vocab: dict[str, int] = {tok.PAD: 0, tok.BOS: 1, tok.EOS: 2}
    for token_id in range(3, tok.vocab_size):
        spelled = _alphabet_string(tok.token_bytes(token_id))
        if spelled in vocab:
            raise InvalidInputError(
                f"token ids {vocab[spelled]} and {token_id} both spell "
                f"{tok.token_bytes(token_id)!r}; an HF vocabulary maps each string to one id, "
                "so this tokenizer cannot be exported (the shipped ones have no such pair)"
            )
        vocab[spelled] = token_id
    merges = [
        f"{_alphabet_string(tok.token_bytes(a))} {_alphabet_string(tok.token_bytes(b))}"
        for a, b in tok.merges
    ]
    added = [_added_token(i, name, special=True) for i, name in enumerate(vocab) if i < 3]
    pre = [_split(hf_pattern(tok.pattern)), _byte_level(use_regex=False)]
    return _tokenizer_json(vocab, merges, added, pre, _bos_eos_template(tok.BOS, None, vocab))


def export_hf_tokenizer_config(tok: Tokenizer) -> dict:
    """The `tokenizer_config.json` that goes with `export_hf_tokenizer_json(tok)`."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok.BOS,
        "eos_token": tok.EOS,
        "pad_token": tok.PAD,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # decode must give back the text unchanged
    }


# ------------------------------------------------------------------------------- from GGUF

# llama.cpp's pre-tokenizer regexes (docs/real_models.md, "From GGUF metadata"), applied one
# after the other: each splits the pieces the one before left, keeping unmatched text as
# pieces of its own. "smollm" shares its list with starcoder, refact, command-r and others:
# every number character alone, then GPT-2's regex.
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA_CPP_PRE_TOKENIZERS = {
    "gpt2": (_GPT2_REGEX,),
    "smollm": (r"\p{N}", _GPT2_REGEX),
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2_REGEX, r"\p{N}+", "[0-9][0-9][0-9]"),
}
# llama.cpp's `clean_spaces` per pre-tokenizer (true for BPE unless the type turns it off)
_CLEAN_SPACES = {"gpt2": True, "smollm": False, "default": True}


def _field(fields: dict, key: str, kind: type, default=None):
    """fields[key], checked to be a `kind`; `default` when absent or None."""
    value = fields.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInputError(
            f"GGUF field {key} is a {type(value).__name__}, expected {kind.__name__}; the file's "
            "tokenizer metadata is damaged: re-download or re-convert the GGUF"
        )
    return value


def tokenizer_files_from_gguf(fields: dict) -> dict[str, dict]:
    """{"tokenizer.json": ..., "tokenizer_config.json": ...} (dicts to dump as JSON) for the
    tokenizer described by GGUF metadata `fields`, plain Python values under llama.cpp's keys:

    `tokenizer.ggml.model` ("gpt2": byte-level BPE, the only kind supported), `.pre` (llama.cpp's
    pre-tokenizer name: "smollm", "gpt2" or "default"; absent means "default", as in llama.cpp),
    `.tokens` (strings in GPT-2's byte alphabet), `.merges` ("a b" strings, by rank),
    `.token_type` (3 = control: an HF special added token; 4 = user-defined: a non-special
    added token), `.bos_token_id`, `.eos_token_id`, `.padding_token_id`, `.unknown_token_id`,
    `.add_bos_token`, `.add_eos_token` (absent: false, llama.cpp's default for these
    pre-tokenizers) and `tokenizer.chat_template`.

    The pre-tokenizer is llama.cpp's list of regexes (`LLAMA_CPP_PRE_TOKENIZERS`) as `Split`
    pre-tokenizers, then `ByteLevel`. Every error names the field and the bad value."""
    model = fields.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise InvalidInputError(
            f"tokenizer.ggml.model={model!r}: minieagle converts byte-level BPE tokenizers "
            "('gpt2', as SmolLM2, GPT-2, Llama 3 and Qwen use) only; a 'llama' "
            "(SentencePiece) tokenizer needs the model's own tokenizer.json from Hugging Face"
        )
    pre = _field(fields, "tokenizer.ggml.pre", str, "default")
    if pre not in LLAMA_CPP_PRE_TOKENIZERS:
        raise InvalidInputError(
            f"tokenizer.ggml.pre={pre!r} is a pre-tokenizer minieagle does not know; supported: "
            f"{sorted(LLAMA_CPP_PRE_TOKENIZERS)}. Copy that model's tokenizer.json from "
            "Hugging Face into the imported directory instead"
        )
    tokens = _field(fields, "tokenizer.ggml.tokens", list)
    merges = _field(fields, "tokenizer.ggml.merges", list)
    if not tokens or merges is None:
        missing = "tokenizer.ggml.tokens" if not tokens else "tokenizer.ggml.merges"
        raise InvalidInputError(
            f"GGUF metadata has no {missing}; a byte-level BPE needs its tokens and merges: "
            "re-convert the GGUF with a current llama.cpp"
        )
    types = _field(fields, "tokenizer.ggml.token_type", list, [1] * len(tokens))
    if len(types) != len(tokens):
        raise InvalidInputError(
            f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens; the "
            "metadata is damaged: re-download or re-convert the GGUF"
        )

    vocab: dict[str, int] = {}
    for token_id, token in enumerate(tokens):
        if not isinstance(token, str):
            raise InvalidInputError(f"tokenizer.ggml.tokens[{token_id}]={token!r} is not a string")
        if token in vocab:
            raise InvalidInputError(
                f"tokenizer.ggml.tokens holds {token!r} twice (ids {vocab[token]} and "
                f"{token_id}); an HF vocabulary maps each string to one id"
            )
        vocab[token] = token_id
    # A byte-level vocabulary may lack rare bytes (SmolLM2 has no 0x04, 0x06, 0x13, 0x14, 0x16,
    # 0x1D, nor the lead bytes 0xF1, 0xF2 of unassigned planes, nor the bytes UTF-8 never uses):
    # HF and llama.cpp drop such bytes from the text. Without the printable ASCII bytes it is no
    # byte-level vocabulary at all.
    missing = [f"0x{b:02X}" for b in range(0x20, 0x7F) if byte_alphabet()[b] not in vocab]
    if missing:
        raise InvalidInputError(
            f"tokenizer.ggml.tokens lacks the byte tokens {missing[:8]} (GPT-2's byte "
            "alphabet for printable ASCII); it is not a byte-level BPE vocabulary, whatever "
            "tokenizer.ggml.model says: re-convert the GGUF"
        )
    for rank, merge in enumerate(merges):
        parts = merge.split(" ") if isinstance(merge, str) else []
        if len(parts) != 2 or parts[0] + parts[1] not in vocab or not set(parts) <= vocab.keys():
            raise InvalidInputError(
                f"tokenizer.ggml.merges[{rank}]={merge!r} is not 'A B' with A, B and AB all in "
                "tokenizer.ggml.tokens; the metadata is damaged: re-download the GGUF"
            )

    added = [
        _added_token(i, tokens[i], special=types[i] == _CONTROL)
        for i in range(len(tokens))
        if types[i] in (_CONTROL, _USER_DEFINED)
    ]
    names = {}
    for role, key in (
        ("bos", "bos_token_id"),
        ("eos", "eos_token_id"),
        ("pad", "padding_token_id"),
        ("unk", "unknown_token_id"),
    ):
        token_id = _field(fields, f"tokenizer.ggml.{key}", int)
        if token_id is None:
            continue
        if not 0 <= token_id < len(tokens):
            raise InvalidInputError(
                f"tokenizer.ggml.{key}={token_id} is outside [0, {len(tokens)}) tokens; the "
                "metadata is damaged: re-download or re-convert the GGUF"
            )
        names[role] = tokens[token_id]
    add_bos = bool(_field(fields, "tokenizer.ggml.add_bos_token", bool, False))
    add_eos = bool(_field(fields, "tokenizer.ggml.add_eos_token", bool, False))
    for flag, role in ((add_bos, "bos"), (add_eos, "eos")):
        if flag and role not in names:
            raise InvalidInputError(
                f"tokenizer.ggml.add_{role}_token is true but there is no "
                f"tokenizer.ggml.{role}_token_id; the metadata is inconsistent"
            )

    pre_tokenizers = [_split(r) for r in LLAMA_CPP_PRE_TOKENIZERS[pre]]
    post = _bos_eos_template(
        names["bos"] if add_bos else None, names["eos"] if add_eos else None, vocab
    )
    tokenizer_json = _tokenizer_json(
        vocab, list(merges), added, [*pre_tokenizers, _byte_level(use_regex=False)], post
    )
    config: dict = {"tokenizer_class": "PreTrainedTokenizerFast"}
    config.update({f"{role}_token": name for role, name in names.items()})
    config.update(add_bos_token=add_bos, add_eos_token=add_eos)
    config["clean_up_tokenization_spaces"] = _CLEAN_SPACES[pre]
    template = _field(fields, "tokenizer.chat_template", str)
    if template is not None:
        config["chat_template"] = template
    return {HF_TOKENIZER_FILE: tokenizer_json, HF_CONFIG_FILE: config}


# ---------------------------------------------------------------------------------- reading


def _token_content(value, path: Path, key: str) -> str | None:
    """A special token in tokenizer_config.json: a string, an AddedToken dict, or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise InvalidInputError(
        f"{path}: {key}={value!r} is neither a token string nor {{'content': ...}}; fix the file"
    )


def _read_json(path: Path) -> dict:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidInputError(
            f"{path} is not readable JSON ({error}); re-download or re-save it"
        ) from None
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{path} holds a JSON {type(payload).__name__}, not an object")
    return payload


class HFTokenizer:
    """An HF `tokenizer.json` behind the interface of `minieagle.tokenizer.Tokenizer`.

    BOS and EOS as HF adds them: `encode(text, add_bos=True)` starts with `bos_id` only when the
    tokenizer adds one (`add_bos_token` in tokenizer_config.json, else what the tokenizer.json
    post-processor does); SmolLM2 adds none. `add_eos=True` always appends `eos_id` (the end of
    a document, as minieagle's training marks it).

    Special tokens written in the text are matched (HF's default), so a prompt rendered by a
    chat template turns `<|im_start|>` into its one id; pass `split_special_tokens=True` to
    encode such text as ordinary characters (what `minieagle.chat` does with message
    contents). `decode` skips special tokens, as ours does."""

    def __init__(self, tokenizer_json: dict | str, config: dict | None = None, *, source=None):
        try:
            import tokenizers
        except ImportError:
            raise InvalidInputError(
                "reading a Hugging Face tokenizer.json needs the `tokenizers` package; "
                "pip install tokenizers"
            ) from None
        self.source = Path(source) if source is not None else Path("<memory>")
        text = tokenizer_json if isinstance(tokenizer_json, str) else json.dumps(tokenizer_json)
        try:
            self._tk = tokenizers.Tokenizer.from_str(text)
        except Exception as error:  # the Rust side raises plain Exception
            raise InvalidInputError(
                f"{self.source} is not a tokenizer.json the `tokenizers` library can read "
                f"({error}); re-download it"
            ) from None
        self._plain = None  # the same tokenizer with special-token matching off, when asked
        self.config = dict(config or {})
        decoder = (json.loads(text).get("decoder") or {}).get("type")
        self.byte_level = decoder == "ByteLevel"

        added = self._tk.get_added_tokens_decoder()
        self.special_tokens = {t.content: i for i, t in added.items() if t.special}
        self._added = {i: t.content for i, t in added.items()}
        vocab = self._tk.get_vocab(with_added_tokens=True)
        self._vocab_size = 1 + max(vocab.values())

        ids = {}
        for role in ("bos", "eos", "pad", "unk"):
            key = f"{role}_token"
            content = _token_content(self.config.get(key), self._config_path, key)
            token_id = None if content is None else self._tk.token_to_id(content)
            if content is not None and token_id is None:
                raise InvalidInputError(
                    f"{self._config_path}: {key}={content!r} is not a token of {self.source}; "
                    "the two files belong to different tokenizers"
                )
            ids[role] = token_id
        probe = self._tk.encode("", add_special_tokens=True).ids  # what the post-processor adds
        if ids["bos"] is None and probe:
            ids["bos"] = probe[0]
        self._bos, self._eos, self._pad = ids["bos"], ids["eos"], ids["pad"]
        self.unk_id = ids["unk"]
        if "add_bos_token" in self.config:
            self.add_bos_token = bool(self.config["add_bos_token"])
        else:
            self.add_bos_token = bool(probe) and probe[0] == self._bos
        if self.add_bos_token and self._bos is None:
            raise InvalidInputError(
                f"{self._config_path} sets add_bos_token but names no bos_token; add one"
            )
        template = self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}], "default" is used
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        self.chat_template: str | None = template if isinstance(template, str) else None

    @property
    def _config_path(self) -> Path:
        return self.source.with_name(HF_CONFIG_FILE)

    @classmethod
    def load(cls, directory) -> HFTokenizer:
        """Read `directory`'s tokenizer.json, its tokenizer_config.json when present (special
        tokens, add_bos_token, chat_template) and its chat_template.jinja when present (it
        overrides the config's template, as in transformers)."""
        directory = Path(directory)
        path = directory / HF_TOKENIZER_FILE
        if not path.is_file():
            raise MissingFileError(f"no {HF_TOKENIZER_FILE} in {directory}; copy the model's there")
        config_path = directory / HF_CONFIG_FILE
        config = _read_json(config_path) if config_path.is_file() else {}
        template_path = directory / CHAT_TEMPLATE_FILE
        if template_path.is_file():
            config["chat_template"] = template_path.read_text(encoding="utf-8")
        return cls(path.read_text(encoding="utf-8"), config, source=path)

    @property
    def vocab_size(self) -> int:
        """One more than the largest id: every id it produces is below this."""
        return self._vocab_size

    @property
    def bos_id(self) -> int | None:
        return self._bos

    @property
    def eos_id(self) -> int | None:
        return self._eos

    @property
    def pad_id(self) -> int | None:
        return self._pad

    def files(self) -> dict[str, dict]:
        """{"tokenizer.json": ..., "tokenizer_config.json": ...} to write beside a checkpoint."""
        return {HF_TOKENIZER_FILE: json.loads(self._tk.to_str()), HF_CONFIG_FILE: self.config}

    def encode(
        self,
        text: str,
        *,
        add_bos: bool = False,
        add_eos: bool = False,
        split_special_tokens: bool = False,
    ) -> list[int]:
        """Token ids of `text` (see the class docstring for BOS, EOS and special tokens)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}; decode bytes first")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InvalidInputError(
                f"text has a character that is not valid UTF-8 ({error.reason}: "
                f"{text[error.start : error.end]!r}); remove unpaired surrogates"
            ) from None
        tokenizer = self._tk
        if split_special_tokens:
            if self._plain is None:
                import tokenizers

                self._plain = tokenizers.Tokenizer.from_str(self._tk.to_str())
                self._plain.encode_special_tokens = True
            tokenizer = self._plain
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if add_bos and self.add_bos_token:
            ids.insert(0, self._bos)
        if add_eos:
            if self._eos is None:
                raise InvalidInputError(
                    f"{self._config_path} names no eos_token, so add_eos has nothing to add"
                )
            ids.append(self._eos)
        return ids

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        """`ids` as a list of ints in [0, vocab_size), or an error naming the first bad one."""
        checked = []
        for token_id in ids:
            try:
                value = operator.index(token_id)
            except TypeError:
                value = None
            if value is None or isinstance(token_id, bool) or not 0 <= value < self._vocab_size:
                raise InvalidInputError(
                    f"token id {token_id!r} is outside [0, vocab_size={self._vocab_size}); was "
                    "it produced by a tokenizer with a different vocabulary?"
                )
            checked.append(value)
        return checked

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`, special tokens skipped; invalid UTF-8 becomes U+FFFD. No
        transformers-style `clean_up_tokenization_spaces`: the text comes back as encoded."""
        return self._tk.decode(self._check_ids(ids), skip_special_tokens=True)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of `ids` joined, special tokens contributing none (byte-level only)."""
        special = self.special_tokens.values()
        return b"".join(self._bytes_of(i) for i in self._check_ids(ids) if i not in special)

    def _bytes_of(self, token_id: int) -> bytes:
        if token_id in self._added:
            return self._added[token_id].encode("utf-8")
        token = self._tk.id_to_token(token_id)
        if token is None:
            return b""  # an id the vocabulary skips (HF models pad their embeddings)
        if not self.byte_level:
            raise InvalidInputError(
                f"{self.source} is not a byte-level tokenizer (its decoder is not ByteLevel), so "
                "its tokens have no exact bytes; use decode for text"
            )
        inverse = _inverse_alphabet()
        try:
            return bytes(inverse[ch] for ch in token)
        except KeyError:
            raise InvalidInputError(
                f"token {token_id} = {token!r} of {self.source} has characters outside GPT-2's "
                "byte alphabet; the tokenizer.json is not byte-level BPE"
            ) from None

    def token_bytes(self, id: int) -> bytes:
        """The bytes of one token, for display; special tokens give their names."""
        (token_id,) = self._check_ids([id])
        if token_id in self._added:
            return self._added[token_id].encode("utf-8")
        if not self.byte_level:
            return (self._tk.id_to_token(token_id) or "").encode("utf-8")
        return self._bytes_of(token_id)

    def token_text(self, id: int) -> str:
        """One token as readable text: spaces as ·, newlines as \\n (as `Tokenizer.token_text`)."""
        text = self.token_bytes(int(id)).decode("utf-8", errors="replace")
        return text.replace(" ", "·").replace("\n", "\\n")

    def __repr__(self) -> str:
        return f"HFTokenizer({self.source}, vocab_size={self.vocab_size})"


@functools.cache
def _inverse_alphabet() -> dict[str, int]:
    return {ch: b for b, ch in enumerate(byte_alphabet())}


# ------------------------------------------------------------------------ checkpoint directories


def load_tokenizer(directory, *, vocab_size: int | None = None) -> Tokenizer | HFTokenizer | None:
    """The tokenizer of the model directory `directory`, or None when it has none.

    `minieagle_tokenizer.json` (our format) when present; else `tokenizer.json`, ours or HF's
    told apart by content (ours has "format": "minieagle-byte-bpe-v1", HF's a "model").
    vocab_size: the model's; a tokenizer with more ids is refused (they would index past the
    embedding), one with fewer is fine (HF models pad their embedding rows)."""
    directory = Path(directory)
    own, hf = directory / OWN_TOKENIZER_FILE, directory / HF_TOKENIZER_FILE
    if own.is_file():
        tokenizer, path = Tokenizer.load(own), own
    elif hf.is_file():
        payload = _read_json(hf)
        path = hf
        if payload.get("format") == FORMAT:
            tokenizer = Tokenizer.load(hf)
        elif isinstance(payload.get("model"), dict):
            tokenizer = HFTokenizer.load(directory)
        else:
            raise InvalidInputError(
                f"{hf} is neither minieagle's tokenizer (format {FORMAT!r}) nor a Hugging Face "
                "tokenizer.json (a 'model' object); copy the model's own tokenizer there"
            )
    else:
        return None
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise InvalidInputError(
            f"{path} has {tokenizer.vocab_size} token ids but the model's config.json in "
            f"{directory} says vocab_size={vocab_size}; ids past {vocab_size - 1} have no "
            "embedding row: this tokenizer belongs to another model, copy the right one there"
        )
    return tokenizer


def tokenizer_files(tokenizer: Tokenizer | HFTokenizer) -> dict[str, str]:
    """File name -> text of the tokenizer files a checkpoint holds: for our `Tokenizer`, its own
    format (`minieagle_tokenizer.json`) and the HF export (`tokenizer.json`,
    `tokenizer_config.json`); for an `HFTokenizer`, its two HF files."""
    if isinstance(tokenizer, HFTokenizer):
        files = tokenizer.files()
    else:
        files = {
            HF_TOKENIZER_FILE: export_hf_tokenizer_json(tokenizer),
            HF_CONFIG_FILE: export_hf_tokenizer_config(tokenizer),
        }
    return {name: json.dumps(content, ensure_ascii=False) for name, content in files.items()}


def write_tokenizer_files(directory, tokenizer: Tokenizer | HFTokenizer) -> None:
    """Write `tokenizer`'s files (`tokenizer_files`) into `directory` (a checkpoint being
    saved); our own format goes through `Tokenizer.save`."""
    directory = Path(directory)
    if not isinstance(tokenizer, HFTokenizer):
        tokenizer.save(directory / OWN_TOKENIZER_FILE)
    for name, text in tokenizer_files(tokenizer).items():
        (directory / name).write_text(text, encoding="utf-8")
