"""Drafters: one file per drafting method, all behind one small interface.

A drafter is told the prompt (`begin`), proposes a draft tree rooted at the last emitted token
(`propose`), and is told which tokens the target kept (`accept`). The speculative loop in
`minieagle.generate` never looks inside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness, SamplingParams
from minieagle.shipped import resolve_head
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
HEAD_METHODS = ("eagle1", "eagle2", "eagle3", "medusa")


def load_draft_head(method: str, head_dir, target, *, target_dir=None) -> tuple:
    """The head `method` drafts with, read from `head_dir` in the target's dtype and on its
    device: (params, Eagle1Config) for eagle1/eagle2, (params, Eagle3Config, DraftVocab) for
    eagle3, (heads, MedusaConfig) for medusa. target: (params or prepared target, config);
    target_dir: its checkpoint, to warn when the head records another target."""
    from minieagle.backend import array_module, put

    params, config = target
    embed = getattr(params, "params", params)["model.embed_tokens.weight"]
    dtype, xp = embed.dtype, array_module(embed)
    if method in ("eagle1", "eagle2"):
        from minieagle.heads.eagle1 import load_head

        head = load_head(head_dir, target_dir=target_dir, dtype=dtype)
    elif method == "eagle3":
        from minieagle.heads.eagle3_io import load_eagle3_head

        head = load_eagle3_head(head_dir, dtype=dtype, target_config=config, target_dir=target_dir)
    elif method == "medusa":
        from minieagle.heads.medusa import load_medusa_heads

        head = load_medusa_heads(head_dir, target_dir=target_dir, dtype=dtype)
    else:
        raise InvalidInputError(f"method {method!r} drafts without a head; expected one of "
                                f"{list(HEAD_METHODS)}")  # fmt: skip
    return put(head, xp)


def tree_options(calibration="auto", sampled_tree: bool | None = None, head_dir=None):
    """The dynamic tree's (calibration, sampled_tree) as EAGLE-2/3 decode with them, for
    `build_drafter` and the CLI alike (one place decides the defaults, docs/calibration.md):

    - calibration "auto": the maps shipped beside the head in `head_dir`
      (`calibration.shipped_calibration`: a `HeadCalibration`, whose map for a setting is used
      only where it measured better on the validation split), None without a directory or a
      file; "none" or None: raw scores; a path: that file (a single map or a head's maps,
      fitted for this head); a `Calibration`, `TemperatureScores` or `HeadCalibration`: itself.
    - sampled_tree None stays None (the drafter decides when decoding begins: the sizer's
      choice, else the sampled tree at T > 0), except that a single map fixes it to the tree
      it was fitted for (its setting ends in ",sampled" or not)."""
    from minieagle import calibration as calibrations
    from minieagle.checkpoint import target_fingerprint

    if isinstance(calibration, str | Path) and str(calibration) in ("auto", "none"):
        if str(calibration) == "none" or head_dir is None:
            calibration = None
        else:
            calibration = calibrations.shipped_calibration(head_dir)
    elif isinstance(calibration, str | Path):
        fitted_for = None if head_dir is None else target_fingerprint(head_dir)
        calibration = calibrations.load_any_calibration(calibration, head=fitted_for)
    single = (calibrations.Calibration, calibrations.TemperatureScores)  # fixes its tree
    if sampled_tree is None and isinstance(calibration, single):
        if calibration.setting != "T=0":
            sampled_tree = calibration.setting.endswith(",sampled")
    return calibration, sampled_tree


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
    calibration="auto",
    sampled_tree: bool | None = None,
    sizer=None,
    prompt_lookup_num_tokens: int | None = None,
    max_matching_ngram_size: int | None = None,
    expand_threshold: float = 0.0,
):
    """The drafter for a method name (None for vanilla).

    draft_model: (params, config) of the draft model, for "draft-model" (with target given,
    its vocabulary must be the target's).
    target: (params, config) of the target, head: (head params, Eagle1Config) and tree: a static
    tree ("default", "chain:D" or a path list of child ranks), for "eagle1". For every head
    method, head may also be the head's directory or a shipped head's name ("small-eagle1"):
    it is then loaded for the target (`load_draft_head`).
    "eagle2" takes the same target and head, and depth (expansion steps), top_k (candidates
    expanded per level and children per candidate), total_tokens (nodes verified, root
    included); None means the defaults of `minieagle.drafters.eagle2`, except that top_k
    is at most total_tokens - 1 (total_tokens=8 alone drafts with top_k 7).
    "eagle3" drafts through the same dynamic tree with an EAGLE-3 head: head = (head params,
    Eagle3Config, DraftVocab); None sizes mean the EAGLE-3 defaults
    (`minieagle.drafters.eagle2.EAGLE3_DEFAULTS`). Both take calibration, sampled_tree and sizer,
    whose defaults are decided here for every caller, the CLI included (`tree_options`):
    calibration "auto" ranks by the maps shipped beside the head (`calibration.HEAD_FILE`,
    each used only in the sampling setting where it measured better on the validation split;
    a head given as arrays has no directory, so none), None ranks by raw scores, or pass a
    `Calibration` or `HeadCalibration`; sampled_tree None decides at T > 0 when decoding
    begins (the sizer's choice, else the sampled tree; a single map fixes it to its own
    setting), True / False force it; sizer: a callable sampling -> `minieagle.sizing.Sizing`
    that sizes the tree for this machine when a sequence begins (then None sizes are its
    choice, given ones constrain it; `minieagle.sizing.make_sizer` builds the CLI's);
    expand_threshold: the value a candidate needs to be expanded (`Eagle2Drafter`; 0, the
    default, expands every one).
    "pld" (prompt lookup, training-free) takes prompt_lookup_num_tokens and
    max_matching_ngram_size; None means Hugging Face's defaults, 10 and 2.
    "medusa" takes target, head = (Medusa heads, MedusaConfig) and tree ("default" = our
    22-token Medusa tree, "chain:D" or a path list of child ranks, at most K deep)."""
    if method == "vanilla":
        return None
    head_dir = None
    if isinstance(head, str | Path) and method in HEAD_METHODS:
        if target is None:
            raise InvalidInputError(f"method {method!r} needs the target to load its head")
        head_dir = resolve_head(str(head))
        head = load_draft_head(method, head_dir, target)
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
        calibration, sampled_tree = tree_options(calibration, sampled_tree, head_dir)
        return Eagle2Drafter(
            *target, *head, **sizes, calibration=calibration, sampled_tree=sampled_tree,
            sizer=sizer, expand_threshold=expand_threshold,
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
