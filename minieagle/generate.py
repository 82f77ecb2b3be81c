"""Vanilla autoregressive decoding with a KV cache: one target forward per emitted token.

This is the baseline every speculative method is measured against and must reproduce: greedy
speculative output equals `generate(..., SamplingParams(temperature=0))` token for token, and at
T > 0 its output distribution equals this loop's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from minieagle import model
from minieagle.backend import array_module, to_host
from minieagle.config import LlamaConfig
from minieagle.kvcache import KVCache
from minieagle.sampling import Randomness, SamplingParams, SeededRandomness, sample_token


@dataclass
class GenerationResult:
    """What one call emitted and what it cost."""

    tokens: list[int]  # the new tokens only (an end-of-text token, if emitted, included)
    prompt_length: int
    stop_reason: str  # "eos" or "max_new_tokens"
    target_forwards: int  # forward passes of the target, prefill included
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    @property
    def ms_per_token(self) -> float:
        """Decoding time per emitted token after the prefill, in milliseconds."""
        return 1e3 * self.decode_seconds / max(1, len(self.tokens))


def check_prompt(config: LlamaConfig, prompt_ids, max_new_tokens: int) -> None:
    """Errors for prompts the model cannot continue."""
    n = len(prompt_ids)
    if n == 0:
        raise ValueError("the prompt is empty; pass at least one token (e.g. the <|bos|> id)")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} is negative; pass a count such as 64")
    if n >= config.max_position_embeddings:
        raise ValueError(
            f"the prompt has {n} tokens but the context holds "
            f"max_position_embeddings={config.max_position_embeddings}; shorten the prompt"
        )


def generate(
    params,
    config: LlamaConfig,
    prompt_ids,
    *,
    max_new_tokens: int = 64,
    sampling: SamplingParams | None = None,
    rng: Randomness | None = None,
    seed: int | None = None,
    stop_at_eos: bool = True,
) -> GenerationResult:
    """Continue `prompt_ids` (host ints) one token per target forward.

    Stops at end-of-text (if `stop_at_eos`), after `max_new_tokens`, or when the context is full.
    Sampling: greedy by default; `rng` (any `Randomness`) or `seed` drives T > 0.
    """
    sampling = sampling or SamplingParams()
    rng = rng or SeededRandomness(seed)
    prompt_ids = [int(t) for t in prompt_ids]
    check_prompt(config, prompt_ids, max_new_tokens)
    xp = array_module(params["model.embed_tokens.weight"])
    budget = min(max_new_tokens, config.max_position_embeddings - len(prompt_ids))
    cache = KVCache.for_model(config, params, capacity=len(prompt_ids) + budget)

    start = time.perf_counter()
    logits, _, _ = model.forward(params, config, xp.asarray(prompt_ids), cache=cache)
    forwards, tokens, stop_reason = 1, [], "max_new_tokens"
    next_logits = logits[-1]
    prefill_done = time.perf_counter()
    while len(tokens) < budget:
        token = sample_token(next_logits, sampling, rng)
        tokens.append(token)
        if stop_at_eos and token == config.eos_token_id:
            stop_reason = "eos"
            break
        if len(tokens) == budget:
            break
        logits, _, _ = model.forward(params, config, xp.asarray([token]), cache=cache)
        next_logits = logits[-1]
        forwards += 1
    end = time.perf_counter()
    return GenerationResult(
        tokens, len(prompt_ids), stop_reason, forwards, prefill_done - start, end - prefill_done
    )


def greedy_reference(params, config: LlamaConfig, prompt_ids, max_new_tokens: int) -> list[int]:
    """Greedy continuation without any cache: a full forward over the whole sequence per token.
    Slow and obviously right; the oracle the cached loop is tested against."""
    xp = array_module(params["model.embed_tokens.weight"])
    ids = [int(t) for t in prompt_ids]
    out = []
    for _ in range(max_new_tokens):
        logits, _, _ = model.forward(params, config, xp.asarray(ids))
        token = int(np.argmax(to_host(logits[-1])))
        out.append(token)
        ids.append(token)
    return out
