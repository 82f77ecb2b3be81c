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
lossless at any temperature (docs/lossless.md). Head forwards per cycle: 1 + depth (fewer near
the end of the context, where `max_nodes` leaves no room for the deeper levels).

Two options, both off in the class by default (`build_drafter` turns them on where they
measured better; docs/calibration.md):
  calibration   a `minieagle.calibration.Calibration` fitted for this sampling setting, a
                `TemperatureScores` (a top-k tree's), or a head's maps (`HeadCalibration`:
                one per setting, each used only where it measured better on validation;
                `for_setting` picks it when decoding begins): each child's score term log q
                becomes log c(q), the measured log chance that the target accepts it, or
                log softmax(logits / t) at the child; expansion and reranking both rank by
                these scores. The recorded confidence stays q, so the map can be refitted.
  sampled_tree  at T > 0, each expanded node's children are drawn without replacement from the
                draft distribution processed like the target's, each carrying the distribution
                it was drawn from (EAGLE-1's rule, `head_drafter.draft_children`), so the verifier
                accepts child x with min(1, p(x)/q(x)) instead of p(x). Their scores must not
                depend on which tokens were drawn (a token-dependent choice of which draws to
                keep would bias the verified tokens), so each draw's confidence is fixed before
                it is drawn: 1 for the first (a sample of q itself, which a target equal to the
                draft would accept surely), the j-th largest processed draft probability for
                draw j > 1; the score term is its log, or its calibrated log. Greedy decoding
                ignores the option. None decides when decoding begins: the sizer's choice
                (`Sizing.sampled_tree`), else the sampled tree at T > 0.

A third option, off by default (0), cuts the expansion short:
  expand_threshold  a frontier candidate is expanded (fed to the head for its children) only
                if its value, exp(score), is at least this: with raw scores the product of q
                along its path, with a map its estimated chance of acceptance. When no
                candidate of the newest level reaches it, the tree stops growing and the cycle
                saves the remaining head forwards and the verification of their children; with
                top_k 1 it drafts a chain that goes on only while the head is sure enough (as
                the confidence threshold of Hugging Face's assisted generation). Scores never
                depend on a drawn token (above), so neither does the cut: lossless at any
                temperature. The CLI's `--expand-threshold`; measured in docs/speed.md.

Hyperparameters, named and counted as in the official code and the serving engines:
  depth         expansion steps (head forwards after the catch-up); the tree is up to depth + 1
                drafts deep (the paper's "tree depth 6" is depth=5).
  top_k         candidates expanded per level, and children taken per expanded candidate.
  total_tokens  nodes verified per cycle INCLUDING the root: total_tokens - 1 drafts.
Defaults: depth=5 (the paper's tree depth 6), top_k=8 (the official draft class's default; our
2048-token vocabulary is much smaller than LLaMA's, so the top 8 hold most of the draft's mass),
total_tokens=26, the size of EAGLE-1's default tree, so that at equal size `minieagle bench`
compares the two trees' shapes alone. The best sizes depend on the machine (EAGLE-2 §5.3): on
a CPU verifying more tokens is not free. `sizer` (a callable sampling -> `minieagle.sizing.Sizing`,
the CLI's default `--total-tokens auto`) replaces the defaults, when a sequence begins, by the
sizes that maximise the expected tokens per second on this machine (docs/speed.md); sized so,
`total_tokens` may be 1: no tree pays, draft nothing.
"""

from __future__ import annotations

import numpy as np

from minieagle.config import LlamaConfig
from minieagle.drafters.head_drafter import HeadDrafter, draw_children
from minieagle.dynamic_tree import (
    add_children,
    build_tree,
    empty_pool,
    next_frontier,
    pool_depths,
    rerank,
    top_children_of_logits,
)
from minieagle.errors import InvalidInputError
from minieagle.sampling import (
    Randomness,
    SamplingParams,
    setting_name,
    target_distributions,
    top_k_rows,
)
from minieagle.tree import Tree, children

DEFAULT_DEPTH = 5
DEFAULT_TOP_K = 8
DEFAULT_TOTAL_TOKENS = 26
EAGLE2_DEFAULTS = {
    "depth": DEFAULT_DEPTH,
    "top_k": DEFAULT_TOP_K,
    "total_tokens": DEFAULT_TOTAL_TOKENS,
}
# EAGLE-3: the same node budget as EAGLE-2, the tree deepened to depth 7 (8 levels), as the paper
# does. With the shipped head and its scores, depth 7 against 5 at 26 nodes: tau 6.65 against
# 5.63 and 0.68x against 0.62x vanilla's speed on this CPU (held-out prompts, T = 0,
# docs/results/eagle3-depth-sweep-shipped.json), tau 4.20 against 4.04 at T = 1
# (docs/results/default-tau.json). For the EAGLE-1 head depth 7 raised tau too, 5.51 against
# 5.02, but not the speed, 0.66x against 0.68x: EAGLE-2 keeps its paper's depth 5.
EAGLE3_DEFAULTS = {"depth": 7, "top_k": DEFAULT_TOP_K, "total_tokens": DEFAULT_TOTAL_TOKENS}


class Eagle2Drafter(HeadDrafter):
    """EAGLE-2: a dynamic draft tree from the EAGLE-1 head (see the module docstring for
    `depth`, `top_k`, `total_tokens`). EAGLE-3 drafts through the same tree: pass an EAGLE-3
    head, its `Eagle3Config` and its `DraftVocab` (`HeadDrafter`).

    draft_logits: as in `HeadDrafter` (NaN rows for nodes never fed). pool: the last cycle's
    `dynamic_tree.Pool`, selected: the pool indices of the tree's drafts (node j + 1 is
    pool candidate selected[j]). calibration_records: (confidence, accepted) per verified node
    whose parent was accepted, appended in `accept`; feed to `dynamic_tree.calibration_table`
    or `calibration.fit_calibration`. calibration, sampled_tree: see the module docstring.
    sizer: a callable sampling -> `minieagle.sizing.Sizing`, called in `begin`; its sizes
    replace depth/top_k/total_tokens (given ones, not None, constrain its search), and
    `sizing` keeps the last answer.
    """

    def __init__(
        self,
        target_params,
        target_config: LlamaConfig,
        head: dict,
        head_cfg,
        vocab=None,
        *,
        depth: int | None = DEFAULT_DEPTH,
        top_k: int | None = DEFAULT_TOP_K,
        total_tokens: int | None = DEFAULT_TOTAL_TOKENS,
        calibration=None,
        sampled_tree: bool | None = False,
        sizer=None,
        expand_threshold: float = 0.0,
    ):
        if (
            isinstance(expand_threshold, bool)
            or not isinstance(expand_threshold, (int, float, np.floating))
            or not 0.0 <= expand_threshold <= 1.0
        ):
            raise InvalidInputError(
                f"expand_threshold={expand_threshold!r} must be a number in [0, 1], the value "
                "(the path's chance of acceptance, as its scores estimate it) a candidate needs "
                "to be expanded; pass 0 to expand every candidate (EAGLE-2) or e.g. 0.5"
            )
        if sizer is None:
            _check_sizes(depth, top_k, total_tokens)
        else:  # sizes given with a sizer are constraints of its search; None = its choice
            for name, value, minimum in (("depth", depth, 1), ("top_k", top_k, 1),
                                         ("total_tokens", total_tokens, 2)):  # fmt: skip
                if value is not None:
                    _check_positive(name, value, minimum, "a size, or None to let sizing choose")
            if top_k is not None and total_tokens is not None:
                _check_top_k_fits(top_k, total_tokens)
        if calibration is not None and not _is_calibration(calibration):
            raise InvalidInputError(
                f"calibration is a {type(calibration).__name__}; pass a "
                "minieagle.calibration.Calibration (fit_calibration or load_calibration), "
                "TemperatureScores, a HeadCalibration (load_head_calibration) or None"
            )
        if sampled_tree is not None and not isinstance(sampled_tree, bool):
            raise InvalidInputError(
                f"sampled_tree={sampled_tree!r} must be True, False or None (decided when "
                "decoding begins)"
            )
        super().__init__(target_params, target_config, head, head_cfg, vocab)
        self._check_bounds(total_tokens)
        self.depth, self.top_k, self.total_tokens = depth, top_k, total_tokens
        self.calibration, self.sampled_tree = calibration, sampled_tree
        self.expand_threshold = float(expand_threshold)
        self.tree_sampled, self.active_calibration = False, None  # as decoding began
        self.sizer, self.sizing = sizer, None
        self.pool, self.selected = None, None
        self.calibration_records: list[tuple[float, bool]] = []
        self._verified = None  # (tree, confidence [N]) of the last proposal

    def begin(self, prompt_ids, features, sampling: SamplingParams) -> None:
        self.decide(sampling)
        self.draft_slots = self.depth * self.top_k  # the frontier nodes fed to the head a cycle
        super().begin(prompt_ids, features, sampling)

    def decide(self, sampling: SamplingParams) -> dict:
        """What this drafter decodes `sampling` with, decided when decoding begins: the sizes
        (the sizer's, if any), the tree (`tree_sampled`: the sampled_tree option, else the
        sizer's choice, else the sampled tree at T > 0) and the map (`active_calibration`).
        Returns them as plain data, for reports."""
        self._check_map_setting(sampling)  # before any sizing is measured
        if self.sizer is not None:  # sizes for this sampling setting (minieagle.sizing)
            self.sizing = self.sizer(sampling)
            self.depth, self.top_k = self.sizing.depth, self.sizing.top_k
            self.total_tokens = self.sizing.total_tokens
            self.drafts_nothing = self.total_tokens == 1  # no tree pays on this machine
            if not self.drafts_nothing:
                _check_sizes(self.depth, self.top_k, self.total_tokens)
        sampled = self.sampled_tree
        if sampled is None:  # the sizer's choice, else the tree that measured better at T > 0
            sampled = getattr(self.sizing, "sampled_tree", True)
        self.tree_sampled = bool(sampled) and not sampling.greedy
        self.active_calibration = self._calibration_for(sampling)
        used = self.active_calibration
        return {
            "depth": self.depth,
            "top_k": self.top_k,
            "total_tokens": self.total_tokens,
            "sampled_tree": self.tree_sampled,
            "calibration": None if used is None else used.setting,
        }

    def _check_map_setting(self, sampling: SamplingParams) -> None:
        """A single map must have been fitted for a setting this decoding can be in (either
        tree while the tree is still open)."""
        if self.calibration is None or callable(getattr(self.calibration, "for_setting", None)):
            return
        trees = (False, True) if self.sampled_tree is None else (self.sampled_tree,)
        settings = sorted({setting_name(sampling, sampled_tree=tree) for tree in trees})
        if self.calibration.setting not in settings:
            decoding = " or ".join(repr(name) for name in settings)
            raise InvalidInputError(
                f"the calibration was fitted for {self.calibration.setting!r} but this "
                f"decoding is {decoding}; pass the calibration fitted for it (one per "
                "sampling setting) or none"
            )

    def _calibration_for(self, sampling: SamplingParams):
        """The map to rank by in this decoding: a head's maps give the one for its setting
        (or None); a single map must have been fitted for it."""
        if self.calibration is None:
            return None
        want = setting_name(sampling, sampled_tree=self.tree_sampled)
        if callable(getattr(self.calibration, "for_setting", None)):
            return self.calibration.for_setting(want)
        if self.calibration.setting != want:
            raise InvalidInputError(
                f"the calibration was fitted for {self.calibration.setting!r} but this "
                f"decoding is {want!r}; pass the calibration fitted for {want!r} (one per "
                "sampling setting) or none"
            )
        return self.calibration

    def _check_bounds(self, total_tokens) -> None:
        """total_tokens within the context, so that top_k (<= total_tokens - 1) is bounded by
        it too: a larger tree never fits, and the expansion's cost grows with top_k squared.
        (A top_k above the draft vocabulary drafts every token of it: no bound needed.)"""
        context = self.target_config.max_position_embeddings
        if total_tokens is not None and total_tokens > context:
            raise InvalidInputError(
                f"total_tokens={total_tokens} exceeds the context of {context} tokens "
                f"(max_position_embeddings); pass total_tokens <= {context}, e.g. 26"
            )

    def propose(self, root: int, rng: Randomness, max_nodes: int) -> Tree:
        self._verified, self.pool, self.selected = None, None, None
        if not self._start_cycle(max_nodes):
            return Tree(np.asarray([root]), np.asarray([-1]))
        k = self.top_k
        f_root, root_logits = self.root_prediction
        predicted, logits, slot = {0: f_root}, {0: root_logits}, {}  # by node id = pool index + 1
        head_outputs = (predicted, logits, slot)  # this cycle's, filled in level by level
        proposals = [] if self.tree_sampled else None
        self._drafts = min(self.total_tokens, max_nodes) - 1  # what a sampled level may keep
        ### BEGIN SOLUTION eagle2_tree
        drafts = min(self.total_tokens, max_nodes) - 1
        steps = min(self.depth, drafts - 1)  # levels deeper than `drafts` cannot be chosen
        pool = self._add_level(empty_pool(), [-1], root_logits[None, :], rng, proposals)
        frontier = self._expandable(pool, next_frontier(pool, 0, k))
        for _ in range(steps):
            if len(frontier) == 0:  # no candidate reaches expand_threshold: stop growing
                break
            rows = self._frontier_logits(root, pool, frontier, head_outputs)  # [F, V]
            start = len(pool)
            pool = self._add_level(pool, frontier, rows, rng, proposals)  # children appended
            frontier = self._expandable(pool, next_frontier(pool, start, k))
        selected = rerank(pool.scores, pool.parents, drafts)
        tree = build_tree(root, pool, selected, proposals)
        ### END SOLUTION
        self.pool, self.selected = pool, selected
        fed_rows = enumerate([-1, *selected.tolist()])
        self._draft_rows = (len(tree), {n: logits[c + 1] for n, c in fed_rows if c + 1 in logits})
        confidence = np.concatenate([[np.nan], np.exp(pool.log_q[selected])])  # [N]
        self._verified = (tree, confidence)
        return tree

    def _expandable(self, pool, frontier) -> np.ndarray:
        """The frontier (pool indices) less the candidates whose value, exp(score), is below
        `expand_threshold`: all of it at the default 0 (EAGLE-2 expands its top_k whatever
        their values)."""
        if self.expand_threshold <= 0:
            return frontier
        return frontier[pool.scores[frontier] >= np.log(self.expand_threshold)]

    def accept(self, tokens, features, next_token: int) -> None:
        if self._verified is not None:
            self.calibration_records += _reached_nodes(*self._verified, tokens)
            self._verified = None
        super().accept(tokens, features, next_token)

    def _frontier_logits(self, root: int, pool, frontier, head_outputs) -> np.ndarray:
        """The head's logits [F, V] (host) at the frontier (pool indices [F], all of the newest
        level): ONE head forward, each candidate fed as (f̂ at its parent, its token) with the
        tree mask and its depth's position. head_outputs: this cycle's (predicted, logits,
        slot) by node id = pool index + 1 (`HeadDrafter._feed_level`); the frontier's are
        added to them."""
        predicted, logits, slot = head_outputs
        nodes = [int(i) + 1 for i in frontier]
        node_tokens = [root, *pool.tokens.tolist()]
        node_parents = [-1, *(pool.parents + 1).tolist()]
        self._feed_level(nodes, node_tokens, node_parents, predicted, logits, slot)
        return np.stack([logits[n] for n in nodes])  # [F, V]

    def _add_level(self, pool, expanded, logits: np.ndarray, rng: Randomness, proposals):
        """The pool with the children of `expanded` (pool indices [F], [-1] = the root) whose
        head logits are `logits` [F, V]: each node's top_k tokens, or, when `proposals` is a
        list (the sampled tree), top_k draws, whose proposals are appended to it.

        A sampled level is scored before anything is drawn (a draw's score depends on its rank
        and its parent's distribution only), and only the draws that can still be used are
        made: a prefix of each node's draws, up to its last child that is in the next
        frontier or among the best total_tokens - 1 candidates of the pool so far (one
        ranked lower already can never be kept: later levels only add candidates). The
        children never drawn hold token -1 and are never fed nor kept. Which draws are made
        depends on scores alone, never on a drawn token, so the kept children of a node are a
        prefix of its draws as before, and the law is the same (docs/calibration.md); the
        drafting is cheaper (at 26 nodes about 60 draws a cycle instead of 328)."""
        if proposals is None:
            tokens, confidence = top_children_of_logits(logits, self.top_k)  # [F, k]
            log_accept = self._log_accept(logits, tokens, confidence)
            return add_children(pool, expanded, tokens, confidence, log_accept)
        # An EAGLE-3 head's logits are -inf outside its draft vocabulary: weight 0 there.
        finite = np.where(np.isneginf(logits), np.finfo(np.float64).min, logits)  # [F, V]
        q = target_distributions(finite, self.sampling)  # [F, V] the processed draft laws
        if self.top_k == 1:  # a sampled chain: one node (F = 1) and its first draw
            return self._add_first_draw(pool, expanded, q, rng, proposals)
        return self._add_draws(pool, expanded, q, rng, proposals)

    def _add_draws(self, pool, expanded, q: np.ndarray, rng: Randomness, proposals):
        """`_add_level`'s sampled children of `expanded` [F], drawn from their processed draft
        laws q [F, V] as its docstring says."""
        counts = np.minimum(self.top_k, np.count_nonzero(q, axis=-1))  # [F] draws per node
        confidence = self._draw_confidence(q, int(counts.max()))  # [F, m]
        start = len(pool)
        if (counts == counts[0]).all():  # the whole level at once (no filter emptied a row)
            groups = [(expanded, confidence)]
        else:  # node by node, each with its own number of draws
            rows = zip(expanded, confidence, counts, strict=True)
            groups = [([e], c[None, :n]) for e, c, n in rows]
        for parents, drawn_confidence in groups:
            log_confidence = np.log(drawn_confidence)  # [F or 1, m]
            unknown = np.full(log_confidence.shape, -1, dtype=np.int64)  # drawn below if usable
            log_accept = self._log_accept(None, None, log_confidence)
            pool = add_children(pool, parents, unknown, log_confidence, log_accept)
        proposals += [None] * int(counts.sum())
        usable = self._usable(pool, start)  # [M - start]
        firsts = start + np.cumsum(counts) - counts  # [F] each node's first child
        for first, count, row in zip(firsts.tolist(), counts.tolist(), q, strict=True):
            wanted = np.flatnonzero(usable[first - start : first - start + count])
            drawn = draw_children(row, int(wanted[-1]) + 1 if len(wanted) else 0, rng)
            for j, (token, proposal) in enumerate(drawn):  # EAGLE-1's draws
                pool.tokens[first + j] = token
                proposals[first + j] = proposal
        return pool

    def _add_first_draw(self, pool, expanded, q: np.ndarray, rng: Randomness, proposals):
        """`_add_draws` for a sampled chain (top_k 1) without its bookkeeping for many draws:
        the one expanded node (expanded [1], q [1, V]) draws one child, scored as every first
        draw is (confidence 1, whatever the token). The same pool, proposals and randomness as
        `_add_draws` (tests/test_eagle2.py), about 0.1 ms a level less on the tiny target."""
        [(token, proposal)] = draw_children(q[0], 1, rng)
        sure = np.zeros((1, 1))  # log confidence of a first draw
        log_accept = self._log_accept(None, None, sure)
        proposals.append(proposal)
        return add_children(pool, expanded, np.asarray([[token]]), sure, log_accept)

    def _usable(self, pool, start: int) -> np.ndarray:
        """bool [M - start]: which candidates of the newest level (pool[start:]) may still be
        fed or kept: the next frontier, and those ranked among the best total_tokens - 1 of
        the pool by rerank's key (-score, depth, pool index)."""
        if len(pool) - start <= self.top_k:  # the whole level is the next frontier (a chain)
            return np.ones(len(pool) - start, dtype=bool)
        usable = np.zeros(len(pool) - start, dtype=bool)
        usable[next_frontier(pool, start, self.top_k) - start] = True
        depth = pool_depths(pool.parents)
        ranked = np.lexsort((np.arange(len(pool)), depth, -pool.scores))
        best = ranked[: self._drafts]
        usable[best[best >= start] - start] = True
        return usable

    def _draw_confidence(self, q: np.ndarray, count: int) -> np.ndarray:
        """Confidences [F, count] of the draws from the processed draft distributions q [F, V],
        fixed before drawing (module docstring): the first draw 1, draw j > 1 the j-th largest
        q of its row."""
        confidence = np.take_along_axis(q, top_k_rows(q, count), axis=-1)
        confidence[:, 0] = 1.0
        return confidence

    def _log_accept(self, logits, tokens, confidence) -> np.ndarray:
        """The children's score terms [F, k]: their log confidence (EAGLE-2), its calibrated
        log acceptance, or their temperature-scaled log-softmax. logits [F, V]: the expanded
        nodes' head logits, tokens [F, k] their children (both None for sampled children,
        which are scored before they are drawn)."""
        used = self.active_calibration
        if used is None:
            return confidence
        if _scores_logits(used):
            return used.log_acceptance_of_logits(logits, tokens)
        return used.log_acceptance(confidence)


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


def _scores_logits(calibration) -> bool:
    """Whether `calibration` scores children from their parent's logits (`TemperatureScores`)
    rather than from their confidence alone."""
    return callable(getattr(calibration, "log_acceptance_of_logits", None))


def _is_calibration(calibration) -> bool:
    """Whether `calibration` is shaped like a `minieagle.calibration.Calibration`,
    `TemperatureScores` or a `HeadCalibration` (the drafter only calls these members)."""
    one = callable(getattr(calibration, "log_acceptance", None)) or _scores_logits(calibration)
    maps = callable(getattr(calibration, "for_setting", None))
    return (one or maps) and isinstance(getattr(calibration, "setting", None), str)


def _check_sizes(depth, top_k, total_tokens) -> None:
    _check_positive("depth", depth, 1, "expansion steps such as 5")
    _check_positive("top_k", top_k, 1, "a branching such as 8")
    _check_positive("total_tokens", total_tokens, 2, "nodes verified (root included), e.g. 26")
    _check_top_k_fits(top_k, total_tokens)


def _check_top_k_fits(top_k: int, total_tokens: int) -> None:
    if top_k > total_tokens - 1:
        # More candidates per level than the tree can keep only cost time: the expansion
        # grows with top_k squared, and at most total_tokens - 1 drafts are kept.
        raise InvalidInputError(
            f"top_k={top_k} exceeds total_tokens - 1 = {total_tokens - 1}, the drafts a tree "
            f"of {total_tokens} nodes keeps; pass top_k <= {total_tokens - 1} or raise "
            "total_tokens"
        )


def _check_positive(name: str, value, minimum: int, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(f"{name}={value!r} must be an integer >= {minimum}; pass {example}")
