"""Shared test configuration: tests marked `gpu` are skipped, with the reason, without a GPU."""

from __future__ import annotations

import os

# The suite's matrices are small: one BLAS thread is as fast, and two threads per process thrash
# when a second process (a notebook kernel, a subprocess) shares the two cores. Must be set before
# NumPy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# NumPy calls have variable latency on shared machines, so no per-example deadline; CI runs are
# derandomized so that a red CI is reproducible (HYPOTHESIS_PROFILE=dev explores new examples).
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _gpu_unavailable_reason() -> str | None:
    """Why CuPy cannot run here, or None when it can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'minieagle[gpu]' on a CUDA machine)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, no runtime library, ...
        return f"CuPy is installed but CUDA is unusable: {error}"
    return None if count > 0 else "CuPy is installed but no CUDA device is visible"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    reason = _gpu_unavailable_reason() if gpu_items else None
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))
