"""The EAGLE-1 drafter (minieagle.drafters.eagle1) through the real loop, float64, on a 6-token
target with a randomly initialised head.

- Greedy EAGLE-1 decoding emits exactly the greedy reference's tokens (any head, any tree).
- At T > 0 the exact law of the emitted tokens (drafting and verification enumerated) is the
  target's autoregressive law; labelling siblings with the unconditional q breaks it.
- Every sampled child carries q minus its elder siblings, renormalised: what it was drawn from.
- Tree attention: the draft logits at every node equal an uncached head forward over the real
  pairs followed by the node's path; a wrong mask or wrong positions are caught.
- Head-cache bookkeeping: the committed cache equals a fresh forward over all real pairs.
- Tree shapes (EAGLE-1's 26-token default, chains, pruning to max_nodes), head forwards per cycle.
- An oracle head (the target's true next feature) gets every draft accepted: tau = depth + 1.
- Errors: unknown trees, malformed path lists, heads built for another target; CLI wiring.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_eagle import (
    CONFIG,
    HEAD,
    HEAD_CFG,
    LAW_TOLERANCE,
    TARGET,
    TOLERANCE,
    V,
    replace_head_forward,
)
from tiny_eagle import run as _run

from minieagle import model
from minieagle import tree as trees
from minieagle.drafters import build_drafter
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.drafters.head_drafter import draft_children
from minieagle.generate import greedy_reference
from minieagle.heads.eagle1 import Eagle1Config, head_forward, init_head, new_head_cache, save_head
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.static_trees import DEFAULT_TREE, chain_tree, resolve_tree
from minieagle.testing import (
    generation_law,
    target_law,
    total_variation,
)

SMALL_TREE = [[0], [1], [0, 0]]


def _drafter(choices="default", cls=Eagle1Drafter):
    return cls(TARGET, CONFIG, HEAD, HEAD_CFG, choices=choices)


def _real_pairs(sequence, count: int):
    """(tokens x_{t+1}, features f_t) for t < count: the pairs the head reads for `sequence`,
    features from one uncached target forward."""
    _, hidden, _ = model.forward(
        TARGET, CONFIG, np.asarray(sequence[:count]), output_hidden=("final",)
    )
    return np.asarray(sequence[1 : count + 1]), hidden["final"]


class _Recording:
    """Wraps an Eagle1Drafter; keeps the sequence so far and, per cycle, (sequence ending in the
    root, tree, draft logits)."""

    feature_keys = ("final",)

    def __init__(self, inner: Eagle1Drafter):
        self.inner, self.cycles = inner, []

    def begin(self, prompt_ids, features, sampling) -> None:
        self.sequence = list(prompt_ids)
        self.inner.begin(prompt_ids, features, sampling)

    def propose(self, root, rng, max_nodes):
        assert root == self.sequence[-1]
        tree = self.inner.propose(root, rng, max_nodes)
        self.cycles.append((list(self.sequence), tree, self.inner.draft_logits))
        return tree

    def accept(self, tokens, features, next_token) -> None:
        self.sequence += [*tokens[1:], next_token]
        self.inner.accept(tokens, features, next_token)


# ---------------------------------------------------------------------------- greedy


@settings(deadline=None, max_examples=40)
@given(
    st.lists(st.integers(0, V - 1), min_size=1, max_size=10),
    st.sampled_from(["default", "chain:3", "chain:1", SMALL_TREE]),
    st.integers(0, 18),
)
def test_greedy_eagle1_is_greedy_vanilla(prompt, choices, n):
    result = _run(prompt, _drafter(choices), n=n)
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, n)


def test_greedy_cases_accept_drafts_and_fill_the_context():
    """Guards the test above: the random head's drafts are both rejected and accepted (also
    deep in the tree), and decoding up to a full context prunes the tree and stays exact."""
    accepted = set()
    for prompt in ([1], [1, 3], [4, 0, 5], [2, 2, 2, 2]):
        accepted |= set(_run(prompt, _drafter()).accepted_per_cycle)
    assert 0 in accepted and max(accepted) >= 2
    prompt = [1, 3, 4]
    result = _run(prompt, _drafter(), n=CONFIG.max_position_embeddings)
    assert result.stop_reason == "context_full"
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, len(result.tokens))


# ---------------------------------------------------------------------------- the exact law


def _law(prompt, make_drafter, sampling, n):
    return generation_law(TARGET, CONFIG, prompt, make_drafter, sampling, n)


def _target_law(prompt, sampling, n):
    return target_law(TARGET, CONFIG, prompt, sampling, n)


LAW_CASES = [
    (SamplingParams(temperature=1.0, top_k=2), 3, [1, 3]),
    (SamplingParams(temperature=0.7, top_k=4, top_p=0.95), 2, [1, 3]),
    (SamplingParams(temperature=1.3, top_p=0.9), 1, [1, 3]),
    (SamplingParams(temperature=1.0), 1, [1, 4]),
]


@pytest.mark.parametrize(("sampling", "n", "prompt"), LAW_CASES, ids=str)
def test_sampled_eagle1_has_the_target_law(sampling, n, prompt):
    law, accepted = _law(prompt, lambda: _drafter(SMALL_TREE), sampling, n)
    assert total_variation(law, _target_law(prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances were walked


def _unconditional_q(logits, count, sampling, rng):
    """Draws siblings without replacement but labels each with the full draft q (the bug)."""
    q = target_distribution(logits, sampling)
    return [(token, q) for token, _ in draft_children(logits, count, sampling, rng)]


def test_the_law_check_catches_unconditional_sibling_proposals(monkeypatch):
    # Full support: the second sibling's real q (the first one removed) differs from the
    # full q. Under top_k=2 both labels act alike, so that case could not catch the bug.
    from minieagle.drafters import eagle1 as eagle1_drafter

    monkeypatch.setattr(eagle1_drafter, "draft_children", _unconditional_q)
    sampling, n, prompt = LAW_CASES[-1]
    law, _ = _law(prompt, lambda: _drafter(SMALL_TREE), sampling, n)
    assert total_variation(law, _target_law(prompt, sampling, n)) > 1e-3


@pytest.mark.parametrize(
    "sampling",
    [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=3, top_p=0.9)],
    ids=repr,
)
def test_each_sibling_carries_q_without_its_elder_siblings(sampling):
    recorder = _Recording(_drafter())
    _run([1, 3, 4], recorder, sampling, SeededRandomness(7), n=10)
    checked = 0
    for _, tree, draft_logits in recorder.cycles:
        for parent, kids in enumerate(trees.children(tree)):
            if not kids:
                continue
            q = target_distribution(draft_logits[parent], sampling)
            assert len(kids) <= min(np.count_nonzero(q), 4)
            for child in kids:
                token = int(tree.tokens[child])
                np.testing.assert_allclose(tree.proposals[child], q, rtol=0, atol=1e-15)
                assert tree.proposals[child][token] > 0
                q = q.copy()
                q[token] = 0.0
                q = q / q.sum() if q.any() else q
                checked += 1
    assert checked >= 20


# ---------------------------------------------------------------------------- tree attention


def _assert_tree_matches_sequential(recorder: _Recording) -> int:
    """Every fed node's draft logits equal an uncached, causal head forward over the real pairs
    followed by the pairs along its path (each fed with the f̂ of the step before)."""
    checked = 0
    for sequence, tree, draft_logits in recorder.cycles:
        tokens, features = _real_pairs(sequence, len(sequence) - 1)
        for node in np.flatnonzero(~np.isnan(draft_logits[:, 0])):  # nodes fed to the head
            path_tokens = list(tokens)
            path_features = list(features)
            for step in trees.path_to(tree, int(node))[1:]:
                predicted, logits, _ = head_forward(
                    HEAD, HEAD_CFG, TARGET, np.asarray(path_tokens), np.stack(path_features)
                )
                path_tokens.append(int(tree.tokens[step]))
                path_features.append(predicted[-1])
            _, logits, _ = head_forward(
                HEAD, HEAD_CFG, TARGET, np.asarray(path_tokens), np.stack(path_features)
            )
            np.testing.assert_allclose(draft_logits[node], logits[-1], rtol=0, atol=TOLERANCE)
            checked += 1
    return checked


def test_tree_drafts_equal_sequential_drafts_along_each_path():
    recorder = _Recording(_drafter())
    _run([1, 3, 4, 0], recorder, n=8)
    assert _assert_tree_matches_sequential(recorder) >= 20


@pytest.mark.parametrize("drop", ["attention_mask", "position_ids"])
def test_the_tree_check_catches_a_wrong_mask_or_positions(monkeypatch, drop):
    def broken(*args, **kwargs):
        kwargs[drop] = None  # the default: a causal mask / consecutive positions
        return head_forward(*args, **kwargs)

    replace_head_forward(monkeypatch, broken)
    recorder = _Recording(_drafter())
    _run([1, 3, 4, 0], recorder, n=8)
    with pytest.raises(AssertionError):
        _assert_tree_matches_sequential(recorder)


# ---------------------------------------------------------------------------- head cache


def _assert_committed_cache_is_fresh(drafter: Eagle1Drafter, sequence) -> None:
    committed = drafter.committed
    assert committed == drafter.cache.length <= len(sequence) - 1, "more pairs than features"
    tokens, features = _real_pairs(sequence, committed)
    fresh = new_head_cache(HEAD_CFG, HEAD, committed)
    head_forward(HEAD, HEAD_CFG, TARGET, tokens, features, cache=fresh)
    for got, want in ((drafter.cache.keys, fresh.keys), (drafter.cache.values, fresh.values)):
        np.testing.assert_allclose(got[0][:, :, :committed], want[0], rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)], ids=repr)
def test_committed_head_cache_equals_a_fresh_forward(sampling):
    recorder = _Recording(_drafter())
    result = _run([1, 3, 4], recorder, sampling, SeededRandomness(3), n=14)
    assert max(result.accepted_per_cycle) >= 1
    recorder.inner.propose(recorder.sequence[-1], SeededRandomness(0), max_nodes=1)
    _assert_committed_cache_is_fresh(recorder.inner, recorder.sequence)  # before catch-up
    recorder.inner.propose(recorder.sequence[-1], SeededRandomness(0), max_nodes=30)
    assert recorder.inner.committed == len(recorder.sequence) - 1  # one pair per target position
    recorder.inner.accept([recorder.sequence[-1]], {"final": np.zeros((1, 16))}, 0)
    _assert_committed_cache_is_fresh(recorder.inner, recorder.sequence)


class _NoCrop(Eagle1Drafter):
    """Forgets to drop the draft slots when the target's verdict comes back (the bug)."""

    def accept(self, tokens, features, next_token) -> None:
        self.cache.crop = lambda length: None
        super().accept(tokens, features, next_token)


def test_the_cache_check_catches_stale_draft_slots():
    recorder = _Recording(_drafter(cls=_NoCrop))
    _run([1, 3, 4], recorder, n=6)
    recorder.inner.propose(recorder.sequence[-1], SeededRandomness(0), max_nodes=30)
    with pytest.raises(AssertionError):
        _assert_committed_cache_is_fresh(recorder.inner, recorder.sequence)


# ---------------------------------------------------------------------------- tree shapes


def _per_depth(tree) -> list[int]:
    return np.bincount(trees.depths(tree))[1:].tolist()


def test_default_tree_has_eagle1_statistics():
    tree = trees.from_choices(resolve_tree("default"), 0, lambda path: 0)
    assert len(tree) == 26 and int(trees.depths(tree).max()) == 5
    assert _per_depth(tree) == [4, 8, 8, 3, 2]
    assert len(trees.leaf_paths(tree)) == 15
    assert max(max(path) for path in DEFAULT_TREE) == 3
    assert resolve_tree("mc_sim_7b_63") == resolve_tree("default")
    assert resolve_tree("chain:3") == chain_tree(3) == ((0,), (0, 0), (0, 0, 0))


@pytest.mark.parametrize(("choices", "forwards"), [("default", 5), ("chain:3", 3)])
def test_drafted_tree_has_the_static_shape_and_costs_depth_forwards(monkeypatch, choices, forwards):
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return head_forward(*args, **kwargs)

    replace_head_forward(monkeypatch, counting)
    drafter = _drafter(choices)
    drafter.begin([1, 3, 4], {"final": _real_pairs([1, 3, 4], 2)[1]}, SamplingParams())
    tree = drafter.propose(4, SeededRandomness(0), max_nodes=32)
    want = trees.from_choices(resolve_tree(choices), 4, lambda path: 0)
    np.testing.assert_array_equal(tree.parents, want.parents)
    assert len(calls) == forwards
    for parent, kids in enumerate(trees.children(tree)):  # T = 0: most likely first, distinct
        if kids:
            order = np.argsort(-drafter.draft_logits[parent], kind="stable")
            assert tree.tokens[kids].tolist() == order[: len(kids)].tolist()


@pytest.mark.parametrize("max_nodes", [1, 2, 5, 13, 26])
def test_tree_is_pruned_to_max_nodes(max_nodes):
    drafter = _drafter()
    drafter.begin([1, 3, 4], {"final": _real_pairs([1, 3, 4], 2)[1]}, SamplingParams())
    tree = drafter.propose(4, SeededRandomness(0), max_nodes=max_nodes)
    full = trees.from_choices(DEFAULT_TREE, 4, lambda path: 0)
    assert len(tree) == max_nodes
    np.testing.assert_array_equal(tree.parents, full.parents[:max_nodes])


def test_a_sampled_tree_has_fewer_children_where_q_has_less_support():
    drafter = _drafter()
    sampling = SamplingParams(temperature=1.0, top_k=2)
    drafter.begin([1, 3, 4], {"final": _real_pairs([1, 3, 4], 2)[1]}, sampling)
    tree = drafter.propose(4, SeededRandomness(0), max_nodes=32)
    assert max(len(kids) for kids in trees.children(tree)) == 2
    assert _per_depth(tree) == [2, 4, 5, 2, 2]  # ranks 2 and 3 (and their subtrees) vanish


# ---------------------------------------------------------------------------- oracle head


class _OracleHead:
    """Stands in for head_forward: the 'predicted' feature of a pair is the target's true
    feature one position on, from a target forward over the sequence the attention mask
    selects (x_0, then the token of every visible slot). The real head still runs, so the
    head cache stays consistent."""

    def __init__(self, first_token: int):
        self.first, self.slot_tokens = first_token, []

    def __call__(self, head, cfg, target, tokens, features, **kwargs):
        past = kwargs["cache"].length
        mask = kwargs.get("attention_mask")
        mask = model.causal_mask(past, len(tokens)) if mask is None else np.asarray(mask)
        self.slot_tokens[past:] = [int(t) for t in tokens]
        head_forward(head, cfg, target, tokens, features, **kwargs)
        predicted, logits = [], []
        for row in mask:
            sequence = [self.first] + [self.slot_tokens[j] for j in np.flatnonzero(row)]
            out, hidden, _ = model.forward(
                target, CONFIG, np.asarray(sequence), output_hidden=("final",)
            )
            predicted.append(hidden["final"][-1])
            logits.append(out[-1])
        return np.stack(predicted), np.stack(logits), None


@pytest.mark.parametrize(
    ("choices", "depth"), [("chain:1", 1), ("chain:3", 3), ("default", 5), (SMALL_TREE, 2)]
)
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)], ids=repr)
def test_an_oracle_head_gets_every_draft_accepted(monkeypatch, choices, depth, sampling):
    prompt = [1, 3, 4]
    replace_head_forward(monkeypatch, _OracleHead(prompt[0]))
    result = _run(prompt, _drafter(choices), sampling, SeededRandomness(1), n=4 * (depth + 1))
    assert result.accepted_per_cycle == [depth] * 4 and result.tau == depth + 1
    if sampling.greedy:
        assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, 4 * (depth + 1))


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ("bushy", "unknown tree 'bushy'"),
        ("chain:x", "no integer depth"),
        ("chain:0", "positive integer"),
        ([], "no paths"),
        ([[0], [0, 0], [0, 0]], "twice"),
        ([[0], [1, 0]], r"no parent \[1\]"),
        ([[0], [2]], r"no elder sibling \[1\]"),
        ([[0], [-1]], "ranks >= 0"),
    ],
)
def test_bad_trees_are_refused(choices, message):
    with pytest.raises(ValueError, match=message):
        _drafter(choices)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vocab_size": 8}, "vocab_size=8 but the target has 6"),
        ({"hidden_size": 32}, "hidden_size=32 but the target has 16"),
    ],
)
def test_a_head_for_another_target_is_refused(change, message):
    other = Eagle1Config.from_target(CONFIG.replace(**change))
    with pytest.raises(ValueError, match=message):
        Eagle1Drafter(TARGET, CONFIG, init_head(other, dtype=np.float64), other)


def test_head_weights_must_match_their_config():
    bad = dict(HEAD, **{"fc.weight": np.zeros((16, 16))})
    with pytest.raises(ValueError, match=r"'fc.weight' has shape \(16, 16\)"):
        Eagle1Drafter(TARGET, CONFIG, bad, HEAD_CFG)


def test_build_drafter_and_cli_flags(tmp_path):
    from minieagle import cli
    from minieagle.cli.methods import drafter_factory

    with pytest.raises(ValueError, match="--head DIR"):
        build_drafter("eagle1", target=(TARGET, CONFIG))
    save_head(tmp_path / "head", HEAD, HEAD_CFG, dtype="float64")
    args = cli.build_parser().parse_args(
        ["generate", "x", "--method", "eagle1", "--head", str(tmp_path / "head")]
        + ["--tree", "chain", "--depth", "2"]
    )
    drafter = drafter_factory(args, CONFIG, TARGET)()
    assert isinstance(drafter, Eagle1Drafter) and drafter.paths == chain_tree(2)
    result = _run([1, 3], drafter, n=6)
    assert result.tokens == greedy_reference(TARGET, CONFIG, [1, 3], 6)


def test_the_drafter_runs_on_a_device_and_agrees_with_numpy():
    """array-api-strict's fake device refuses silent host copies; drafting there gives the
    NumPy trees and draft logits."""
    xp = pytest.importorskip("array_api_strict")
    device = xp.Device("device1")
    sequence = [1, 3, 4, 0, 5]
    _, features = _real_pairs(sequence, 4)
    runs = []
    for on_device in (False, True):
        move = (lambda a: xp.asarray(a, device=device, copy=True)) if on_device else np.asarray
        params = {k: move(v) for k, v in TARGET.items()}
        head = {k: move(v) for k, v in HEAD.items()}
        drafter = Eagle1Drafter(params, CONFIG, head, HEAD_CFG)
        drafter.begin(sequence[:3], {"final": move(features[:2])}, SamplingParams(temperature=1.0))
        first = drafter.propose(4, SeededRandomness(0), 40)
        drafter.accept([4, 0], {"final": move(features[2:4])}, 5)
        second = drafter.propose(5, SeededRandomness(1), 40)
        runs.append((first.tokens.tolist(), second.tokens.tolist(), drafter.draft_logits))
    (*host_trees, host_logits), (*device_trees, device_logits) = runs
    assert host_trees == device_trees
    np.testing.assert_allclose(device_logits, host_logits, rtol=0, atol=TOLERANCE)


def test_a_chain_deeper_than_the_context_is_refused_before_it_is_built(monkeypatch):
    """Row 9 of issue 22: `--tree chain --depth 100000` is refused by the context bound before
    the O(D^2) path list exists (building it would fail this test), naming the context; the
    deepest chain that fits is accepted."""
    from minieagle import static_trees

    context = CONFIG.max_position_embeddings
    built = static_trees.chain_tree

    def chain_tree(depth):
        assert depth <= context, "the chain was built before its depth was checked"
        return built(depth)

    monkeypatch.setattr(static_trees, "chain_tree", chain_tree)
    for depth in (context - 1, 100000):
        with pytest.raises(ValueError, match=f"{depth} levels deep but the context holds"):
            Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=f"chain:{depth}")
    drafter = Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=f"chain:{context - 2}")
    assert len(drafter.paths) == context - 2
