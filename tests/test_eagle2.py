"""EAGLE-2's dynamic tree: the pure selection logic (minieagle.dynamic_tree) on random score
pools, and the drafter (minieagle.drafters.eagle2) through the real loop, float64, on a 6-token
target with a randomly initialised EAGLE-1 head.

- Reranking always returns a connected tree of min(total_tokens, pool + 1) nodes, parents first,
  whose mask and positions are the ancestor relation and the depths; it takes the best
  candidates by (score, then the shallower); scores never increase along a path; the guard keeps
  hand-made, non-monotone pools connected; each checker catches a broken selection.
- Greedy EAGLE-2 decoding emits exactly the greedy reference's tokens.
- At T > 0 the exact law of the emitted tokens is the target's; labelling the top-k picks with
  the draft q (min(1, p/q)) breaks it.
- The tree is the top-k expansion of the head's own draft logits, and those logits equal an
  uncached head forward along each node's path; 1 + depth head forwards per cycle.
- An oracle head gets every draft accepted: tau = depth + 1.
- Calibration records and table; errors; CLI wiring.
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

from minieagle import dynamic_tree as dt
from minieagle import model
from minieagle import tree as trees
from minieagle.drafters import build_drafter
from minieagle.drafters.eagle2 import Eagle2Drafter
from minieagle.errors import InvalidInputError
from minieagle.generate import greedy_reference
from minieagle.heads.eagle1 import head_forward, save_head
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.testing import (
    generation_law,
    target_law,
    total_variation,
)
from minieagle.tree import Tree


def _drafter(depth=2, top_k=3, total_tokens=10, cls=Eagle2Drafter):
    return cls(TARGET, CONFIG, HEAD, HEAD_CFG, depth=depth, top_k=top_k, total_tokens=total_tokens)


# ---------------------------------------------------------------------------- pure selection

# Logit values with exact ties, and gaps wide enough that the top token's log q is exactly 0.0.
LOGIT_VALUES = st.sampled_from([0.0, 0.0, 1.0, 2.5, 800.0])


@st.composite
def pools(draw):
    """A pool grown by the real expansion bookkeeping from random draft logits."""
    k = draw(st.integers(1, 4))
    vocab = draw(st.integers(1, 6))
    steps = draw(st.integers(0, 3))

    def logits(rows):
        return np.asarray(
            draw(st.lists(LOGIT_VALUES, min_size=rows * vocab, max_size=rows * vocab))
        )

    tokens, log_q = dt.top_children(dt.log_softmax(logits(1).reshape(1, vocab)), k)
    pool = dt.add_children(dt.empty_pool(), [-1], tokens, log_q)
    frontier, expanded = dt.next_frontier(pool, 0, k), []
    for _ in range(steps):
        rows = dt.log_softmax(logits(len(frontier)).reshape(len(frontier), vocab))
        tokens, log_q = dt.top_children(rows, k)
        start = len(pool)
        pool = dt.add_children(pool, frontier, tokens, log_q)
        expanded.append((frontier, start))
        frontier = dt.next_frontier(pool, start, k)
    return pool, expanded, k, min(k, vocab), steps


def _key(pool: dt.Pool, i: int) -> tuple:
    return (-pool.scores[i], dt.pool_depths(pool.parents)[i], i)


def _assert_valid_selection(pool: dt.Pool, selected, total_tokens: int) -> Tree:
    """The tree built from `selected` is connected, of the requested size, parents first, and
    its mask / positions are the ancestor relation / the depths (brute force on the pool)."""
    selected = np.asarray(selected)
    assert len(selected) == len(set(selected.tolist())) == min(total_tokens - 1, len(pool))
    chosen = set(selected.tolist())
    assert all(pool.parents[i] == -1 or pool.parents[i] in chosen for i in chosen), "disconnected"
    tree = dt.build_tree(7, pool, selected)  # Tree() refuses children listed before parents
    assert len(tree) == min(total_tokens, len(pool) + 1)
    candidate = [-1, *selected.tolist()]  # tree node -> pool index (-1: the root)

    def ancestors(i):  # pool indices of i and its ancestors, the root as -1
        out = {i}
        while i >= 0:
            i = pool.parents[i]
            out.add(i)
        return out

    want = np.array([[candidate[b] in ancestors(candidate[a]) for b in range(len(tree))]
                     for a in range(len(tree))])  # fmt: skip
    np.testing.assert_array_equal(trees.ancestor_mask(tree), want)
    depth = np.concatenate([[0], dt.pool_depths(pool.parents)[selected]])
    assert (np.diff(depth) >= 0).all(), "not listed level by level"
    np.testing.assert_array_equal(trees.position_ids(tree, 11), 11 + depth)
    np.testing.assert_array_equal(tree.tokens[1:], pool.tokens[selected])
    assert all(p is None for p in tree.proposals)  # deterministic picks: the q = 1 rule
    return tree


@settings(deadline=None, max_examples=200)
@given(pools(), st.integers(2, 40))
def test_rerank_builds_a_connected_tree_of_the_requested_size(grown, total_tokens):
    pool = grown[0]
    _assert_valid_selection(
        pool, dt.rerank(pool.scores, pool.parents, total_tokens - 1), total_tokens
    )


@settings(deadline=None, max_examples=200)
@given(pools(), st.integers(1, 40))
def test_rerank_takes_the_best_values_and_prefers_shallower_on_ties(grown, count):
    pool = grown[0]
    selected = set(dt.rerank(pool.scores, pool.parents, count).tolist())
    # The guard never fires on a real pool: the chosen set is exactly the top of the ranking.
    for a in selected:
        for b in set(range(len(pool))) - selected:
            assert _key(pool, a) < _key(pool, b)


@settings(deadline=None, max_examples=100)
@given(pools())
def test_expansion_bookkeeping(grown):
    pool, expanded, k, children, steps = grown  # children per node: min(top_k, V)
    level = children  # the root's children, then min(top_k, level) * children per step
    size = level
    for _ in range(steps):
        level = min(k, level) * children
        size += level
    assert len(pool) == size
    for i, parent in enumerate(pool.parents):  # values never increase along a path
        parent_score = pool.scores[parent] if parent >= 0 else 0.0
        assert pool.scores[i] <= parent_score
        np.testing.assert_allclose(pool.scores[i], parent_score + pool.log_q[i], rtol=0, atol=0)
    level_start = 0
    for frontier, start in expanded:  # each expanded set: the k best of the newest level
        level = range(level_start, start)
        assert sorted(frontier.tolist()) == sorted(sorted(level, key=lambda i: _key(pool, i))[:k])
        level_start = start
    has_children = set(pool.parents.tolist()) - {-1}
    assert has_children == {int(i) for frontier, _ in expanded for i in frontier}


@settings(deadline=None, max_examples=200)
@given(st.data())
def test_the_guard_keeps_any_pool_connected(data):
    """Hand-made pools whose scores may rise along a path (NaN logits, foreign code): the
    selection still is a connected tree of the requested size."""
    size = data.draw(st.integers(1, 30))
    parents = [data.draw(st.integers(-1, i - 1)) for i in range(size)]
    scores = data.draw(st.lists(st.sampled_from([-3.0, -1.0, -1.0, 0.0]), min_size=size,
                                max_size=size))  # fmt: skip
    pool = dt.Pool(np.arange(size), np.asarray(parents), np.asarray(scores), np.asarray(scores))
    total_tokens = data.draw(st.integers(2, 35))
    _assert_valid_selection(
        pool, dt.rerank(pool.scores, pool.parents, total_tokens - 1), total_tokens
    )


def _raw_top(scores, parents, count):
    """Top `count` by score alone, in pool order: what rerank would be without its guard and
    its tie-break."""
    return np.sort(np.argsort(-np.asarray(scores), kind="stable")[:count])


def test_the_checks_catch_a_selection_without_guard_or_tie_break():
    rising = dt.Pool(np.arange(2), np.asarray([-1, 0]), np.asarray([-5.0, -1.0]), np.zeros(2))
    np.testing.assert_array_equal(dt.rerank(rising.scores, rising.parents, 1), [0])
    with pytest.raises(AssertionError, match="disconnected"):
        _assert_valid_selection(rising, _raw_top(rising.scores, rising.parents, 1), 2)
    # A tie between a deep candidate listed early and a shallow one listed late: the shallow
    # one wins (in the drafter's level-by-level pools the pool index alone would agree).
    tie = dt.Pool(
        np.arange(3), np.asarray([-1, 0, -1]), np.asarray([-1.0, -2.0, -2.0]), np.zeros(3)
    )
    np.testing.assert_array_equal(dt.rerank(tie.scores, tie.parents, 2), [0, 2])
    assert _raw_top(tie.scores, tie.parents, 2).tolist() == [0, 1]  # depth-blind
    with pytest.raises(ValueError, match="NaN"):
        dt.rerank(np.asarray([np.nan]), np.asarray([-1]), 1)


# ---------------------------------------------------------------------------- greedy


@settings(deadline=None, max_examples=30)
@given(
    st.lists(st.integers(0, V - 1), min_size=1, max_size=10),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(2, 20),
    st.integers(0, 16),
)
def test_greedy_eagle2_is_greedy_vanilla(prompt, depth, top_k, total_tokens, n):
    top_k = min(top_k, total_tokens - 1)
    result = _run(prompt, _drafter(depth, top_k, total_tokens), n=n)
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, n)


def test_greedy_cases_accept_drafts_and_fill_the_context():
    accepted = set()
    for prompt in ([1], [1, 3], [4, 0, 5], [2, 2, 2, 2]):
        accepted |= set(_run(prompt, _drafter(3, 3, 12)).accepted_per_cycle)
    assert 0 in accepted and max(accepted) >= 2
    prompt = [1, 3, 4]
    result = _run(prompt, _drafter(5, 4, 26), n=CONFIG.max_position_embeddings)
    assert result.stop_reason == "context_full"
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, len(result.tokens))


# ---------------------------------------------------------------------------- the exact law


def _law(prompt, make_drafter, sampling, n):
    return generation_law(TARGET, CONFIG, prompt, make_drafter, sampling, n)


def _target_law(prompt, sampling, n):
    return target_law(TARGET, CONFIG, prompt, sampling, n)


LAW_CASES = [
    (SamplingParams(temperature=1.0), 1, 2, [1, 4]),
    (SamplingParams(temperature=1.0, top_k=2), 2, 3, [1, 3]),
    (SamplingParams(temperature=0.7, top_k=4, top_p=0.95), 2, 2, [1, 3]),
]


@pytest.mark.parametrize(("sampling", "depth", "n", "prompt"), LAW_CASES, ids=str)
def test_sampled_eagle2_has_the_target_law(sampling, depth, n, prompt):
    law, accepted = _law(prompt, lambda: _drafter(depth, 2, 4), sampling, n)
    assert total_variation(law, _target_law(prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances were walked


class _DraftQ(Eagle2Drafter):
    """Verifies the top-k picks with min(1, p/q) under the draft's q (the known bug: q is only
    right for a token sampled from q)."""

    def propose(self, root, rng, max_nodes):
        tree = super().propose(root, rng, max_nodes)
        qs = [None] + [target_distribution(self.draft_logits[p], SamplingParams(temperature=1.0))
                       for p in tree.parents[1:]]  # fmt: skip
        return Tree(tree.tokens, tree.parents, tuple(qs))


def test_the_law_check_catches_draft_q_proposals():
    sampling, depth, n, prompt = LAW_CASES[0]
    law, _ = _law(prompt, lambda: _drafter(depth, 2, 4, cls=_DraftQ), sampling, n)
    assert total_variation(law, _target_law(prompt, sampling, n)) > 1e-3


# ---------------------------------------------------------------------------- the drafted tree


class _Recording:
    feature_keys = ("final",)

    def __init__(self, inner: Eagle2Drafter):
        self.inner, self.cycles, self.kept = inner, [], []

    def begin(self, prompt_ids, features, sampling) -> None:
        self.sequence = list(prompt_ids)
        self.inner.begin(prompt_ids, features, sampling)

    def propose(self, root, rng, max_nodes):
        tree = self.inner.propose(root, rng, max_nodes)
        self.cycles.append((list(self.sequence), tree, self.inner.draft_logits))
        return tree

    def accept(self, tokens, features, next_token) -> None:
        self.sequence += [*tokens[1:], next_token]
        self.kept.append(list(tokens))
        self.inner.accept(tokens, features, next_token)


def _head_along(sequence, tree, node):
    """Uncached head logits at `node`: the real pairs of `sequence`, then its path's pairs,
    each fed with the f̂ of the step before."""
    _, hidden, _ = model.forward(
        TARGET, CONFIG, np.asarray(sequence[:-1]), output_hidden=("final",)
    )
    tokens, features = list(sequence[1:]), list(hidden["final"])
    for step in trees.path_to(tree, node)[1:]:
        predicted, _, _ = head_forward(
            HEAD, HEAD_CFG, TARGET, np.asarray(tokens), np.stack(features)
        )
        tokens.append(int(tree.tokens[step]))
        features.append(predicted[-1])
    _, logits, _ = head_forward(HEAD, HEAD_CFG, TARGET, np.asarray(tokens), np.stack(features))
    return logits[-1]


def _assert_tree_is_the_heads_expansion(recorder: _Recording) -> int:
    checked = 0
    for sequence, tree, draft_logits in recorder.cycles:
        if len(tree) == 1:
            continue
        log_q = dt.log_softmax(draft_logits)  # [N, V], NaN rows for nodes never fed
        score = np.zeros(len(tree))
        for parent, kids in enumerate(trees.children(tree)):
            if kids:  # siblings: a prefix of the parent's top tokens, most likely first
                order = np.argsort(-draft_logits[parent], kind="stable")
                assert tree.tokens[kids].tolist() == order[: len(kids)].tolist()
            for child in kids:
                score[child] = score[parent] + log_q[parent, tree.tokens[child]]
        inner = recorder.inner
        np.testing.assert_allclose(score[1:], inner.pool.scores[inner.selected], atol=TOLERANCE)
        for node in np.flatnonzero(~np.isnan(draft_logits[:, 0])):
            want = _head_along(sequence, tree, int(node))
            np.testing.assert_allclose(draft_logits[node], want, rtol=0, atol=TOLERANCE)
            checked += 1
    return checked


class _LastCycle(_Recording):
    def propose(self, root, rng, max_nodes):
        self.cycles = []  # inner.pool describes the last cycle only
        return super().propose(root, rng, max_nodes)


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)], ids=repr)
def test_the_tree_is_the_heads_expansion_with_tree_attention(sampling):
    checked = 0
    for n in (1, 3, 6, 9):
        recorder = _LastCycle(_drafter(3, 3, 14))
        _run([1, 3, 4, 0], recorder, sampling, SeededRandomness(2), n=n)
        checked += _assert_tree_is_the_heads_expansion(recorder)
    assert checked >= 12


@pytest.mark.parametrize("drop", ["attention_mask", "position_ids"])
def test_the_tree_check_catches_a_wrong_mask_or_positions(monkeypatch, drop):
    def broken(*args, **kwargs):
        kwargs[drop] = None  # the default: a causal mask / consecutive positions
        return head_forward(*args, **kwargs)

    replace_head_forward(monkeypatch, broken)
    recorder = _LastCycle(_drafter(3, 3, 14))
    _run([1, 3, 4, 0], recorder, n=6)
    with pytest.raises(AssertionError):
        _assert_tree_is_the_heads_expansion(recorder)


@pytest.mark.parametrize(("depth", "top_k"), [(1, 2), (3, 3), (5, 8)])
def test_one_plus_depth_head_forwards_per_cycle(monkeypatch, depth, top_k):
    fed = []

    def counting(head, cfg, target, tokens, *args, **kwargs):
        fed.append(len(tokens))
        return head_forward(head, cfg, target, tokens, *args, **kwargs)

    replace_head_forward(monkeypatch, counting)
    drafter = _drafter(depth, top_k, 40)
    result = _run([1, 3, 4], drafter, n=10)
    assert len(fed) == (1 + depth) * result.target_forwards
    catch_ups = fed[:: 1 + depth]
    assert catch_ups == [2] + [a + 1 for a in result.accepted_per_cycle[:-1]]
    assert all(0 < n <= top_k for i, n in enumerate(fed) if i % (1 + depth))  # the frontier


@pytest.mark.parametrize("max_nodes", [1, 2, 3, 7, 40])
def test_the_tree_respects_total_tokens_and_max_nodes(max_nodes):
    for depth, top_k, total_tokens in ((2, 2, 12), (3, 3, 9), (1, 1, 26)):
        drafter = _drafter(depth, top_k, total_tokens)
        _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray([1, 3]), output_hidden=("final",))
        drafter.begin([1, 3, 4], {"final": hidden["final"]}, SamplingParams())
        tree = drafter.propose(4, SeededRandomness(0), max_nodes=max_nodes)
        k = min(top_k, V)
        pool = k + depth * k * k
        assert len(tree) == min(total_tokens, max_nodes, pool + 1)


# ---------------------------------------------------------------------------- oracle head


class _SharpOracle:
    """Stands in for head_forward: the predicted feature is the target's true next feature (a
    target forward over the sequence the mask selects), the logits the target's, scaled up so
    the draft is one-hot at the target's argmax (log q = 0 there): the greedy path is then the
    tree's best chain. The real head still runs, so the head cache stays consistent."""

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
            logits.append(1e4 * out[-1])
        return np.stack(predicted), np.stack(logits), None


@pytest.mark.parametrize(
    ("depth", "top_k", "total_tokens"), [(1, 2, 4), (2, 1, 4), (3, 3, 10), (5, 8, 26)]
)
def test_an_oracle_head_gets_every_draft_accepted(monkeypatch, depth, top_k, total_tokens):
    prompt = [1, 3, 4]
    replace_head_forward(monkeypatch, _SharpOracle(prompt[0]))
    n = 3 * (depth + 2)  # three cycles of depth + 1 drafts and a bonus token
    result = _run(prompt, _drafter(depth, top_k, total_tokens), n=n)
    assert result.accepted_per_cycle == [depth + 1] * 3 and result.tau == depth + 2
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, n)


# ---------------------------------------------------------------------------- calibration


def test_calibration_table_on_a_synthetic_case():
    records = [(0.02, False), (0.04, True), (0.5, True), (0.5, False), (0.55, True), (1.0, True)]
    table = dt.calibration_table(records, bins=(0.0, 0.1, 0.6, 1.0))
    assert [row[0] for row in table] == [(0.0, 0.1), (0.1, 0.6), (0.6, 1.0)]
    assert [row[1] for row in table] == [2, 3, 1]  # 1.0 falls in the closed last bin
    np.testing.assert_allclose([row[2] for row in table], [0.03, 1.55 / 3, 1.0])
    np.testing.assert_allclose([row[3] for row in table], [0.5, 2 / 3, 1.0])
    empty = dt.calibration_table([], bins=(0.0, 1.0))
    assert empty[0][1] == 0 and np.isnan(empty[0][2]) and np.isnan(empty[0][3])
    for bins in ((0.5,), (0.0, 0.5, 0.5), (-0.1, 1.0), (0.0, 1.5)):
        with pytest.raises(ValueError, match="increasing edges in"):
            dt.calibration_table(records, bins=bins)


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)], ids=repr)
def test_calibration_records_are_the_reached_nodes(sampling):
    recorder = _Recording(_drafter(3, 3, 12))
    result = _run([1, 3, 4], recorder, sampling, SeededRandomness(5), n=20)
    records = recorder.inner.calibration_records
    reached = 0
    for (_, tree, _), kept in zip(recorder.cycles, recorder.kept, strict=True):
        kids, node = trees.children(tree), 0
        reached += len(kids[0])
        for token in kept[1:]:  # the accepted path, by token (siblings are distinct)
            (node,) = [c for c in kids[node] if tree.tokens[c] == token]
            reached += len(kids[node])
    assert len(records) == reached
    assert sum(a for _, a in records) == sum(result.accepted_per_cycle)
    assert all(0 < c <= 1 for c, _ in records)
    table = dt.calibration_table(records)
    assert sum(row[1] for row in table) == len(records)


# ---------------------------------------------------------------------------- errors and CLI


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"depth": 0}, "depth=0 must be an integer >= 1"),
        ({"top_k": -1}, "top_k=-1 must be an integer >= 1"),
        ({"total_tokens": 1}, "total_tokens=1 must be an integer >= 2"),
        ({"depth": 2.5}, "depth=2.5 must be an integer"),
        ({"top_k": True}, "top_k=True must be an integer"),
        ({"top_k": 5000, "total_tokens": 26}, "top_k=5000 exceeds total_tokens - 1 = 25"),
    ],
)
def test_bad_sizes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, **kwargs)


def test_build_drafter_and_cli_flags(tmp_path):
    from minieagle import cli
    from minieagle.cli.methods import drafter_factory

    with pytest.raises(ValueError, match="--head DIR"):
        build_drafter("eagle2", target=(TARGET, CONFIG))
    defaults = build_drafter("eagle2", target=(TARGET, CONFIG), head=(HEAD, HEAD_CFG))
    assert (defaults.depth, defaults.top_k, defaults.total_tokens) == (5, 8, 26)
    save_head(tmp_path / "head", HEAD, HEAD_CFG, dtype="float64")
    args = cli.build_parser().parse_args(
        ["generate", "x", "--method", "eagle2", "--head", str(tmp_path / "head")]
        + ["--depth", "2", "--tree-top-k", "3", "--total-tokens", "9", "--top-k", "4"]
    )
    drafter = drafter_factory(args, CONFIG, TARGET)()
    assert isinstance(drafter, Eagle2Drafter)
    assert (drafter.depth, drafter.top_k, drafter.total_tokens) == (2, 3, 9)
    result = _run([1, 3], drafter, n=6)
    assert result.tokens == greedy_reference(TARGET, CONFIG, [1, 3], 6)


def test_the_drafter_runs_on_a_device_and_agrees_with_numpy():
    """array-api-strict's fake device refuses silent host copies; drafting there gives the
    NumPy trees and draft logits."""
    xp = pytest.importorskip("array_api_strict")
    device = xp.Device("device1")
    sequence = [1, 3, 4, 0, 5]
    _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray(sequence[:4]), output_hidden=("final",))
    features = hidden["final"]
    runs = []
    for on_device in (False, True):
        move = (lambda a: xp.asarray(a, device=device, copy=True)) if on_device else np.asarray
        params = {k: move(v) for k, v in TARGET.items()}
        head = {k: move(v) for k, v in HEAD.items()}
        drafter = Eagle2Drafter(params, CONFIG, head, HEAD_CFG, depth=3, top_k=3, total_tokens=12)
        drafter.begin(sequence[:3], {"final": move(features[:2])}, SamplingParams(temperature=1.0))
        first = drafter.propose(4, SeededRandomness(0), 40)
        drafter.accept([4, 0], {"final": move(features[2:4])}, 5)
        second = drafter.propose(5, SeededRandomness(1), 40)
        runs.append((first.tokens.tolist(), second.tokens.tolist(), drafter.draft_logits))
    (*host_trees, host_logits), (*device_trees, device_logits) = runs
    assert host_trees == device_trees
    np.testing.assert_allclose(device_logits, host_logits, rtol=0, atol=TOLERANCE)


@settings(deadline=None, max_examples=100)
@given(
    st.integers(1, 5).flatmap(
        lambda f: st.lists(
            st.lists(st.integers(-4, 4).map(float) | st.floats(-6, 6), min_size=7, max_size=7),
            min_size=f,
            max_size=f,
        )
    ),
    st.integers(1, 9),
)
def test_top_children_of_logits_equals_top_children_of_the_log_softmax(rows, k):
    """The expansion's shortcut (log q only at the chosen entries) ranks by the logits
    themselves (a stable sort: most likely first, the lowest id on ties; the log-softmax can
    round values 1e-115 apart into a tie, the logits do not) and gives the log q the whole
    log-softmax has at those tokens."""
    logits = np.asarray(rows)
    tokens, log_q = dt.top_children_of_logits(logits, k)
    want_tokens = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    assert tokens.tolist() == want_tokens.tolist()
    want_log_q = np.take_along_axis(dt.log_softmax(logits), want_tokens, axis=-1)
    np.testing.assert_allclose(log_q, want_log_q, rtol=0, atol=1e-12)


@settings(deadline=None, max_examples=100)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=40))
def test_pool_depths_equals_the_walk_to_the_root(draws):
    """Vectorised level by level, the depths are those of walking each node up to the root."""
    parents = np.asarray([-1 if i == 0 else draws[i] % (i + 1) - 1 for i in range(len(draws))])
    want = []
    for node in range(len(parents)):
        depth, walk = 1, parents[node]
        while walk >= 0:
            depth, walk = depth + 1, parents[walk]
        want.append(depth)
    assert dt.pool_depths(parents).tolist() == want


def _cli_drafter(tmp_path, *flags):
    """The drafter `minieagle generate --method eagle2 FLAGS` builds on the tiny target."""
    from minieagle import cli
    from minieagle.cli.methods import drafter_factory

    if not (tmp_path / "head").exists():
        save_head(tmp_path / "head", HEAD, HEAD_CFG, dtype="float64")
    argv = ["generate", "x", "--method", "eagle2", "--head", str(tmp_path / "head"), *flags]
    return drafter_factory(cli.build_parser().parse_args(argv), CONFIG, TARGET, object())()


def test_a_tree_larger_than_the_context_is_refused_naming_the_flags(tmp_path):
    """Row 8 of issue 22: a fixed tree larger than the context (so top_k up to its size) is
    refused before any cycle; the CLI names --total-tokens; the largest fitting tree works."""
    context = CONFIG.max_position_embeddings
    with pytest.raises(InvalidInputError, match=f"total_tokens={context + 1} exceeds the context"):
        Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, top_k=context, total_tokens=context + 1)
    with pytest.raises(InvalidInputError, match=f"^--total-tokens {context + 1} exceeds"):
        _cli_drafter(tmp_path, "--tree-top-k", str(context), "--total-tokens", str(context + 1))
    assert _cli_drafter(tmp_path, "--total-tokens", str(context)).total_tokens == context


def test_a_fixed_total_tokens_alone_derives_its_top_k(tmp_path):
    """Row 11: --total-tokens 8 alone (any value >= 2 is documented) drafts with top_k
    min(8, total_tokens - 1), no sizing; a given top_k too large is refused naming both flags
    (not a top_k the user never passed)."""
    for total in (2, 5, 8, 9):
        drafter = build_drafter(
            "eagle2", target=(TARGET, CONFIG), head=(HEAD, HEAD_CFG), total_tokens=total
        )
        assert (drafter.top_k, drafter.total_tokens) == (min(8, total - 1), total)
        assert drafter.sizer is None
    assert _cli_drafter(tmp_path, "--total-tokens", "8").top_k == 7
    with pytest.raises(InvalidInputError, match=r"^--tree-top-k 9 exceeds --total-tokens - 1"):
        _cli_drafter(tmp_path, "--tree-top-k", "9", "--total-tokens", "8")


def test_auto_sizing_refuses_a_depth_no_sized_tree_can_use(tmp_path):
    """Row 10: with automatic sizing, --depth beyond what the largest tree considered (64
    nodes) reaches is refused before anything is measured (which would draft that deep);
    the deepest usable depth passes the check."""
    from minieagle import sizing

    deepest = max(sizing.TOTAL_TOKENS) - 2
    with pytest.raises(InvalidInputError, match=f"^--depth 600 exceeds {deepest}.*--depth <="):
        _cli_drafter(tmp_path, "--depth", "600")
    with pytest.raises(InvalidInputError, match=f"depth={deepest + 1} exceeds"):
        sizing.check_fixed_sizes(depth=deepest + 1)
    sizing.check_fixed_sizes(depth=deepest)


# ---------------------------------------------------------------------------- expand_threshold


def _check_threshold_expansion(threshold, sampling, cls=Eagle2Drafter):
    """Brute force on the last cycle of several decodings by a `cls` drafter: level by level,
    the candidates expanded are exactly the frontier's (top_k best of the level) of value
    exp(score) >= the threshold, and the tree stops growing at the first level where none
    reaches it (or at the depth); the children are the head's own top-k (uncached head along
    each path) and the tree is the rerank of that pool. Threshold 0 is EAGLE-2: the same tokens
    and trees as without."""
    depth, top_k, total = 3, 2, 12
    stopped_early = cycles = cut_levels = 0
    for n in (1, 3, 6, 9):
        recorder = _LastCycle(_drafter(depth, top_k, total, cls=cls))
        recorder.inner.expand_threshold = threshold
        result = _run([1, 3, 4, 0], recorder, sampling, SeededRandomness(2), n=n)
        _assert_tree_is_the_heads_expansion(recorder)
        pool = recorder.inner.pool
        if pool is None:
            continue
        cycles += 1
        level_of = dt.pool_depths(pool.parents)
        parents = set(pool.parents.tolist())
        for level in range(1, depth + 2):
            members = np.flatnonzero(level_of == level)
            assert len(members), f"level {level} is empty"
            level_pool = dt.Pool(pool.tokens[members], pool.parents[members],
                                 pool.scores[members], pool.log_q[members])  # fmt: skip
            frontier = members[dt.next_frontier(level_pool, 0, top_k)]  # as it was then
            chosen = frontier[np.exp(pool.scores[frontier]) >= threshold].tolist()
            expanded = sorted(set(members.tolist()) & parents)
            if level == depth + 1:  # the deepest level is never expanded
                assert expanded == []
                break
            assert expanded == sorted(chosen), (level, expanded, chosen)
            cut_levels += len(chosen) < len(frontier)
            if not chosen:
                assert level_of.max() == level  # growth stopped at this level
                stopped_early += 1
                break
        drafts = total - 1
        assert np.array_equal(recorder.inner.selected, dt.rerank(pool.scores, pool.parents, drafts))
        if threshold == 0.0:
            plain = _drafter(depth, top_k, total)
            plain = _run([1, 3, 4, 0], plain, sampling, SeededRandomness(2), n=n)
            assert plain.tokens == result.tokens and plain.tree_sizes == result.tree_sizes
    assert cycles == 4
    assert stopped_early == {0.0: 0, 1.0: cycles}.get(threshold, stopped_early)
    assert (cut_levels > 0) == (threshold > 0), cut_levels  # some frontier left unexpanded


@pytest.mark.parametrize("threshold", [0.0, 0.2, 0.45, 0.7, 1.0])
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)], ids=repr)
def test_expand_threshold_expands_exactly_the_candidates_that_reach_it(threshold, sampling):
    _check_threshold_expansion(threshold, sampling)


def test_the_threshold_check_catches_an_expansion_that_ignores_it():
    """The brute force above, on a drafter that expands every frontier candidate whatever the
    threshold (the planted bug), fails."""

    class _Ignores(Eagle2Drafter):
        def _expandable(self, pool, frontier):
            return frontier

    with pytest.raises(AssertionError):  # a frontier below the threshold was expanded
        _check_threshold_expansion(0.7, SamplingParams(), cls=_Ignores)


@settings(deadline=None, max_examples=15)
@given(st.lists(st.integers(0, V - 1), min_size=1, max_size=8), st.sampled_from([0.3, 0.6, 0.9]))
def test_greedy_with_a_threshold_is_greedy_vanilla(prompt, threshold):
    drafter = Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, depth=3, top_k=1, total_tokens=5,
                            expand_threshold=threshold)  # fmt: skip
    result = _run(prompt, drafter, n=12)
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, 12)


@pytest.mark.parametrize(
    ("sampled_tree", "sampling", "total", "n", "prompt"),
    [(False, SamplingParams(temperature=1.0), 4, 2, [1, 4]),
     (True, SamplingParams(temperature=1.0, top_k=2), 3, 2, [3, 1])],  # small enough to enumerate
    ids=["top-k tree", "sampled tree"],
)  # fmt: skip
def test_a_threshold_keeps_the_target_law(sampled_tree, sampling, total, n, prompt):
    """The exact law of the emitted tokens with a threshold that cuts (a sampled draw's value is
    its rank's q, fixed before it is drawn, so the cut never depends on a drawn token)."""

    def make(threshold=0.6):
        return Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, depth=1, top_k=2, total_tokens=total,
                             sampled_tree=sampled_tree, expand_threshold=threshold)  # fmt: skip

    law, accepted = _law(prompt, make, sampling, n)
    assert total_variation(law, _target_law(prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1
    pools = []  # the threshold does cut this case: fewer candidates than without it
    for drafter in (make(), make(0.0)):
        ids = np.asarray(prompt[:-1])
        _, hidden, _ = model.forward(TARGET, CONFIG, ids, output_hidden=("final",))
        drafter.begin(prompt, {"final": hidden["final"]}, sampling)
        drafter.propose(prompt[-1], SeededRandomness(0), max_nodes=40)
        pools.append(len(drafter.pool))
    assert pools[0] < pools[1], pools


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "0.5", float("nan")])
def test_a_bad_threshold_is_refused(bad):
    with pytest.raises(InvalidInputError, match=r"expand_threshold=.* must be a number in \[0, 1"):
        Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, expand_threshold=bad)


def test_the_cli_passes_the_threshold_and_refuses_it_elsewhere(tmp_path, capsys):
    from minieagle import cli

    drafter = _cli_drafter(tmp_path, "--total-tokens", "5", "--expand-threshold", "0.5")
    assert drafter.expand_threshold == 0.5
    assert _cli_drafter(tmp_path, "--total-tokens", "5").expand_threshold == 0.0
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["generate", "x", "--expand-threshold", "2"])
    assert "2.0 is not in [0, 1]" in capsys.readouterr().err
    args = cli.build_parser().parse_args(
        ["generate", "x", "--method", "eagle1", "--expand-threshold", "0.5"]
    )
    from minieagle.cli.flags import check_method_flags

    with pytest.raises(InvalidInputError, match="--expand-threshold applies to --method eagle2"):
        check_method_flags(args)


CHAIN_SAMPLINGS = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)]


@pytest.mark.parametrize("sampling", CHAIN_SAMPLINGS, ids=str)
def test_a_sampled_chain_draws_as_the_general_sampled_level_does(sampling, monkeypatch):
    """A sampled chain (top_k 1) takes `_add_first_draw`, which skips the bookkeeping for many
    draws: seed for seed it must emit the same tokens through the same trees, with the same
    pools and proposals, as the general `_add_draws`."""

    def decode():
        drafter = Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, depth=3, top_k=1, total_tokens=4,
                                sampled_tree=True)  # fmt: skip
        seen = []
        propose = drafter.propose

        def recording(root, rng, max_nodes):
            tree = propose(root, rng, max_nodes)
            pool = drafter.pool
            seen.append((tree.tokens.tolist(), tree.parents.tolist(), pool.tokens.tolist(),
                         pool.scores.tolist(),
                         [None if q is None else q.tolist() for q in tree.proposals]))  # fmt: skip
            return tree

        drafter.propose = recording
        results = [_run([1 + seed % 3, 4], drafter, sampling, SeededRandomness(seed), n=10).tokens
                   for seed in range(6)]  # fmt: skip
        return results, seen

    lean = decode()
    monkeypatch.setattr(Eagle2Drafter, "_add_first_draw", Eagle2Drafter._add_draws)
    general = decode()
    assert lean == general
    assert sum(len(tokens) for tokens, *_ in lean[1]) > 2 * len(lean[1])  # chains were drafted
