"""Hidden tests for the eagle3_ttt assignment: several steps, the drafting rollout, edge cases.

The oracles are the public tests' (the unroll with the explicit [T, (s+1)T] mask, the loss as
loops, centred finite differences), plus the property TTT exists for: step s at index t computes
exactly what the drafter computes s tokens after real position t, with a cache over the real
context and its own outputs fed back one at a time (written out here, not taken from your file).
When a result is wrong, the tests try the known mistakes on the oracle and name the one it matches.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from test_public import (
    CFG,
    EXACT,
    GRADIENT_HINTS,
    after_attention,
    attention_hint,
    check_gradients,
    describe,
    gradient_failures,
    log_softmax,
    loss_hint,
    loss_oracle,
    make_case,
    masked_attention,
    qkv,
    ttt_oracle,
)

from minieagle.heads.eagle3 import (
    _ttt_forward,
    diagonal_attention_backward,
    diagonal_attention_forward,
    ttt_loss,
)

FORWARD_HINTS = {
    "no_token_shift": "step s must read the token x_{t+1+s} (the chain moves on one token per "
    "step); yours reads x_{t+1} at every step",
    "no_feedback": "step s >= 1 must read its own output at index t from step s - 1 as its "
    "feature (fc skipped), not fc(fused_t) again",
    "no_pe_shift": "step s sits at RoPE position t + s, not t (the PE shift)",
    "old_mask": "step s sees every step-0 key at indices <= t; you also masked the causal "
    "block's offset diagonals (the official code's bug before 2025-09)",
    "no_diagonal": "step s must also see its own earlier steps 1..s at index t (the diagonal), "
    "not the step-0 keys only",
    "full_rows": "an earlier step's keys are seen at index t only (the diagonal), not at every "
    "index <= t (the full row)",
    "own_step_only": "step s must see the step-0 keys (the real context) plus its own earlier "
    "steps at index t, not its own step's keys only",
}


def _first_difference(got, want):
    """(step, index, error) of the worst mismatch of the first wrong step."""
    for s, (g, w) in enumerate(zip(got, want, strict=False)):
        error = np.abs(g - w).max(axis=(0, 2))  # [T]
        if error.max() >= EXACT:
            return s, int(error.argmax()), float(error.max())
    return None


def _forward_hint(got, head, target, tokens, fused, steps):
    for variant, hint in FORWARD_HINTS.items():
        other = ttt_oracle(head, target, tokens, fused, steps, variant)
        if all(np.abs(g - w).max() < 1e-9 for g, w in zip(got, other, strict=False)):
            return hint
    return (
        "check what step s reads (token x_{t+1+s}, its own previous output, RoPE position t + s) "
        "and what it sees (the step-0 keys at indices <= t, then index t of each step 1..s)"
    )


def _assert_unroll(got, head, target, tokens, fused, steps):
    want = ttt_oracle(head, target, tokens, fused, steps)
    assert isinstance(got, list) and len(got) == steps, (
        f"_ttt_forward(..., steps={steps}) must return a list of {steps} logits arrays"
    )
    for s, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g.shape == w.shape, f"step {s}'s logits have shape {g.shape}, expected {w.shape}"
    bad = _first_difference(got, want)
    if bad is not None:
        s, t, error = bad
        hint = _forward_hint(got, head, target, tokens, fused, steps)
        raise AssertionError(f"step {s}'s logits at index {t} are off by {error:.2e}: {hint}")


# ---------------------------------------------------------------------------- the attention


@pytest.mark.points(2)
@settings(max_examples=6, deadline=None, derandomize=True, database=None, phases=[Phase.generate])
@given(
    T=st.integers(1, 5),
    steps=st.integers(0, 3),
    heads=st.sampled_from([(2, 2), (4, 2), (4, 1)]),
)
def test_diagonal_attention_equals_the_explicit_mask_for_any_shape(T, steps, heads):
    """Any window, step and grouping of query heads over key/value heads."""
    H, Hkv = heads
    rng = np.random.default_rng(T * 100 + steps * 10 + H + Hkv)
    q = 1.5 * rng.standard_normal((2, H, T, 4))
    keys = list(1.5 * rng.standard_normal((steps + 1, 2, Hkv, T, 4)))
    values = list(rng.standard_normal((steps + 1, 2, Hkv, T, 4)))
    causal = np.tril(np.ones((T, T), dtype=bool))
    mask = np.concatenate([causal] + [np.eye(T, dtype=bool)] * steps, axis=1)
    want = masked_attention(q, np.concatenate(keys, axis=2), np.concatenate(values, axis=2), mask)
    got, _ = diagonal_attention_forward(q, keys, values, causal)
    assert got.shape == want.shape, f"the output has shape {got.shape}, expected {want.shape}"
    error = np.abs(got - want).max()
    assert error < EXACT, (
        f"with T={T}, s={steps}, H={H}, Hkv={Hkv} the attention differs from the mask "
        f"[causal | I x {steps}] by {error:.2e}: "
        + ("query head h reads key/value head h // (H // Hkv); " if H != Hkv else "")
        + attention_hint(got, q, keys, values, causal)
    )


@pytest.mark.points(1)
def test_a_later_step_is_seen_only_at_its_own_index():
    """Changing step 1's key/value at index u moves only the query at u; a step-0 key at u moves
    only the queries at indices >= u."""
    rng = np.random.default_rng(5)
    T, u = 5, 2
    q = rng.standard_normal((1, 4, T, 4))  # H = 4 query heads over Hkv = 2 key/value heads
    keys = list(rng.standard_normal((3, 1, 2, T, 4)))
    values = list(rng.standard_normal((3, 1, 2, T, 4)))
    causal = np.tril(np.ones((T, T), dtype=bool))
    base, _ = diagonal_attention_forward(q, keys, values, causal)
    for step in (0, 1, 2):
        moved_keys = [k.copy() for k in keys]
        moved_values = [v.copy() for v in values]
        moved_keys[step][:, :, u] += 1.0
        moved_values[step][:, :, u] += 1.0
        out, _ = diagonal_attention_forward(q, moved_keys, moved_values, causal)
        changed = np.abs(out - base).max(axis=(0, 1, 3)) > 1e-12  # [T]
        want = np.arange(T) >= u if step == 0 else np.arange(T) == u
        assert np.array_equal(changed, want), (
            f"changing step {step}'s key and value at index {u} changed the outputs at indices "
            f"{np.flatnonzero(changed).tolist()}, expected {np.flatnonzero(want).tolist()}: "
            + (
                "a step-0 key at index u is seen by the queries at indices >= u (causal)"
                if step == 0
                else "a later step's key at index u is seen only by the query at index u "
                "(the diagonal)"
            )
        )


@pytest.mark.points(2)
def test_diagonal_attention_gradients():
    """dq, every step's dk and dv against centred differences of sum(out * dout)."""
    rng = np.random.default_rng(6)
    T, steps = 4, 2
    q = 1.5 * rng.standard_normal((2, 4, T, 4))
    keys = list(1.5 * rng.standard_normal((steps + 1, 2, 2, T, 4)))
    values = list(rng.standard_normal((steps + 1, 2, 2, T, 4)))
    causal = np.tril(np.ones((T, T), dtype=bool))
    out, cache = diagonal_attention_forward(q, keys, values, causal)
    dout = rng.standard_normal(out.shape)
    dq, dkeys, dvalues = diagonal_attention_backward(dout, cache)
    assert len(dkeys) == len(dvalues) == steps + 1, (
        f"diagonal_attention_backward returned {len(dkeys)} key and {len(dvalues)} value "
        f"gradients for {steps + 1} steps; return one per step"
    )
    inputs = {"q": (q, dq)}
    inputs.update(
        {f"keys[{j}]": (k, dk) for j, (k, dk) in enumerate(zip(keys, dkeys, strict=False))}
    )
    inputs.update(
        {f"values[{j}]": (v, dv) for j, (v, dv) in enumerate(zip(values, dvalues, strict=False))}
    )
    eps = 1e-6
    for name, (x, grad) in inputs.items():
        assert grad.shape == x.shape, f"d{name} has shape {grad.shape}, expected {x.shape}"
        flat = x.reshape(-1)
        for i in rng.choice(x.size, size=6, replace=False):
            keep = flat[i]
            flat[i] = keep + eps
            up = np.sum(diagonal_attention_forward(q, keys, values, causal)[0] * dout)
            flat[i] = keep - eps
            down = np.sum(diagonal_attention_forward(q, keys, values, causal)[0] * dout)
            flat[i] = keep
            want, got = (up - down) / (2 * eps), grad.reshape(-1)[i]
            assert abs(got - want) < 1e-7 * max(1.0, abs(want)), (
                f"d{name} disagrees with centred differences ({got:.6f} vs {want:.6f}): the "
                "softmax's backward runs over the causal and the diagonal scores together; "
                "dq gets sum_j dscore_j k_j[t], dk_j[t] = dscore_j q_t (summed over the query "
                "heads of its group), dv_j[t] = P_j[t] dout_t, all scores scaled by 1/sqrt(hd)"
            )


# ---------------------------------------------------------------------------- the unroll


@pytest.mark.points(3)
def test_unroll_matches_the_explicit_mask_oracle():
    """Three steps: each step's logits equal the per-step loop with [causal | I | ... | I]."""
    head, target, _, tokens, fused, _, _ = make_case(seed=1)
    got, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=3)
    _assert_unroll(got, head, target, tokens, fused, 3)


def _rollout(head, target, tokens, fused, steps):
    """{(t, s): logits [B, N]} of the drafter s tokens after real position t: the real pairs
    (x_{j+1}, g_j) for j <= t, then its own outputs fed back with x_{t+1+s}, one position each,
    causal attention over the whole sequence."""
    embed = target["model.embed_tokens.weight"]
    real = fused @ head["fc.weight"].T  # [B, T, d]
    B, T = fused.shape[:2]
    out = {}
    for t in range(T):
        embedded, feature = embed[tokens[:, 1 : t + 2]], real[:, : t + 1]
        for s in range(min(steps, T - t)):
            length = t + 1 + s
            q, k, v = qkv(head, embedded, feature, np.arange(length))
            causal = np.tril(np.ones((length, length), dtype=bool))
            a = masked_attention(q, k, v, causal)
            hidden, logits = after_attention(head, feature, a)
            out[t, s] = logits[:, -1]
            if s + 1 < min(steps, T - t):
                next_token = tokens[:, t + 2 + s : t + 3 + s]  # x_{t+1+(s+1)}
                embedded = np.concatenate([embedded, embed[next_token]], axis=1)
                feature = np.concatenate([feature, hidden[:, -1:]], axis=1)
    return out


@pytest.mark.points(2)
def test_step_s_is_what_the_drafter_computes_s_tokens_ahead():
    """TTT is inference: step s at index t equals the drafter's logits at position t + s."""
    head, target, _, tokens, fused, _, _ = make_case(seed=2)
    steps = 4
    got, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=steps)
    for (t, s), want in _rollout(head, target, tokens, fused, steps).items():
        error = np.abs(got[s][:, t] - want).max()
        if error >= EXACT:
            hint = _forward_hint(got, head, target, tokens, fused, steps)
            raise AssertionError(
                f"step {s} at index {t} differs by {error:.2e} from the drafter's logits {s} "
                f"tokens after real position {t}: {hint}"
            )


@pytest.mark.points(1)
def test_the_historical_bugs_stay_reproducible():
    """old_diagonal_mask=True and pe_shift=False build the two historical bugs on purpose."""
    head, target, _, tokens, fused, _, _ = make_case(seed=4)
    plain, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=3)
    right = _first_difference(plain, ttt_oracle(head, target, tokens, fused, 3)) is None
    for flag, variant in (
        ({"old_diagonal_mask": True}, "old_mask"),
        ({"pe_shift": False}, "no_pe_shift"),
    ):
        got, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=3, **flag)
        want = ttt_oracle(head, target, tokens, fused, 3, variant)
        error = max(np.abs(g - w).max() for g, w in zip(got, want, strict=False))
        assert error < EXACT, (
            f"_ttt_forward(..., {flag}) is off by {error:.2e} from the historical bug it builds: "
            + (
                "pass old_diagonal_mask to _causal_block(T, s, old_diagonal_mask, ...), and with "
                "pe_shift=False keep RoPE position t at every step"
                if right
                else "your unroll is wrong without the flag too; fix that first (see "
                "test_unroll_matches_the_explicit_mask_oracle)"
            )
        )


@pytest.mark.points(1)
def test_both_attentions_give_the_same_loss_and_gradients():
    """attention='explicit' (the library's masked attention) through your unroll and backward."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=5)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    fast = ttt_loss(*args, steps=3, attention="diagonal")
    slow = ttt_loss(*args, steps=3, attention="explicit")
    assert abs(fast[0] - slow[0]) < EXACT, (
        f"the loss is {fast[0]!r} with attention='diagonal' and {slow[0]!r} with 'explicit': "
        "either diagonal_attention_forward is not the masked attention [causal | I | ...] (see "
        "the attention tests) or the unroll does not attend with _ATTENTION_PAIRS[attention]"
    )
    for name, grad in fast[2].items():
        error = np.abs(grad - slow[2][name]).max()
        assert error < EXACT, (
            f"the gradient of {name} differs by {error:.2e} between the diagonal and the "
            "explicit attention: use the backward of the same pair, and give each step's keys "
            "and values the gradients of every later query that saw them (earlier steps' keys)"
        )


# ---------------------------------------------------------------------------- the loss


@pytest.mark.points(3)
def test_loss_of_several_steps():
    """Each step's loss: index t at step s against row t + s, with row t + s's mask."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=6)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    loss, parts, _ = ttt_loss(*args, steps=4)
    step_logits, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=4)  # yours
    _, want = loss_oracle(step_logits, vocab, target_logits, loss_mask, 0.8)
    got = list(parts["step_loss"])
    assert len(got) == 4, f"parts['step_loss'] has {len(got)} entries for steps=4"
    for s, (g, w) in enumerate(zip(got, want, strict=False)):
        if abs(g - w) >= EXACT:
            hint = loss_hint(got, loss, args, step_logits, 0.8)
            raise AssertionError(f"step {s}'s loss is {g!r}, expected {w!r}: {hint}")


@pytest.mark.points(1)
def test_steps_are_weighted_by_powers_of_step_weight():
    """loss = sum_s step_weight^s loss_s, here with step_weight = 0.5."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=7)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    loss, parts, _ = ttt_loss(*args, steps=3, step_weight=0.5)
    step_logits, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=3)
    want, _ = loss_oracle(step_logits, vocab, target_logits, loss_mask, 0.5)
    if abs(loss - want) >= EXACT:
        hint = loss_hint(list(parts["step_loss"]), loss, args, step_logits, 0.5)
        raise AssertionError(f"ttt_loss(step_weight=0.5) = {loss!r}, expected {want!r}: {hint}")


@pytest.mark.points(2)
def test_top1_and_acceptance_per_step():
    """parts['top1'] and parts['accept'] at row t + s, over the positions loss_mask requests."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=8)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    _, parts, _ = ttt_loss(*args, steps=3)
    step_logits, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=3)
    B, T = loss_mask.shape
    for s, logits in enumerate(step_logits):
        agree = accept = requested = 0.0
        for b in range(B):
            for t in range(T - s):
                if not loss_mask[b, t + s]:
                    continue
                row = target_logits[b, t + s]
                requested += 1
                agree += vocab.ids[logits[b, t].argmax()] == row.argmax()
                p = np.exp(log_softmax(row))[vocab.ids]  # the target's, over all V
                accept += np.minimum(np.exp(log_softmax(logits[b, t])), p).sum()
        top1, acceptance = agree / max(requested, 1), accept / max(requested, 1)
        assert abs(parts["top1"][s] - top1) < 1e-12, (
            f"parts['top1'][{s}] = {parts['top1'][s]}, expected {top1}: the share of the "
            "positions loss_mask requests at row t + s where the draft's argmax, mapped to a "
            "target id (vocab.ids), is the target's argmax over all V"
        )
        assert abs(parts["accept"][s] - acceptance) < 1e-12, (
            f"parts['accept'][{s}] = {parts['accept'][s]}, expected {acceptance}: "
            "sum_v min(q_v, p_v), q the draft's softmax over the draft ids, p the target's "
            "softmax over all V at those ids (row t + s), averaged like top1"
        )


@pytest.mark.points(3)
def test_gradients_over_several_steps():
    """Every head tensor's gradient through three unrolled steps, by centred differences."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=9)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    bad = gradient_failures(check_gradients(args, steps=3, per_tensor=2))
    if bad:
        one_step = gradient_failures(check_gradients(args, steps=1, per_tensor=2))
        name = max(bad, key=bad.get)
        hint = (
            f"wrong already for one step: {GRADIENT_HINTS.get(name, 'check the layer backward')}"
            if one_step
            else "right for one step, wrong over three: walk the steps last to first; step s's "
            "output also gets step s+1's feature gradient (hidden_norm and residual), and each "
            "step's keys/values collect the gradients of every later query (earlier steps' keys)"
        )
        raise AssertionError(f"{describe(bad)} disagree with centred differences; {hint}")


# ---------------------------------------------------------------------------- edge cases


@pytest.mark.points(1)
def test_more_steps_than_positions():
    """steps = T + 2 runs; more steps leave the earlier ones unchanged; past the window, zero."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(B=1, T=3, seed=10)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    short, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=2)
    long, _ = _ttt_forward(head, CFG, target, tokens, fused, steps=5)
    assert len(long) == 5 and all(x.shape == short[0].shape for x in long), (
        "_ttt_forward(..., steps=5) on a window of T=3 must return 5 logits arrays [B, T, N]: "
        "pad the token chain with id 0 past x_T"
    )
    error = max(np.abs(a - b).max() for a, b in zip(short, long, strict=False))
    assert error == 0.0, (
        f"steps 0 and 1 change by {error:.2e} when the unroll runs 5 steps instead of 2: a step "
        "reads nothing of the steps after it"
    )
    loss, parts, _ = ttt_loss(*args, steps=5)
    _, want = loss_oracle(long, vocab, target_logits, loss_mask, 0.8)
    got = [float(x) for x in parts["step_loss"]]
    if got != pytest.approx(want, rel=1e-12, abs=1e-15):
        hint = loss_hint(got, loss, args, long, 0.8)
        raise AssertionError(
            f"with steps=5 > T=3 the per-step losses are {got}, expected {want} (steps 3 and 4 "
            f"count nowhere): {hint}"
        )


@pytest.mark.points(1)
def test_nothing_counted_gives_zero_loss_and_zero_gradients():
    """loss_mask all False: loss 0, every gradient 0 (the feature chain has no other loss)."""
    head, target, vocab, tokens, fused, target_logits, loss_mask = make_case(seed=11)
    loss_mask = np.zeros_like(loss_mask)
    args = (head, CFG, target, vocab, tokens, fused, target_logits, loss_mask)
    loss, parts, grads = ttt_loss(*args, steps=3)
    assert loss == 0.0 and list(parts["step_loss"]) == [0.0, 0.0, 0.0], (
        f"with no position counted the loss is {loss!r} (steps {parts['step_loss']}), expected "
        "0: a position counts only where loss_mask holds"
    )
    worst = max(float(np.abs(g).max()) for g in grads.values())
    assert worst == 0.0, f"with no position counted a gradient reaches {worst:.2e}, expected 0"
