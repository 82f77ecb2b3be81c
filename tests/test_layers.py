"""Every forward/backward pair of minieagle.layers against float64 centred differences.

Each pair is checked with a random upstream gradient (f = sum(out * dout)) and each of its inputs
with its own bound (see minieagle/gradcheck.py). The checker itself is shown to fail on two
deliberately broken backwards. Attention is also compared with a plain-Python oracle (loops and
math.exp) and RoPE with its defining property: scores depend only on the relative position.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import layers
from minieagle.gradcheck import failures, gradient_errors
from minieagle.model import causal_mask

# Observed errors are below 1e-9; 1e-7 leaves room without letting an O(1) bug through.
BOUND = 1e-7


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _scalar(out: np.ndarray, dout: np.ndarray) -> float:
    """The scalar whose gradient with respect to out is dout."""
    return float(np.sum(out * dout))


def _assert_pass(errors: dict[str, float], bounds: dict[str, float] | float = BOUND) -> None:
    bad = failures(errors, bounds)
    assert not bad, f"gradient check failed: {bad} (all errors: {errors})"


def _mask_with_visible_rows(rng: np.random.Generator, T: int, S: int) -> np.ndarray:
    """A random non-causal bool mask [T, S] with at least one True per row."""
    mask = rng.random((T, S)) < 0.5
    mask[np.arange(T), rng.integers(0, S, T)] = True
    return mask


# ---------------------------------------------------------------------------- embedding, linear


def test_embedding_gradient_adds_rows_of_repeated_ids():
    rng = _rng(1)
    weight = rng.standard_normal((7, 5))
    ids = np.array([[3, 3, 1, 0, 3, 6], [1, 2, 2, 6, 0, 3]])  # id 3 appears 4 times, 5 never
    out, cache = layers.embedding_forward(weight, ids)
    np.testing.assert_array_equal(out, weight[ids])
    dout = rng.standard_normal(out.shape)
    dweight = layers.embedding_backward(dout, cache)

    def f():
        return _scalar(layers.embedding_forward(weight, ids)[0], dout)

    _assert_pass(gradient_errors(f, {"weight": weight}, {"weight": dweight}))
    np.testing.assert_allclose(dweight[3], dout[ids == 3].sum(axis=0), atol=1e-14)
    assert not dweight[5].any()


def test_linear_gradients():
    rng = _rng(2)
    x = rng.standard_normal((2, 3, 5))
    weight = rng.standard_normal((4, 5))
    out, cache = layers.linear_forward(x, weight)
    np.testing.assert_allclose(out, np.einsum("bti,oi->bto", x, weight), atol=1e-13)
    dout = rng.standard_normal(out.shape)
    dx, dweight = layers.linear_backward(dout, cache)

    def f():
        return _scalar(layers.linear_forward(x, weight)[0], dout)

    errors = gradient_errors(f, {"x": x, "weight": weight}, {"x": dx, "weight": dweight})
    _assert_pass(errors, {"x": 1e-8, "weight": 1e-8})


# ---------------------------------------------------------------------------- RMSNorm


def _rmsnorm_case(seed: int = 3):
    rng = _rng(seed)
    x = rng.standard_normal((2, 3, 6)) * rng.uniform(0.5, 3.0, (2, 3, 1))  # rows of varied scale
    weight = 1.0 + 0.5 * rng.standard_normal(6)  # away from 1, so dweight matters
    dout = rng.standard_normal(x.shape)
    return x, weight, dout


def _rmsnorm_errors(backward) -> dict[str, float]:
    x, weight, dout = _rmsnorm_case()
    eps = 1e-5
    _, cache = layers.rmsnorm_forward(x, weight, eps)
    dx, dweight = backward(dout, cache)

    def f():
        return _scalar(layers.rmsnorm_forward(x, weight, eps)[0], dout)

    return gradient_errors(f, {"x": x, "weight": weight}, {"x": dx, "weight": dweight})


def test_rmsnorm_forward_matches_definition():
    x, weight, _ = _rmsnorm_case()
    out, _ = layers.rmsnorm_forward(x, weight, 1e-5)
    expected = x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + 1e-5) * weight
    np.testing.assert_allclose(out, expected, rtol=1e-13)


def test_rmsnorm_gradients():
    _assert_pass(_rmsnorm_errors(layers.rmsnorm_backward))


def _rmsnorm_backward_without_mean_term(dout, cache):
    """Broken on purpose: treats 1/rms as a constant (drops the projection onto normed)."""
    normed, inv_rms, weight = cache
    dweight = (dout * normed).reshape(-1, normed.shape[-1]).sum(axis=0)
    return inv_rms * dout * weight, dweight


def test_gradcheck_catches_rmsnorm_backward_without_mean_term():
    bad = failures(_rmsnorm_errors(_rmsnorm_backward_without_mean_term), BOUND)
    assert set(bad) == {"x"}  # dweight is still right: per-tensor bounds say which one broke


# ---------------------------------------------------------------------------- RoPE


def test_rope_tables_match_the_rotate_half_formula():
    positions = np.array([0, 1, 5, 17])
    hd, theta = 8, 500.0
    cos, sin = layers.rope_tables(positions, hd, theta, np.float64)
    assert cos.shape == sin.shape == (4, hd)
    for t, pos in enumerate(positions):
        for j in range(hd):
            angle = pos / theta ** (2 * (j % (hd // 2)) / hd)
            assert cos[t, j] == pytest.approx(math.cos(angle), abs=1e-14)
            assert sin[t, j] == pytest.approx(math.sin(angle), abs=1e-14)


def test_rope_gradient_and_inverse():
    rng = _rng(4)
    x = rng.standard_normal((2, 3, 4, 6))  # [B, heads, T, hd]
    cos, sin = layers.rope_tables(rng.integers(0, 50, 4), 6, 10000.0, np.float64)
    out, cache = layers.rope_forward(x, cos, sin)
    dout = rng.standard_normal(out.shape)
    dx = layers.rope_backward(dout, cache)

    def f():
        return _scalar(layers.rope_forward(x, cos, sin)[0], dout)

    _assert_pass(gradient_errors(f, {"x": x}, {"x": dx}))
    # the rotation is orthogonal, so its backward undoes its forward
    np.testing.assert_allclose(layers.rope_backward(out, cache), x, atol=1e-13)


@settings(deadline=None, max_examples=30)
@given(m=st.integers(0, 200), n=st.integers(0, 200), shift=st.integers(0, 200))
def test_rope_scores_depend_only_on_relative_position(m, n, shift):
    rng = _rng(m + 1000 * n)
    q, k = rng.standard_normal((2, 1, 1, 1, 8))

    def score(pos_q, pos_k):
        cq, sq = layers.rope_tables(np.array([pos_q]), 8, 10000.0, np.float64)
        ck, sk = layers.rope_tables(np.array([pos_k]), 8, 10000.0, np.float64)
        return float(np.sum(layers.rope_forward(q, cq, sq)[0] * layers.rope_forward(k, ck, sk)[0]))

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-10)


# ---------------------------------------------------------------------------- attention


def _attention_errors(mask, backward, seed: int = 5) -> dict[str, float]:
    rng = _rng(seed)
    B, H, Hkv, T, hd = 2, 4, 2, 3, 4
    S = mask.shape[-1]
    q = rng.standard_normal((B, H, T, hd)) * 1.5  # peaked softmax, far from uniform
    k = rng.standard_normal((B, Hkv, S, hd)) * 1.5
    v = rng.standard_normal((B, Hkv, S, hd))
    out, cache = layers.attention_forward(q, k, v, mask)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv = backward(dout, cache)

    def f():
        return _scalar(layers.attention_forward(q, k, v, mask)[0], dout)

    return gradient_errors(f, {"q": q, "k": k, "v": v}, {"q": dq, "k": dk, "v": dv})


def test_attention_gradients_causal_with_past_gqa():
    _assert_pass(_attention_errors(causal_mask(2, 3), layers.attention_backward))


def test_attention_gradients_custom_non_causal_mask():
    mask = _mask_with_visible_rows(_rng(6), 3, 5)
    assert not np.array_equal(mask, causal_mask(2, 3))
    _assert_pass(_attention_errors(mask, layers.attention_backward))


def test_attention_gradients_per_batch_mask():
    rng = _rng(7)
    mask = np.stack([_mask_with_visible_rows(rng, 3, 5) for _ in range(2)])[:, None, None]
    assert mask.shape == (2, 1, 1, 3, 5)
    _assert_pass(_attention_errors(mask, layers.attention_backward))


def _attention_backward_without_softmax_correction(dout, cache):
    """Broken on purpose: dscores = probs * dprobs, missing the - sum(dprobs * probs) term."""
    qg, k, v, probs, scale = cache
    dout = dout.reshape(qg.shape)
    dv = (probs.swapaxes(-1, -2) @ dout).sum(axis=2)
    dscores = probs * (dout @ v[:, :, None].swapaxes(-1, -2))
    dq = (dscores @ k[:, :, None]) * scale
    dk = (dscores.swapaxes(-1, -2) @ qg).sum(axis=2) * scale
    B, Hkv, G, T, hd = qg.shape
    return dq.reshape(B, Hkv * G, T, hd), dk, dv


def test_gradcheck_catches_attention_backward_without_softmax_correction():
    errors = _attention_errors(causal_mask(2, 3), _attention_backward_without_softmax_correction)
    assert set(failures(errors, BOUND)) == {"q", "k"}  # dv does not involve the softmax Jacobian


def _naive_attention(q, k, v, mask) -> list:
    """Plain-Python oracle: for every query head, its key/value head h // G, an explicit softmax."""
    B, H, T, hd = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    group = H // Hkv
    out = [[[[0.0] * hd for _ in range(T)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            kv = h // group
            for t in range(T):
                scores = {}
                for s in range(S):
                    if mask[t][s]:
                        dot = sum(float(q[b, h, t, j]) * float(k[b, kv, s, j]) for j in range(hd))
                        scores[s] = dot / math.sqrt(hd)
                top = max(scores.values())
                weights = {s: math.exp(x - top) for s, x in scores.items()}
                total = sum(weights.values())
                for j in range(hd):
                    out[b][h][t][j] = sum(w * float(v[b, kv, s, j]) for s, w in weights.items())
                    out[b][h][t][j] /= total
    return out


@settings(deadline=None, max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    kv_heads_and_group=st.sampled_from([(1, 1), (1, 3), (2, 2), (3, 1)]),
    T=st.integers(1, 4),
    past=st.integers(0, 3),
)
def test_attention_matches_naive_python_loops(seed, kv_heads_and_group, T, past):
    rng = _rng(seed)
    Hkv, G = kv_heads_and_group
    S, hd = past + T, 4
    q = rng.standard_normal((2, Hkv * G, T, hd)) * 2
    k = rng.standard_normal((2, Hkv, S, hd)) * 2
    v = rng.standard_normal((2, Hkv, S, hd))
    mask = _mask_with_visible_rows(rng, T, S)
    out, _ = layers.attention_forward(q, k, v, mask)
    np.testing.assert_allclose(out, np.array(_naive_attention(q, k, v, mask)), atol=1e-12)


def _attention_with_tiled_heads(q, k, v, mask):
    """Broken on purpose: query head h reads kv head h % Hkv (tile) instead of h // G (repeat)."""
    order = [
        0,
        2,
        1,
        3,
    ]  # for H=4, Hkv=2 this permutation swaps the two pairings; it is its inverse
    return layers.attention_forward(q[:, order], k, v, mask)[0][:, order]


def test_naive_attention_oracle_catches_wrong_head_grouping():
    rng = _rng(8)
    q = rng.standard_normal((1, 4, 2, 4))
    k = rng.standard_normal((1, 2, 3, 4))
    v = rng.standard_normal((1, 2, 3, 4))
    mask = np.ones((2, 3), dtype=bool)
    oracle = np.array(_naive_attention(q, k, v, mask))
    assert np.max(np.abs(_attention_with_tiled_heads(q, k, v, mask) - oracle)) > 1e-3


# ---------------------------------------------------------------------------- SwiGLU, losses


def test_swiglu_gradients():
    rng = _rng(9)
    gate = rng.standard_normal((2, 3, 7)) * 3  # reaches both saturated ends of the sigmoid
    up = rng.standard_normal((2, 3, 7))
    out, cache = layers.swiglu_forward(gate, up)
    np.testing.assert_allclose(out, gate / (1 + np.exp(-gate)) * up, rtol=1e-13)
    dout = rng.standard_normal(out.shape)
    dgate, dup = layers.swiglu_backward(dout, cache)

    def f():
        return _scalar(layers.swiglu_forward(gate, up)[0], dout)

    errors = gradient_errors(f, {"gate": gate, "up": up}, {"gate": dgate, "up": dup})
    _assert_pass(errors)


def test_cross_entropy_value_and_gradient_with_ignored_rows():
    rng = _rng(10)
    logits = rng.standard_normal((6, 5)) * 3
    targets = np.array([4, -100, 0, 2, -100, 4])
    valid = targets != -100
    loss, cache = layers.cross_entropy_forward(logits, targets)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -np.mean([logp[i, t] for i, t in enumerate(targets) if t != -100])
    assert float(loss) == pytest.approx(expected, rel=1e-13)
    dloss = float(rng.standard_normal())  # a random upstream gradient for the scalar
    dlogits = layers.cross_entropy_backward(dloss, cache)
    assert not dlogits[~valid].any()

    def f():
        return dloss * float(layers.cross_entropy_forward(logits, targets)[0])

    _assert_pass(gradient_errors(f, {"logits": logits}, {"logits": dlogits}))


def test_cross_entropy_with_every_row_ignored_is_zero():
    logits = _rng(11).standard_normal((3, 4))
    targets = np.full(3, -100)
    loss, cache = layers.cross_entropy_forward(logits, targets)
    assert float(loss) == 0.0
    assert not layers.cross_entropy_backward(1.0, cache).any()


def test_log_softmax_is_stable_and_normalised():
    logits = np.array([[1000.0, 0.0, -1000.0], [3.0, 3.0, 3.0], [-5e3, -5e3 + 1.0, -5e3 - 2.0]])
    logp = layers.log_softmax(logits)
    assert np.isfinite(logp).all()
    np.testing.assert_allclose(np.exp(logp).sum(axis=-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(logp[1], -math.log(3), rtol=1e-14)
    shifted = logits[2] - logits[2].max()
    np.testing.assert_allclose(logp[2], shifted - np.log(np.exp(shifted).sum()), rtol=1e-13)


def test_logsumexp_is_stable_and_exact():
    """layers.logsumexp over the last axis equals log(sum(exp)) where that is finite, and stays
    finite where it overflows (logits of 1,000: a naive sum is inf)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 50)) * 5
    np.testing.assert_allclose(layers.logsumexp(x), np.log(np.exp(x).sum(-1)), rtol=1e-12)
    big = x + 1000.0
    with np.errstate(over="ignore"):
        assert np.isinf(np.log(np.exp(big).sum(-1))).all()  # what the max taken out avoids
    np.testing.assert_allclose(layers.logsumexp(big), layers.logsumexp(x) + 1000.0, rtol=1e-12)
