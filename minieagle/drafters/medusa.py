"""Medusa-1 drafting (Cai et al. 2024, §2.1.2): K heads read the target's last feature once per
cycle, and a static tree of their top-k guesses is verified in one target forward.

The feature is h_t of the last token the target kept: its LM head gave the root x_{t+1} (the
verifier's bonus or correction token), and head k guesses x_{t+k+1}, the token k steps below the
root. A node at path (r_1, .., r_D) of child ranks holds head D's r_D-th most likely token:
the candidates are the Cartesian products of each head's top-k, pruned to a fixed set of paths
(the paper's "tree attention"). Unlike EAGLE, a token's guess does not depend on its parent's
token: the heads see only h_t, so siblings at one depth under different parents repeat the same
tokens, and the whole tree costs one head evaluation (K small matmuls and K LM-head rows).

The candidates are deterministic (proposal None), so our lossless verifier (`minieagle.verify`)
keeps the output law exactly the target's at any temperature. Medusa's "typical acceptance"
would accept more at T > 0 but changes that law; it is not used here (docs/medusa.md).
"""

from __future__ import annotations

import numpy as np

from minieagle import inference
from minieagle.backend import to_host
from minieagle.config import LlamaConfig
from minieagle.drafters.head_drafter import check_head_fits
from minieagle.errors import InvalidInputError
from minieagle.heads.medusa import MedusaConfig, head_param_shapes, medusa_forward
from minieagle.sampling import Randomness, SamplingParams, top_k_indices
from minieagle.static_trees import resolve_tree
from minieagle.tree import Tree, from_choices

# Our default Medusa tree: 21 drafts + the root = 22 tokens verified per cycle, depth 4 (one
# level per head), nodes per depth 5, 8, 5, 3, child ranks 0..4. Like the paper's trees it
# spends its nodes where the product of per-head top-k accuracies is largest: wide at depth 1
# (head 1 is the most accurate), then only the top-ranked branches deeper. Written here, not
# copied from Medusa's `mc_sim_7b_63` (63 nodes, tuned for Vicuna-7B on an A100).
DEFAULT_MEDUSA_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (4,),
    (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
)  # fmt: skip


def tree_from_accuracies(accuracy, size: int) -> tuple[tuple[int, ...], ...]:
    """The paper's recipe for a Medusa tree: of all child-rank paths, the `size` with the
    largest estimated chance of being accepted, Π_d accuracy[d, r_d] (heads treated as
    independent), added greedily so every parent comes first.

    accuracy: [K, R], row d the rate at which head d + 1's rank-r guess is the true token
    (measured on held-out text). The expected accepted drafts of the tree are the sum of its
    nodes' chances. Returns the paths sorted by depth, then ranks."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    if accuracy.ndim != 2 or not np.all((accuracy >= 0) & (accuracy <= 1)):
        raise InvalidInputError(
            f"accuracy has shape {accuracy.shape}; pass rates in [0, 1] as [heads, ranks]"
        )

    def chance(path):
        return float(np.prod([accuracy[depth, rank] for depth, rank in enumerate(path)]))

    chosen, frontier = [], {(0,)}  # the frontier: children of chosen nodes, not yet chosen
    while len(chosen) < size and frontier:
        path = max(frontier, key=lambda p: (chance(p), [-r for r in p]))  # ties: lower ranks
        frontier.remove(path)
        chosen.append(path)
        if path[-1] + 1 < accuracy.shape[1]:
            frontier.add((*path[:-1], path[-1] + 1))  # the next sibling
        if len(path) < accuracy.shape[0]:
            frontier.add((*path, 0))  # the first child
    return tuple(sorted(chosen, key=lambda p: (len(p), p)))


def resolve_medusa_tree(tree, num_heads: int) -> tuple[tuple[int, ...], ...]:
    """The path list for "default" (`DEFAULT_MEDUSA_TREE`), "chain:D" or a list of child-rank
    paths (checked by `static_trees.resolve_tree`), sorted parents first. A path of depth D
    reads head D, so no path may be deeper than num_heads."""
    paths = DEFAULT_MEDUSA_TREE if tree == "default" else tree
    one_per_level = f"there are {num_heads} heads (one per level)"
    return resolve_tree(paths, max_depth=num_heads, why=one_per_level)


class MedusaDrafter:
    """Medusa-1 heads (`minieagle.heads.medusa`) over a static tree (`resolve_medusa_tree`).

    target_params: the target's parameters or their `inference.prepare` view (its LM head is
    then shared); heads, cfg: the trained heads and their `MedusaConfig`. After each `propose`,
    `draft_logits` (float64 host [K, V]) holds the heads' logits of that cycle, for tests and
    notebooks."""

    feature_keys: tuple = ("final",)

    def __init__(self, target_params, target_config: LlamaConfig, heads: dict,
                 cfg: MedusaConfig, *, tree="default"):  # fmt: skip
        if not isinstance(cfg, MedusaConfig):
            raise InvalidInputError(
                f"cfg is a {type(cfg).__name__}; pass the MedusaConfig loaded with the heads "
                "(minieagle.heads.medusa.load_medusa_heads)"
            )
        check_head_fits("Medusa heads", "medusa", cfg, target_config, heads, head_param_shapes(cfg))
        view = inference.head_view(target_params, target_config)
        self.lm_head = inference.dense(view.lm_head).T  # [V, d], a view of the prepared head
        self.heads, self.cfg = heads, cfg
        self.paths = resolve_medusa_tree(tree, cfg.num_heads)
        depth = max(len(path) for path in self.paths)
        self.width = [
            1 + max(p[-1] for p in self.paths if len(p) == D) for D in range(1, depth + 1)
        ]
        self.feature = None  # [d]: h_t of the token before the root
        self.draft_logits = None

    def begin(self, prompt_ids, features: dict, sampling: SamplingParams) -> None:
        final = features.get("final")
        self.feature = final[-1, ...] if final is not None and final.shape[0] else None
        self.draft_logits = None

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        if self.feature is None or max_nodes < 2:  # a one-token prompt has no feature yet
            return Tree(np.asarray([root]), np.asarray([-1]))
        logits, _ = medusa_forward(self.heads, self.cfg, self.lm_head, self.feature)  # [K, V]
        host = np.asarray(to_host(logits), dtype=np.float64)  # one transfer per cycle
        guesses = [top_k_indices(host[D], width) for D, width in enumerate(self.width)]
        paths = [p for p in self.paths if p[-1] < len(guesses[len(p) - 1])]  # V < width
        paths = paths[: max_nodes - 1]  # a prefix of the sorted paths is a tree
        tree = from_choices(paths, root, lambda path: guesses[len(path) - 1][path[-1]])
        self.draft_logits = host
        return tree

    def accept(self, tokens, features: dict, next_token: int) -> None:
        self.feature = features["final"][-1, ...]  # the last kept token's h: next_token's parent
