"""The array module of given arrays (NumPy, CuPy, or any array-API namespace) and the few shims.

Library code never picks a backend by itself: it asks `array_module(x)` for the module of the
arrays it was given and calls functions through it (`xp.sum(x, axis=-1)`, `xp.reshape`,
`xp.permute_dims`: the array-API names, which NumPy >= 2 and CuPy >= 14 share). So the same code
runs on NumPy, on CuPy on a GPU, and under array-api-strict on a fake device, the test lane that
catches silent host conversions. Crossing to the host is always explicit (`to_host`); new arrays
are made on the device of an existing one (`arange`, `zeros`, `to_device` with `like=`).
"""

from __future__ import annotations

import numpy as np


def array_module(*arrays):
    """The module that created these arrays: numpy, cupy, or an array-API namespace (numpy when
    none of them is an array, e.g. Python ints)."""
    for a in arrays:
        if type(a) is np.ndarray:
            continue
        library = type(a).__module__.split(".")[0]
        if library == "numpy":
            continue
        if library == "cupy":
            import cupy

            return cupy
        namespace = getattr(a, "__array_namespace__", None)
        if namespace is not None:
            return namespace()
    return np


def _on_device_of(like) -> dict:
    """Keyword arguments that put a new array on the device of `like`: `device=` for array-API
    namespaces; none for NumPy (one device) and CuPy (it allocates on the current CUDA device and
    its creation functions take no `device=`)."""
    xp = array_module(like)
    if xp is np or xp.__name__ == "cupy":
        return {}
    return {"device": like.device}


def to_host(x) -> np.ndarray:
    """An explicit device -> host copy (the array itself for NumPy arrays)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return x.get()
    xp = array_module(x)
    if hasattr(xp, "Device"):  # array-api-strict (the test lane): to its CPU device, then NumPy
        return np.asarray(x.to_device(xp.Device("CPU_DEVICE")))
    return np.asarray(x)


def to_device(x, like, dtype=None):
    """Host data (a NumPy array or nested lists) as an array of the module and device of `like`."""
    xp = array_module(like)
    return xp.asarray(x, dtype=dtype, **_on_device_of(like))


def arange(*args, like, dtype=None):
    """`arange(stop)` or `arange(start, stop[, step])` on the module and device of `like`."""
    return array_module(like).arange(*args, dtype=dtype, **_on_device_of(like))


def zeros(shape, *, like, dtype=None):
    """Zeros of `shape` on the module and device of `like`, in its dtype unless `dtype` is given."""
    dtype = like.dtype if dtype is None else dtype
    return array_module(like).zeros(shape, dtype=dtype, **_on_device_of(like))


def ones(shape, *, like, dtype=None):
    """Ones of `shape` on the module and device of `like`, in its dtype unless `dtype` is given."""
    dtype = like.dtype if dtype is None else dtype
    return array_module(like).ones(shape, dtype=dtype, **_on_device_of(like))


def contiguous(x):
    """A row-major copy of x (e.g. of a transposed weight, so a matmul reads it in order);
    array-API namespaces have no layout, so there it is a plain copy."""
    xp = array_module(x)
    if xp is np or xp.__name__ == "cupy":
        return xp.ascontiguousarray(x)
    return xp.asarray(x, copy=True)


class _ArrayApiOps:
    """The few operations the fast inference path repeats, spelled with the array API."""

    def __init__(self, xp):
        self.xp = xp

    def reshape(self, x, shape):
        return self.xp.reshape(x, shape)

    def permute_dims(self, x, axes):
        return self.xp.permute_dims(x, axes)

    def sum_last(self, x):
        """Sum over the last axis, kept as an axis of size 1."""
        return self.xp.sum(x, axis=-1, keepdims=True)

    def max_last(self, x):
        """Max over the last axis, kept as an axis of size 1."""
        return self.xp.max(x, axis=-1, keepdims=True)


class _NativeOps(_ArrayApiOps):
    """The same for NumPy and CuPy arrays, through their methods: NumPy's module-level
    `reshape`, `permute_dims`, `sum` and `max` are Python wrappers that cost a few
    microseconds a call, as much as the arithmetic on a decoded token's small arrays."""

    def reshape(self, x, shape):
        return x.reshape(shape)

    def permute_dims(self, x, axes):
        return x.transpose(axes)

    def sum_last(self, x):
        return x.sum(axis=-1, keepdims=True)

    def max_last(self, x):
        return x.max(axis=-1, keepdims=True)


_OPS: dict = {}


def ops(x):
    """The fast path's operations for the module of array x (`_NativeOps` on NumPy and CuPy,
    `_ArrayApiOps` elsewhere); the results are the same arrays either way."""
    xp = array_module(x)
    found = _OPS.get(xp.__name__)
    if found is None or found.xp is not xp:
        native = xp is np or xp.__name__ == "cupy"
        found = _OPS[xp.__name__] = (_NativeOps if native else _ArrayApiOps)(xp)
    return found


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
    one_hot = rows[:, None] == arange(shape[0], like=rows)[None, :]  # [N, V] bool
    return xp.astype(one_hot, values.dtype).T @ values  # [V, N] @ [N, d] -> [V, d]


DEVICES = ("cpu", "gpu")


def device_module(device: str):
    """The array module of a device name: numpy for "cpu", cupy for "gpu" (a clear error when
    CuPy or a CUDA device is missing)."""
    if device == "cpu":
        return np
    if device != "gpu":
        from minieagle.errors import InvalidInputError

        raise InvalidInputError(f"device={device!r} is not one of {DEVICES}; pass cpu or gpu")
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # ImportError, or CUDA's own error when no device is visible
        from minieagle.errors import InvalidInputError

        raise InvalidInputError(
            f"device='gpu' needs CuPy and a CUDA device, but {type(error).__name__}: {error}; "
            "install the extra on a CUDA machine (pip install 'minieagle[gpu]') or pass "
            "--device cpu"
        ) from error
    return cupy


def put(tree, xp, device=None):
    """A copy of `tree` (dicts, lists, tuples) with every NumPy array moved to module `xp`
    (numpy: kept as is; cupy: copied to the current GPU; an array-API namespace: to `device`,
    e.g. array-api-strict's fake device in the test lane). Other leaves are kept, so a head's
    config and its draft vocabulary travel unchanged."""
    if isinstance(tree, np.ndarray):
        if xp is np:
            return tree
        return xp.asarray(tree) if device is None else xp.asarray(tree, device=device, copy=True)
    if isinstance(tree, dict):
        return {key: put(value, xp, device) for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(put(value, xp, device) for value in tree)
    return tree


def synchronize(x) -> None:
    """Wait until the device has finished the work that produces `x` (nothing to wait for on
    NumPy). Timers must call it before reading the clock: CuPy returns before a kernel ends."""
    if array_module(x).__name__ == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()
