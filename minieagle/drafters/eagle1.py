"""EAGLE-1 drafting: a one-layer head extrapolates the target's features over a static tree.

The head reads pairs (f_t, x_{t+1}): the target's feature at position t (its last hidden state
after the final norm) and the token that followed. Its output f̂_{t+1} is a guess of the next
feature; the target's frozen LM head turns it into the draft distribution over x_{t+2}
(EAGLE section 3; `minieagle.eagle1`).

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

from minieagle.backend import array_module, to_device, to_host
from minieagle.config import LlamaConfig
from minieagle.eagle1 import Eagle1Config, head_forward, head_param_shapes, new_head_cache
from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness, SamplingParams, target_distribution, top_k_indices
from minieagle.static_trees import resolve_tree
from minieagle.tree import Tree


class HeadDrafter:
    """What EAGLE-1 and EAGLE-2 share (same head, same weights): the head KV cache holding only
    committed real pairs, the catch-up forward, and one head forward over a level of tree nodes
    with the tree mask and depth positions. Subclasses build the tree (`propose`).

    After each `propose`, `draft_logits` (float64 host [N, V]) holds the head's logits at each
    node of the returned tree: row i predicts node i's children (NaN for nodes never fed,
    whose children the tree does not hold). For tests and notebooks.
    """

    feature_keys: tuple = ("final",)
    draft_slots: int = 0  # head-cache room for draft pairs beyond one pair per target position

    def __init__(self, target_params, target_config: LlamaConfig, head: dict, head_cfg):
        _check_head(target_config, head, head_cfg)
        self.target_params, self.target_config = target_params, target_config
        self.head, self.head_cfg = head, head_cfg
        self.embed = target_params["model.embed_tokens.weight"]
        self.xp = array_module(self.embed)
        self.draft_logits = None

    def begin(self, prompt_ids, features, sampling: SamplingParams) -> None:
        self.sampling = sampling
        capacity = self.target_config.max_position_embeddings  # one pair per target position
        self.cache = new_head_cache(self.head_cfg, self.head, capacity + self.draft_slots)
        self.committed = 0  # head cache positions holding real pairs
        self.root_prediction = None  # (f̂ [d], host logits [V]) at the root after catch-up
        # Pair t = (f_t, x_{t+1}) for t = 0 .. n-2, read at the next catch-up.
        self.pending_tokens = [int(t) for t in prompt_ids[1:]]
        self.pending_features = [features["final"]] if self.pending_tokens else []

    def accept(self, tokens, features, next_token: int) -> None:
        self.cache.crop(self.committed)
        # Pairs (f(tokens[i]), tokens[i+1]) and (f(tokens[-1]), next_token).
        self.pending_tokens += [*(int(t) for t in tokens[1:]), int(next_token)]
        self.pending_features.append(features["final"])  # [len(tokens), d]

    def _start_cycle(self, max_nodes: int) -> bool:
        """Drop earlier draft slots and catch up; False when no tree can be drafted (no room
        for a draft, or a one-token prompt with no feature yet)."""
        self.cache.crop(self.committed)  # no draft slots from an earlier call
        self.draft_logits = None
        if max_nodes < 2:
            return False
        self._catch_up()
        return self.root_prediction is not None

    def _head(self, tokens, features, **placement):
        """One head forward appending to the head cache: (f̂ [T, d], logits [T, V]).
        placement: optional host position_ids [T] and attention_mask [T, cached + T]."""
        placement = {name: to_device(value, self.embed) for name, value in placement.items()}
        tokens = to_device(tokens, self.embed)
        predicted, logits, _ = head_forward(
            self.head,
            self.head_cfg,
            self.target_params,
            tokens,
            features,
            cache=self.cache,
            **placement,
        )
        return predicted, logits

    def _catch_up(self) -> None:
        """Read the pending pairs (committed, real features); the last output is the root's."""
        if not self.pending_tokens:
            return
        features = self.xp.concat(self.pending_features, axis=0)  # [P, d]
        predicted, logits = self._head(self.pending_tokens, features)
        self.committed = self.cache.length
        self.root_prediction = (predicted[-1, ...], _host(logits[-1, ...]))
        self.pending_tokens, self.pending_features = [], []

    def _feed_level(self, fed, tokens, parents, predicted, logits, slot) -> None:
        """One head forward over the nodes `fed` (all at one depth): pair (f̂ at the parent,
        node token) at position (root pair's position + depth), tree attention mask.

        tokens, parents: per node id (node 0 = the root, parents[0] = -1); predicted (node ->
        f̂ [d]) and logits (node -> host [V]) must hold the parents; slot (node -> head cache
        slot) the ancestors below the root. Fills predicted, logits and slot for `fed`."""
        base, count = self.cache.length, len(fed)
        depth = _depth(fed[0], parents)
        mask = np.zeros((count, base + count), dtype=bool)  # [T, cached + T]
        mask[:, : self.committed] = True
        for i, node in enumerate(fed):
            ancestor = parents[node]
            while ancestor != 0:
                mask[i, slot[ancestor]] = True
                ancestor = parents[ancestor]
            mask[i, base + i] = True
            slot[node] = base + i
        positions = np.full(count, self.committed - 1 + depth)  # [T], one position per level
        features = self.xp.stack([predicted[parents[node]] for node in fed])  # [T, d]
        out, level_logits = self._head(
            [tokens[n] for n in fed], features, position_ids=positions, attention_mask=mask
        )
        rows = _host(level_logits)  # [T, V], one transfer per level
        for i, node in enumerate(fed):
            predicted[node] = out[i, ...]
            logits[node] = rows[i]


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
    ):
        super().__init__(target_params, target_config, head, head_cfg)
        self.paths = resolve_tree(choices)  # sorted by depth, then ranks: parents first

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
        tokens, parents, proposals = [root], [-1], [None]
        node_of = {(): 0}  # path -> node index (nodes that were drawn)
        predicted = {0: self.root_prediction[0]}  # node -> f̂ [d]
        logits = {0: self.root_prediction[1]}  # node -> host [V]
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
                    siblings, self._children(logits[parent], len(siblings), rng), strict=False
                ):
                    node_of[path] = len(tokens)
                    new_nodes.append((len(tokens), path))
                    tokens.append(token)
                    parents.append(parent)
                    proposals.append(q)
            fed = [node for node, path in new_nodes if path in has_children]
            if fed:
                self._feed_level(fed, tokens, parents, predicted, logits, slot)
        self.draft_logits = np.full((len(tokens), self.target_config.vocab_size), np.nan)
        for node, row in logits.items():
            self.draft_logits[node] = row
        return Tree(np.asarray(tokens), np.asarray(parents), tuple(proposals))

    def _children(self, logits: np.ndarray, count: int, rng: Randomness) -> list[tuple]:
        """Up to `count` (token, proposal) pairs for the children of a node whose draft logits
        are `logits` [V]. T = 0: the top-ranked tokens (lowest id on ties), proposal None.
        T > 0 (EAGLE-1): draws without replacement from q = the draft distribution processed
        like the target's; child j carries q with children 0..j-1 removed and renormalised, the
        distribution it was drawn from. Fewer children when q has fewer nonzero entries."""
        if self.sampling.greedy:
            order = top_k_indices(np.asarray(logits), count)  # [count] most likely first
            return [(int(token), None) for token in order]
        q = target_distribution(logits, self.sampling)  # [V] float64
        children = []
        for _ in range(count):
            if not q.any():
                break
            token = int(rng.draw(q))
            children.append((token, q))
            q = q.copy()
            q[token] = 0.0
            total = q.sum()
            if total > 0:
                q /= total
        return children


def _host(x) -> np.ndarray:
    return np.asarray(to_host(x), dtype=np.float64)


def _depth(node: int, parents) -> int:
    depth = 0
    while node != 0:
        node, depth = parents[node], depth + 1
    return depth


def _check_head(target_config: LlamaConfig, head: dict, head_cfg: Eagle1Config) -> None:
    """The head must have been built for this target (same vocabulary and width), and its
    weights must match its config."""
    layer = head_cfg.layer
    for name in ("vocab_size", "hidden_size"):
        got, want = getattr(layer, name), getattr(target_config, name)
        if got != want:
            raise InvalidInputError(
                f"the EAGLE-1 head has {name}={got} but the target has {want}; load the head "
                "trained on this target (or train one: minieagle train eagle1)"
            )
    for name, shape in head_param_shapes(head_cfg).items():
        if name not in head:
            raise InvalidInputError(
                f"the EAGLE-1 head has no parameter {name!r}; load a complete head"
            )
        if tuple(head[name].shape) != tuple(shape):
            raise InvalidInputError(
                f"head parameter {name!r} has shape {tuple(head[name].shape)} but its config "
                f"says {tuple(shape)}; the weights and config.json do not belong together"
            )
