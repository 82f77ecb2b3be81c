"""The two losses of EAGLE-1's draft head (paper §3.2): feature regression and soft-label
cross-entropy, each a `x_forward(...) -> (loss, cache)` / `x_backward(dloss, cache)` pair.

Both average over the positions where `loss_mask` is 1 (the sum over masked positions divided by
their count), as the EAGLE training code does. Shapes: [..., T] positions, d hidden, V vocabulary.
"""

from __future__ import annotations

from minieagle.backend import array_module
from minieagle.layers import log_softmax_and_softmax


def _masked_mean(per_position, loss_mask):
    """sum(per_position * mask) / max(sum(mask), 1) and that count (a host float)."""
    xp = array_module(per_position)
    weights = xp.astype(loss_mask, per_position.dtype)  # [..., T]
    count = max(float(xp.sum(weights)), 1.0)  # a host float: one scalar sync on a device
    return xp.sum(per_position * weights) / count, weights, count


def smooth_l1_forward(predicted, target, loss_mask):
    """SmoothL1 with beta = 1, averaged over the hidden dimension, then over masked positions.

    Per element z = predicted - target: 0.5 z^2 where |z| < 1, else |z| - 0.5.
    predicted, target [..., T, d]; loss_mask [..., T] (bool or 0/1) -> (loss scalar, cache).
    """
    xp = array_module(predicted)
    diff = predicted - target  # [..., T, d]
    absolute = xp.abs(diff)
    elementwise = xp.where(absolute < 1.0, 0.5 * diff * diff, absolute - 0.5)
    per_position = xp.mean(elementwise, axis=-1)  # [..., T]
    loss, weights, count = _masked_mean(per_position, loss_mask)
    return loss, (diff, weights, count)


def smooth_l1_backward(dloss, cache):
    """dloss scalar -> dpredicted [..., T, d] = clip(z, -1, 1) / d * mask / count."""
    diff, weights, count = cache
    xp = array_module(diff)
    slope = xp.clip(diff, -1.0, 1.0)  # d/dz of the elementwise loss
    scale = weights[..., None] * (dloss / (count * diff.shape[-1]))  # [..., T, 1]
    return slope * scale


def soft_cross_entropy_forward(logits, target_probs, loss_mask):
    """-sum_v p_v log q_v per position, averaged over masked positions, with q = softmax(logits)
    the draft distribution and p the target's own distribution (soft labels, not data tokens).

    logits, target_probs [..., T, V]; loss_mask [..., T] -> (loss scalar, cache). The cache
    holds (log q, p, mask weights, count, q): q is kept so that neither the backward nor a
    caller's metrics recompute it from log q.
    """
    xp = array_module(logits)
    log_q, q = log_softmax_and_softmax(logits)  # [..., T, V] each
    per_position = -xp.sum(target_probs * log_q, axis=-1)  # [..., T]
    loss, weights, count = _masked_mean(per_position, loss_mask)
    return loss, (log_q, target_probs, weights, count, q)


def soft_cross_entropy_backward(dloss, cache):
    """dloss scalar -> dlogits [..., T, V] = (q * sum_v p_v - p) * mask / count."""
    _, target_probs, weights, count, q = cache
    xp = array_module(q)
    total = xp.sum(target_probs, axis=-1, keepdims=True)  # [..., T, 1]; 1 for a distribution
    dlogits = q * total  # [..., T, V], a fresh array: finished in place
    dlogits -= target_probs
    dlogits *= weights[..., None] * (dloss / count)
    return dlogits
