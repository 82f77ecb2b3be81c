"""A float64 centred-difference gradient checker, one bound per tensor (llm.c's lesson).

The test suite and the course assignments' graders (minieagle/assignments) share it. The tests
build a scalar `f()` that reads its inputs (arrays perturbed in place here) and, for a
layer, contracts the output with a fixed *random* upstream gradient: f = sum(out * dout). A
uniform dout would hide bugs that only show when rows or positions are weighted differently.

For each tensor the error is max|num - ana| / (max|num| + max|ana|) over the checked entries, so a
tensor with tiny gradients is judged on its own scale, not drowned by a large neighbour.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numerical_gradient(
    f: Callable[[], float], x: np.ndarray, flat_indices: np.ndarray, eps: float = 1e-6
) -> np.ndarray:
    """(f(x + eps e_i) - f(x - eps e_i)) / (2 eps) at the flat indices of x -> [len(indices)].

    x is perturbed in place (so `f` must read it, not a copy) and restored exactly.
    """
    flat = x.reshape(-1)  # a view: x must be contiguous
    if not np.shares_memory(flat, x):
        raise ValueError("x must be a contiguous array so that it can be perturbed in place")
    out = np.empty(len(flat_indices))
    for n, i in enumerate(flat_indices):
        saved = flat[i]
        flat[i] = saved + eps
        f_plus = f()
        flat[i] = saved - eps
        f_minus = f()
        flat[i] = saved
        out[n] = (f_plus - f_minus) / (2 * eps)
    return out


def relative_error(numerical: np.ndarray, analytic: np.ndarray) -> float:
    """max|num - ana| / (max|num| + max|ana|); 0 when both are exactly zero."""
    scale = np.max(np.abs(numerical)) + np.max(np.abs(analytic))
    if scale == 0:
        return 0.0
    return float(np.max(np.abs(numerical - analytic)) / scale)


def checked_entries(analytic: np.ndarray, entries: int, rng: np.random.Generator) -> np.ndarray:
    """Every flat index of a small tensor; for a large one, `entries` random indices plus the
    `entries` largest |analytic| ones (so a sparse gradient is not judged on zeros alone)."""
    size = analytic.size
    if size <= 2 * entries:
        return np.arange(size)
    random = rng.choice(size, entries, replace=False)
    largest = np.argsort(np.abs(analytic).reshape(-1))[-entries:]
    return np.unique(np.concatenate([random, largest]))


def gradient_errors(
    f: Callable[[], float],
    inputs: dict[str, np.ndarray],
    analytic: dict[str, np.ndarray],
    *,
    seed: int = 0,
    entries: int = 20,
    eps: float = 1e-6,
) -> dict[str, float]:
    """{name: relative error} of analytic[name] against centred differences of f in inputs[name].

    Every input must be float64 (float32 differences are too coarse for these bounds).
    """
    rng = np.random.default_rng(seed)
    errors = {}
    for name, x in inputs.items():
        if x.dtype != np.float64:
            raise TypeError(f"{name} has dtype {x.dtype}; gradient checks need float64")
        ana = np.asarray(analytic[name], dtype=np.float64)
        if ana.shape != x.shape:
            raise ValueError(f"gradient of {name} has shape {ana.shape}; expected {x.shape}")
        idx = checked_entries(ana, entries, rng)
        errors[name] = relative_error(numerical_gradient(f, x, idx, eps), ana.reshape(-1)[idx])
    return errors


def failures(errors: dict[str, float], bounds: dict[str, float] | float) -> dict[str, str]:
    """{name: 'error > bound'} for every tensor over its own bound (empty = all pass)."""
    out = {}
    for name, err in errors.items():
        bound = bounds if isinstance(bounds, float) else bounds[name]
        if not err < bound:
            out[name] = f"{err:.2e} > {bound:.0e}"
    return out
