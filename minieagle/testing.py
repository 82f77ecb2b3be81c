"""Exact output distributions of randomized code, and reusable losslessness checks.

`exact_distribution(fn)` runs `fn(rng)` once per branch of its random choices, with an `rng` that
answers `coin` and `draw` by walking every outcome with its probability, and returns the law of
what `fn` returns. Nothing is sampled: for a verifier built on the `Randomness` interface this is
the exact distribution of the real code's output, to float64 rounding.

The checks below take any implementation with the documented signature, so a course grader can
point them at a student's verifier:

    verify_fn(tree: Tree, target_probs: float64 [N, V], rng: Randomness) -> Verdict
    (Verdict has .accepted: list of non-root node indices, .next_token: int)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

import numpy as np

from minieagle.tree import Tree

_PRUNE = 0.0  # branches of probability exactly 0 are never walked


class _Branch(Exception):
    """Raised at the first unexplored random choice: the options and their probabilities."""

    def __init__(self, options):
        self.options = options


class _ReplayRandomness:
    """Answers choices from a recorded prefix; at the first new choice raises `_Branch`."""

    def __init__(self, prefix):
        self.prefix, self.used = prefix, 0

    def _next(self, options):
        if self.used < len(self.prefix):
            choice = self.prefix[self.used]
            self.used += 1
            return choice
        raise _Branch(options)

    def coin(self, p_true: float) -> bool:
        p_true = float(p_true)
        if not 0.0 <= p_true <= 1.0:
            raise ValueError(f"coin probability {p_true} is outside [0, 1]")
        return self._next([(True, p_true), (False, 1.0 - p_true)])

    def draw(self, probs) -> int:
        probs = np.asarray(probs, dtype=np.float64)
        if abs(probs.sum() - 1.0) > 1e-9 or (probs < 0).any():
            raise ValueError(
                f"draw got a vector summing to {probs.sum()} (or negative); "
                "pass a normalised probability vector"
            )
        return self._next([(int(i), float(probs[i])) for i in np.flatnonzero(probs > _PRUNE)])


def exact_distribution(fn: Callable, max_branches: int = 200_000) -> dict[Hashable, float]:
    """The exact law of `fn(rng)`: {outcome: probability}, over every branch of coin/draw calls.

    `fn` must be deterministic given the answers of its rng, and its outcome hashable.
    """
    law: dict[Hashable, float] = defaultdict(float)
    stack = [((), 1.0)]
    walked = 0
    while stack:
        prefix, prob = stack.pop()
        walked += 1
        if walked > max_branches:
            raise RuntimeError(f"more than {max_branches} branches; shrink the case")
        try:
            outcome = fn(_ReplayRandomness(prefix))
        except _Branch as branch:
            for choice, p in branch.options:
                if p > _PRUNE:
                    stack.append(((*prefix, choice), prob * p))
            continue
        law[outcome] += prob
    return dict(law)


def total_variation(a: dict, b: dict) -> float:
    """½ Σ |a(x) − b(x)| over the union of supports."""
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


# ---------------------------------------------------------------------------- sequence laws


def autoregressive_law(next_dist: Callable, context: tuple, k: int) -> dict[tuple, float]:
    """Exact law of the next k tokens when each is drawn from next_dist(context) in turn."""
    law = {(): 1.0}
    for _ in range(k):
        grown = {}
        for seq, prob in law.items():
            p = next_dist(context + seq)
            for token in np.flatnonzero(p > 0):
                grown[seq + (int(token),)] = prob * float(p[token])
        law = grown
    return law


def one_cycle_law(
    verify_fn: Callable, next_dist: Callable, make_tree: Callable, context: tuple, k: int
) -> dict[tuple, float]:
    """Exact law of the first k tokens emitted when one speculative cycle runs and, if it emits
    fewer than k, plain sampling from next_dist continues.

    next_dist(context) -> float64 [V]: the (processed) target distribution after a context.
    make_tree(context, rng) -> Tree: drafts a tree whose root is context[-1] (it may use rng to
    sample candidates; that randomness is enumerated too).
    """

    def run(rng):
        tree = make_tree(context, rng)
        paths = [_node_context(tree, context, node) for node in range(len(tree))]
        target_probs = np.stack([next_dist(c) for c in paths])
        verdict = verify_fn(tree, target_probs, rng)
        emitted = [int(tree.tokens[n]) for n in verdict.accepted] + [int(verdict.next_token)]
        while len(emitted) < k:
            emitted.append(int(rng.draw(next_dist(context + tuple(emitted)))))
        return tuple(emitted[:k])

    return exact_distribution(run)


def _node_context(tree: Tree, context: tuple, node: int) -> tuple:
    """The sequence the target has seen at `node`: the context (ending in the root) + the path."""
    tokens, path = [], node
    while path != 0:
        tokens.append(int(tree.tokens[path]))
        path = int(tree.parents[path])
    return context + tuple(tokens[::-1])


def assert_lossless(
    verify_fn: Callable,
    next_dist: Callable,
    make_tree: Callable,
    context: tuple,
    k: int,
    tol: float = 1e-12,
) -> float:
    """Raise AssertionError unless one cycle of `verify_fn` on `make_tree`'s trees emits exactly
    the target's autoregressive law of k tokens. Returns the total-variation distance."""
    got = one_cycle_law(verify_fn, next_dist, make_tree, context, k)
    want = autoregressive_law(next_dist, context, k)
    tv = total_variation(got, want)
    if tv > tol:
        worst = max(set(got) | set(want), key=lambda s: abs(got.get(s, 0) - want.get(s, 0)))
        raise AssertionError(
            f"not lossless: total variation {tv:.3e} > {tol:.0e}; e.g. tokens {worst} have "
            f"probability {got.get(worst, 0.0):.6f} but the target gives {want.get(worst, 0.0):.6f}"
        )
    return tv


def tv_bound(vocab: int, samples: int, delta: float = 1e-9) -> float:
    """A bound that the empirical TV distance of `samples` i.i.d. draws over `vocab` categories
    exceeds with probability at most delta: E[TV] <= ½ sqrt(V / N) (Cauchy-Schwarz), and TV moves
    by at most 1/N per sample, so McDiarmid adds sqrt(ln(1/delta) / (2N))."""
    return 0.5 * np.sqrt(vocab / samples) + np.sqrt(np.log(1.0 / delta) / (2.0 * samples))


def reference_greedy_verify(tree: Tree, target_argmax) -> tuple[list[int], int]:
    """Greedy verification written the obvious way, as an oracle: follow the first child whose
    token equals the target's argmax at its parent; then emit the argmax at the last node."""
    node, accepted = 0, []
    while True:
        for child in range(1, len(tree)):
            if tree.parents[child] == node and tree.tokens[child] == target_argmax[node]:
                accepted.append(child)
                node = child
                break
        else:
            return accepted, int(target_argmax[node])
