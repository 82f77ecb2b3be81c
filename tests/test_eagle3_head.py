"""The EAGLE-3 draft head (minieagle.heads.eagle3): layer, head, draft vocabulary and the
training-time-test (TTT) loss.

Gradients are checked in float64 against centred differences, one bound per tensor, with random
upstream gradients. The fast diagonal TTT attention is checked against the explicit-mask one,
and the whole TTT unroll against what the drafter computes at inference (a cached rollout along
the teacher-forced chain); the two historical TTT bugs (the extra diagonal mask, the missing PE
shift) are built on purpose to show that this check catches them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minieagle import backend, layers, model
from minieagle.config import LlamaConfig
from minieagle.gradcheck import failures, gradient_errors
from minieagle.heads import eagle3
from minieagle.heads.eagle3 import (
    DraftVocab,
    Eagle3Config,
    check_draft_vocab,
    default_aux_layers,
    diagonal_attention_backward,
    diagonal_attention_forward,
    draft_to_target,
    draft_vocab_from_counts,
    fuse_features,
    head_backward,
    head_forward,
    head_param_shapes,
    init_head,
    midlayer_backward,
    midlayer_forward,
    new_head_cache,
    ttt_loss,
)

# Seven layers: the smallest target whose default aux layers (2, L//2, L-3) are distinct.
TARGET = LlamaConfig(
    vocab_size=16,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=7,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    initializer_range=0.5,  # peaked attention and target laws: uniform ones hide bugs
)
N = 10  # the draft vocabulary: 10 of the 16 target ids
B, T = 2, 5
d = TARGET.hidden_size
# At eps = 1e-5 every tensor's observed error is below 1e-8; 1e-6 leaves room without letting an
# O(1) bug through (the broken backwards below miss by 1e-4 or more).
EPS, BOUND = 1e-5, 1e-6
EXACT = 1e-10  # float64: two spellings of one computation differ in rounding only


def _setup(seed=0):
    """(head, cfg, target params, vocab, tokens [B, T+1], fused [B, T, 3d], target logits
    [B, T, V], loss_mask [B, T]) aligned as ttt_loss expects, from a real target forward."""
    cfg = Eagle3Config.from_target(TARGET, draft_vocab_size=N)
    rng = np.random.default_rng(seed)
    head = init_head(cfg, seed=seed, dtype=np.float64)
    for name, value in head.items():  # unit norm gains would hide a swapped norm
        if name.endswith("norm.weight"):
            head[name] = 1.0 + 0.3 * rng.standard_normal(value.shape)
    target = model.init_params(TARGET, seed=seed + 1, dtype=np.float64)
    tokens = rng.integers(0, TARGET.vocab_size, (B, T + 1))
    logits, hidden, _ = model.forward(target, TARGET, tokens, output_hidden=cfg.aux_layers)
    fused = fuse_features(hidden, cfg.aux_layers)[:, :T]  # positions 0 .. T-1
    target_logits = logits[:, 1:]  # positions 1 .. T: row t predicts x_{t+2}
    vocab = draft_vocab_from_counts(np.bincount(tokens.reshape(-1), minlength=16), N)
    loss_mask = rng.random((B, T)) < 0.8
    return head, cfg, target, vocab, tokens, fused, target_logits, loss_mask


def _assert_pass(errors, bound=BOUND):
    bad = failures(errors, bound)
    assert not bad, f"gradient check failed: {bad} (all errors: {errors})"


# ---------------------------------------------------------------------------- diagonal attention


def _diagonal_case(steps, seed=0):
    rng = np.random.default_rng(seed)
    H, Hkv, hd = 4, 2, 4
    q = rng.standard_normal((B, H, T, hd)) * 1.5  # peaked softmax
    keys = [rng.standard_normal((B, Hkv, T, hd)) * 1.5 for _ in range(steps + 1)]
    values = [rng.standard_normal((B, Hkv, T, hd)) for _ in range(steps + 1)]
    return q, keys, values, model.causal_mask(0, T)


def _diagonal_errors(steps, backward=diagonal_attention_backward, break_cache=None):
    q, keys, values, block = _diagonal_case(steps)
    out, cache = diagonal_attention_forward(q, keys, values, block)
    dout = np.random.default_rng(1).standard_normal(out.shape)
    dq, dkeys, dvalues = backward(dout, cache if break_cache is None else break_cache(cache))

    def f():
        return float(np.sum(diagonal_attention_forward(q, keys, values, block)[0] * dout))

    inputs = {"q": q, **{f"k{j}": k for j, k in enumerate(keys)}}
    inputs.update({f"v{j}": v for j, v in enumerate(values)})
    analytic = {"q": dq, **{f"k{j}": k for j, k in enumerate(dkeys)}}
    analytic.update({f"v{j}": v for j, v in enumerate(dvalues)})
    return gradient_errors(f, inputs, analytic)


@pytest.mark.parametrize("steps", [0, 2])
def test_diagonal_attention_gradients(steps):
    _assert_pass(_diagonal_errors(steps), 1e-7)


def test_gradcheck_catches_a_diagonal_backward_that_drops_the_diagonal_keys_from_dq():
    def forget_later_keys(cache):
        qg, keys, values, probs, scale = cache
        return qg, (keys[0], *[np.zeros_like(k) for k in keys[1:]]), values, probs, scale

    assert set(failures(_diagonal_errors(2, break_cache=forget_later_keys), 1e-7)) == {"q"}


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_diagonal_attention_equals_masked_attention_over_concatenated_steps(steps):
    q, keys, values, block = _diagonal_case(steps, seed=2)
    mask = np.concatenate([block] + [np.eye(T, dtype=bool)] * steps, axis=1)  # [T, (s+1)T]
    want, _ = layers.attention_forward(q, np.concatenate(keys, 2), np.concatenate(values, 2), mask)
    got, _ = diagonal_attention_forward(q, keys, values, block)
    np.testing.assert_allclose(got, want, rtol=0, atol=EXACT)


# ---------------------------------------------------------------------------- layer and head


def _rms(x, weight, eps=TARGET.rms_norm_eps):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * weight


def test_midlayer_matches_the_equations_written_out():
    """The layer against its definition in plain NumPy (eagle.md §3.3, SpecForge's layout):
    q/k/v read [norm(embedding), norm(feature)], the residual is the un-normed feature."""
    head, cfg, *_ = _setup()
    rng = np.random.default_rng(8)
    e, x = rng.standard_normal((2, B, T, d))
    cos, sin = layers.rope_tables(np.arange(T) + 3, cfg.layer.head_dim, 10000.0, np.float64)
    got, _ = midlayer_forward(head, cfg, e, x, cos, sin, model.causal_mask(0, T))

    w = {name.removeprefix("midlayer."): value for name, value in head.items()}
    n = np.concatenate([_rms(e, w["input_layernorm.weight"]), _rms(x, w["hidden_norm.weight"])], -1)
    H, Hkv, hd = 2, 1, d // 2

    def heads(y, count):  # [B, T, count * hd] -> [B, count, T, hd], rotated
        y = y.reshape(B, T, count, hd).transpose(0, 2, 1, 3)
        rotated = np.concatenate([-y[..., hd // 2 :], y[..., : hd // 2]], -1)
        return y * cos + rotated * sin

    q = heads(n @ w["self_attn.q_proj.weight"].T, H)
    k = heads(n @ w["self_attn.k_proj.weight"].T, Hkv)
    v = (n @ w["self_attn.v_proj.weight"].T).reshape(B, T, Hkv, hd).transpose(0, 2, 1, 3)
    attended = np.zeros((B, T, H * hd))
    for head_index in range(H):
        scores = q[:, head_index] @ k[:, 0].transpose(0, 2, 1) / np.sqrt(hd)  # one kv head
        scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        attended[..., head_index * hd : (head_index + 1) * hd] = (p / p.sum(-1, keepdims=True)) @ v[
            :, 0
        ]
    h = x + attended @ w["self_attn.o_proj.weight"].T
    n2 = _rms(h, w["post_attention_layernorm.weight"])
    gate, up = n2 @ w["mlp.gate_proj.weight"].T, n2 @ w["mlp.up_proj.weight"].T
    want = h + (gate / (1 + np.exp(-gate)) * up) @ w["mlp.down_proj.weight"].T
    np.testing.assert_allclose(got, want, rtol=0, atol=EXACT)


def test_midlayer_gradients_match_finite_differences():
    head, cfg, *_ = _setup()
    rng = np.random.default_rng(3)
    embedded, hidden = rng.standard_normal((2, B, T, d))
    cos, sin = layers.rope_tables(np.arange(T), cfg.layer.head_dim, 10000.0, np.float64)
    mask = model.causal_mask(0, T)
    out, cache = midlayer_forward(head, cfg, embedded, hidden, cos, sin, mask)
    dout = rng.standard_normal(out.shape)
    dembedded, dhidden, grads = midlayer_backward(dout, cache, cfg)
    assert set(grads) == {name for name in head if name.startswith("midlayer.")}

    def f():
        return float(
            np.sum(midlayer_forward(head, cfg, embedded, hidden, cos, sin, mask)[0] * dout)
        )

    inputs = {name: head[name] for name in grads} | {"embedded": embedded, "hidden": hidden}
    analytic = grads | {"embedded": dembedded, "hidden": dhidden}
    _assert_pass(gradient_errors(f, inputs, analytic, eps=EPS))


@pytest.mark.parametrize("features", ["fused", "own"])
def test_head_gradients_match_finite_differences(features):
    head, cfg, target, _, tokens, fused, _, _ = _setup()
    rng = np.random.default_rng(4)
    feats = fused if features == "fused" else rng.standard_normal((B, T, d))
    ids = tokens[:, 1:]
    out, logits, caches = head_forward(head, cfg, target, ids, feats, keep_caches=True)
    assert logits.shape == (B, T, N) and out.shape == (B, T, d)
    dout, dlogits = rng.standard_normal(out.shape), rng.standard_normal(logits.shape)
    grads = head_backward(dout, dlogits, caches, cfg)
    assert list(grads) == list(head_param_shapes(cfg))  # the head's, none of the target's

    def f():
        o, lg, _ = head_forward(head, cfg, target, ids, feats)
        return float(np.sum(o * dout) + np.sum(lg * dlogits))

    _assert_pass(gradient_errors(f, head, grads, eps=EPS))
    if features == "own":
        assert not np.any(grads["fc.weight"])  # fc is skipped for the head's own outputs


def test_cached_incremental_and_unbatched_forwards_equal_the_full_forward():
    head, cfg, target, _, tokens, fused, _, _ = _setup()
    ids = tokens[:, 1:]
    full_out, full_logits, _ = head_forward(head, cfg, target, ids, fused)
    cache = new_head_cache(cfg, head, capacity=16, batch=B)
    pieces = [
        head_forward(head, cfg, target, ids[:, a:b], fused[:, a:b], cache=cache)[:2]
        for a, b in ((0, 3), (3, 4), (4, 5))
    ]
    np.testing.assert_allclose(np.concatenate([o for o, _ in pieces], 1), full_out, atol=EXACT)
    np.testing.assert_allclose(np.concatenate([lg for _, lg in pieces], 1), full_logits, atol=EXACT)
    row_out, row_logits, _ = head_forward(head, cfg, target, ids[1], fused[1])
    np.testing.assert_allclose(row_logits, full_logits[1], rtol=0, atol=EXACT)
    np.testing.assert_allclose(row_out, full_out[1], rtol=0, atol=EXACT)


def test_fused_features_are_the_inputs_of_the_aux_layers_low_to_high():
    head, cfg, target, _, tokens, fused, _, _ = _setup()
    assert cfg.aux_layers == (2, 3, 4)
    _, hidden, _ = model.forward(target, TARGET, tokens, output_hidden=(0, 2, 3, 4))
    for slot, layer in enumerate(cfg.aux_layers):
        np.testing.assert_array_equal(fused[..., slot * d : (slot + 1) * d], hidden[layer][:, :T])
    embedded = target["model.embed_tokens.weight"][tokens]
    np.testing.assert_array_equal(hidden[0], embedded)  # tap i = the stream ENTERING layer i


# ---------------------------------------------------------------------------- TTT loss gradients


@pytest.mark.parametrize("steps", [1, 3])
def test_ttt_loss_gradients_match_finite_differences(steps):
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()
    args = (head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    loss, parts, grads = ttt_loss(*args, steps=steps, step_weight=0.7)
    assert list(grads) == list(head_param_shapes(cfg))
    assert loss == pytest.approx(sum(0.7**s * x for s, x in enumerate(parts["step_loss"])))

    def f():
        return ttt_loss(*args, steps=steps, step_weight=0.7)[0]

    _assert_pass(gradient_errors(f, head, grads, eps=EPS, entries=12))


def test_scoring_without_gradients_gives_the_same_loss_and_parts(monkeypatch):
    """grads=False (how a run scores its head on validation batches) skips the backward pass
    and changes nothing else."""
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()
    args = (head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    trained = ttt_loss(*args, steps=3)
    backward_calls = []
    real_backward = eagle3._ttt_backward
    monkeypatch.setattr(eagle3, "_ttt_backward",
                        lambda *a: backward_calls.append(1) or real_backward(*a))  # fmt: skip
    scored = ttt_loss(*args, steps=3, grads=False)
    assert scored[0] == trained[0] and scored[1] == trained[1] and scored[2] is None
    assert backward_calls == []


def test_the_setup_exercises_both_reasons_to_skip_a_position():
    _, _, _, vocab, _, _, target_logits, loss_mask = _setup()
    in_vocab = vocab.t2d[target_logits.argmax(-1)]
    assert np.any(loss_mask & ~in_vocab) and np.any(loss_mask & in_vocab) and np.any(~loss_mask)


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_diagonal_and_explicit_ttt_give_the_same_loss_and_gradients(steps):
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup(seed=steps)
    args = (head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    fast = ttt_loss(*args, steps=steps, attention="diagonal")
    slow = ttt_loss(*args, steps=steps, attention="explicit")
    assert fast[0] == pytest.approx(slow[0], rel=0, abs=EXACT)
    for key, per_step in fast[1].items():
        assert per_step == pytest.approx(slow[1][key], rel=0, abs=EXACT)
    for name in fast[2]:
        np.testing.assert_allclose(fast[2][name], slow[2][name], rtol=0, atol=EXACT)


def test_equality_check_catches_a_backward_that_drops_earlier_steps_key_gradients(monkeypatch):
    """Later queries attend to earlier steps' keys/values; dropping those gradients (keeping
    only each step's own) changes the weights' gradients but not the loss."""
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()
    args = (head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    slow = ttt_loss(*args, steps=3, attention="explicit")

    def own_step_only(dout, cache):
        dq, dkeys, dvalues = diagonal_attention_backward(dout, cache)
        keep = len(dkeys) - 1
        dkeys = [k if j == keep else np.zeros_like(k) for j, k in enumerate(dkeys)]
        dvalues = [v if j == keep else np.zeros_like(v) for j, v in enumerate(dvalues)]
        return dq, dkeys, dvalues

    pair = (diagonal_attention_forward, own_step_only)
    monkeypatch.setitem(eagle3._ATTENTION_PAIRS, "diagonal", pair)
    broken = ttt_loss(*args, steps=3, attention="diagonal")
    assert broken[0] == pytest.approx(slow[0], rel=0, abs=EXACT)
    for name in ("midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight"):
        assert np.abs(broken[2][name] - slow[2][name]).max() > 1e-6


# ---------------------------------------------------------------------------- TTT == inference


def _rollout_logits(head, cfg, target, tokens, fused, steps):
    """{(t, s): draft logits [B, N]}: what the drafter computes at position t + s when it
    drafts s tokens ahead of real position t along the teacher-forced chain: a KV cache over
    the real prefix (x_{j+1}, g_j) for j <= t, then its own outputs fed back one at a time."""
    out = {}
    for t in range(T):
        cache = new_head_cache(cfg, head, capacity=T + steps, batch=B)
        prefix = tokens[:, 1 : t + 2], fused[:, : t + 1]
        hidden, logits, _ = head_forward(head, cfg, target, *prefix, cache=cache)
        out[t, 0] = logits[:, -1]
        hidden = hidden[:, -1:]
        for s in range(1, min(steps, T - t)):
            token = tokens[:, t + 1 + s : t + 2 + s]  # x_{t+1+s}, teacher-forced
            hidden, logits, _ = head_forward(head, cfg, target, token, hidden, cache=cache)
            out[t, s] = logits[:, -1]
    return out


def _ttt_vs_rollout(**variant):
    """{(t, s): max |TTT step-s logits at index t - rollout logits|}."""
    head, cfg, target, _, tokens, fused, _, _ = _setup()
    steps = 4
    ttt, _ = eagle3._ttt_forward(head, cfg, target, tokens, fused, steps=steps, **variant)
    rollout = _rollout_logits(head, cfg, target, tokens, fused, steps)
    return {(t, s): float(np.abs(ttt[s][:, t] - want).max()) for (t, s), want in rollout.items()}


@pytest.mark.parametrize("attention", ["diagonal", "explicit"])
def test_ttt_step_s_reproduces_the_drafter_s_tokens_ahead(attention):
    errors = _ttt_vs_rollout(attention=attention)
    assert len(errors) == sum(min(4, T - t) for t in range(T))
    assert max(errors.values()) < EXACT


@pytest.mark.parametrize(
    "variant", [{"old_diagonal_mask": True}, {"pe_shift": False}], ids=["old-mask", "no-pe-shift"]
)
def test_inference_check_catches_the_historical_ttt_bugs(variant):
    errors = _ttt_vs_rollout(**variant)
    assert max(e for (t, s), e in errors.items() if s == 0) < EXACT  # step 0 is unaffected
    assert min(e for (t, s), e in errors.items() if s > 0) > 1e-6  # every later step is not


def test_ttt_loss_equals_the_loss_of_inference_rollouts():
    """Loss, top-1 and acceptance spelled out from the rollouts: soft-CE against the target's law
    over the draft ids, at positions whose loss_mask is set and whose target argmax is a draft
    id, summed and divided by all B * T positions, weighted 0.8^s."""
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()
    steps = 3
    loss, parts, _ = ttt_loss(
        head, cfg, target, vocab, tokens, fused, target_logits, loss_mask, steps=steps
    )
    rollout = _rollout_logits(head, cfg, target, tokens, fused, steps)
    step_loss, top1, accept, requested = np.zeros((4, steps))
    for (t, s), logits in rollout.items():
        for b in range(B):
            row = target_logits[b, t + s]
            if not loss_mask[b, t + s]:
                continue
            requested[s] += 1
            top1[s] += vocab.ids[logits[b].argmax()] == row.argmax()
            q = np.exp(logits[b] - logits[b].max())
            q /= q.sum()  # over draft ids; zero on every other target id
            accept[s] += np.sum(np.minimum(q, np.exp(row[vocab.ids]) / np.exp(row).sum()))
            if row.argmax() in vocab.ids:
                p = np.exp(row[vocab.ids] - row[vocab.ids].max())
                p /= p.sum()
                log_q = logits[b] - np.log(np.sum(np.exp(logits[b])))
                step_loss[s] -= np.sum(p * log_q) / (B * T)
    assert parts["step_loss"] == pytest.approx(list(step_loss), rel=1e-12)
    assert parts["top1"] == pytest.approx(list(top1 / requested), rel=1e-12)
    assert parts["accept"] == pytest.approx(list(accept / requested), rel=1e-12)
    assert loss == pytest.approx(sum(0.8**s * step_loss[s] for s in range(steps)), rel=1e-12)


def test_the_target_is_frozen_and_untouched():
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()
    before = {name: value.copy() for name, value in target.items()}
    _, _, grads = ttt_loss(head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    assert not set(grads) & set(target)
    assert all(np.array_equal(before[name], target[name]) for name in target)


def test_ttt_and_the_head_run_on_a_non_default_array_api_device():
    """The array-api-strict lane (see test_backend_strict.py): the TTT loss, its gradients and
    a cached head forward stay on device1 and equal the NumPy run."""
    strict = pytest.importorskip("array_api_strict")
    device = strict.Device("device1")
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()

    def put(x):
        return strict.asarray(x, device=device)

    on_device = ({k: put(v) for k, v in head.items()}, cfg, {k: put(v) for k, v in target.items()})
    vocab_on_device = DraftVocab(put(vocab.ids), vocab.target_vocab_size)
    arrays = [put(x) for x in (tokens, fused, target_logits, loss_mask)]
    with strict.ArrayAPIStrictFlags(boolean_indexing=False, data_dependent_shapes=False):
        loss, parts, grads = ttt_loss(*on_device, vocab_on_device, *arrays, steps=3)
        cache = new_head_cache(cfg, on_device[0], capacity=8, batch=B)
        _, logits, _ = head_forward(*on_device, arrays[0][:, 1:], arrays[1], cache=cache)
    want = ttt_loss(head, cfg, target, vocab, tokens, fused, target_logits, loss_mask, steps=3)
    assert loss == pytest.approx(want[0], rel=1e-12)
    for name, grad in grads.items():
        assert grad.device == device
        np.testing.assert_allclose(backend.to_host(grad), want[2][name], rtol=0, atol=1e-12)
    full = head_forward(head, cfg, target, tokens[:, 1:], fused)[1]
    np.testing.assert_allclose(backend.to_host(logits), full, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------- draft vocabulary


@given(st.data())
def test_d2t_and_t2d_describe_the_same_ids(data):
    V = data.draw(st.integers(1, 40), label="V")
    ids = sorted(data.draw(st.sets(st.integers(0, V - 1), min_size=1), label="ids"))
    vocab = DraftVocab(np.array(ids), V)
    d2t, t2d = vocab.d2t, vocab.t2d
    assert d2t.dtype == np.int64 and d2t.shape == (len(ids),) and t2d.shape == (V,)
    np.testing.assert_array_equal(np.arange(len(ids)) + d2t, ids)  # target = draft + d2t
    assert np.all(np.diff(d2t) >= 0) and d2t[0] >= 0
    assert t2d.sum() == len(ids) and np.all(t2d[ids])
    check_draft_vocab(d2t, t2d, V)
    np.testing.assert_array_equal(DraftVocab.from_buffers(d2t, t2d).ids, ids)
    np.testing.assert_array_equal(draft_to_target(np.arange(len(ids)), vocab), ids)


@given(st.lists(st.integers(0, 4), min_size=1, max_size=30), st.data())
def test_from_counts_keeps_the_most_frequent_ids_lower_id_first_on_ties(counts, data):
    size = data.draw(st.integers(1, len(counts)), label="size")
    vocab = draft_vocab_from_counts(np.array(counts), size)
    by_rank = sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    assert vocab.ids.tolist() == sorted(by_rank[:size])


def test_from_counts_on_a_worked_example():
    counts = np.array([5, 9, 9, 1, 9, 0])
    assert draft_vocab_from_counts(counts, 2).ids.tolist() == [1, 2]  # three 9s: ids 1, 2 win
    assert draft_vocab_from_counts(counts, 4).ids.tolist() == [0, 1, 2, 4]


def test_the_full_vocabulary_has_zero_offsets():
    vocab = DraftVocab.full(16)
    assert vocab.size == 16 and not np.any(vocab.d2t) and np.all(vocab.t2d)
    assert Eagle3Config.from_target(TARGET).draft_vocab_size == 16


def test_check_draft_vocab_catches_tampered_buffers():
    vocab = DraftVocab(np.array([0, 2, 3, 7, 9]), 12)
    d2t, t2d = vocab.d2t, vocab.t2d
    check_draft_vocab(d2t, t2d, 12)
    shifted = d2t.copy()
    shifted[2] += 1  # draft 2 -> target 4, which t2d does not mark
    with pytest.raises(ValueError, match=r"draft id 2 to target id 4, which t2d does not mark"):
        check_draft_vocab(shifted, t2d, 12)
    collided = d2t.copy()
    collided[2] -= 1  # draft 2 -> target 2, the same as draft 1
    with pytest.raises(ValueError, match=r"draft ids 1 and 2 to target ids 2 and 2"):
        check_draft_vocab(collided, t2d, 12)
    beyond = d2t.copy()
    beyond[4] += 3
    with pytest.raises(ValueError, match=r"target id 12, outside \[0, 12\)"):
        check_draft_vocab(beyond, t2d, 12)
    extra = t2d.copy()
    extra[5] = True
    with pytest.raises(ValueError, match=r"t2d marks 6 target ids but d2t has 5 draft ids"):
        check_draft_vocab(d2t, extra, 12)
    moved = t2d.copy()
    moved[[3, 4]] = [False, True]
    with pytest.raises(ValueError, match=r"draft id 2 to target id 3, which t2d does not mark"):
        check_draft_vocab(d2t, moved, 12)
    with pytest.raises(ValueError, match=r"t2d has shape \(12,\); expected \(16,\)"):
        check_draft_vocab(d2t, t2d, 16)


def test_bad_draft_vocabularies_raise_clear_errors():
    with pytest.raises(ValueError, match=r"strictly increasing target ids in \[0, 8\)"):
        DraftVocab(np.array([3, 1]), 8)
    with pytest.raises(ValueError, match=r"strictly increasing target ids in \[0, 8\)"):
        DraftVocab(np.array([1, 8]), 8)
    with pytest.raises(ValueError, match=r"size=7 is outside \[1, 6\]"):
        draft_vocab_from_counts(np.ones(6), 7)


# ---------------------------------------------------------------------------- configuration errors


@pytest.mark.parametrize("L", [3, 4, 5, 6])
def test_a_target_too_shallow_for_the_default_aux_layers(L):
    with pytest.raises(ValueError, match=rf"num_hidden_layers={L} .* pass aux_layers explicitly"):
        Eagle3Config.from_target(TARGET.replace(num_hidden_layers=L))
    explicit = (0, L // 2, L - 1)
    assert Eagle3Config.from_target(TARGET.replace(num_hidden_layers=L), aux_layers=explicit)


def test_aux_layers_and_vocabulary_size_errors():
    assert default_aux_layers(32) == (2, 16, 29)  # the paper's LLaMA-3.1-8B layers
    assert default_aux_layers(7) == (2, 3, 4)  # the smallest target the default fits
    with pytest.raises(ValueError, match=r"num_hidden_layers=2; .* at least 3 layers"):
        default_aux_layers(2)
    with pytest.raises(ValueError, match=r"aux_layers=\(2, 2, 4\) must be three distinct"):
        Eagle3Config.from_target(TARGET, aux_layers=(2, 2, 4))
    with pytest.raises(ValueError, match=r"aux_layers=\(4, 3, 2\) must be three distinct"):
        Eagle3Config.from_target(TARGET, aux_layers=(4, 3, 2))
    with pytest.raises(ValueError, match=r"aux_layers=\(-1, 2, 3\) must be three distinct non-neg"):
        Eagle3Config.from_target(TARGET, aux_layers=(-1, 2, 3))
    with pytest.raises(ValueError, match=r"\(2, 3, 7\) reach outside the target's layers \[0, 7\)"):
        Eagle3Config.from_target(TARGET, aux_layers=(2, 3, 7))
    with pytest.raises(ValueError, match=r"must be three layer indices"):
        Eagle3Config.from_target(TARGET, aux_layers=(1, 2))
    with pytest.raises(ValueError, match=r"draft_vocab_size=17 exceeds the target's vocab_size=16"):
        Eagle3Config.from_target(TARGET, draft_vocab_size=17)
    with pytest.raises(ValueError, match=r"draft_vocab_size=0 must be a positive integer"):
        Eagle3Config.from_target(TARGET, draft_vocab_size=0)
    with pytest.raises(ValueError, match=r"num_hidden_layers=7; the EAGLE-3 head is one"):
        Eagle3Config(TARGET, aux_layers=(2, 3, 4), draft_vocab_size=16)


def test_bad_inputs_raise_clear_errors():
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup()
    ids = tokens[:, 1:]
    message = r"width 16 but the head expects 3 \* hidden_size = 24 .* or hidden_size = 8"
    with pytest.raises(ValueError, match=message):
        head_forward(head, cfg, target, ids, fused[..., :16])
    with pytest.raises(ValueError, match=r"tokens \(2, 4\) and features \(2, 5, 24\) disagree"):
        head_forward(head, cfg, target, ids[:, :4], fused)
    with pytest.raises(ValueError, match=r"tokens hold ids outside \[0, vocab_size=16\)"):
        head_forward(head, cfg, target, ids + 16, fused)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(5, 4\); expected \(5, 5\)"):
        head_forward(head, cfg, target, ids, fused, attention_mask=np.ones((T, 4), bool))
    other = model.init_params(TARGET.replace(vocab_size=20), dtype=np.float64)
    with pytest.raises(ValueError, match=r"embedding is \(20, 8\) but the head expects"):
        head_forward(head, cfg, other, ids, fused)
    with pytest.raises(ValueError, match=r"lack the inputs of layers \[4\]"):
        fuse_features({2: fused, 3: fused}, cfg.aux_layers)
    args = (head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    with pytest.raises(ValueError, match=r"tokens has shape \(2, 5\); expected \(2, 6\)"):
        ttt_loss(head, cfg, target, vocab, tokens[:, 1:], *args[5:])
    with pytest.raises(ValueError, match=r"maps 16 ids into 16 but the head has draft_vocab"):
        ttt_loss(head, cfg, target, DraftVocab.full(16), *args[4:])
    with pytest.raises(ValueError, match=r"attention='mask' is not one of"):
        ttt_loss(*args, attention="mask")
    with pytest.raises(ValueError, match=r"steps=0 is below 1"):
        ttt_loss(*args, steps=0)


# ---------------------------------------------------------------------------- one target feature
# The paper's ablation head (Table 2, "no feature loss + TTT"): it reads only the top feature,
# aux_layers = (L,), the stream after the last layer. fc is [d, d], so the fused features are as
# wide as the head's own outputs and every forward must say which it gets.

TOP = (TARGET.num_hidden_layers,)


def _setup_one_feature(seed=0):
    """As `_setup`, for a head that reads only the target's top feature: fused [B, T, d]."""
    _, _, target, vocab, tokens, _, target_logits, loss_mask = _setup(seed)
    cfg = Eagle3Config.from_target(TARGET, aux_layers=TOP, draft_vocab_size=N)
    rng = np.random.default_rng(seed + 10)
    head = init_head(cfg, seed=seed, dtype=np.float64)
    for name, value in head.items():
        if name.endswith("norm.weight"):
            head[name] = 1.0 + 0.3 * rng.standard_normal(value.shape)
    _, hidden, _ = model.forward(target, TARGET, tokens, output_hidden=cfg.aux_layers)
    fused = fuse_features(hidden, cfg.aux_layers)[:, :T]  # [B, T, d]
    return head, cfg, target, vocab, tokens, fused, target_logits, loss_mask


def test_a_one_feature_head_reads_the_top_feature_through_a_square_fc():
    head, cfg, target, _, tokens, fused, _, _ = _setup_one_feature()
    assert cfg.aux_layers == (7,) and cfg.num_features == 1
    assert head_param_shapes(cfg)["fc.weight"] == (d, d)
    assert Eagle3Config.from_target(TARGET).num_features == 3
    _, hidden, _ = model.forward(target, TARGET, tokens, output_hidden=(7, "final"))
    np.testing.assert_array_equal(fused, hidden[7][:, :T])  # the stream before the final norm
    assert not np.allclose(fused, hidden["final"][:, :T])


@pytest.mark.parametrize("target_features", [True, False])
def test_one_feature_head_gradients_match_finite_differences(target_features):
    head, cfg, target, _, tokens, fused, _, _ = _setup_one_feature()
    rng = np.random.default_rng(4)
    feats = fused if target_features else rng.standard_normal((B, T, d))
    ids = tokens[:, 1:]
    out, logits, caches = head_forward(
        head, cfg, target, ids, feats, target_features=target_features, keep_caches=True
    )
    dout, dlogits = rng.standard_normal(out.shape), rng.standard_normal(logits.shape)
    grads = head_backward(dout, dlogits, caches, cfg)
    assert list(grads) == list(head_param_shapes(cfg))

    def f():
        o, lg, _ = head_forward(head, cfg, target, ids, feats, target_features=target_features)
        return float(np.sum(o * dout) + np.sum(lg * dlogits))

    _assert_pass(gradient_errors(f, head, grads, eps=EPS))
    assert np.any(grads["fc.weight"]) == target_features  # fc only on the target's features


def test_one_feature_ttt_loss_gradients_match_finite_differences():
    head, cfg, target, vocab, tokens, fused, target_logits, loss_mask = _setup_one_feature()
    args = (head, cfg, target, vocab, tokens, fused, target_logits, loss_mask)
    _, _, grads = ttt_loss(*args, steps=3, step_weight=0.7)
    assert np.any(grads["fc.weight"])

    def f():
        return ttt_loss(*args, steps=3, step_weight=0.7)[0]

    _assert_pass(gradient_errors(f, head, grads, eps=EPS, entries=12))


def _explicit_rollout_logits(head, cfg, target, tokens, fused, steps, own_through_fc=False):
    """`_rollout_logits` with the feature kind said at every forward: the real prefix as target
    features, the head's own outputs as such (own_through_fc: the bug of sending them through
    fc, which only a one-feature head can commit silently)."""
    out = {}
    for t in range(T):
        cache = new_head_cache(cfg, head, capacity=T + steps, batch=B)
        prefix = tokens[:, 1 : t + 2], fused[:, : t + 1]
        hidden, logits, _ = head_forward(
            head, cfg, target, *prefix, cache=cache, target_features=True
        )
        out[t, 0] = logits[:, -1]
        hidden = hidden[:, -1:]
        for s in range(1, min(steps, T - t)):
            token = tokens[:, t + 1 + s : t + 2 + s]
            hidden, logits, _ = head_forward(
                head, cfg, target, token, hidden, cache=cache, target_features=own_through_fc
            )
            out[t, s] = logits[:, -1]
    return out


@pytest.mark.parametrize("own_through_fc", [False, True], ids=["right", "broken"])
def test_one_feature_ttt_step_s_reproduces_the_drafter_s_tokens_ahead(own_through_fc):
    head, cfg, target, _, tokens, fused, _, _ = _setup_one_feature()
    ttt, _ = eagle3._ttt_forward(head, cfg, target, tokens, fused, steps=4)
    rollout = _explicit_rollout_logits(head, cfg, target, tokens, fused, 4, own_through_fc)
    errors = {(t, s): float(np.abs(ttt[s][:, t] - want).max()) for (t, s), want in rollout.items()}
    assert max(e for (t, s), e in errors.items() if s == 0) < EXACT
    later = [e for (t, s), e in errors.items() if s > 0]
    if own_through_fc:  # the check catches a rollout that sends the head's outputs through fc
        assert min(later) > 1e-6
    else:
        assert max(later) < EXACT


def test_explicit_feature_kinds_equal_the_inferred_ones_for_three_features():
    head, cfg, target, _, tokens, fused, _, _ = _setup()
    own = np.random.default_rng(5).standard_normal((B, T, d))
    ids = tokens[:, 1:]
    for feats, kind in ((fused, True), (own, False)):
        inferred = head_forward(head, cfg, target, ids, feats)[1]
        said = head_forward(head, cfg, target, ids, feats, target_features=kind)[1]
        np.testing.assert_array_equal(said, inferred)


def test_a_one_feature_head_refuses_to_guess_what_its_features_are():
    head, cfg, target, _, tokens, fused, _, _ = _setup_one_feature()
    ids = tokens[:, 1:]
    with pytest.raises(ValueError, match=r"width 8 are ambiguous .*\(aux_layers=\(7,\)\).* pass "
                       r"target_features=True .* or target_features=False"):  # fmt: skip
        head_forward(head, cfg, target, ids, fused)
    with pytest.raises(ValueError, match=r"width 24 but the head expects hidden_size = 8"):
        head_forward(head, cfg, target, ids, np.concatenate([fused] * 3, -1))
    with pytest.raises(ValueError, match=r"target_features='yes' must be True .* or None"):
        head_forward(head, cfg, target, ids, fused, target_features="yes")
    three, three_cfg, *_ = _setup()
    with pytest.raises(ValueError, match=r"width 8 but the head expects 3 \* hidden_size = 24"):
        head_forward(three, three_cfg, target, ids, fused, target_features=True)
    wide = np.concatenate([fused] * 3, -1)
    with pytest.raises(ValueError, match=r"width 24 but the head expects hidden_size = 8 \(the"):
        head_forward(three, three_cfg, target, ids, wide, target_features=False)
    args = (head, cfg, target, _setup_one_feature()[3], tokens)
    with pytest.raises(ValueError, match=r"width 24 but the head expects 1 \* hidden_size = 8"):
        ttt_loss(*args, wide, *_setup_one_feature()[6:], steps=2)


def test_one_aux_layer_may_be_any_stream_of_the_target_up_to_the_top():
    for layer in (0, 3, 7):
        assert Eagle3Config.from_target(TARGET, aux_layers=(layer,)).aux_layers == (layer,)
    assert Eagle3Config.from_target(TARGET, aux_layers=[np.int64(7)]).aux_layers == (7,)
    with pytest.raises(ValueError, match=r"aux_layers=\(8,\) is outside \[0, 7\].* pass e\.g\. "
                       r"\(7,\), the top feature"):  # fmt: skip
        Eagle3Config.from_target(TARGET, aux_layers=(8,))
    with pytest.raises(ValueError, match=r"aux_layers=\(-1,\) is outside \[0, L\]"):
        Eagle3Config(TARGET.replace(num_hidden_layers=1), aux_layers=(-1,), draft_vocab_size=4)
    with pytest.raises(ValueError, match=r"must be three layer indices .* or one"):
        Eagle3Config.from_target(TARGET, aux_layers=(2, 7))


TARGET_PARAMS = model.init_params(TARGET, seed=1, dtype=np.float64)


def _one_feature_drafter(head, cfg, depth=3):
    """The dynamic tree with top_k = 1: a chain of depth + 1 drafts."""
    from minieagle.drafters.eagle2 import Eagle2Drafter

    return Eagle2Drafter(TARGET_PARAMS, TARGET, head, cfg, depth=depth, top_k=1,
                         total_tokens=depth + 2)  # fmt: skip


def test_a_one_feature_head_drafts_losslessly_through_the_dynamic_tree():
    from minieagle.generate import generate, greedy_reference

    cfg = Eagle3Config.from_target(TARGET, aux_layers=TOP)
    head = init_head(cfg, seed=3, dtype=np.float64)
    prompt = [1, 5, 9, 2, 7]
    result = generate(
        TARGET_PARAMS, TARGET, prompt, drafter=_one_feature_drafter(head, cfg),
        max_new_tokens=12, stop_at_eos=False,
    )  # fmt: skip
    assert result.tokens == greedy_reference(TARGET_PARAMS, TARGET, prompt, 12)


@pytest.mark.parametrize("adapter", ["right", "broken"])
def test_the_drafter_feeds_its_own_outputs_without_fc(monkeypatch, adapter):
    """A chain drafted by a one-feature head: node i's draft logits are those of the explicit
    rollout (catch-up over target features, then the head's own outputs, fc skipped)."""
    from minieagle.drafters import head_drafter
    from minieagle.sampling import SamplingParams, SeededRandomness

    class OwnOutputsThroughFc(head_drafter.Eagle3Head):
        """A planted bug: an adapter that calls every feature the target's."""

        def forward(self, tokens, features, cache, *, target_features, **placement):
            return super().forward(tokens, features, cache, target_features=True, **placement)

    if adapter == "broken":
        monkeypatch.setitem(head_drafter.HEAD_ADAPTERS, Eagle3Config, OwnOutputsThroughFc)
    cfg = Eagle3Config.from_target(TARGET, aux_layers=TOP)
    head = init_head(cfg, seed=3, dtype=np.float64)
    prompt = np.asarray([1, 5, 9, 2, 7])
    drafter = _one_feature_drafter(head, cfg)
    _, hidden, _ = model.forward(TARGET_PARAMS, TARGET, prompt[:-1], output_hidden=TOP)
    drafter.begin(prompt.tolist(), hidden, SamplingParams())
    tree = drafter.propose(int(prompt[-1]), SeededRandomness(0), max_nodes=5)
    chain = [int(t) for t in tree.tokens]  # root, then one draft per depth
    cache = new_head_cache(cfg, head, capacity=16)
    fused = fuse_features(hidden, TOP)
    out, logits, _ = head_forward(
        head, cfg, TARGET_PARAMS, prompt[1:], fused, cache=cache, target_features=True
    )
    want = [logits[-1]]
    for token in chain[1:-1]:
        out, logits, _ = head_forward(
            head, cfg, TARGET_PARAMS, np.asarray([token]), out[-1:], cache=cache,
            target_features=False,
        )  # fmt: skip
        want.append(logits[-1])
    errors = [np.abs(drafter.draft_logits[i] - w).max() for i, w in enumerate(want)]
    assert errors[0] < EXACT  # the root's logits: the catch-up over target features
    if adapter == "right":
        assert max(errors) < EXACT
    else:
        assert min(errors[1:]) > 1e-6
