"""What an importer returns: a pretrained Llama as minieagle holds it, plus the files that travel
with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minieagle.config import LlamaConfig


@dataclass
class ImportedLlama:
    """A pretrained Llama read from another format.

    params: HF tensor names -> float32 arrays, linear weights `[out, in]` (`model.param_shapes`).
    config: its `LlamaConfig`.
    files: file name -> text to write beside the weights (tokenizer.json, tokenizer_config.json,
        generation_config.json, special_tokens_map.json, LICENSE), whichever the source has.
    tokenizer_fields: a GGUF's tokenizer metadata as plain Python values (keys such as
        `tokenizer.ggml.tokens`, `tokenizer.chat_template`); empty for a HF directory.
    notes: what was dropped or converted on the way, one sentence each, for the user.
    source: the file or directory it was read from.
    pad_token_id: the padding id the source names (a GGUF's `tokenizer.ggml.padding_token_id`,
        a HF config.json's `pad_token_id`), None when it names none.
    """

    params: dict[str, np.ndarray]
    config: LlamaConfig
    source: Path
    files: dict[str, str] = field(default_factory=dict)
    tokenizer_fields: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pad_token_id: int | None = None
