"""The array module of given arrays (NumPy, CuPy, or any array-API namespace) and the few shims.

Library code never picks a backend by itself: it asks `array_module(x)` for the module of the
arrays it was given, so the same code runs on NumPy, on CuPy on a GPU, and under array-api-strict
in the test lane that catches silent host conversions. Crossing to the host is always explicit
(`to_host`).
"""

from __future__ import annotations

import numpy as np


def array_module(*arrays):
    """The module that created these arrays: numpy, cupy, or an array-API namespace."""
    for a in arrays:
        namespace = getattr(a, "__array_namespace__", None)
        if namespace is not None and type(a).__module__.split(".")[0] not in ("numpy",):
            module = type(a).__module__.split(".")[0]
            if module == "cupy":
                import cupy

                return cupy
            return namespace()
    return np


def to_host(x) -> np.ndarray:
    """An explicit device -> host copy (a no-op view for NumPy arrays)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return x.get()
    return np.asarray(x)


def to_device(x, like):
    """Put a host array on the device (and module) of `like`."""
    xp = array_module(like)
    if xp is np:
        return np.asarray(x)
    return xp.asarray(x)


def scatter_add_rows(shape, rows, values):
    """zeros(shape) with values[i] added to row rows[i]; repeated rows add up.

    shape (V, d), rows int [N], values [N, d] -> [V, d]. NumPy spells this np.add.at, CuPy
    cupyx.scatter_add; the array API has no scatter, so it is a one-hot matmul there.
    """
    xp = array_module(values)
    if xp is np:
        out = np.zeros(shape, dtype=values.dtype)
        np.add.at(out, rows, values)
        return out
    if xp.__name__ == "cupy":
        import cupyx

        out = xp.zeros(shape, dtype=values.dtype)
        cupyx.scatter_add(out, rows, values)
        return out
    one_hot = xp.astype(rows[:, None] == xp.arange(shape[0])[None, :], values.dtype)  # [N, V]
    return one_hot.T @ values
