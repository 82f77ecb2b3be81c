"""Logits processing (temperature, top-k, top-p) and the one small interface for randomness.

Vanilla decoding and the lossless speculative verifiers must sample from the *same* processed
distribution, so `target_distribution` is the only place where logits become probabilities. The
result is a float64 NumPy vector on the host: only the [V] logits cross from the device, with an
explicit transfer, and every decision after that is made in float64.

All randomness goes through `Randomness` (a biased coin and a draw from a probability vector).
Production uses `SeededRandomness`; tests can plug in an object that records or enumerates the
calls, so the exact output law of the real code can be computed instead of estimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from minieagle.backend import to_host
from minieagle.errors import InvalidInputError

_SUM_TOLERANCE = 1e-6  # how far from 1 a probability vector handed to `draw` may sum (rounding)


@dataclass(frozen=True)
class SamplingParams:
    """How logits become a sampling distribution (Hugging Face `generate` semantics and order).

    temperature: 0 means greedy (a one-hot at the argmax); otherwise logits are divided by it.
    top_k: 0 turns it off; else keep exactly the k largest logits. Ties at the k-th value are
        broken by token id (the lowest ids stay), so `top_k=1` is the greedy token. Hugging Face
        keeps every token tied with the k-th; ours keeps the kept set's size fixed at min(k, V).
    top_p: nucleus sampling; keep the smallest set of most probable tokens (after top-k) whose
        probability mass is at least top_p. 1 turns it off.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        t = self.temperature
        fix_t = "pass 0 for greedy or a positive value such as 0.7"
        if math.isnan(t):
            raise InvalidInputError(f"temperature={t} is not a number; {fix_t}")
        if t < 0:
            raise InvalidInputError(f"temperature={t} is negative; {fix_t}")
        if math.isinf(t):
            raise InvalidInputError(f"temperature={t} is not finite; {fix_t}")
        k = self.top_k
        fix_k = "pass 0 to turn top-k off or a count such as 50"
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise InvalidInputError(f"top_k={k!r} is not an integer; {fix_k}")
        if k < 0:
            raise InvalidInputError(f"top_k={k} is negative; {fix_k}")
        if not 0 < self.top_p <= 1:  # also rejects NaN
            raise InvalidInputError(
                f"top_p={self.top_p} is outside (0, 1]; pass a probability such as 0.9"
            )

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (temperature 0)."""
        return self.temperature == 0


def setting_name(sampling: SamplingParams, *, sampled_tree: bool = False) -> str:
    """The label of a sampling setting, under which calibrations and tree sizes are fitted and
    cached: "T=0" (greedy), "T=1", "T=0.7,top_k=50,top_p=0.9" (filters named when on), with
    ",sampled" for EAGLE-2's sampled tree at T > 0, whose confidences mean something else
    (`Eagle2Drafter(sampled_tree=True)`)."""
    if sampling.greedy:
        return "T=0"
    parts = [f"T={sampling.temperature:g}"]
    if sampling.top_k:
        parts.append(f"top_k={sampling.top_k}")
    if sampling.top_p < 1:
        parts.append(f"top_p={sampling.top_p:g}")
    if sampled_tree:
        parts.append("sampled")
    return ",".join(parts)


def _to_host_float64(x) -> np.ndarray:
    """An explicit device -> host copy as float64."""
    return np.asarray(to_host(x), dtype=np.float64)


def target_distribution(logits, params: SamplingParams) -> np.ndarray:
    """The distribution a token is sampled from: temperature, then top-k, then top-p.

    logits: [V] on any array module (NumPy, CuPy); all entries must be finite.
    Returns a float64 NumPy vector [V] on the host that sums to 1 and is zero outside the kept set.
    Greedy (temperature 0) gives a one-hot at the argmax, the lowest token id on ties.
    This is the p (target) or q (draft) of the speculative-sampling acceptance rule
    min(1, p/q) (Leviathan et al. 2023; EAGLE section 3.2); both must come from this function.
    """
    x = _to_host_float64(logits)  # [V]
    if x.ndim != 1 or x.size == 0:
        raise InvalidInputError(
            f"logits must be one non-empty vector of shape [V]; got shape {x.shape}"
        )
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise InvalidInputError(
            f"logits hold {bad} non-finite value(s) (NaN or inf) among V={x.size}; check the model "
            "forward for overflow, and mask tokens with a large negative finite logit, not -inf"
        )
    vocab_size = x.size
    if params.greedy:
        one_hot = np.zeros(vocab_size)
        one_hot[np.argmax(x)] = 1.0
        return one_hot

    # Subtracting the max first keeps the largest entry at exp(0) = 1; a gap too wide for float64
    # overflows to -inf, whose exp is the correct weight 0.
    with np.errstate(over="ignore"):
        weights = np.exp((x - x.max()) / params.temperature)  # [V], unnormalised softmax(x / T)
    if not 0 < params.top_k < vocab_size and params.top_p >= 1:  # no filter: nothing to sort
        return weights / weights.sum()
    order = np.argsort(-x, kind="stable")  # [V] token ids, largest logit first, lowest id on ties
    keep = vocab_size
    if 0 < params.top_k < vocab_size:
        keep = params.top_k
    if params.top_p < 1:
        cumulative = np.cumsum(weights[order[:keep]])  # [keep] mass of the top-1, top-2, ...
        # First prefix whose mass reaches top_p (relative to the top-k mass, i.e. renormalised).
        reach = int(np.searchsorted(cumulative, params.top_p * cumulative[-1], side="left"))
        keep = min(reach + 1, keep)
    kept = order[:keep]
    probs = np.zeros(vocab_size)
    probs[kept] = weights[kept]
    return probs / probs.sum()


def target_distributions(logits, params: SamplingParams) -> np.ndarray:
    """`target_distribution` of every row of a matrix [F, V] -> host float64 [F, V]: one softmax
    over all rows where no top-k / top-p filter applies (a sampled draft tree's level), else row
    by row."""
    x = _to_host_float64(logits)  # [F, V]
    if x.ndim != 2 or x.shape[1] == 0:
        raise InvalidInputError(
            f"logits must be a matrix of shape [F, V] with V > 0; got shape {x.shape}"
        )
    vocab_size = x.shape[1]
    if len(x) == 0:
        return np.zeros_like(x)
    if params.greedy or 0 < params.top_k < vocab_size or params.top_p < 1:
        return np.stack([target_distribution(row, params) for row in x])
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise InvalidInputError(
            f"logits hold {bad} non-finite value(s) (NaN or inf) among {x.size}; check the model "
            "forward for overflow, and mask tokens with a large negative finite logit, not -inf"
        )
    with np.errstate(over="ignore"):  # as target_distribution: a too-wide gap weighs 0
        weights = np.exp((x - x.max(axis=-1, keepdims=True)) / params.temperature)  # [F, V]
    return weights / weights.sum(axis=-1, keepdims=True)


class Randomness(Protocol):
    """The one interface all randomness goes through (decoding and verification alike)."""

    def coin(self, p_true: float) -> bool:
        """True with probability p_true, a probability in [0, 1]."""
        ...

    def draw(self, probs) -> int:
        """An index drawn from probs, a host float64 probability vector [V]."""
        ...


def _check_coin(p_true: float) -> None:
    if not 0 <= p_true <= 1:  # also rejects NaN
        raise InvalidInputError(
            f"p_true={p_true} is outside [0, 1]; pass a probability such as 0.5"
        )


def _inverse_cdf(probs, u: float) -> int:
    """The index i with cdf[i-1] <= u * total < cdf[i], for a uniform u in [0, 1].

    probs: [V] non-negative, summing to 1 within rounding. Zero-probability indices are never
    returned: their cdf step is empty, and u = 1 (a float32 uniform can round up to it) gives the
    last index with positive probability.
    """
    p = np.asarray(probs, dtype=np.float64)  # [V]; a device array raises here, by design
    if p.ndim != 1 or p.size == 0:
        raise InvalidInputError(
            f"probs must be one non-empty vector of shape [V]; got shape {p.shape}"
        )
    bad = int(np.count_nonzero(~np.isfinite(p) | (p < 0)))
    if bad:
        raise InvalidInputError(
            f"probs hold {bad} negative or non-finite value(s); pass a probability vector "
            "such as target_distribution(...)"
        )
    cdf = np.cumsum(p)  # [V]
    total = cdf[-1]
    if abs(total - 1) > _SUM_TOLERANCE:
        raise InvalidInputError(
            f"probs sum to {float(total)!r}, not 1 (tolerance {_SUM_TOLERANCE}); "
            "normalise them first"
        )
    index = int(np.searchsorted(cdf, u * total, side="right"))
    if index == p.size:
        index = int(np.flatnonzero(p)[-1])
    return index


class SeededRandomness:
    """Production randomness: each coin and each draw consumes one uniform of a seeded
    `numpy.random.Generator` (PCG64), so a seed fixes the whole decoding run."""

    def __init__(self, seed: int | None = None) -> None:
        self._generator = np.random.default_rng(seed)

    def coin(self, p_true: float) -> bool:
        _check_coin(p_true)
        return bool(self._generator.random() < p_true)

    def draw(self, probs) -> int:
        return _inverse_cdf(probs, self._generator.random())


def top_k_indices(values: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest entries of a host vector [V], largest first, the lowest index
    on ties: `argsort(-values, kind="stable")[:k]` without sorting all V (partition first)."""
    k = min(k, values.shape[-1])
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(values, values.shape[-1] - k)[values.shape[-1] - k]  # k-th largest
    candidates = np.flatnonzero(values >= kth)  # ascending ids: every tie at the k-th value
    return candidates[np.argsort(-values[candidates], kind="stable")[:k]]


def top_k_rows(values: np.ndarray, k: int) -> np.ndarray:
    """`top_k_indices` of every row of a host matrix [F, V] -> int [F, min(k, V)], in one
    partition for all rows (a row whose k-th value is tied falls back to `top_k_indices`)."""
    F, V = values.shape
    k = min(k, V)
    if k <= 0 or F == 0:
        return np.zeros((F, max(k, 0)), dtype=np.int64)
    if k == 1:  # argmax takes the first of tied maxima: the lowest id
        return np.argmax(values, axis=-1)[:, None]
    kth = np.partition(values, V - k, axis=-1)[:, V - k]  # [F] the k-th largest of each row
    above = values >= kth[:, None]  # [F, V]: exactly k per row unless the k-th value is tied
    if not (above.sum(axis=-1) == k).all():
        return np.stack([top_k_indices(row, k) for row in values])
    ids = np.flatnonzero(above).reshape(F, k) % V  # [F, k] ascending ids (1-D nonzero is fast)
    order = np.argsort(-np.take_along_axis(values, ids, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(ids, order, axis=-1)  # largest first, lowest id on ties


def sample_token(logits, params: SamplingParams, rng: Randomness) -> int:
    """The next token id: the argmax when greedy (rng untouched), else one draw from
    `target_distribution(logits, params)`. logits: [V] on any array module."""
    probs = target_distribution(logits, params)  # [V] host float64
    if params.greedy:
        return int(np.argmax(probs))
    return int(rng.draw(probs))
