"""Lossless verification of a draft tree: one rule for chains and trees, greedy and sampled.

At each node, starting from the root, the target's processed distribution p is known. The
node's children are tried in order. A child x drawn from proposal q (the distribution it was
sampled from, given the siblings before it) is accepted with probability min(1, p(x) / q(x)); on
rejection p becomes the residual norm(max(0, p - q)) and the next child is tried against it. If a
child is accepted, the walk descends into it; if none is, the next token is drawn from the current
(residual) p, and if the node is a leaf that is just the target's distribution there.

This is recursive rejection sampling (Leviathan et al. 2023 for a chain; SpecInfer, Miao et al.
2024, for sampled trees). Its output law equals p at every step whatever q is, provided each
candidate was really drawn from the q it carries (see docs/lossless.md for the proof sketch).

A deterministic candidate (top-k or a static tree: EAGLE-2/3) has a one-hot proposal q = e_x, so
the rule becomes "accept with p(x); on rejection zero p(x) and renormalise": EAGLE's sibling rule.
At temperature 0, p is one-hot at the argmax, every coin is 0 or 1, and the rule reduces to greedy
verification: follow the child that equals the target's argmax, then emit the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness
from minieagle.tree import Tree, children


@dataclass(frozen=True)
class Verdict:
    """accepted: non-root nodes accepted, root to leaf; next_token: the token the target adds
    (the correction after a rejection, or the bonus token after the last accepted node)."""

    accepted: list[int]
    next_token: int


def residual(p: np.ndarray, q: np.ndarray | None, token: int) -> np.ndarray:
    """norm(max(0, p - q)): what p becomes once a candidate drawn from q was rejected.

    For a deterministic candidate (q = None, i.e. one-hot at `token`) this zeroes p(token).
    If the residual has no mass the rejection had probability 0 (it cannot happen exactly; it can
    only appear through rounding), and p is returned unchanged.
    """
    ### BEGIN SOLUTION verifier
    if q is None:
        r = p.copy()
        r[token] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p
    ### END SOLUTION


def acceptance_probability(p: np.ndarray, q: np.ndarray | None, token: int) -> float:
    """min(1, p(x) / q(x)); q = None means a deterministic candidate (q(x) = 1)."""
    if q is not None and q[token] <= 0:
        raise InvalidInputError(
            f"candidate token {token} has proposal probability q={q[token]}; a sampled "
            "candidate must come from the q it carries (pass q=None for deterministic picks)"
        )
    ### BEGIN SOLUTION verifier
    if q is None:
        return float(min(1.0, p[token]))
    return float(min(1.0, p[token] / q[token]))
    ### END SOLUTION


def verify(tree: Tree, target_probs: np.ndarray, rng: Randomness) -> Verdict:
    """Walk the tree from the root with recursive rejection sampling.

    tree: the draft tree (node 0 = root). target_probs: float64 [N, V], row i the processed
    target distribution after node i (`sampling.target_distribution` of the target's logits at
    node i); any sequence of such rows works, e.g. one computing rows on demand. Tokens < 0
    are padding and are skipped. Returns the `Verdict`.
    """
    if len(target_probs) != len(tree):
        raise InvalidInputError(
            f"target_probs has {len(target_probs)} rows for {len(tree)} nodes; "
            "pass the target distribution at every node"
        )
    ### BEGIN SOLUTION verifier
    kids = children(tree)
    node, accepted = 0, []
    while True:
        p = np.asarray(target_probs[node], dtype=np.float64)
        for child in kids[node]:
            token = int(tree.tokens[child])
            if token < 0:
                continue
            q = tree.proposals[child]
            if rng.coin(acceptance_probability(p, q, token)):
                accepted.append(child)
                node = child
                break
            p = residual(p, q, token)
        else:
            return Verdict(accepted, int(rng.draw(p)))
    ### END SOLUTION
