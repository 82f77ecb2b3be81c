"""Public tests for the verifier assignment: run them with `python -m pytest` in this folder.

They check the two small functions and the simplest walks exactly. The grader runs these and
more (every tree shape, sampled candidates, several cycles, efficiency).
"""

import numpy as np
import pytest

from minieagle.testing import exact_distribution
from minieagle.tree import Tree
from minieagle.verify import acceptance_probability, residual, verify

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.2, 0.6, 0.1, 0.1])


@pytest.mark.points(1)
def test_acceptance_probability_of_a_sampled_candidate():
    """min(1, p(x) / q(x)) for a candidate drawn from q."""
    for token in range(3):
        got = acceptance_probability(P, Q, token)
        want = min(1.0, P[token] / Q[token])
        assert np.isclose(got, want), (
            f"acceptance_probability(p, q, {token}) = {got}, expected min(1, p(x) / q(x)) = {want}"
        )


@pytest.mark.points(1)
def test_acceptance_probability_of_a_deterministic_candidate():
    """q = None means q is one-hot at the token: accept with p(x)."""
    got = acceptance_probability(P, None, 1)
    assert np.isclose(got, 0.3), f"with q=None (one-hot q) accept with p(x) = 0.3, got {got}"


@pytest.mark.points(1)
def test_residual_of_a_sampled_candidate():
    """norm(max(0, p - q)), a probability vector."""
    got = residual(P, Q, 1)
    want = np.maximum(P - Q, 0) / np.maximum(P - Q, 0).sum()
    assert np.isclose(np.sum(got), 1.0), (
        f"the residual must sum to 1 (it is a distribution), yours sums to {np.sum(got)}: divide "
        "max(0, p - q) by its total"
    )
    assert np.allclose(got, want), (
        f"residual(p, q, x) = {got}, expected norm(max(0, p - q)) = {want}"
    )


@pytest.mark.points(1)
def test_root_only_tree_draws_from_the_target():
    """With no drafts the next token follows the target's distribution exactly."""
    tree = Tree(np.array([7]), np.array([-1]))
    law = exact_distribution(lambda rng: verify(tree, P[None, :], rng).next_token)
    for token, p in enumerate(P):
        assert np.isclose(law.get(token, 0.0), p), (
            f"a tree with only a root must draw next_token from target_probs[0]; token {token} "
            f"has probability {law.get(token, 0.0)}, expected {p}"
        )


@pytest.mark.points(1)
def test_greedy_chain_follows_the_argmax():
    """One-hot targets: accept drafts while they equal the argmax, then emit the argmax."""
    tree = Tree.chain(9, [2, 1, 3])
    target = np.eye(4)[[2, 1, 0, 0]]  # argmax after root, after 2, after 1, after 3
    verdict = verify(tree, target, _always_true_coins())
    assert list(verdict.accepted) == [1, 2], (
        f"drafts 2 and 1 equal the target's argmax and must be accepted, draft 3 not; "
        f"accepted nodes {list(verdict.accepted)}, expected [1, 2]"
    )
    assert verdict.next_token == 0, f"next_token {verdict.next_token}, expected the argmax 0"


def _always_true_coins():
    class Coins:
        def coin(self, p_true):
            return p_true >= 1.0

        def draw(self, probs):
            return int(np.argmax(probs))

    return Coins()
