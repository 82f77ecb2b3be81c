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
# EAGLE-2 on the same prompts. As in notebook 01, each mechanism is rebuilt by hand in NumPy and
# checked against `minieagle.heads.eagle3`: the weights are float64, so "equal" means bit for bit
# where we repeat the library's operations in its order, and within 1e-12 (float64 rounding)
# where we sum in another order, which each check says. docs/eagle3.md maps every equation to the
# code.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from safetensors.numpy import load_file

from minieagle import layers, model
from minieagle.bench import heldout_prompts, prompt_set
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS, Eagle2Drafter
from minieagle.drafters.head_drafter import draft_head
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
# 6 and 9 (HF's `hidden_states[i]`; the defaults `(2, L//2, L−3)` of the official code). We first
# check that claim by running the target's layers one at a time. The streams are taken before the
# final norm and their norms grow with depth (printed below), so `fc` (3d → d, no bias) sees
# inputs of different scales; the head's `hidden_norm` rescales the fused result.
#
# The fusion by hand: concatenate `[l_t, m_t, h_t]` (low first) into `[T, 3d]` and multiply by
# `fcᵀ`. It must equal `eagle3.fuse_features` bit for bit, and the head must not care whether `fc`
# ran inside it (`head_forward` on the `3d` features) or by hand (`head_forward` on `g` with
# `target_features=False`, which skips `fc`): the same matrix product of the same rows, so bit for
# bit as well. `fc` is also three `d × d` blocks, one per stream:
# `g = W_l l + W_m m + W_h h`; that sum adds the three partial products in another order than the
# one matrix product, so it agrees to float64 rounding only (< 1e-12).

# %%
text = "def read_config(path):\n    with open(path) as f:\n        return json.load(f)\n"
ids = np.asarray(tokenizer.encode(text, add_bos=True))  # [T + 1]: x_0 .. x_T
logits, hidden, _ = model.forward(params, config, ids, output_hidden=(low, mid, high, L, "final"))

embed = params["model.embed_tokens.weight"]  # [V, d]
entering, _ = layers.embedding_forward(embed, ids[None])  # [1, T + 1, d]: enters layer 0
cos, sin = layers.rope_tables(np.arange(len(ids)), config.head_dim, config.rope_theta, np.float64)
for i in range(high + 1):
    if i in head_cfg.aux_layers:  # the stream as it enters layer i
        assert np.array_equal(entering[0], hidden[i])
    entering, _ = model.decoder_layer_forward(
        params, model.layer_prefix(i), config, entering, cos, sin, model.causal_mask(0, len(ids))
    )
print(f"output_hidden[{low}], [{mid}], [{high}] == the inputs of layers {low}, {mid}, {high}: "
      "bit for bit")  # fmt: skip

fused_by_hand = np.concatenate([hidden[low], hidden[mid], hidden[high]], -1)  # -> [T+1, 3d]
assert np.array_equal(fused_by_hand, eagle3.fuse_features(hidden, head_cfg.aux_layers))
tokens_next, features = ids[1:], fused_by_hand[:-1]  # x_{t+1} [T], [l_t, m_t, h_t] [T, 3d]
g = features @ head["fc.weight"].T  # [T, 3d] @ [3d, d] -> [T, d]
out, draft_logits, _ = eagle3.head_forward(head, head_cfg, params, tokens_next, features)
out_g, logits_g, _ = eagle3.head_forward(
    head, head_cfg, params, tokens_next, g, target_features=False
)
assert np.array_equal(out_g, out) and np.array_equal(logits_g, draft_logits)
W_l, W_m, W_h = np.split(head["fc.weight"], 3, axis=1)  # [d, 3d] -> 3 x [d, d]
g_by_block = hidden[low][:-1] @ W_l.T + hidden[mid][:-1] @ W_m.T + hidden[high][:-1] @ W_h.T
block_error = np.abs(g_by_block - g).max()
assert block_error < 1e-12
print(f"fc.weight {head['fc.weight'].shape}: [l, m, h] {features.shape} -> g {g.shape}; "
      "fuse_features and head_forward(g, target_features=False): bit for bit; "
      f"|W_l l + W_m m + W_h h − g| = {block_error:.0e}")  # fmt: skip

stream_norm = {key: np.linalg.norm(hidden[key][:-1], axis=-1) for key in (low, mid, high, L)}
print("mean ‖stream‖ over the positions: "
      + ", ".join(f"stream {key} {norm.mean():.1f}" for key, norm in stream_norm.items())
      + f", fused g {np.linalg.norm(g, axis=-1).mean():.1f}")  # fmt: skip
assert stream_norm[low].mean() < stream_norm[mid].mean() < stream_norm[high].mean()

plt.figure(figsize=(11, 3.4))
for key, label in ((low, "low l"), (mid, "mid m"), (high, "high h"), (L, "top (not fused)")):
    plt.plot(stream_norm[key], marker=".", label=f"{label}: stream {key}")
plt.plot(np.linalg.norm(g, axis=-1), color="black", ls="--", label="fused g = fc([l, m, h])")
plt.xticks(np.arange(len(tokens_next)), [show(t) for t in ids[:-1]], rotation=90, fontsize=7)
plt.xlabel("position t (token x_t)")
plt.ylabel("‖stream‖ at position t")
plt.title("The three fused streams, the top stream and the fused feature g")
plt.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
plt.tight_layout()
plt.show()

# %% [markdown]
# **Why not the top feature alone?** The target's logits are `W · RMSNorm(h_top)` with `W` of
# shape `[V, d]` and rank d (V > d), so the top feature and the next-token logits determine each
# other: `RMSNorm(h_top) = W⁺ · logits`. Whatever the top feature knows about the token *after*
# next, it knows only through the next token's distribution; the layers below still hold more.
# Below: the inversion (exact up to float64 rounding, < 1e-12: the pseudo-inverse is computed, not
# given), then how much of each stream a linear function of the final feature
# explains (R² on held-out windows, fitted on other held-out windows). Lower streams keep a larger
# share that the next-token prediction does not determine.

# %%
W = model.lm_head_weight(params)  # [V, d], tied to the embedding in the small target
assert np.linalg.matrix_rank(W) == d
recovered = logits @ np.linalg.pinv(W).T  # [T, V] -> [T, d]
print(f"max |W⁺ logits − final feature| = {np.abs(recovered - hidden['final']).max():.1e}")
assert np.abs(recovered - hidden["final"]).max() < 1e-12

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
    name = f"input of layer {key}" if key < L else f"stream {key} (after the last layer)"
    print(f"{name:34}: R² explained by the final feature = {explained[key]:.3f}")
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
# vLLM have none), and the residual adds the un-normed feature. Below, the same in NumPy, with
# the library's operations in its order (RMSNorm multiplies by `1/rms`, the query heads are
# grouped per key/value head as `layers.attention_forward` does), so the 2d input must equal
# `eagle3._attention_input_forward`, q/k/v `model.qkv_forward`, and `a` and the logits
# `eagle3.head_forward`, all bit for bit.

# %%
w = {name.removeprefix("midlayer."): value for name, value in head.items()}
H, Hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
T, G = len(tokens_next), H // Hkv  # G query heads share each key/value head


def rms(x, weight):
    """RMSNorm as layers.rmsnorm_forward computes it: x · (1 / sqrt(mean(x²) + eps)) · weight."""
    inv_rms = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + config.rms_norm_eps)
    return x * inv_rms * weight


def split_heads(y, count):
    return y.reshape(T, count, hd).transpose(1, 0, 2)  # [T, count * hd] -> [count, T, hd]


inv_freq = 1.0 / config.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)  # [hd/2]
angles = np.arange(T)[:, None] * inv_freq  # [T, hd/2]: position t at frequency i
cos, sin = np.cos(np.tile(angles, 2)), np.sin(np.tile(angles, 2))  # [T, hd], rotate-half layout


def rope(y):
    return y * cos + np.concatenate([-y[..., hd // 2 :], y[..., : hd // 2]], axis=-1) * sin


e = embed[tokens_next]  # [T, d]: the target's frozen embedding of x_{t+1}
x = g  # [T, d]: the fused feature of section 1 (the head's own output a at drafted positions)
n = np.concatenate([rms(e, w["input_layernorm.weight"]), rms(x, w["hidden_norm.weight"])], -1)
n_library, _ = eagle3._attention_input_forward(head, head_cfg, e[None], x[None])  # [1, T, 2d]
assert n.shape == (T, 2 * d) and np.array_equal(n, n_library[0])
q = rope(split_heads(n @ w["self_attn.q_proj.weight"].T, H))  # [T, 2d] -> [H, T, hd]
k = rope(split_heads(n @ w["self_attn.k_proj.weight"].T, Hkv))  # [Hkv, T, hd]
v = split_heads(n @ w["self_attn.v_proj.weight"].T, Hkv)
cos_library, sin_library = layers.rope_tables(np.arange(T), hd, config.rope_theta, np.float64)
(q_lib, k_lib, v_lib), _ = model.qkv_forward(
    head, eagle3.PREFIX, head_cfg.layer, n_library, cos_library, sin_library
)
assert all(np.array_equal(mine, lib[0]) for mine, lib in ((q, q_lib), (k, k_lib), (v, v_lib)))
qg = q.reshape(Hkv, G, T, hd)  # [H, T, hd] -> [Hkv, G, T, hd]: query head i reads kv head i // G
scores = qg @ k[:, None].transpose(0, 1, 3, 2) * (1.0 / hd**0.5)  # [Hkv, G, T, T]
scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)  # causal
p = np.exp(scores - scores.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
attended = (p @ v[:, None]).reshape(H, T, hd).transpose(1, 0, 2).reshape(T, H * hd)  # [T, H hd]
h = x + attended @ w["self_attn.o_proj.weight"].T  # the residual is x, not its norm
n2 = rms(h, w["post_attention_layernorm.weight"])
gate, up = n2 @ w["mlp.gate_proj.weight"].T, n2 @ w["mlp.up_proj.weight"].T  # [T, I]
a = h + (gate * (1.0 / (1.0 + np.exp(-gate))) * up) @ w["mlp.down_proj.weight"].T  # SwiGLU
logits_by_hand = rms(a, w["norm.weight"]) @ w["lm_head.weight"].T  # [T, N]
print(f"n = [RMSNorm(e), RMSNorm(x)]: {n.shape}, 2d = {2 * d} wide")
for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
    print(f"{name}: {w[f'self_attn.{name}.weight'].shape}")
print(f"|a − head_forward| = {np.abs(a - out).max():.1e}, "
      f"|logits − head_forward| = {np.abs(logits_by_hand - draft_logits).max():.1e}")  # fmt: skip
assert np.array_equal(a, out) and np.array_equal(logits_by_hand, draft_logits)  # bit for bit

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
#
# Then by hand: the N most frequent ids, sorted (against `draft_vocab_from_counts`); `d2t` and
# `t2d` from the head's ids (against `DraftVocab` and, for the shipped head, the buffers in its
# `model.safetensors`); the way back from a target id to its draft id; and what the drafter does
# with the `[T, N]` draft logits: it writes them into a `[T, V]` row at the columns `ids`, −inf
# elsewhere (`Eagle3Head.forward`), so trees and the verifier only ever see target ids. The
# drafter runs the head on minieagle's fast path (`inference.PreparedEagle3Head`), whose matrix
# products are laid out differently, so its logits agree with `head_forward`'s to float64
# rounding (< 1e-12), and its −inf entries exactly.

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
plt.figure(figsize=(10, 3.5))
plt.plot(sizes, train_cover, label="training tokens")
plt.plot(sizes, greedy_cover, label="the target's greedy tokens (held-out + OOD prompts)")
plt.axvline(N, color="tab:red", ls="--", lw=2, label=f"this head: N = {N}")
plt.axvline(n99, color="black", ls=":", label=f"99% of training tokens: N = {n99}")  # on top
plt.xlabel("N (most frequent training tokens kept)")
plt.ylabel("share covered")
plt.ylim(0.5, 1.005)
plt.title("What the N most frequent training tokens cover")
plt.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
plt.tight_layout()
plt.show()

d2t, t2d = vocab.d2t, vocab.t2d
print("draft id  d2t  target id  token")
for i in (0, 1, 2, N // 2, N - 2, N - 1):
    print(f"{i:8} {d2t[i]:4} {i + d2t[i]:10}  {show(i + d2t[i])!r}")
left_out = np.flatnonzero(~t2d)[:5]
print("not drafted (t2d False):", ", ".join(f"{t} {show(t)!r} ×{counts[t]}" for t in left_out))

most_frequent = np.sort(ranked[:N])  # [N] the N most frequent ids counted here, ascending
assert np.array_equal(most_frequent, eagle3.draft_vocab_from_counts(counts, N).ids)
print(
    f"{np.isin(most_frequent, vocab.ids).mean():.1%} of the {N} most frequent ids counted here "
    "are in the head's vocabulary"
)
d2t_by_hand = vocab.ids - np.arange(N)  # [N]: target = draft + d2t[draft]
t2d_by_hand = np.zeros(V, dtype=bool)
t2d_by_hand[vocab.ids] = True  # [V]: the target ids the head can draft
assert np.array_equal(d2t_by_hand, d2t) and np.array_equal(t2d_by_hand, t2d)
if shipped:  # the buffers as the checkpoint stores them (int64 d2t, bool t2d)
    stored = load_file(str(eagle3_dir / "model.safetensors"))
    assert np.array_equal(stored["d2t"], d2t) and np.array_equal(stored["t2d"], t2d)
eagle3.check_draft_vocab(d2t, t2d, V)  # the three invariants, as load_eagle3_head checks them
assert np.array_equal(np.arange(N) + d2t, eagle3.draft_to_target(np.arange(N), vocab))
draft_id_of = np.cumsum(t2d) - 1  # [V]: a drafted target id's draft id = its rank among them
assert np.array_equal(draft_id_of[vocab.ids], np.arange(N))

drafting = draft_head(params, config, head, head_cfg, vocab)  # the adapter the drafters use
_, scattered = drafting.forward(
    tokens_next, features, drafting.new_cache(T), target_features=True
)  # [T, V]
scattered_by_hand = np.full((T, V), -np.inf)
scattered_by_hand[:, vocab.ids] = draft_logits  # [T, N] -> [T, V]
scatter_error = np.abs(scattered[:, vocab.ids] - draft_logits).max()
assert np.array_equal(np.isinf(scattered), np.isinf(scattered_by_hand)) and scatter_error < 1e-12
print(f"the drafter's [T, V] logits: −inf at the {V - N} ids outside the vocabulary, the draft "
      f"logits at the {N} others (|fast path − head_forward| ≤ {scatter_error:.0e})")  # fmt: skip

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
# this is the mask drawn below, built by hand. RoPE positions are `t + s`: the chain's keys sit at
# the positions the drafted tokens would occupy.
#
# Then the drawn mask against the library, on random queries, keys and values. Row block s must
# be `_causal_block` (the step-0 keys) followed by s identity blocks. `_explicit_attention_forward`
# (the tests' oracle) builds the mask itself: its output must equal `layers.attention_forward`
# with the drawn mask bit for bit, and its attention probabilities must be non-zero exactly where
# the drawn mask is True. `diagonal_attention_forward` (what training runs) never builds the mask:
# the causal scores and s per-index dot products share one softmax, and the step-j values are
# added one at a time, so it agrees to float64 rounding (< 1e-12). Last, the mask before the
# 2025-09 fix (`old_diagonal_mask=True`): a step-s query lost the step-0 keys t − s + 1 .. t.

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

rng = np.random.default_rng(0)
q_test = rng.standard_normal((1, H, T, hd))
keys, values = rng.standard_normal((2, STEPS, 1, Hkv, T, hd))  # per step: [1, Hkv, T, hd]
for s in range(STEPS):
    rows = mask[s * T : (s + 1) * T, : (s + 1) * T]  # [T, (s+1)T]
    causal_block = eagle3._causal_block(T, s, old_diagonal_mask=False, like=index)  # [T, T]
    assert np.array_equal(rows, np.concatenate([causal_block] + [np.eye(T, dtype=bool)] * s, 1))
    step_keys, step_values = list(keys[: s + 1]), list(values[: s + 1])
    want, _ = layers.attention_forward(
        q_test, np.concatenate(step_keys, axis=2), np.concatenate(step_values, axis=2), rows
    )
    explicit, (c_att, _, _) = eagle3._explicit_attention_forward(
        q_test, step_keys, step_values, causal_block
    )
    probs = c_att[3]  # [1, Hkv, G, T, (s+1)T]
    assert np.array_equal(explicit, want) and np.all((probs > 0) == rows)
    diagonal, _ = eagle3.diagonal_attention_forward(q_test, step_keys, step_values, causal_block)
    diagonal_error = np.abs(diagonal - want).max()
    assert diagonal_error < 1e-12
    print(f"step {s}: drawn mask == _causal_block | I × {s}; explicit attention == masked "
          f"attention bit for bit; |diagonal − masked| = {diagonal_error:.0e}")  # fmt: skip

old_block = eagle3._causal_block(T, STEPS - 1, old_diagonal_mask=True, like=index)
print(f"step-0 keys a step-{STEPS - 1} query at index t = 0..{T - 1} sees: now",
      causal_block.sum(1).tolist(), "| before the fix", old_block.sum(1).tolist())  # fmt: skip
assert np.array_equal(old_block.sum(1), np.maximum(index + 1 - (STEPS - 1), 0))

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
# features, and the head was trained for exactly that. We rebuild both from the unrolled logits
# of `_ttt_forward`: the label of index t at step s is row t + s of the target's distribution over
# the draft ids, a position counts when the target's argmax there is a draft id, and the sum is
# divided by all B·T positions. The sums run in another order than `ttt_loss`'s, so they agree
# to float64 rounding (relative 1e-12).

# %%
loss_windows = np.asarray([prompt for _, prompt in heldout_prompts(tokenizer, 2, 65)])  # [4, 65]
loss_logits, taps, _ = model.forward(
    params, config, loss_windows, output_hidden=head_cfg.aux_layers
)
loss_fused = eagle3.fuse_features(taps, head_cfg.aux_layers)[:, :-1]  # [B, T, 3d] at 0 .. T-1
loss_target = loss_logits[:, 1:]  # [B, T, V]: row t is the target at position t + 1
loss, parts, _ = eagle3.ttt_loss(
    head, head_cfg, params, vocab, loss_windows, loss_fused, loss_target,
    np.ones(loss_target.shape[:2], dtype=bool), steps=7,
)  # fmt: skip
weights = 0.8 ** np.arange(7)
assert np.isclose(loss, np.dot(weights, parts["step_loss"]), rtol=1e-12)

step_logits, _ = eagle3._ttt_forward(head, head_cfg, params, loss_windows, loss_fused, steps=7)
B, T_loss = loss_fused.shape[:2]
labels = np.exp(layers.log_softmax(loss_target[..., vocab.ids]))  # [B, T, V] -> [B, T, N]
target_top = loss_target.argmax(-1)  # [B, T]
counted = vocab.t2d[target_top]  # [B, T]: the target's argmax is a draft id (loss_mask: all)
step_loss, top1 = [], []
for s, logits_s in enumerate(step_logits):  # index t at step s is scored against row t + s
    log_q = layers.log_softmax(logits_s[:, : T_loss - s])  # [B, T - s, N]
    cross_entropy = -np.sum(labels[:, s:] * log_q, axis=-1)  # [B, T - s]
    step_loss.append(np.sum(cross_entropy * counted[:, s:]) / (B * T_loss))  # / all B·T
    draft_top = vocab.ids[logits_s[:, : T_loss - s].argmax(-1)]  # [B, T - s] target ids
    top1.append(np.mean(draft_top == target_top[:, s:]))
assert np.allclose(step_loss, parts["step_loss"], rtol=1e-12, atol=0)
assert np.allclose(top1, parts["top1"], rtol=1e-12, atol=0)
print(f"loss = Σ 0.8^s loss_s = {loss:.3f}; loss_s and top1 by hand == ttt_loss's; "
      "top1 per step:", np.round(parts["top1"], 3))  # fmt: skip
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(np.arange(7), weights, color="lightgrey", label="loss weight 0.8^s")
ax.plot(np.arange(7), parts["top1"], marker="o", color="tab:blue", label="top-1 agreement")
ax.set_xlabel("TTT step s (drafting s tokens past the real features)")
ax.set_ylabel("weight / share of positions")
ax.set_title("The step weights and the head's top-1 agreement per TTT step")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# Of the target's whole distribution `[B, T, V]` that loss reads only three things: the logits on
# the draft ids (the labels), the argmax over all V (whether a position counts) and the
# logsumexp over all V (the target's own probability of a draft id, for the `accept` metric).
# `eagle3.DraftTargets` holds just those. `minieagle distill` records the argmax and logsumexp
# at every position as it writes, so a head trained on its shards multiplies the features by the
# LM head's N draft rows only, not all V rows (docs/distill.md: 1.27x faster on SmolLM2, whose
# V is 49,152 and N 8,192). The same loss, from the three pieces:

# %%
final_rows = model.forward(params, config, loss_windows, output_hidden=("final",))[1]
final = final_rows["final"][:, 1:]  # [B, T, d]: what the target's LM head reads
lm_head = model.lm_head_weight(params)  # [V, d]
pieces = eagle3.DraftTargets(
    logits=final @ lm_head[vocab.ids].T,  # [B, T, N]: the draft rows only
    top=loss_target.argmax(-1),  # in a shard: recorded
    lse=np.log(np.exp(loss_target).sum(-1)),  # in a shard: recorded
)  # fmt: skip
loss_pieces, parts_pieces, _ = eagle3.ttt_loss(
    head, head_cfg, params, vocab, loss_windows, loss_fused, pieces,
    np.ones(loss_target.shape[:2], dtype=bool), steps=7,
)  # fmt: skip
print(f"the loss from the whole logits {loss:.6f}, from the three pieces {loss_pieces:.6f}; "
      f"LM-head rows multiplied: {len(vocab.ids)} instead of {lm_head.shape[0]}")  # fmt: skip
assert np.isclose(loss, loss_pieces, rtol=1e-9)
assert np.allclose(parts["accept"], parts_pieces["accept"], rtol=1e-9)

# %% [markdown]
# ## 5. EAGLE-3 against EAGLE-2, on the same prompts
#
# Greedy decoding on held-out prompts (the corpora's test splits) and out-of-domain prompts
# (numpy, pytest, click and networkx docs and code). EAGLE-2 is the shipped EAGLE-1 head in the
# dynamic tree (`EAGLE2_DEFAULTS`: 6 levels, 26 nodes); EAGLE-3 drafts through the same tree, so
# the two differ only in the head, and then through its own default, the paper's deeper tree
# (`EAGLE3_DEFAULTS`: 8 levels, the same 26 nodes), where a head whose deep drafts hold up gains
# most. All rank by raw scores here (the paper's). The cell prints the settings. τ is tokens
# emitted per target forward. n-α counts n from 0: among the cycles that accepted the first n
# drafts of their path and drafted deeper, the share that accepted a draft at depth n + 1, so
# 0-α is the acceptance rate of the first draft token. Without the shipped EAGLE-3 head this
# compares against a stand-in trained for a few minutes at most, and then only the losslessness
# check is meaningful.

# %%
eagle1_head, eagle1_cfg = load_or_train_head(
    eagle1_dir, target_dir, steps=150 if FAST else 1000, max_train_chars=40_000 if FAST else 0
)
methods = {
    "EAGLE-2": lambda: Eagle2Drafter(params, config, eagle1_head, eagle1_cfg, **EAGLE2_DEFAULTS),
    f"{EAGLE3}, same tree": lambda: Eagle2Drafter(params, config, head, head_cfg, vocab,
                                                  **EAGLE2_DEFAULTS),
    f"{EAGLE3}, 8 levels": lambda: Eagle2Drafter(params, config, head, head_cfg, vocab,
                                                 **EAGLE3_DEFAULTS),
}  # fmt: skip
runs = {
    name: [generate(params, config, prompt, drafter=make(), max_new_tokens=n_new)
           for _, prompt in prompts]
    for name, make in methods.items()
}  # fmt: skip
for name, results in runs.items():  # lossless: greedy = greedy vanilla (float64 weights)
    assert all(r.tokens == base.tokens for r, base in zip(results, vanilla, strict=True)), name
print(f"greedy EAGLE-2 and {EAGLE3} emit vanilla's tokens on all {len(prompts)} prompts")
print(f"EAGLE-2: {EAGLE2_DEFAULTS}; {EAGLE3}'s own: {EAGLE3_DEFAULTS}")
assert EAGLE2_DEFAULTS["total_tokens"] == EAGLE3_DEFAULTS["total_tokens"]  # one node budget


def pooled(results):
    """Every cycle of `results` as one GenerationResult (for pooled τ and n-α)."""
    every = GenerationResult([], 0, "", 0)
    for result in results:
        every.accepted_per_cycle += result.accepted_per_cycle
        every.emitted_per_cycle += result.emitted_per_cycle
        every.drafted_depth_per_cycle += result.drafted_depth_per_cycle
    return every


kinds = list(dict.fromkeys(kind for kind, _ in prompts)) + ["all"]
max_depth = max(EAGLE2_DEFAULTS["depth"], EAGLE3_DEFAULTS["depth"]) + 1  # drafts per path
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
for offset, (name, results) in zip((-0.27, 0.0, 0.27), runs.items(), strict=True):
    by_kind = {kind: [r for (k, _), r in zip(prompts, results, strict=True) if kind in (k, "all")]
               for kind in kinds}  # fmt: skip
    tau = {kind: pooled(chosen).tau for kind, chosen in by_kind.items()}
    alpha = pooled(results).acceptance_by_depth(max_depth)
    print(f"{name:28} τ: " + ", ".join(f"{k} {v:.2f}" for k, v in tau.items()))
    print(f"{'':28} n-α (n = 0..{max_depth - 1}):", np.round(alpha, 2))
    axes[0].bar(np.arange(len(kinds)) + offset, list(tau.values()), 0.27, label=name)
    axes[1].plot(np.arange(max_depth), alpha, marker="o", label=name)
axes[0].set_xticks(np.arange(len(kinds)), kinds)
axes[0].set_xlabel("prompts")
axes[0].set_ylabel("τ (tokens per target forward)")
axes[0].set_ylim(0, 1.3 * axes[0].get_ylim()[1])  # room above the bars for the legend
axes[0].set_title("τ by kind of prompt (greedy)")
axes[0].legend(fontsize=8, loc="upper center", ncol=3)
axes[1].set_xlabel("n (drafts already accepted on the path; 0-α: the first draft)")
axes[1].set_ylabel("n-α")
axes[1].set_ylim(0, 1.25)  # acceptance rates, with room above for the legend
axes[1].set_title("Acceptance rate at depth n + 1")
axes[1].legend(fontsize=8, loc="upper center", ncol=3)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### More data: the paper's Figure 1 in miniature
#
# The paper's case for EAGLE-3 is that it keeps improving with data where EAGLE-1's feature
# regression flattens. Two experiments measured it here; nothing is measured in this cell, which
# prints their files' τ (T = 0) against the training tokens and shows their plots
# (docs/eagle3.md explains them):
#
# - `eagle3-scaling-corpus`: both heads on 1/8 .. all of our corpora (2.6M tokens), half a pass;
# - `eagle3-scaling`: both heads on 1x .. 8x that (the corpora and the target's own text written
#   by `minieagle distill`), one pass per point, each point branched off one long run
#   (`benchmarks/eagle3_scaling.py`); it spans several days of one core, so its file holds the
#   points finished so far;
# - `eagle3-scaling-wide-24`: the same data and schedule for an EAGLE-3 head whose MLP is four
#   times the target's width (`--head-intermediate-size 1536`), measured on 24 prompts per kind
#   beside the others: whether capacity, not data, holds the head back where the curve flattens.
# - `eagle3-ratio-wide-24`: what issue 20 asks of the tiny target, EAGLE-3 / EAGLE-2 τ per kind of
#   prompt, each method at its paper's tree with its shipped scores: the wider head passes 1.25 on
#   every kind at 8x (shipped as `small-eagle3-wide`, named with `--head`; it drafts slower on a
#   CPU, so `small-eagle3` stays the default).

# %%
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from IPython.display import Image, display  # noqa: E402

results_dir = Path(model.__file__).parents[1] / "docs" / "results"
for experiment in ("eagle3-scaling-corpus", "eagle3-scaling"):
    path = results_dir / f"{experiment}.json"
    if not path.is_file():
        print(f"{path} is not here (an installed copy without docs/, or no point finished yet)")
        continue
    points = json.loads(path.read_text())["points"]
    print(experiment)
    for kind in ("heldout", "ood"):
        for name in ("eagle1", "eagle3"):
            curve = sorted((p.get("tokens", p.get("train_tokens")), p["tau"]["T=0"][kind])
                           for p in points if p["head"] == name)  # fmt: skip
            if not curve:
                continue
            print(f"  {kind:8} {name} head: τ "
                  + " → ".join(f"{tau:.2f} ({tokens / 1e6:.1f}M)" for tokens, tau in curve))
    if (results_dir / f"{experiment}.png").is_file():
        display(Image(filename=str(results_dir / f"{experiment}.png")))
# the same heads re-measured on 24 prompts per kind, trees of 6 and 8 levels
# (`benchmarks/plot_scaling_remeasured.py`): the lead at 8 prompts per kind was partly noise
if (results_dir / "eagle3-scaling-24.png").is_file():
    display(Image(filename=str(results_dir / "eagle3-scaling-24.png")))
# the wider head's points beside them (`plot_scaling_remeasured.py --wide`)
if (results_dir / "eagle3-scaling-wide-24.png").is_file():
    display(Image(filename=str(results_dir / "eagle3-scaling-wide-24.png")))
if (results_dir / "eagle3-ratio-wide-24.png").is_file():
    display(Image(filename=str(results_dir / "eagle3-ratio-wide-24.png")))

# %% [markdown]
# The wider head ships too, as `small-eagle3-wide` (named with `--head`, never a default). This
# cell drafts with it on the prompts above, the same 8-level tree and raw scores as the
# `EAGLE-3, 8 levels` runs, checks every output against vanilla's and prints both heads' τ.
# Its parameters say why it is not the default on a CPU: every draft step runs an MLP four
# times as wide (docs/eagle3.md, "A wider head", measures the speed).

# %%
wide_dir = PRETRAINED / "small-eagle3-wide"
if shipped and (wide_dir / "model.safetensors").is_file():
    from minieagle.generate import emitted_per_forward  # noqa: E402
    from minieagle.heads.eagle3_io import load_eagle3_head  # noqa: E402

    wide, wide_cfg, wide_vocab = load_eagle3_head(wide_dir, dtype=np.float64, target_config=config)
    wide_runs = [generate(params, config, prompt, max_new_tokens=n_new,
                          drafter=Eagle2Drafter(params, config, wide, wide_cfg, wide_vocab,
                                                **EAGLE3_DEFAULTS))
                 for _, prompt in prompts]  # fmt: skip
    assert all(r.tokens == base.tokens for r, base in zip(wide_runs, vanilla, strict=True))
    for name, results in ((f"{EAGLE3}, 8 levels", runs[f"{EAGLE3}, 8 levels"]),
                          ("small-eagle3-wide, 8 levels", wide_runs)):  # fmt: skip
        print(f"{name:30} tau {emitted_per_forward(results):.2f} on {len(results)} prompts")
    n_params = {k: sum(v.size for v in h.values()) for k, h in (("default", head), ("wide", wide))}
    print(f"parameters: default head {n_params['default']:,}, wide head {n_params['wide']:,}")

# %% [markdown]
# The EAGLE-3 paper also raises the tree's depth from 6 to 8 levels at the same node budget: a
# head whose deep drafts hold up can use levels that EAGLE-1's head rarely reaches.
# `benchmarks/tree_depth.py` measured both heads of a scaling point at 26 nodes and each depth;
# this cell plots its files (`tree-depth-*.json`), measuring nothing itself.

# %%
for path in sorted(results_dir.glob("tree-depth-*x.json")):  # the sweeps over depth
    rows = json.loads(path.read_text())["depths"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, kind in zip(axes, ("heldout", "ood"), strict=True):
        for name, label in (("eagle3", "EAGLE-3 head"), ("eagle1", "EAGLE-1 head, EAGLE-2 tree")):
            ax.plot([r["levels"] for r in rows], [r[name][kind]["tau"] for r in rows],
                    marker="o", label=label)  # fmt: skip
        ax.set_title(f"{path.stem}: {'held-out' if kind == 'heldout' else 'out-of-domain'}")
        ax.set_xlabel("draft levels (26 nodes)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("τ at T = 0")
    axes[0].legend()
    plt.tight_layout()
    plt.show()
    print("EAGLE-3 / EAGLE-2 by levels:", ", ".join(
        f"{r['levels']}: {r['ratio']['heldout']['all']:.2f} / {r['ratio']['ood']['all']:.2f}"
        for r in rows))  # fmt: skip

# %% [markdown]
# ## Exercises
#
# Worked answers: `minieagle/assignments/notebook_answers/05_eagle3.md`.
#
# 1. **Which layers to fuse (predict, then measure).** Section 1 fitted the stream entering
#    layers 2, 6, 9 and 12 from the final feature. Predict the shape of R² over *every* stream
#    0 .. 12 before you compute it (extend `streams` in section 1's cell), then compute it. Which
#    streams say least beyond the next token, and what does that suggest about fusing layers
#    (9, 10, 11) instead of (2, 6, 9)? (To test the suggestion for real, `minieagle train eagle3
#    --aux-layers 9 10 11` trains such a head.)
# 2. **The historical bugs on the trained head (predict, then measure).** Reuse the by-hand `top1`
#    loop of section 4 on the same windows, but unroll with `eagle3._ttt_forward(...,
#    pe_shift=False)` and then with `old_diagonal_mask=True`. Predict first: which steps' top-1
#    can change, which cannot, and why? Which bug hurts more?
# 3. **Counting what a query sees (short derivation).** (a) A step-s query at index t: how many
#    keys does it attend to, and how many True entries has row block s of the mask
#    (`[T, (s+1)T]`)? Why may it not see index u ≠ t of step 1..s, even for u < t? (b) Each
#    step's loss is divided by all B·T positions although only T − s indices can count at step
#    s. By what factor, relative to step 0, is step 6 weighted in total when T = 128? (c) Read
#    from section 3's `greedy_cover` what share of the target's greedy tokens a 256-token draft
#    vocabulary could ever propose. Why does that bound the first draft token's acceptance rate
#    (0-α) at T = 0, and why does it not change the output?
# 4. **The diagonal attention by hand (coding, checked against the library).** Write
#    `diagonal_attention(q, keys, values)` for one batch row with H = Hkv: `q [H, T, hd]`, and
#    `keys`, `values` lists of s + 1 arrays `[H, T, hd]`. Do not build the `[T, (s+1)T]` mask:
#    compute the causal scores against step 0, one score per index against each later step (an
#    elementwise product summed over hd), one softmax over all of them, and the weighted sum of
#    values. Check it against `eagle3._explicit_attention_forward` (add the batch axis) for s = 0,
#    1, 2 on random inputs, to 1e-12, and explain why it is not bit for bit.
# 5. **Tree depth at a fixed size (predict, then measure).** With 26 nodes, run the EAGLE-3 head
#    at `depth` 3, 5 and 7 (`Eagle2Drafter(params, config, head, head_cfg, vocab, depth=...,
#    top_k=8, total_tokens=26)`) on section 5's prompts and print τ. Where does τ stop growing,
#    and why can a deeper tree of the same size not help much here? Repeat with the EAGLE-1 head
#    (EAGLE-2).
