"""The Llama configuration and the named presets.

`LlamaConfig` carries the fields of Hugging Face's `LlamaConfig` that change the computation, under
the same names, so that `config.json` files read and write without translation
(see `checkpoint.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from minieagle.errors import InvalidInputError


@dataclass(frozen=True)
class LlamaConfig:
    """Shape and constants of a Llama decoder (Hugging Face `LlamaForCausalLM` semantics).

    vocab_size: V, number of token ids.
    hidden_size: d, width of the residual stream.
    intermediate_size: width of the SwiGLU MLP.
    num_hidden_layers: L, number of decoder layers.
    num_attention_heads: query heads; head_dim = hidden_size // num_attention_heads unless given.
    num_key_value_heads: key/value heads (grouped-query attention when fewer than query heads).
    max_position_embeddings: the longest sequence (prompt + generation) the model accepts.
    rope_theta: base of the rotary frequencies.
    rms_norm_eps: epsilon inside RMSNorm.
    tie_word_embeddings: if True the LM head reuses `model.embed_tokens.weight`.
    bos_token_id, eos_token_id: special ids of the tokenizer.
    """

    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    bos_token_id: int = 1
    eos_token_id: int = 2

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise InvalidInputError(f"{name}={value!r} must be a positive integer")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise InvalidInputError(
                    f"hidden_size={self.hidden_size} is not divisible by "
                    f"num_attention_heads={self.num_attention_heads}; "
                    "pick a divisor or set head_dim"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.head_dim % 2:
            raise InvalidInputError(f"head_dim={self.head_dim} must be even for rotate-half RoPE")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidInputError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}; grouped-query attention "
                "needs each key/value head to serve the same number of query heads"
            )
        for name in ("bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise InvalidInputError(
                    f"{name}={value} is outside [0, vocab_size={self.vocab_size})"
                )

    def replace(self, **changes) -> LlamaConfig:
        """A copy with some fields changed (validated again). A head_dim that was derived from
        hidden_size // num_attention_heads is derived again unless given."""
        derived = self.head_dim == self.hidden_size // self.num_attention_heads
        if derived and "head_dim" not in changes:
            changes["head_dim"] = None
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, LlamaConfig] = {
    # Trains in seconds: the unit tests use it.
    "nano": LlamaConfig(
        vocab_size=320,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    ),
    # Trains in minutes: the notebooks use it.
    "tiny": LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    ),
    # The shipped target: 12 layers, so one decoder layer costs under 1/12 of a forward.
    "small": LlamaConfig(
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    ),
    # The shipped draft model of classic speculative decoding: same tokenizer, 2 layers.
    "small-draft": LlamaConfig(
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    ),
}


def preset(name: str) -> LlamaConfig:
    """The named preset configuration: one of `PRESETS`."""
    if name not in PRESETS:
        raise InvalidInputError(
            f"unknown preset {name!r}; expected one of {sorted(PRESETS)} "
            "(or pass a config.json with --config)"
        )
    return PRESETS[name]
