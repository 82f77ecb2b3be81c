"""Public tests for the draft-model drafter: run them with `python -m pytest` in this folder."""

import numpy as np
import pytest

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.generate import generate
from minieagle.sampling import SamplingParams, SeededRandomness

CONFIG = LlamaConfig(
    vocab_size=6, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
    initializer_range=0.5, bos_token_id=1, eos_token_id=2,
)  # fmt: skip
DRAFT_CONFIG = CONFIG.replace(num_hidden_layers=1)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
DRAFT = model.init_params(DRAFT_CONFIG, seed=3, dtype=np.float64)
GREEDY = SamplingParams(temperature=0.0)


def greedy_continuation(params, config, context, n):
    """The draft model's own greedy tokens after `context`, by uncached forwards."""
    context = list(context)
    for _ in range(n):
        logits, _, _ = model.forward(params, config, np.asarray(context))
        context.append(int(np.argmax(logits[-1])))
    return context[-n:]


@pytest.mark.points(2)
def test_first_cycle_drafts_the_draft_models_greedy_continuation():
    """Cycle 1 at T = 0: the chain is the draft model's argmax continuation of the prompt."""
    prompt = [1, 4, 3, 5]
    drafter = DraftModelDrafter(DRAFT, DRAFT_CONFIG, gamma=3)
    drafter.begin(prompt, {}, GREEDY)
    tree = drafter.propose(prompt[-1], SeededRandomness(0), max_nodes=16)
    want = greedy_continuation(DRAFT, DRAFT_CONFIG, prompt, 3)
    got = [int(t) for t in tree.tokens[1:]]
    assert got == want, (
        f"drafted {got}, but the draft model's greedy continuation of the prompt is {want}: read "
        "the pending tokens and the root with one _step, then feed each draft back"
    )
    assert list(tree.parents) == [-1, 0, 1, 2], (
        f"a chain has parents [-1, 0, 1, 2], got {list(tree.parents)}"
    )


@pytest.mark.points(2)
def test_greedy_speculative_equals_greedy_vanilla():
    """T = 0: speculative decoding with the draft model emits vanilla greedy's tokens."""
    prompt = [1, 5, 4]
    vanilla = generate(
        TARGET, CONFIG, prompt, max_new_tokens=12, sampling=GREEDY, stop_at_eos=False
    )
    spec = generate(
        TARGET, CONFIG, prompt, drafter=DraftModelDrafter(DRAFT, DRAFT_CONFIG, gamma=3),
        max_new_tokens=12, sampling=GREEDY, stop_at_eos=False,
    )  # fmt: skip
    assert spec.tokens == vanilla.tokens, (
        f"greedy speculative decoding emitted {spec.tokens}, vanilla greedy {vanilla.tokens}"
    )
