"""A model's chat template, rendered as Hugging Face transformers renders it, and the prompt
encoded with the template's special tokens (the conversation that decodes through it:
`minieagle.conversation`).

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

Templates are not trusted either. Whatever goes wrong while one renders (a Python error, the
sandbox's refusals, runaway recursion) becomes an InvalidInputError naming the template's line,
and rendering is bounded: RENDER_SECONDS of template code, RENDER_CHARACTERS of text, and no
`*` or `**` whose result would be larger than that text.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from pathlib import Path

import numpy as np

from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.hf_tokenizer import CHAT_TEMPLATE_FILE, HF_CONFIG_FILE, HFTokenizer

_ROLES = ("bos", "eos", "pad", "unk")
# How long a template may run and how much text it may write. A real chat template renders a
# conversation in milliseconds; a prompt longer than a million characters fits no model here.
RENDER_SECONDS = 10.0
RENDER_CHARACTERS = 1_000_000
_TEMPLATE_FILE = "<template>"  # the file name Jinja gives code compiled from a string


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


class _RenderLimit(Exception):
    """A template ran past RENDER_SECONDS or would write more than RENDER_CHARACTERS."""


class _Refusal(Exception):
    """A template's `raise_exception(message)`, raised inside the template."""


class ConversationRefusedError(InvalidInputError):
    """The template refused this conversation (its `raise_exception`): a conversation of
    another shape may render."""


def _too_large(operator: str, left, right) -> bool:
    """Whether `left operator right` ("*" or "**") would make a value larger than the text a
    template may write: a string or list repeated past RENDER_CHARACTERS, an integer power of
    more digits. Checked before Python computes it: neither can be interrupted once started."""
    if operator == "*" and isinstance(right, (str, list, tuple)):
        left, right = right, left
    if operator == "*" and isinstance(left, (str, list, tuple)) and isinstance(right, int):
        return len(left) * right > RENDER_CHARACTERS
    if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
        return right * math.log10(abs(left)) > RENDER_CHARACTERS
    return False


@cache
def _environment():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        """transformers' sandbox, with `*` and `**` refused when they would make a value
        larger than RENDER_CHARACTERS (`_too_large`)."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if _too_large(operator, left, right):
                raise _RenderLimit(
                    f"`{operator}` would make a value of more than {RENDER_CHARACTERS:,} characters"
                )
            return super().call_binop(context, operator, left, right)

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
        raise _Refusal(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
            sort_keys=sort_keys,
        )  # fmt: skip

    env = BoundedSandbox(
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
            "template or pass another with --template FILE"
        ) from None
    except (RecursionError, MemoryError) as error:  # nesting deeper than Python can compile
        raise InvalidInputError(
            f"the chat template cannot be compiled ({type(error).__name__}: its blocks nest "
            "too deeply); fix the template or pass another with --template FILE"
        ) from None


def render_chat(
    template: str, messages: list[dict], *, add_generation_prompt: bool = True, **variables
) -> str:
    """The text of `messages` ([{"role": ..., "content": ...}, ...]) under the Jinja chat
    `template`, rendered as transformers renders it (module docstring). `variables` are passed
    to the template too: the special-token names (`special_token_names`), or anything a
    template reads (`tools`, `documents`).

    Raises InvalidInputError with the template's own words when it refuses the conversation
    (`raise_exception`), and naming the template's line for anything else it does: a Python
    error (`{{ 1/0 }}`), a step the sandbox forbids, recursion without end, more than
    RENDER_SECONDS of running or RENDER_CHARACTERS of text."""
    import jinja2.sandbox

    compiled = _compiled(template)  # a syntax error is explained there
    context = {"tools": None, "documents": None, **variables}
    try:
        with _time_limit(RENDER_SECONDS):
            pieces = compiled.generate(
                messages=messages, add_generation_prompt=add_generation_prompt, **context
            )
            return _joined_within_limit(pieces)
    except _Refusal as error:
        raise ConversationRefusedError(
            f"the chat template refused this conversation: {error}; check the roles and their "
            "order (many templates want user and assistant turns to alternate)"
        ) from None
    except Exception as error:  # the template is input: whatever it raises is its fault
        where = _template_line(error, template)
        if isinstance(error, _RenderLimit):
            what = f"stopped {where}: {error}"
        elif isinstance(error, jinja2.sandbox.SecurityError):
            what = (
                f"was refused by the sandbox {where}: {error} (a template may read its "
                "inputs, not change them or reach Python internals)"
            )
        elif isinstance(error, RecursionError):
            what = f"recurses without end {where} (a macro that calls itself?)"
        else:
            what = f"fails {where}: {type(error).__name__}: {error}"
        raise InvalidInputError(
            f"the chat template {what}; fix the template, or pass another with --template FILE"
        ) from None


@contextmanager
def _time_limit(seconds: float):
    """Raise _RenderLimit inside template code (Jinja's compiled template functions) once it
    has run `seconds`: a trace function on this thread checks the clock at every template line
    and loop step, where a runaway loop spends its time."""
    deadline = time.monotonic() + seconds

    def on_template_line(frame, event, arg):
        if time.monotonic() > deadline:
            raise _RenderLimit(f"the render ran past its limit of {seconds:g} s")
        return on_template_line

    def on_call(frame, event, arg):
        return on_template_line if frame.f_code.co_filename == _TEMPLATE_FILE else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def _joined_within_limit(pieces) -> str:
    """The rendered pieces joined, or _RenderLimit once they pass RENDER_CHARACTERS."""
    text, size = [], 0
    for piece in pieces:
        size += len(piece)
        if size > RENDER_CHARACTERS:
            raise _RenderLimit(f"it wrote more than {RENDER_CHARACTERS:,} characters")
        text.append(piece)
    return "".join(text)


def _template_line(error: BaseException, template: str) -> str:
    """Where in the template `error` happened, as "at line N (`text of line N`)": the innermost
    template frame of its traceback (Jinja maps those frames to template lines), or "" when
    none is there."""
    line, tb = None, error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILE:
            line = tb.tb_lineno
        tb = tb.tb_next
    lines = template.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return "while rendering"
    text = lines[line - 1].strip()
    return f"at line {line} (`{text[:60]}{'...' if len(text) > 60 else ''}`)"


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
    except ConversationRefusedError:
        return stop  # the template wants another conversation shape; EOS alone ends a turn
    after = text[text.find(marker) + len(marker) :] if marker in text else ""
    for content, token_id in tokenizer.special_tokens.items():
        if after.lstrip(" ").startswith(content):
            stop.add(token_id)
    return stop


# ---------------------------------------------------------------------------- answers in windows


def assistant_cue(tokenizer, template: str) -> list[int]:
    """The ids every rendered request ends with (the template's cue for the answer): the longest
    common suffix of two requests rendered alone. Its first id closes every turn (ChatML's
    `<|im_end|>`), which `answer_spans` reads as the answer's end."""
    a = encode_chat(tokenizer, template, [{"role": "user", "content": "Say yes"}])
    b = encode_chat(tokenizer, template, [{"role": "user", "content": "Tell me a story?"}])
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    if n == 0:
        raise InvalidInputError("the chat template adds no common ending to requests; no cue")
    return a[-n:]


def answer_spans(windows: np.ndarray, cue: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per window of a chat distillation run (int [B, W]), (start, stop): the answer's first
    token (just after the first cue) and one past its end-of-turn token (the cue's first id),
    or the window's end. The target's text after its turn (distill keeps writing) is what no
    chat decodes. start = -1 where the cue is missing."""
    k = len(cue)
    runs = np.lib.stride_tricks.sliding_window_view(windows, k, axis=1)  # [B, W - k + 1, k]
    hit = (runs == np.asarray(cue)).all(axis=-1)
    starts = np.where(hit.any(axis=1), hit.argmax(axis=1) + k, -1)
    index = np.arange(windows.shape[1])[None, :]
    ends = (windows == cue[0]) & (index >= np.maximum(starts, 0)[:, None])
    stops = np.where(ends.any(axis=1), ends.argmax(axis=1) + 1, windows.shape[1])
    return starts, stops


def answer_label_mask(starts: np.ndarray, stops: np.ndarray, width: int) -> np.ndarray:
    """bool [B, width - 1]: the rows of a head's training batch (row t reads the target's
    features at position t and guesses token t + 2, the target's next token after t + 1) whose
    guessed token lies in [start, stop) (`answer_spans`); none where start = -1. The loss mask
    that scores the answers alone."""
    label = np.arange(width - 1)[None, :] + 2
    return (label >= starts[:, None]) & (label < stops[:, None]) & (starts[:, None] >= 0)
