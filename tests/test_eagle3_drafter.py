"""EAGLE-3 drafting through the shared dynamic tree (`Eagle2Drafter` with an EAGLE-3 head), on a
7-layer, 6-token target small enough to enumerate, in float64.

- Greedy EAGLE-3 is greedy vanilla, token for token (any prompt, tree size, draft vocabulary).
- At T > 0 the exact law of the emitted tokens is the target's.
- Every draft is a target id inside the draft vocabulary (d2t applied); a drafter that forgets the
  mapping is caught.
- The features reach the head right: after the catch-up, the root's draft logits equal one
  uncached head forward over the whole prompt's fused features (inputs of the aux layers).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.drafters import build_drafter
from minieagle.drafters.eagle2 import Eagle2Drafter
from minieagle.drafters.head_drafter import Eagle3Head
from minieagle.generate import generate, greedy_reference
from minieagle.heads import eagle3
from minieagle.sampling import SamplingParams, SeededRandomness
from minieagle.testing import generation_law, target_law, total_variation

CONFIG = LlamaConfig(
    vocab_size=6,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=7,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=48,
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
V = CONFIG.vocab_size
FULL_CFG = eagle3.Eagle3Config.from_target(CONFIG)  # aux layers (2, 3, 4)
FULL = (eagle3.init_head(FULL_CFG, seed=1, dtype=np.float64), FULL_CFG, None)
REDUCED_CFG = eagle3.Eagle3Config.from_target(CONFIG, draft_vocab_size=4)
REDUCED_VOCAB = eagle3.DraftVocab(np.asarray([1, 3, 4, 5]), V)  # greedy text: 1s and 4s
REDUCED = (eagle3.init_head(REDUCED_CFG, seed=2, dtype=np.float64), REDUCED_CFG, REDUCED_VOCAB)
HEADS = {"full": FULL, "reduced": REDUCED}
LAW_TOLERANCE = 1e-12


def _drafter(head=REDUCED, depth=2, top_k=2, total_tokens=6, cls=Eagle2Drafter):
    return cls(TARGET, CONFIG, *head, depth=depth, top_k=top_k, total_tokens=total_tokens)


def _run(prompt, drafter, sampling=None, n=12, seed=0):
    return generate(
        TARGET,
        CONFIG,
        prompt,
        drafter=drafter,
        sampling=sampling or SamplingParams(),
        rng=SeededRandomness(seed),
        max_new_tokens=n,
        stop_at_eos=False,
    )


@settings(deadline=None, max_examples=25)
@given(
    st.lists(st.integers(0, V - 1), min_size=1, max_size=8),
    st.sampled_from(sorted(HEADS)),
    st.integers(1, 7),
    st.integers(1, 3),
    st.integers(2, 12),
    st.integers(0, 14),
)
def test_greedy_eagle3_is_greedy_vanilla(prompt, head, depth, top_k, total_tokens, n):
    top_k = min(top_k, total_tokens - 1)
    drafter = _drafter(HEADS[head], depth, top_k, total_tokens)
    result = _run(prompt, drafter, n=n)
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, n)


def test_greedy_eagle3_fills_the_context():
    prompt = [1, 3, 4]
    result = _run(prompt, _drafter(REDUCED, 7, 3, 12), n=CONFIG.max_position_embeddings)
    assert result.stop_reason == "context_full"
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, len(result.tokens))
    assert max(result.accepted_per_cycle) >= 1


LAW_CASES = [
    (SamplingParams(temperature=1.0), "reduced", [1, 4]),
    (SamplingParams(temperature=0.8, top_k=3), "full", [1, 3]),
    (SamplingParams(temperature=1.0, top_p=0.9), "reduced", [2]),
]


@pytest.mark.parametrize(("sampling", "head", "prompt"), LAW_CASES, ids=str)
def test_sampled_eagle3_has_the_target_law(sampling, head, prompt):
    n = 3
    law, accepted = generation_law(
        TARGET, CONFIG, prompt, lambda: _drafter(HEADS[head], 2, 2, 4), sampling, n
    )
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances were walked


def _drafted_tokens(drafter_factory, prompt=(1, 3, 4, 0)):
    drafter = drafter_factory()
    seen = []
    original = drafter.propose

    def recording(root, rng, max_nodes):
        tree = original(root, rng, max_nodes)
        seen.extend(int(t) for t in tree.tokens[1:])
        return tree

    drafter.propose = recording
    _run(list(prompt), drafter, n=10)
    return seen


class _ForgetsD2T(Eagle3Head):
    """A planted bug: draft ids used as target ids (the d2t offsets never applied)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.target_ids = self.xp.arange(self.vocab.size)


def test_drafts_are_target_ids_of_the_draft_vocabulary(monkeypatch):
    drafts = _drafted_tokens(lambda: _drafter(REDUCED, 3, 2, 8))
    assert drafts and set(drafts) <= set(REDUCED_VOCAB.ids.tolist())
    from minieagle.drafters import head_drafter

    monkeypatch.setitem(head_drafter.HEAD_ADAPTERS, eagle3.Eagle3Config, _ForgetsD2T)
    wrong = _drafted_tokens(lambda: _drafter(REDUCED, 3, 2, 8))
    assert not set(wrong) <= set(REDUCED_VOCAB.ids.tolist())


@pytest.mark.parametrize("head", sorted(HEADS))
def test_the_root_logits_equal_one_uncached_head_forward(head):
    """After the catch-up over a prompt, the root's draft logits are the head's output at the
    last pair (f_{n-2}, x_{n-1}) of one uncached forward over the prompt's fused features."""
    params, cfg, vocab = HEADS[head]
    prompt = [1, 3, 4, 0, 5, 2, 2]
    drafter = _drafter(HEADS[head], 1, 1, 2)
    _run(prompt, drafter, n=0 + 1)  # one cycle: begin + the first propose's catch-up
    fresh = _drafter(HEADS[head], 1, 1, 2)
    _, hidden, _ = model.forward(
        TARGET, CONFIG, np.asarray(prompt[:-1]), output_hidden=cfg.aux_layers
    )
    fresh.begin(prompt, hidden, SamplingParams())
    fresh._catch_up()
    fused = eagle3.fuse_features(hidden, cfg.aux_layers)  # [n - 1, 3d]
    _, draft_logits, _ = eagle3.head_forward(params, cfg, TARGET, np.asarray(prompt[1:]), fused)
    ids = (vocab or eagle3.DraftVocab.full(V)).ids
    root_logits = fresh.root_prediction[1]  # [V]
    np.testing.assert_allclose(root_logits[ids], draft_logits[-1], rtol=0, atol=1e-12)
    outside = np.setdiff1d(np.arange(V), ids)
    assert np.all(np.isneginf(root_logits[outside]))


def test_build_drafter_eagle3_defaults_and_errors():
    drafter = build_drafter("eagle3", target=(TARGET, CONFIG), head=REDUCED)
    assert (drafter.depth, drafter.top_k, drafter.total_tokens) == (7, 8, 26)
    with pytest.raises(ValueError, match="needs the target and a trained eagle3 head"):
        build_drafter("eagle3", target=(TARGET, CONFIG))
    wide = CONFIG.replace(hidden_size=32)
    with pytest.raises(ValueError, match="hidden_size=16 but the target has 32"):
        Eagle2Drafter(model.init_params(wide, dtype=np.float64), wide, *REDUCED)
    shallow = CONFIG.replace(num_hidden_layers=4)
    with pytest.raises(ValueError, match=r"inputs of target layers \(2, 3, 4\).*4 layers"):
        Eagle2Drafter(model.init_params(shallow, dtype=np.float64), shallow, *REDUCED)
    with pytest.raises(ValueError, match="draft_vocab_size=4"):
        Eagle2Drafter(TARGET, CONFIG, REDUCED[0], REDUCED_CFG, None)
