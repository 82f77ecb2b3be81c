"""The draft tree as data: tokens, parent indices and, per node, the distribution it was drawn from.

Node 0 is the root: the last token the target emitted, not yet in the target's KV cache. Every
other node is a draft token; `parents[i] < i`, so nodes are in topological order and a chain is
`parents = [-1, 0, 1, 2, ...]`. Everything else (depths, the attention mask, position ids,
children lists, root-to-leaf paths) is derived by the pure functions below.

`proposals[i]` is the distribution node i's token was drawn from, *given the siblings drawn before
it*: `None` for a deterministic pick (top-k, a static tree, EAGLE-2/3), or a float64 [V] vector for
a sampled candidate (classic speculative sampling, SpecInfer, EAGLE-1 at T > 0, where sampling
without replacement makes it the draft distribution with earlier siblings removed). The verifier
needs exactly this to stay lossless (see verify.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minieagle.errors import InvalidInputError


@dataclass(frozen=True)
class Tree:
    """tokens int [N]; parents int [N] (parents[0] = -1); proposals: N entries, each None or a
    float64 [V] probability vector (entry 0, the root, is always None)."""

    tokens: np.ndarray
    parents: np.ndarray
    proposals: tuple = ()

    def __post_init__(self) -> None:
        tokens = np.asarray(self.tokens, dtype=np.int64)
        parents = np.asarray(self.parents, dtype=np.int64)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)
        n = len(tokens)
        if n == 0 or tokens.ndim != 1:
            raise InvalidInputError("a tree needs a 1-D token array with at least the root token")
        if parents.shape != tokens.shape:
            raise InvalidInputError(
                f"parents has shape {parents.shape} but tokens has {tokens.shape}; give one "
                "parent index per node"
            )
        if parents[0] != -1:
            raise InvalidInputError(
                f"parents[0]={parents[0]}; the root (node 0) must have parent -1"
            )
        bad = [i for i in range(1, n) if not 0 <= parents[i] < i]
        if bad:
            raise InvalidInputError(
                f"nodes {bad} have parents {parents[bad].tolist()}; every node i > 0 needs a "
                "parent in [0, i) (list nodes parents-first)"
            )
        proposals = tuple(self.proposals) if len(self.proposals) else (None,) * n
        if len(proposals) != n:
            raise InvalidInputError(f"proposals has {len(proposals)} entries for {n} nodes")
        object.__setattr__(self, "proposals", proposals)

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, root: int, drafts, proposals=None) -> Tree:
        """A root followed by a chain of drafts (classic speculative decoding)."""
        n = 1 + len(drafts)
        props = (None, *proposals) if proposals is not None else ()
        return cls(np.asarray([root, *drafts]), np.arange(-1, n - 1), props)


def depths(tree: Tree) -> np.ndarray:
    """int [N]: 0 for the root, parent's depth + 1 otherwise."""
    ### BEGIN SOLUTION eagle1_head
    d = np.zeros(len(tree), dtype=np.int64)
    for i in range(1, len(tree)):
        d[i] = d[tree.parents[i]] + 1
    return d
    ### END SOLUTION


def children(tree: Tree) -> list[list[int]]:
    """children[i]: node i's children in node order (the order siblings are verified in)."""
    out: list[list[int]] = [[] for _ in range(len(tree))]
    for i in range(1, len(tree)):
        out[tree.parents[i]].append(i)
    return out


def ancestor_mask(tree: Tree) -> np.ndarray:
    """bool [N, N]: mask[i, j] iff j is i or an ancestor of i (what node i may attend to)."""
    ### BEGIN SOLUTION eagle1_head
    n = len(tree)
    mask = np.eye(n, dtype=bool)
    for i in range(1, n):
        mask[i] |= mask[tree.parents[i]]  # parents come first: row parents[i] is complete
    return mask
    ### END SOLUTION


def attention_mask(tree: Tree, cached: int) -> np.ndarray:
    """bool [N, cached + N]: every node sees the whole cache, then its ancestors and itself."""
    return np.concatenate([np.ones((len(tree), cached), dtype=bool), ancestor_mask(tree)], axis=1)


def position_ids(tree: Tree, cached: int) -> np.ndarray:
    """int [N]: a node sits at position cached + depth, as if its path were the sequence."""
    ### BEGIN SOLUTION eagle1_head
    return cached + depths(tree)
    ### END SOLUTION


def path_to(tree: Tree, node: int) -> list[int]:
    """Node indices from the root to `node`, inclusive."""
    path = [node]
    while path[-1] != 0:
        path.append(int(tree.parents[path[-1]]))
    return path[::-1]


def leaf_paths(tree: Tree) -> list[list[int]]:
    """Every root-to-leaf path, leaves in node order."""
    has_child = np.zeros(len(tree), dtype=bool)
    has_child[tree.parents[1:]] = True
    return [path_to(tree, leaf) for leaf in range(len(tree)) if not has_child[leaf]]


def from_choices(choices, root: int, tokens_by_path) -> Tree:
    """A static tree from EAGLE's path list of child ranks, e.g. [[0], [1], [0, 0]].

    `tokens_by_path(path)` returns the token for a path (a tuple of ranks). Paths are sorted by
    length then lexicographically, so parents come before children.
    """
    ordered = sorted((tuple(c) for c in choices), key=lambda c: (len(c), c))
    index = {(): 0}
    tokens, parents = [root], [-1]
    for path in ordered:
        if path[:-1] not in index:
            raise InvalidInputError(
                f"choice {list(path)} has no parent {list(path[:-1])} in the list"
            )
        index[path] = len(tokens)
        tokens.append(int(tokens_by_path(path)))
        parents.append(index[path[:-1]])
    return Tree(np.asarray(tokens), np.asarray(parents))
