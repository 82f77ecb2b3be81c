"""Exact output distributions of randomized code, and reusable losslessness checks.

`exact_distribution(fn)` runs `fn(rng)` once per branch of its random choices, with an `rng` that
answers `coin` and `draw` by walking every outcome with its probability, and returns the law of
what `fn` returns. Nothing is sampled: for a verifier built on the `Randomness` interface this is
the exact distribution of the real code's output, to float64 rounding.

The checks below take any implementation with the documented signature, so a course grader can
point them at a student's verifier:

    verify_fn(tree: Tree, target_probs: float64 [N, V], rng: Randomness) -> Verdict
    (Verdict has .accepted: list of non-root node indices, .next_token: int)

`one_cycle_law` / `speculative_law` give the exact law of the tokens one cycle / repeated cycles
emit, `autoregressive_law` the target's; `assert_lossless` (one cycle) and
`assert_lossless_multi_cycle` compare them. `assert_efficient` grades what losslessness cannot:
the exact chance of accepting and expected number of accepted drafts, against a reference.
Trees come from a `make_tree(context, rng)` drafter:
`make_topk_tree` (deterministic picks, EAGLE-2/3) and `make_sampled_tree` (with replacement,
SpecInfer; without, EAGLE-1) build one from any draft distribution, drawing through the enumerated
rng so the drafting randomness is part of the law. `tv_bound` is the non-flaky threshold for a
Monte Carlo test of the real sampler.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

import numpy as np

from minieagle.errors import InvalidInputError
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
            raise InvalidInputError(f"coin probability {p_true} is outside [0, 1]")
        return self._next([(True, p_true), (False, 1.0 - p_true)])

    def draw(self, probs) -> int:
        probs = np.asarray(probs, dtype=np.float64)
        if abs(probs.sum() - 1.0) > 1e-9 or (probs < 0).any():
            raise InvalidInputError(
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
        emitted = _cycle(verify_fn, next_dist, make_tree, context, rng)
        while len(emitted) < k:
            emitted.append(int(rng.draw(next_dist(context + tuple(emitted)))))
        return tuple(emitted[:k])

    return exact_distribution(run)


def speculative_law(
    verify_fn: Callable, next_dist: Callable, make_tree: Callable, context: tuple, k: int
) -> dict[tuple, float]:
    """Exact law of the first k tokens when speculative cycles repeat until k are emitted.

    Each cycle drafts a tree from the context so far (its root is the last token), verifies it and
    appends what was accepted plus the next token; nothing is sampled outside the cycles. This is
    the multi-cycle check: a verifier that leaks information from one cycle into the next (or a
    drafter that is told the wrong context) shows up here and not in `one_cycle_law`.
    """

    def run(rng):
        emitted: list[int] = []
        while len(emitted) < k:
            emitted += _cycle(verify_fn, next_dist, make_tree, context + tuple(emitted), rng)
        return tuple(emitted[:k])

    return exact_distribution(run)


def _cycle(verify_fn, next_dist, make_tree, context: tuple, rng) -> list[int]:
    """One draft-verify cycle: the tokens it emits (accepted drafts, then the next token)."""
    tree = make_tree(context, rng)
    if int(tree.tokens[0]) != context[-1]:
        raise InvalidInputError(
            f"make_tree returned root token {int(tree.tokens[0])} for a context ending in "
            f"{context[-1]}; the root (node 0) must be the last token of the context"
        )
    target_probs = _target_rows(tree, context, next_dist)  # [N, V]
    verdict = verify_fn(tree, target_probs, rng)
    return [int(tree.tokens[n]) for n in verdict.accepted] + [int(verdict.next_token)]


def _target_rows(tree: Tree, context: tuple, next_dist: Callable) -> np.ndarray:
    """float64 [N, V]: row i = next_dist(context + path to node i). A padding slot (token < 0)
    and everything under it has no sequence; it gets its parent's row, which no verifier reads."""
    rows: list[np.ndarray] = []
    padded = [False] * len(tree)
    for node in range(len(tree)):
        parent = int(tree.parents[node])
        padded[node] = node > 0 and (tree.tokens[node] < 0 or padded[parent])
        if padded[node]:
            rows.append(rows[parent])
        else:
            sequence = _path_context(context, tree.tokens, tree.parents, node)
            rows.append(np.asarray(next_dist(sequence), dtype=np.float64))
    return np.stack(rows)


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
    return _assert_same_law(got, autoregressive_law(next_dist, context, k), tol)


def assert_lossless_multi_cycle(
    verify_fn: Callable,
    next_dist: Callable,
    make_tree: Callable,
    context: tuple,
    k: int,
    tol: float = 1e-12,
) -> float:
    """`assert_lossless` for repeated cycles (`speculative_law`): the k tokens of as many cycles
    as it takes must follow the target's autoregressive law. Returns the TV distance."""
    got = speculative_law(verify_fn, next_dist, make_tree, context, k)
    return _assert_same_law(got, autoregressive_law(next_dist, context, k), tol)


def accepted_count_law(
    verify_fn: Callable, next_dist: Callable, make_tree: Callable, context: tuple
) -> dict[int, float]:
    """Exact law of how many drafts one cycle accepts: {count: probability}, drafting included."""

    def run(rng):
        tree = make_tree(context, rng)
        return len(verify_fn(tree, _target_rows(tree, context, next_dist), rng).accepted)

    return exact_distribution(run)


def assert_efficient(
    verify_fn: Callable,
    next_dist: Callable,
    make_tree: Callable,
    context: tuple,
    reference_fn: Callable,
    tol: float = 1e-12,
) -> tuple[float, float]:
    """Raise AssertionError if `verify_fn` accepts less than `reference_fn` on the same trees.

    Losslessness cannot see a verifier that accepts too little: one that never accepts a draft
    and draws every token from p is lossless and useless. This compares the exact chance of
    accepting at least one draft, and the exact expected number of accepted drafts, of one cycle
    with the reference's (recursive rejection sampling: `minieagle.verify.verify`). Returns
    (P(accept >= 1), E[accepted]) of `verify_fn`.
    """
    got = accepted_count_law(verify_fn, next_dist, make_tree, context)
    want = accepted_count_law(reference_fn, next_dist, make_tree, context)
    root, want_root = 1.0 - got.get(0, 0.0), 1.0 - want.get(0, 0.0)
    mean = sum(n * p for n, p in got.items())
    want_mean = sum(n * p for n, p in want.items())
    if root < want_root - tol or mean < want_mean - tol:
        raise AssertionError(
            f"accepts too little: P(accept at the root) = {root:.6f} (reference {want_root:.6f}), "
            f"expected accepted drafts {mean:.6f} (reference {want_mean:.6f})"
            + ("; it accepts nothing" if mean == 0 else "")
        )
    return root, mean


def _assert_same_law(got: dict, want: dict, tol: float) -> float:
    tv = total_variation(got, want)
    if tv > tol:
        worst = max(set(got) | set(want), key=lambda s: abs(got.get(s, 0) - want.get(s, 0)))
        raise AssertionError(
            f"not lossless: total variation {tv:.3e} > {tol:.0e}; e.g. tokens {worst} have "
            f"probability {got.get(worst, 0.0):.6f} but the target gives {want.get(worst, 0.0):.6f}"
        )
    return tv


# ---------------------------------------------------------------------------- reusable drafters


def make_topk_tree(draft_dist: Callable, shape) -> Callable:
    """A drafter of deterministic trees (EAGLE-2/3 style): each node's children are the top-b
    tokens of draft_dist(context + path) (lowest id on ties), with proposal None.

    draft_dist(context) -> float64 [V]. shape: branching factors per depth, e.g. [2, 1] (the root
    gets 2 children, each of those 1), or a parents array starting with -1, e.g. [-1, 0, 0, 1].
    A node asking for more children than V gets padding slots (token -1).
    Returns make_tree(context, rng) -> Tree for `one_cycle_law` and friends.
    """
    parents = _parents_from_shape(shape)

    def make_tree(context: tuple, rng) -> Tree:
        tokens = [context[-1]]
        for node in range(1, len(parents)):
            parent = int(parents[node])
            rank = sum(1 for j in range(1, node) if parents[j] == parent)
            if tokens[parent] < 0:
                tokens.append(-1)
                continue
            q = np.asarray(draft_dist(_path_context(context, tokens, parents, parent)))
            order = np.argsort(-q, kind="stable")  # [V] most probable first, lowest id on ties
            tokens.append(int(order[rank]) if rank < len(order) else -1)
        return Tree(np.asarray(tokens), parents)

    return make_tree


def make_sampled_tree(draft_dist: Callable, shape, without_replacement: bool) -> Callable:
    """A drafter of sampled trees: each node's children are drawn with `rng.draw` from
    q = draft_dist(context + path), so the drafting randomness is enumerated with the rest.

    without_replacement=False: siblings are i.i.d. from q (SpecInfer); each carries q.
    without_replacement=True: sibling j is drawn from q with the tokens of siblings 1..j-1 zeroed
    and renormalised (EAGLE-1 at T > 0), and carries that conditional distribution. When no mass
    is left the slot becomes padding (token -1, proposal None), as do its descendants.
    shape: as in `make_topk_tree`. Returns make_tree(context, rng) -> Tree.
    """
    parents = _parents_from_shape(shape)

    def make_tree(context: tuple, rng) -> Tree:
        tokens, proposals = [context[-1]], [None]
        for node in range(1, len(parents)):
            parent = int(parents[node])
            if tokens[parent] < 0:
                tokens.append(-1)
                proposals.append(None)
                continue
            q = np.array(draft_dist(_path_context(context, tokens, parents, parent)), np.float64)
            if without_replacement:
                for sibling in range(1, node):
                    if parents[sibling] == parent and tokens[sibling] >= 0:
                        q[tokens[sibling]] = 0.0
                if q.sum() <= 0:
                    tokens.append(-1)
                    proposals.append(None)
                    continue
                q /= q.sum()
            tokens.append(int(rng.draw(q)))
            proposals.append(q)
        return Tree(np.asarray(tokens), parents, tuple(proposals))

    return make_tree


def _parents_from_shape(shape) -> np.ndarray:
    """int [N]: a parents array given as is (leading -1), or built breadth-first from branching
    factors per depth."""
    shape = [int(s) for s in shape]
    if shape and shape[0] == -1:
        parents = np.asarray(shape, dtype=np.int64)
        Tree(np.zeros(len(parents), dtype=np.int64), parents)  # validates the parents
        return parents
    if any(b < 1 for b in shape):
        raise InvalidInputError(
            f"shape={shape} has a branching factor below 1; give children per node per depth, "
            "e.g. [2, 1], or a parents array starting with -1"
        )
    parents, frontier = [-1], [0]
    for branching in shape:
        grown = []
        for node in frontier:
            for _ in range(branching):
                parents.append(node)
                grown.append(len(parents) - 1)
        frontier = grown
    return np.asarray(parents, dtype=np.int64)


def _path_context(context: tuple, tokens, parents, node: int) -> tuple:
    """The sequence the target has seen at `node`: the context (ending in the root), then the
    drafted tokens from the root's child down to `node`."""
    path = []
    while node != 0:
        path.append(int(tokens[node]))
        node = int(parents[node])
    return context + tuple(path[::-1])


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


# ---------------------------------------------------------------------------- the real decode loop


def generation_law(
    params, config, prompt, make_drafter: Callable, sampling, k: int
) -> tuple[dict[tuple, float], set[int]]:
    """Exact law of the first k tokens `minieagle.generate.generate` emits for `prompt` with a
    fresh drafter from `make_drafter()` (None: vanilla), every drafting and verification choice
    enumerated. Returns (law {tokens: probability}, the set of per-cycle accept counts seen, so
    a test can check that acceptances and rejections both happened)."""
    from minieagle.generate import generate

    def run(rng):
        result = generate(
            params,
            config,
            prompt,
            drafter=make_drafter(),
            sampling=sampling,
            rng=rng,
            max_new_tokens=k,
            stop_at_eos=False,
        )
        return tuple(result.tokens), tuple(result.accepted_per_cycle)

    law: dict[tuple, float] = defaultdict(float)
    accepts: set[int] = set()
    for (tokens, cycles), prob in exact_distribution(run).items():
        law[tokens] += prob
        accepts.update(cycles)
    return dict(law), accepts


def target_law(params, config, prompt, sampling, k: int) -> dict[tuple, float]:
    """The target's own law of its next k tokens: full, uncached forwards and the same logits
    processing (`sampling.target_distribution`), the oracle for `generation_law`."""
    from minieagle import model
    from minieagle.backend import to_device
    from minieagle.sampling import target_distribution

    embed = params["model.embed_tokens.weight"]

    def next_dist(context):
        logits, _, _ = model.forward(params, config, to_device(list(context), embed))
        return target_distribution(logits[-1], sampling)

    return autoregressive_law(next_dist, tuple(prompt), k)
