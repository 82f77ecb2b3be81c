"""Drafters: one file per drafting method, all behind one small interface.

A drafter is told the prompt (`begin`), proposes a draft tree rooted at the last emitted token
(`propose`), and is told which tokens the target kept (`accept`). The speculative loop in
`minieagle.generate` never looks inside it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness, SamplingParams
from minieagle.tree import Tree


class Drafter(Protocol):
    """The interface every drafting method implements.

    feature_keys: which target hidden states the drafter reads (`model.forward`'s
    `output_hidden` keys): () for a separate draft model, ("final",) for EAGLE-1.
    """

    feature_keys: tuple

    def begin(self, prompt_ids: list[int], features: dict, sampling: SamplingParams) -> None:
        """A new sequence. features: target hidden states [len(prompt) - 1, d] of every prompt
        position except the last (the last prompt token is the first tree's root)."""

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        """A tree whose node 0 is `root`, with at most `max_nodes` nodes. Sampled candidates
        carry the exact distribution they were drawn from (`Tree.proposals`)."""

    def accept(self, tokens: list[int], features: dict, next_token: int) -> None:
        """The target kept `tokens` (the root, then the accepted drafts) with these features
        [len(tokens), d], and will continue from `next_token` (the next root)."""


class NoDrafter:
    """Proposes nothing: the speculative loop becomes vanilla decoding."""

    feature_keys: tuple = ()

    def begin(self, prompt_ids, features, sampling) -> None:
        pass

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        return Tree(np.asarray([root]), np.asarray([-1]))

    def accept(self, tokens, features, next_token) -> None:
        pass


METHODS = ("vanilla", "draft-model", "eagle1", "eagle2", "eagle3", "pld", "medusa")


def build_drafter(
    method: str,
    *,
    draft_model=None,
    gamma: int = 4,
    target=None,
    head=None,
    tree="default",
    depth: int | None = None,
    top_k: int | None = None,
    total_tokens: int | None = None,
    calibration=None,
    sampled_tree: bool = False,
    sizer=None,
    prompt_lookup_num_tokens: int | None = None,
    max_matching_ngram_size: int | None = None,
):
    """The drafter for a method name (None for vanilla).

    draft_model: (params, config) of the draft model, for "draft-model" (with target given,
    its vocabulary must be the target's).
    target: (params, config) of the target, head: (head params, Eagle1Config) and tree: a static
    tree ("default", "chain:D" or a path list of child ranks), for "eagle1".
    "eagle2" takes the same target and head, and depth (expansion steps), top_k (candidates
    expanded per level and children per candidate), total_tokens (nodes verified, root
    included); None means the defaults of `minieagle.drafters.eagle2`, except that top_k
    is at most total_tokens - 1 (total_tokens=8 alone drafts with top_k 7).
    "eagle3" drafts through the same dynamic tree with an EAGLE-3 head: head = (head params,
    Eagle3Config, DraftVocab); None sizes mean the EAGLE-3 defaults
    (`minieagle.drafters.eagle2.EAGLE3_DEFAULTS`). Both take the options calibration (a
    `minieagle.calibration.Calibration`) and sampled_tree (docs/calibration.md), and sizer: a
    callable sampling -> `minieagle.sizing.Sizing` that sizes the tree for this machine when a
    sequence begins (then None sizes are its choice, given ones constrain it).
    "pld" (prompt lookup, training-free) takes prompt_lookup_num_tokens and
    max_matching_ngram_size; None means Hugging Face's defaults, 10 and 2.
    "medusa" takes target, head = (Medusa heads, MedusaConfig) and tree ("default" = our
    22-token Medusa tree, "chain:D" or a path list of child ranks, at most K deep)."""
    if method == "vanilla":
        return None
    if method == "draft-model":
        from minieagle.drafters.draft_model import DraftModelDrafter

        if draft_model is None:
            raise InvalidInputError(
                "method 'draft-model' needs a draft model; pass --draft-model DIR"
            )
        target_config = None if target is None else target[1]  # its vocabulary is checked
        return DraftModelDrafter(*draft_model, gamma=gamma, target_config=target_config)
    if method == "eagle1":
        from minieagle.drafters.eagle1 import Eagle1Drafter

        if head is None or target is None:
            raise InvalidInputError(
                "method 'eagle1' needs the target and a trained head; pass --head DIR "
                "(train one with `minieagle train eagle1`)"
            )
        return Eagle1Drafter(*target, *head, choices=tree, sizer=sizer)
    if method in ("eagle2", "eagle3"):
        from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS, Eagle2Drafter

        trained_by = "eagle1" if method == "eagle2" else "eagle3"
        if head is None or target is None:
            raise InvalidInputError(
                f"method {method!r} needs the target and a trained {trained_by} head; pass "
                f"--head DIR (train one with `minieagle train {trained_by}`)"
            )
        defaults = EAGLE2_DEFAULTS if method == "eagle2" else EAGLE3_DEFAULTS
        sizes = dict(depth=depth, top_k=top_k, total_tokens=total_tokens)
        if sizer is None:
            sizes = {k: defaults[k] if v is None else v for k, v in sizes.items()}
            fixed = sizes["total_tokens"]
            if top_k is None and isinstance(fixed, int) and fixed >= 2:
                sizes["top_k"] = min(sizes["top_k"], fixed - 1)  # a small tree's branching
        return Eagle2Drafter(
            *target, *head, **sizes, calibration=calibration, sampled_tree=sampled_tree,
            sizer=sizer,
        )  # fmt: skip
    if method == "pld":
        from minieagle.drafters.prompt_lookup import PromptLookupDrafter

        sizes = dict(
            prompt_lookup_num_tokens=prompt_lookup_num_tokens,
            max_matching_ngram_size=max_matching_ngram_size,
        )
        return PromptLookupDrafter(**{k: v for k, v in sizes.items() if v is not None})
    if method == "medusa":
        from minieagle.drafters.medusa import MedusaDrafter

        if head is None or target is None:
            raise InvalidInputError(
                "method 'medusa' needs the target and trained Medusa heads; pass --head DIR "
                "(train them with `minieagle train medusa`)"
            )
        return MedusaDrafter(*target, *head, tree=tree)
    raise InvalidInputError(f"unknown method {method!r}; expected one of {list(METHODS)}")
