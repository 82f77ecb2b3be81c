"""The EAGLE-1 draft head (minieagle.heads.eagle1) and its losses (minieagle.losses).

Gradients are checked in float64 against centred differences, one bound per tensor, with random
upstream gradients; the cached and tree-masked forwards are checked against plain full forwards.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors import safe_open

from minieagle import backend, losses, model
from minieagle.config import preset
from minieagle.gradcheck import failures, gradient_errors
from minieagle.heads.eagle1 import (
    INPUTS,
    Eagle1Config,
    eagle1_loss,
    head_backward,
    head_forward,
    head_param_shapes,
    init_head,
    load_head,
    new_head_cache,
    save_head,
)

NANO = preset("nano")
# q/k gradients are ~1e-2 against f ~ 30, so eps = 1e-6 drowns them in round-off (errors ~ 1/eps);
# at eps = 1e-4 every tensor's error is below 5e-8.
EPS, BOUND = 1e-4, 1e-6
B, T = 2, 5


def _setup(inputs="token+feature", fc_bias=True, seed=0, dtype=np.float64):
    """(head, cfg, target params, tokens [B, T], features [B, T, d]) with non-trivial weights."""
    cfg = Eagle1Config.from_target(NANO, inputs=inputs, fc_bias=fc_bias)
    rng = np.random.default_rng(seed)
    head = init_head(cfg, seed=seed, dtype=dtype)
    for name, value in head.items():  # unit norm gains and zero bias would hide some bugs
        if name.endswith(("norm.weight", "fc.bias")):
            head[name] = (1.0 + 0.3 * rng.standard_normal(value.shape)).astype(dtype)
    target = model.init_params(NANO, seed=seed + 1, dtype=dtype)
    target["model.embed_tokens.weight"] *= 20  # embeddings of feature size, as after training
    tokens = rng.integers(0, NANO.vocab_size, (B, T))
    features = rng.standard_normal((B, T, NANO.hidden_size)).astype(dtype)
    return head, cfg, target, tokens, features


# ---------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("fc_bias", [True, False])
@pytest.mark.parametrize("inputs", INPUTS)
def test_head_gradients_match_finite_differences(inputs, fc_bias):
    head, cfg, target, tokens, features = _setup(inputs, fc_bias)
    rng = np.random.default_rng(1)
    pred, logits, caches = head_forward(head, cfg, target, tokens, features, keep_caches=True)
    dpred, dlogits = rng.standard_normal(pred.shape), rng.standard_normal(logits.shape)
    grads = head_backward(dpred, dlogits, caches, cfg)
    assert grads.keys() == head_param_shapes(cfg).keys()  # the head's, none of the target's

    def f():
        p, lg, _ = head_forward(head, cfg, target, tokens, features)
        return float(np.sum(p * dpred) + np.sum(lg * dlogits))

    assert failures(gradient_errors(f, head, grads, eps=EPS), BOUND) == {}


def test_gradient_check_catches_a_backward_that_ignores_the_lm_head_path():
    head, cfg, target, tokens, features = _setup()
    rng = np.random.default_rng(1)
    pred, logits, caches = head_forward(head, cfg, target, tokens, features, keep_caches=True)
    dpred, dlogits = rng.standard_normal(pred.shape), rng.standard_normal(logits.shape)
    broken = head_backward(dpred, None, caches, cfg)  # drops d logits / d f̂

    def f():
        p, lg, _ = head_forward(head, cfg, target, tokens, features)
        return float(np.sum(p * dpred) + np.sum(lg * dlogits))

    assert set(failures(gradient_errors(f, head, broken, eps=EPS), BOUND)) == set(head)


def test_unbatched_inputs_give_the_first_row_of_a_batch():
    head, cfg, target, tokens, features = _setup()
    pred, logits, caches = head_forward(head, cfg, target, tokens[0], features[0], keep_caches=True)
    pred_b, logits_b, caches_b = head_forward(
        head, cfg, target, tokens[:1], features[:1], keep_caches=True
    )
    assert pred.shape == (T, NANO.hidden_size) and logits.shape == (T, NANO.vocab_size)
    np.testing.assert_allclose(pred, pred_b[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(logits, logits_b[0], rtol=0, atol=1e-12)
    dpred = np.random.default_rng(2).standard_normal(pred.shape)
    grads = head_backward(dpred, None, caches, cfg)
    grads_b = head_backward(dpred[None], None, caches_b, cfg)
    for name in grads:
        np.testing.assert_allclose(grads[name], grads_b[name], rtol=0, atol=1e-12)


def _smooth_l1_case(region: str):
    rng = np.random.default_rng(3)
    target = rng.standard_normal((B, T, 6))
    offset = (
        rng.uniform(0.05, 0.9, target.shape)
        if region == "inner"
        else rng.uniform(1.1, 3, target.shape)
    )
    pred = target + offset * rng.choice([-1.0, 1.0], target.shape)
    mask = rng.random((B, T)) < 0.7
    return pred, target, mask


@pytest.mark.parametrize("region", ["inner", "outer"])
def test_smooth_l1_gradient_in_both_regions(region):
    pred, target, mask = _smooth_l1_case(region)
    loss, cache = losses.smooth_l1_forward(pred, target, mask)
    grad = losses.smooth_l1_backward(1.7, cache)

    def f():
        return 1.7 * float(losses.smooth_l1_forward(pred, target, mask)[0])

    assert failures(gradient_errors(f, {"pred": pred}, {"pred": grad}), 1e-8) == {}
    z = np.abs(pred - target)
    elementwise = np.where(z < 1, 0.5 * z**2, z - 0.5)  # the definition, spelled out
    assert loss == pytest.approx(elementwise.mean(-1)[mask].mean(), rel=1e-12)


def test_soft_cross_entropy_gradient_and_value():
    rng = np.random.default_rng(4)
    logits = 3 * rng.standard_normal((B, T, 11))
    target_probs = rng.dirichlet(np.ones(11), size=(B, T))
    mask = np.array([[1, 1, 0, 1, 1], [0, 1, 1, 1, 0]], dtype=bool)
    loss, cache = losses.soft_cross_entropy_forward(logits, target_probs, mask)
    grad = losses.soft_cross_entropy_backward(0.3, cache)

    def f():
        return 0.3 * float(losses.soft_cross_entropy_forward(logits, target_probs, mask)[0])

    assert failures(gradient_errors(f, {"logits": logits}, {"logits": grad}), 1e-8) == {}
    log_q = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert loss == pytest.approx(-(target_probs * log_q).sum(-1)[mask].mean(), rel=1e-12)
    assert np.all(grad[~mask] == 0)  # masked positions contribute nothing


@pytest.mark.parametrize("inputs", INPUTS)
def test_eagle1_loss_gradients_match_finite_differences(inputs):
    head, cfg, target, tokens, features = _setup(inputs)
    rng = np.random.default_rng(5)
    next_features = rng.standard_normal(features.shape)
    mask = rng.random((B, T)) < 0.8
    loss, parts, grads = eagle1_loss(
        head, cfg, target, tokens, features, next_features, mask, p_weight=0.1
    )
    assert loss == pytest.approx(parts["smooth_l1"] + 0.1 * parts["soft_ce"], rel=1e-12)

    def f():
        return eagle1_loss(head, cfg, target, tokens, features, next_features, mask)[0]

    assert failures(gradient_errors(f, head, grads, eps=EPS), BOUND) == {}


def test_the_target_is_frozen():
    head, cfg, target, tokens, features = _setup()
    before = {name: value.copy() for name, value in target.items()}
    mask = np.ones((B, T), dtype=bool)
    rng = np.random.default_rng(6)
    _, _, grads = eagle1_loss(
        head, cfg, target, tokens, features, features + 0.1, mask, noise=0.1, rng=rng
    )
    assert set(grads) == set(head_param_shapes(cfg))
    assert not set(grads) & set(target)
    assert all(np.array_equal(before[name], target[name]) for name in target)


def test_noise_touches_the_input_features_only():
    head, cfg, target, tokens, features = _setup()
    mask = np.ones((B, T), dtype=bool)
    clean = eagle1_loss(head, cfg, target, tokens, features, features, mask)[1]
    noisy = eagle1_loss(
        head, cfg, target, tokens, features, features, mask, noise=0.1, rng=np.random.default_rng(0)
    )[1]
    assert noisy["smooth_l1"] != clean["smooth_l1"]
    token_only = _setup("token")
    args = (*token_only[:4], token_only[4], token_only[4], mask)
    assert eagle1_loss(*args)[0] == eagle1_loss(*args, noise=0.1, rng=np.random.default_rng(0))[0]


# ---------------------------------------------------------------------------- cache and tree masks


@pytest.mark.parametrize("inputs", INPUTS)
def test_cached_incremental_forward_equals_the_full_forward(inputs):
    head, cfg, target, tokens, features = _setup(inputs)
    full_pred, full_logits, _ = head_forward(head, cfg, target, tokens, features)
    cache = new_head_cache(cfg, head, capacity=16, batch=B)
    pieces = []
    for start, stop in ((0, 3), (3, 4), (4, 5)):
        pred, logits, _ = head_forward(
            head, cfg, target, tokens[:, start:stop], features[:, start:stop], cache=cache
        )
        pieces.append((pred, logits))
    assert cache.length == T
    np.testing.assert_allclose(np.concatenate([p for p, _ in pieces], 1), full_pred, atol=1e-10)
    np.testing.assert_allclose(np.concatenate([lg for _, lg in pieces], 1), full_logits, atol=1e-10)


def _tree_vs_paths(positions: str) -> list[float]:
    """Per tree node, max |tree-masked forward - forward of the node's path as a sequence|.

    The tree hangs under a cached prefix; positions "depth" gives each node prefix + depth (as
    a drafter must), "index" its slot in the flattened tree (a plausible mistake)."""
    head, cfg, target, tokens, features = _setup()
    tokens, features = tokens[0], features[0]  # the prefix: T positions, unbatched
    rng = np.random.default_rng(7)
    parents = [-1, -1, 0, 0, 1, 2]  # a forest under the prefix: two roots, depths 0..2
    n = len(parents)
    tree_tokens = rng.integers(0, NANO.vocab_size, n)
    tree_features = rng.standard_normal((n, NANO.hidden_size))
    ancestors = []
    for i, parent in enumerate(parents):
        ancestors.append(([] if parent < 0 else ancestors[parent]) + [i])
    mask = np.zeros((n, T + n), dtype=bool)
    mask[:, :T] = True
    for i, path in enumerate(ancestors):
        mask[i, [T + j for j in path]] = True
    depth = np.array([len(path) - 1 for path in ancestors])
    position_ids = T + (depth if positions == "depth" else np.arange(n))

    cache = new_head_cache(cfg, head, capacity=32)
    head_forward(head, cfg, target, tokens, features, cache=cache)
    tree_pred, tree_logits, _ = head_forward(
        head,
        cfg,
        target,
        tree_tokens,
        tree_features,
        position_ids=position_ids,
        attention_mask=mask,
        cache=cache,
    )
    errors = []
    for i, path in enumerate(ancestors):
        path_tokens = np.concatenate([tokens, tree_tokens[path]])
        path_features = np.concatenate([features, tree_features[path]])
        pred, logits, _ = head_forward(head, cfg, target, path_tokens, path_features)
        errors.append(
            max(np.abs(tree_pred[i] - pred[-1]).max(), np.abs(tree_logits[i] - logits[-1]).max())
        )
    return errors


def test_tree_masked_forward_equals_one_forward_per_path():
    assert max(_tree_vs_paths("depth")) < 1e-10


def test_tree_check_catches_positions_that_ignore_depth():
    errors = _tree_vs_paths("index")
    assert errors[0] < 1e-10  # node 0 is the one whose index equals its depth
    assert min(errors[1:]) > 1e-6


# ---------------------------------------------------------------------------- save / load, errors


@pytest.mark.parametrize("inputs", ["token+feature", "feature"])
def test_save_and_load_round_trip_bit_for_bit(tmp_path, inputs):
    head, cfg, _, _, _ = _setup(inputs, fc_bias=inputs == "feature", dtype=np.float32)
    save_head(tmp_path / "head", head, cfg, target_dir="somewhere/small")
    loaded, loaded_cfg = load_head(tmp_path / "head")
    assert loaded_cfg == cfg
    assert loaded.keys() == head.keys()
    assert all(np.array_equal(loaded[k], head[k]) and loaded[k].dtype == np.float32 for k in head)
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["bias"] == cfg.fc_bias
    assert config["minieagle_inputs"] == inputs and config["minieagle_target"] == "somewhere/small"
    with safe_open(str(tmp_path / "head" / "model.safetensors"), framework="np") as f:
        assert f.metadata()["format"] == "pt"  # the tag transformers 4.x requires
    save_head(tmp_path / "head", init_head(cfg, seed=9), cfg)  # replaces the whole directory
    assert not np.array_equal(load_head(tmp_path / "head")[0]["fc.weight"], head["fc.weight"])


def test_bad_inputs_raise_clear_errors(tmp_path):
    head, cfg, target, tokens, features = _setup()
    with pytest.raises(ValueError, match=r"inputs='tokens' is not one of"):
        Eagle1Config.from_target(NANO, inputs="tokens")
    with pytest.raises(
        ValueError, match=r"features have width 31 but the head expects hidden_size=32"
    ):
        head_forward(head, cfg, target, tokens, features[..., :31])
    with pytest.raises(ValueError, match=r"tokens hold ids outside \[0, vocab_size=320\)"):
        head_forward(head, cfg, target, tokens + 320, features)
    with pytest.raises(ValueError, match=r"features is None"):
        head_forward(head, cfg, target, tokens, None)
    other = model.init_params(NANO.replace(vocab_size=400), dtype=np.float64)
    with pytest.raises(
        ValueError, match=r"LM head is \(400, 32\) but the head expects .* \(320, 32\)"
    ):
        head_forward(head, cfg, other, tokens, features)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(5, 4\); expected \(5, 5\)"):
        head_forward(head, cfg, target, tokens, features, attention_mask=np.ones((T, 4), bool))
    with pytest.raises(ValueError, match=r"noise=0.1 needs rng"):
        eagle1_loss(head, cfg, target, tokens, features, features, np.ones((B, T)), noise=0.1)
    del head["fc.bias"]
    with pytest.raises(ValueError, match=r"fc.bias: got None, expected \(32,\)"):
        save_head(tmp_path / "head", head, cfg)
    with pytest.raises(FileNotFoundError, match=r"config.json is missing"):
        load_head(tmp_path / "nothing")


def test_the_head_runs_on_a_non_default_array_api_device():
    """The array-api-strict lane (see test_backend_strict.py): forward with cache, loss with
    noise and gradients stay on device1 and equal the NumPy run."""
    strict = pytest.importorskip("array_api_strict")
    device = strict.Device("device1")
    head, cfg, target, tokens, features = _setup()
    mask = np.ones((B, T), dtype=bool)
    on_device = [
        {k: strict.asarray(v, device=device) for k, v in tree.items()}
        if isinstance(tree, dict)
        else strict.asarray(tree, device=device)
        for tree in (head, target, tokens, features, mask)
    ]
    with strict.ArrayAPIStrictFlags(boolean_indexing=False, data_dependent_shapes=False):
        loss, parts, grads = eagle1_loss(
            on_device[0],
            cfg,
            *on_device[1:4],
            on_device[3],
            on_device[4],
            noise=0.1,
            rng=np.random.default_rng(0),
        )
        cache = new_head_cache(cfg, on_device[0], capacity=8, batch=B)
        pred, _, _ = head_forward(on_device[0], cfg, *on_device[1:4], cache=cache)
    want = eagle1_loss(
        head, cfg, target, tokens, features, features, mask, noise=0.1, rng=np.random.default_rng(0)
    )
    assert loss == pytest.approx(want[0], rel=1e-12) and parts == pytest.approx(want[1], rel=1e-12)
    for name, grad in grads.items():
        assert grad.device == device
        np.testing.assert_allclose(backend.to_host(grad), want[2][name], rtol=0, atol=1e-12)
    full = head_forward(head, cfg, target, tokens, features)[0]
    np.testing.assert_allclose(backend.to_host(pred), full, rtol=0, atol=1e-12)


# The state dict of the official EAGLE-1 head module (SafeAILab/EAGLE, v1 `cnets.Model` with
# one layer, which has no input norm in layer 0), which it loads with strict=True.
OFFICIAL_KEYS = {
    "embed_tokens.weight", "fc.weight", "fc.bias",
    "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight", "layers.0.post_attention_layernorm.weight",
}  # fmt: skip


def test_the_official_export_adds_the_targets_embedding_and_loads_back(tmp_path, capsys):
    from safetensors.numpy import load_file

    from minieagle.checkpoint import load_checkpoint
    from minieagle.cli import PRETRAINED, main
    from minieagle.heads.eagle1 import load_head

    head_dir, target_dir = PRETRAINED / "small-eagle1", PRETRAINED / "small"
    out = tmp_path / "official"
    argv = ["export", "eagle1", "--head", str(head_dir), "--target", str(target_dir)]
    assert main([*argv, "--out", str(out)]) == 0
    assert "embed_tokens.weight written to" in capsys.readouterr().out
    stored = load_file(out / "model.safetensors")
    assert set(stored) == OFFICIAL_KEYS and all(v.dtype == np.float16 for v in stored.values())
    target, _, _ = load_checkpoint(target_dir)
    np.testing.assert_array_equal(
        stored["embed_tokens.weight"], target["model.embed_tokens.weight"].astype(np.float16)
    )
    head, _ = load_head(head_dir)
    back, _ = load_head(out)  # our loader drops the embedding
    assert set(back) == set(head)
    for name in head:
        np.testing.assert_array_equal(back[name], head[name].astype(np.float16).astype(np.float32))
    # An embedding of another shape is refused with the fix.
    stored["embed_tokens.weight"] = stored["embed_tokens.weight"][:, :8]
    from safetensors.numpy import save_file

    save_file(stored, out / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"embed_tokens.weight.*expected \(2048, 128\).*delete"):
        load_head(out)
