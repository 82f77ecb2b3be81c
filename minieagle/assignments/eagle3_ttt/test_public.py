"""Public tests for the eagle3_ttt assignment: run them with `python -m pytest` in this folder.

The oracle is written out here in plain NumPy, from the equations of the handout: the head's one
decoder layer, an attention with an explicit boolean mask, the per-step unroll with the mask
[causal | I | ... | I] built by hand, and the loss as a loop over (step, row, position). Nothing
in it calls your file, except to read what your functions return. The grader runs these and more
(several steps, the drafting rollout, both attentions, every gradient over the unroll).
"""

from __future__ import annotations

import numpy as np
import pytest

from minieagle.config import LlamaConfig
from minieagle.gradcheck import numerical_gradient
from minieagle.heads.eagle3 import (
    DraftVocab,
    Eagle3Config,
    _ttt_forward,
    diagonal_attention_forward,
    ttt_loss,
)

LAYER = LlamaConfig(
    vocab_size=16,
    hidden_size=16,
    intermediate_size=12,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,  # GQA with several key/value heads: query head h reads h // 2
    max_position_embeddings=64,
)
CFG = Eagle3Config(LAYER, aux_layers=(0, 1, 2), draft_vocab_size=10)
V, N, D, HD = LAYER.vocab_size, CFG.draft_vocab_size, LAYER.hidden_size, LAYER.head_dim
H, HKV = LAYER.num_attention_heads, LAYER.num_key_value_heads
EPS = LAYER.rms_norm_eps
EXACT = 1e-10  # float64: two spellings of one computation differ in rounding only
MID = "midlayer."
SHAPES = {
    "fc.weight": (D, 3 * D),
    MID + "input_layernorm.weight": (D,),
    MID + "hidden_norm.weight": (D,),
    MID + "self_attn.q_proj.weight": (H * HD, 2 * D),
    MID + "self_attn.k_proj.weight": (HKV * HD, 2 * D),
    MID + "self_attn.v_proj.weight": (HKV * HD, 2 * D),
    MID + "self_attn.o_proj.weight": (D, H * HD),
    MID + "post_attention_layernorm.weight": (D,),
    MID + "mlp.gate_proj.weight": (12, D),
    MID + "mlp.up_proj.weight": (12, D),
    MID + "mlp.down_proj.weight": (D, 12),
    "norm.weight": (D,),
    "lm_head.weight": (N, D),
}


def make_case(B=2, T=5, seed=0):
    """(head, target, vocab, tokens [B, T+1], fused [B, T, 3d], target_logits [B, T, V],
    loss_mask [B, T]): random float64 inputs with peaked softmaxes, norm gains away from 1, a
    draft vocabulary of 10 of the 16 ids (so some target argmaxes fall outside it)."""
    rng = np.random.default_rng(seed)
    head = {}
    for name, shape in SHAPES.items():
        if name.endswith("norm.weight"):
            head[name] = 1.0 + 0.3 * rng.standard_normal(shape)
        else:
            head[name] = 0.6 * rng.standard_normal(shape)
    target = {"model.embed_tokens.weight": rng.standard_normal((V, D))}
    vocab = DraftVocab(np.sort(rng.choice(V, N, replace=False)), V)
    tokens = rng.integers(0, V, (B, T + 1))
    fused = rng.standard_normal((B, T, 3 * D))
    target_logits = 2.0 * rng.standard_normal((B, T, V))
    loss_mask = rng.random((B, T)) < 0.75
    return head, target, vocab, tokens, fused, target_logits, loss_mask


# ---------------------------------------------------------------------------- the oracle


def rms(x, weight):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + EPS) * weight


def rope(x, positions):
    """Rotate-half RoPE: x [..., S, hd] at integer positions [S]."""
    half = HD // 2
    angles = positions[:, None] * LAYER.rope_theta ** (-np.arange(half) / half)  # [S, hd/2]
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def masked_attention(q, k, v, mask):
    """q [B, H, T, hd], k, v [B, Hkv, S, hd], mask bool [T, S] -> [B, H, T, hd]; query head h
    reads key/value head h // (H / Hkv)."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.where(mask, q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (probs / probs.sum(axis=-1, keepdims=True)) @ v


def heads(x, count):
    """[B, T, count * hd] -> [B, count, T, hd]."""
    return np.swapaxes(x.reshape(*x.shape[:2], count, HD), 1, 2)


def qkv(head, embedded, feature, positions):
    """The layer's rotated queries, keys and values from (e, x) [B, T, d] at positions [T]."""
    n = np.concatenate(
        [
            rms(embedded, head[MID + "input_layernorm.weight"]),
            rms(feature, head[MID + "hidden_norm.weight"]),
        ],
        axis=-1,
    )  # [B, T, 2d]
    q = heads(n @ head[MID + "self_attn.q_proj.weight"].T, H)
    k = heads(n @ head[MID + "self_attn.k_proj.weight"].T, HKV)
    v = heads(n @ head[MID + "self_attn.v_proj.weight"].T, HKV)
    return rope(q, positions), rope(k, positions), v


def after_attention(head, feature, a):
    """(out [B, T, d], logits [B, T, N]) from the attention's output a [B, H, T, hd] and the
    residual, the un-normed feature x."""
    merged = np.swapaxes(a, 1, 2).reshape(*feature.shape[:2], -1)  # [B, T, H hd]
    h = feature + merged @ head[MID + "self_attn.o_proj.weight"].T
    n = rms(h, head[MID + "post_attention_layernorm.weight"])
    gate, up = n @ head[MID + "mlp.gate_proj.weight"].T, n @ head[MID + "mlp.up_proj.weight"].T
    out = h + (gate / (1.0 + np.exp(-gate)) * up) @ head[MID + "mlp.down_proj.weight"].T
    return out, rms(out, head["norm.weight"]) @ head["lm_head.weight"].T


def ttt_oracle(head, target, tokens, fused, steps, variant=None):
    """Per-step logits [B, T, N] of the unroll, spelled out with the explicit [T, (s+1)T] mask.

    variant names a known mistake to reproduce instead (the tests use them to say which one a
    wrong result matches): "no_token_shift", "no_feedback", "no_pe_shift", "old_mask",
    "no_diagonal", "full_rows", "own_step_only"."""
    B, T = fused.shape[:2]
    embed = target["model.embed_tokens.weight"]
    chain = np.concatenate([tokens, np.zeros((B, steps - 1), dtype=tokens.dtype)], axis=1)
    index = np.arange(T)
    causal = index[None, :] <= index[:, None]  # [T, T]
    real = fused @ head["fc.weight"].T  # g_t [B, T, d]
    feature, keys, values, logits = real, [], [], []
    for step in range(steps):
        read = chain[:, 1 : 1 + T] if variant == "no_token_shift" else chain[:, 1 + step :][:, :T]
        positions = index if variant == "no_pe_shift" else index + step
        q, k, v = qkv(head, embed[read], feature, positions)
        keys, values = keys + [k], values + [v]  # steps 0 .. step
        first = causal
        if variant == "old_mask":
            first = causal & (index[None, :] <= index[:, None] - step)
        later = {"no_diagonal": np.zeros_like(causal), "full_rows": causal}.get(
            variant, np.eye(T, dtype=bool)
        )
        mask = np.concatenate([first] + [later] * step, axis=1)  # [T, (step+1)T]
        if variant == "own_step_only":
            mask = np.concatenate([np.zeros_like(causal)] * step + [causal], axis=1)
        a = masked_attention(q, np.concatenate(keys, axis=2), np.concatenate(values, axis=2), mask)
        out, step_logits = after_attention(head, feature, a)
        logits.append(step_logits)
        feature = real if variant == "no_feedback" else out
    return logits


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def loss_oracle(step_logits, vocab, target_logits, loss_mask, step_weight, variant=None):
    """(total, per-step losses) written as loops: index t at step s is scored against row t + s
    of the target, over the draft ids, where loss_mask[t + s] holds and the target's argmax is a
    draft id; each step's sum is divided by all B * T positions and weighted step_weight^s.

    variant names a known mistake to reproduce instead: "labels_not_shifted",
    "mask_not_shifted", "nothing_shifted", "mean_over_counted", "labels_over_all_ids",
    "weights_from_1" (step_weight^(s+1))."""
    B, T = loss_mask.shape
    ids = list(vocab.ids)
    per_step = []
    for logits in step_logits:
        s, total, counted = len(per_step), 0.0, 0
        for b in range(B):
            for t in range(T):
                label_row = t if variant in ("labels_not_shifted", "nothing_shifted") else t + s
                mask_row = t if variant in ("mask_not_shifted", "nothing_shifted") else t + s
                if label_row >= T or mask_row >= T:
                    continue  # drafts past the window: no label
                row = target_logits[b, mask_row]
                if not (loss_mask[b, mask_row] and int(row.argmax()) in ids):
                    continue
                counted += 1
                label = target_logits[b, label_row]
                if variant == "labels_over_all_ids":
                    p = np.exp(log_softmax(label))[ids]
                else:
                    p = np.exp(log_softmax(label[ids]))
                total -= np.sum(p * log_softmax(logits[b, t]))
        per_step.append(
            float(total / (max(counted, 1) if variant == "mean_over_counted" else B * T))
        )
    first = 1 if variant == "weights_from_1" else 0
    return float(sum(step_weight ** (s + first) * x for s, x in enumerate(per_step))), per_step


LOSS_HINTS = {
    "labels_not_shifted": "index t at step s drafts position t + s: score it against row t + s "
    "of the target (shift the labels with the step)",
    "mask_not_shifted": "the loss mask must move with the labels: index t at step s counts iff "
    "row t + s counts",
    "nothing_shifted": "no shift between steps: at step s, index t's label and loss mask are "
    "those of row t + s",
    "mean_over_counted": "divide each step's sum by all B * T positions, not by the number of "
    "counted ones (the official mean)",
    "labels_over_all_ids": "the label is softmax over the draft ids only (target_logits[..., "
    "vocab.ids], renormalised), not the full softmax restricted to them",
    "weights_from_1": "step s is weighted step_weight**s: step 0 has weight 1",
}


def loss_hint(got_per_step, got_total, args, step_logits, step_weight):
    """Which known mistake (total, per-step losses) reproduce, as a hint; else the rule."""
    vocab, target_logits, loss_mask = args[3], args[6], args[7]
    for variant, hint in LOSS_HINTS.items():
        total, per_step = loss_oracle(
            step_logits, vocab, target_logits, loss_mask, step_weight, variant
        )
        same_steps = np.allclose(got_per_step, per_step, rtol=1e-9, atol=1e-12)
        if same_steps and np.isclose(got_total, total, rtol=1e-9, atol=1e-12):
            return hint
    return (
        "loss_s = -sum over counted (b, t) of p_{t+s} . log q_t / (B T), with p = softmax of "
        "target_logits[t + s] over the draft ids; (b, t) counts iff loss_mask[t + s] holds and "
        "the target's argmax at row t + s is a draft id; loss = sum_s step_weight**s * loss_s"
    )


GRADIENT_HINTS = {
    "fc.weight": "fc's gradient comes from step 0's feature only (dnext after the last loop)",
    "lm_head.weight": "the readout's backward (soft-CE's dlogits, scaled as in your loss)",
    "norm.weight": "the readout's backward (soft-CE's dlogits, scaled as in your loss)",
}


def check_gradients(args, steps, step_weight=0.7, per_tensor=3, seed=0):
    """{name: (max |yours - centred differences|, scale)} for `per_tensor` random entries of
    every head tensor."""
    head = args[0]
    _, _, grads = ttt_loss(*args, steps=steps, step_weight=step_weight)
    missing = sorted(set(SHAPES) - set(grads))
    assert not missing, f"ttt_loss returned no gradient for {missing}; return one per head tensor"
    rng = np.random.default_rng(seed)
    errors = {}
    for name in SHAPES:
        assert grads[name].shape == head[name].shape, (
            f"the gradient of {name} has shape {grads[name].shape}, the tensor {head[name].shape}"
        )
        entries = rng.choice(head[name].size, size=min(per_tensor, head[name].size), replace=False)
        want = numerical_gradient(
            lambda: ttt_loss(*args, steps=steps, step_weight=step_weight)[0],
            head[name],
            entries,
            eps=1e-5,
        )
        got = grads[name].reshape(-1)[entries]
        errors[name] = (float(np.abs(got - want).max()), float(np.abs(want).max()))
    return errors


def gradient_failures(errors):
    return {name: e for name, (e, scale) in errors.items() if e > 1e-6 * max(1.0, scale)}


def describe(bad):
    """'the gradients of 3 tensors (worst fc.weight: 1.2e-01, ...)'."""
    worst = sorted(bad, key=bad.get, reverse=True)
    shown = ", ".join(f"{name}: {bad[name]:.1e}" for name in worst[:3])
    return f"the gradients of {len(bad)} tensor(s) ({shown}{', ...' if len(bad) > 3 else ''})"


def attention_hint(got, q, keys, values, causal):
    """Which known mistake the attention output `got` reproduces, as a hint; else the rule."""
    T, later = causal.shape[0], len(keys) - 1
    wrong_masks = {
        "your step-s query ignores the later steps' keys; it must also see, of each step 1..s, "
        "the key at its own index t (the diagonal), in the same softmax": [causal]
        + [np.zeros_like(causal)] * later,
        "a later step's key is seen only at the query's own index t (the diagonal), not at "
        "every index <= t": [causal] * (later + 1),
        "the query at index t sees the step-0 keys at indices <= t only (causal_block)": [
            np.ones_like(causal)
        ]
        + [np.eye(T, dtype=bool)] * later,
    }
    k, v = np.concatenate(keys, axis=2), np.concatenate(values, axis=2)
    for hint, blocks in wrong_masks.items():
        if np.abs(got - masked_attention(q, k, v, np.concatenate(blocks, axis=1))).max() < 1e-9:
            return hint
    return (
        "the causal step-0 scores and the s diagonal scores (q_t . k_j[t], one per later "
        "step, scaled by 1/sqrt(hd)) share ONE softmax; out = P_causal V_0 + sum_j P_j[t] V_j[t]"
    )


# ---------------------------------------------------------------------------- the tests


@pytest.mark.points(1)
def test_diagonal_attention_with_only_step_0_is_causal_attention():
    """With one step (s = 0) the TTT attention is ordinary causal attention."""
    rng = np.random.default_rng(1)
    T = 5
    q = 1.5 * rng.standard_normal((2, 2, T, 4))
    k, v = rng.standard_normal((2, 2, 1, T, 4))
    causal = np.tril(np.ones((T, T), dtype=bool))
    got, _ = diagonal_attention_forward(q, [k], [v], causal)
    want = masked_attention(q, k, v, causal)
    error = np.abs(got - want).max()
    assert error < EXACT, (
        f"diagonal_attention_forward with keys=[k0] differs from causal attention by {error:.2e}: "
        "with only step 0 the query at index t sees the step-0 keys at indices <= t (the causal "
        "block), scaled by 1/sqrt(hd), through one softmax"
    )


@pytest.mark.points(2)
def test_diagonal_attention_equals_the_explicit_mask():
    """Step s = 2: masked attention over [K_0 | K_1 | K_2] with the mask [causal | I | I]."""
    rng = np.random.default_rng(2)
    T, steps = 5, 2
    q = 1.5 * rng.standard_normal((2, 2, T, 4))
    keys = list(1.5 * rng.standard_normal((steps + 1, 2, 2, T, 4)))
    values = list(rng.standard_normal((steps + 1, 2, 2, T, 4)))
    causal = np.tril(np.ones((T, T), dtype=bool))
    mask = np.concatenate([causal] + [np.eye(T, dtype=bool)] * steps, axis=1)  # [T, 3T]
    want = masked_attention(q, np.concatenate(keys, axis=2), np.concatenate(values, axis=2), mask)
    got, _ = diagonal_attention_forward(q, keys, values, causal)
    assert got.shape == want.shape, f"the output has shape {got.shape}, expected {want.shape}"
    error = np.abs(got - want).max()
    if error >= EXACT:
        hint = attention_hint(got, q, keys, values, causal)
        raise AssertionError(
            f"the step-2 attention differs from [causal | I | I] by {error:.2e}: {hint}"
        )


@pytest.mark.points(2)
def test_step_0_is_the_head_on_the_target_features():
    """_ttt_forward's step 0 reads fc(fused_t) and x_{t+1} at position t, causally."""
    head, target, _, tokens, fused, _, _ = make_case()
    got, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=1)
    assert isinstance(got, list) and len(got) == 1, (
        f"_ttt_forward(..., steps=1) must return a list of 1 logits array, got {type(got)}"
    )
    want = ttt_oracle(head, target, tokens, fused, steps=1)[0]
    assert got[0].shape == want.shape, (
        f"step 0's logits have shape {got[0].shape}, expected {want.shape}"
    )
    error = np.abs(got[0] - want).max()
    assert error < EXACT, (
        f"step 0's logits differ from the head run on the real features by {error:.2e}: step 0 "
        "reads the feature fc(fused_t) and the token x_{t+1} (tokens[:, 1:T+1]) at RoPE position "
        "t, and attends causally"
    )


@pytest.mark.points(2)
def test_loss_of_one_step():
    """steps = 1: soft CE against row t over the draft ids, counted positions, / (B * T)."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case()
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    loss, parts, _ = ttt_loss(*args, steps=1)
    step_logits, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=1)  # yours
    want, _ = loss_oracle(step_logits, vocab, target_logits, loss_mask, 0.8)
    got_steps = list(parts["step_loss"])
    assert len(got_steps) == 1, f"parts['step_loss'] has {len(got_steps)} entries for steps=1"
    hint = loss_hint(got_steps, loss, args, step_logits, 0.8)
    assert abs(loss - want) < EXACT, f"ttt_loss(steps=1) = {loss!r}, expected {want!r}: {hint}"
    assert got_steps == pytest.approx([want], rel=1e-12), (
        f"parts['step_loss'] = {got_steps}, expected [{want}] (each step's loss, unweighted)"
    )


@pytest.mark.points(2)
def test_gradients_of_one_step():
    """Every head tensor's gradient, steps = 1, against centred differences in float64."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=3)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    bad = gradient_failures(check_gradients(args, steps=1))
    if bad:
        name = max(bad, key=bad.get)
        hint = GRADIENT_HINTS.get(name, "check the attention and the layer's backward")
        raise AssertionError(f"{describe(bad)} disagree with centred differences; {hint}")
