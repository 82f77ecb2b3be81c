"""Hidden tests for the EAGLE-2 tree assignment: the selection rules exactly, and the drafter.

The oracles are written plainly here: pools grown level by level in pure Python (values summed
along each path, the frontier and the reranked set found by sorting every candidate with the
library's tie rule), a walk to the root for depths and ancestors, greedy vanilla decoding, and τ
of EAGLE-2 with a head whose q is the target's own distribution (a well-calibrated head: there a
tree of the best values gets many drafts accepted; a tree of only the root gets τ = 1).
"""

import numpy as np
import pytest
from test_public import CONFIG, HEAD, HEAD_CFG, TARGET  # the same tiny target and head

from minieagle import model
from minieagle.drafters import head_drafter
from minieagle.drafters.eagle2 import Eagle2Drafter
from minieagle.dynamic_tree import (
    Pool,
    add_children,
    build_tree,
    empty_pool,
    next_frontier,
    rerank,
    top_children,
    top_children_of_logits,
)
from minieagle.errors import InvalidInputError
from minieagle.generate import generate, greedy_reference
from minieagle.sampling import SamplingParams, SeededRandomness

V = CONFIG.vocab_size

# ---------------------------------------------------------------------------- plain oracles


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top(row, k):
    """The k largest entries' ids, largest first, the lowest id on ties."""
    return sorted(range(len(row)), key=lambda t: (-row[t], t))[:k]


def _depths(parents):
    out = []
    for node in range(len(parents)):
        depth, walk = 1, parents[node]
        while walk >= 0:
            depth, walk = depth + 1, parents[walk]
        out.append(depth)
    return out


def _best(scores, parents, count):
    """The `count` best candidates by (-score, depth, pool index), listed by (depth, index)."""
    depth = _depths(parents)
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], depth[i], i))
    return sorted(ranked[:count], key=lambda i: (depth[i], i))


# Logit values with exact ties, and a gap wide enough that the top token's log q is exactly 0.
LOGIT_VALUES = [0.0, 0.0, 1.0, 2.5, 800.0]


def _level_logits(rng, rows, vocab):
    return rng.choice(LOGIT_VALUES, size=(rows, vocab))


def _plain_pool(seed, k, vocab, steps):
    """EAGLE-2's expansion in plain Python: (tokens, parents, scores, log_q, frontiers)."""
    rng = np.random.default_rng(seed)
    tokens, parents, scores, log_qs, frontiers = [], [], [], [], []
    expanded = [-1]
    for _ in range(steps + 1):
        log_q = _log_softmax(_level_logits(rng, len(expanded), vocab))
        start = len(tokens)
        for parent, row in zip(expanded, log_q, strict=True):
            for token in _top(row, k):
                tokens.append(token)
                parents.append(parent)
                log_qs.append(row[token])
                scores.append((scores[parent] if parent >= 0 else 0.0) + row[token])
        newest = range(start, len(tokens))
        expanded = sorted(newest, key=lambda i: (-scores[i], i))[:k]
        frontiers.append((start, len(tokens), expanded))
    return tokens, parents, scores, log_qs, frontiers


def _student_pool(seed, k, vocab, steps):
    """The same expansion through the submitted top_children / add_children / next_frontier."""
    rng = np.random.default_rng(seed)
    pool, expanded = empty_pool(), [-1]
    for _ in range(steps + 1):
        log_q = _log_softmax(_level_logits(rng, len(expanded), vocab))
        start = len(pool)
        tokens, picked = top_children(log_q, k)
        pool = add_children(pool, expanded, np.asarray(tokens), np.asarray(picked))
        expanded = [int(i) for i in next_frontier(pool, start, k)]
    return pool


POOL_CASES = [(seed, k, vocab, steps) for seed in range(6) for k, vocab, steps in
              ((1, 3, 3), (2, 4, 3), (3, 5, 2), (4, 3, 2))]  # fmt: skip


def _pool(case):
    tokens, parents, scores, log_q, _ = _plain_pool(*case)
    return Pool(np.array(tokens), np.array(parents), np.array(scores), np.array(log_q))


# ---------------------------------------------------------------------------- top-k children


@pytest.mark.points(1)
def test_top_children_ties_and_a_vocabulary_smaller_than_k():
    """Ties go to the lowest token id; with k > V every token is a child (k' = min(k, V))."""
    log_q = np.log(np.array([[0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]]))
    tokens, picked = top_children(log_q, 6)
    tokens = np.asarray(tokens)
    assert tokens.shape == (2, 4), (
        f"top_children(log_q [2, 4], k=6) returned tokens of shape {tokens.shape}, expected "
        "(2, 4): k' = min(k, V) children per row"
    )
    assert tokens.tolist() == [[0, 1, 2, 3], [3, 2, 1, 0]], (
        f"tokens {tokens.tolist()}, expected [[0, 1, 2, 3], [3, 2, 1, 0]]: most likely first, "
        "the lowest token id on a tie"
    )
    assert np.array_equal(np.asarray(picked), np.take_along_axis(log_q, tokens, axis=-1))


@pytest.mark.points(1)
def test_top_children_of_logits_equals_the_top_children_of_the_log_softmax():
    """From raw logits: the same tokens, and log q = the log-softmax at them."""
    rng = np.random.default_rng(3)
    for k in (1, 2, 5, 9):
        logits = np.concatenate([rng.normal(size=(4, 7)) * 3, _level_logits(rng, 3, 7)])
        tokens, log_q = top_children_of_logits(logits, k)
        want = [_top(row, k) for row in logits]
        assert np.asarray(tokens).tolist() == want, (
            f"top_children_of_logits(k={k}) picked {np.asarray(tokens).tolist()}, expected "
            f"{want}: the k largest logits, largest first, the lowest id on a tie"
        )
        want_log_q = np.take_along_axis(_log_softmax(logits), np.array(want), axis=-1)
        assert np.allclose(log_q, want_log_q, rtol=0, atol=1e-12), (
            f"log q {np.asarray(log_q).tolist()} of the chosen tokens, expected the "
            f"log-softmax there: {want_log_q.tolist()} (logit - max - log sum exp(logit - max))"
        )


# ---------------------------------------------------------------------------- expansion


@pytest.mark.points(1)
def test_add_children_scores_with_log_accept_and_keeps_the_raw_log_q():
    """A calibrated score term (log_accept) replaces log q in the score; pool.log_q keeps q."""
    pool = add_children(empty_pool(), [-1], np.array([[3, 1]]), np.array([[-0.25, -2.0]]))
    pool = add_children(
        pool, [1, 0], np.array([[0], [2]]), np.array([[-0.5], [-1.0]]), np.array([[-0.1], [-0.7]])
    )
    assert pool.parents.tolist() == [-1, -1, 1, 0], (
        f"parents {pool.parents.tolist()}, expected [-1, -1, 1, 0]: row f of the new children "
        "belongs to expanded[f]"
    )
    assert pool.log_q.tolist() == [-0.25, -2.0, -0.5, -1.0], (
        f"pool.log_q {pool.log_q.tolist()}, expected [-0.25, -2.0, -0.5, -1.0]: log_q keeps the "
        "raw draft confidence even when log_accept is given"
    )
    want = [-0.25, -2.0, -2.0 + -0.1, -0.25 + -0.7]
    assert pool.scores.tolist() == want, (
        f"scores {pool.scores.tolist()}, expected {want}: with log_accept given, a child's "
        "score is its parent's score plus its log_accept (not its log q)"
    )


@pytest.mark.points(2)
def test_expansion_values_are_sums_of_log_q_along_each_path():
    """Grown level by level with the submitted functions, every candidate matches the plain
    expansion: its token, its parent (an expanded node of the level before) and its value."""
    for case in POOL_CASES:
        tokens, parents, scores, log_q, _ = _plain_pool(*case)
        pool = _student_pool(*case)
        seed, k, vocab, steps = case
        where = f"(top_k={k}, vocabulary {vocab}, {steps} expansion steps, seed {seed})"
        assert len(pool) == len(tokens), (
            f"the grown pool holds {len(pool)} candidates, expected {len(tokens)} {where}"
        )
        for i in range(len(tokens)):
            assert pool.parents[i] == parents[i], (
                f"pool candidate {i} has parent {pool.parents[i]}, expected {parents[i]} "
                f"{where}: the nodes expanded are the top_k of the newest level by value, "
                "best first (the lower pool index on ties)"
            )
            assert pool.tokens[i] == tokens[i], (
                f"pool candidate {i} has token {pool.tokens[i]}, expected {tokens[i]} {where}: "
                "children are each expanded node's top_k tokens in rank order"
            )
            parent_score = scores[parents[i]] if parents[i] >= 0 else 0.0
            assert pool.scores[i] == scores[i], (
                f"pool candidate {i} has score {pool.scores[i]}, expected {scores[i]} = its "
                f"parent's score {parent_score} + its log q {log_q[i]} {where}: add the "
                "parent's score (0 at the root) to the child's log q"
            )


@pytest.mark.points(2)
def test_next_frontier_is_the_best_of_the_newest_level_by_value():
    """On grown pools with ties: the k best values of pool[start:], best first, lower index on
    ties; levels where the candidates' own log q ranks them differently are included."""
    disagreements = 0
    for case in POOL_CASES:
        tokens, parents, scores, log_q, frontiers = _plain_pool(*case)
        k = case[1]
        for start, end, want in frontiers:  # the pool as it was when the level was newest
            pool = Pool(*(np.array(field[:end]) for field in (tokens, parents, scores, log_q)))
            got = [int(i) for i in next_frontier(pool, start, k)]
            by_log_q = sorted(range(start, end), key=lambda i: (-log_q[i], i))[:k]
            disagreements += by_log_q != want
            assert got == want, (
                f"next_frontier(pool, start={start}, k={k}) = {got}, expected {want}: the k "
                "best of the newest level by value (the path's score), best first, the lower "
                "pool index on a tie"
                + ("; you ranked by the candidates' own log q" if got == by_log_q else "")
            )
    assert disagreements > 0, "(the test's own check: its cases must tell value from log q)"


# ---------------------------------------------------------------------------- reranking


@pytest.mark.points(3)
def test_rerank_is_the_best_of_the_pool_with_ties_toward_the_shallower():
    """On grown pools with exact ties (log q = 0 makes a child tie its parent): the count best
    by (value, then the shallower, then the earlier), listed by depth then pool index."""
    for case in POOL_CASES:
        pool = _pool(case)
        depth = _depths(pool.parents.tolist())
        for count in range(1, len(pool) + 2):
            got = [int(i) for i in rerank(pool.scores, pool.parents, count)]
            want = _best(pool.scores.tolist(), pool.parents.tolist(), count)
            if got == want:
                continue
            chosen = set(got)
            orphans = [i for i in got if pool.parents[i] >= 0 and pool.parents[i] not in chosen]
            missed = sorted(set(want) - chosen)
            assert not orphans, (
                f"rerank(count={count}) = {got}: candidate {orphans[0]} was selected without "
                f"its parent {pool.parents[orphans[0]]}; expected {want}"
            )
            assert set(got) == set(want), (
                f"rerank(count={count}) = {got}, expected {want}: it missed {missed} (scores "
                f"{pool.scores[missed].tolist()}, depths {[depth[i] for i in missed]}); rank "
                "by score, then the shallower candidate, then the lower pool index"
            )
            raise AssertionError(
                f"rerank(count={count}) listed {got}, expected {want}: parents first, by depth "
                "and then pool index"
            )


@pytest.mark.points(1)
def test_rerank_tie_goes_to_the_shallower_candidate():
    """A deep candidate listed early ties a shallow one listed late: the shallow one wins."""
    scores, parents = np.array([-1.0, -2.0, -2.0]), np.array([-1, 0, -1])
    got = [int(i) for i in rerank(scores, parents, 2)]
    assert got == [0, 2], (
        f"rerank = {got}, expected [0, 2]: candidates 1 (depth 2) and 2 (depth 1) tie at -2.0, "
        "and on a tie in value the shallower candidate wins, before the pool index"
    )


@pytest.mark.points(2)
def test_rerank_returns_a_tree_of_the_requested_size_for_any_pool():
    """Hand-made pools whose scores may rise along a path: still a connected set of
    min(count, M) distinct candidates, listed parents first."""
    rng = np.random.default_rng(11)
    for _ in range(60):
        size = int(rng.integers(1, 14))
        parents = np.array([int(rng.integers(-1, i)) for i in range(size)])
        scores = rng.choice([-3.0, -1.0, -1.0, 0.0], size=size)
        depth = _depths(parents.tolist())
        for count in (1, 3, 6, 20):
            got = [int(i) for i in rerank(scores, parents, count)]
            where = f"for parents {parents.tolist()} and scores {scores.tolist()}, count={count}"
            assert len(got) == len(set(got)) == min(count, size), (
                f"rerank returned {got} {where}: expected {min(count, size)} distinct candidates"
            )
            chosen = set(got)
            for i in got:
                assert parents[i] < 0 or parents[i] in chosen, (
                    f"rerank selected candidate {i} without its parent {parents[i]} {where}: when "
                    "a score rises along a path the plain top is not a tree; take each "
                    "candidate with its missing ancestors, skipping one that does not fit"
                )
            assert got == sorted(got, key=lambda i: (depth[i], i)), (
                f"rerank listed {got} {where}: list them parents first, by depth then index"
            )


# ---------------------------------------------------------------------------- the tree


@pytest.mark.points(1)
def test_build_tree_carries_the_proposals_of_the_selected_candidates():
    """With proposals (a sampled tree) node j + 1 carries proposals[selected[j]]."""
    pool = Pool(np.array([1, 2, 3, 4]), np.array([-1, -1, 1, 2]), -np.arange(1.0, 5.0),
                -np.ones(4))  # fmt: skip
    proposals = [np.full(V, 0.1 * (i + 1)) for i in range(4)]
    try:
        tree = build_tree(0, pool, np.array([1, 2, 3]), proposals)
    except InvalidInputError as error:
        raise AssertionError(
            f"build_tree refused a valid selection ({error}): a parent must become the tree "
            "node of that candidate (node j + 1 = selected[j]; -1 = the root, node 0)"
        ) from error
    assert tree.parents.tolist() == [-1, 0, 1, 2], (
        f"tree parents {tree.parents.tolist()}, expected [-1, 0, 1, 2]: map pool parents to the "
        "tree node of that candidate"
    )
    assert tree.proposals[0] is None and all(
        np.array_equal(tree.proposals[j + 1], proposals[i]) for j, i in enumerate([1, 2, 3])
    ), "node j + 1 must carry proposals[selected[j]] (the root: None)"


def _drafter(depth, top_k, total_tokens):
    return Eagle2Drafter(
        TARGET, CONFIG, HEAD, HEAD_CFG, depth=depth, top_k=top_k, total_tokens=total_tokens
    )


def _propose(drafter, max_nodes):
    """drafter.propose, with Tree's refusal of a malformed tree turned into a pointer."""
    try:
        return drafter.propose(4, SeededRandomness(0), max_nodes=max_nodes)
    except InvalidInputError as error:
        raise AssertionError(
            f"propose built an invalid tree ({error}): in build_tree a node's parent is the "
            "tree node of its pool parent (node j + 1 = selected[j]), listed before it"
        ) from error


def _begun(drafter, prompt=(1, 3, 4)):
    _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray(prompt[:-1]), output_hidden=("final",))
    drafter.begin(list(prompt), {"final": hidden["final"]}, SamplingParams())
    return drafter


@pytest.mark.points(2)
def test_the_tree_holds_total_tokens_nodes_root_included():
    """len(tree) = min(total_tokens, max_nodes, pool + 1): total_tokens counts the root."""
    for depth, top_k, total_tokens in ((2, 2, 12), (3, 3, 9), (1, 1, 26), (3, 2, 4)):
        for max_nodes in (2, 3, 7, 40):
            tree = _propose(_begun(_drafter(depth, top_k, total_tokens)), max_nodes)
            k = min(top_k, V)
            want = min(total_tokens, max_nodes, k + depth * k * k + 1)
            assert len(tree) == want, (
                f"depth={depth}, top_k={top_k}, total_tokens={total_tokens}, max_nodes="
                f"{max_nodes}: the tree has {len(tree)} nodes, expected {want}; total_tokens "
                "counts the root (total_tokens - 1 drafts), and the tree never exceeds max_nodes"
            )


@pytest.mark.points(1)
def test_one_head_forward_per_useful_expansion_step(monkeypatch):
    """A cycle runs the catch-up, then min(depth, drafts - 1) levels (a deeper level could
    never be chosen), each ONE head forward over at most top_k frontier nodes."""
    fed = []
    forward = head_drafter.Eagle1Head.forward

    def counting(self, tokens, *args, **kwargs):
        fed.append(len(tokens))
        return forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(head_drafter.Eagle1Head, "forward", counting)
    for depth, top_k, total_tokens, max_nodes in ((3, 3, 26, 3), (2, 2, 12, 40), (4, 2, 4, 40)):
        fed.clear()
        drafter = _begun(_drafter(depth, top_k, total_tokens))
        _propose(drafter, max_nodes)
        drafts = min(total_tokens, max_nodes) - 1
        steps = min(depth, drafts - 1)
        assert len(fed) == 1 + steps, (
            f"depth={depth}, total_tokens={total_tokens}, max_nodes={max_nodes}: one propose "
            f"ran {len(fed)} head forwards, expected 1 + {steps} (the catch-up, then one per "
            "expansion step; with room for d drafts only d - 1 steps can matter)"
        )
        assert all(0 < n <= top_k for n in fed[1:]), (
            f"the expansion forwards fed {fed[1:]} nodes; each feeds the frontier, at most "
            f"top_k={top_k} nodes"
        )


@pytest.mark.points(2)
def test_the_drafted_tree_is_the_best_of_the_heads_expansion():
    """After propose: the pool is the expansion of the head's logits, scored by value, and the
    tree is its best total_tokens - 1 candidates (checked against the plain rules)."""
    drafter = _begun(_drafter(3, 3, 10))
    tree = _propose(drafter, 40)
    pool, selected = drafter.pool, np.asarray(drafter.selected)
    assert len(tree) == 10, (
        f"propose returned a tree of {len(tree)} nodes, expected total_tokens=10 (the root "
        "included: 9 drafts)"
    )
    parents, scores = pool.parents.tolist(), pool.scores.tolist()
    root_log_q = _log_softmax(drafter.draft_logits[0])
    want_root = _top(root_log_q, 3)
    assert pool.tokens[:3].tolist() == want_root, (
        f"the root's children in the pool are {pool.tokens[:3].tolist()}, expected the head's "
        f"top 3 {want_root}"
    )
    for i in range(len(pool)):
        parent_score = scores[parents[i]] if parents[i] >= 0 else 0.0
        assert scores[i] == parent_score + pool.log_q[i], (
            f"pool candidate {i}: score {scores[i]}, expected its parent's {parent_score} + its "
            f"log q {pool.log_q[i]}: add the parent's score"
        )
    depth = _depths(parents)
    for level in range(1, 4):  # the nodes expanded at each level: its top 3 by value
        members = [i for i in range(len(pool)) if depth[i] == level]
        expanded = sorted({p for p in parents if p >= 0 and depth[p] == level})
        want = sorted(sorted(members, key=lambda i: (-scores[i], i))[:3])
        assert expanded == want, (
            f"at depth {level} the drafter expanded pool candidates {expanded}, expected the "
            f"3 best by value {want}"
        )
    want = _best(scores, parents, 9)
    assert selected.tolist() == want, (
        f"the tree's drafts are pool candidates {selected.tolist()}, expected the 9 best {want}"
    )
    node_of = {-1: 0, **{c: j + 1 for j, c in enumerate(want)}}
    assert tree.tokens.tolist() == [4, *pool.tokens[want].tolist()], (
        f"tree tokens {tree.tokens.tolist()}, expected the root 4, then the selected "
        f"candidates' tokens {pool.tokens[want].tolist()}"
    )
    assert tree.parents.tolist() == [-1, *(node_of[parents[c]] for c in want)], (
        f"tree parents {tree.parents.tolist()}: each must be the tree node of the pool parent"
    )


# ---------------------------------------------------------------------------- decoding


def _run(prompt, drafter, n):
    try:
        return generate(
            TARGET, CONFIG, prompt, drafter=drafter, max_new_tokens=n, stop_at_eos=False
        )
    except InvalidInputError as error:
        raise AssertionError(
            f"generate failed: {error}. A tree larger than max_nodes (the room left in the "
            "context) overflows it: total_tokens counts the root; a node whose parent is not a "
            "tree node listed before it is refused (build_tree)"
        ) from error


@pytest.mark.points(1)
def test_greedy_eagle2_is_greedy_vanilla_for_every_size_and_to_the_end_of_the_context():
    """Several tree sizes, and a generation that fills the context (the tree shrinks there)."""
    for prompt, (depth, top_k, total_tokens), n in (
        ([1], (1, 1, 2), 8),
        ([2, 2, 2, 2], (2, 4, 5), 8),
        ([4, 0, 5], (5, 3, 20), 8),
        ([1, 3, 4], (2, 2, 6), CONFIG.max_position_embeddings),
    ):
        result = _run(prompt, _drafter(depth, top_k, total_tokens), n)
        want = greedy_reference(TARGET, CONFIG, prompt, len(result.tokens))
        assert result.tokens == want, (
            f"depth={depth}, top_k={top_k}, total_tokens={total_tokens}: EAGLE-2 emitted "
            f"{result.tokens}, greedy decoding {want}"
        )
    assert result.stop_reason == "context_full", "the long generation should fill the context"


class _CalibratedHead:
    """Stands in for the EAGLE-1 head's forward: the real head still runs (its cache stays
    right), but the logits returned are the target's own at each fed node (an uncached target
    forward over the sequence the tree mask selects), so the draft's q is the target's p."""

    def __init__(self, first_token, forward):
        self.first, self.forward, self.slot_tokens = first_token, forward, []

    def __call__(self, head, tokens, features, cache, *, last_only=False, **kwargs):
        past = cache.length
        mask = kwargs.get("attention_mask")
        mask = model.causal_mask(past, len(tokens)) if mask is None else np.asarray(mask)
        self.slot_tokens[past:] = [int(t) for t in tokens]
        predicted, _ = self.forward(head, tokens, features, cache, last_only=last_only, **kwargs)
        rows = []
        for row in mask:
            sequence = [self.first] + [self.slot_tokens[j] for j in np.flatnonzero(row)]
            logits, _, _ = model.forward(TARGET, CONFIG, np.asarray(sequence))
            rows.append(logits[-1])
        logits = np.stack(rows)
        return predicted, logits[-1:] if last_only else logits


# (prompt, depth, top_k, total_tokens) -> tau of EAGLE-2 (library reference), 24 new tokens
CALIBRATED_CASES = [
    ([1, 3, 4, 0], 5, 4, 12, 6.0, [6, 6, 3, 6]),
    ([1, 3, 4], 3, 3, 10, 4.8, [3, 4, 4, 4, 4]),
]


@pytest.mark.points(2)
@pytest.mark.parametrize("case", CALIBRATED_CASES, ids=lambda c: f"total_tokens={c[3]}")
def test_tau_with_a_calibrated_head(monkeypatch, case):
    """With q = the target's p, EAGLE-2's tree of the best values gets the reference τ."""
    prompt, depth, top_k, total_tokens, want_tau, want_accepted = case
    head = _CalibratedHead(prompt[0], head_drafter.Eagle1Head.forward)
    monkeypatch.setattr(
        head_drafter.Eagle1Head, "forward", lambda self, *a, **kw: head(self, *a, **kw)
    )
    result = _run(prompt, _drafter(depth, top_k, total_tokens), 24)
    assert result.tokens == greedy_reference(TARGET, CONFIG, prompt, 24), (
        f"EAGLE-2 emitted {result.tokens}, not the target's greedy tokens"
    )
    tau = result.tau
    why = (
        "no draft was ever accepted: does your tree hold more than the root?"
        if tau <= 1
        else "your trees accept fewer drafts than EAGLE-2's: check that values add up along "
        "the path, that the frontier is the best of the newest level by value, and that "
        "rerank keeps the best of the whole pool"
        if tau < want_tau
        else "your trees differ from EAGLE-2's (they happen to accept more here): check the "
        "ranking rules"
    )
    assert tau == want_tau and result.accepted_per_cycle == want_accepted, (
        f"τ = {tau:.3f} (accepted per cycle {result.accepted_per_cycle}) with a head whose q is "
        f"the target's p, depth={depth}, top_k={top_k}, total_tokens={total_tokens}; EAGLE-2 "
        f"gets τ = {want_tau} ({want_accepted}): {why}"
    )
