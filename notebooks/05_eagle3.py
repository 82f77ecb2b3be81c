# %% [markdown]
# # 05 · EAGLE-3: fused features, training-time test, a reduced vocabulary
#
# EAGLE-3 (Li et al. 2025) keeps EAGLE-2's dynamic tree and verifier and changes the head and how
# it is trained. The EAGLE-1 head regresses the target's top feature and reads tokens through the
# target's LM head; the EAGLE-3 head
#
# - reads a **fused** feature `g = fc([l, m, h])`, the residual streams entering a low, a middle
#   and a high target layer (for our 12-layer target: layers 2, 6 and 9), not the top one;
# - predicts the **token** directly with its own LM head over a **reduced draft vocabulary** of the
#   N most frequent training tokens (`d2t` maps draft ids to target ids), with no feature loss;
# - is trained by **training-time test** (TTT): unrolled on its own outputs, as it is used when
#   drafting several tokens ahead.
#
# We look at the three streams and the fusion, check the draft layer against its equations, build
# the draft vocabulary, unroll TTT once and check it against inference, and compare EAGLE-3 with
# EAGLE-2 on the same prompts. docs/eagle3.md maps every equation to the code.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from minieagle import layers, model
from minieagle.bench import heldout_prompts, prompt_set
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS, Eagle2Drafter
from minieagle.generate import GenerationResult, generate
from minieagle.heads import eagle3
from minieagle.train import token_stream
from minieagle.train_eagle import (
    draft_vocab_size_for,
    load_or_train_eagle3_head,
    load_or_train_head,
)

FAST = os.environ.get("MINIEAGLE_FAST") == "1"  # the test suite sets it: shorter loops
target_dir, eagle1_dir, eagle3_dir = (
    DEFAULT_MODEL,
    PRETRAINED / "small-eagle1",
    PRETRAINED / "small-eagle3",
)
params, config, tokenizer = load_checkpoint(target_dir, dtype=np.float64)
# No shipped EAGLE-3 head (yet)? A small stand-in is trained, much weaker than the real one.
shipped = (eagle3_dir / "model.safetensors").is_file()
standin_steps = 100 if FAST else 1000
head, head_cfg, vocab = load_or_train_eagle3_head(
    eagle3_dir, target_dir, steps=standin_steps, max_train_chars=40_000 if FAST else 0
)
EAGLE3 = "EAGLE-3" if shipped else f"EAGLE-3 (stand-in, {standin_steps} steps)"
d, L, V, N = config.hidden_size, config.num_hidden_layers, config.vocab_size, vocab.size
low, mid, high = head_cfg.aux_layers
n_head = sum(w.size for w in head.values())
print(f"{EAGLE3} head: fuses the inputs of layers {head_cfg.aux_layers} of {L}, "
      f"draft vocabulary {N} of {V}, {n_head:,} parameters")  # fmt: skip
show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n


# %% [markdown]
# ## 1. Fusion: three streams of the target, one feature
#
# `model.forward(..., output_hidden=(2, 6, 9))` returns the residual streams **entering** layers 2,
# 6 and 9 (HF's `hidden_states[i]`; the defaults `(2, L//2, L−3)` of the official code). They are
# taken before the final norm and grow along the depth, so `fc` (3d → d, no bias) sees inputs of
# different scales; the head's `hidden_norm` rescales the fused result.

# %%
text = "def read_config(path):\n    with open(path) as f:\n        return json.load(f)\n"
ids = np.asarray(tokenizer.encode(text, add_bos=True))  # [T]
logits, hidden, _ = model.forward(params, config, ids, output_hidden=(low, mid, high, L, "final"))
fused = eagle3.fuse_features(hidden, head_cfg.aux_layers)  # 3 x [T, d] -> [T, 3d], low first
g = fused @ head["fc.weight"].T  # [T, 3d] -> [T, d]
assert np.array_equal(fused[:, d : 2 * d], hidden[mid]) and g.shape == (len(ids), d)
print(f"fc.weight {head['fc.weight'].shape}: [l, m, h] {fused.shape} -> g {g.shape}")

plt.figure(figsize=(11, 3.2))
for key, label in ((low, "low l"), (mid, "mid m"), (high, "high h"), (L, "top (not fused)")):
    plt.plot(np.linalg.norm(hidden[key], axis=-1), marker=".", label=f"{label}: stream {key}")
plt.plot(np.linalg.norm(g, axis=-1), color="black", ls="--", label="fused g = fc([l, m, h])")
plt.xticks(np.arange(len(ids)), [show(t) for t in ids], rotation=90, fontsize=7)
plt.ylabel("‖stream‖ at each position")
plt.legend(fontsize=8, ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# **Why not the top feature alone?** The target's logits are `W · RMSNorm(h_top)` with `W` of
# shape `[V, d]` and rank d (V > d), so the top feature and the next-token logits determine each
# other: `RMSNorm(h_top) = W⁺ · logits`. Whatever the top feature knows about the token *after*
# next, it knows only through the next token's distribution; the layers below still hold more.
# Below: the exact inversion, then how much of each stream a linear function of the final feature
# explains (R² on held-out windows, fitted on other held-out windows). Lower streams keep a larger
# share that the next-token prediction does not determine.

# %%
W = model.lm_head_weight(params)  # [V, d], tied to the embedding in the small target
assert np.linalg.matrix_rank(W) == d
recovered = logits @ np.linalg.pinv(W).T  # [T, V] -> [T, d]
print(f"max |W⁺ logits − final feature| = {np.abs(recovered - hidden['final']).max():.1e}")
assert np.allclose(recovered, hidden["final"], rtol=0, atol=1e-8)

streams = (low, mid, high, L)
windows = np.asarray([prompt for _, prompt in heldout_prompts(tokenizer, 4 if FAST else 12, 97)])
fit_windows, test_windows = windows[0::2], windows[1::2]  # [B/2, 97] each, prose and code


def stream_features(batch):
    """{key: [B * T, d]} for the final feature and each stream in `streams`; batch [B, T]."""
    _, taps, _ = model.forward(params, config, batch, output_hidden=(*streams, "final"))
    return {key: value.reshape(-1, d) for key, value in taps.items()}


fit, test = stream_features(fit_windows), stream_features(test_windows)


def with_bias(x):
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)  # [n, d] -> [n, d + 1]


explained = {}
for key in streams:
    coef, *_ = np.linalg.lstsq(with_bias(fit["final"]), fit[key], rcond=None)  # [d + 1, d]
    residual = test[key] - with_bias(test["final"]) @ coef
    explained[key] = 1 - np.sum(residual**2) / np.sum((test[key] - test[key].mean(0)) ** 2)
    print(f"input of layer {key:2}: R² explained by the final feature = {explained[key]:.3f}")
assert explained[low] < explained[mid] < explained[high] < explained[L]

# %% [markdown]
# ## 2. The draft layer
#
# At position t the head reads `e = Embed(x_{t+1})` (the target's embedding, frozen) and the feature
# `x_t` (`g_t` at real positions, its own previous output `a` at drafted ones). Written out:
#
# ```
# n      = [RMSNorm_input(e), RMSNorm_hidden(x_t)]          # [T, 2d], embedding first
# q,k,v  = n W_qᵀ, n W_kᵀ, n W_vᵀ                          # 2d -> heads, RoPE on q and k
# h      = x_t + o_proj(softmax(q kᵀ/√hd + causal) v)       # residual: the UN-normed feature
# a      = h + down(silu(gate(RMSNorm_post(h))) · up(RMSNorm_post(h)))
# logits = lm_head(RMSNorm_norm(a))                        # [T, N]: the draft vocabulary
# ```
#
# Two things differ from a Llama layer: q/k/v read the 2d-wide concatenation of two separately
# normed streams (the paper's figure draws an fc 2d → d before attention; the code, SGLang and
# vLLM have none), and the residual adds the un-normed feature. Below, the same in NumPy, against
# `eagle3.head_forward`.

# %%
tokens_next = ids[1:]  # [T] x_{t+1}
features = fused[:-1]  # [T, 3d] g_t
out, draft_logits, _ = eagle3.head_forward(head, head_cfg, params, tokens_next, features)

w = {name.removeprefix("midlayer."): value for name, value in head.items()}
H, Hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
T = len(tokens_next)


def rms(x, weight):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + config.rms_norm_eps) * weight


def split_heads(y, count):
    return y.reshape(T, count, hd).transpose(1, 0, 2)  # [T, count * hd] -> [count, T, hd]


angles = np.arange(T)[:, None] / config.rope_theta ** (np.arange(0, hd, 2) / hd)  # [T, hd/2]
cos, sin = np.cos(np.tile(angles, 2)), np.sin(np.tile(angles, 2))  # [T, hd], rotate-half layout


def rope(y):
    return y * cos + np.concatenate([-y[..., hd // 2 :], y[..., : hd // 2]], axis=-1) * sin


e = params["model.embed_tokens.weight"][tokens_next]  # [T, d]
x = features @ w["fc.weight"].T  # [T, 3d] -> [T, d]
n = np.concatenate([rms(e, w["input_layernorm.weight"]), rms(x, w["hidden_norm.weight"])], -1)
q = rope(split_heads(n @ w["self_attn.q_proj.weight"].T, H))  # [H, T, hd]
k = rope(split_heads(n @ w["self_attn.k_proj.weight"].T, Hkv))  # [Hkv, T, hd]
v = split_heads(n @ w["self_attn.v_proj.weight"].T, Hkv)
k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)  # query head i: kv i // G
scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd)  # [H, T, T]
scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
p = np.exp(scores - scores.max(-1, keepdims=True))
attended = ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(T, H * hd)
h = x + attended @ w["self_attn.o_proj.weight"].T  # the residual is x, not its norm
n2 = rms(h, w["post_attention_layernorm.weight"])
gate, up = n2 @ w["mlp.gate_proj.weight"].T, n2 @ w["mlp.up_proj.weight"].T
a = h + (gate / (1 + np.exp(-gate)) * up) @ w["mlp.down_proj.weight"].T
logits_by_hand = rms(a, w["norm.weight"]) @ w["lm_head.weight"].T  # [T, N]
for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
    print(f"{name}: {w[f'self_attn.{name}.weight'].shape}")
print(f"|a − head_forward| = {np.abs(a - out).max():.1e}, "
      f"|logits − head_forward| = {np.abs(logits_by_hand - draft_logits).max():.1e}")  # fmt: skip
assert np.allclose(a, out, rtol=0, atol=1e-9)
assert np.allclose(logits_by_hand, draft_logits, rtol=0, atol=1e-9)

# The head predicts x_{t+2}: draft ids mapped to target ids (d2t), against the target's argmax.
guess = eagle3.draft_to_target(draft_logits.argmax(-1), vocab)  # [T] target ids
target_next = logits[1:].argmax(-1)  # [T] the target's prediction at t + 1, of x_{t+2}
print(f"the head's top token = the target's at {np.mean(guess == target_next):.0%} of positions")
for t in range(8, 14):
    print(f"  …{tokenizer.decode(ids[t - 3 : t + 2].tolist())!r:22} -> head {show(guess[t])!r:8} "
          f"target {show(target_next[t])!r}")  # fmt: skip

# %% [markdown]
# ## 3. The draft vocabulary
#
# The head's LM head scores N of the V target tokens: the N most frequent in its training targets
# (ties: the lower id), sorted ascending as `ids`. The checkpoint stores them as `d2t` (`target =
# draft + d2t[draft]`, int64 [N]) and `t2d` (bool [V], which target ids are drafted). Training
# picks the fewest that cover 99 % of the training tokens (`draft_vocab_coverage`). A token outside
# the vocabulary can never be drafted, so its share of the target's greedy output caps what
# drafting can win; verification is unaffected (the target still decides over all V).
#
# Below: the token counts of the training text (FAST mode: a prefix), and the share of training
# tokens and of the target's greedy tokens on held-out and out-of-domain prompts that the N most
# frequent training tokens cover. A head's vocabulary comes from its own training data
# (docs/eagle3.md), so it need not be the one counted here (FAST mode counts a prefix only).

# %%
counts = np.zeros(V, dtype=np.int64)
for corpus in ("prose", "code"):
    stream, _ = token_stream(tokenizer, corpus, "train", None, 40_000 if FAST else 0)
    counts += np.bincount(stream, minlength=V)[:V]
ranked = np.argsort(-counts, kind="stable")  # [V] most frequent first, the lower id on ties
rank = np.empty(V, dtype=np.int64)
rank[ranked] = np.arange(V)  # [V] each id's rank

prompts = prompt_set(tokenizer, "both", per_kind=1 if FAST else 4)  # held-out, then OOD
n_new = 32 if FAST else 96
vanilla = [generate(params, config, prompt, max_new_tokens=n_new) for _, prompt in prompts]
greedy_tokens = np.concatenate([result.tokens for result in vanilla])  # the target's own output

sizes = np.arange(1, V + 1)
train_cover = np.cumsum(counts[ranked]) / counts.sum()  # [V] share covered by the top N
greedy_cover = np.mean(rank[greedy_tokens][None, :] < sizes[:, None], axis=1)  # [V]
n99 = draft_vocab_size_for(counts, 0.99)
print(f"{counts.sum():,} training tokens, {np.sum(counts > 0)} distinct ids; "
      f"99% coverage needs N = {n99}")  # fmt: skip
print(
    f"the head's N = {N}: training tokens covered {train_cover[N - 1]:.3f}, "
    f"the target's greedy tokens in the head's vocabulary {vocab.t2d[greedy_tokens].mean():.3f}"
)
plt.figure(figsize=(8, 3.5))
plt.plot(sizes, train_cover, label="training tokens")
plt.plot(sizes, greedy_cover, label="the target's greedy tokens (held-out + OOD prompts)")
plt.axvline(n99, color="grey", ls=":", label=f"99% of training tokens: N = {n99}")
plt.axvline(N, color="tab:red", ls="--", label=f"this head: N = {N}")
plt.xlabel("N (most frequent training tokens kept)")
plt.ylabel("share covered")
plt.ylim(0.5, 1.005)
plt.legend(fontsize=8)
plt.tight_layout()
plt.show()

d2t, t2d = vocab.d2t, vocab.t2d
print("draft id  d2t  target id  token")
for i in (0, 1, 2, N // 2, N - 2, N - 1):
    print(f"{i:8} {d2t[i]:4} {i + d2t[i]:10}  {show(i + d2t[i])!r}")
left_out = np.flatnonzero(~t2d)[:5]
print("not drafted (t2d False):", ", ".join(f"{t} {show(t)!r} ×{counts[t]}" for t in left_out))
eagle3.check_draft_vocab(d2t, t2d, V)  # the three invariants, as load_eagle3_head checks them
assert np.all(np.diff(np.arange(N) + d2t) > 0) and t2d.sum() == N and t2d[vocab.ids].all()
assert np.array_equal(eagle3.draft_to_target(np.arange(N), vocab), vocab.ids)
assert np.array_equal(eagle3.DraftVocab.from_buffers(d2t, t2d).ids, vocab.ids)
ours = eagle3.draft_vocab_from_counts(counts, N)  # the same size from the counts above
print(
    f"{np.isin(ours.ids, vocab.ids).mean():.1%} of the {N} most frequent ids counted here "
    "are in the head's vocabulary"
)

# %% [markdown]
# ## 4. One training-time-test unroll
#
# TTT runs the head `steps` times over a window of T positions. At step s, index t **simulates
# drafting position t + s**: from the real context ≤ t and its own chain. The table below lists
# what it reads; the label is the target's distribution at position t + s + 1 over the draft ids,
# counted where `loss_mask[t + s]` holds and the target's argmax is a draft id.

# %%
T, STEPS = 8, 3
window = np.asarray([heldout_prompts(tokenizer, 1, T + 1)[0][1]])  # [1, T + 1]: x_0 .. x_T
window_logits, taps, _ = model.forward(params, config, window, output_hidden=head_cfg.aux_layers)
window_fused = eagle3.fuse_features(taps, head_cfg.aux_layers)[:, :T]  # [1, T, 3d] at 0 .. T-1
chain = [show(t) for t in window[0]] + [show(0)] * STEPS  # ttt pads with id 0 past x_T
print(" s  t  reads token         feature  RoPE pos  label: target_logits row (its next token)")
for s in range(STEPS):
    for t in range(T):
        feature = f"g_{t}" if s == 0 else f"a^{s - 1}_{t}"
        row = t + s  # also the loss_mask index; row t + s holds the target at position t + s + 1
        if row >= T:
            label = "none: t + s ≥ T, not counted"
        elif row + 2 <= T:
            label = f"row {row} (x_{row + 2} = {chain[row + 2]!r})"
        else:
            label = f"row {row} (x_{row + 2}: past the window)"
        print(f"{s:2} {t:2}  x_{t + 1 + s:<2} {chain[t + 1 + s]!r:12} {feature:8} {row:8}  "
              f"{label}")  # fmt: skip

# %% [markdown]
# **The attention.** Each step appends one key/value per index. A step-s query at index t sees
# the step-0 keys at indices ≤ t (a causal block: the real prefix) and, of every step 1..s, only
# index t (the diagonal: its own chain), never what other indices drafted. Concatenated over steps
# this is the mask drawn below. `diagonal_attention_forward` computes it without building the
# mask (the causal scores and s per-index dot products share one softmax). RoPE positions are
# `t + s`: the chain's keys sit at the positions the drafted tokens would occupy.

# %%
index = np.arange(T)
mask = np.zeros((STEPS * T, STEPS * T), dtype=bool)  # rows (s, t), columns (j, u)
for s in range(STEPS):
    mask[s * T : (s + 1) * T, :T] = index[None, :] <= index[:, None]  # the causal block
    for j in range(1, s + 1):
        mask[s * T : (s + 1) * T, j * T : (j + 1) * T] = np.eye(T, dtype=bool)  # the diagonal
position = np.concatenate([index + s for s in range(STEPS)])  # RoPE position of row/column (s, t)

fig, ax = plt.subplots(figsize=(7, 7))
ax.imshow(mask, cmap="Greys")
for edge in range(T, STEPS * T, T):
    ax.axhline(edge - 0.5, color="tab:red", lw=0.8)
    ax.axvline(edge - 0.5, color="tab:red", lw=0.8)
ticks = np.arange(STEPS * T)
ax.set_yticks(ticks, [f"s{r // T} t{r % T} @{position[r]}" for r in ticks], fontsize=6)
ax.set_xticks(ticks, [f"@{position[c]}" for c in ticks], fontsize=6, rotation=90)
ax.set_ylabel("query (step s, index t) @ RoPE position t + s")
ax.set_xlabel("key of step 0 | step 1 | step 2, @ its RoPE position")
ax.set_title(f"TTT attention over {STEPS} steps, T = {T}")
plt.tight_layout()
plt.show()

rng = np.random.default_rng(0)  # the diagonal implementation against the drawn mask
q_test = rng.standard_normal((1, H, T, hd))
keys, values = rng.standard_normal((2, STEPS, 1, Hkv, T, hd))
for s in range(STEPS):
    rows = mask[s * T : (s + 1) * T, : (s + 1) * T]  # [T, (s+1)T]
    want, _ = layers.attention_forward(
        q_test, np.concatenate(keys[: s + 1], axis=2), np.concatenate(values[: s + 1], axis=2), rows
    )
    got, _ = eagle3.diagonal_attention_forward(
        q_test, list(keys[: s + 1]), list(values[: s + 1]), rows[:, :T]
    )
    assert np.allclose(got, want, rtol=0, atol=1e-12)
print("diagonal attention == masked attention over the concatenated steps, steps 0 ..", STEPS - 1)

# %% [markdown]
# **TTT is inference.** Step s at index t must give the logits the drafter computes when it drafts
# s tokens ahead of real position t: a KV cache over the real pairs `(g_j, x_{j+1})`, j ≤ t, then
# its own outputs fed back one at a time (at positions t + 1, t + 2, …) with the teacher-forced
# tokens. Both historical bugs of the official/SpecForge training code break exactly this:
# an extra mask on the causal block's diagonals (fixed upstream in 2025-09) and RoPE positions
# without the `+ s` shift.


# %%
def rollout(t, steps):
    """[steps'] draft logits [N] of the head drafting along the chain from real position t."""
    cache = eagle3.new_head_cache(head_cfg, head, capacity=T + steps)
    hidden_t, step_logits, _ = eagle3.head_forward(
        head, head_cfg, params, window[0, 1 : t + 2], window_fused[0, : t + 1], cache=cache
    )
    rows, hidden_t = [step_logits[-1]], hidden_t[-1:]
    for s in range(1, min(steps, T - t)):
        token = window[0, t + 1 + s : t + 2 + s]  # x_{t+1+s}, teacher-forced
        hidden_t, step_logits, _ = eagle3.head_forward(
            head, head_cfg, params, token, hidden_t, cache=cache
        )
        rows.append(step_logits[-1])
    return rows


inference = {(t, s): row for t in range(T) for s, row in enumerate(rollout(t, STEPS))}
for variant in ({}, {"attention": "explicit"}, {"old_diagonal_mask": True}, {"pe_shift": False}):
    ttt, _ = eagle3._ttt_forward(
        head, head_cfg, params, window, window_fused, steps=STEPS, **variant
    )
    error = {(t, s): np.abs(ttt[s][0, t] - row).max() for (t, s), row in inference.items()}
    later = max(e for (t, s), e in error.items() if s > 0)
    print(f"{str(variant or 'as implemented'):30} step 0: {max(error[t, 0] for t in range(T)):.0e}"
          f", steps ≥ 1: max |TTT − inference| = {later:.1e}")  # fmt: skip
    if variant in ({}, {"attention": "explicit"}):
        assert max(error.values()) < 1e-9
    else:  # a historical bug: step 0 is right, the later steps are not
        assert max(error[t, 0] for t in range(T)) < 1e-9 and later > 1e-3

# %% [markdown]
# **The loss.** `ttt_loss` sums the steps' soft cross-entropies with weights `0.8^s`
# (`step_weight`, the official `ploss_weight`), each divided by all B·T positions (the official
# mean), over 7 steps by default. Below, on held-out windows: the weights, and how often the
# head's top token is the target's at each step (`top1`): later steps draft further from real
# features, and the head was trained for exactly that.

# %%
loss_windows = np.asarray([prompt for _, prompt in heldout_prompts(tokenizer, 2, 65)])  # [4, 65]
loss_logits, taps, _ = model.forward(
    params, config, loss_windows, output_hidden=head_cfg.aux_layers
)
loss, parts, _ = eagle3.ttt_loss(
    head, head_cfg, params, vocab, loss_windows,
    eagle3.fuse_features(taps, head_cfg.aux_layers)[:, :-1], loss_logits[:, 1:],
    np.ones(loss_windows[:, 1:].shape, dtype=bool), steps=7,
)  # fmt: skip
weights = 0.8 ** np.arange(7)
assert np.isclose(loss, np.dot(weights, parts["step_loss"]), rtol=1e-12)
print(f"loss = Σ 0.8^s loss_s = {loss:.3f}; top1 per step:", np.round(parts["top1"], 3))
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(np.arange(7), weights, color="lightgrey", label="loss weight 0.8^s")
ax.plot(np.arange(7), parts["top1"], marker="o", color="tab:blue", label="top-1 agreement")
ax.set_xlabel("TTT step s (drafting s tokens past the real features)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. EAGLE-3 against EAGLE-2, on the same prompts
#
# Greedy decoding on held-out prompts (the corpora's test splits) and out-of-domain prompts
# (numpy, pytest, click and networkx docs and code). EAGLE-2 is the shipped EAGLE-1 head in the
# dynamic tree (`EAGLE2_DEFAULTS`: depth 5); EAGLE-3 uses the same tree two levels deeper
# (`EAGLE3_DEFAULTS`: depth 7), both with 26 verified nodes. τ is tokens emitted per target
# forward; n-α the chance that a draft at depth n + 1 is accepted when everything above it was.
# Without the shipped EAGLE-3 head this compares against a stand-in trained for a few minutes at
# most, and then only the losslessness check is meaningful.

# %%
eagle1_head, eagle1_cfg = load_or_train_head(
    eagle1_dir, target_dir, steps=150 if FAST else 1000, max_train_chars=40_000 if FAST else 0
)
methods = {
    "EAGLE-2": lambda: Eagle2Drafter(params, config, eagle1_head, eagle1_cfg, **EAGLE2_DEFAULTS),
    EAGLE3: lambda: Eagle2Drafter(params, config, head, head_cfg, vocab, **EAGLE3_DEFAULTS),
}
runs = {
    name: [generate(params, config, prompt, drafter=make(), max_new_tokens=n_new)
           for _, prompt in prompts]
    for name, make in methods.items()
}  # fmt: skip
for name, results in runs.items():  # lossless: greedy = greedy vanilla (float64 weights)
    assert all(r.tokens == base.tokens for r, base in zip(results, vanilla, strict=True)), name
print(f"greedy EAGLE-2 and {EAGLE3} emit vanilla's tokens on all {len(prompts)} prompts")


def pooled(results):
    """Every cycle of `results` as one GenerationResult (for pooled τ and n-α)."""
    every = GenerationResult([], 0, "", 0)
    for result in results:
        every.accepted_per_cycle += result.accepted_per_cycle
        every.emitted_per_cycle += result.emitted_per_cycle
        every.drafted_depth_per_cycle += result.drafted_depth_per_cycle
    return every


kinds = list(dict.fromkeys(kind for kind, _ in prompts)) + ["all"]
max_depth = EAGLE3_DEFAULTS["depth"] + 1
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
for offset, (name, results) in zip((-0.2, 0.2), runs.items(), strict=True):
    by_kind = {kind: [r for (k, _), r in zip(prompts, results, strict=True) if kind in (k, "all")]
               for kind in kinds}  # fmt: skip
    tau = {kind: pooled(chosen).tau for kind, chosen in by_kind.items()}
    alpha = pooled(results).acceptance_by_depth(max_depth)
    print(f"{name:28} τ: " + ", ".join(f"{k} {v:.2f}" for k, v in tau.items()))
    print(f"{'':28} n-α (n = 0..{max_depth - 1}):", np.round(alpha, 2))
    axes[0].bar(np.arange(len(kinds)) + offset, list(tau.values()), 0.4, label=name)
    axes[1].plot(np.arange(max_depth), alpha, marker="o", label=name)
axes[0].set_xticks(np.arange(len(kinds)), kinds)
axes[0].set_ylabel("τ (tokens per target forward)")
axes[0].legend(fontsize=8)
axes[1].set_xlabel("n (drafts already on the path)")
axes[1].set_ylabel("n-α")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### More data: the paper's Figure 1 in miniature
#
# The paper's case for EAGLE-3 is that it keeps improving with data where EAGLE-1's feature
# regression flattens. `benchmarks/eagle3_scaling.py` trained both heads on 1/8 .. all of our
# corpora (half a pass each) and benched them through the same tree; its measured results ship in
# `docs/results/eagle3-scaling.json` and its plot (docs/eagle3.md explains them):

# %%
from pathlib import Path  # noqa: E402

from IPython.display import Image, display  # noqa: E402

scaling_plot = Path(model.__file__).parents[1] / "docs" / "results" / "eagle3-scaling.png"
if scaling_plot.is_file():
    display(Image(filename=str(scaling_plot)))  # drawn by benchmarks/eagle3_scaling.py --plot
else:
    print(f"{scaling_plot} is not here (an installed copy without docs/): see docs/eagle3.md")

# %% [markdown]
# ## 6. What to try
#
# 1. **Fusion.** Train a head on the top three layers only (`minieagle train eagle3 --aux-layers 9
#    10 11`) and compare its n-α with the default (2, 6, 9). Repeat section 1's R² for each layer
#    and predict which choice should win before you measure.
# 2. **No training-time test.** Train with `--ttt-steps 1` (teacher forcing only: every step-0
#    input is a real feature). Its step-0 `top1` is fine; draft with it and watch n-α for n ≥ 1
#    (the paper's Fig. 4: without TTT, dropping the feature loss makes later drafts collapse).
# 3. **A historical bug.** Make `ttt_loss` call `_ttt_forward(..., pe_shift=False)`, train 150
#    steps, and compare the validation `top1_s` per step with a correct run. Which steps suffer?
#    Then do the same with `old_diagonal_mask=True`.
# 4. **The vocabulary.** Train with `--draft-vocab-size 256` and with 2048 (no reduction). How do
#    greedy coverage (section 3), τ and the cost of the head's `lm_head` move?
# 5. **Depth.** Run EAGLE-3 with `depth` 3, 5, 7 and 9 at 26 tokens (`build_drafter("eagle3",
#    ..., depth=...)`). Where does τ stop growing? Does the answer differ for EAGLE-2's head?
# 6. **The step weight.** `EagleTrainConfig(step_weight=1.0)` vs 0.5: which TTT steps gain, which
#    lose?
