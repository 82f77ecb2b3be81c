"""Medusa's typical acceptance: a LOSSY verifier, kept only to measure what it changes.

Medusa (Cai et al. 2024, §2.3.1) accepts a candidate token x when the target gives it enough
probability: p(x) > min(epsilon, delta * exp(-H(p))), with H(p) the entropy of the target's
distribution at that position (the paper suggests delta = sqrt(epsilon); the official code
defaults to epsilon = 0.09, delta = 0.3). Along each root-to-leaf path the accepted prefix is
the run of such tokens from the root; the longest prefix wins (ties: the higher product of p).
The token after it is drawn from the target's distribution at the last accepted node, truncated
to the tokens that pass the same test and renormalised.

Nothing here is random except that last draw, and nothing compares p with the drafter's q: the
output law is not the target's. `typical_verify` has the signature of `minieagle.verify.verify`,
so `minieagle.testing.one_cycle_law` computes its exact output law, and `assert_lossless`
fails on it (tests/test_typical_acceptance.py; the Medusa docs page measures the TV). minieagle's
Medusa drafter is verified by the lossless `verify`, never by this.
"""

from __future__ import annotations

import numpy as np

from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness
from minieagle.tree import Tree, leaf_paths
from minieagle.verify import Verdict

EPSILON, DELTA = 0.09, 0.3


def typical_threshold(p: np.ndarray, epsilon: float = EPSILON, delta: float = DELTA) -> float:
    """min(epsilon, delta * exp(-H(p))): the probability a token needs to be "typical"."""
    entropy = -float(np.sum(p[p > 0] * np.log(p[p > 0])))
    return min(epsilon, delta * float(np.exp(-entropy)))


def typical_verify(
    tree: Tree,
    target_probs: np.ndarray,
    rng: Randomness,
    epsilon: float = EPSILON,
    delta: float = DELTA,
) -> Verdict:
    """Medusa's typical acceptance over `tree` (lossy; see the module docstring)."""
    if not (0 < epsilon <= 1 and 0 < delta <= 1):
        raise InvalidInputError(
            f"epsilon={epsilon}, delta={delta}: need both in (0, 1], e.g. the Medusa defaults "
            "epsilon=0.09, delta=0.3"
        )  # delta <= 1 keeps the argmax typical: max p >= exp(-H(p))
    probs = [np.asarray(row, dtype=np.float64) for row in target_probs]  # [N] x [V]
    best, best_likelihood = [], -np.inf
    for path in leaf_paths(tree):
        accepted, likelihood, node = [], 0.0, 0
        for child in path[1:]:
            token = int(tree.tokens[child])
            p = probs[node]
            if token < 0 or not p[token] > typical_threshold(p, epsilon, delta):
                break
            accepted.append(child)
            likelihood += float(np.log(p[token]))
            node = child
        longer = len(accepted) > len(best)
        if longer or (len(accepted) == len(best) and accepted and likelihood > best_likelihood):
            best, best_likelihood = accepted, likelihood
    p = probs[best[-1] if best else 0]
    typical = np.where(p >= typical_threshold(p, epsilon, delta), p, 0.0)  # [V]
    return Verdict(best, int(rng.draw(typical / typical.sum())))
