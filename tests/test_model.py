"""The Llama decoder of minieagle.model: whole-model gradients, feature taps, GQA, input errors.

Gradients of every parameter are checked against float64 centred differences of the loss, for
tied and untied heads, each tensor with its own bound; a model with a deliberately broken RMSNorm
backward is shown to fail that check. The feature taps (`output_hidden`) are rebuilt from the
layers by hand, and grouped-query attention is compared with the equivalent multi-head model.
"""

from __future__ import annotations

import numpy as np
import pytest

from minieagle import layers, model
from minieagle.config import LlamaConfig, preset
from minieagle.gradcheck import failures, gradient_errors

# A tiny float64 model with large weights: a peaked softmax and non-trivial norms make every
# term of the backward matter.
TINY = LlamaConfig(
    vocab_size=24,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=32,
    initializer_range=0.3,
)
BOUND = 1e-7  # per tensor; observed errors are below 5e-9 (eps = 1e-6)


def _params(config: LlamaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """float64 parameters with every norm gain moved away from 1."""
    params = model.init_params(config, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed + 100)
    for name, value in params.items():
        if name.endswith("norm.weight"):
            params[name] = 1.0 + 0.3 * rng.standard_normal(value.shape)
    return params


def _batch(config: LlamaConfig, B: int = 2, T: int = 6, seed: int = 1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, config.vocab_size, (B, T))
    targets = rng.integers(0, config.vocab_size, (B, T))
    targets[0, 2] = targets[1, -1] = -100
    return ids, targets


def _loss(params, config, ids, targets) -> float:
    logits, _, _ = model.forward(params, config, ids)
    B, T, V = logits.shape
    return float(layers.cross_entropy_forward(logits.reshape(B * T, V), targets.reshape(-1))[0])


def _loss_gradient_errors(config: LlamaConfig) -> dict[str, float]:
    params = _params(config)
    ids, targets = _batch(config)
    _, grads = model.loss_and_grads(params, config, ids, targets)
    assert set(grads) == set(params)
    return gradient_errors(lambda: _loss(params, config, ids, targets), params, grads, entries=10)


# ---------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_loss_gradients_of_every_parameter(tied):
    config = TINY.replace(tie_word_embeddings=tied)
    errors = _loss_gradient_errors(config)
    assert ("lm_head.weight" in errors) == (not tied)
    assert len(errors) == 2 + 9 * config.num_hidden_layers + (not tied)
    bad = failures(errors, BOUND)
    assert not bad, f"gradient check failed: {bad}"


def test_backward_with_random_logit_and_feature_gradients():
    """`backward` with a random dlogits and a random gradient on the final feature (dfinal), as
    EAGLE's feature regression would send."""
    params = _params(TINY, seed=3)
    ids, _ = _batch(TINY, seed=4)
    rng = np.random.default_rng(5)
    logits, hidden, caches = model.forward(
        params, TINY, ids, output_hidden=("final",), keep_caches=True
    )
    dlogits = rng.standard_normal(logits.shape)
    dfinal = rng.standard_normal(hidden["final"].shape)
    grads = model.backward(dlogits, caches, TINY, dfinal=dfinal)

    def f():
        out, feats, _ = model.forward(params, TINY, ids, output_hidden=("final",))
        return float(np.sum(out * dlogits) + np.sum(feats["final"] * dfinal))

    bad = failures(gradient_errors(f, params, grads, entries=10), BOUND)
    assert not bad, f"gradient check failed: {bad}"


def test_gradcheck_catches_a_model_with_broken_rmsnorm_backward(monkeypatch):
    def without_mean_term(dout, cache):
        normed, inv_rms, weight = cache
        dweight = (dout * normed).reshape(-1, normed.shape[-1]).sum(axis=0)
        return inv_rms * dout * weight, dweight

    monkeypatch.setattr(layers, "rmsnorm_backward", without_mean_term)
    bad = failures(_loss_gradient_errors(TINY), BOUND)
    assert "model.layers.0.self_attn.q_proj.weight" in bad
    assert "model.norm.weight" not in bad  # the last gain's gradient does not pass through dx


# ---------------------------------------------------------------------------- forward


def test_init_params_shapes_dtype_and_seed():
    config = preset("nano")
    params = model.init_params(config, seed=7)
    shapes = model.param_shapes(config)
    assert list(params) == list(shapes)
    assert all(params[n].shape == s and params[n].dtype == np.float32 for n, s in shapes.items())
    assert "lm_head.weight" not in params
    assert "lm_head.weight" in model.param_shapes(config.replace(tie_word_embeddings=False))
    assert all((params[n] == 1).all() for n in params if n.endswith("norm.weight"))
    again, other = model.init_params(config, seed=7), model.init_params(config, seed=8)
    assert all(np.array_equal(params[n], again[n]) for n in params)
    assert not np.array_equal(
        params["model.embed_tokens.weight"], other["model.embed_tokens.weight"]
    )


def test_causal_mask_sees_exactly_the_past_and_itself():
    mask = model.causal_mask(3, 4)
    assert mask.shape == (4, 7) and mask.dtype == bool
    for i in range(4):
        for j in range(7):
            assert mask[i, j] == (j <= 3 + i)


def test_output_hidden_taps_rebuild_the_forward():
    config = TINY
    L = config.num_hidden_layers
    params = _params(config, seed=2)
    ids = np.random.default_rng(6).integers(0, config.vocab_size, 7)
    logits, hidden, _ = model.forward(params, config, ids, output_hidden=(0, 1, L, "final"))
    assert set(hidden) == {0, 1, L, "final"}
    assert logits.shape == (7, config.vocab_size)
    np.testing.assert_array_equal(hidden[0], params["model.embed_tokens.weight"][ids])
    T = len(ids)
    cos, sin = layers.rope_tables(np.arange(T), config.head_dim, config.rope_theta, np.float64)
    mask = model.causal_mask(0, T)
    for i in range(L):
        if i + 1 in hidden:
            x = hidden[i][None]  # [1, T, d]
            out, _ = model.decoder_layer_forward(
                params, model.layer_prefix(i), config, x, cos, sin, mask
            )
            np.testing.assert_allclose(out[0], hidden[i + 1], atol=1e-12)
    final, _ = layers.rmsnorm_forward(hidden[L], params["model.norm.weight"], config.rms_norm_eps)
    np.testing.assert_allclose(final, hidden["final"], atol=1e-12)
    np.testing.assert_allclose(
        hidden["final"] @ params["model.embed_tokens.weight"].T, logits, atol=1e-12
    )


def test_untied_head_uses_lm_head_weight():
    config = TINY.replace(tie_word_embeddings=False)
    params = _params(config, seed=9)
    ids = np.arange(5)
    logits, hidden, _ = model.forward(params, config, ids, output_hidden=("final",))
    np.testing.assert_allclose(hidden["final"] @ params["lm_head.weight"].T, logits, atol=1e-12)
    assert np.abs(hidden["final"] @ params["model.embed_tokens.weight"].T - logits).max() > 1e-3


def test_batched_forward_equals_each_row_alone():
    params = _params(TINY, seed=10)
    ids, _ = _batch(TINY, B=3, T=5, seed=11)
    logits, hidden, _ = model.forward(params, TINY, ids, output_hidden=(1, "final"))
    assert logits.shape == (3, 5, TINY.vocab_size) and hidden[1].shape == (3, 5, 16)
    for b in range(3):
        row_logits, row_hidden, _ = model.forward(params, TINY, ids[b], output_hidden=(1, "final"))
        np.testing.assert_allclose(logits[b], row_logits, atol=1e-12)
        np.testing.assert_allclose(hidden["final"][b], row_hidden["final"], atol=1e-12)


def _repeat_kv_heads(weight: np.ndarray, group: int, head_dim: int) -> np.ndarray:
    """k/v projection [Hkv*hd, d] -> [Hkv*G*hd, d]: kv head j serves query heads jG .. jG+G-1."""
    rows = weight.reshape(-1, head_dim, weight.shape[-1])  # [Hkv, hd, d]
    return np.repeat(rows, group, axis=0).reshape(-1, weight.shape[-1])  # [H*hd, d]


def _tile_kv_heads(weight: np.ndarray, group: int, head_dim: int) -> np.ndarray:
    """The wrong pairing, a control: query head h gets kv head h % Hkv."""
    rows = weight.reshape(-1, head_dim, weight.shape[-1])  # [Hkv, hd, d]
    return np.tile(rows, (group, 1, 1)).reshape(-1, weight.shape[-1])  # [H*hd, d]


@pytest.mark.parametrize("expand", [_repeat_kv_heads, _tile_kv_heads], ids=["repeat", "tile"])
def test_gqa_equals_multi_head_model_with_repeated_kv_heads(expand):
    gqa = TINY
    mha = TINY.replace(num_key_value_heads=TINY.num_attention_heads)
    group, hd = gqa.num_attention_heads // gqa.num_key_value_heads, gqa.head_dim
    params = _params(gqa, seed=12)
    mha_params = dict(params)
    for i in range(gqa.num_hidden_layers):
        for proj in ("k_proj", "v_proj"):
            name = f"{model.layer_prefix(i)}self_attn.{proj}.weight"
            mha_params[name] = expand(params[name], group, hd)
            assert mha_params[name].shape == model.param_shapes(mha)[name]
    ids = np.random.default_rng(13).integers(0, gqa.vocab_size, 8)
    expected, _, _ = model.forward(params, gqa, ids)
    got, _, _ = model.forward(mha_params, mha, ids)
    if expand is _repeat_kv_heads:
        np.testing.assert_allclose(got, expected, atol=1e-12)
    else:  # pairing query head h with kv head h % Hkv is a different model: the test can fail
        assert np.abs(got - expected).max() > 1e-3


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad_id", [-1, 24, 1000])
def test_token_id_out_of_range(bad_id):
    params = _params(TINY)
    with pytest.raises(ValueError, match=rf"token id {bad_id} is outside \[0, vocab_size=24\)"):
        model.forward(params, TINY, np.array([3, bad_id, 5]))


def test_prompt_longer_than_max_position_embeddings():
    params = _params(TINY)
    with pytest.raises(ValueError, match="33 new tokens .* exceeds max_position_embeddings=32"):
        model.forward(params, TINY, np.zeros(33, dtype=np.int64))
    model.forward(params, TINY, np.zeros(32, dtype=np.int64))  # exactly the limit is fine


def test_position_id_beyond_max_position_embeddings():
    params = _params(TINY)
    with pytest.raises(ValueError, match="largest position 32"):
        model.forward(params, TINY, np.array([1, 2]), position_ids=np.array([0, 32]))


def test_empty_input():
    with pytest.raises(ValueError, match="input_ids is empty"):
        model.forward(_params(TINY), TINY, np.zeros(0, dtype=np.int64))


@pytest.mark.parametrize("shape", [(4, 4), (5, 6), (5, 4), (5,), (1, 5, 5)])
def test_attention_mask_of_wrong_shape(shape):
    with pytest.raises(ValueError, match=r"attention_mask has shape .*expected \(5, 5\)"):
        model.forward(_params(TINY), TINY, np.arange(5), attention_mask=np.ones(shape, dtype=bool))


@pytest.mark.parametrize("key", [-1, 3, "last", 1.0])
def test_bad_output_hidden_key(key):
    with pytest.raises(
        ValueError, match=r"output_hidden key .* must be 'final' or an int in \[0, 2\]"
    ):
        model.forward(_params(TINY), TINY, np.arange(3), output_hidden=(0, key))


def test_unknown_preset():
    with pytest.raises(ValueError, match=r"unknown preset 'huge'; expected one of \['nano'"):
        preset("huge")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"hidden_size": 30}, "hidden_size=30 is not divisible by num_attention_heads=4"),
        ({"num_key_value_heads": 3}, "num_attention_heads=4 is not a multiple of"),
        ({"head_dim": 5}, "head_dim=5 must be even"),
        ({"vocab_size": 0}, "vocab_size=0 must be a positive integer"),
        ({"eos_token_id": 320}, r"eos_token_id=320 is outside \[0, vocab_size=320\)"),
    ],
)
def test_invalid_config(fields, message):
    valid = {"vocab_size": 320, "hidden_size": 32, "num_attention_heads": 4}
    with pytest.raises(ValueError, match=message):
        LlamaConfig(**{**valid, **fields})


def test_replace_derives_head_dim_again():
    """head_dim defaults to hidden_size // num_attention_heads; changing either through replace()
    must not carry over the head_dim derived from the old values."""
    nano = preset("nano")
    assert nano.replace(hidden_size=64).head_dim == 16
    with pytest.raises(ValueError, match="hidden_size=30 is not divisible"):
        nano.replace(hidden_size=30)
    assert (
        LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=8)
        .replace(vocab_size=100)
        .head_dim
        == 8
    )  # an explicitly given head_dim stays
