"""Speculative decoding through the real loop (minieagle.generate) with a draft transformer,
float64, on a 6-token vocabulary small enough to enumerate.

- The exact law of the emitted tokens (every branch of drafting and verification enumerated by
  `exact_distribution`) equals the target's autoregressive law from full, uncached forwards.
- Greedy speculative output is greedy vanilla output, token for token, stop reasons included.
- Self-drafting (draft == target) accepts every draft: tau = gamma + 1 at T = 0 and T = 1.
- A drafter that only proposes tokens the target never emits gets nothing accepted, and the
  output law is still the target's.
- q provenance: every sampled draft token was drawn from exactly the q its node carries, and that
  q is the draft's distribution processed like the target's (DeepSpec #31, HF #47932).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.generate import generate, greedy_reference
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.testing import autoregressive_law, exact_distribution, total_variation
from minieagle.tree import Tree

# A wide initialisation makes the next-token laws peaked and context-dependent, so greedy paths
# vary and a random draft model disagrees with the target often.
CONFIG = LlamaConfig(
    vocab_size=6,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
)
DRAFT_CONFIG = CONFIG.replace(num_hidden_layers=1)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
V, CONTEXT = CONFIG.vocab_size, CONFIG.max_position_embeddings
LAW_TOLERANCE = 1e-12  # float64; cached and uncached forwards differ only in summation order


@functools.cache
def _draft_params(seed: int) -> dict:
    return model.init_params(DRAFT_CONFIG, seed=seed, dtype=np.float64)


@functools.cache
def _logits(params_key: str, context: tuple) -> np.ndarray:
    """[V] logits after `context` from one uncached forward ("target" or "draft<seed>")."""
    if params_key == "target":
        params, config = TARGET, CONFIG
    else:
        params, config = _draft_params(int(params_key[5:])), DRAFT_CONFIG
    logits, _, _ = model.forward(params, config, np.asarray(context))
    return logits[-1]


def _target_law(sampling: SamplingParams):
    """next_dist(context) of the target: what plain sampling draws from."""
    return lambda context: target_distribution(_logits("target", tuple(context)), sampling)


def _speculative(prompt, drafter, sampling, rng, max_new_tokens, stop_at_eos=False):
    return generate(
        TARGET,
        CONFIG,
        prompt,
        drafter=drafter,
        sampling=sampling,
        rng=rng,
        max_new_tokens=max_new_tokens,
        stop_at_eos=stop_at_eos,
    )


def _assert_exact_law(prompt, make_drafter, sampling, n):
    """The enumerated law of generate's first n tokens equals the target's; returns the law of
    (tokens, accepted per cycle) for further checks."""

    def run(rng):
        result = _speculative(prompt, make_drafter(), sampling, rng, n)
        return tuple(result.tokens), tuple(result.accepted_per_cycle)

    outcomes = exact_distribution(run)
    tokens_law: dict = {}
    for (tokens, _), prob in outcomes.items():
        tokens_law[tokens] = tokens_law.get(tokens, 0.0) + prob
    want = autoregressive_law(_target_law(sampling), tuple(prompt), n)
    tv = total_variation(tokens_law, want)
    assert tv <= LAW_TOLERANCE, f"speculative law is {tv:.2e} away from the target's"
    return outcomes


# ---------------------------------------------------------------------------- test drafters


class _Tracking:
    """A drafter wrapper that keeps the sequence so far (prompt + emitted tokens)."""

    feature_keys: tuple = ()

    def __init__(self, inner=None):
        self.inner = inner

    def begin(self, prompt_ids, features, sampling) -> None:
        self.sequence, self.sampling = list(prompt_ids), sampling
        if self.inner is not None:
            self.inner.begin(prompt_ids, features, sampling)

    def propose(self, root, rng, max_nodes) -> Tree:
        assert root == self.sequence[-1], "the root must be the last emitted token"
        return self.inner.propose(root, rng, max_nodes)

    def accept(self, tokens, features, next_token) -> None:
        self.sequence += [*tokens[1:], next_token]
        if self.inner is not None:
            self.inner.accept(tokens, features, next_token)

    def draft_context(self, tree: Tree, node: int) -> tuple:
        """The sequence the drafter saw when it proposed `node`: everything up to its parent."""
        path, parent = [], int(tree.parents[node])
        while parent != 0:
            path.append(int(tree.tokens[parent]))
            parent = int(tree.parents[parent])
        return tuple(self.sequence) + tuple(path[::-1])


class _Mislabelled(_Tracking):
    """Samples like DraftModelDrafter but labels each draft with the *unprocessed* draft
    softmax (no temperature, top-k, top-p): the q-provenance bug the checks must catch."""

    def __init__(self, seed: int, gamma: int):
        super().__init__(DraftModelDrafter(_draft_params(seed), DRAFT_CONFIG, gamma))
        self.seed = seed

    def propose(self, root, rng, max_nodes) -> Tree:
        tree = super().propose(root, rng, max_nodes)
        plain = SamplingParams(temperature=1.0)
        proposals = [None] + [
            target_distribution(_logits(f"draft{self.seed}", self.draft_context(tree, i)), plain)
            for i in range(1, len(tree))
        ]
        return Tree(tree.tokens, tree.parents, tuple(proposals))


class _Adversarial(_Tracking):
    """A chain of drafts the target never emits: at each position a token with target
    probability 0, picked deterministically or sampled uniformly from two such tokens."""

    def __init__(self, gamma: int, sampled: bool):
        super().__init__()
        self.gamma, self.sampled = gamma, sampled

    def propose(self, root, rng, max_nodes) -> Tree:
        assert root == self.sequence[-1]
        context, drafts, proposals = list(self.sequence), [], []
        for _ in range(min(self.gamma, max_nodes - 1)):
            p = _target_law(self.sampling)(context)
            impossible = np.flatnonzero(p == 0)[:2]
            if self.sampled:
                q = np.zeros(V)
                q[impossible] = 0.5
                token = int(rng.draw(q))
            else:
                q, token = None, int(impossible[0])
            drafts.append(token)
            proposals.append(q)
            context.append(token)
        return Tree.chain(root, drafts, proposals)


# ---------------------------------------------------------------------------- the exact law

LAW_CASES = [
    # (sampling, tokens, gamma, prompt): supports kept small so the branches stay in the
    # hundreds (full support over 3 tokens would be ~10^5 runs of generate).
    (SamplingParams(temperature=1.0, top_k=2), 3, 2, [1, 3]),
    (SamplingParams(temperature=0.7, top_k=3, top_p=0.8), 3, 2, [1, 3]),
    (SamplingParams(temperature=0.7, top_p=0.6), 3, 3, [1, 0, 5]),
    (SamplingParams(temperature=1.0), 1, 2, [1, 3]),
    (SamplingParams(temperature=1.0), 2, 1, [1, 4]),
]


@pytest.mark.parametrize(("sampling", "n", "gamma", "prompt"), LAW_CASES, ids=str)
def test_speculative_output_has_the_target_law(sampling, n, gamma, prompt):
    outcomes = _assert_exact_law(
        prompt, lambda: DraftModelDrafter(_draft_params(1), DRAFT_CONFIG, gamma), sampling, n
    )
    accepted = {a for _, cycles in outcomes for a in cycles}
    assert 0 in accepted and max(accepted) >= 1  # both rejections and acceptances were walked


def test_the_law_check_catches_mislabelled_proposals():
    """Negative control: tokens sampled from the processed q but verified against the plain
    draft softmax give a different law."""
    sampling, n, gamma, prompt = LAW_CASES[0]
    with pytest.raises(AssertionError, match="speculative law"):
        _assert_exact_law(prompt, lambda: _Mislabelled(1, gamma), sampling, n)


# ---------------------------------------------------------------------------- greedy


prompts = st.lists(st.integers(0, V - 1), min_size=1, max_size=10)


@settings(deadline=None, max_examples=60)
@given(prompts, st.integers(0, 30), st.integers(1, 4), st.integers(0, 14))
def test_greedy_speculative_is_greedy_vanilla(prompt, draft_seed, gamma, n):
    drafter = DraftModelDrafter(_draft_params(draft_seed), DRAFT_CONFIG, gamma)
    result = _speculative(prompt, drafter, SamplingParams(), SeededRandomness(0), n)
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, n)
    assert result.target_forwards == len(result.accepted_per_cycle) <= max(n, 0)


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.integers(0, V - 1), min_size=1, max_size=CONTEXT - 1),
    st.integers(0, 30),
    st.integers(1, 4),
    st.integers(0, 40),
)
def test_greedy_speculative_stops_like_vanilla(prompt, draft_seed, gamma, n):
    """End-of-text, max_new_tokens and a full context stop both at the same token."""
    drafter = DraftModelDrafter(_draft_params(draft_seed), DRAFT_CONFIG, gamma)
    got = _speculative(prompt, drafter, SamplingParams(), SeededRandomness(0), n, True)
    want = _speculative(prompt, None, SamplingParams(), SeededRandomness(0), n, True)
    assert (got.tokens, got.stop_reason) == (want.tokens, want.stop_reason)


def test_greedy_cases_exercise_rejection_and_acceptance():
    """Guards the two tests above: random drafts are both rejected and accepted, and all three
    stop reasons occur, so the comparisons cover every path of the loop."""
    accepted, reasons = set(), set()
    for seed, prompt in enumerate([[1], [1, 3], [1, 0, 5], [4, 4, 4], [3] * 28, [1, 5, 2]]):
        drafter = DraftModelDrafter(_draft_params(seed), DRAFT_CONFIG, gamma=3)
        result = _speculative(prompt, drafter, SamplingParams(), SeededRandomness(0), 12, True)
        accepted |= set(result.accepted_per_cycle)
        reasons.add(result.stop_reason)
    assert 0 in accepted and max(accepted) >= 2
    assert reasons == {"eos", "max_new_tokens", "context_full"}


# ---------------------------------------------------------------------------- self-draft


class _CoinRecorder:
    """SeededRandomness that records every acceptance probability it is asked to flip."""

    def __init__(self, seed: int):
        self.inner, self.coins = SeededRandomness(seed), []

    def coin(self, p_true: float) -> bool:
        self.coins.append(p_true)
        return self.inner.coin(p_true)

    def draw(self, probs) -> int:
        return self.inner.draw(probs)


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(),
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=3, top_p=0.9),
    ],
    ids=repr,
)
@pytest.mark.parametrize("gamma", [1, 3])
def test_self_draft_accepts_every_proposal(sampling, gamma):
    """draft == target: p == q at every draft (up to float64 rounding of the cached forwards),
    so min(1, p/q) = 1 and tau = gamma + 1 exactly."""
    for seed, prompt in enumerate([[1], [1, 3, 4], [5, 0, 2, 2]]):
        rng = _CoinRecorder(seed)
        drafter = DraftModelDrafter(TARGET, CONFIG, gamma)
        result = _speculative(prompt, drafter, sampling, rng, 4 * (gamma + 1))
        assert result.accepted_per_cycle == [gamma] * 4
        assert result.tau == gamma + 1
        assert min(rng.coins) >= 1 - 1e-12


@pytest.mark.parametrize("max_new_tokens", [1, 4, 7])
def test_tau_counts_only_emitted_tokens(max_new_tokens):
    """tau = tokens returned / target forwards: with gamma = 10 self-drafted tokens a cycle, one
    forward accepts all 10 drafts, but max_new_tokens cuts them; the cut drafts do not count
    (the verifier's acceptance, accepted_per_cycle, still records all 10)."""
    drafter = DraftModelDrafter(TARGET, CONFIG, 10)
    result = _speculative([1, 3], drafter, SamplingParams(), SeededRandomness(0), max_new_tokens)
    assert result.target_forwards == 1 and result.accepted_per_cycle == [10]
    assert result.emitted_per_cycle == [max_new_tokens]
    assert result.tau == max_new_tokens == len(result.tokens)


@settings(max_examples=15)
@given(
    gamma=st.integers(1, 5),
    max_new_tokens=st.integers(0, 12),
    seed=st.integers(0, 3),
    stop_at_eos=st.booleans(),
)
def test_tau_is_emitted_tokens_per_target_forward(gamma, max_new_tokens, seed, stop_at_eos):
    """For any run, tau == len(tokens) / target_forwards (NaN when nothing was decoded)."""
    drafter = DraftModelDrafter(_draft_params(seed), DRAFT_CONFIG, gamma)
    sampling = SamplingParams(temperature=1.0)
    result = _speculative(
        [1, 4], drafter, sampling, SeededRandomness(seed), max_new_tokens, stop_at_eos
    )
    assert sum(result.emitted_per_cycle) == len(result.tokens)
    assert len(result.emitted_per_cycle) == result.target_forwards
    if result.target_forwards:
        assert result.tau == len(result.tokens) / result.target_forwards
    else:
        assert np.isnan(result.tau)


# ---------------------------------------------------------------------------- adversarial draft


@pytest.mark.parametrize(
    ("sampling", "sampled"),
    [
        (SamplingParams(temperature=1.0, top_k=1), False),
        (SamplingParams(temperature=1.0, top_k=2), True),
    ],
    ids=["top-1 target, fixed drafts", "top-2 target, sampled drafts"],
)
def test_impossible_drafts_are_never_accepted_and_the_law_holds(sampling, sampled):
    outcomes = _assert_exact_law([1, 3], lambda: _Adversarial(2, sampled), sampling, 3)
    assert all(a == 0 for _, cycles in outcomes for a in cycles)
    if not sampled:  # top-1 at T = 1 is the greedy continuation
        assert list(outcomes) == [(tuple(greedy_reference(TARGET, CONFIG, [1, 3], 3)), (0,) * 3)]


# ---------------------------------------------------------------------------- q provenance


class _DrawRecorder(SeededRandomness):
    """SeededRandomness that records each draw: a copy of the vector it was given, the result."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.draws = []

    def draw(self, probs) -> int:
        token = super().draw(probs)
        self.draws.append((np.array(probs, copy=True), token))
        return token


class _ProvenanceCheck(_Tracking):
    """Wraps a drafter; after each proposal asserts that node i's token came from the draw made
    for node i, from a vector bit-for-bit equal to the float64 q the node carries, and that this
    q is the draft model's distribution processed with the target's sampling params."""

    def __init__(self, inner, seed: int):
        super().__init__(inner)
        self.seed, self.checked = seed, 0

    def propose(self, root, rng, max_nodes) -> Tree:
        start = len(rng.draws)
        tree = super().propose(root, rng, max_nodes)
        draws = rng.draws[start:]
        sampled = [i for i in range(1, len(tree)) if tree.proposals[i] is not None]
        assert len(draws) == len(sampled), "one draw per sampled draft node, in node order"
        for node, (drawn_from, token) in zip(sampled, draws, strict=True):
            q = tree.proposals[node]
            assert q.dtype == np.float64 and np.array_equal(drawn_from, q), (
                f"node {node} carries a q that differs from the vector its token was drawn from"
            )
            assert token == tree.tokens[node]
            logits = _logits(f"draft{self.seed}", self.draft_context(tree, node))
            want = target_distribution(logits, self.sampling)
            np.testing.assert_allclose(q, want, rtol=0, atol=LAW_TOLERANCE)
            self.checked += 1
        return tree


PROVENANCE_SAMPLINGS = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=3),
    SamplingParams(temperature=1.3, top_p=0.8),
]


@pytest.mark.parametrize("sampling", PROVENANCE_SAMPLINGS, ids=repr)
def test_each_draft_is_drawn_from_the_q_it_carries(sampling):
    for seed in range(3):
        drafter = _ProvenanceCheck(DraftModelDrafter(_draft_params(seed), DRAFT_CONFIG, 3), seed)
        _speculative([1, 3, 4], drafter, sampling, _DrawRecorder(seed), 15)
        assert drafter.checked >= 5


def test_the_provenance_check_catches_a_relabelled_q():
    drafter = _ProvenanceCheck(_Mislabelled(0, 3), 0)
    with pytest.raises(AssertionError, match="differs from the vector its token was drawn from"):
        _speculative([1, 3, 4], drafter, PROVENANCE_SAMPLINGS[1], _DrawRecorder(0), 15)


OTHER_VOCAB = DRAFT_CONFIG.replace(vocab_size=8)  # a draft with another tokenizer


def test_a_draft_model_with_another_vocabulary_is_refused_where_the_drafter_is_built():
    """build_drafter and DraftModelDrafter(target_config=) compare the vocabularies (the CLI
    does the same through build_drafter); the same vocabulary is accepted."""
    from minieagle.drafters import build_drafter
    from minieagle.errors import InvalidInputError

    other = (model.init_params(OTHER_VOCAB, seed=3, dtype=np.float64), OTHER_VOCAB)
    message = "draft model vocab_size=8 differs from the target's 6"
    with pytest.raises(InvalidInputError, match=message):
        build_drafter("draft-model", draft_model=other, target=(TARGET, CONFIG))
    with pytest.raises(InvalidInputError, match=message):
        DraftModelDrafter(*other, target_config=CONFIG)
    same = (_draft_params(1), DRAFT_CONFIG)
    assert build_drafter("draft-model", draft_model=same, target=(TARGET, CONFIG)).gamma == 4


class _OtherVocabularyDrafter:
    """Drafts token 7 (T = 0) or token 1 with a proposal over 8 tokens (T > 0): what a draft
    model with an 8-token vocabulary does when nobody compared it with the target's."""

    feature_keys = ()

    def begin(self, prompt_ids, features, sampling):
        self.greedy = sampling.greedy

    def propose(self, root, rng, max_nodes):
        if self.greedy:
            return Tree.chain(root, [7])
        return Tree.chain(root, [1], [np.full(8, 1 / 8)])

    def accept(self, tokens, features, next_token):
        pass


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)])
def test_generate_refuses_drafts_outside_the_targets_vocabulary(sampling):
    """A drafter built without the target (so unchecked) drafting over another vocabulary: the
    loop names the mismatch (a token id beyond the target's vocabulary at T = 0, a proposal of
    another length at T > 0) instead of failing inside the verifier or the embedding."""
    from minieagle.errors import InvalidInputError

    drafter = _OtherVocabularyDrafter()
    with pytest.raises(InvalidInputError, match="target's vocabulary of 6 tokens"):
        _speculative([1, 3], drafter, sampling, SeededRandomness(0), 4)
