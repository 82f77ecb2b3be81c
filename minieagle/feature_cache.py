"""The target's hidden states over fixed training windows, computed once and kept on disk.

Training an EAGLE head needs the frozen target's features of every window it sees. For the
2.6M-parameter target a forward per batch is cheap, so `train_eagle` runs it on the fly; for a
real model (SmolLM2-135M: 0.27 GFLOP a token, about 100x the head's own work per token) it is
most of the cost, and the head sees each window many times. So, with `--cache-features`, the
windows are fixed up front and their hidden states written once:

    DIR/meta.json        what was cached: the target's fingerprint, the keys, the shapes
    DIR/windows.npy      int32 [N, L + 1], the token windows; stream.npy int32 [N], their source
    DIR/<key>.npy        float16 [N, L + 1, d] per hidden-state key ("final", or a layer index)
    DIR/target-top.npy, target-lse.npy   (shards `distill` writes since 2026-12-04) the target's
                         argmax and logsumexp at each position (TARGET_STATS, below)
    DIR/progress.json    {"done": n}: windows 0 .. n-1 are written and flushed

The feature files are memory-mapped and filled chunk by chunk; `progress.json` is replaced
atomically only after a chunk is flushed, so a run killed at any point resumes at the first
window not known to be on disk and recomputes at most one chunk. float16 halves the disk and
memory of float32 (SmolLM2: 1.2 kB per token and key); the features of a float32 forward differ
from their float16 copies by about 1e-3 relative, far below the noise the head is trained with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from minieagle import model
from minieagle.errors import InvalidInputError

FORMAT = "minieagle-feature-cache-1"


def _write_json(path: Path, record: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, path)


def key_file_name(key) -> str:
    """The file holding hidden-state `key` ("final" or a layer index) of every window."""
    return f"hidden-{key}.npy"


# What `distill` records beside the features, at every window position t, from the float32
# logits it computed there (the target's prediction of token t + 1): the argmax over the whole
# vocabulary (int32 [N, W]) and the logsumexp of the logits (float32 [N, W]). An EAGLE-3 head's
# loss needs the whole vocabulary only for these two (eagle3.DraftTargets), so a shard that
# holds them spares its training the [d] x [d, V] product at every position.
TARGET_TOP, TARGET_LSE = "target-top", "target-lse"
TARGET_STATS = (TARGET_TOP, TARGET_LSE)


def stats_file_name(name: str) -> str:
    """The file holding TARGET_TOP or TARGET_LSE of every window."""
    return f"{name}.npy"


class FeatureCache:
    """Hidden states of the target over fixed windows (module docstring). Build or reopen one
    with `FeatureCache.build`; read batches with `batch`."""

    def __init__(self, directory: Path, meta: dict):
        self.directory, self.meta = Path(directory), meta
        self.keys = tuple(meta["keys"])
        self.windows = np.load(self.directory / "windows.npy", mmap_mode="r")  # [N, L + 1]
        self.streams = np.load(self.directory / "stream.npy")  # [N]
        self._members = [np.flatnonzero(self.streams == s) for s in np.unique(self.streams)]
        self.hidden = {
            key: np.load(self.directory / key_file_name(key), mmap_mode="r")
            for key in self.keys
        }
        self.stats = {  # TARGET_STATS where recorded (older shards and caches have none)
            name: np.load(self.directory / stats_file_name(name), mmap_mode="r")
            for name in meta.get("target_stats", ())
        }

    def __len__(self) -> int:
        return len(self.windows)

    @classmethod
    def build(
        cls,
        directory,
        target_params,
        target_config,
        windows: np.ndarray,
        streams: np.ndarray,
        keys,
        *,
        fingerprint: str,
        chunk: int = 4,
        progress: bool = True,
    ) -> FeatureCache:
        """Open the cache at `directory`, computing what is missing: hidden states `keys` of
        the target for `windows` int [N, L + 1] (`streams` int [N]: which training stream each
        came from). An existing cache for other windows, keys or target weights is refused."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        keys = tuple(keys)
        windows = np.asarray(windows, dtype=np.int32)
        N, width = windows.shape
        d = target_config.hidden_size
        meta = {
            "format": FORMAT,
            "target_fingerprint": fingerprint,
            "keys": list(keys),
            "windows": N,
            "window_tokens": width,
            "hidden_size": d,
            "dtype": "float16",
            "windows_checksum": int(np.sum(windows.astype(np.int64) * np.arange(1, width + 1))),
        }
        meta_path = directory / "meta.json"
        if meta_path.exists():
            recorded = json.loads(meta_path.read_text())
            changed = [k for k in meta if k != "keys" and recorded.get(k) != meta[k]]
            if not set(keys) <= set(recorded.get("keys", ())):
                changed.append("keys")
            if changed:
                raise InvalidInputError(
                    f"the feature cache in {directory} was made for other "
                    f"{', '.join(changed)} ({ {k: recorded.get(k) for k in changed} }, now "
                    f"{ {k: meta[k] for k in changed} }); delete {directory} to recompute it"
                )
            meta = recorded  # a cache of more keys serves fewer (EAGLE-1 reads EAGLE-3's)
            keys = tuple(recorded["keys"])
        else:
            for name in ("progress.json", "windows.npy", "stream.npy"):
                (directory / name).unlink(missing_ok=True)
            np.save(directory / "windows.npy", windows)
            np.save(directory / "stream.npy", np.asarray(streams, dtype=np.int32))
            for key in keys:
                np.lib.format.open_memmap(
                    directory / key_file_name(key), mode="w+", dtype=np.float16,
                    shape=(N, width, d),
                ).flush()  # fmt: skip
            _write_json(meta_path, meta)
        progress_path = directory / "progress.json"
        done = json.loads(progress_path.read_text())["done"] if progress_path.exists() else 0
        if done < N:
            files = {
                key: np.load(directory / key_file_name(key), mmap_mode="r+") for key in keys
            }
            bar = tqdm(total=N, initial=done, disable=not progress, desc="target features",
                       unit="window")  # fmt: skip
            while done < N:
                stop = min(done + chunk, N)
                _, hidden, _ = model.forward(
                    target_params, target_config, windows[done:stop].astype(np.int64),
                    output_hidden=keys,
                )  # fmt: skip
                for key in keys:
                    files[key][done:stop] = hidden[key].astype(np.float16)
                    files[key].flush()
                done = stop
                _write_json(progress_path, {"done": done})
                bar.update(stop - bar.n)
            bar.close()
            del files
        return cls(directory, meta)

    def batch(self, indices) -> tuple[np.ndarray, dict]:
        """(windows int64 [B, L + 1], {key: float32 [B, L + 1, d]}) of the cached windows."""
        indices = np.asarray(indices)
        windows = np.asarray(self.windows[indices], dtype=np.int64)
        hidden = {key: np.asarray(h[indices], dtype=np.float32) for key, h in self.hidden.items()}
        return windows, hidden

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Indices of a batch: for each row a stream uniformly, then one of its windows (as
        `train.sample_batch` picks a corpus, then an offset)."""
        rows = []
        for _ in range(batch_size):
            members = self._members[rng.integers(len(self._members))]  # the windows of a stream
            rows.append(members[rng.integers(len(members))])
        return np.asarray(rows)


class FeaturePool:
    """Many feature caches (the shards of `distill` runs, corpus windows beside the target's own
    text) read as one: window i of the pool is window i - offset of the cache holding it.
    `keys`: the hidden states every cache holds. `limit` > 0 keeps the first `limit` windows (a
    data budget: the scaling experiment's points are prefixes of one pool). block_sizes: how
    many caches each block holds, in order (default one block): `pass_order` shuffles within
    blocks, and the token counts come from the first block alone."""

    def __init__(self, caches: list, limit: int = 0, block_sizes=None):
        if not caches:
            raise InvalidInputError(
                "no complete feature shard found; run `minieagle distill` first (or wait for its "
                "first shard)"
            )
        self.caches = list(caches)
        sizes = np.asarray([len(c) for c in self.caches])
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])  # [n + 1]
        total = int(self.offsets[-1])
        self.size = min(total, limit) if limit > 0 else total
        widths = {c.windows.shape[1] for c in self.caches}
        if len(widths) != 1:
            raise InvalidInputError(
                f"the feature shards hold windows of {sorted(widths)} tokens; pass shards of one "
                "window length (one seq_len)"
            )
        self.window_tokens = widths.pop()
        block_sizes = list(block_sizes or [len(self.caches)])
        if sum(block_sizes) != len(self.caches) or min(block_sizes) < 1:
            raise InvalidInputError(
                f"block_sizes={block_sizes} must be positive and add up to the {len(self.caches)} "
                "caches"
            )
        ends = self.offsets[np.cumsum(block_sizes)]  # windows at the end of each block
        self.block_bounds = np.minimum(np.concatenate([[0], ends]), self.size)  # [blocks + 1]
        self.keys = tuple(k for k in self.caches[0].keys if all(k in c.keys for c in self.caches))

    def __len__(self) -> int:
        return self.size

    def _locate(self, indices) -> list[tuple[FeatureCache, int]]:
        """(the cache holding it, its index there) for each of pool windows `indices`."""
        indices = np.asarray(indices)
        which = np.searchsorted(self.offsets, indices, side="right") - 1
        return [(self.caches[c], int(i - self.offsets[c]))
                for i, c in zip(indices, which, strict=True)]  # fmt: skip

    def batch(self, indices) -> tuple[np.ndarray, dict]:
        """(windows int64 [B, W], {key: float32 [B, W, d]}) of pool windows `indices`."""
        windows, hidden = [], {key: [] for key in self.keys}
        for cache, local in self._locate(indices):
            windows.append(np.asarray(cache.windows[local], dtype=np.int64))
            for key in self.keys:
                hidden[key].append(np.asarray(cache.hidden[key][local], dtype=np.float32))
        return np.stack(windows), {key: np.stack(v) for key, v in hidden.items()}

    def caches_of(self, indices) -> list:
        """The cache (shard) holding each of pool windows `indices`."""
        return [cache for cache, _ in self._locate(indices)]

    def target_stats(self, indices):
        """(TARGET_TOP int64 [B, W], TARGET_LSE float32 [B, W]) of pool windows `indices`, -1
        and NaN in the rows of windows whose shard does not record them; None if no shard of
        the pool does."""
        if not any(set(TARGET_STATS) <= set(c.stats) for c in self.caches):
            return None
        located = self._locate(indices)
        top = np.full((len(located), self.window_tokens), -1, dtype=np.int64)
        lse = np.full((len(located), self.window_tokens), np.nan, dtype=np.float32)
        for i, (cache, local) in enumerate(located):
            if set(TARGET_STATS) <= set(cache.stats):
                top[i] = cache.stats[TARGET_TOP][local]
                lse[i] = cache.stats[TARGET_LSE][local]
        return top, lse

    def pass_order(self, seed: int) -> np.ndarray:
        """A fixed order of the pool's windows: batch k of a one-pass run reads entries
        [k B, (k + 1) B) of it, so every window is seen once per pass. Block after block, each
        shuffled by its own generator: a block's order does not depend on the blocks after it
        (nor on whether they exist yet)."""
        parts = []
        bounds = self.block_bounds
        for b, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            rng = np.random.default_rng([seed, 7, b])
            parts.append(start + rng.permutation(int(stop - start)))
        return np.concatenate(parts)

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Random window indices, drawn uniformly from the pool."""
        return rng.integers(0, self.size, batch_size)

    def token_counts(self, vocab_size: int) -> np.ndarray:
        """How often each token id occurs in the windows of the first block: int64 [V] (the
        first block, so that a run that grows by blocks keeps the counts it started with)."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        remaining = int(self.block_bounds[1])
        for cache in self.caches:
            take = min(len(cache), remaining)
            if take <= 0:
                break
            counts += np.bincount(np.asarray(cache.windows[:take]).ravel(),
                                  minlength=vocab_size)[:vocab_size]  # fmt: skip
            remaining -= take
        return counts


def tile_windows(streams, seq_len: int, rng: np.random.Generator, max_windows: int = 0):
    """Non-overlapping windows of seq_len + 1 tokens covering each stream, shuffled:
    (windows int32 [N, seq_len + 1], stream index int32 [N]). max_windows > 0 keeps that many."""
    rows, sources = [], []
    for index, stream in enumerate(streams):
        count = len(stream) // (seq_len + 1)
        if count:
            rows.append(np.asarray(stream[: count * (seq_len + 1)]).reshape(count, seq_len + 1))
            sources.append(np.full(count, index))
    if not rows:
        raise InvalidInputError(
            f"no stream holds a window of seq_len + 1 = {seq_len + 1} tokens; lower --seq-len"
        )
    windows, stream_ids = np.concatenate(rows), np.concatenate(sources)
    order = rng.permutation(len(windows))
    if max_windows:
        order = order[:max_windows]
    return windows[order].astype(np.int32), stream_ids[order].astype(np.int32)
