"""Medusa's typical acceptance changes the output law; minieagle's verifier does not.

The exact enumerator computes both laws on the same drafted trees: the lossless `verify` matches
the target to 1e-12, typical acceptance misses it by a TV that is measured here, not assumed.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from minieagle import testing
from minieagle.errors import InvalidInputError
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.tree import Tree
from minieagle.typical_acceptance import typical_threshold, typical_verify
from minieagle.verify import verify

V = 5


def toy_model(seed, temperature):
    @cache
    def next_dist(context):
        logits = 2 * np.random.default_rng((seed, *context)).standard_normal(V)
        return target_distribution(logits, SamplingParams(temperature=temperature))

    return next_dist


TARGET = toy_model(0, 1.0)
DRAFT = toy_model(1, 1.0)
MEDUSA_TREE = testing.make_topk_tree(DRAFT, [2, 1])  # deterministic candidates, like Medusa's


def test_typical_acceptance_changes_the_output_law_and_verify_does_not():
    exact = testing.autoregressive_law(TARGET, (0, 3), 2)
    typical = testing.one_cycle_law(typical_verify, TARGET, MEDUSA_TREE, (0, 3), 2)
    ours = testing.one_cycle_law(verify, TARGET, MEDUSA_TREE, (0, 3), 2)
    assert testing.total_variation(ours, exact) < 1e-12
    assert testing.total_variation(typical, exact) > 0.05  # measured: see the docs page
    with pytest.raises(AssertionError, match="not lossless"):
        testing.assert_lossless(typical_verify, TARGET, MEDUSA_TREE, (0, 3), k=2)


def test_typical_tokens_only():
    """Tokens below the threshold are never emitted: the law loses its tail."""
    p = TARGET((0, 3))
    law = testing.exact_distribution(
        lambda rng: typical_verify(Tree(np.array([3]), np.array([-1])), p[None, :], rng).next_token
    )
    threshold = typical_threshold(p)
    assert set(law) == {t for t in range(V) if p[t] >= threshold}
    assert set(law) != {t for t in range(V) if p[t] > 0}, "pick a case with an atypical token"


def test_accepts_the_longest_typical_prefix():
    """Candidates are accepted while p(x) > min(eps, delta exp(-H)); the longest run wins."""
    tree = Tree(np.array([0, 1, 2, 3]), np.array([-1, 0, 0, 2]))
    p = np.array([0.05, 0.5, 0.45, 0.0, 0.0])
    rows = np.stack([p, p, np.array([0.1, 0.1, 0.1, 0.6, 0.1]), p])
    verdict = typical_verify(tree, rows, SeededRandomness(0))
    assert verdict.accepted == [2, 3]  # the path 0-2-3 accepts 2 tokens, 0-1 only 1


def test_at_temperature_zero_it_is_greedy():
    """One-hot targets: only the argmax is typical, so it agrees with greedy verification."""
    greedy = toy_model(0, 0.0)
    law = testing.one_cycle_law(typical_verify, greedy, MEDUSA_TREE, (0, 3), 2)
    assert testing.total_variation(law, testing.autoregressive_law(greedy, (0, 3), 2)) < 1e-12


@pytest.mark.parametrize("epsilon, delta", [(0.0, 0.3), (0.09, 0.0), (1.5, 0.3), (0.09, 2.0)])
def test_bad_thresholds_are_refused(epsilon, delta):
    tree = Tree(np.array([3]), np.array([-1]))
    with pytest.raises(InvalidInputError, match="need both in"):
        typical_verify(tree, TARGET((3,))[None, :], SeededRandomness(0), epsilon, delta)
