"""Forward/backward pairs for every layer of the Llama decoder.

Each layer is `x_forward(...) -> (out, cache)` and `x_backward(dout, cache) -> grads`, the grads
returned fresh (nothing accumulates in hidden state). Shapes use B = batch, T = new positions,
S = attended positions (cache + new), d = hidden size, H = query heads, Hkv = key/value heads,
G = H // Hkv, hd = head dim, V = vocabulary. The array module comes from the inputs (NumPy, CuPy,
or any array-API namespace), and every call goes through it: `xp.sum(x, axis=-1)`, not `x.sum(-1)`.
"""

from __future__ import annotations

from minieagle.backend import arange, array_module, scatter_add_rows

# ---------------------------------------------------------------------------- embedding


def embedding_forward(weight, ids):
    """Row lookup. weight [V, d], ids int [B, T] -> out [B, T, d]."""
    xp = array_module(weight)
    rows = xp.take(weight, xp.reshape(ids, (-1,)), axis=0)  # [B*T, d]
    return xp.reshape(rows, (*ids.shape, weight.shape[1])), (ids, weight.shape)


def embedding_backward(dout, cache):
    """dout [B, T, d] -> dweight [V, d] (rows of repeated ids add up)."""
    ids, shape = cache
    xp = array_module(dout)
    return scatter_add_rows(shape, xp.reshape(ids, (-1,)), xp.reshape(dout, (-1, shape[1])))


# ---------------------------------------------------------------------------- linear


def linear_forward(x, weight):
    """y = x W^T with W stored [out, in] as in nn.Linear. x [..., in] -> y [..., out]."""
    return x @ weight.T, (x, weight)


def linear_backward(dout, cache, *, input_grad: bool = True):
    """dout [..., out] -> (dx [..., in], dweight [out, in]); dx is None with input_grad=False,
    for a layer whose input is data (EAGLE's fc reads the target's frozen features)."""
    x, weight = cache
    xp = array_module(dout)
    dx = dout @ weight if input_grad else None  # [..., out] @ [out, in] -> [..., in]
    dout_rows = xp.reshape(dout, (-1, dout.shape[-1]))  # [N, out]
    dweight = dout_rows.T @ xp.reshape(x, (-1, x.shape[-1]))  # [out, N] @ [N, in] -> [out, in]
    return dx, dweight


# ---------------------------------------------------------------------------- RMSNorm


def rmsnorm_forward(x, weight, eps):
    """y = x / sqrt(mean(x^2) + eps) * weight.  x [..., d], weight [d] -> y [..., d]."""
    xp = array_module(x)
    inv_rms = 1.0 / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps)  # [..., 1]
    normed = x * inv_rms  # [..., d]
    return normed * weight, (normed, inv_rms, weight)


def rmsnorm_backward(dout, cache):
    """dout [..., d] -> (dx [..., d], dweight [d])."""
    normed, inv_rms, weight = cache
    xp = array_module(dout)
    d = normed.shape[-1]
    dweight = xp.sum(xp.reshape(dout * normed, (-1, d)), axis=0)  # [d]
    dnormed = dout * weight  # [..., d]
    # normed = x * r with r = mean(x^2)^-1/2: dx = r * (dn - normed * mean(dn * normed))
    dx = inv_rms * (dnormed - normed * xp.mean(dnormed * normed, axis=-1, keepdims=True))
    return dx, dweight


# ---------------------------------------------------------------------------- RoPE (rotate-half)


def rope_tables(position_ids, head_dim: int, theta: float, dtype):
    """cos, sin [..., T, hd] for integer positions [..., T] (HF rotate-half layout: the frequency
    vector is repeated twice, not interleaved)."""
    xp = array_module(position_ids)
    exponents = arange(0, head_dim, 2, like=position_ids, dtype=xp.float64) / head_dim  # [hd/2]
    inv_freq = 1.0 / theta**exponents  # [hd/2]
    angles = xp.astype(position_ids[..., None], xp.float64) * inv_freq  # [..., T, hd/2]
    angles = xp.concat([angles, angles], axis=-1)  # [..., T, hd]
    return xp.astype(xp.cos(angles), dtype), xp.astype(xp.sin(angles), dtype)


def _rotate_half(x):
    xp = array_module(x)
    half = x.shape[-1] // 2
    return xp.concat([-x[..., half:], x[..., :half]], axis=-1)


def rope_forward(x, cos, sin):
    """Rotate each head's vector by its position. x [B, heads, T, hd], cos/sin [T, hd] or
    [B, 1, T, hd] -> same shape as x."""
    return x * cos + _rotate_half(x) * sin, (cos, sin)


def rope_backward(dout, cache):
    """The rotation is orthogonal: its transpose rotates by the negative angle."""
    cos, sin = cache
    return dout * cos - _rotate_half(dout * sin)


# ---------------------------------------------------------------------------- attention


def attention_forward(q, k, v, mask):
    """Scaled dot-product attention with grouped key/value heads.

    q [B, H, T, hd]; k, v [B, Hkv, S, hd]; mask bool [T, S] or [B, 1, 1, T, S] (True = may
    attend; every row needs at least one True) -> out [B, H, T, hd].
    """
    xp = array_module(q)
    B, H, T, hd = q.shape
    Hkv = k.shape[1]
    qg = xp.reshape(q, (B, Hkv, H // Hkv, T, hd))  # [B, Hkv, G, T, hd]
    kg, vg = k[:, :, None, :, :], v[:, :, None, :, :]  # [B, Hkv, 1, S, hd]
    scale = 1.0 / hd**0.5
    scores = (qg @ kg.mT) * scale  # [B, Hkv, G, T, S]
    scores = xp.where(mask, scores, -xp.inf)
    scores = scores - xp.max(scores, axis=-1, keepdims=True)
    probs = xp.exp(scores)
    probs /= xp.sum(probs, axis=-1, keepdims=True)  # [B, Hkv, G, T, S]
    out = probs @ vg  # [B, Hkv, G, T, hd]
    return xp.reshape(out, (B, H, T, hd)), (qg, k, v, probs, scale)


def attention_backward(dout, cache):
    """dout [B, H, T, hd] -> (dq [B, H, T, hd], dk [B, Hkv, S, hd], dv [B, Hkv, S, hd])."""
    qg, k, v, probs, scale = cache
    xp = array_module(dout)
    dout = xp.reshape(dout, qg.shape)  # [B, Hkv, G, T, hd]
    kg, vg = k[:, :, None, :, :], v[:, :, None, :, :]  # [B, Hkv, 1, S, hd]
    dv = xp.sum(probs.mT @ dout, axis=2)  # [B, Hkv, S, hd]
    dprobs = dout @ vg.mT  # [B, Hkv, G, T, S]
    dscores = probs * (dprobs - xp.sum(dprobs * probs, axis=-1, keepdims=True))
    dq = (dscores @ kg) * scale  # [B, Hkv, G, T, hd]
    dk = xp.sum(dscores.mT @ qg, axis=2) * scale  # [B, Hkv, S, hd]
    B, Hkv, G, T, hd = qg.shape
    return xp.reshape(dq, (B, Hkv * G, T, hd)), dk, dv


# ---------------------------------------------------------------------------- SwiGLU


def swiglu_forward(gate, up):
    """silu(gate) * up, elementwise. gate, up [..., I] -> [..., I]."""
    xp = array_module(gate)
    sig = 1.0 / (1.0 + xp.exp(-gate))
    return gate * sig * up, (gate, up, sig)


def swiglu_backward(dout, cache):
    """dout [..., I] -> (dgate, dup)."""
    gate, up, sig = cache
    silu = gate * sig
    dsilu = sig * (1.0 + gate * (1.0 - sig))  # d/dg [g * sigmoid(g)]
    return dout * up * dsilu, dout * silu


# ---------------------------------------------------------------------------- losses


def log_softmax(logits):
    """Numerically stable log-softmax over the last axis."""
    xp = array_module(logits)
    shifted = logits - xp.max(logits, axis=-1, keepdims=True)  # a fresh array: update in place
    shifted -= xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))
    return shifted


def logsumexp(logits):
    """log sum_v exp(logits[..., v]) over the last axis, stable (the max taken out first)."""
    xp = array_module(logits)
    peak = xp.max(logits, axis=-1, keepdims=True)
    return xp.log(xp.sum(xp.exp(logits - peak), axis=-1)) + peak[..., 0]


def softmax(logits):
    """Softmax over the last axis: exp(log_softmax(logits)) with one exp instead of two."""
    return log_softmax_and_softmax(logits)[1]


def log_softmax_and_softmax(logits):
    """(log p, p) over the last axis from one exp: a loss that needs both (the soft
    cross-entropy's log q forward, its q backward) pays for one pass, not two."""
    xp = array_module(logits)
    shifted = logits - xp.max(logits, axis=-1, keepdims=True)
    probs = xp.exp(shifted)
    total = xp.sum(probs, axis=-1, keepdims=True)  # [..., 1]
    probs /= total
    shifted -= xp.log(total)
    return shifted, probs


def cross_entropy_forward(logits, targets, ignore_index: int = -100):
    """Mean next-token cross-entropy over positions whose target is not `ignore_index`.

    logits [N, V], targets int [N] -> (loss scalar, cache).
    """
    xp = array_module(logits)
    logp = log_softmax(logits)  # [N, V]
    valid = targets != ignore_index  # [N]
    count = max(int(xp.count_nonzero(valid)), 1)  # a host int: one scalar sync on a device
    safe = xp.where(valid, targets, 0)
    picked = xp.take_along_axis(logp, safe[:, None], axis=-1)[:, 0]  # [N]
    loss = -xp.sum(xp.where(valid, picked, 0.0)) / count
    return loss, (logp, safe, valid, count)


def cross_entropy_backward(dloss, cache):
    """dloss scalar -> dlogits [N, V] = (softmax - onehot) * valid / count, in the logits' dtype."""
    logp, safe, valid, count = cache
    xp = array_module(logp)
    one_hot = safe[:, None] == arange(logp.shape[-1], like=safe)[None, :]  # [N, V] bool
    dlogits = xp.exp(logp) - xp.astype(one_hot, logp.dtype)  # [N, V]
    row_weight = xp.astype(valid, logp.dtype) * (dloss / count)  # [N]
    return dlogits * row_weight[:, None]
