"""The KV cache against the one thing it must preserve: the output of a plain full forward.

Cached incremental decoding (one token or chunks at a time), a draft tree verified in one pass
with an ancestor mask and depth positions, `keep` of an accepted root-to-leaf path and `crop` are
all compared, in float64 to 1e-10, with a cache-free causal forward over the equivalent sequence.
Controls show that each comparison fails when the cache or the mask is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.kvcache import KVCache

CONFIG = LlamaConfig(
    vocab_size=40,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=48,
    initializer_range=0.3,  # large weights: peaked attention, so a wrong key shows
)
L = CONFIG.num_hidden_layers
TAPS = (0, 1, L, "final")
EXACT = 1e-10


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    """float64 parameters with every norm gain moved away from 1."""
    params = model.init_params(CONFIG, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed + 100)
    for name, value in params.items():
        if name.endswith("norm.weight"):
            params[name] = 1.0 + 0.3 * rng.standard_normal(value.shape)
    return params


PARAMS = _params()


def _tokens(n: int, seed: int, batch: int | None = None) -> np.ndarray:
    shape = (n,) if batch is None else (batch, n)
    return np.random.default_rng(seed).integers(0, CONFIG.vocab_size, shape)


def _last_logits(ids) -> np.ndarray:
    """Logits [V] at the last position of a plain causal forward without a cache."""
    return model.forward(PARAMS, CONFIG, np.asarray(ids))[0][-1]


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


# ---------------------------------------------------------------------------- incremental decoding


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("batch", [None, 2], ids=["unbatched", "batch2"])
def test_cached_decoding_equals_full_forward(chunk, batch):
    P, N = 5, 15
    ids = _tokens(N, seed=1, batch=batch)
    full_logits, full_hidden, _ = model.forward(PARAMS, CONFIG, ids, output_hidden=TAPS)
    cache = KVCache.for_model(CONFIG, PARAMS, batch=batch or 1)
    pieces = [model.forward(PARAMS, CONFIG, ids[..., :P], cache=cache, output_hidden=TAPS)]
    for start in range(P, N, chunk):  # N - P = 10: the last chunk of 3 is a single token
        piece = model.forward(
            PARAMS, CONFIG, ids[..., start : start + chunk], cache=cache, output_hidden=TAPS
        )
        pieces.append(piece)
    assert cache.length == N
    logits = np.concatenate([p[0] for p in pieces], axis=-2)
    assert _max_diff(logits, full_logits) <= EXACT
    for key in TAPS:
        hidden = np.concatenate([p[1][key] for p in pieces], axis=-2)
        assert _max_diff(hidden, full_hidden[key]) <= EXACT, key


def test_decoding_without_the_cache_differs():
    """Control: the comparison above can fail. The same token at the same position without the
    cached prefix gives other logits."""
    ids = _tokens(8, seed=2)
    alone = model.forward(PARAMS, CONFIG, ids[-1:], position_ids=np.array([7]))[0][-1]
    assert _max_diff(alone, _last_logits(ids)) > 1e-3


def test_for_model_buffers():
    cache = KVCache.for_model(CONFIG, PARAMS, batch=3)
    assert cache.length == 0 and cache.capacity == CONFIG.max_position_embeddings
    assert len(cache.keys) == len(cache.values) == L
    assert cache.keys[0].shape == (3, CONFIG.num_key_value_heads, 48, CONFIG.head_dim)
    assert cache.keys[0].dtype == np.float64
    assert KVCache.for_model(CONFIG, PARAMS, capacity=10).capacity == 10


# ---------------------------------------------------------------------------- tree verification


def _ancestor_mask(parents: list[int]) -> np.ndarray:
    """bool [N, N]: node i may attend to node j iff j is i or one of its ancestors."""
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j != -1:
            mask[i, j] = True
            j = parents[j]
    return mask


def _path(parents: list[int], node: int) -> list[int]:
    """Tree indices from the root to `node`, increasing because parents[i] < i."""
    path = [node]
    while parents[path[-1]] != -1:
        path.append(parents[path[-1]])
    return path[::-1]


def _check_tree(parents: list[int], seed: int, leaf: int) -> None:
    """One forward over a draft tree after a cached prompt == a plain forward of each path; then
    keeping the path to `leaf` and decoding one token == a plain forward of prompt + path + token.
    """
    P, N = 6, len(parents)
    prompt, tree, extra = _tokens(P, seed), _tokens(N, seed + 1), _tokens(1, seed + 2)
    depth = np.array([len(_path(parents, i)) - 1 for i in range(N)])
    cache = KVCache.for_model(CONFIG, PARAMS)
    model.forward(PARAMS, CONFIG, prompt, cache=cache)
    mask = np.concatenate([np.ones((N, P), dtype=bool), _ancestor_mask(parents)], axis=1)
    logits, hidden, _ = model.forward(
        PARAMS,
        CONFIG,
        tree,
        position_ids=P + depth,
        attention_mask=mask,
        cache=cache,
        output_hidden=("final",),
    )
    for node in range(N):
        path_ids = np.concatenate([prompt, tree[_path(parents, node)]])
        plain_logits, plain_hidden, _ = model.forward(
            PARAMS, CONFIG, path_ids, output_hidden=("final",)
        )
        assert _max_diff(logits[node], plain_logits[-1]) <= EXACT, node
        assert _max_diff(hidden["final"][node], plain_hidden["final"][-1]) <= EXACT, node

    accepted = _path(parents, leaf)
    cache.keep(P, accepted)
    assert cache.length == P + len(accepted)
    after = model.forward(PARAMS, CONFIG, extra, cache=cache)[0][-1]
    assert _max_diff(after, _last_logits(np.concatenate([prompt, tree[accepted], extra]))) <= EXACT


def test_tree_mask_equals_separate_paths_and_keep_one_path():
    parents = [-1, 0, 0, 1, 1, 2]
    for leaf in (3, 4, 5):  # [0, 1, 3], [0, 1, 4] (moves node 4 over 2) and [0, 2, 5]
        _check_tree(parents, seed=3, leaf=leaf)


@settings(deadline=None, max_examples=15)
@given(data=st.data(), n=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_random_trees_equal_separate_paths(data, n, seed):
    parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    leaf = data.draw(st.integers(0, n - 1))
    _check_tree(parents, seed, leaf)


def test_tree_without_ancestor_mask_differs():
    """Control: a plain causal mask over the tree lets node 2 see its sibling 1, which changes
    its logits, so the tree comparison can fail."""
    P, parents = 6, [-1, 0, 0]
    prompt, tree = _tokens(P, 4), _tokens(3, 5)
    cache = KVCache.for_model(CONFIG, PARAMS)
    model.forward(PARAMS, CONFIG, prompt, cache=cache)
    depth = np.array([0, 1, 1])
    logits = model.forward(PARAMS, CONFIG, tree, position_ids=P + depth, cache=cache)[0]
    plain = _last_logits(np.concatenate([prompt, tree[_path(parents, 2)]]))
    assert _max_diff(logits[2], plain) > 1e-3


# ---------------------------------------------------------------------------- crop, keep


def test_crop_then_decode_equals_full_forward():
    P = 7
    ids, rejected = _tokens(12, seed=6), _tokens(4, seed=7)
    cache = KVCache.for_model(CONFIG, PARAMS)
    model.forward(PARAMS, CONFIG, np.concatenate([ids[:P], rejected]), cache=cache)
    cache.crop(P)
    assert cache.length == P
    logits = model.forward(PARAMS, CONFIG, ids[P:], cache=cache)[0]
    assert _max_diff(logits, model.forward(PARAMS, CONFIG, ids)[0][P:]) <= EXACT


def test_keep_nothing_is_crop():
    P = 4
    prompt, drafted, extra = _tokens(P, 8), _tokens(3, 9), _tokens(1, 10)
    cache = KVCache.for_model(CONFIG, PARAMS)
    model.forward(PARAMS, CONFIG, np.concatenate([prompt, drafted]), cache=cache)
    cache.keep(P, [])
    assert cache.length == P
    after = model.forward(PARAMS, CONFIG, extra, cache=cache)[0][-1]
    assert _max_diff(after, _last_logits(np.concatenate([prompt, extra]))) <= EXACT


# ---------------------------------------------------------------------------- errors


def test_overflow_raises_and_leaves_the_cache_usable():
    cache = KVCache.for_model(CONFIG, PARAMS, capacity=8)
    ids = _tokens(8, seed=11)
    model.forward(PARAMS, CONFIG, ids[:6], cache=cache)
    with pytest.raises(
        ValueError, match=r"KV cache overflow: 6 cached \+ 3 new positions > capacity 8"
    ):
        model.forward(PARAMS, CONFIG, _tokens(3, seed=12), cache=cache)
    assert cache.length == 6
    logits = model.forward(PARAMS, CONFIG, ids[6:], cache=cache)[0]
    assert _max_diff(logits, model.forward(PARAMS, CONFIG, ids)[0][6:]) <= EXACT


def _filled_cache(n: int = 6) -> KVCache:
    cache = KVCache.for_model(CONFIG, PARAMS)
    model.forward(PARAMS, CONFIG, _tokens(n, seed=13), cache=cache)
    return cache


@pytest.mark.parametrize("indices", [[0, 2, 2], [1, 0], [0, 3, 1]])
def test_keep_rejects_non_increasing_indices(indices):
    with pytest.raises(ValueError, match=r"indices=\[.*\] must be strictly increasing"):
        _filled_cache().keep(2, indices)


@pytest.mark.parametrize("indices", [[0, 4], [-1, 2]])
def test_keep_rejects_indices_outside_the_block(indices):
    with pytest.raises(ValueError, match="reach outside the 4 positions appended since start=2"):
        _filled_cache().keep(2, indices)


@pytest.mark.parametrize("length", [-1, 7])
def test_crop_outside_the_valid_length(length):
    with pytest.raises(ValueError, match=rf"length={length} is outside \[0, 6\]"):
        _filled_cache().crop(length)


@pytest.mark.parametrize(("start", "indices"), [(10, []), (7, []), (-3, [0]), (-2, [0, 1])])
def test_keep_rejects_start_outside_the_valid_length(start, indices):
    """A start past the valid positions (or negative) must not set `length` beyond the data."""
    cache = _filled_cache()
    with pytest.raises(ValueError, match=rf"start={start} is outside \[0, 6\]"):
        cache.keep(start, indices)
    assert cache.length == 6
