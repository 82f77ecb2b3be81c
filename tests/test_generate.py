"""Vanilla decoding (minieagle.generate): the cached loop against the cache-free oracle, the exact
law of each sampled token, reproducibility, the three ways to stop, and errors.

The law of a sampled token is checked exactly, not estimated: a recording `Randomness` captures
the probability vector each `draw` receives, which must equal `target_distribution` of the
oracle's logits for the same prefix.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import generate as generate_module
from minieagle import inference, model
from minieagle.config import preset
from minieagle.generate import generate, greedy_reference
from minieagle.sampling import SamplingParams, target_distribution

# A wide initialisation gives peaked, prompt-dependent logits, so greedy paths are not constant
# and a wrong position or a stale cache entry changes the argmax.
CONFIG = preset("nano").replace(initializer_range=0.5)
PARAMS = model.init_params(CONFIG, seed=3, dtype=np.float64)
V, CONTEXT = CONFIG.vocab_size, CONFIG.max_position_embeddings
LAW_TOLERANCE = 1e-12  # float64; cached and uncached forwards differ only in summation order

prompts = st.lists(st.integers(0, V - 1), min_size=1, max_size=12)


class RecordingRandomness:
    """Returns scripted tokens (or the most probable one) and records each vector it is given."""

    def __init__(self, script=()):
        self.script, self.seen = list(script), []

    def coin(self, p_true: float) -> bool:
        raise AssertionError("vanilla decoding never flips a coin")

    def draw(self, probs) -> int:
        self.seen.append(np.array(probs))
        return self.script.pop(0) if self.script else int(np.argmax(probs))


def _oracle_logits(prefix) -> np.ndarray:
    """[V] logits after `prefix`, from one uncached forward over the whole sequence."""
    logits, _, _ = model.forward(PARAMS, CONFIG, np.asarray(prefix))
    return logits[-1]


# ---------------------------------------------------------------------------- greedy


@settings(max_examples=20, deadline=None)
@given(prompt=prompts, n=st.integers(0, 16))
def test_greedy_equals_the_cache_free_oracle(prompt, n):
    result = generate(PARAMS, CONFIG, prompt, max_new_tokens=n, stop_at_eos=False, seed=n)
    assert result.tokens == greedy_reference(PARAMS, CONFIG, prompt, n)
    assert result.stop_reason == "max_new_tokens"
    assert result.prompt_length == len(prompt)
    assert result.target_forwards == n  # vanilla: one target forward per token, prefill apart
    assert result.tau == 1.0 if n else np.isnan(result.tau)  # no forward: no tau


def test_greedy_paths_are_not_degenerate():
    """Guards the oracle test above: different prompts must lead to different continuations."""
    paths = {tuple(greedy_reference(PARAMS, CONFIG, [1, t], 6)) for t in range(3, 13)}
    assert len(paths) >= 5


def test_oracle_comparison_catches_a_decoder_that_forgets_positions(monkeypatch):
    """A broken decoder (every new token placed at position 0) must disagree with the oracle."""
    real_forward = inference.PreparedTarget.forward

    def forgetful_forward(self, ids, **kwargs):
        kwargs["position_ids"] = np.zeros(len(ids), dtype=np.int64)
        return real_forward(self, ids, **kwargs)

    monkeypatch.setattr(inference.PreparedTarget, "forward", forgetful_forward)
    prompt, n = [1, 40, 41, 42], 12
    broken = generate(PARAMS, CONFIG, prompt, max_new_tokens=n, stop_at_eos=False).tokens
    monkeypatch.undo()
    assert broken != greedy_reference(PARAMS, CONFIG, prompt, n)


# ---------------------------------------------------------------------------- the law of each token

SAMPLINGS = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(temperature=1.3, top_p=0.8),
    SamplingParams(temperature=0.9, top_k=40, top_p=0.95),
]


def _laws_mismatch(sampling, prompt, script) -> list[int]:
    """Steps at which the vector handed to `draw` differs from the oracle's law for that prefix."""
    rng = RecordingRandomness(script)
    result = generate(
        PARAMS,
        CONFIG,
        prompt,
        max_new_tokens=len(script),
        sampling=sampling,
        rng=rng,
        stop_at_eos=False,
    )
    assert result.tokens == script
    assert len(rng.seen) == len(script)  # one draw per token
    bad = []
    for step, seen in enumerate(rng.seen):
        law = target_distribution(_oracle_logits(prompt + script[:step]), sampling)
        if not np.allclose(seen, law, rtol=LAW_TOLERANCE, atol=LAW_TOLERANCE):
            bad.append(step)
    return bad


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=repr)
def test_each_draw_gets_the_target_distribution_of_its_prefix(sampling):
    prompt = [1, 17, 200, 33]
    law = target_distribution(_oracle_logits(prompt), sampling)
    # the first token is an unlikely kept one, so later steps see a prefix greedy would not reach
    unlikely = int(np.flatnonzero(law)[np.argmin(law[law > 0])])
    script = [unlikely, 5, 250, 5, 77]
    assert _laws_mismatch(sampling, prompt, script) == []


def test_law_check_catches_a_loop_that_ignores_top_p(monkeypatch):
    sampling = SamplingParams(temperature=1.3, top_p=0.8)

    def no_top_p(logits, params):
        return target_distribution(logits, SamplingParams(temperature=params.temperature))

    monkeypatch.setattr(generate_module, "target_distribution", no_top_p)
    assert _laws_mismatch(sampling, [1, 17, 200, 33], [9, 10, 11]) == [0, 1, 2]


def test_same_seed_same_tokens_different_seed_different_tokens():
    sampling = SamplingParams(temperature=1.0)

    def run(seed):
        return generate(
            PARAMS,
            CONFIG,
            [1, 50],
            max_new_tokens=24,
            sampling=sampling,
            seed=seed,
            stop_at_eos=False,
        ).tokens

    assert run(7) == run(7)
    assert run(7) != run(8)


# ---------------------------------------------------------------------------- stopping


def test_stops_right_after_end_of_text():
    eos = CONFIG.eos_token_id
    rng = RecordingRandomness([10, 11, eos, 12])
    result = generate(
        PARAMS, CONFIG, [1, 5], max_new_tokens=10, sampling=SamplingParams(temperature=1.0), rng=rng
    )
    assert result.tokens == [10, 11, eos]
    assert result.stop_reason == "eos"
    assert result.target_forwards == 3  # one per token: no forward after end-of-text


def test_runs_past_end_of_text_when_asked():
    eos = CONFIG.eos_token_id
    rng = RecordingRandomness([10, eos, 12, 13])
    result = generate(
        PARAMS,
        CONFIG,
        [1, 5],
        max_new_tokens=4,
        sampling=SamplingParams(temperature=1.0),
        rng=rng,
        stop_at_eos=False,
    )
    assert result.tokens == [10, eos, 12, 13]
    assert result.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("n", [0, 1, 5])
def test_stops_after_max_new_tokens(n):
    result = generate(PARAMS, CONFIG, [1, 5, 6], max_new_tokens=n, stop_at_eos=False)
    assert len(result.tokens) == n
    assert result.target_forwards == n
    assert result.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("prompt_length", [CONTEXT - 6, CONTEXT - 1])
def test_stops_when_the_context_is_full(prompt_length):
    """Every position 0 .. CONTEXT - 1 is fed once; the token predicted at the last one is
    emitted too, so the sequence ends CONTEXT + 1 tokens long."""
    prompt = [1] + [(7 * i) % (V - 3) + 3 for i in range(prompt_length - 1)]
    result = generate(PARAMS, CONFIG, prompt, max_new_tokens=50, stop_at_eos=False)
    room = CONTEXT + 1 - prompt_length
    assert result.stop_reason == "context_full"
    assert len(result.tokens) == room
    assert result.tokens == greedy_reference(PARAMS, CONFIG, prompt, room)


def test_a_budget_that_exactly_fills_the_context_stops_on_the_budget():
    prompt = [1] * (CONTEXT - 3)
    result = generate(PARAMS, CONFIG, prompt, max_new_tokens=4, stop_at_eos=False)
    assert (len(result.tokens), result.stop_reason) == (4, "max_new_tokens")


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("prompt", "max_new_tokens", "message"),
    [
        ([], 4, "the prompt is empty"),
        ([1, 5], -1, "max_new_tokens=-1 is negative"),
        ([1] * (CONTEXT + 1), 4, f"the prompt has {CONTEXT + 1} tokens but the context holds"),
        ([1, V], 4, f"token id {V} is outside [0, vocab_size={V})"),
        ([1, -3], 4, "token id -3 is outside"),
    ],
)
def test_bad_requests_are_refused_with_a_fix(prompt, max_new_tokens, message):
    with pytest.raises(ValueError) as error:
        generate(PARAMS, CONFIG, prompt, max_new_tokens=max_new_tokens)
    assert message in str(error.value)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_fast_and_the_readable_path_emit_the_same_tokens(temperature):
    """generate on the fast inference path (the default) and on the readable model.forward
    (fast=False) emit the same tokens in float64, greedy and sampled with one seed."""
    sampling = SamplingParams(temperature=temperature)
    options = dict(max_new_tokens=16, sampling=sampling, seed=3, stop_at_eos=False)
    runs = [
        generate(PARAMS, CONFIG, [1, 40, 41, 42], fast=fast, **options).tokens
        for fast in (True, False)
    ]
    assert runs[0] == runs[1]
    if temperature == 0:
        assert runs[0] == greedy_reference(PARAMS, CONFIG, [1, 40, 41, 42], 16)


def test_an_unknown_verification_is_refused_naming_the_choices():
    message = r"verification='blocks' is not one of \['block', 'token'\]"
    with pytest.raises(ValueError, match=message):
        generate(PARAMS, CONFIG, [1, 5], max_new_tokens=2, verification="blocks")


def test_both_verifications_reach_the_greedy_tokens_through_a_drafter():
    """A drafter whose chains are right for two tokens, then wrong: block and token-by-token
    verification emit the same greedy tokens (vanilla's) and accept the same drafts."""
    from minieagle.drafters import NoDrafter
    from minieagle.tree import Tree

    class HalfRightChain(NoDrafter):
        def propose(self, root, rng, max_nodes):
            context = self.seen + [root]
            good = greedy_reference(PARAMS, CONFIG, context, 2)
            drafts = [*good, (good[-1] + 1) % V][: max(0, max_nodes - 1)]
            return Tree.chain(root, drafts)

        def begin(self, prompt_ids, features, sampling):
            self.seen = list(prompt_ids[:-1])

        def accept(self, tokens, features, next_token):
            self.seen += list(tokens)

    runs = {v: generate(PARAMS, CONFIG, [1, 40, 41], drafter=HalfRightChain(), max_new_tokens=12,
                        stop_at_eos=False, verification=v) for v in ("block", "token")}  # fmt: skip
    assert runs["block"].tokens == runs["token"].tokens
    assert runs["block"].tokens == greedy_reference(PARAMS, CONFIG, [1, 40, 41], 12)
    assert runs["block"].accepted_per_cycle == runs["token"].accepted_per_cycle
    assert max(runs["block"].accepted_per_cycle) == 2
