"""Hidden tests for the decoder-layer assignment: each backward alone, the KV cache, RoPE, trees.

The oracles are those of the public tests (the layer written out from `minieagle.layers`, and
centred finite differences of it), plus minieagle's fast inference path (`minieagle.inference`,
its own copy of the model's mathematics, untouched by a submission) for the whole model with a
KV cache, and vanilla greedy decoding for speculative decoding over draft trees.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_public import (
    ATOL,
    CONFIG,
    FORWARD_FIRST,
    LAYER_HINT,
    LAYER_HINTS,
    LAYER_NAMES,
    PREFIX,
    SHAPE_HINT,
    assert_close,
    assert_gradients,
    call,
    causal,
    gradient_errors,
    inputs,
    layer_by_hand,
    layer_gradients,
    layer_params,
    post_attention_by_hand,
    qkv_by_hand,
    rope,
)

from minieagle import inference, layers
from minieagle.generate import generate
from minieagle.kvcache import KVCache
from minieagle.model import (
    decoder_layer_backward,
    decoder_layer_forward,
    forward,
    loss_and_grads,
    post_attention_backward,
    post_attention_forward,
    qkv_backward,
    qkv_forward,
)
from minieagle.tree import Tree, ancestor_mask, depths, path_to

H, HKV, HD = CONFIG.num_attention_heads, CONFIG.num_key_value_heads, CONFIG.head_dim


# ---------------------------------------------------------------------------- each backward


QKV_HINTS = {
    "self_attn.q_proj.weight": LAYER_HINTS["self_attn.q_proj.weight"],
    "self_attn.k_proj.weight": LAYER_HINTS["self_attn.k_proj.weight"],
    "self_attn.v_proj.weight": LAYER_HINTS["self_attn.v_proj.weight"],
    "n1": "only dn1 is wrong: n1 feeds q_proj, k_proj and v_proj, so dn1 is the sum of the "
    "three projections' input gradients",
}


@pytest.mark.points(2)
def test_qkv_backward_matches_finite_differences():
    """dn1 and the q, k, v projections' gradients, from random dq, dk, dv."""
    params = layer_params(seed=10)
    rng = np.random.default_rng(11)
    n1 = rng.standard_normal((2, 4, CONFIG.hidden_size))
    cos, sin = rope([2, 3, 5, 8])
    dq, dk, dv = (rng.standard_normal((2, heads, 4, HD)) for heads in (H, HKV, HKV))
    (q, k, v), cache = call(
        "qkv_forward", qkv_forward, params, PREFIX, CONFIG, n1, cos, sin, hint=SHAPE_HINT
    )
    wants = qkv_by_hand(params, PREFIX, CONFIG, n1, cos, sin)
    for got, want, name in zip((q, k, v), wants, "qkv", strict=True):
        assert_close(got, want, f"qkv_forward's {name}", f"That forward {FORWARD_FIRST}")
    dn1, grads = call(
        "qkv_backward", qkv_backward, dq, dk, dv, cache, PREFIX,
        hint="It returns (dn1 [B, T, d_in], {HF name: grad}) for the three projections",
    )  # fmt: skip

    def f():
        q, k, v = qkv_by_hand(params, PREFIX, CONFIG, n1, cos, sin)
        return float(np.sum(q * dq) + np.sum(k * dk) + np.sum(v * dv))

    projections = [PREFIX + f"self_attn.{name}_proj.weight" for name in "qkv"]
    checked = {**{name.removeprefix(PREFIX): params[name] for name in projections}, "n1": n1}
    analytic = {**{name.removeprefix(PREFIX): g for name, g in grads.items()}, "n1": dn1}
    bad = gradient_errors(f, checked, analytic)
    assert_gradients(bad, tuple(QKV_HINTS), QKV_HINTS, "qkv_backward")


POST_NAMES = LAYER_NAMES[:5]
POST_HINTS = {
    **{name: LAYER_HINTS[name] for name in POST_NAMES},
    "x": "only dx (the residual's share) is wrong: x enters h = x + o_proj(a) unchanged, so dx is "
    "dh = dout + the gradient through post_attention_layernorm",
    "a": "only da is wrong: da = linear_backward(dh, ...) through o_proj, split back into the H "
    "query heads [B, H, T, hd]",
}


@pytest.mark.points(2)
def test_post_attention_backward_matches_finite_differences():
    """dx (the residual's share), da and the five weights after the attention."""
    params = layer_params(seed=12)
    x, dout = inputs(B=2, T=3, seed=13)
    a = np.random.default_rng(14).standard_normal((2, H, 3, HD))
    out, cache = call(
        "post_attention_forward", post_attention_forward, params, PREFIX, CONFIG, x, a,
        hint="a [B, H, T, hd] merges back to [B, T, H*hd] before o_proj",
    )  # fmt: skip
    want = post_attention_by_hand(params, PREFIX, CONFIG, x, a)
    assert_close(out, want, "post_attention_forward's output", f"That forward {FORWARD_FIRST}")
    dx, da, grads = call(
        "post_attention_backward", post_attention_backward, dout, cache, PREFIX, CONFIG,
        hint="It returns (dx [B, T, d], da [B, H, T, hd], {HF name: grad})",
    )  # fmt: skip

    def f():
        return float(np.sum(post_attention_by_hand(params, PREFIX, CONFIG, x, a) * dout))

    checked = {
        **{name: params[PREFIX + name] for name in POST_NAMES},
        "x": x,
        "a": a,
    }
    analytic = {**{name.removeprefix(PREFIX): g for name, g in grads.items()}, "x": dx, "a": da}
    bad = gradient_errors(f, checked, analytic)
    assert_gradients(bad, tuple(POST_HINTS), POST_HINTS, "post_attention_backward")


# ---------------------------------------------------------------------------- layer variants


@pytest.mark.points(1)
def test_multi_head_layer_forward_and_backward():
    """Plain multi-head attention (num_key_value_heads = num_attention_heads, as in Llama 1)."""
    config = CONFIG.replace(num_key_value_heads=CONFIG.num_attention_heads)
    params = layer_params(config, seed=15)
    x, dout = inputs(B=1, T=4, seed=16)
    cos, sin = rope(np.arange(4))
    mask = causal(0, 4)
    want, _ = layer_by_hand(params, PREFIX, config, x, cos, sin, mask)
    got, _ = call(
        "decoder_layer_forward (H = Hkv)", decoder_layer_forward,
        params, PREFIX, config, x, cos, sin, mask, hint=SHAPE_HINT,
    )  # fmt: skip
    assert_close(got, want, "the multi-head layer's output", LAYER_HINT)
    checked, analytic = layer_gradients(params, PREFIX, config, x, dout, cos, sin, mask)

    def f():
        return float(np.sum(layer_by_hand(params, PREFIX, config, x, cos, sin, mask)[0] * dout))

    bad = gradient_errors(f, checked, analytic)
    assert_gradients(bad, (*LAYER_NAMES, "x"), LAYER_HINTS, "decoder_layer_backward (H = Hkv)")


@pytest.mark.points(1)
def test_layer_without_input_norm_attends_over_x():
    """EAGLE-1's draft layer has no input_layernorm.weight: n1 = x, and no gradient for it."""
    params = layer_params(seed=17, input_norm=False)
    x, dout = inputs(B=2, T=3, seed=18)
    cos, sin = rope(np.arange(3))
    mask = causal(0, 3)
    hint = (
        "Without input_layernorm.weight in params (EAGLE-1's draft layer) the attention reads x "
        "itself (n1 = x), and the gradients hold no input_layernorm entry"
    )
    want, _ = layer_by_hand(params, PREFIX, CONFIG, x, cos, sin, mask)
    got, _ = call(
        "decoder_layer_forward without input_layernorm", decoder_layer_forward,
        params, PREFIX, CONFIG, x, cos, sin, mask, hint=hint,
    )  # fmt: skip
    assert_close(
        got, want, "the layer's output without input_layernorm",
        f"{hint}; if the plain layer's own test fails too, fix that first",
    )  # fmt: skip
    checked, analytic = layer_gradients(params, PREFIX, CONFIG, x, dout, cos, sin, mask, hint)
    extra = sorted(set(analytic) - set(checked))
    assert not extra, f"gradients for tensors the layer does not have: {extra}. {hint}"

    def f():
        return float(np.sum(layer_by_hand(params, PREFIX, CONFIG, x, cos, sin, mask)[0] * dout))

    bad = gradient_errors(f, checked, analytic)
    hints = {
        **LAYER_HINTS,
        "x": "only dx is wrong: without input_layernorm, x feeds q_proj, k_proj and v_proj "
        "directly and the residual h = x + o_proj(a), so dx = dh + (the sum of the three "
        "projections' input gradients)",
    }
    assert_gradients(bad, (*LAYER_NAMES[:-1], "x"), hints, "backward without the norm")


@pytest.mark.points(1)
def test_backward_returns_fresh_gradients_under_the_layers_names():
    """Keys prefix + HF name for this layer's nine tensors; nothing changed in place."""
    prefix = "model.layers.3."
    params = layer_params(prefix=prefix, seed=19)
    before = {name: value.copy() for name, value in params.items()}
    x, dout = inputs(B=1, T=3, seed=20)
    x_before, dout_before = x.copy(), dout.copy()
    cos, sin = rope(np.arange(3))
    _, cache = call(
        "decoder_layer_forward", decoder_layer_forward,
        params, prefix, CONFIG, x, cos, sin, causal(0, 3), hint=SHAPE_HINT,
    )  # fmt: skip
    dx, grads = call("decoder_layer_backward", decoder_layer_backward, dout, cache, prefix, CONFIG)
    assert set(grads) == set(params), (
        f"decoder_layer_backward returned gradients for {sorted(grads)}; expected exactly the "
        f"layer's tensors {sorted(params)} (the prefix passed in + the HF name)"
    )
    dx_again, again = decoder_layer_backward(dout, cache, prefix, CONFIG)
    for name in params:
        assert np.array_equal(grads[name], again[name]) and np.array_equal(dx, dx_again), (
            f"a second backward from the same cache gave another {name} gradient: make fresh "
            "gradients on each call, do not accumulate into (or change) the cache"
        )
        assert not np.shares_memory(grads[name], params[name]), (
            f"the gradient of {name} is stored in the parameter's own array: return new arrays"
        )
        assert np.array_equal(params[name], before[name]), (
            f"forward or backward changed the parameter {name} in place: leave params alone"
        )
    assert np.array_equal(x, x_before) and np.array_equal(dout, dout_before), (
        "forward or backward changed its input x or dout in place (x += ...?): compute new arrays"
    )


# ---------------------------------------------------------------------------- RoPE and trees


@pytest.mark.points(2)
def test_rope_makes_the_layer_depend_on_relative_positions_only():
    """Shifting every position by 7 leaves the output unchanged; spreading them changes it."""
    params = layer_params(seed=21)
    x, _ = inputs(B=1, T=5, seed=22)
    mask = causal(0, 5)

    def at(positions):
        cos, sin = rope(positions)
        out, _ = call(
            "decoder_layer_forward", decoder_layer_forward,
            params, PREFIX, CONFIG, x, cos, sin, mask, hint=SHAPE_HINT,
        )  # fmt: skip
        return out

    base = at(np.arange(5))
    shift = float(np.max(np.abs(at(np.arange(5) + 7) - base)))
    assert shift < 1e-10, (
        f"shifting every position by 7 changed the layer's output by {shift:.2e}: RoPE must "
        "rotate q and k (both, by cos and sin of their own positions) and never v, so that the "
        "scores q.k depend only on the difference of the positions"
    )
    spread = float(np.max(np.abs(at(2 * np.arange(5)) - base)))
    assert spread > 1e-6, (
        "positions 0, 2, 4, 6, 8 give the same output as 0, 1, 2, 3, 4: the layer ignores "
        "cos and sin; rotate q and k with layers.rope_forward(q, cos, sin)"
    )


@pytest.mark.points(1)
def test_tree_mask_node_output_equals_the_forward_over_its_path():
    """With a draft tree's mask and depth positions, each node sees its ancestors only."""
    tree = Tree(np.zeros(6, dtype=np.int64), np.array([-1, 0, 0, 1, 1, 2]))
    params = layer_params(seed=23)
    x, _ = inputs(B=1, T=6, seed=24)
    cos, sin = rope(depths(tree))
    got, _ = call(
        "decoder_layer_forward over a tree", decoder_layer_forward,
        params, PREFIX, CONFIG, x, cos, sin, ancestor_mask(tree), hint=SHAPE_HINT,
    )  # fmt: skip
    for node in range(len(tree)):
        path = path_to(tree, node)
        cos_p, sin_p = rope(np.arange(len(path)))
        mask = causal(0, len(path))
        want, _ = layer_by_hand(params, PREFIX, CONFIG, x[:, path], cos_p, sin_p, mask)
        err = float(np.max(np.abs(got[0, node] - want[0, -1])))
        assert err < 1e-10, (
            f"tree node {node} (path {path}) differs by {err:.2e} from the plain forward over "
            "its path: use the mask you are given (True = may attend) and RoPE at the given "
            "positions (cos, sin rows are per position, not per index); if the plain forward's "
            "own test fails too, fix that first"
        )


# ---------------------------------------------------------------------------- the KV cache

CACHE_HINT = (
    "With a cache, append this layer's new k (after RoPE) and v with cache.append(layer, k, v) "
    "and attend over the keys and values it returns (past + new positions); the mask you get "
    "is [T, past + T]"
)


@pytest.mark.points(2)
def test_layer_with_kv_cache_equals_the_full_forward():
    """Prefill 3 positions, then decode 3 one at a time: the same outputs as one full forward."""
    params = layer_params(seed=25)
    x, _ = inputs(B=2, T=6, seed=26)
    cos, sin = rope(np.arange(6))
    want, (k, v) = layer_by_hand(params, PREFIX, CONFIG, x, cos, sin, causal(0, 6))
    cache = KVCache(1, 2, HKV, HD, capacity=6, like=x)

    def step(start, stop):
        return call(
            f"decoder_layer_forward with a cache (positions {start}..{stop - 1})",
            decoder_layer_forward,
            params, PREFIX, CONFIG, x[:, start:stop], cos[start:stop], sin[start:stop],
            causal(start, stop - start), cache, 0, hint=CACHE_HINT,
        )[0]  # fmt: skip

    prefill = step(0, 3)
    assert cache.length == 3, (
        f"after a forward over 3 positions with a cache, cache.length = {cache.length}, "
        f"expected 3. {CACHE_HINT}"
    )
    stored_k, stored_v = cache.keys[0][:, :, :3], cache.values[0][:, :, :3]
    assert_close(stored_k, k[:, :, :3], "the cached keys", "The cache holds k after RoPE")
    assert_close(stored_v, v[:, :, :3], "the cached values", "The cache holds v as projected")
    assert_close(
        prefill, want[:, :3], "the prefill's output (with a cache)",
        "With nothing cached yet this is the plain forward: fix decoder_layer_forward's own "
        "test first",
    )  # fmt: skip
    for t in range(3, 6):
        assert_close(step(t, t + 1), want[:, t : t + 1], f"decoded position {t}", CACHE_HINT)


def _model(config, seed):
    """A whole float64 model: embedding (tied head), the layers of layer_params, final norm."""
    rng = np.random.default_rng(seed)
    params = {
        "model.embed_tokens.weight": rng.standard_normal((config.vocab_size, config.hidden_size)),
        "model.norm.weight": 1.0 + 0.3 * rng.standard_normal(config.hidden_size),
    }
    for i in range(config.num_hidden_layers):
        params.update(layer_params(config, f"model.layers.{i}.", seed + 2 + i))
    return params


MODEL = CONFIG.replace(num_hidden_layers=2, vocab_size=40, max_position_embeddings=64)


@pytest.mark.points(2)
def test_model_forward_with_cache_equals_the_fast_path():
    """model.forward (your layer), full and token by token with a KVCache, against minieagle's
    fast inference path, which has its own copy of the layer."""
    params = _model(MODEL, seed=30)
    ids = np.random.default_rng(31).integers(0, MODEL.vocab_size, 9)
    want, _ = inference.prepare(params, MODEL).forward(ids, cache=KVCache.for_model(MODEL, params))
    full, _, _ = call("model.forward", forward, params, MODEL, ids, hint=SHAPE_HINT)
    assert_close(full, want, "model.forward's logits (no cache)", "Fix the layer tests first")
    cache = KVCache.for_model(MODEL, params)
    hint = f"{CACHE_HINT}; each layer appends to its own index `layer`"
    rows = [
        call("model.forward with a cache", forward, params, MODEL, ids[start:stop], cache=cache,
             hint=hint)[0]
        for start, stop in [(0, 5), (5, 6), (6, 7), (7, 8), (8, 9)]
    ]  # fmt: skip
    assert cache.length == 9, f"after 9 tokens cache.length = {cache.length}, expected 9. {hint}"
    got = np.concatenate(rows)
    assert_close(got, want, "the logits decoded with a KVCache", hint)


class _TreeDrafter:
    """Proposes a tree whose right branch is the target's own greedy continuation (computed on
    the fast path), with a wrong sibling at each level before it: the accepted nodes are 2 and
    4, so the cache keeps positions 0, 2, 4 of the block (not a prefix)."""

    feature_keys = ()

    def __init__(self, params, config):
        self.target, self.config = inference.prepare(params, config), config

    def _greedy(self, context):
        cache = KVCache.for_model(self.config, self.target.params)
        logits, _ = self.target.forward(np.asarray(context), cache=cache)
        return int(np.argmax(logits[-1]))

    def begin(self, prompt_ids, features, sampling):
        self.context = list(prompt_ids)

    def propose(self, root, rng, max_nodes):
        if max_nodes < 5:
            return Tree(np.array([root]), np.array([-1]))
        first = self._greedy(self.context)
        second = self._greedy([*self.context, first])
        vocab = self.config.vocab_size
        tokens = [root, (first + 1) % vocab, first, (second + 1) % vocab, second]
        return Tree(np.array(tokens), np.array([-1, 0, 0, 2, 2]))

    def accept(self, tokens, features, next_token):
        self.context += [*tokens[1:], next_token]


@pytest.mark.points(2)
def test_speculative_greedy_decoding_with_your_layer_equals_vanilla():
    """EAGLE's promise: tree drafts verified by your layer give exactly the vanilla tokens."""
    params = _model(MODEL, seed=40)
    prompt = [int(t) for t in np.random.default_rng(41).integers(0, MODEL.vocab_size, 6)]
    want = generate(params, MODEL, prompt, max_new_tokens=12, stop_at_eos=False).tokens
    result = call(
        "speculative decoding (generate, fast=False) with your layer", generate,
        params, MODEL, prompt, drafter=_TreeDrafter(params, MODEL), max_new_tokens=12,
        stop_at_eos=False, fast=False,
        hint=f"{CACHE_HINT}; tree forwards pass position_ids (their cos, sin) and a tree mask",
    )  # fmt: skip
    assert result.tokens == want, (
        f"speculative decoding over draft trees with your layer emitted {result.tokens}, vanilla "
        f"greedy decoding {want}. If the layer's other tests pass, look at the cache: "
        f"{CACHE_HINT}; tree forwards pass position_ids (their cos, sin) and a tree mask"
    )
    assert set(result.accepted_per_cycle) <= {2}, (
        f"the target rejected drafts equal to its own greedy tokens (accepted per cycle "
        f"{result.accepted_per_cycle}, expected 2 each): your layer's tree forward disagrees "
        "with the full forward. Use the positions and mask you are given"
    )


@pytest.mark.points(1)
def test_whole_model_gradients_flow_through_every_layer():
    """model.loss_and_grads (your backward in each layer) against centred differences."""
    config = CONFIG.replace(num_hidden_layers=2)
    params = _model(config, seed=50)
    rng = np.random.default_rng(51)
    V = config.vocab_size
    ids, targets = rng.integers(0, V, (2, 4)), rng.integers(0, V, (2, 4))
    got, grads = call(
        "model.loss_and_grads", loss_and_grads, params, config, ids, targets, hint=SHAPE_HINT
    )
    T = ids.shape[1]
    cos, sin = rope(np.arange(T))

    def loss():
        x = params["model.embed_tokens.weight"][ids]  # [B, T, d]
        for i in range(config.num_hidden_layers):
            x, _ = layer_by_hand(params, f"model.layers.{i}.", config, x, cos, sin, causal(0, T))
        final, _ = layers.rmsnorm_forward(x, params["model.norm.weight"], config.rms_norm_eps)
        logits = final @ params["model.embed_tokens.weight"].T  # [B, T, V]
        return float(layers.cross_entropy_forward(logits.reshape(-1, V), targets.reshape(-1))[0])

    assert abs(got - loss()) < ATOL, (
        f"model.loss_and_grads gives the loss {got}, the layers by hand {loss()}: the forward "
        f"{FORWARD_FIRST}"
    )
    bad = gradient_errors(loss, params, grads, entries=4)
    passed_down = (
        "the last layer's gradients are right and those below it are not, so the gradient a "
        "layer passes down is wrong (each layer's dx is the dout of the layer below): "
        + LAYER_HINTS["x"]
    )
    hints = {f"model.layers.1.{name}": f"layer 1: {LAYER_HINTS[name]}" for name in LAYER_NAMES}
    hints.update({f"model.layers.0.{name}": passed_down for name in LAYER_NAMES})
    hints["model.embed_tokens.weight"] = passed_down
    hints["model.norm.weight"] = "the final norm is not yours; fix the layers' gradients first"
    assert_gradients(bad, tuple(hints), hints, "the whole model's backward")
