"""The fast inference path of minieagle.inference against the readable forwards it replaces.

`prepare(params, config).forward` must equal `model.forward` (float64, to 1e-12 relative) in the
logits, in every feature tap (layer 0, a middle layer, L and "final") and in the keys and values
it leaves in the KV cache, through a whole decoding cycle: a prompt's prefill, a decoded token, a
draft-tree block under its tree mask and depth positions, KV-cache surgery keeping one
root-to-leaf path, and the next step. Hypothesis draws the prompts, trees and accepted paths; the
targets cover grouped-query and multi-head attention, tied and untied LM heads. The prepared
EAGLE-1 head (every input ablation, with and without fc bias) and the prepared EAGLE-3 head
(three fused features or one, full or reduced draft vocabulary; target and own features) must
equal `head_forward` the same way. Norm gains are moved away from 1 so that every weight matters.

Controls show that each check fails on a deliberately broken fast path (RoPE forgotten, the mask
ignored, RMSNorm without its weight). Bad inputs raise InvalidInputError and leave the cache as
it was; a context of 10^9 positions builds RoPE rows only for the positions used; and on the
array-api-strict lane the path runs on a non-default device and equals the NumPy run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import inference, model
from minieagle.backend import put, to_host, zeros
from minieagle.config import LlamaConfig, preset
from minieagle.errors import InvalidInputError
from minieagle.heads import eagle1, eagle3
from minieagle.kvcache import KVCache
from minieagle.tree import Tree, attention_mask, path_to, position_ids

TOL = 1e-12  # float64, relative to max(1, |reference|): the paths differ in rounding only
BROKEN = 1e-6  # a broken fast path must miss by more than this

# Grouped-query attention (4 query heads share 2 key/value heads) and plain multi-head attention;
# three layers, so a middle tap and EAGLE-3's three aux layers exist. A wide initialisation makes
# the softmaxes peaked, so a wrong mask or position shows.
TARGETS = {
    "gqa": preset("nano").replace(num_hidden_layers=3, initializer_range=0.3),
    "mha": LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.3,
    ),
}
assert TARGETS["gqa"].num_key_value_heads < TARGETS["gqa"].num_attention_heads
assert TARGETS["mha"].num_key_value_heads == TARGETS["mha"].num_attention_heads


def _perturb_norms(params: dict, seed: int) -> dict:
    """The parameters with every norm gain drawn around 1 instead of at 1 (float64)."""
    rng = np.random.default_rng([seed, 100])
    moved = {n: 1.0 + 0.3 * rng.standard_normal(v.shape) for n, v in params.items() if "norm" in n}
    return {**params, **moved}


@cache
def _target(name: str, tied: bool = True) -> tuple[LlamaConfig, dict]:
    """(config, float64 params with moved norm gains) of a target; untied adds lm_head.weight."""
    config = TARGETS[name].replace(tie_word_embeddings=tied)
    params = _perturb_norms(model.init_params(config, seed=3, dtype=np.float64), seed=3)
    assert ("lm_head.weight" in params) == (not tied)
    return config, params


def _params_and_config(name: str, tied: bool = True) -> tuple[dict, LlamaConfig]:
    config, params = _target(name, tied)
    return params, config


def _hidden_keys(config: LlamaConfig) -> tuple:
    L = config.num_hidden_layers
    return (0, L // 2, L, "final")


# ---------------------------------------------------------------------------- comparison


def _error(fast, reference, where: str = "out") -> float:
    """Largest |fast - reference| relative to max(1, max |reference|) over matching structures
    (dicts, tuples, lists of arrays); a structure, shape or dtype mismatch fails outright."""
    if isinstance(reference, dict):
        assert fast.keys() == reference.keys(), f"{where}: keys {fast.keys()} != {reference.keys()}"
        return max((_error(fast[k], reference[k], f"{where}[{k!r}]") for k in reference), default=0)
    if isinstance(reference, list | tuple):
        assert len(fast) == len(reference), f"{where}: {len(fast)} != {len(reference)} items"
        pairs = enumerate(zip(fast, reference, strict=True))
        return max((_error(f, r, f"{where}[{i}]") for i, (f, r) in pairs), default=0.0)
    fast, reference = to_host(fast), to_host(reference)
    assert fast.shape == reference.shape, f"{where}: shape {fast.shape} != {reference.shape}"
    assert fast.dtype == reference.dtype, f"{where}: dtype {fast.dtype} != {reference.dtype}"
    if reference.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(reference))))
    return float(np.max(np.abs(fast - reference))) / scale


def _cache_error(fast: KVCache, reference: KVCache) -> float:
    """`_error` over the valid keys and values of every layer; the lengths must agree."""
    assert fast.length == reference.length, f"cache lengths {fast.length} != {reference.length}"
    n = reference.length
    contents = [[b[:, :, :n, :] for b in c.keys + c.values] for c in (fast, reference)]
    return _error(*contents, where="cache")


# ---------------------------------------------------------------------------- decoding cycles


@dataclass(frozen=True)
class Case:
    """One decoding cycle. Token values are reduced modulo the vocabulary of the model they run
    on; `accepted` is the tree node whose root-to-node path the cache keeps."""

    prompt: tuple[int, ...]
    decoded: int
    tree_tokens: tuple[int, ...]
    parents: tuple[int, ...]
    accepted: int
    after: tuple[int, ...]

    def tree(self, vocab: int) -> Tree:
        return Tree(np.asarray(self.tree_tokens) % vocab, np.asarray(self.parents))

    def path(self) -> list[int]:
        return path_to(Tree(np.zeros(len(self.parents)), np.asarray(self.parents)), self.accepted)


def _ids(values, vocab: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64) % vocab


@st.composite
def cases(draw) -> Case:
    """Prompts of 1-10 tokens, trees of 1-8 nodes of any shape, any accepted node, 1-3 tokens
    after the surgery: at most 22 positions, inside every target's context."""
    token = st.integers(0, 10**6)
    n = draw(st.integers(1, 8))
    return Case(
        prompt=tuple(draw(st.lists(token, min_size=1, max_size=10))),
        decoded=draw(token),
        tree_tokens=tuple(draw(st.lists(token, min_size=n, max_size=n))),
        parents=(-1, *(draw(st.integers(0, i - 1)) for i in range(1, n))),
        accepted=draw(st.integers(0, n - 1)),
        after=tuple(draw(st.lists(token, min_size=1, max_size=3))),
    )


# A fixed cycle for the controls: a one-token prompt and one-token steps need no mask, so only
# the tree block (root 0; children 1, 2; 3 under 2; 4 under 1) reads one.
CONTROL = Case(
    prompt=(5,),
    decoded=17,
    tree_tokens=(3, 8, 1, 30, 12),
    parents=(-1, 0, 0, 2, 1),
    accepted=3,
    after=(9,),
)


def _target_errors(params: dict, config: LlamaConfig, case: Case) -> dict[str, float]:
    """The fast and the readable forward through one decoding cycle, each with its own cache.
    Returns per stage the largest relative error of the outputs (logits and every tap) and of
    the cache contents after it."""
    V, keys = config.vocab_size, _hidden_keys(config)
    prepared = inference.prepare(params, config)
    fast_cache, ref_cache = KVCache.for_model(config, params), KVCache.for_model(config, params)
    errors = {}

    def step(stage, ids, **placement):
        fast = prepared.forward(ids, cache=fast_cache, output_hidden=keys, **placement)
        ref = model.forward(params, config, ids, cache=ref_cache, output_hidden=keys, **placement)
        errors[stage] = max(_error(fast, ref[:2]), _cache_error(fast_cache, ref_cache))

    step("prefill", _ids(case.prompt, V))
    step("decode", _ids([case.decoded], V))
    start, tree = ref_cache.length, case.tree(V)
    mask, positions = attention_mask(tree, start), position_ids(tree, start)
    step("tree", tree.tokens, attention_mask=mask, position_ids=positions)
    for c in (fast_cache, ref_cache):
        c.keep(start, case.path())
    errors["keep"] = _cache_error(fast_cache, ref_cache)
    step("after", _ids(case.after, V))
    return errors


TARGET_PARAMS = [
    pytest.param(name, tied, id=f"{name}-{'tied' if tied else 'untied'}")
    for name in TARGETS
    for tied in (True, False)
]


@pytest.mark.parametrize(("name", "tied"), TARGET_PARAMS)
@settings(max_examples=15, deadline=None)
@given(case=cases())
def test_prepared_target_equals_model_forward_through_a_decoding_cycle(name, tied, case):
    """Logits, the taps 0, L // 2, L, "final" and the cached keys and values equal
    model.forward's after a prefill, a decoded token, a tree block and a kept path."""
    config, params = _target(name, tied)
    errors = _target_errors(params, config, case)
    assert max(errors.values()) <= TOL, errors


# ---------------------------------------------------------------------------- EAGLE-1 head


EAGLE1_VARIANTS = {
    "default": {},
    "token-only": {"inputs": "token"},
    "feature-only": {"inputs": "feature"},
    "no-fc-bias": {"fc_bias": False},
}


@cache
def _eagle1(name: str, variant: str):
    config, params = _target(name)
    cfg = eagle1.Eagle1Config.from_target(config, **EAGLE1_VARIANTS[variant])
    head = _perturb_norms(eagle1.init_head(cfg, seed=4, dtype=np.float64), seed=4)
    return config, params, cfg, head


def _head_cycle(fast_step, ref_step, fast_cache, ref_cache, case, vocab, first_features,
                tree_features, after_features):  # fmt: skip
    """A head's decoding cycle, as `_target_errors`: the prompt's tokens shifted by one (x_{t+1})
    against `first_features`, a tree block under its mask and positions, a kept path, the tokens
    after. The `*_features` are functions of the number of positions."""
    errors = {}

    def step(stage, tokens, features, **kwargs):
        fast = fast_step(tokens, features, fast_cache, **kwargs)
        ref = ref_step(tokens, features, cache=ref_cache, **kwargs)[:2]
        errors[stage] = max(_error(fast, ref), _cache_error(fast_cache, ref_cache))

    step("prefill", _ids((*case.prompt[1:], case.decoded), vocab), first_features)
    start, tree = ref_cache.length, case.tree(vocab)
    mask, positions = attention_mask(tree, start), position_ids(tree, start)
    step("tree", tree.tokens, tree_features(len(tree)), attention_mask=mask,
         position_ids=positions)  # fmt: skip
    for c in (fast_cache, ref_cache):
        c.keep(start, case.path())
    errors["keep"] = _cache_error(fast_cache, ref_cache)
    step("after", _ids(case.after, vocab), after_features(len(case.after)))
    return errors


def _eagle1_errors(name: str, variant: str, case: Case) -> dict[str, float]:
    """PreparedEagle1Head against eagle1.head_forward through one cycle: the prompt's "final"
    features first, then random features standing in for the head's own predictions."""
    config, params, cfg, head = _eagle1(name, variant)
    V, d = config.vocab_size, config.hidden_size
    rng = np.random.default_rng(len(case.prompt))
    _, hidden, _ = model.forward(params, config, _ids(case.prompt, V), output_hidden=("final",))
    fast = inference.PreparedEagle1Head(
        head, cfg, params, inference.prepare(params, config).lm_head
    )

    def reference(tokens, features, **kwargs):
        return eagle1.head_forward(head, cfg, params, tokens, features, **kwargs)

    def features(n):
        return rng.standard_normal((n, d))

    caches = [eagle1.new_head_cache(cfg, head, capacity=64) for _ in range(2)]
    return _head_cycle(fast.forward, reference, *caches, case, V, hidden["final"],
                       features, features)  # fmt: skip


@pytest.mark.parametrize("variant", list(EAGLE1_VARIANTS))
@pytest.mark.parametrize("name", list(TARGETS))
@settings(max_examples=8, deadline=None)
@given(case=cases())
def test_prepared_eagle1_head_equals_head_forward(name, variant, case):
    """Predicted features, logits and the head's cache equal head_forward's, causal and under a
    tree mask, for the paper's head and its token-only, feature-only and bias-free variants."""
    errors = _eagle1_errors(name, variant, case)
    assert max(errors.values()) <= TOL, errors


# ---------------------------------------------------------------------------- EAGLE-3 head


EAGLE3_VARIANTS = {
    "three-aux-full-vocab": {"aux_layers": (0, 1, 2)},
    "top-aux-draft-vocab": {"aux_layers": (3,), "draft_vocab_size": 17},
}


@cache
def _eagle3(name: str, variant: str):
    config, params = _target(name)
    cfg = eagle3.Eagle3Config.from_target(config, **EAGLE3_VARIANTS[variant])
    head = _perturb_norms(eagle3.init_head(cfg, seed=5, dtype=np.float64), seed=5)
    return config, params, cfg, head


def _eagle3_errors(name: str, variant: str, case: Case, tree_target_features: bool):
    """PreparedEagle3Head against eagle3.head_forward through one cycle: the prompt's fused
    target features first (target_features=True), the tree block with fused target features or
    width-d features of the head's own (tree_target_features), then the head's own."""
    config, params, cfg, head = _eagle3(name, variant)
    V, d, k = config.vocab_size, config.hidden_size, cfg.num_features
    rng = np.random.default_rng(len(case.prompt))
    prompt = _ids(case.prompt, V)
    _, hidden, _ = model.forward(params, config, prompt, output_hidden=cfg.aux_layers)
    fused = eagle3.fuse_features(hidden, cfg.aux_layers)  # [T, k d]
    assert fused.shape == (len(prompt), k * d)
    fast = inference.PreparedEagle3Head(head, cfg, params)
    flags = iter([True, tree_target_features, False])  # one per step, in order

    def fast_step(tokens, features, cache, **kwargs):
        kwargs["target_features"] = flag = next(flags)
        assert features.shape[-1] == (k * d if flag else d)
        reference_flags.append(flag)
        return fast.forward(tokens, features, cache, **kwargs)

    reference_flags = []

    def reference(tokens, features, **kwargs):
        return eagle3.head_forward(head, cfg, params, tokens, features,
                                   target_features=reference_flags[-1], **kwargs)  # fmt: skip

    def tree_features(n):
        return rng.standard_normal((n, k * d if tree_target_features else d))

    def own_features(n):
        return rng.standard_normal((n, d))

    caches = [eagle3.new_head_cache(cfg, head, capacity=64) for _ in range(2)]
    errors = _head_cycle(fast_step, reference, *caches, case, V, fused, tree_features,
                         own_features)  # fmt: skip
    assert reference_flags == [True, tree_target_features, False]
    return errors


@pytest.mark.parametrize("tree_target_features", [True, False], ids=["tree-fused", "tree-own"])
@pytest.mark.parametrize("variant", list(EAGLE3_VARIANTS))
@pytest.mark.parametrize("name", list(TARGETS))
@settings(max_examples=8, deadline=None)
@given(case=cases())
def test_prepared_eagle3_head_equals_head_forward(name, variant, tree_target_features, case):
    """Hidden outputs, draft logits and the head's cache equal head_forward's for fused target
    features (through fc) and the head's own width-d features (fc skipped), causal and under a
    tree mask; with one aux layer both are d wide and only the flag tells them apart."""
    errors = _eagle3_errors(name, variant, case, tree_target_features)
    assert max(errors.values()) <= TOL, errors


# ---------------------------------------------------------------------------- controls


def _identity_rotate(x, cos, sin):
    return x  # RoPE forgotten


def _zero_bias(attention_mask, like):
    return zeros(tuple(attention_mask.shape), like=like)  # every position sees every other


_rms_norm = inference.rms_norm


def _unweighted_rms_norm(x, weight, eps):
    return _rms_norm(x, 1.0, eps)  # the gain dropped


BREAKAGES = {
    "rope-forgotten": ("rotate", _identity_rotate),
    "mask-ignored": ("mask_bias", _zero_bias),
    "norm-unweighted": ("rms_norm", _unweighted_rms_norm),
}
CHECKERS = {
    "target": lambda: _target_errors(*_params_and_config("gqa", tied=False), CONTROL),
    "eagle1": lambda: _eagle1_errors("gqa", "default", CONTROL),
    "eagle3": lambda: _eagle3_errors("gqa", "three-aux-full-vocab", CONTROL, False),
}


@pytest.mark.parametrize("checker", list(CHECKERS))
def test_the_control_cycle_passes_unbroken(checker):
    errors = CHECKERS[checker]()
    assert max(errors.values()) <= TOL, errors


@pytest.mark.parametrize("breakage", list(BREAKAGES))
@pytest.mark.parametrize("checker", list(CHECKERS))
def test_each_check_catches_a_broken_fast_path(monkeypatch, checker, breakage):
    """The same cycle misses by more than 1e-6 once one piece of the fast path is broken. The
    ignored mask shows in the tree block and not before: no earlier step of the control cycle
    reads a mask."""
    attribute, broken = BREAKAGES[breakage]
    monkeypatch.setattr(inference, attribute, broken)
    errors = CHECKERS[checker]()
    assert max(errors.values()) > BROKEN, errors
    if breakage == "mask-ignored":
        assert errors["prefill"] <= TOL, errors
        assert errors["tree"] > BROKEN, errors


@pytest.mark.parametrize("strict", [False, True])
def test_linear_is_the_product_for_every_row_count_and_weight_layout(strict):
    """`layout` keeps a small weight as [in, out] and a large one as blocks of its [out, in] rows;
    `linear` calls the product by the row count and the layout (its docstring); every way gives
    x @ W.T of the HF weight W [out, in], on NumPy and the strict array lane."""
    rng = np.random.default_rng(3)
    d_in = 384
    weights = {
        "small": rng.standard_normal((24, 16)),
        "large, blocks": rng.standard_normal((inference.SMALL_WEIGHT // d_in + 2, d_in)),
        "large, one block (out prime)": rng.standard_normal((701, 576)),  # 701 is prime
    }
    for name, hf in weights.items():
        laid = inference.layout(hf)
        if name == "small":
            assert laid.shape == (16, 24)
        else:
            nb, c, d = laid.shape
            assert (nb * c, d) == hf.shape and (nb == 1) == ("one block" in name), laid.shape
            assert nb == 1 or c * d <= inference.BLOCK
            assert np.shares_memory(laid, hf)  # a view, not a copy
        assert _error(inference.dense(laid), hf.T) == 0.0
        threshold = inference.ROWS_BY_BLOCKS  # the blocks' last row count, then the general product
        for rows in [*range(1, 20), threshold, threshold + 1]:  # 6 | 7: x @ block.T | block @ x.T
            x = rng.standard_normal((rows, hf.shape[1]))
            got = inference.linear(x, laid)
            if strict:
                xp = pytest.importorskip("array_api_strict")
                got = to_host(inference.linear(put(x, xp), inference.layout(put(hf, xp))))
            assert got.shape == (rows, hf.shape[0])
            assert _error(got, x @ hf.T) <= TOL, (name, rows)


@pytest.mark.parametrize(
    "parents, first_read",  # first_read: the rows reading row 0 computes, in one product
    [(None, [1]), ([-1, 0], [2]), ([-1, 0, 1, 2, 3], [5]), ([-1, 0, 0, 1, 2, 4, 4, 6], [1]),
     ([-1, 0, 1, 1, 3, 4], [2])],
    ids=["no tree", "chain of 2", "chain of 5", "tree", "fork under a chain"],
)  # fmt: skip
def test_lazy_logits_rows_and_what_one_read_computes(monkeypatch, parents, first_read):
    """Every row of `LazyLogits` is its row of the LM head's product, in any reading order;
    with the tree's parents, reading a row also computes, in the same product, the rows below
    it while each node has one child (a chain's whole rest), and never a row again."""
    rng = np.random.default_rng(5)
    d, V = 48, 3000  # V * d > SMALL_WEIGHT: the LM head in blocks, as SmolLM2's
    head = inference.layout(rng.standard_normal((V, d)))
    T = 3 if parents is None else len(parents)
    final = rng.standard_normal((T, d))
    full = final @ inference.dense(head)
    products = []
    linear = inference.linear

    def counted(x, weight):
        products.append(x.shape[0])
        return linear(x, weight)

    monkeypatch.setattr(inference, "linear", counted)
    for order in (range(T), reversed(range(T))):
        logits = inference.LazyLogits(final, head, parents)
        products.clear()
        for i in order:
            assert _error(logits[i], full[i]) <= TOL, i
            assert _error(logits[i], full[i]) <= TOL, i  # read again: kept, not recomputed
        assert sum(products) == T, products  # every row computed once
    logits = inference.LazyLogits(final, head, parents)
    products.clear()
    logits[0]
    assert products == first_read, (parents, products)


def test_tree_parents_must_fit_the_tokens_and_lazy_logits():
    config, params = _target("gqa")
    prepared = inference.prepare(params, config)
    cache = KVCache.for_model(config, params)
    with pytest.raises(InvalidInputError, match="tree_parents has 2 entries .* for 3 tokens"):
        prepared.forward(np.array([1, 2, 3]), cache=cache, lazy_logits=True, tree_parents=[-1, 0])
    with pytest.raises(InvalidInputError, match="lazy_logits=False"):
        prepared.forward(np.array([1, 2]), cache=cache, tree_parents=[-1, 0])
    assert cache.length == 0


@pytest.mark.parametrize("blocks", ["one block", "many blocks"])
@pytest.mark.parametrize("checker", list(CHECKERS))
def test_the_cycle_with_every_weight_counted_large(monkeypatch, checker, blocks):
    """The control cycle once more with every weight laid out and applied as a large one
    (SmolLM2's: blocks of its rows; one block, or blocks of a few rows each): the same
    outputs."""
    monkeypatch.setattr(inference, "SMALL_WEIGHT", 0)
    if blocks == "many blocks":
        monkeypatch.setattr(inference, "BLOCK", 64)
        monkeypatch.setattr(inference, "MIN_BLOCK_ROWS", 1)
    errors = CHECKERS[checker]()
    assert max(errors.values()) <= TOL, errors


# ---------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_and_leave_the_cache_as_it_was():
    config, params = _target("gqa")
    prepared = inference.prepare(params, config)
    cache = KVCache.for_model(config, params)
    prepared.forward(np.array([1, 2]), cache=cache)
    keys_before = [np.copy(k[:, :, :2, :]) for k in cache.keys]
    with pytest.raises(InvalidInputError, match="one sequence"):
        prepared.forward(np.array([[1, 2, 3]]), cache=cache)
    with pytest.raises(InvalidInputError, match=r"attention_mask has shape \(3, 3\)"):
        prepared.forward(np.array([1, 2, 3]), cache=cache, attention_mask=np.ones((3, 3), bool))
    with pytest.raises(InvalidInputError, match=f"token id {config.vocab_size} is outside"):
        prepared.forward(np.array([1, config.vocab_size]), cache=cache)
    with pytest.raises(InvalidInputError, match="token id -1 is outside"):
        prepared.forward(np.array([-1]), cache=cache)
    with pytest.raises(InvalidInputError, match="position_ids hold -2"):  # take would wrap it
        prepared.forward(np.array([1, 2]), cache=cache, position_ids=np.array([2, -2]))
    assert cache.length == 2
    assert _error([k[:, :, :2, :] for k in cache.keys], keys_before) == 0.0


def test_prepare_returns_a_prepared_view_for_its_config_and_refuses_another():
    config, params = _target("gqa")
    prepared = inference.prepare(params, config)
    assert inference.prepare(prepared, config) is prepared
    assert inference.prepare(prepared, config.replace()) is prepared  # equal, not identical
    with pytest.raises(InvalidInputError, match="another config"):
        inference.prepare(prepared, config.replace(rms_norm_eps=1e-6))


def test_a_huge_context_builds_rope_rows_only_for_the_positions_used():
    """With max_position_embeddings = 10^9 the table covers the positions seen (growing to a
    far position when one comes), and the outputs still equal model.forward's."""
    config, params = _target("gqa")
    config = config.replace(max_position_embeddings=10**9)
    prepared = inference.prepare(params, config)
    fast_cache, ref_cache = KVCache.for_model(config, params), KVCache.for_model(config, params)
    for ids, positions in [(np.array([4, 9, 2, 7]), None), (np.array([3]), np.array([3000]))]:
        fast = prepared.forward(ids, cache=fast_cache, position_ids=positions)
        ref = model.forward(params, config, ids, cache=ref_cache, position_ids=positions)[:2]
        assert _error(fast, ref) <= TOL
        assert prepared.rope.length <= 4096
        assert prepared.rope.cos.shape[0] == prepared.rope.length
    assert prepared.rope.length > 3000


# ---------------------------------------------------------------------------- array-api-strict


def test_prepared_target_and_heads_on_the_strict_device_equal_numpy():
    """Prefill and a tree block through the target and both heads on
    array_api_strict.Device("device1"): results stay on that device and equal NumPy's."""
    xp = pytest.importorskip("array_api_strict")
    device = xp.Device("device1")

    def to_strict(tree):
        return put(tree, xp, device)

    def on_device(tree):
        leaves = tree.values() if isinstance(tree, dict) else tree
        for leaf in leaves:
            if isinstance(leaf, dict | list | tuple):
                on_device(leaf)
            else:
                assert type(leaf).__module__.startswith("array_api_strict"), type(leaf)
                assert leaf.device == device, leaf.device

    config, params = _target("gqa", False)
    _, _, cfg1, head1 = _eagle1("gqa", "default")
    _, _, cfg3, head3 = _eagle3("gqa", "three-aux-full-vocab")
    V, d = config.vocab_size, config.hidden_size
    rng = np.random.default_rng(9)
    prompt = rng.integers(0, V, 6)
    tree = CONTROL.tree(V)
    mask, positions = attention_mask(tree, len(prompt)), position_ids(tree, len(prompt))
    fused = rng.standard_normal((len(prompt), 3 * d))
    own = rng.standard_normal((len(tree), d))

    def run(params, head1, head3, prompt, tree_ids, mask, positions, fused, own):
        """Both steps of the target and of each head; returns every output and cache."""
        prepared = inference.prepare(params, config)
        outputs = []
        target_cache = KVCache.for_model(config, params)
        drafters = [
            (inference.PreparedEagle1Head(head1, cfg1, params, prepared.lm_head), {},
             eagle1.new_head_cache(cfg1, head1, 64), fused[:, :d], own),
            (inference.PreparedEagle3Head(head3, cfg3, params), {"target_features": True},
             eagle3.new_head_cache(cfg3, head3, 64), fused, own),
        ]  # fmt: skip
        keys = _hidden_keys(config)
        outputs.append(prepared.forward(prompt, cache=target_cache, output_hidden=keys))
        outputs.append(prepared.forward(tree_ids, cache=target_cache, output_hidden=keys,
                                        attention_mask=mask, position_ids=positions))  # fmt: skip
        for head, first, head_cache, first_features, tree_features in drafters:
            outputs.append(head.forward(prompt, first_features, head_cache, **first))
            tree_flag = {"target_features": False} if first else {}
            outputs.append(head.forward(tree_ids, tree_features, head_cache, attention_mask=mask,
                                        position_ids=positions, **tree_flag))  # fmt: skip
            outputs.append(list(head_cache.keys + head_cache.values))
        outputs.append(list(target_cache.keys + target_cache.values))
        return outputs

    args = (params, head1, head3, prompt, tree.tokens, mask, positions, fused, own)
    strict_args = to_strict(args)
    with xp.ArrayAPIStrictFlags(boolean_indexing=False, data_dependent_shapes=False):
        strict = run(*strict_args)
    reference = run(*args)
    on_device(strict)
    assert _error(strict, reference) <= TOL
    # and the NumPy run is the readable path's: the target's tree block as model.forward has it
    ref_cache = KVCache.for_model(config, params)
    model.forward(params, config, prompt, cache=ref_cache)
    logits, hidden, _ = model.forward(params, config, tree.tokens, cache=ref_cache,
                                      attention_mask=mask, position_ids=positions,
                                      output_hidden=_hidden_keys(config))  # fmt: skip
    assert _error(reference[1], (logits, hidden)) <= TOL
