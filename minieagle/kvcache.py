"""The key/value cache: append new positions, keep a chosen subset of them (tree acceptance).

Keys and values of every layer live in buffers `[B, Hkv, allocated, hd]`; `length` says how many
positions are valid. Appending writes in place; a buffer that is full is replaced by one twice as
long (never past `capacity`, the hard limit), so a model with a context of 10^9 positions costs
only what it uses, and the copies cost O(1) per position on average. After a draft tree is
verified, `keep` compacts the accepted nodes (a subset of the positions just appended, in order)
to the front of that block and drops the rest — the "KV-cache surgery" every speculative method
shares.
"""

from __future__ import annotations

from minieagle.backend import array_module, to_device, zeros
from minieagle.errors import InvalidInputError


class KVCache:
    """Per-layer key/value buffers for one batch of sequences."""

    INITIAL_POSITIONS = 256  # buffer length before the first growth

    def __init__(
        self, num_layers: int, batch: int, num_kv_heads: int, head_dim: int, capacity: int, like
    ):
        """`like` is any array whose module, device and dtype the buffers take (e.g. a model
        weight). capacity: the most positions the cache will ever hold; the buffers start at
        min(capacity, INITIAL_POSITIONS) positions and grow as appends need."""
        shape = (batch, num_kv_heads, min(capacity, self.INITIAL_POSITIONS), head_dim)
        self.keys = [zeros(shape, like=like) for _ in range(num_layers)]
        self.values = [zeros(shape, like=like) for _ in range(num_layers)]
        self.capacity = capacity
        self.length = 0

    @property
    def allocated(self) -> int:
        """Positions the buffers hold now (valid or not): length <= allocated <= capacity."""
        return self.keys[0].shape[2] if self.keys else 0

    def _grow(self, needed: int) -> None:
        """Replace every buffer by one of max(needed, 2 * allocated) positions (at most
        capacity), the old contents copied to its front."""
        size = min(self.capacity, max(needed, 2 * self.allocated))
        for buffers in (self.keys, self.values):
            for i, buf in enumerate(buffers):
                B, H, old, hd = buf.shape
                grown = zeros((B, H, size, hd), like=buf)  # [B, Hkv, size, hd]
                grown[:, :, :old, :] = buf
                buffers[i] = grown

    @classmethod
    def for_model(cls, config, params, batch: int = 1, capacity: int | None = None) -> KVCache:
        capacity = capacity or config.max_position_embeddings
        return cls(
            config.num_hidden_layers,
            batch,
            config.num_key_value_heads,
            config.head_dim,
            capacity,
            params["model.embed_tokens.weight"],
        )

    def append(self, layer: int, k, v):
        """Write k, v [B, Hkv, T, hd] after the valid positions of `layer`; return the valid
        keys and values [B, Hkv, length + T, hd]. The length advances once all layers appended."""
        T = k.shape[2]
        end = self.length + T
        if end > self.capacity:
            raise InvalidInputError(
                f"KV cache overflow: {self.length} cached + {T} new positions > capacity "
                f"{self.capacity}; shorten the prompt or max_new_tokens, or raise "
                "max_position_embeddings"
            )
        if end > self.allocated:
            self._grow(end)
        self.keys[layer][:, :, self.length : end, :] = k
        self.values[layer][:, :, self.length : end, :] = v
        if layer == len(self.keys) - 1:
            self.length = end
        return self.keys[layer][:, :, :end, :], self.values[layer][:, :, :end, :]

    def keep(self, start: int, indices) -> None:
        """Keep only positions `start + indices` of the block appended from `start` on, moved to
        `start, start + 1, ...` in the given order; everything after is dropped.

        indices: host ints, strictly increasing (a root-to-leaf path of a draft tree is).
        """
        if not 0 <= start <= self.length:
            raise InvalidInputError(
                f"start={start} is outside [0, {self.length}]; pass the cache length from "
                "before the draft block was appended"
            )
        indices = [int(i) for i in indices]
        if any(b <= a for a, b in zip(indices, indices[1:], strict=False)):
            raise InvalidInputError(f"indices={indices} must be strictly increasing")
        if indices and (indices[0] < 0 or start + indices[-1] >= self.length):
            raise InvalidInputError(
                f"indices={indices} reach outside the {self.length - start} positions "
                f"appended since start={start}"
            )
        if indices == list(range(len(indices))):  # a prefix stays where it is (vanilla, chains)
            self.length = start + len(indices)
            return
        xp = array_module(self.keys[0])
        src = to_device([start + i for i in indices], like=self.keys[0], dtype=xp.int64)  # [n]
        for buffers in (self.keys, self.values):
            for buf in buffers:
                buf[:, :, start : start + len(indices), :] = xp.take(buf, src, axis=2)
        self.length = start + len(indices)

    def crop(self, length: int) -> None:
        """Drop every position from `length` on (chain rollback)."""
        if not 0 <= length <= self.length:
            raise InvalidInputError(f"length={length} is outside [0, {self.length}]")
        self.length = length
