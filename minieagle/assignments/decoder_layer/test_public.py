"""Public tests for the decoder-layer assignment: run them with `python -m pytest` in this folder.

Each half of the layer is compared, in float64 to 1e-12, with the same computation written out
here from the `minieagle.layers` primitives (`layer_by_hand`), and the layer's backward with
centred finite differences of that computation, each tensor with its own bound and a random
upstream gradient. The grader runs these and more (each backward alone, the KV cache, RoPE's
relative positions, tree masks, the whole model, speculative decoding with your layer).
"""

from __future__ import annotations

import numpy as np
import pytest

from minieagle import layers
from minieagle.config import LlamaConfig
from minieagle.gradcheck import numerical_gradient
from minieagle.model import (
    decoder_layer_backward,
    decoder_layer_forward,
    post_attention_forward,
    qkv_forward,
)

# float64 with large weights: peaked attention and norms far from 1 make every term count.
CONFIG = LlamaConfig(
    vocab_size=24,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention: each k/v head serves 2 query heads
    max_position_embeddings=32,
    initializer_range=0.3,
)
PREFIX = "model.layers.0."
ATOL = 1e-12  # the same float64 operations: equal up to rounding
GRAD_BOUND = 1e-7  # per tensor, relative (centred differences with eps = 1e-6 reach ~1e-9)
LAYER_NAMES = (  # backward order: the first wrong gradient in this order is where to look
    "mlp.down_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "post_attention_layernorm.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "input_layernorm.weight",
)


# ---------------------------------------------------------------------------- test inputs


def layer_params(config=CONFIG, prefix=PREFIX, seed=0, input_norm=True):
    """Random float64 weights of one layer, HF names, [out, in]; norm gains away from 1."""
    rng = np.random.default_rng(seed)
    d, inter, hd = config.hidden_size, config.intermediate_size, config.head_dim
    H, Hkv = config.num_attention_heads, config.num_key_value_heads
    shapes = {
        "input_layernorm.weight": (d,),
        "self_attn.q_proj.weight": (H * hd, d),
        "self_attn.k_proj.weight": (Hkv * hd, d),
        "self_attn.v_proj.weight": (Hkv * hd, d),
        "self_attn.o_proj.weight": (d, H * hd),
        "post_attention_layernorm.weight": (d,),
        "mlp.gate_proj.weight": (inter, d),
        "mlp.up_proj.weight": (inter, d),
        "mlp.down_proj.weight": (d, inter),
    }
    if not input_norm:
        del shapes["input_layernorm.weight"]
    params = {}
    for name, shape in shapes.items():
        noise = rng.standard_normal(shape)
        params[prefix + name] = 1.0 + 0.3 * noise if name.endswith("norm.weight") else 0.3 * noise
    return params


def inputs(B=2, T=5, seed=1, config=CONFIG):
    """x [B, T, d] and a random upstream gradient of the same shape."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, T, config.hidden_size)), rng.standard_normal(
        (B, T, config.hidden_size)
    )


def rope(positions, config=CONFIG):
    """cos, sin [T, hd] at integer positions [T]."""
    return layers.rope_tables(np.asarray(positions), config.head_dim, config.rope_theta, np.float64)


def causal(past, new):
    """bool [new, past + new]: position past + i sees keys 0 .. past + i."""
    return np.arange(past + new)[None, :] <= past + np.arange(new)[:, None]


# ---------------------------------------------------------------------------- the oracle


def weights_of(params, prefix):
    """{short name: array} of the layer `prefix` (the same arrays, not copies)."""
    return {name.removeprefix(prefix): w for name, w in params.items() if name.startswith(prefix)}


def qkv_by_hand(params, prefix, config, n1, cos, sin):
    """q [B, H, T, hd], k, v [B, Hkv, T, hd] (q and k rotated), written out plainly."""
    B, T, _ = n1.shape
    H, Hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    w = weights_of(params, prefix)
    q = (n1 @ w["self_attn.q_proj.weight"].T).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
    k = (n1 @ w["self_attn.k_proj.weight"].T).reshape(B, T, Hkv, hd).transpose(0, 2, 1, 3)
    v = (n1 @ w["self_attn.v_proj.weight"].T).reshape(B, T, Hkv, hd).transpose(0, 2, 1, 3)
    return layers.rope_forward(q, cos, sin)[0], layers.rope_forward(k, cos, sin)[0], v


def post_attention_by_hand(params, prefix, config, x, a):
    """x + o_proj(a), then + down(silu(gate(n)) * up(n)) with n = RMSNorm(h)."""
    B, H, T, hd = a.shape
    w = weights_of(params, prefix)
    h = x + a.transpose(0, 2, 1, 3).reshape(B, T, H * hd) @ w["self_attn.o_proj.weight"].T
    n, _ = layers.rmsnorm_forward(h, w["post_attention_layernorm.weight"], config.rms_norm_eps)
    gate, up = n @ w["mlp.gate_proj.weight"].T, n @ w["mlp.up_proj.weight"].T
    return h + layers.swiglu_forward(gate, up)[0] @ w["mlp.down_proj.weight"].T


def layer_by_hand(params, prefix, config, x, cos, sin, mask, past_kv=None):
    """The whole layer -> (out [B, T, d], (k, v) of the new positions). past_kv: keys and values
    [B, Hkv, past, hd] already cached, attended before the new ones."""
    norm = params.get(prefix + "input_layernorm.weight")
    n1 = x if norm is None else layers.rmsnorm_forward(x, norm, config.rms_norm_eps)[0]
    q, k, v = qkv_by_hand(params, prefix, config, n1, cos, sin)
    keys, values = k, v
    if past_kv is not None:
        keys = np.concatenate([past_kv[0], k], axis=2)  # [B, Hkv, past + T, hd]
        values = np.concatenate([past_kv[1], v], axis=2)
    a, _ = layers.attention_forward(q, keys, values, mask)
    return post_attention_by_hand(params, prefix, config, x, a), (k, v)


# ---------------------------------------------------------------------------- checkers


def call(what, fn, *args, hint="", **kwargs):
    """fn(*args, **kwargs), an error in it reported as a failed check naming the function."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 (any crash of the submitted code is a failure)
        first = str(error).split("\n")[0]
        raise AssertionError(f"{what} raised {type(error).__name__}: {first}. {hint}") from error


LAYER_HINT = (
    "The order is n1 = input_layernorm(x); q, k, v from n1 with RoPE on q and k; "
    "a = attention(q, k, v, mask); then post_attention_forward(x, a): both residuals (plus, "
    "not minus) add to x, not to the normed n1"
)
SHAPE_HINT = (
    "Check the shapes: q [B, H, T, hd] with H = num_attention_heads; k and v [B, Hkv, T, hd] "
    "with Hkv = num_key_value_heads (GQA: fewer k/v heads than query heads), each head_dim wide"
)


def assert_close(got, want, what, hint):
    """got == want to ATOL, else a message with the shapes or the largest difference."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what} has shape {got.shape}, expected {want.shape}. {hint}"
    err = float(np.max(np.abs(got - want)))
    assert err < ATOL, f"{what}: off by up to {err:.2e} from the expected value. {hint}"


def gradient_errors(f, inputs, analytic, entries=12, seed=0):
    """{name: max|num - ana| / (max|num| + max|ana|)} over up to 2 * entries entries per tensor
    (random ones and the largest |analytic|), or a message when a gradient is missing or of the
    wrong shape."""
    rng = np.random.default_rng(seed)
    errors = {}
    for name, x in inputs.items():
        if name not in analytic:
            errors[name] = "missing"
            continue
        ana = np.asarray(analytic[name], dtype=np.float64)
        if ana.shape != x.shape:
            errors[name] = f"shape {ana.shape}, expected {x.shape}"
            continue
        if x.size <= 2 * entries:
            idx = np.arange(x.size)
        else:
            largest = np.argsort(np.abs(ana).reshape(-1))[-entries:]
            idx = np.unique(np.concatenate([rng.choice(x.size, entries, replace=False), largest]))
        num = numerical_gradient(f, x, idx)
        scale = np.max(np.abs(num)) + np.max(np.abs(ana.reshape(-1)[idx]))
        err = 0.0 if scale == 0 else float(np.max(np.abs(num - ana.reshape(-1)[idx])) / scale)
        errors[name] = err
    return {
        name: e if isinstance(e, str) else f"relative error {e:.1e}"
        for name, e in errors.items()
        if isinstance(e, str) or not e < GRAD_BOUND
    }


def assert_gradients(bad, order, hints, what):
    """Fail naming every wrong gradient, with the hint of the first one in backward order."""
    if not bad:
        return
    listing = "; ".join(f"{name}: {bad[name]}" for name in order if name in bad)
    if any(not message.startswith("relative error") for message in bad.values()):
        hint = (
            "Return a fresh dict {HF name: gradient}, keyed by the full names (prefix + "
            "'self_attn.q_proj.weight', ...) with each gradient shaped like its tensor"
        )
    else:
        hint = hints[next(name for name in order if name in bad)]
    raise AssertionError(f"{what}: wrong gradients ({listing}). {hint}")


LAYER_HINTS = {
    "mlp.down_proj.weight": "down_proj's gradient is the first wrong one: it is "
    "linear_backward(dout, ...) on the MLP's input silu(gate) * up",
    "mlp.gate_proj.weight": "gate_proj's gradient is the first wrong one: dm from down_proj goes "
    "through swiglu_backward into (dgate, dup), then each projection's linear_backward",
    "mlp.up_proj.weight": "up_proj's gradient is the first wrong one: dup comes from "
    "swiglu_backward(dm, ...), then linear_backward",
    "post_attention_layernorm.weight": "post_attention_layernorm's gradient is the first wrong "
    "one: the norm's input gradient is the SUM of what gate_proj and up_proj send back",
    "self_attn.o_proj.weight": "o_proj's gradient is the first wrong one: h = x + o_proj(a) feeds "
    "the MLP through the norm AND the output directly (the residual), so dh = dout + the "
    "gradient through post_attention_layernorm",
    "self_attn.q_proj.weight": "q_proj's gradient is the first wrong one: dq from "
    "attention_backward goes through rope_backward (q was rotated), then merge the H heads back "
    "to [B, T, H*hd]",
    "self_attn.k_proj.weight": "k_proj's gradient is the first wrong one: dk [B, Hkv, T, hd] goes "
    "through rope_backward (k was rotated), then merge the Hkv heads back",
    "self_attn.v_proj.weight": "v_proj's gradient is the first wrong one: v was not rotated, so dv "
    "goes straight to merging its Hkv heads and v_proj's linear_backward",
    "input_layernorm.weight": "input_layernorm's gradient is the first wrong one: n1 feeds q_proj, "
    "k_proj and v_proj, so its gradient is the sum of all three input gradients",
    "x": "only dx is wrong: x reaches the output twice, through input_layernorm and through the "
    "residual h = x + o_proj(a); dx is the residual's share dh plus the gradient through the norm",
}


FORWARD_FIRST = (
    "is wrong, so the cache your backward reads is too; fix the forward first (the backward "
    "is checked against the correct layer)"
)


def layer_gradients(params, prefix, config, x, dout, cos, sin, mask, hint=SHAPE_HINT):
    """(checked tensors, the submission's gradients) of one layer, by short name and "x"; the
    forward is checked first, so that a wrong forward is not reported as a wrong backward."""
    out, cache = call(
        "decoder_layer_forward", decoder_layer_forward,
        params, prefix, config, x, cos, sin, mask, hint=hint,
    )  # fmt: skip
    want, _ = layer_by_hand(params, prefix, config, x, cos, sin, mask)
    assert_close(out, want, "the forward before the backward", f"That forward {FORWARD_FIRST}")
    dx, grads = call(
        "decoder_layer_backward", decoder_layer_backward, dout, cache, prefix, config,
        hint="It takes dout [B, T, d] and returns (dx [B, T, d], {HF name: grad})",
    )  # fmt: skip
    analytic = {**{name.removeprefix(prefix): g for name, g in grads.items()}, "x": dx}
    checked = {**{name.removeprefix(prefix): p for name, p in params.items()}, "x": x}
    return checked, analytic


# ---------------------------------------------------------------------------- the tests


@pytest.mark.points(2)
def test_qkv_forward_projects_splits_heads_and_rotates():
    """q, k, v = rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1), split into H and Hkv heads."""
    params = layer_params()
    n1, _ = inputs(seed=2)
    cos, sin = rope([3, 4, 5, 6, 7])
    q, k, v = qkv_by_hand(params, PREFIX, CONFIG, n1, cos, sin)
    (q_got, k_got, v_got), _ = call(
        "qkv_forward", qkv_forward, params, PREFIX, CONFIG, n1, cos, sin, hint=SHAPE_HINT
    )
    assert_close(q_got, q, "q", "q = rope(q_proj(n1)) split into num_attention_heads heads")
    assert_close(k_got, k, "k", "k = rope(k_proj(n1)) split into num_key_value_heads heads")
    assert_close(
        v_got,
        v,
        "v",
        "v = v_proj(n1) split into num_key_value_heads heads, NOT rotated: "
        "RoPE rotates q and k only (positions enter the scores q.k, never the values)",
    )


@pytest.mark.points(2)
def test_post_attention_forward_adds_both_residuals():
    """out = h + down(silu(gate(n)) * up(n)), n = RMSNorm(h), h = x + o_proj(a)."""
    params = layer_params()
    x, _ = inputs(seed=3)
    a = np.random.default_rng(4).standard_normal((2, CONFIG.num_attention_heads, 5, 4))
    want = post_attention_by_hand(params, PREFIX, CONFIG, x, a)
    got, _ = call(
        "post_attention_forward", post_attention_forward, params, PREFIX, CONFIG, x, a,
        hint="a [B, H, T, hd] merges back to [B, T, H*hd] before o_proj",
    )  # fmt: skip
    assert_close(
        got, want, "post_attention_forward's output",
        "Check the two residual additions, h = x + o_proj(a) and out = h + mlp (plus, not "
        "minus), and that the MLP reads n = post_attention_layernorm(h), not x",
    )  # fmt: skip


@pytest.mark.points(2)
def test_decoder_layer_forward_matches_the_layer_by_hand():
    """The whole pre-norm layer, batch of 2, causal mask, no cache."""
    params = layer_params()
    x, _ = inputs()
    cos, sin = rope(np.arange(5))
    want, _ = layer_by_hand(params, PREFIX, CONFIG, x, cos, sin, causal(0, 5))
    got, _ = call(
        "decoder_layer_forward", decoder_layer_forward,
        params, PREFIX, CONFIG, x, cos, sin, causal(0, 5), hint=SHAPE_HINT,
    )  # fmt: skip
    assert_close(got, want, "decoder_layer_forward's output", LAYER_HINT)


@pytest.mark.points(2)
def test_decoder_layer_backward_matches_finite_differences():
    """Every weight's gradient and dx against centred differences, random upstream gradient."""
    params = layer_params(seed=5)
    x, dout = inputs(B=1, T=4, seed=6)
    cos, sin = rope(np.arange(4))
    mask = causal(0, 4)
    checked, analytic = layer_gradients(params, PREFIX, CONFIG, x, dout, cos, sin, mask)

    def f():
        return float(np.sum(layer_by_hand(params, PREFIX, CONFIG, x, cos, sin, mask)[0] * dout))

    bad = gradient_errors(f, checked, analytic)
    assert_gradients(bad, (*LAYER_NAMES, "x"), LAYER_HINTS, "decoder_layer_backward")
