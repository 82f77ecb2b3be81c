"""EAGLE-2 drafting: the EAGLE-1 head (same weights) grows a context-aware dynamic tree.

EAGLE-2 (Li et al. 2024b) keeps EAGLE-1's head and verification and changes only which tree is
drafted. The draft is well calibrated (§3: its confidence q roughly equals the chance the target
accepts the token), so a node's chance of being accepted is about its *value*, the product of q
along its path. Each cycle (`propose`):

1. Catch-up: one head forward over the newly committed real pairs (shared with EAGLE-1,
   `HeadDrafter`); its last output gives the root's draft log q (plain log-softmax, no
   temperature, also when sampling).
2. Expansion (§4.1): the root's top_k tokens are the depth-1 candidates. Then `depth` times,
   the top_k best candidates of the newest level are fed to the head in ONE forward (tree mask:
   committed cache + ancestors + self; one position per level) and each adds its own top_k
   children, scored parent score + log q.
3. Reranking (§4.2): the `total_tokens - 1` best candidates of the whole pool (ties: the
   shallower node) under the root form the tree (`minieagle.dynamic_tree`).

Every pick is deterministic, so the tree carries no proposals: the verifier uses the q = 1 rule,
lossless at any temperature (facts sheet §2.5). Head forwards per cycle: 1 + depth (fewer near
the end of the context, where `max_nodes` leaves no room for the deeper levels).

Hyperparameters, named and counted as in the official code and the serving engines:
  depth         expansion steps (head forwards after the catch-up); the tree is up to depth + 1
                drafts deep (the paper's "tree depth 6" is depth=5).
  top_k         candidates expanded per level, and children taken per expanded candidate.
  total_tokens  nodes verified per cycle INCLUDING the root: total_tokens - 1 drafts.
Defaults: depth=5 (the paper's tree depth 6), top_k=8 (the official draft class's default; our
2048-token vocabulary is much smaller than LLaMA's, so the top 8 hold most of the draft's mass),
total_tokens=26, the size of EAGLE-1's default tree: on a CPU, unlike a GPU, verifying more
tokens is not free (the shipped 12-layer target, one thread: 26 tree tokens cost 3.25 times one
token, 48 cost 4.72 times; `minieagle bench --suite model`), and at equal size
`minieagle bench` compares the two trees' shapes alone.
"""

from __future__ import annotations

import numpy as np

from minieagle.config import LlamaConfig
from minieagle.drafters.head_drafter import HeadDrafter
from minieagle.dynamic_tree import (
    add_children,
    build_tree,
    empty_pool,
    log_softmax,
    next_frontier,
    rerank,
    top_children,
)
from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness
from minieagle.tree import Tree, children

DEFAULT_DEPTH = 5
DEFAULT_TOP_K = 8
DEFAULT_TOTAL_TOKENS = 26
EAGLE2_DEFAULTS = {
    "depth": DEFAULT_DEPTH,
    "top_k": DEFAULT_TOP_K,
    "total_tokens": DEFAULT_TOTAL_TOKENS,
}
# EAGLE-3 (paper App. A): the same node budget, a tree two levels deeper (depth 7 = 8 levels).
EAGLE3_DEFAULTS = {"depth": 7, "top_k": DEFAULT_TOP_K, "total_tokens": DEFAULT_TOTAL_TOKENS}


class Eagle2Drafter(HeadDrafter):
    """EAGLE-2: a dynamic draft tree from the EAGLE-1 head (see the module docstring for
    `depth`, `top_k`, `total_tokens`). EAGLE-3 drafts through the same tree: pass an EAGLE-3
    head, its `Eagle3Config` and its `DraftVocab` (`HeadDrafter`).

    draft_logits: as in `HeadDrafter` (NaN rows for nodes never fed). pool: the last cycle's
    `dynamic_tree.Pool`, selected: the pool indices of the tree's drafts (node j + 1 is
    pool candidate selected[j]). calibration_records: (confidence, accepted) per verified node
    whose parent was accepted, appended in `accept`; feed to `dynamic_tree.calibration_table`.
    """

    def __init__(
        self,
        target_params,
        target_config: LlamaConfig,
        head: dict,
        head_cfg,
        vocab=None,
        *,
        depth: int = DEFAULT_DEPTH,
        top_k: int = DEFAULT_TOP_K,
        total_tokens: int = DEFAULT_TOTAL_TOKENS,
    ):
        _check_positive("depth", depth, 1, "expansion steps such as 5")
        _check_positive("top_k", top_k, 1, "a branching such as 8")
        _check_positive("total_tokens", total_tokens, 2, "nodes verified (root included), e.g. 26")
        if top_k > total_tokens - 1:
            # More candidates per level than the tree can keep only cost time: the expansion
            # grows with top_k squared, and at most total_tokens - 1 drafts are kept.
            raise InvalidInputError(
                f"top_k={top_k} exceeds total_tokens - 1 = {total_tokens - 1}, the drafts a tree "
                f"of {total_tokens} nodes keeps; pass top_k <= {total_tokens - 1} or raise "
                "total_tokens"
            )
        super().__init__(target_params, target_config, head, head_cfg, vocab)
        self.depth, self.top_k, self.total_tokens = depth, top_k, total_tokens
        self.draft_slots = depth * top_k  # the frontier nodes fed to the head each cycle
        self.pool, self.selected = None, None
        self.calibration_records: list[tuple[float, bool]] = []
        self._verified = None  # (tree, confidence [N]) of the last proposal

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        self._verified = None
        if not self._start_cycle(max_nodes):
            return Tree(np.asarray([root]), np.asarray([-1]))
        drafts = min(self.total_tokens, max_nodes) - 1
        steps = min(self.depth, drafts - 1)  # levels deeper than `drafts` cannot be chosen
        k = self.top_k
        f_root, root_logits = self.root_prediction
        predicted, logits, slot = {0: f_root}, {0: root_logits}, {}  # by node id = pool index + 1
        tokens, log_q = top_children(log_softmax(root_logits[None, :]), k)  # [1, k]
        pool = add_children(empty_pool(), [-1], tokens, log_q)
        frontier = next_frontier(pool, 0, k)
        for _ in range(steps):
            fed = [int(i) + 1 for i in frontier]
            node_tokens = [root, *pool.tokens.tolist()]
            node_parents = [-1, *(pool.parents + 1).tolist()]
            self._feed_level(fed, node_tokens, node_parents, predicted, logits, slot)
            tokens, log_q = top_children(log_softmax(np.stack([logits[n] for n in fed])), k)
            start = len(pool)
            pool = add_children(pool, frontier, tokens, log_q)  # [F, k] children appended
            frontier = next_frontier(pool, start, k)
        selected = rerank(pool.scores, pool.parents, drafts)
        tree = build_tree(root, pool, selected)
        self.pool, self.selected = pool, selected
        self.draft_logits = np.full((len(tree), self.target_config.vocab_size), np.nan)
        for node, candidate in enumerate([-1, *selected.tolist()]):
            if candidate + 1 in logits:
                self.draft_logits[node] = logits[candidate + 1]
        confidence = np.concatenate([[np.nan], np.exp(pool.log_q[selected])])  # [N]
        self._verified = (tree, confidence)
        return tree

    def accept(self, tokens, features, next_token: int) -> None:
        if self._verified is not None:
            self.calibration_records += _reached_nodes(*self._verified, tokens)
            self._verified = None
        super().accept(tokens, features, next_token)


def _reached_nodes(tree: Tree, confidence: np.ndarray, kept_tokens) -> list[tuple[float, bool]]:
    """(confidence, accepted) for every node whose parent the target accepted. The kept tokens
    name the accepted path: siblings hold distinct tokens (top-k of one distribution). Tokens
    that are not a path of the tree (a caller feeding `accept` by hand) record nothing."""
    kids = children(tree)
    path = [0]
    for token in kept_tokens[1:]:
        match = [c for c in kids[path[-1]] if int(tree.tokens[c]) == int(token)]
        if not match:
            return []
        path.append(match[0])
    accepted = set(path)
    return [(float(confidence[c]), c in accepted) for node in path for c in kids[node]]


def _check_positive(name: str, value, minimum: int, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(f"{name}={value!r} must be an integer >= {minimum}; pass {example}")
