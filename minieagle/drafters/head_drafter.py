"""What every head-based drafter shares: a trained head drafting from the target's features.

EAGLE-1, EAGLE-2 and EAGLE-3 all draft the same way around their head: the head's KV cache holds
only committed real pairs (a target feature, the token that followed), a *catch-up* forward reads
the pairs the target committed since the last cycle, and the tree is grown one head forward per
level, each node reading (the head's output at its parent, its own token) at the position its path
would occupy, under a tree mask. `HeadDrafter` is that machinery; its subclasses build the tree
(`Eagle1Drafter`: a static tree; `Eagle2Drafter`: the dynamic tree, with either head).

The heads differ in what they read and predict, so each is driven through a small adapter:
- `Eagle1Head`: reads the target's final-norm feature ("final"); its output f̂ goes through the
  target's frozen LM head, over the whole vocabulary.
- `Eagle3Head`: reads the fused inputs of its aux target layers (three, or one for the
  ablation head: k d wide, through `fc`); its output a is fed back unchanged; its own LM head
  scores a reduced draft vocabulary, which the adapter scatters into the target's vocabulary
  (-inf elsewhere), so trees and verification never see draft ids.
Each forward says what its features are (`target_features`): the target's at catch-up, the
head's own outputs during expansion (a one-feature head cannot tell them apart by width).
`HeadDrafter` picks the adapter from the head's config type (`HEAD_ADAPTERS`).
"""

from __future__ import annotations

import numpy as np

from minieagle import inference
from minieagle.backend import array_module, to_device, to_host
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.heads import eagle3
from minieagle.heads.eagle1 import Eagle1Config, head_param_shapes, new_head_cache
from minieagle.sampling import Randomness, SamplingParams, target_distribution, top_k_indices


class Eagle1Head:
    """EAGLE-1's head as a drafter drives it (see the module docstring). target: the
    target's `inference.PreparedTarget` or `TargetView`; the head runs on the fast path too
    (`inference.PreparedEagle1Head`, sharing the target's prepared LM head)."""

    def __init__(self, target, target_config: LlamaConfig, head, cfg: Eagle1Config, vocab):
        if vocab is not None:
            raise InvalidInputError(
                "an EAGLE-1 head predicts over the target's whole vocabulary; pass vocab=None"
            )
        _check_eagle1_head(target_config, head, cfg)
        self.target_params, self.head, self.cfg = target.params, head, cfg
        self.fast = inference.PreparedEagle1Head(head, cfg, target.params, target.lm_head)
        self.feature_keys = ("final",)

    def features(self, hidden: dict):
        """The head's input features [T, d] from the target's hidden states."""
        return hidden["final"]

    def new_cache(self, capacity: int):
        return new_head_cache(self.cfg, self.head, capacity)

    def forward(self, tokens, features, cache, *, target_features: bool, last_only=False,
                **placement):  # fmt: skip
        """(output [T, d], logits [T, V], or [1, V] for the last position only when
        last_only) appended to `cache`. target_features: unused, the EAGLE-1 head reads the
        target's f and its own f̂ alike."""
        return self.fast.forward(tokens, features, cache, last_only=last_only, **placement)


class Eagle3Head:
    """EAGLE-3's head as a drafter drives it (see the module docstring). vocab: its
    `DraftVocab` (None: the target's whole vocabulary)."""

    def __init__(self, target, target_config: LlamaConfig, head, cfg: eagle3.Eagle3Config, vocab):
        for name in ("vocab_size", "hidden_size"):
            got, want = getattr(cfg.layer, name), getattr(target_config, name)
            if got != want:
                raise InvalidInputError(
                    f"the EAGLE-3 head has {name}={got} but the target has {want}; load the "
                    "head trained for this target (or train one: minieagle train eagle3)"
                )
        L = target_config.num_hidden_layers
        # Three fused layers are inputs of layers (< L); one may be the top feature (L).
        if max(cfg.aux_layers) >= (L + 1 if cfg.num_features == 1 else L):
            raise InvalidInputError(
                f"the EAGLE-3 head fuses the inputs of target layers {cfg.aux_layers}, but the "
                f"target has {L} layers; load the head trained for this target"
            )
        embed = target.params["model.embed_tokens.weight"]
        self.vocab = vocab or eagle3.DraftVocab.full(target_config.vocab_size)
        if self.vocab.size != cfg.draft_vocab_size:
            raise InvalidInputError(
                f"the draft vocabulary has {self.vocab.size} ids but the head's lm_head scores "
                f"draft_vocab_size={cfg.draft_vocab_size}; load the d2t/t2d saved with the head"
            )
        self.target_params, self.head, self.cfg = target.params, head, cfg
        self.fast = inference.PreparedEagle3Head(head, cfg, target.params)
        self.feature_keys = tuple(cfg.aux_layers)
        self.xp = array_module(embed)
        self.target_ids = to_device(to_host(self.vocab.ids), embed, dtype=self.xp.int64)  # [N]
        self.vocab_size = target_config.vocab_size

    def features(self, hidden: dict):
        """The fused features [T, k d] (low/mid/high for k = 3) from the target's hidden
        states."""
        return eagle3.fuse_features(hidden, self.cfg.aux_layers)

    def new_cache(self, capacity: int):
        return eagle3.new_head_cache(self.cfg, self.head, capacity)

    def forward(self, tokens, features, cache, *, target_features: bool, last_only=False,
                **placement):  # fmt: skip
        """(output a [T, d], logits [T, V] over the target's ids, -inf outside the draft
        vocabulary; [1, V] for the last position only when last_only) appended to `cache`.
        target_features: True for the target's fused features (catch-up, through fc), False
        for the head's own outputs (expansion)."""
        out, draft_logits = self.fast.forward(
            tokens, features, cache, target_features=target_features, last_only=last_only,
            **placement,
        )  # fmt: skip
        T = draft_logits.shape[0]
        logits = self.xp.full((T, self.vocab_size), -self.xp.inf, dtype=draft_logits.dtype)
        logits[:, self.target_ids] = draft_logits  # [T, N] -> [T, V]
        return out, logits


# Which adapter drives a head, by the type of its config.
HEAD_ADAPTERS = {Eagle1Config: Eagle1Head, eagle3.Eagle3Config: Eagle3Head}


def draft_head(target, target_config: LlamaConfig, head, head_cfg, vocab=None):
    """The adapter for a head (`HEAD_ADAPTERS`), checked against the target (its parameters,
    or their `inference.prepare` view, whose LM head it then shares)."""
    adapter = HEAD_ADAPTERS.get(type(head_cfg))
    if adapter is None:
        raise InvalidInputError(
            f"head_cfg is a {type(head_cfg).__name__}; expected one of "
            f"{[c.__name__ for c in HEAD_ADAPTERS]} (load a head with its own loader)"
        )
    return adapter(inference.head_view(target, target_config), target_config, head, head_cfg, vocab)


class HeadDrafter:
    """What every head-based drafter shares: the head KV cache holding only committed real
    pairs, the catch-up forward, and one head forward over a level of tree nodes with the tree
    mask and depth positions. Subclasses build the tree (`propose`). target_params: the target's
    parameters, or their `inference.prepare` view (its LM head is then shared, not copied again:
    pass the view when drafting from a large target). head, head_cfg: the trained
    head and its config (`Eagle1Config` or `Eagle3Config`); vocab: an EAGLE-3 head's
    `DraftVocab` (None = the target's whole vocabulary).

    After each `propose`, `draft_logits` (float64 host [N, V]) holds the head's logits at each
    node of the returned tree: row i predicts node i's children (NaN for nodes never fed,
    whose children the tree does not hold). For tests and notebooks.
    """

    draft_slots: int = 0  # head-cache room for draft pairs beyond one pair per target position
    drafts_nothing: bool = False  # sized (minieagle.sizing) to draft no tree: vanilla decoding

    def __init__(self, target_params, target_config: LlamaConfig, head: dict, head_cfg, vocab=None):
        target = inference.head_view(target_params, target_config)  # LM head [d, V] once
        target_params = target.params
        self.draft = draft_head(target, target_config, head, head_cfg, vocab)
        self.feature_keys = self.draft.feature_keys
        self.target_params, self.target_config = target_params, target_config
        self.head, self.head_cfg = head, head_cfg
        self.embed = target_params["model.embed_tokens.weight"]
        self.xp = array_module(self.embed)
        self._draft_rows = None  # (nodes, {node: host logits [V]}) of the last tree

    @property
    def draft_logits(self):
        """float64 host [N, V] for the last tree (class docstring), built when asked for."""
        if self._draft_rows is None:
            return None
        count, rows = self._draft_rows
        table = np.full((count, self.target_config.vocab_size), np.nan)
        for node, row in rows.items():
            table[node] = row
        return table

    def begin(self, prompt_ids, features, sampling: SamplingParams) -> None:
        self.sampling = sampling
        capacity = self.target_config.max_position_embeddings  # one pair per target position
        self.cache = self.draft.new_cache(capacity + self.draft_slots)
        self.committed = 0  # head cache positions holding real pairs
        self.root_prediction = None  # (f̂ [d], host logits [V]) at the root after catch-up
        # Pair t = (f_t, x_{t+1}) for t = 0 .. n-2, read at the next catch-up.
        self.pending_tokens = [int(t) for t in prompt_ids[1:]]
        self.pending_features = [self.draft.features(features)] if self.pending_tokens else []

    def accept(self, tokens, features, next_token: int) -> None:
        if self.drafts_nothing:  # no tree is drafted, so there is nothing to catch up on
            return
        self.cache.crop(self.committed)
        # Pairs (f(tokens[i]), tokens[i+1]) and (f(tokens[-1]), next_token).
        self.pending_tokens += [*(int(t) for t in tokens[1:]), int(next_token)]
        self.pending_features.append(self.draft.features(features))  # [len(tokens), F]

    def _start_cycle(self, max_nodes: int) -> bool:
        """Drop earlier draft slots and catch up; False when no tree can be drafted (no room
        for a draft, a one-token prompt with no feature yet, or `drafts_nothing`)."""
        self.cache.crop(self.committed)  # no draft slots from an earlier call
        self._draft_rows = None
        if max_nodes < 2 or self.drafts_nothing:
            return False
        self._catch_up()
        return self.root_prediction is not None

    def _head(self, tokens, features, *, target_features: bool, last_only=False, **placement):
        """One head forward appending to the head cache: (f̂ [T, d], logits [T, V]).
        target_features: whether `features` are the target's (catch-up) or the head's own
        outputs (expansion). placement: optional host position_ids [T] and attention_mask
        [T, cached + T]."""
        placement = {name: to_device(value, self.embed) for name, value in placement.items()}
        tokens = to_device(tokens, self.embed)
        return self.draft.forward(
            tokens, features, self.cache, target_features=target_features, last_only=last_only,
            **placement,
        )  # fmt: skip

    def _catch_up(self) -> None:
        """Read the pending pairs (committed, real features); the last output is the root's."""
        if not self.pending_tokens:
            return
        features = self.xp.concat(self.pending_features, axis=0)  # [P, d]
        predicted, logits = self._head(
            self.pending_tokens, features, target_features=True, last_only=True
        )  # only the root's logits are read
        self.committed = self.cache.length
        self.root_prediction = (predicted[-1, ...], _host(logits[-1, ...]))
        self.pending_tokens, self.pending_features = [], []

    def _feed_level(self, fed, tokens, parents, predicted, logits, slot) -> None:
        """One head forward over the nodes `fed` (all at one depth): pair (f̂ at the parent,
        node token) at position (root pair's position + depth), tree attention mask.

        tokens, parents: per node id (node 0 = the root, parents[0] = -1); predicted (node ->
        f̂ [d]) and logits (node -> host [V]) must hold the parents; slot (node -> head cache
        slot) the ancestors below the root. Fills predicted, logits and slot for `fed`."""
        ### BEGIN SOLUTION eagle1_head
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
        placement = dict(position_ids=positions, attention_mask=mask)
        if count == 1 and mask.all() and positions[0] == base:
            placement = {}  # a chain's node sees every slot at the next position: the defaults
        features = self.xp.stack([predicted[parents[node]] for node in fed])  # [T, d]
        out, level_logits = self._head(
            [tokens[n] for n in fed], features, target_features=False, **placement
        )
        rows = _host(level_logits)  # [T, V], one transfer per level
        for i, node in enumerate(fed):
            predicted[node] = out[i, ...]
            logits[node] = rows[i]
        ### END SOLUTION


def _host(x) -> np.ndarray:
    """Head logits on the host, in their own dtype (the ranking and the log-softmax read them
    there; `draft_logits` widens them to float64 when asked)."""
    return np.asarray(to_host(x))


def _depth(node: int, parents) -> int:
    depth = 0
    while node != 0:
        node, depth = parents[node], depth + 1
    return depth


def _check_eagle1_head(target_config: LlamaConfig, head: dict, head_cfg: Eagle1Config) -> None:
    """The head must have been built for this target (same vocabulary and width), and its
    weights must match its config."""
    check_head_fits("EAGLE-1 head", "eagle1", head_cfg.layer, target_config, head,
                    head_param_shapes(head_cfg))  # fmt: skip


def check_head_fits(what: str, method: str, head_sizes, target_config: LlamaConfig, params: dict,
                    shapes: dict) -> None:  # fmt: skip
    """A drafting head fits the target: the same vocab_size and hidden_size (`head_sizes` is any
    object with both), and every tensor of `shapes` present with its shape. `what` names the
    head and `method` its training command in the messages."""
    for name in ("vocab_size", "hidden_size"):
        got, want = getattr(head_sizes, name), getattr(target_config, name)
        if got != want:
            raise InvalidInputError(
                f"{what}: {name}={got} but the target has {want}; load a head trained on this "
                f"target (or train one: minieagle train {method})"
            )
    for name, shape in shapes.items():
        if name not in params:
            raise InvalidInputError(f"{what}: no parameter {name!r}; load a complete head")
        if tuple(params[name].shape) != tuple(shape):
            raise InvalidInputError(
                f"{what} parameter {name!r} has shape {tuple(params[name].shape)} but its config "
                f"says {tuple(shape)}; the weights and config.json do not belong together"
            )


def draft_children(logits, count: int, sampling: SamplingParams, rng: Randomness) -> list[tuple]:
    """Up to `count` (token, proposal) pairs for the children of a node whose draft logits
    are `logits` [V] (host). T = 0: the top-ranked tokens (lowest id on ties), proposal None.
    T > 0 (EAGLE-1): draws without replacement from q = the draft distribution processed
    like the target's; child j carries q with children 0..j-1 removed and renormalised, the
    distribution it was drawn from. Fewer children when q has fewer nonzero entries."""
    if sampling.greedy:
        order = top_k_indices(np.asarray(logits), count)  # [count] most likely first
        return [(int(token), None) for token in order]
    return draw_children(target_distribution(logits, sampling), count, rng)


def draw_children(q: np.ndarray, count: int, rng: Randomness) -> list[tuple]:
    """Up to `count` (token, proposal) pairs drawn without replacement from the distribution
    q [V] (host float64): draw j from q with draws 1..j-1 removed and renormalised, which is
    its proposal. Fewer when q has fewer nonzero entries."""
    children = []
    for _ in range(count):
        if not q.any():
            break
        token = int(rng.draw(q))
        children.append((token, q))
        if len(children) == count:  # the last draw: no law after it is needed
            break
        q = q.copy()
        q[token] = 0.0
        total = q.sum()
        if total > 0:
            q /= total
    return children
