"""Classic speculative decoding: a small draft transformer proposes a chain of gamma tokens.

Leviathan et al. 2023 / Chen et al. 2023. The draft model shares the target's tokenizer, keeps
its own KV cache, and rolls it back to the accepted prefix after each cycle. At T > 0 each draft
token is sampled from q = the draft's distribution processed exactly like the target's
(temperature, top-k, top-p), and that very q travels with the token to the verifier; at T = 0 the
draft takes its argmax and the candidate is deterministic.
"""

from __future__ import annotations

import numpy as np

from minieagle import model
from minieagle.backend import array_module, to_device
from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.kvcache import KVCache
from minieagle.sampling import Randomness, SamplingParams, target_distribution
from minieagle.tree import Tree


class DraftModelDrafter:
    """A chain of `gamma` tokens from a separate (smaller) Llama with the same vocabulary.
    target_config, when given, is the target's: its vocabulary must be the draft's."""

    feature_keys: tuple = ()

    def __init__(self, params, config: LlamaConfig, gamma: int = 4, *,
                 target_config: LlamaConfig | None = None):  # fmt: skip
        if gamma < 1:
            raise InvalidInputError(
                f"gamma={gamma} must be at least 1 draft token per cycle, e.g. 4"
            )
        if target_config is not None and config.vocab_size != target_config.vocab_size:
            raise InvalidInputError(
                f"draft model vocab_size={config.vocab_size} differs from the target's "
                f"{target_config.vocab_size}; both must share one tokenizer: pass a draft model "
                "trained with the target's tokenizer"
            )
        self.params, self.config, self.gamma = params, config, gamma
        self.embed = params["model.embed_tokens.weight"]
        self.xp = array_module(self.embed)

    def begin(self, prompt_ids, features, sampling: SamplingParams) -> None:
        self.sampling = sampling
        self.cache = KVCache.for_model(self.config, self.params)
        self.pending = list(prompt_ids[:-1])  # kept by the target, not yet read by the draft
        self.fed = None  # (cache length after reading the root, drafts read) of the last cycle

    def _step(self, tokens):
        logits, _, _ = model.forward(
            self.params, self.config, to_device(tokens, self.embed), cache=self.cache
        )
        return logits[-1]

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        room = self.cache.capacity - self.cache.length - len(self.pending) - 1
        gamma = min(self.gamma, max_nodes - 1, room)
        if gamma < 1:
            self.fed = None
            return Tree(np.asarray([root]), np.asarray([-1]))
        ### BEGIN SOLUTION draft_model
        logits = self._step([*self.pending, root])  # [V] at the root
        self.pending = []
        committed = self.cache.length
        drafts, proposals = [], []
        for i in range(gamma):
            if self.sampling.greedy:
                token, q = int(self.xp.argmax(logits)), None
            else:
                q = target_distribution(logits, self.sampling)  # the q the verifier will see
                token = rng.draw(q)
            drafts.append(token)
            proposals.append(q)
            if i < gamma - 1:
                logits = self._step([token])
        self.fed = (committed, gamma - 1)
        return Tree.chain(root, drafts, proposals)
        ### END SOLUTION

    def accept(self, tokens, features, next_token: int) -> None:
        ### BEGIN SOLUTION draft_model
        if self.fed is None:  # nothing was drafted, so the root was never read
            self.pending.append(tokens[0])
            return
        committed, drafts_read = self.fed
        kept = min(len(tokens) - 1, drafts_read)  # accepted drafts already in the draft cache
        self.cache.crop(committed + kept)
        self.pending = list(tokens[1 + kept :])  # at most the last draft, never read
        ### END SOLUTION
