"""Chat with a model: its chat template rendered as Hugging Face transformers renders it, the
prompt encoded with the template's special tokens, the reply streamed as the speculative loop
accepts tokens.

Rendering follows transformers' `apply_chat_template` (the facts: docs/real_models.md, "Chat
templates"): a Jinja2 `ImmutableSandboxedEnvironment` with `trim_blocks` and
`lstrip_blocks`, the `loopcontrols` extension and a `{% generation %}` block tag, a `tojson`
filter that does not escape HTML (`json.dumps`, ensure_ascii off), the globals `raise_exception`
and `strftime_now`, and the variables `messages`, `tools` (None), `documents` (None),
`add_generation_prompt` and the tokenizer's special-token names (`bos_token`, `eos_token`,
`pad_token`, `unk_token`). transformers then encodes the rendered text without adding BOS or EOS
(the template writes them when the model wants them); so does `encode_chat`.

Message contents are not trusted: a user who types `<|im_end|>` gets those characters, not the
end-of-turn token. `encode_chat` hides special-token strings inside the messages behind
placeholders while rendering, then turns only the special tokens the template itself wrote into
ids (what transformers' opt-in `sanitize_special_tokens` does).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from datetime import datetime
from functools import cache
from pathlib import Path

from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.hf_tokenizer import CHAT_TEMPLATE_FILE, HF_CONFIG_FILE, HFTokenizer

_ROLES = ("bos", "eos", "pad", "unk")


def load_chat_template(directory, tokenizer, template_file=None) -> str:
    """The chat template for the model in `directory`: the file `template_file` when given,
    else the tokenizer's own (an `HFTokenizer`'s tokenizer_config.json or chat_template.jinja).
    Raises MissingFileError naming the directory and the fix when there is none."""
    if template_file is not None:
        path = Path(template_file)
        if not path.is_file():
            raise MissingFileError(
                f"--template {path}: no such file; pass a Jinja chat template file (a "
                "tokenizer_config.json's chat_template, saved as text)"
            )
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidInputError(f"--template {path} is not readable text ({error})") from None
    template = tokenizer.chat_template if isinstance(tokenizer, HFTokenizer) else None
    if template is None:
        raise MissingFileError(
            f"{directory} has no chat template (none in a {HF_CONFIG_FILE} or "
            f"{CHAT_TEMPLATE_FILE}); pass one with --template FILE, e.g. a ChatML template"
        )
    return template


def special_token_names(tokenizer) -> dict[str, str]:
    """{"bos_token": "<|bos|>", ...}: the variables transformers passes to every template (its
    `special_tokens_map`), for the roles this tokenizer has."""
    names = {}
    for role in _ROLES:
        token_id = getattr(tokenizer, f"{role}_id", None)
        if token_id is not None:
            names[f"{role}_token"] = tokenizer.token_bytes(token_id).decode("utf-8")
    return names


@cache
def _environment():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}`: transformers marks the assistant's part of
        a training prompt with it; rendering keeps the body unchanged."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_render_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _render_body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
            sort_keys=sort_keys,
        )  # fmt: skip

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env


@cache
def _compiled(template: str):
    import jinja2

    try:
        return _environment().from_string(template)
    except jinja2.TemplateSyntaxError as error:
        raise InvalidInputError(
            f"the chat template does not parse: {error.message} (line {error.lineno}); fix the "
            "template or pass another with --template"
        ) from None


def render_chat(
    template: str, messages: list[dict], *, add_generation_prompt: bool = True, **variables
) -> str:
    """The text of `messages` ([{"role": ..., "content": ...}, ...]) under the Jinja chat
    `template`, rendered as transformers renders it (module docstring). `variables` are passed
    to the template too: the special-token names (`special_token_names`), or anything a
    template reads (`tools`, `documents`). A template that refuses the conversation
    (`raise_exception`) or fails raises InvalidInputError with its message."""
    import jinja2

    context = {"tools": None, "documents": None, **variables}
    try:
        return _compiled(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **context
        )
    except jinja2.TemplateError as error:
        raise InvalidInputError(
            f"the chat template refused this conversation: {error}; check the roles and their "
            "order (many templates want user and assistant turns to alternate)"
        ) from None


def _hide_specials(value, pattern: re.Pattern, hidden: dict[str, str]):
    """`value` (messages: dicts, lists, strings) with every special-token string replaced by a
    fresh placeholder of digits (`hidden`: placeholder -> the string). Digits survive the
    filters templates apply (trim, upper, tojson)."""
    if isinstance(value, dict):
        return {key: _hide_specials(item, pattern, hidden) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hide_specials(item, pattern, hidden) for item in value]
    if not isinstance(value, str):
        return value

    def placeholder(match: re.Match) -> str:
        key = f"{secrets.randbelow(10**24):024d}"
        hidden[key] = match.group()
        return key

    return pattern.sub(placeholder, value)


def _alternation(strings) -> re.Pattern | None:
    ordered = sorted((s for s in strings if s), key=len, reverse=True)  # longest first
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def encode_chat(
    tokenizer, template: str, messages: list[dict], *, add_generation_prompt: bool = True
) -> list[int]:
    """Token ids of `messages` rendered by `template`: the special tokens the template writes
    become their ids, everything else (message contents included, whatever they spell) is
    encoded as ordinary text. No BOS or EOS is added beyond what the template writes."""
    specials = tokenizer.special_tokens
    pattern = _alternation(specials)
    hidden: dict[str, str] = {}
    if pattern is not None:
        messages = _hide_specials(messages, pattern, hidden)
    names = special_token_names(tokenizer)
    text = render_chat(template, messages, add_generation_prompt=add_generation_prompt, **names)

    ids: list[int] = []
    pieces = re.split(f"({'|'.join(hidden)})", text) if hidden else [text]
    pending = ""  # ordinary text not yet encoded: encoded in one go, as HF encodes it
    for index, piece in enumerate(pieces):
        if index % 2 == 1:  # a placeholder: the user's characters, never a token
            pending += hidden[piece]
            continue
        start = 0
        for match in pattern.finditer(piece) if pattern is not None else ():
            pending += piece[start : match.start()]
            ids += _encode_ordinary(tokenizer, pending) + [specials[match.group()]]
            pending, start = "", match.end()
        pending += piece[start:]
    return ids + _encode_ordinary(tokenizer, pending)


def _encode_ordinary(tokenizer, text: str) -> list[int]:
    """`text` encoded with no special token matched (ours never matches them)."""
    if not text:
        return []
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.encode(text, split_special_tokens=True)
    return tokenizer.encode(text)


def end_of_turn_ids(tokenizer, template: str, eos_token_id: int | None = None) -> set[int]:
    """The ids that end the assistant's turn: the special token the template writes right after
    an assistant message (ChatML's `<|im_end|>`), the tokenizer's EOS and `eos_token_id` (the
    model config's)."""
    stop = {i for i in (tokenizer.eos_id, eos_token_id) if i is not None}
    marker = "7" * 24  # digits: survives trim and friends
    conversation = [{"role": "user", "content": "1"}, {"role": "assistant", "content": marker}]
    try:
        text = render_chat(
            template, conversation, add_generation_prompt=False, **special_token_names(tokenizer)
        )
    except InvalidInputError:
        return stop  # the template wants another conversation shape; EOS alone ends a turn
    after = text[text.find(marker) + len(marker) :] if marker in text else ""
    for content, token_id in tokenizer.special_tokens.items():
        if after.lstrip(" ").startswith(content):
            stop.add(token_id)
    return stop


class TextStream:
    """The text of a growing list of token ids, released as soon as it is final: a token that
    ends inside a UTF-8 character is held back until the character is complete, so a stream
    never shows broken bytes. `push(ids)` returns the new text; `flush()` the rest."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.released = tokenizer, [], 0

    def push(self, ids) -> str:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids)
        final = len(text.rstrip("\ufffd"))  # U+FFFD at the end: perhaps a character in pieces
        new = text[self.released : final] if final > self.released else ""
        self.released = max(self.released, final)
        return new

    def flush(self) -> str:
        text = self.tokenizer.decode(self.ids)
        new, self.released = text[self.released :], len(text)
        return new


class Chat:
    """A conversation with a model: the history, each reply generated by `generate` with a
    fresh drafter from `make_drafter` (None: vanilla) and streamed to `write`.

    Every turn renders and encodes the whole history again and decodes from scratch (no KV cache
    is kept between turns): simple, and the cost is one prefill per turn."""

    def __init__(
        self,
        params,
        config,
        tokenizer,
        template: str,
        *,
        system: str | None = None,
        make_drafter: Callable[[], object] | None = None,
        sampling=None,
        max_new_tokens: int = 256,
        seed: int | None = 0,
    ):
        from minieagle.sampling import SeededRandomness

        self.params, self.config = params, config
        self.tokenizer, self.template = tokenizer, template
        self.messages: list[dict] = []
        if system is not None:
            self.messages.append({"role": "system", "content": system})
        self.make_drafter = make_drafter or (lambda: None)
        self.sampling, self.max_new_tokens = sampling, max_new_tokens
        self.rng = SeededRandomness(seed)
        self.stop_ids = end_of_turn_ids(tokenizer, template, config.eos_token_id)

    def prompt_ids(self) -> list[int]:
        """The history so far, ending with the template's cue for the assistant."""
        return encode_chat(self.tokenizer, self.template, self.messages)

    def reply(self, text: str, write: Callable[[str], object] = lambda s: None):
        """Add the user's `text`, generate the reply (streamed to `write` piece by piece) and
        add it to the history. Returns the `GenerationResult`."""
        from minieagle.generate import generate

        self.messages.append({"role": "user", "content": text})
        stream = TextStream(self.tokenizer)

        def show(tokens: list[int]) -> None:
            write(stream.push(t for t in tokens if t not in self.stop_ids))

        result = generate(
            self.params,
            self.config,
            self.prompt_ids(),
            drafter=self.make_drafter(),
            max_new_tokens=self.max_new_tokens,
            sampling=self.sampling,
            rng=self.rng,
            stop_token_ids=self.stop_ids,
            on_tokens=show,
        )
        write(stream.flush())
        answer = [t for t in result.tokens if t not in self.stop_ids]
        self.messages.append({"role": "assistant", "content": self.tokenizer.decode(answer)})
        return result
