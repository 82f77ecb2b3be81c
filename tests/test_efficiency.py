"""`testing.assert_efficient`: a grader for what losslessness cannot see.

A verifier that never accepts, or one that accepts too rarely, can be exactly lossless; these
checks compare the exact acceptance of one cycle with the reference verifier's. Each negative
control below is lossless (shown with `assert_lossless`) and must still fail the efficiency check.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from minieagle import testing
from minieagle.sampling import SamplingParams, target_distribution
from minieagle.tree import children
from minieagle.verify import Verdict, residual, verify

V = 5


def toy_model(seed, sampling):
    @cache
    def next_dist(context):
        logits = 2 * np.random.default_rng((seed, *context)).standard_normal(V)
        return target_distribution(logits, sampling)

    return next_dist


TARGET = toy_model(0, SamplingParams(temperature=1.0))
DRAFT = toy_model(1, SamplingParams(temperature=1.0))
DRAFTERS = {
    "top-k tree": testing.make_topk_tree(DRAFT, [2, 1]),
    "sampled chain": testing.make_sampled_tree(DRAFT, [1, 1], without_replacement=False),
    "sampled tree": testing.make_sampled_tree(DRAFT, [2], without_replacement=True),
}


def never_accepts(tree, target_probs, rng):
    """Lossless and useless: every token comes from the target at the root."""
    return Verdict([], int(rng.draw(np.asarray(target_probs[0], dtype=np.float64))))


def one_hot_rule_for_everything(tree, target_probs, rng):
    """Treats sampled candidates as deterministic (accept with p(x), zero p(x) on rejection):
    lossless (any candidate fixed before the coins may be checked this way), but it accepts a
    sampled candidate with p(x) instead of min(1, p(x) / q(x))."""
    kids, node, accepted = children(tree), 0, []
    while True:
        p = np.asarray(target_probs[node], dtype=np.float64)
        for child in kids[node]:
            token = int(tree.tokens[child])
            if rng.coin(min(1.0, p[token])):
                accepted.append(child)
                node = child
                break
            p = residual(p, None, token)
        else:
            return Verdict(accepted, int(rng.draw(p)))


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_the_reference_is_as_efficient_as_itself(drafter):
    root, mean = testing.assert_efficient(verify, TARGET, DRAFTERS[drafter], (0, 3), verify)
    assert 0 < root <= 1 and mean >= root


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_a_never_accepting_verifier_is_lossless_but_fails(drafter):
    testing.assert_lossless(never_accepts, TARGET, DRAFTERS[drafter], (0, 3), k=2)
    with pytest.raises(AssertionError, match="accepts nothing"):
        testing.assert_efficient(never_accepts, TARGET, DRAFTERS[drafter], (0, 3), verify)


@pytest.mark.parametrize("drafter", ["sampled chain", "sampled tree"])
def test_an_over_rejecting_verifier_is_lossless_but_fails(drafter):
    testing.assert_lossless(one_hot_rule_for_everything, TARGET, DRAFTERS[drafter], (0, 3), k=2)
    with pytest.raises(AssertionError, match="accepts too little"):
        testing.assert_efficient(
            one_hot_rule_for_everything, TARGET, DRAFTERS[drafter], (0, 3), verify
        )


def test_the_one_hot_rule_is_optimal_for_deterministic_trees():
    """On top-k trees q is one-hot, so the two rules coincide: no false alarm."""
    testing.assert_efficient(
        one_hot_rule_for_everything, TARGET, DRAFTERS["top-k tree"], (0, 3), verify
    )


def test_accepted_count_law_of_a_known_case():
    """A root with one deterministic child accepted with p(x): the law is {1: p(x), 0: 1 - p(x)}."""
    make_tree = testing.make_topk_tree(DRAFT, [1])
    law = testing.accepted_count_law(verify, TARGET, make_tree, (2,))
    x = int(np.argmax(DRAFT((2,))))
    assert law[1] == pytest.approx(TARGET((2,))[x], abs=1e-15)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-15)
