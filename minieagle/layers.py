"""Forward/backward pairs for every layer of the Llama decoder.

Each layer is `x_forward(...) -> (out, cache)` and `x_backward(dout, cache) -> grads`, the grads
returned fresh (nothing accumulates in hidden state). Shapes use B = batch, T = new positions,
S = attended positions (cache + new), d = hidden size, H = query heads, Hkv = key/value heads,
G = H // Hkv, hd = head dim, V = vocabulary. Array module comes from the inputs (NumPy or CuPy).
"""

from __future__ import annotations

from minieagle.backend import array_module, scatter_add_rows

# ---------------------------------------------------------------------------- embedding


def embedding_forward(weight, ids):
    """Row lookup. weight [V, d], ids int [B, T] -> out [B, T, d]."""
    return weight[ids], (ids, weight.shape)


def embedding_backward(dout, cache):
    """dout [B, T, d] -> dweight [V, d] (rows of repeated ids add up)."""
    ids, shape = cache
    return scatter_add_rows(shape, ids.reshape(-1), dout.reshape(-1, shape[1]))


# ---------------------------------------------------------------------------- linear


def linear_forward(x, weight):
    """y = x W^T with W stored [out, in] as in nn.Linear. x [..., in] -> y [..., out]."""
    return x @ weight.T, (x, weight)


def linear_backward(dout, cache):
    """dout [..., out] -> (dx [..., in], dweight [out, in])."""
    x, weight = cache
    dx = dout @ weight  # [..., out] @ [out, in] -> [..., in]
    dweight = dout.reshape(-1, dout.shape[-1]).T @ x.reshape(-1, x.shape[-1])  # [out, in]
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
    d = normed.shape[-1]
    dweight = (dout * normed).reshape(-1, d).sum(axis=0)  # [d]
    dnormed = dout * weight  # [..., d]
    # normed = x * r with r = mean(x^2)^-1/2: dx = r * (dn - normed * mean(dn * normed))
    dx = inv_rms * (dnormed - normed * (dnormed * normed).mean(axis=-1, keepdims=True))
    return dx, dweight


# ---------------------------------------------------------------------------- RoPE (rotate-half)


def rope_tables(position_ids, head_dim: int, theta: float, dtype):
    """cos, sin [..., T, hd] for integer positions [..., T] (HF rotate-half layout: the frequency
    vector is repeated twice, not interleaved)."""
    xp = array_module(position_ids)
    inv_freq = 1.0 / theta ** (xp.arange(0, head_dim, 2, dtype=xp.float64) / head_dim)  # [hd/2]
    angles = position_ids[..., None].astype(xp.float64) * inv_freq  # [..., T, hd/2]
    angles = xp.concatenate([angles, angles], axis=-1)  # [..., T, hd]
    return xp.cos(angles).astype(dtype), xp.sin(angles).astype(dtype)


def _rotate_half(x):
    xp = array_module(x)
    half = x.shape[-1] // 2
    return xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


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
    qg = q.reshape(B, Hkv, H // Hkv, T, hd)  # [B, Hkv, G, T, hd]
    scale = 1.0 / hd**0.5
    scores = (qg @ k[:, :, None].swapaxes(-1, -2)) * scale  # [B, Hkv, G, T, S]
    scores = xp.where(mask, scores, -xp.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = xp.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)  # [B, Hkv, G, T, S]
    out = probs @ v[:, :, None]  # [B, Hkv, G, T, hd]
    return out.reshape(B, H, T, hd), (qg, k, v, probs, scale)


def attention_backward(dout, cache):
    """dout [B, H, T, hd] -> (dq [B, H, T, hd], dk [B, Hkv, S, hd], dv [B, Hkv, S, hd])."""
    qg, k, v, probs, scale = cache
    dout = dout.reshape(qg.shape)  # [B, Hkv, G, T, hd]
    dv = (probs.swapaxes(-1, -2) @ dout).sum(axis=2)  # [B, Hkv, S, hd]
    dprobs = dout @ v[:, :, None].swapaxes(-1, -2)  # [B, Hkv, G, T, S]
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    dq = (dscores @ k[:, :, None]) * scale  # [B, Hkv, G, T, hd]
    dk = (dscores.swapaxes(-1, -2) @ qg).sum(axis=2) * scale  # [B, Hkv, S, hd]
    B, Hkv, G, T, hd = qg.shape
    return dq.reshape(B, Hkv * G, T, hd), dk, dv


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
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))


def cross_entropy_forward(logits, targets, ignore_index: int = -100):
    """Mean next-token cross-entropy over positions whose target is not `ignore_index`.

    logits [N, V], targets int [N] -> (loss scalar, cache).
    """
    xp = array_module(logits)
    logp = log_softmax(logits)  # [N, V]
    valid = targets != ignore_index  # [N]
    count = max(int(valid.sum()), 1)
    safe = xp.where(valid, targets, 0)
    picked = xp.take_along_axis(logp, safe[:, None], axis=-1)[:, 0]  # [N]
    loss = -(picked * valid).sum() / count
    return loss, (logp, safe, valid, count)


def cross_entropy_backward(dloss, cache):
    """dloss scalar -> dlogits [N, V] = (softmax - onehot) * valid / count."""
    logp, safe, valid, count = cache
    xp = array_module(logp)
    dlogits = xp.exp(logp)
    dlogits[xp.arange(safe.shape[0]), safe] -= 1.0
    return dlogits * (valid[:, None] * (dloss / count))
