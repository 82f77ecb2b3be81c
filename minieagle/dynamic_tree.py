"""EAGLE-2's dynamic draft tree as pure functions on arrays (Li et al. 2024b, §4).

The drafter (`minieagle.drafters.eagle2`) runs the head; everything it decides lives here, so it
can be property-tested without a model.

Expansion (§4.1). The *pool* holds every candidate drafted this cycle. A candidate's score is its
*value* in the paper's words, log V_i = sum of log q along its path (q: the draft's probability
of the candidate's token given its parent's path, plain log-softmax of the head logits, no
temperature). The root's top-k tokens enter first (depth 1). Then, `depth` times, the k best
candidates of the newest level (the *frontier*) are fed to the head in one forward and each adds
its own top-k children with score parent + log q. Pool size: k + depth * k^2.

Calibrated scores (`minieagle.calibration`). The value assumes q = the chance the target accepts
the token. Where it is not, each child's term log q can be replaced by log c(q), c a fitted
monotone map into (0, 1] (`add_children(..., log_accept=)`): the score becomes the log of the
estimated chance that the whole path is accepted. Expansion and reranking read only `scores`, so
both follow; `log_q` keeps the raw draft confidence, from which c is refitted.

Reranking (§4.2). The tree verified is the root plus the `total_tokens - 1` best candidates of
the *whole* pool (a shallow candidate that was never expanded can beat a deep one), ties broken
toward the shallower candidate, then listed parents-first.

Pool layout: arrays indexed by pool index i; `parents[i]` is the parent's pool index, or -1 for a
child of the root; parents always precede their children (parents[i] < i).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minieagle.errors import InvalidInputError
from minieagle.sampling import top_k_rows
from minieagle.tree import Tree


@dataclass(frozen=True)
class Pool:
    """Every candidate drafted in one cycle. tokens int [M]; parents int [M] (pool index, -1 =
    the root); scores float64 [M] (the log of the node value V_i: the sum along the path of each
    candidate's log acceptance estimate, log q unless calibrated); log_q float64 [M] (the
    candidate's own draft confidence, its log-probability given its parent, uncalibrated)."""

    tokens: np.ndarray
    parents: np.ndarray
    scores: np.ndarray
    log_q: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)


def empty_pool() -> Pool:
    """A pool with no candidates yet."""
    ints, floats = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return Pool(ints, ints, floats, floats)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 [..., V]: the draft's log q from head logits (no temperature, no top-k/p)."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def top_children(log_q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely tokens of each row: (tokens int [F, k'], their log q [F, k']) with
    k' = min(k, V), most likely first, the lowest token id on ties. log_q: [F, V]."""
    ### BEGIN SOLUTION eagle2_tree
    order = top_k_rows(log_q, k)  # [F, k']
    return order, np.take_along_axis(log_q, order, axis=-1)
    ### END SOLUTION


def top_children_of_logits(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`top_children(log_softmax(logits), k)` without the full log-softmax: the ranking needs
    only the logits, and log q only at the k chosen entries (the same formula, max-shifted
    logit minus the log-sum-exp of its row, computed in the logits' dtype). logits: [F, V]
    host -> (tokens int [F, k'], log q float64 [F, k'])."""
    logits = np.asarray(logits)
    if not np.issubdtype(logits.dtype, np.floating):
        logits = logits.astype(np.float64)
    ### BEGIN SOLUTION eagle2_tree
    order = top_k_rows(logits, k)  # [F, k'], the order log-softmax keeps
    top = logits.max(axis=-1, keepdims=True)  # [F, 1]
    log_sum = np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))  # [F, 1]
    picked = np.take_along_axis(logits, order, axis=-1) - top  # [F, k']
    return order, (picked - log_sum).astype(np.float64)
    ### END SOLUTION


def add_children(
    pool: Pool, expanded, tokens: np.ndarray, log_q: np.ndarray, log_accept=None
) -> Pool:
    """The pool with the children of the candidates `expanded` (pool indices [F], or [-1] for
    the root) appended: tokens / log_q [F, k], row f the children of expanded[f] in rank order.
    A child's score is its parent's score (0 at the root) plus log_accept, its estimated log
    chance of acceptance given its parent's: [F, k], <= 0; None means log_q (EAGLE-2's
    assumption that confidence = acceptance), a `Calibration` gives log c(q)."""
    expanded = np.asarray(expanded, dtype=np.int64)  # [F]
    log_accept = log_q if log_accept is None else np.asarray(log_accept, dtype=np.float64)
    if not tokens.shape == log_q.shape == log_accept.shape or tokens.shape[0] != len(expanded):
        raise InvalidInputError(
            f"tokens {tokens.shape}, log_q {log_q.shape} and log_accept {log_accept.shape} need "
            f"one row per expanded node ({len(expanded)}) and one column per child"
        )
    if (log_accept > 0).any():
        # A term above 0 would let a child outscore its parent: rerank's top set could then
        # hold a child without its parent (see rerank).
        raise InvalidInputError(
            f"log_accept holds {log_accept.max()} > 0, an acceptance chance above 1; pass log "
            "probabilities (<= 0), e.g. Calibration.log_acceptance(log_q)"
        )
    ### BEGIN SOLUTION eagle2_tree
    parent_scores = np.asarray([pool.scores[e] if e >= 0 else 0.0 for e in expanded])  # [F]
    k = tokens.shape[1]
    return Pool(
        np.concatenate([pool.tokens, tokens.reshape(-1)]),
        np.concatenate([pool.parents, np.repeat(expanded, k)]),
        np.concatenate([pool.scores, (parent_scores[:, None] + log_accept).reshape(-1)]),
        np.concatenate([pool.log_q, log_q.reshape(-1)]),
    )
    ### END SOLUTION


def next_frontier(pool: Pool, start: int, k: int) -> np.ndarray:
    """Pool indices of the k best-scored candidates among pool[start:] (the newest level), best
    first, the lower pool index on ties: the nodes the next head forward expands."""
    ### BEGIN SOLUTION eagle2_tree
    scores = pool.scores[start:]
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]  # sort by -score, then index
    return start + order
    ### END SOLUTION


def pool_depths(parents: np.ndarray) -> np.ndarray:
    """int [M]: 1 for a child of the root, parent's depth + 1 otherwise (parents precede).
    One vectorised pass per level: after pass j every node at depth <= j is right."""
    parents = np.asarray(parents, dtype=np.int64)
    has_parent = parents >= 0
    safe = np.where(has_parent, parents, 0)
    depth = np.ones(len(parents), dtype=np.int64)
    for _ in range(len(parents)):
        deeper = np.where(has_parent, depth[safe] + 1, 1)
        if (deeper == depth).all():
            break
        depth = deeper
    return depth


def rerank(scores: np.ndarray, parents: np.ndarray, count: int) -> np.ndarray:
    """Pool indices of the `count` best candidates, parents-first (by depth, then pool index).

    Ranking key: (-score, depth, pool index): the highest value first, the shallower node on a
    tie (the paper's rule), then the earlier one, so the result is deterministic. (In the
    drafter's pools, built level by level, the pool index alone already orders by depth; the
    depth key keeps the rule true for any pool.)

    Why the chosen set is a tree (every chosen node's parent is chosen): a child's score is its
    parent's plus log q <= 0 (or log c(q) <= 0 for a calibration c <= 1), and floating-point
    addition of a non-positive number never rounds above the parent's score, so child score <=
    parent score; on equality the parent is shallower. Hence every parent ranks strictly
    before each of its children, and the top `count` of any ranking in which parents precede
    children is closed under taking parents.
    Only expanded nodes have children in the pool, and an expanded node is itself in the pool.

    The argument needs scores that never increase along a path. If they do (NaN logits, a
    caller's hand-made pool), the walk below still returns a connected set of the requested
    size: it takes candidates in rank order together with their missing ancestors, skipping one
    whose ancestors would overflow `count`, and sweeps again until `count` nodes are taken.
    Returns int [min(count, M)].
    """
    scores = np.asarray(scores, dtype=np.float64)
    parents = np.asarray(parents, dtype=np.int64)
    if np.isnan(scores).any():
        raise InvalidInputError("the pool has NaN scores; the head produced NaN logits")
    bad = [i for i, p in enumerate(parents) if not -1 <= p < i]
    if bad:
        raise InvalidInputError(
            f"pool candidates {bad} do not list their parent earlier (-1 = root)"
        )
    ### BEGIN SOLUTION eagle2_tree
    count = min(int(count), len(scores))
    depth = pool_depths(parents)
    ranked = np.lexsort((np.arange(len(scores)), depth, -scores))  # best first
    chosen = np.zeros(len(scores), dtype=bool)
    top = ranked[:count]
    chosen[top] = True
    if np.all((parents[top] < 0) | chosen[np.maximum(parents[top], 0)]):
        return top[np.lexsort((top, depth[top]))]  # the argument above: already a tree
    chosen[:] = False
    taken = 0
    while taken < count:
        before = taken
        for node in ranked:
            if taken == count:
                break
            missing = []  # node and its unchosen ancestors, deepest first
            walk = node
            while walk >= 0 and not chosen[walk]:
                missing.append(walk)
                walk = parents[walk]
            if missing and taken + len(missing) <= count:
                chosen[missing] = True
                taken += len(missing)
        if taken == before:  # cannot happen: a node whose parent is chosen always fits
            raise AssertionError("rerank made no progress")
    selected = np.flatnonzero(chosen)
    return selected[np.lexsort((selected, depth[selected]))]
    ### END SOLUTION


def build_tree(root: int, pool: Pool, selected: np.ndarray, proposals=None) -> Tree:
    """The draft tree: node 0 = root, node j + 1 = pool candidate selected[j] (parents-first).
    proposals: None when every candidate is a deterministic pick (the one-hot rule,
    docs/lossless.md §2), else one entry per pool candidate, the distribution it was drawn from
    (`Tree.proposals`)."""
    selected = np.asarray(selected, dtype=np.int64)
    ### BEGIN SOLUTION eagle2_tree
    node_of = np.full(len(pool) + 1, -1, dtype=np.int64)  # pool index + 1 -> tree node
    node_of[0] = 0  # the root (pool parent -1)
    node_of[selected + 1] = np.arange(1, len(selected) + 1)
    parents = node_of[pool.parents[selected] + 1]
    ### END SOLUTION
    if (parents < 0).any():
        raise InvalidInputError("a selected candidate's parent was not selected; use rerank()")
    ### BEGIN SOLUTION eagle2_tree
    tokens = np.concatenate([[root], pool.tokens[selected]])
    chosen = () if proposals is None else (None, *(proposals[i] for i in selected))
    return Tree(tokens, np.concatenate([[-1], parents]), chosen)
    ### END SOLUTION


def calibration_table(
    records, bins=(0.0, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0)
) -> list[tuple[tuple[float, float], int, float, float]]:
    """EAGLE-2's calibration check (§3): is the draft confidence q of a reached node close to
    the rate at which the target accepts it?

    records: (confidence, accepted) pairs, one per verified node whose parent was accepted.
    bins: increasing edges in [0, 1]; a bin is [lo, hi), the last one [lo, hi].
    Returns one row per bin: ((lo, hi), count, mean confidence, acceptance rate), NaN means
    for an empty bin.
    """
    edges = np.asarray(bins, dtype=np.float64)
    if len(edges) < 2 or (np.diff(edges) <= 0).any() or edges[0] < 0 or edges[-1] > 1:
        raise InvalidInputError(
            f"bins={tuple(bins)} must be at least two increasing edges in [0, 1], e.g. (0, 0.5, 1)"
        )
    data = np.asarray([(float(c), float(a)) for c, a in records], dtype=np.float64)
    data = data.reshape(-1, 2)  # [R, (confidence, accepted)]
    which = np.searchsorted(edges, data[:, 0], side="right") - 1
    which[data[:, 0] == edges[-1]] = len(edges) - 2  # the last bin is closed
    table = []
    for b in range(len(edges) - 1):
        rows = data[which == b]
        mean = (rows.mean(axis=0) if len(rows) else np.full(2, np.nan)).tolist()
        table.append(((float(edges[b]), float(edges[b + 1])), len(rows), mean[0], mean[1]))
    return table
