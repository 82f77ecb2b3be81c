"""EAGLE-1 drafting: a one-layer head extrapolates the target's features over a static tree.

The head reads pairs (f_t, x_{t+1}): the target's feature at position t (its last hidden state
after the final norm) and the token that followed. Its output f̂_{t+1} is a guess of the next
feature; the target's frozen LM head turns it into the draft distribution over x_{t+2}
(EAGLE section 3; `minieagle.heads.eagle1`).

Each cycle (`propose`):
1. Catch-up: one head forward over the pairs the target committed since the last cycle (real
   features, the last one paired with the root). Only these positions stay in the head's KV cache.
2. Expansion, one head forward per tree level: the children of a node are the top-ranked tokens
   of the draft distribution at it (T = 0), or tokens sampled without replacement from it
   (T > 0, EAGLE-1's rule); each child is then fed as the pair (f̂ at its parent, its token),
   at the position its path would occupy, attending to the committed cache, its ancestors' slots
   and itself. A tree of depth D costs D head forwards, catch-up included.
`accept` drops the draft slots from the head cache and queues the newly committed pairs.

The tree's shape is static: a path list of child ranks (`minieagle.static_trees`). The head
machinery (cache, catch-up, one level per forward) lives in `HeadDrafter`, which EAGLE-2's
dynamic tree (`minieagle.drafters.eagle2`) shares.
"""

from __future__ import annotations

import itertools

import numpy as np

from minieagle.config import LlamaConfig
from minieagle.drafters.head_drafter import HeadDrafter, draft_children
from minieagle.errors import InvalidInputError
from minieagle.heads.eagle1 import Eagle1Config
from minieagle.sampling import Randomness
from minieagle.static_trees import resolve_tree
from minieagle.tree import Tree


class Eagle1Drafter(HeadDrafter):
    """EAGLE-1: a feature-level draft head over a static tree (`choices`: a path list of child
    ranks, "default" = EAGLE-1's 26-token tree, or "chain:D"). `draft_logits`: see HeadDrafter.
    """

    def __init__(
        self,
        target_params,
        target_config: LlamaConfig,
        head: dict,
        head_cfg: Eagle1Config,
        *,
        choices="default",
        sizer=None,
    ):
        super().__init__(target_params, target_config, head, head_cfg)
        if (choices == "auto") != (sizer is not None):
            raise InvalidInputError(
                "choices='auto' and a sizer go together: pass both (the chain length is sized "
                "for this machine) or neither"
            )
        self.sizer, self.sizing = sizer, None
        # A chain of D drafts is D + 1 tree nodes after at least one prompt token.
        context = target_config.max_position_embeddings
        self.max_depth, self.why = context - 2, f"the context holds {context} tokens"
        self.paths = None if sizer else resolve_tree(choices, self.max_depth, self.why)

    def begin(self, prompt_ids, features, sampling) -> None:
        if self.sizer is not None:  # the chain length sized for this setting (minieagle.sizing)
            self.sizing = self.sizer(sampling)
            chain = self.sizing.chain
            self.drafts_nothing = chain == 0  # no chain pays on this machine
            self.paths = resolve_tree(f"chain:{chain}", self.max_depth, self.why) if chain else ()
        super().begin(prompt_ids, features, sampling)

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        if not self._start_cycle(max_nodes):
            return Tree(np.asarray([root]), np.asarray([-1]))
        budget = min(max_nodes - 1, self.cache.capacity - self.cache.length)
        # A prefix of the sorted paths is a tree: the deepest, least likely nodes go first.
        paths = self.paths[:budget]
        return self._expand(root, paths, rng)

    def _expand(self, root: int, paths, rng: Randomness) -> Tree:
        """Fill the static tree level by level: children from the draft distribution at their
        parent, then one head forward over the level's nodes that have children."""
        tokens, parents, proposals = [root], [-1], [None]  # per node; node 0 is the root
        predicted = {0: self.root_prediction[0]}  # node -> f̂ [d]
        logits = {0: self.root_prediction[1]}  # node -> host [V]
        ### BEGIN SOLUTION eagle1_head
        node_of = {(): 0}  # path -> node index (nodes that were drawn)
        slot = {}  # node -> head cache slot of its pair
        has_children = {path[:-1] for path in paths}
        for _, level in itertools.groupby(paths, key=len):
            new_nodes = []
            for parent_path, siblings in itertools.groupby(level, key=lambda p: p[:-1]):
                parent = node_of.get(parent_path)
                if parent is None:  # the parent was never drawn
                    continue
                siblings = list(siblings)  # ranks 0, 1, ... (resolve_tree)
                for path, (token, q) in zip(
                    siblings,
                    draft_children(logits[parent], len(siblings), self.sampling, rng),
                    strict=False,
                ):
                    node_of[path] = len(tokens)
                    new_nodes.append((len(tokens), path))
                    tokens.append(token)
                    parents.append(parent)
                    proposals.append(q)
            fed = [node for node, path in new_nodes if path in has_children]
            if fed:
                self._feed_level(fed, tokens, parents, predicted, logits, slot)
        ### END SOLUTION
        self._draft_rows = (len(tokens), logits)
        return Tree(np.asarray(tokens), np.asarray(parents), tuple(proposals))
