"""The EAGLE heads shipped for SmolLM2-135M-Instruct (minieagle/pretrained/smollm2-eagle1 and
smollm2-eagle3): they load for the real model, they draft tokens the model accepts on a chat
prompt, and EAGLE-2 and EAGLE-3 decoding in float64 emits exactly vanilla greedy decoding's
tokens. Marked `real_model` (SmolLM2 is downloaded into the cache on first use)."""

from __future__ import annotations

import numpy as np
import pytest

from minieagle.chat import encode_chat, end_of_turn_ids, load_chat_template
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import PRETRAINED
from minieagle.drafters import build_drafter
from minieagle.generate import generate
from minieagle.heads.eagle1 import load_head
from minieagle.heads.eagle3_io import load_eagle3_head

pytestmark = pytest.mark.real_model

PROMPT = "Write a Python function that returns the largest of three numbers."


@pytest.fixture(scope="module")
def smollm2_float64(smollm2_dir):
    params, config, tokenizer = load_checkpoint(smollm2_dir, dtype=np.float64)
    template = load_chat_template(smollm2_dir, tokenizer)
    ids = encode_chat(tokenizer, template, [{"role": "user", "content": PROMPT}])
    return params, config, ids, end_of_turn_ids(tokenizer, template, config.eos_token_id)


@pytest.mark.parametrize("method", ["eagle2", "eagle3"])
def test_shipped_heads_emit_vanilla_greedy_tokens_and_get_accepted(
    smollm2_dir, smollm2_float64, method
):
    params, config, ids, stop = smollm2_float64
    if method == "eagle3":
        head = load_eagle3_head(
            PRETRAINED / "smollm2-eagle3", dtype=np.float64, target_config=config,
            target_dir=smollm2_dir,
        )  # fmt: skip
    else:
        head = load_head(PRETRAINED / "smollm2-eagle1", dtype=np.float64, target_dir=smollm2_dir)
    drafter = build_drafter(method, target=(params, config), head=head)
    n = 24
    vanilla = generate(params, config, ids, max_new_tokens=n, stop_token_ids=stop)
    drafted = generate(params, config, ids, drafter=drafter, max_new_tokens=n, stop_token_ids=stop)
    assert drafted.tokens == vanilla.tokens
    assert drafted.tau > 1.5, f"{method} accepted too little on SmolLM2: tau {drafted.tau:.2f}"
