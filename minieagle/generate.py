"""The speculative loop, the same for every method: draft a tree, verify it in one target forward,
keep the accepted path in the KV cache, tell the drafter, repeat.

Vanilla decoding is this loop with a drafter that proposes nothing (a tree of just the root): one
target forward per emitted token. Every method differs only in its drafter (`minieagle.drafters`);
the loop, the tree type, the verifier and the cache surgery are shared.

Bookkeeping: the target's KV cache holds every emitted token except the last one, the *root* of
the next tree. The prompt's last token is the first root.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from minieagle import inference, model
from minieagle import tree as trees
from minieagle.backend import to_device, to_host
from minieagle.block_verify import verify_block
from minieagle.config import LlamaConfig
from minieagle.drafters import Drafter, NoDrafter
from minieagle.errors import InvalidInputError
from minieagle.kvcache import KVCache
from minieagle.sampling import Randomness, SamplingParams, SeededRandomness, target_distribution
from minieagle.verify import verify

# How a drafted tree is judged (docs/lossless.md): "block" judges every drafted path as one block,
# leaves first (`block_verify`: on a chain never fewer accepted tokens than token by token, in
# expectation; on trees more on the tiny target's heads' drafts, docs/lossless.md §6);
# "token" judges every draft token by token from the root (`verify`, recursive rejection
# sampling). Both are lossless and give the same greedy verdicts.
VERIFIERS = {"block": verify_block, "token": verify}


@dataclass
class GenerationResult:
    """What one call emitted and what it cost."""

    tokens: list[int]  # the new tokens only (an end-of-text token, if emitted, included)
    prompt_length: int
    stop_reason: str  # "eos", "max_new_tokens" or "context_full"
    target_forwards: int  # verification forwards (one per cycle), prefill excluded
    accepted_per_cycle: list[int] = field(default_factory=list)  # drafts the verifier accepted
    emitted_per_cycle: list[int] = field(default_factory=list)  # tokens returned to the caller
    drafted_depth_per_cycle: list[int] = field(default_factory=list)  # the tree's depth
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    draft_seconds: float = 0.0  # of decode_seconds: in the drafter's propose
    tree_sizes: list[int] = field(default_factory=list)  # nodes verified per cycle, root included

    @property
    def tau(self) -> float:
        """Acceptance length: tokens emitted per target forward, bonus token included (NaN
        before the first forward). Emitted means returned: drafts the verifier accepted but
        `max_new_tokens` or end-of-text cut off do not count, so the last cycle may add fewer
        than `accepted_per_cycle[-1] + 1`."""
        return emitted_per_forward([self])

    def acceptance_by_depth(self, max_depth: int) -> list[float]:
        """n-alpha: at depth n+1, the fraction of cycles that accepted a token there among the
        cycles that reached depth n with a draft below it (all earlier drafts accepted)."""
        rates = []
        for depth in range(1, max_depth + 1):
            reached = sum(
                1
                for a, d in zip(self.accepted_per_cycle, self.drafted_depth_per_cycle, strict=True)
                if a >= depth - 1 and d >= depth
            )
            passed = sum(1 for a in self.accepted_per_cycle if a >= depth)
            rates.append(passed / reached if reached else float("nan"))
        return rates

    @property
    def ms_per_token(self) -> float:
        """Decoding time per emitted token after the prefill, in milliseconds."""
        return 1e3 * self.decode_seconds / max(1, len(self.tokens))


class _TargetDistributions:
    """Row i: the processed target distribution after tree node i (float64 host [V]), computed
    the first time verification asks for it. Token-by-token verification reads only the nodes
    it walks (the accepted path and the siblings tried), block verification every node of
    positive weight; neither pays for the rows it never reads."""

    def __init__(self, logits, sampling: SamplingParams):
        self.logits, self.sampling, self.rows = logits, sampling, {}

    def __len__(self) -> int:
        return len(self.logits)

    def __getitem__(self, node: int) -> np.ndarray:
        if node not in self.rows:
            self.rows[node] = target_distribution(self.logits[node], self.sampling)
        return self.rows[node]


def emitted_per_forward(results) -> float:
    """τ pooled over several generations: all tokens emitted / all target forwards (NaN when
    there was no forward). The one definition the CLI, the benchmarks and the notebooks use."""
    forwards = sum(len(r.emitted_per_cycle) for r in results)
    return sum(sum(r.emitted_per_cycle) for r in results) / forwards if forwards else float("nan")


def _is_int(value) -> bool:
    """A Python or NumPy integer; bool is not (True is no token id or count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_prompt(config: LlamaConfig, prompt_ids, max_new_tokens: int) -> None:
    """Errors for requests the model cannot continue.

    prompt_ids: a list, tuple or 1-D integer array of token ids in [0, vocab_size), 1 to
    max_position_embeddings of them (the last one is fed at position n - 1, so a prompt that
    fills the context still gets one token). max_new_tokens: an integer >= 0."""
    if isinstance(prompt_ids, str):
        raise InvalidInputError(
            "prompt_ids is a str; encode text with the tokenizer first: "
            "tokenizer.encode(text, add_bos=True)"
        )
    if isinstance(prompt_ids, np.ndarray):
        if prompt_ids.ndim != 1 or not np.issubdtype(prompt_ids.dtype, np.integer):
            raise InvalidInputError(
                f"prompt_ids is an array of shape {prompt_ids.shape} and dtype "
                f"{prompt_ids.dtype}; pass a 1-D integer array (or a list) of token ids"
            )
    elif not isinstance(prompt_ids, Sequence) or isinstance(prompt_ids, (bytes, bytearray)):
        raise InvalidInputError(
            f"prompt_ids is a {type(prompt_ids).__name__}; pass a list of host int token ids, "
            "such as tokenizer.encode(text, add_bos=True)"
        )
    else:
        for i, token in enumerate(prompt_ids):
            if not _is_int(token):
                raise InvalidInputError(
                    f"prompt_ids[{i}]={token!r} is a {type(token).__name__}, not a token id; "
                    "pass ints, such as tokenizer.encode(text, add_bos=True) returns"
                )
    n, V = len(prompt_ids), config.vocab_size
    if n == 0:
        raise InvalidInputError(
            "the prompt is empty; pass at least one token (e.g. the <|bos|> id)"
        )
    for i, token in enumerate(prompt_ids):
        if not 0 <= token < V:
            raise InvalidInputError(
                f"token id {int(token)} is outside [0, vocab_size={V}) (at prompt_ids[{i}]); "
                "encode text with the tokenizer saved beside this model"
            )
    if not _is_int(max_new_tokens):
        raise InvalidInputError(
            f"max_new_tokens={max_new_tokens!r} is a {type(max_new_tokens).__name__}; pass a "
            "whole number of tokens such as 64"
        )
    if max_new_tokens < 0:
        raise InvalidInputError(
            f"max_new_tokens={max_new_tokens} is negative; pass a count such as 64"
        )
    if n > config.max_position_embeddings:
        raise InvalidInputError(
            f"the prompt has {n} tokens but the context holds "
            f"max_position_embeddings={config.max_position_embeddings}; shorten the prompt to "
            f"at most {config.max_position_embeddings} tokens"
        )


def generate(
    params,
    config: LlamaConfig,
    prompt_ids,
    *,
    drafter: Drafter | None = None,
    max_new_tokens: int = 64,
    sampling: SamplingParams | None = None,
    rng: Randomness | None = None,
    seed: int | None = None,
    stop_at_eos: bool = True,
    stop_token_ids: Iterable[int] | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
    fast: bool = True,
    verification: str = "block",
) -> GenerationResult:
    """Continue `prompt_ids` (host ints) with the target, drafts from `drafter` (none: vanilla).

    params: the target's HF-named parameters, or their `inference.prepare` view (the target
    runs on that fast path either way; pass the view to prepare it once for many calls).

    Stops at end-of-text (if `stop_at_eos`), after `max_new_tokens`, or when the context is full.
    End-of-text is any id in `stop_token_ids` (default: config.eos_token_id; a chat adds its
    end-of-turn token). Sampling is greedy by default; `rng` (any `Randomness`) or `seed` drives
    T > 0 and drafting. `on_tokens(tokens)`, when given, is called after every cycle with the
    tokens that cycle emitted (the stop token included), so a caller can stream them.
    fast=False runs the target on the readable `model.forward` instead of the fast path (the
    same tokens; for comparisons and stepping through). verification: how a drafted tree is
    judged, a key of `VERIFIERS`.
    """
    if verification not in VERIFIERS:
        raise InvalidInputError(
            f"verification={verification!r} is not one of {sorted(VERIFIERS)}; pass 'block'"
        )
    judge = VERIFIERS[verification]
    sampling = sampling or SamplingParams()
    rng = rng or SeededRandomness(seed)
    drafter = drafter or NoDrafter()
    check_prompt(config, prompt_ids, max_new_tokens)
    stop_ids = {config.eos_token_id} if stop_token_ids is None else set(stop_token_ids)
    if not all(_is_int(token) for token in stop_ids):
        raise InvalidInputError(
            f"stop_token_ids={sorted(stop_ids, key=str)} holds a non-integer; pass token ids"
        )
    prompt_ids = [int(t) for t in prompt_ids]
    if fast:
        target = inference.prepare(params, config)
        params = target.params

        def target_forward(ids, tree_parents=None, **kwargs):
            return target.forward(ids, lazy_logits=True, tree_parents=tree_parents, **kwargs)

    else:
        params = params.params if isinstance(params, inference.PreparedTarget) else params

        def target_forward(ids, tree_parents=None, **kwargs):  # every row computed: no parents
            return model.forward(params, config, ids, **kwargs)[:2]

    embed = params["model.embed_tokens.weight"]  # arrays we make go where the weights are
    context = config.max_position_embeddings
    cache = KVCache.for_model(config, params, capacity=context)
    features = tuple(drafter.feature_keys)

    start = time.perf_counter()
    hidden = {}
    if len(prompt_ids) > 1:
        _, hidden = target_forward(
            to_device(prompt_ids[:-1], embed), cache=cache, output_hidden=features
        )
    drafter.begin(prompt_ids, hidden, sampling)
    result = GenerationResult([], len(prompt_ids), "max_new_tokens", 0)
    result.prefill_seconds = time.perf_counter() - start

    root = prompt_ids[-1]
    while len(result.tokens) < max_new_tokens:
        room = context - cache.length  # tree nodes that still fit in the context
        if room < 1:
            result.stop_reason = "context_full"
            break
        drafting = time.perf_counter()
        draft_tree = drafter.propose(root, rng, max_nodes=room)
        result.draft_seconds += time.perf_counter() - drafting
        _check_draft(draft_tree, config.vocab_size)
        cached = cache.length
        logits, hidden = target_forward(
            to_device(draft_tree.tokens, embed),
            position_ids=to_device(trees.position_ids(draft_tree, cached), embed),
            attention_mask=to_device(trees.attention_mask(draft_tree, cached), embed),
            cache=cache,
            output_hidden=features,
            tree_parents=draft_tree.parents,  # a chain's logits rows are computed together
        )
        verdict = judge(draft_tree, _TargetDistributions(logits, sampling), rng)
        path = [0, *verdict.accepted]
        cache.keep(cached, path)
        kept_tokens = [int(t) for t in draft_tree.tokens[path]]
        drafter.accept(
            kept_tokens,
            {k: v[to_device(path, embed)] for k, v in hidden.items()},
            verdict.next_token,
        )
        result.target_forwards += 1
        result.accepted_per_cycle.append(len(verdict.accepted))
        result.drafted_depth_per_cycle.append(int(trees.depths(draft_tree).max()))
        result.tree_sizes.append(len(draft_tree))
        before = len(result.tokens)
        for token in kept_tokens[1:] + [verdict.next_token]:
            result.tokens.append(token)
            if stop_at_eos and token in stop_ids:
                result.stop_reason = "eos"
                break
            if len(result.tokens) == max_new_tokens:
                break
        result.emitted_per_cycle.append(len(result.tokens) - before)
        if on_tokens is not None:
            on_tokens(result.tokens[before:])
        if result.stop_reason == "eos":
            break
        root = verdict.next_token
    result.decode_seconds = time.perf_counter() - start - result.prefill_seconds
    return result


def _check_draft(tree: trees.Tree, vocab_size: int) -> None:
    """A drafter's tree names target token ids, and its proposals are distributions over the
    target's vocabulary: a draft model with another tokenizer fails here, by name."""
    bad = tree.tokens[(tree.tokens < 0) | (tree.tokens >= vocab_size)]
    lengths = {len(q) for q in tree.proposals if q is not None} - {vocab_size}
    if len(bad) or lengths:
        drafted = f"token id {int(bad[0])}" if len(bad) else f"proposals of {min(lengths)} tokens"
        raise InvalidInputError(
            f"the drafter drafted {drafted}, outside the target's vocabulary of {vocab_size} "
            "tokens; draft with a model or head that shares the target's tokenizer"
        )


def greedy_reference(params, config: LlamaConfig, prompt_ids, max_new_tokens: int) -> list[int]:
    """Greedy continuation without any cache: a full forward over the whole sequence per token.
    Slow and obviously right; the oracle the cached loop is tested against."""
    ids = [int(t) for t in prompt_ids]
    out = []
    for _ in range(max_new_tokens):
        logits, _, _ = model.forward(
            params, config, to_device(ids, params["model.embed_tokens.weight"])
        )
        token = int(np.argmax(to_host(logits[-1])))
        out.append(token)
        ids.append(token)
    return out
