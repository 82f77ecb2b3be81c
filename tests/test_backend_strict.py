"""The array-api-strict lane: the library runs on a non-default device without touching NumPy.

Every layer pair, the model forward (KV cache, tree mask, positions, feature taps), the loss and
its gradients, KV-cache surgery, one optimiser step, and the EAGLE-1 and EAGLE-3 heads' training
steps (loss, hand-written backward, clipping, AdamW: the GPU lane of head training) run on arrays
placed on `array_api_strict.Device("device1")`. That fake device reproduces what CuPy does on a
GPU, on a CPU: `np.asarray` of its arrays raises, mixing them with arrays made without `device=`
raises, and only standard functions exist (no `x.sum()`, no `x.reshape`, no fancy setitem). Every
result must come back on device1 and equal the NumPy float64 run to 1e-12. The controls at the
end show that the lane fails on a deliberately non-portable function.
"""

from __future__ import annotations

import numpy as np
import pytest

from minieagle import backend, layers, losses, model, optim
from minieagle.config import preset
from minieagle.heads import eagle1, eagle3
from minieagle.kvcache import KVCache

xp = pytest.importorskip("array_api_strict")

DEVICE = xp.Device("device1")
CONFIG = preset("nano")
TOL = 1e-12


@pytest.fixture(autouse=True)
def _no_data_dependent_shapes():
    """Also forbid boolean indexing and data-dependent shapes: each is a hidden sync on a GPU."""
    with xp.ArrayAPIStrictFlags(boolean_indexing=False, data_dependent_shapes=False):
        yield


def _to_strict(tree):
    """NumPy arrays (in dicts, lists, tuples) -> strict arrays on device1; other leaves as-is."""
    return backend.put(tree, xp, DEVICE)


def _assert_same(strict, reference, where: str = "out") -> None:
    """`strict` mirrors `reference`: every array is a strict array on device1 whose values equal
    the NumPy array to TOL (relative to its scale); other leaves are equal."""
    if isinstance(reference, np.generic):  # a NumPy scalar is a 0-d array on a device
        reference = np.asarray(reference)
    if isinstance(reference, np.ndarray):
        assert type(strict).__module__.startswith("array_api_strict"), f"{where}: {type(strict)}"
        assert strict.device == DEVICE, f"{where} is on {strict.device}, expected {DEVICE}"
        host = backend.to_host(strict)
        assert host.shape == reference.shape, f"{where}: shape {host.shape} != {reference.shape}"
        assert host.dtype == reference.dtype, f"{where}: dtype {host.dtype} != {reference.dtype}"
        scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
        error = float(np.max(np.abs(host.astype(float) - reference))) if reference.size else 0.0
        assert error <= TOL * scale, f"{where} differs from NumPy by {error:.3g}"
    elif isinstance(reference, dict):
        assert strict.keys() == reference.keys(), where
        for key in reference:
            _assert_same(strict[key], reference[key], f"{where}[{key!r}]")
    elif isinstance(reference, list | tuple):
        assert len(strict) == len(reference), where
        for i, (s, r) in enumerate(zip(strict, reference, strict=True)):
            _assert_same(s, r, f"{where}[{i}]")
    elif isinstance(reference, float):
        assert isinstance(strict, float), f"{where}: {type(strict)} is not a host float"
        assert abs(strict - reference) <= TOL * max(1.0, abs(reference)), where
    else:
        assert strict == reference, f"{where}: {strict!r} != {reference!r}"


def _both(fn, *numpy_args):
    """fn on the NumPy arguments and on their strict copies (made first: fn may update its
    arguments in place); checks that they agree and returns both results."""
    strict_args = _to_strict(numpy_args)
    reference = fn(*numpy_args)
    strict = fn(*strict_args)
    _assert_same(strict, reference)
    return strict, reference


# ---------------------------------------------------------------------------- layers


def _mask(rng: np.random.Generator, T: int, S: int) -> np.ndarray:
    """A random non-causal bool mask [T, S] with at least one True per row."""
    mask = rng.random((T, S)) < 0.5
    mask[np.arange(T), rng.integers(0, S, T)] = True
    return mask


def _layer_cases():
    """(name, forward, backward, numpy inputs, upstream gradient shape or None for a scalar)."""
    rng = np.random.default_rng(0)
    B, H, Hkv, T, S, hd, d, V = 2, 4, 2, 3, 5, 6, 8, 11
    positions = np.array([[0, 1, 1], [4, 5, 7]])
    cos, sin = layers.rope_tables(positions[:, None, :], hd, 10000.0, np.float64)
    targets = np.array([3, -100, 0, 10, 3, -100])
    ids = np.array([[3, 3, 1], [10, 0, 3]])  # repeated ids: rows of the gradient add up
    return [
        ("embedding", layers.embedding_forward, layers.embedding_backward,
         (rng.standard_normal((V, d)), ids), (B, T, d)),
        ("linear", layers.linear_forward, layers.linear_backward,
         (rng.standard_normal((B, T, d)), rng.standard_normal((7, d))), (B, T, 7)),
        ("rmsnorm", layers.rmsnorm_forward, layers.rmsnorm_backward,
         (rng.standard_normal((B, T, d)), rng.standard_normal(d), 1e-5), (B, T, d)),
        ("rope", layers.rope_forward, layers.rope_backward,
         (rng.standard_normal((B, H, T, hd)), cos, sin), (B, H, T, hd)),
        ("attention", layers.attention_forward, layers.attention_backward,
         (rng.standard_normal((B, H, T, hd)), rng.standard_normal((B, Hkv, S, hd)),
          rng.standard_normal((B, Hkv, S, hd)), _mask(rng, T, S)), (B, H, T, hd)),
        ("swiglu", layers.swiglu_forward, layers.swiglu_backward,
         (rng.standard_normal((B, T, d)), rng.standard_normal((B, T, d))), (B, T, d)),
        ("cross_entropy", layers.cross_entropy_forward, layers.cross_entropy_backward,
         (rng.standard_normal((6, V)), targets), None),
    ]  # fmt: skip


@pytest.mark.parametrize("case", _layer_cases(), ids=lambda case: case[0])
def test_layer_pair_runs_on_the_device_and_equals_numpy(case):
    _, forward, backward, inputs, dout_shape = case
    (out, cache), (out_np, cache_np) = _both(forward, *inputs)
    dout_np = 0.7 if dout_shape is None else np.random.default_rng(1).standard_normal(dout_shape)
    grads = backward(_to_strict(dout_np), cache)
    _assert_same(grads, backward(dout_np, cache_np), "grads")


def _rope_tables_float64(position_ids):
    return layers.rope_tables(position_ids, 8, 10000.0, backend.array_module(position_ids).float64)


def test_rope_tables_and_log_softmax_on_the_device():
    _both(_rope_tables_float64, np.array([[0, 3, 4, 9], [1, 1, 2, 30]]))
    _both(layers.log_softmax, np.random.default_rng(2).standard_normal((3, 7)) * 30)


def test_embedding_scatter_add_on_the_device_adds_repeated_rows():
    rows = np.array([0, 1, 1, 3, 1])
    values = np.random.default_rng(3).standard_normal((5, 4))
    strict, reference = _both(lambda r, v: backend.scatter_add_rows((6, 4), r, v), rows, values)
    np.testing.assert_allclose(reference[1], values[1] + values[2] + values[4])


# ---------------------------------------------------------------------------- model and cache


PARAMS = model.init_params(CONFIG, seed=0, dtype=np.float64)


def _cache_contents(cache: KVCache) -> list:
    """The valid keys and values of every layer."""
    n = cache.length
    return [buf[:, :, :n, :] for buf in cache.keys] + [buf[:, :, :n, :] for buf in cache.values]


def _tree_step(params, prompt, block, mask, positions):
    """Prefill `prompt` into a fresh cache, then one tree block with its mask and positions;
    keep a root-to-leaf path, then crop. Returns every output along the way."""
    cache = KVCache.for_model(CONFIG, params, capacity=32)
    assert cache.keys[0].device == params["model.norm.weight"].device
    prefill, _, _ = model.forward(params, CONFIG, prompt, cache=cache)
    start = cache.length
    logits, hidden, _ = model.forward(
        params,
        CONFIG,
        block,
        position_ids=positions,
        attention_mask=mask,
        cache=cache,
        output_hidden=(0, 1, CONFIG.num_hidden_layers, "final"),
    )
    after_block = _cache_contents(cache)
    cache.keep(start, [0, 2, 3])
    after_keep = _cache_contents(cache)
    cache.crop(start + 1)
    return prefill, logits, hidden, after_block, after_keep, _cache_contents(cache)


def test_forward_with_cache_tree_mask_and_surgery_on_the_device():
    rng = np.random.default_rng(4)
    prompt = rng.integers(0, CONFIG.vocab_size, 6)
    block = rng.integers(0, CONFIG.vocab_size, 4)  # a tree: root 0 with children 1, 2; 3 under 2
    ancestors = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=bool)
    mask = np.concatenate([np.ones((4, 6), dtype=bool), ancestors], axis=1)  # [4, 6 + 4]
    positions = 6 + np.array([0, 1, 1, 2])
    _both(_tree_step, PARAMS, prompt, block, mask, positions)


def test_batched_forward_defaults_on_the_device():
    ids = np.random.default_rng(5).integers(0, CONFIG.vocab_size, (2, 7))
    _both(lambda p, i: model.forward(p, CONFIG, i, output_hidden=("final",))[:2], PARAMS, ids)


def _loss_clip_and_step(params, ids, targets):
    """loss_and_grads, clipping, one AdamW step; params are updated in place."""
    loss, grads = model.loss_and_grads(params, CONFIG, ids, targets)
    norm = optim.clip_grad_norm(grads, max_norm=1e-3)
    assert norm > 1e-3  # the scaling branch runs
    adam = optim.AdamW(params)
    adam.step(params, grads, lr=1e-2)
    return loss, norm, grads, params, adam.state_tensors()


def test_loss_gradients_clipping_and_adamw_on_the_device():
    rng = np.random.default_rng(6)
    ids = rng.integers(0, CONFIG.vocab_size, (2, 8))
    targets = np.roll(ids, -1, axis=1)
    targets[:, -1] = -100
    params = {name: value.copy() for name, value in PARAMS.items()}
    (*_, params_after, _), _ = _both(_loss_clip_and_step, params, ids, targets)
    moved = backend.to_host(params_after["model.norm.weight"]) - PARAMS["model.norm.weight"]
    assert np.all(moved != 0)  # the step ran (and was compared above)


def test_float32_gradients_stay_float32_on_the_device():
    """No silent promotion: float32 parameters give float32 logits, loss and gradients."""
    params = model.init_params(CONFIG, seed=0, dtype=np.float32)
    ids = np.random.default_rng(8).integers(0, CONFIG.vocab_size, (2, 5))
    grads, grads_np = _both(lambda p, i: model.loss_and_grads(p, CONFIG, i, i)[1], params, ids)
    assert {grad.dtype for grad in grads_np.values()} == {np.dtype(np.float32)}
    assert {grad.dtype for grad in grads.values()} == {xp.float32}


def test_to_host_and_to_device_are_the_explicit_crossings():
    host = np.arange(6.0).reshape(2, 3)
    on_device = backend.to_device(host, like=xp.zeros(1, device=DEVICE))
    assert on_device.device == DEVICE
    np.testing.assert_array_equal(backend.to_host(on_device), host)
    assert backend.array_module(on_device) is xp
    assert backend.array_module(host) is np


# ---------------------------------------------------------------------------- draft heads


def _eagle1_train_step(head, target, tokens, features, next_features, mask):
    """EAGLE-1's training step: loss with input-feature noise, clipping, one AdamW step."""
    cfg = eagle1.Eagle1Config.from_target(CONFIG)
    loss, parts, grads = eagle1.eagle1_loss(
        head, cfg, target, tokens, features, next_features, mask,
        p_weight=0.1, noise=0.1, rng=np.random.default_rng(0),
    )  # fmt: skip
    norm = optim.clip_grad_norm(grads, max_norm=1e-3)
    assert norm > 1e-3  # the scaling branch runs
    adam = optim.AdamW(head)
    adam.step(head, grads, lr=1e-2)
    return loss, parts, norm, grads, head, adam.state_tensors()


EAGLE3_TARGET = CONFIG.replace(num_hidden_layers=4)
EAGLE3_CFG = eagle3.Eagle3Config.from_target(
    EAGLE3_TARGET, aux_layers=(0, 2, 3), draft_vocab_size=200
)


def _eagle3_train_step(head, target, ids, tokens, fused, target_logits, mask):
    """EAGLE-3's training step: the TTT loss (3 steps), clipping, one AdamW step. The draft
    vocabulary is built from `ids` here, so it lives where they do."""
    vocab = eagle3.DraftVocab(ids, EAGLE3_TARGET.vocab_size)
    loss, parts, grads = eagle3.ttt_loss(
        head, EAGLE3_CFG, target, vocab, tokens, fused, target_logits, mask, steps=3
    )
    norm = optim.clip_grad_norm(grads, max_norm=1e-3)
    assert norm > 1e-3
    adam = optim.AdamW(head)
    adam.step(head, grads, lr=1e-2)
    return loss, parts, norm, grads, head, adam.state_tensors()


def _eagle1_inputs(dtype=np.float64):
    rng = np.random.default_rng(9)
    head = eagle1.init_head(eagle1.Eagle1Config.from_target(CONFIG), seed=0, dtype=dtype)
    target = model.init_params(CONFIG, seed=1, dtype=dtype)
    B, T, d = 2, 6, CONFIG.hidden_size
    tokens = rng.integers(0, CONFIG.vocab_size, (B, T))
    features = rng.standard_normal((B, T, d)).astype(dtype)
    next_features = rng.standard_normal((B, T, d)).astype(dtype)
    mask = rng.random((B, T)) < 0.8
    return head, target, tokens, features, next_features, mask


def _eagle3_inputs(dtype=np.float64):
    rng = np.random.default_rng(10)
    head = eagle3.init_head(EAGLE3_CFG, seed=0, dtype=dtype)
    target = model.init_params(EAGLE3_TARGET, seed=1, dtype=dtype)
    B, T, V, d = 2, 6, EAGLE3_TARGET.vocab_size, EAGLE3_TARGET.hidden_size
    ids = np.sort(rng.choice(V, EAGLE3_CFG.draft_vocab_size, replace=False))
    tokens = rng.integers(0, V, (B, T + 1))
    fused = rng.standard_normal((B, T, 3 * d)).astype(dtype)
    target_logits = (3 * rng.standard_normal((B, T, V))).astype(dtype)
    target_logits[:, :, ids[:4]] += 8.0  # most argmaxes in the draft vocabulary, not all
    mask = rng.random((B, T)) < 0.8
    return head, target, ids, tokens, fused, target_logits, mask


def test_eagle1_training_step_on_the_device_equals_numpy():
    """Loss (noise drawn on the host, moved explicitly), gradients, clipping, AdamW: every
    result on device1 and equal to the NumPy run; the head moved."""
    inputs = _eagle1_inputs()
    before = inputs[0]["fc.weight"].copy()
    (*_, head, _), _ = _both(_eagle1_train_step, *inputs)
    assert np.all(backend.to_host(head["fc.weight"]) != before)


def test_eagle3_training_step_on_the_device_equals_numpy():
    """The TTT loss and its hand-written backward through 3 unrolled steps, clipping, AdamW."""
    inputs = _eagle3_inputs()
    before = inputs[0]["lm_head.weight"].copy()
    (*_, head, _), _ = _both(_eagle3_train_step, *inputs)
    assert np.all(backend.to_host(head["lm_head.weight"]) != before)


@pytest.mark.parametrize("head", ["eagle1", "eagle3"])
def test_float32_head_training_stays_float32_on_the_device(head):
    """No silent promotion in a head's step: float32 weights and features give float32
    gradients, moments and updated weights (a float64 constant would double the GPU's work)."""
    step, inputs = {
        "eagle1": (_eagle1_train_step, _eagle1_inputs(np.float32)),
        "eagle3": (_eagle3_train_step, _eagle3_inputs(np.float32)),
    }[head]
    _, _, _, grads, params, moments = step(*_to_strict(inputs))
    for tree in (grads, params, moments):
        assert {value.dtype for value in tree.values()} == {xp.float32}
        assert {value.device for value in tree.values()} == {DEVICE}


# ---------------------------------------------------------------------------- controls


def _rmsnorm_through_numpy(x, weight, eps):
    """A non-portable RMSNorm: np.mean converts its input to a NumPy array."""
    inv_rms = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    normed = x * inv_rms
    return normed * weight, (normed, inv_rms, weight)


def _rope_tables_without_device(position_ids, head_dim, theta, dtype):
    """A non-portable table: the frequencies are made on the default device, not the input's."""
    xp_ = backend.array_module(position_ids)
    inv_freq = 1.0 / theta ** (xp_.arange(0, head_dim, 2, dtype=xp_.float64) / head_dim)
    angles = xp_.astype(position_ids[..., None], xp_.float64) * inv_freq
    angles = xp_.concat([angles, angles], axis=-1)
    return xp_.astype(xp_.cos(angles), dtype), xp_.astype(xp_.sin(angles), dtype)


def _log_softmax_with_methods(logits):
    """The NumPy method spelling `x.max(axis=...)`, which array-API arrays do not have."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    xp_ = backend.array_module(logits)
    return shifted - xp_.log(xp_.sum(xp_.exp(shifted), axis=-1, keepdims=True))


def _cross_entropy_backward_with_fancy_setitem(dloss, cache):
    """The NumPy idiom `p[rows, targets] -= 1`: the array API has no integer-array setitem."""
    logp, safe, valid, count = cache
    xp_ = backend.array_module(logp)
    dlogits = xp_.exp(logp)
    dlogits[backend.arange(safe.shape[0], like=safe), safe] -= 1.0
    return dlogits * (xp_.astype(valid, logp.dtype) * (dloss / count))[:, None]


@pytest.mark.parametrize(
    ("name", "broken", "error"),
    [
        ("rmsnorm_forward", _rmsnorm_through_numpy, RuntimeError),
        ("rope_tables", _rope_tables_without_device, ValueError),
        ("log_softmax", _log_softmax_with_methods, AttributeError),
        ("cross_entropy_backward", _cross_entropy_backward_with_fancy_setitem, IndexError),
    ],
    ids=["implicit-numpy-conversion", "forgotten-device", "numpy-method", "fancy-setitem"],
)
def test_the_lane_catches_a_non_portable_layer(monkeypatch, name, broken, error):
    """Each broken layer is right on NumPy (same loss) and fails on the fake device."""
    ids = np.random.default_rng(7).integers(0, CONFIG.vocab_size, (1, 5))
    loss = model.loss_and_grads(PARAMS, CONFIG, ids, ids)[0]
    monkeypatch.setattr(layers, name, broken)
    assert abs(model.loss_and_grads(PARAMS, CONFIG, ids, ids)[0] - loss) <= TOL
    with pytest.raises(error):
        model.loss_and_grads(_to_strict(PARAMS), CONFIG, _to_strict(ids), _to_strict(ids))


def _log_softmax_and_softmax_through_numpy(logits):
    """A non-portable softmax pair: np.exp converts its input to a NumPy array."""
    xp_ = backend.array_module(logits)
    shifted = logits - xp_.max(logits, axis=-1, keepdims=True)
    probs = np.exp(shifted)
    total = np.sum(probs, axis=-1, keepdims=True)
    return shifted - np.log(total), probs / total


@pytest.mark.parametrize("head", ["eagle1", "eagle3"])
def test_the_lane_catches_a_non_portable_head_loss(monkeypatch, head):
    """The soft cross-entropy through NumPy: the same step on NumPy, an error on device1."""
    step, inputs = {
        "eagle1": (_eagle1_train_step, _eagle1_inputs),
        "eagle3": (_eagle3_train_step, _eagle3_inputs),
    }[head]
    loss = step(*inputs())[0]
    monkeypatch.setattr(losses, "log_softmax_and_softmax", _log_softmax_and_softmax_through_numpy)
    assert abs(step(*inputs())[0] - loss) <= TOL
    with pytest.raises(RuntimeError):
        step(*_to_strict(inputs()))


def test_the_lane_catches_mixing_a_numpy_array_with_a_device_array():
    weight = xp.asarray(np.ones((4, 3)), device=DEVICE)
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        layers.linear_forward(np.ones((2, 3)), weight)
    with pytest.raises(RuntimeError):
        np.asarray(weight)


def test_assert_same_rejects_a_host_result_and_a_wrong_value():
    reference = np.arange(3.0)
    with pytest.raises(AssertionError, match="array_api_strict|device"):
        _assert_same(reference.copy(), reference)  # a NumPy result: it left the device
    with pytest.raises(AssertionError, match="differs from NumPy"):
        _assert_same(xp.asarray(reference + 1e-9, device=DEVICE), reference)
