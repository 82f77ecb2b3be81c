"""The verifier (minieagle.verify) on exact cases: hand-built trees and one-hot targets with the
expected outcome (TensorRT-LLM / vLLM style), greedy verification against the obvious oracle on
random trees, and the edge inputs (duplicates, padding, zero-probability candidates, p == q).

Every outcome is checked through `exact_distribution`, so "always" means probability 1 over every
branch of the verifier's coins and draws, not one lucky seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minieagle.sampling import SeededRandomness
from minieagle.testing import exact_distribution, reference_greedy_verify
from minieagle.tree import Tree, from_choices
from minieagle.verify import acceptance_probability, residual, verify

TOL = 1e-12
V = 8


def _one_hot(token: int, vocab: int = V) -> np.ndarray:
    row = np.zeros(vocab)
    row[token] = 1.0
    return row


def _verdict_law(tree: Tree, target_probs: np.ndarray) -> dict:
    """Exact law of (accepted nodes, next token) of the real verifier."""

    def run(rng):
        verdict = verify(tree, target_probs, rng)
        return tuple(verdict.accepted), verdict.next_token

    return exact_distribution(run)


@st.composite
def probability_vectors(draw, vocab: int):
    """float64 [vocab] with zeros allowed, at least one positive entry."""
    weights = draw(
        st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)), min_size=vocab, max_size=vocab)
    )
    if sum(weights) == 0:
        weights[draw(st.integers(0, vocab - 1))] = 1.0
    w = np.asarray(weights)
    return w / w.sum()


# ---------------------------------------------------------------------------- exact tables

# A static tree in EAGLE/TRT-LLM `choices` form: 12 drafts, depth 3, with the token of each path.
TABLE_TOKENS = {
    (0,): 3, (1,): 5, (2,): 6,
    (0, 0): 1, (0, 1): 4, (0, 2): 7, (1, 0): 2, (1, 1): 3, (2, 0): 4,
    (0, 0, 0): 5, (0, 1, 0): 6, (1, 0, 0): 0,
}  # fmt: skip


def _table_tree():
    """The tree, and the path (tuple of ranks) of every node, recorded in node order."""
    paths = [()]
    tree = from_choices(
        [list(p) for p in TABLE_TOKENS],
        root=2,
        tokens_by_path=lambda path: (paths.append(path), TABLE_TOKENS[path])[1],
    )
    return tree, paths


TABLE_CASES = {
    # name: (target argmax at the listed paths, expected accepted paths, expected next token)
    "nothing accepted": ({(): 7}, [], 7),
    "first level only": ({(): 3, (0,): 0}, [(0,)], 0),
    "a non-longest path": ({(): 5, (1,): 3, (1, 1): 2}, [(1,), (1, 1)], 2),
    "the longest path": ({(): 3, (0,): 4, (0, 1): 6, (0, 1, 0): 0}, [(0,), (0, 1), (0, 1, 0)], 0),
}


@pytest.mark.parametrize("case", TABLE_CASES, ids=str)
def test_greedy_table(case):
    argmax_at, want_paths, want_next = TABLE_CASES[case]
    tree, paths = _table_tree()
    # Off the expected walk the target's argmax is arbitrary; it must not matter.
    argmax = [argmax_at.get(path, (3 * node + 1) % V) for node, path in enumerate(paths)]
    target_probs = np.stack([_one_hot(t) for t in argmax])
    want = (tuple(paths.index(p) for p in want_paths), want_next)
    assert _verdict_law(tree, target_probs) == {want: 1.0}
    assert reference_greedy_verify(tree, argmax) == (list(want[0]), want_next)


@st.composite
def greedy_cases(draw):
    """A random tree over a small vocabulary (so matches are frequent) with duplicates, padding,
    and per node either a deterministic pick or a sampled one with a q that covers its token;
    plus the target's argmax at every node."""
    vocab = draw(st.integers(2, 4))
    n = draw(st.integers(1, 9))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [0] + [draw(st.integers(-1, vocab - 1)) for _ in range(1, n)]
    proposals = [None]
    for token in tokens[1:]:
        q = draw(st.none() | probability_vectors(vocab)) if token >= 0 else None
        if q is not None and q[token] == 0:
            q = 0.5 * q + 0.5 * _one_hot(token, vocab)
        proposals.append(q)
    argmax = draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n))
    return Tree(np.asarray(tokens), np.asarray(parents), tuple(proposals)), argmax, vocab


@settings(deadline=None, max_examples=150)
@given(greedy_cases())
def test_greedy_verification_matches_the_reference(case):
    """At T = 0 (one-hot targets) the outcome is certain and is the reference walk, whatever
    proposals the candidates carry."""
    tree, argmax, vocab = case
    target_probs = np.stack([_one_hot(t, vocab) for t in argmax])
    accepted, next_token = reference_greedy_verify(tree, argmax)
    assert _verdict_law(tree, target_probs) == {(tuple(accepted), next_token): 1.0}


def test_greedy_follows_the_first_matching_duplicate():
    """Siblings are tried in node order: with duplicate children the first one is followed even
    when the second has the longer matching subtree (EAGLE de-duplicates, so never longer)."""
    tree = Tree(np.asarray([0, 1, 1, 2]), np.asarray([-1, 0, 0, 2]))
    argmax = [1, 0, 2, 0]
    assert _verdict_law(tree, np.stack([_one_hot(t) for t in argmax])) == {((1,), 0): 1.0}


# ---------------------------------------------------------------------------- edge inputs


def test_duplicate_deterministic_siblings_are_tried_once():
    """Siblings [2, 2, 3]: the second 2 can never be accepted (p(2) was zeroed when the first
    was rejected); the first emitted token still follows p exactly."""
    p = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    tree = Tree(np.asarray([0, 2, 2, 3]), np.asarray([-1, 0, 0, 0]))
    law = _verdict_law(tree, np.stack([p, _one_hot(0, 5), _one_hot(1, 5), _one_hot(4, 5)]))
    assert not any(2 in accepted for accepted, _ in law)
    assert law[((1,), 0)] == pytest.approx(0.3, abs=TOL)
    assert law[((3,), 4)] == pytest.approx(0.25, abs=TOL)
    for token in (0, 1, 4):  # not in the tree: emitted as the correction with probability p
        assert law[((), token)] == pytest.approx(p[token], abs=TOL)


def test_padding_slots_are_skipped_without_randomness():
    """A -1 slot is never accepted and changes nothing: the law equals that of the tree without
    it, and with the padding first no coin is spent on it (the coin order is unchanged)."""
    p = np.array([0.4, 0.35, 0.25])
    rows = np.stack([p, _one_hot(0, 3), _one_hot(1, 3)])
    padded = Tree(np.asarray([0, -1, 1]), np.asarray([-1, 0, 0]))
    plain = Tree(np.asarray([0, 1]), np.asarray([-1, 0]))
    law = _verdict_law(padded, rows)
    assert all(1 not in accepted for accepted, _ in law)
    plain_law = _verdict_law(plain, rows[[0, 2]])
    assert {(tuple(2 * n for n in a), t): w for (a, t), w in plain_law.items()} == law


def test_zero_probability_candidates_are_never_accepted():
    p = np.array([0.0, 0.6, 0.4])
    q = np.array([0.5, 0.0, 0.5])  # the sampled candidate 0 has q > 0 but p = 0
    # Deterministic: the correction comes from p with p(0) = 0 zeroed, i.e. p itself.
    tree = Tree(np.asarray([1, 0]), np.asarray([-1, 0]))
    assert _verdict_law(tree, np.stack([p, p])) == pytest.approx({((), 1): 0.6, ((), 2): 0.4})
    # Sampled: the correction comes from norm(max(0, p - q)) = [0, 1, 0].
    tree = Tree(np.asarray([1, 0]), np.asarray([-1, 0]), (None, q))
    assert _verdict_law(tree, np.stack([p, p])) == pytest.approx({((), 1): 1.0})


@settings(deadline=None, max_examples=100)
@given(
    st.integers(1, 6).flatmap(probability_vectors),
    st.lists(st.integers(0, 100), min_size=3, max_size=3),
)
@example(np.array([1.0, 0.0, 0.0]), [0, 0, 0])  # one-hot p == q
def test_p_equal_q_accepts_everything_without_nan(p, picks):
    support = np.flatnonzero(p)
    drafts = [int(support[i % len(support)]) for i in picks]  # tokens drawn from q = p
    tree = Tree.chain(0, drafts, [p, p, p])
    law = _verdict_law(tree, np.stack([p] * 4))
    accepted_all = sum(w for (accepted, _), w in law.items() if accepted == (1, 2, 3))
    assert accepted_all == pytest.approx(1.0, abs=TOL)
    assert acceptance_probability(p, p, drafts[0]) == 1.0
    r = residual(p, p, drafts[0])  # no mass left: p comes back, not 0 / 0
    assert np.isfinite(r).all()
    np.testing.assert_array_equal(r, p)


@settings(deadline=None, max_examples=100)
@given(
    st.integers(1, 6).flatmap(lambda v: st.tuples(probability_vectors(v), probability_vectors(v)))
)
def test_residual_and_acceptance_follow_the_formulas(pq):
    p, q = pq
    for token in np.flatnonzero(q):
        assert acceptance_probability(p, q, token) == pytest.approx(min(1.0, p[token] / q[token]))
        assert acceptance_probability(p, None, token) == pytest.approx(p[token])
        r = residual(p, q, token)
        excess = np.maximum(p - q, 0.0)
        want = excess / excess.sum() if excess.sum() > 0 else p
        np.testing.assert_allclose(r, want, rtol=0, atol=1e-12)
        zeroed = p.copy()
        zeroed[token] = 0.0
        want = zeroed / zeroed.sum() if zeroed.sum() > 0 else p
        np.testing.assert_allclose(residual(p, None, token), want, rtol=0, atol=1e-12)
        assert (r >= 0).all() and r.sum() == pytest.approx(1.0)


def test_a_sampled_candidate_outside_its_proposal_is_an_error():
    p, q = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    with pytest.raises(ValueError, match=r"candidate token 1 has proposal probability q=0\.0"):
        acceptance_probability(p, q, 1)
    tree = Tree.chain(0, [1], [q])
    with pytest.raises(ValueError, match="must come from the q it carries"):
        verify(tree, np.stack([p, p]), SeededRandomness(0))


def test_target_rows_must_match_the_nodes():
    tree = Tree.chain(0, [1, 1])
    with pytest.raises(ValueError, match="target_probs has 2 rows for 3 nodes"):
        verify(tree, np.full((2, 2), 0.5), SeededRandomness(0))
