"""The tiny target and random EAGLE head the drafter tests share (a plain module beside them).

A wide initialisation makes the target's next-token laws peaked and context-dependent; six tokens
let a random head's drafts be accepted often, so every branch of the speculative loop runs, and
keep exact enumeration of the output law cheap.
"""

from __future__ import annotations

import numpy as np

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.generate import generate
from minieagle.heads.eagle1 import Eagle1Config, init_head
from minieagle.sampling import SamplingParams, SeededRandomness

CONFIG = LlamaConfig(
    vocab_size=6,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,  # room for several cycles of the 26-node default tree
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
HEAD_CFG = Eagle1Config.from_target(CONFIG)
HEAD = init_head(HEAD_CFG, seed=1, dtype=np.float64)
V = CONFIG.vocab_size
TOLERANCE = 1e-10  # float64; cached, tree-masked and uncached forwards differ in rounding only
LAW_TOLERANCE = 1e-12


def run(prompt, drafter, sampling=None, rng=None, n=12):
    """`generate` on the tiny target: greedy and seed 0 unless told, end-of-text ignored."""
    return generate(
        TARGET,
        CONFIG,
        prompt,
        drafter=drafter,
        sampling=sampling or SamplingParams(),
        rng=rng or SeededRandomness(0),
        max_new_tokens=n,
        stop_at_eos=False,
    )


def replace_head_forward(monkeypatch, head_forward):
    """Drive the EAGLE-1 head through `head_forward(head, cfg, target_params, tokens, features,
    cache=..., position_ids=..., attention_mask=...)` (the readable function's signature,
    returning (predicted, logits, caches)) instead of the fast path: a planted bug, a
    counter or an oracle standing in for the head."""
    from minieagle.drafters.head_drafter import Eagle1Head

    def forward(self, tokens, features, cache, *, target_features, last_only=False, **placement):
        out = head_forward(
            self.head, self.cfg, self.target_params, tokens, features, cache=cache, **placement
        )
        return out[0], out[1][-1:] if last_only else out[1]

    monkeypatch.setattr(Eagle1Head, "forward", forward)
