"""Measured costs of the target on this machine: one verification forward over N tokens.

The cost curve verify(N) / verify(1) decides which draft trees can pay (docs/speed.md): on a
GPU it is nearly flat, on a CPU it grows with N. `minieagle.sizing` reads it to size the tree
and `minieagle.bench` reports it; both sit above this module. Tests never time anything.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from minieagle import inference, model
from minieagle import tree as trees
from minieagle.backend import synchronize, to_device
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.kvcache import KVCache


def spread(values) -> dict:
    """Median, min and max of a list of measurements."""
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_verify_cost(
    params,
    config: LlamaConfig,
    prompt,
    *,
    sizes=(1, 4, 8, 16, 26, 48),
    repeats: int = 7,
    fast: bool = False,
    lazy_logits: bool = False,
) -> dict:
    """Cost of one verification forward against the tree size: N chain tokens after a cached
    prompt (a chain has the same matmul shapes as any tree of N nodes), relative to N = 1; on
    the readable `model.forward`, or the fast path (`minieagle.inference`) with fast=True.
    lazy_logits (fast path only): the forward's logits left lazy and no row of them read, as
    verification's forward leaves them before its verdict reads the accepted path's rows.

    On a GPU LLM a decoding step is memory-bound and N tokens cost about as much as one; here the
    ratio shows how far that holds for a small model on a CPU."""
    if lazy_logits and not fast:
        raise InvalidInputError(
            "lazy_logits=True needs fast=True: the readable model.forward computes every row; "
            "pass fast=True, or leave lazy_logits False"
        )
    if fast:
        target = inference.prepare(params, config)
        params = target.params

        def run(ids, **kwargs):
            return target.forward(ids, lazy_logits=lazy_logits, **kwargs)
    else:
        params = params.params if isinstance(params, inference.PreparedTarget) else params

        def run(ids, **kwargs):
            return model.forward(params, config, ids, **kwargs)[:2]

    embed = params["model.embed_tokens.weight"]  # inputs go where the weights are
    cache = KVCache.for_model(config, params, capacity=len(prompt) + max(sizes))
    run(to_device(prompt, embed), cache=cache)
    cached = cache.length
    times = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            # The prompt's own tokens, cycled: one token repeated N times made SmolLM2's
            # 64-token forward 1.7 times slower on this CPU (a value-dependent slow path)
            chain = trees.Tree.chain(prompt[-1], [int(t) for t in np.resize(prompt, n - 1)])
            tokens = to_device(chain.tokens, embed)
            positions = to_device(trees.position_ids(chain, cached), embed)
            mask = to_device(trees.attention_mask(chain, cached), embed)
            synchronize(embed)
            start = time.perf_counter()
            logits, _ = run(tokens, position_ids=positions, attention_mask=mask, cache=cache)
            synchronize(embed if lazy_logits else logits)  # a GPU returns before its kernels end
            times[n].append(1e3 * (time.perf_counter() - start))
            cache.crop(cached)
    one = statistics.median(times[sizes[0]])
    return {
        "prompt_tokens": len(prompt),
        "ms": {str(n): spread(t) for n, t in times.items()},
        "relative_to_one": {str(n): statistics.median(t) / one for n, t in times.items()},
    }
