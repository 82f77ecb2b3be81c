# %% [markdown]
# # 01 · A tiny Llama, one step at a time
#
# We follow one prompt through the shipped target model: text → tokens → embeddings → each decoder
# layer → logits. At every stage we redo the computation by hand, first each primitive in plain
# NumPy, then a decoder layer from `minieagle.layers`, and check that it equals the library's
# forward. Then we look at the KV cache and at a *tree* attention mask, the two tools speculative
# decoding is built from, and finally check a hand-written backward pass against finite
# differences. The weights are loaded in float64, so "equal" means bit for bit where the same
# operations run in the same order, and equal to rounding (1e-12) otherwise, not "close".

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import minieagle
from minieagle import layers, model
from minieagle import tree as trees
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL
from minieagle.config import preset
from minieagle.generate import generate, greedy_reference
from minieagle.kvcache import KVCache
from minieagle.sampling import SamplingParams

FAST = os.environ.get("MINIEAGLE_FAST") == "1"  # the test suite sets it: shorter loops
print("model:", DEFAULT_MODEL.relative_to(Path(minieagle.__file__).parents[1]))
params, config, tokenizer = load_checkpoint(DEFAULT_MODEL, dtype=np.float64)
L, d, V = config.num_hidden_layers, config.hidden_size, config.vocab_size
print(config)
print(f"{sum(p.size for p in params.values()) / 1e6:.2f}M parameters")


show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n


# %% [markdown]
# ## 1. Tokens
#
# The tokenizer is byte-level BPE: ids 0-2 are `<|pad|>`, `<|bos|>`, `<|eos|>`, ids 3-258 the 256
# bytes, and every later id a merge of two earlier tokens (merge i makes id 259 + i). Any string
# round-trips. The first cell checks that layout over the whole vocabulary.

# %%
assert [tokenizer.token_text(i) for i in range(3)] == ["<|pad|>", "<|bos|>", "<|eos|>"]
assert all(tokenizer.token_bytes(3 + b) == bytes([b]) for b in range(256))
for i, (a, b) in enumerate(tokenizer.merges):
    assert a < 259 + i and b < 259 + i  # both halves exist before the merge
    assert tokenizer.token_bytes(259 + i) == tokenizer.token_bytes(a) + tokenizer.token_bytes(b)
print(f"vocabulary: 3 special + 256 bytes + {len(tokenizer.merges)} merges = {V} ids")
assert 3 + 256 + len(tokenizer.merges) == V

# %%
for text in ("The interpreter reads a line of input.", "    return sorted(items, key=len)\n"):
    ids = tokenizer.encode(text)
    print(f"{len(text.encode())} bytes -> {len(ids)} tokens:", ids)
    print("   ", [tokenizer.token_bytes(i) for i in ids])
    assert tokenizer.decode(ids) == text

# %% [markdown]
# ## 2. Embeddings, one decoder layer by hand, then the whole model
#
# A Llama decoder layer (`LlamaDecoderLayer` in Hugging Face) is pre-norm:
#
# - `h = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))` with
#   `n = input_layernorm(x)`,
# - `out = h + down_proj(silu(gate_proj(m)) * up_proj(m))` with `m = post_attention_layernorm(h)`.
#
# Grouped-query attention: `num_key_value_heads` key/value heads each serve
# `num_attention_heads / num_key_value_heads` query heads.

# %%
prompt_ids = tokenizer.encode("def read_config(path):\n    with open(path) as", add_bos=True)
ids = np.asarray(prompt_ids)  # [T]
T = len(ids)
H, Hkv = config.num_attention_heads, config.num_key_value_heads
hd, eps = config.head_dim, config.rms_norm_eps
x, _ = layers.embedding_forward(params["model.embed_tokens.weight"], ids[None])  # [1, T, d]
cos, sin = layers.rope_tables(np.arange(T), hd, config.rope_theta, x.dtype)  # [T, hd] each
mask = model.causal_mask(0, T)  # [T, T] bool, True = may attend
w0 = {  # layer 0's weights without the "model.layers.0." prefix
    name.removeprefix(model.layer_prefix(0)): value
    for name, value in params.items()
    if name.startswith(model.layer_prefix(0))
}
print(f"T = {T} tokens, d = {d}, H = {H} query heads, Hkv = {Hkv} key/value heads, hd = {hd}")

# %% [markdown]
# **The primitives in plain NumPy.** Each function of `minieagle.layers` that the layer uses,
# written from its formula and run on layer 0's real inputs:
#
# - RMSNorm: `x / sqrt(mean(x²) + eps) · w`, over the last axis;
# - RoPE (rotate-half, as Hugging Face): dimensions `j` and `j + hd/2` of a head vector form a
#   pair, rotated by the angle `position · θ^(−2j/hd)`;
# - attention: query head `h` reads key/value head `h // (H / Hkv)`; scores `q·k / sqrt(hd)`,
#   set to −∞ where the mask forbids, softmax over the keys, then the weighted sum of values;
# - SwiGLU: `silu(g) · u` with `silu(g) = g · sigmoid(g)`.


# %%
def check(name, ours, library):
    """Print and assert that a by-hand result equals the library's to rounding."""
    gap = np.abs(ours - library).max()
    print(f"{name:9} by hand vs minieagle.layers: max |diff| = {gap:.1e}")
    assert gap < 1e-12, name


n_ours = x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * w0["input_layernorm.weight"]
n, _ = layers.rmsnorm_forward(x, w0["input_layernorm.weight"], eps)  # [1, T, d]
check("RMSNorm", n_ours, n)

# [1, T, heads*hd] -> [heads, T, hd]
q = (n[0] @ w0["self_attn.q_proj.weight"].T).reshape(T, H, hd).transpose(1, 0, 2)
k = (n[0] @ w0["self_attn.k_proj.weight"].T).reshape(T, Hkv, hd).transpose(1, 0, 2)
v = (n[0] @ w0["self_attn.v_proj.weight"].T).reshape(T, Hkv, hd).transpose(1, 0, 2)
half = hd // 2
angle = np.arange(T)[:, None] * config.rope_theta ** (-2 * np.arange(half) / hd)  # [T, hd/2]
q1, q2 = q[..., :half], q[..., half:]  # pair j is (q1[..., j], q2[..., j]); [H, T, hd/2] each
c, s = np.cos(angle), np.sin(angle)  # [T, hd/2]
q_ours = np.concatenate([q1 * c - q2 * s, q2 * c + q1 * s], axis=-1)  # rotated pairs, [H, T, hd]
q_rope, _ = layers.rope_forward(q[None], cos, sin)  # [1, H, T, hd]
check("RoPE", q_ours, q_rope[0])

a_ours = np.empty((H, T, hd))
for h in range(H):
    kv = h // (H // Hkv)  # the key/value head this query head shares
    scores = q[h] @ k[kv].T / np.sqrt(hd)  # [T, T]: query t, key s
    scores[~mask] = -np.inf  # a query may not read a later key
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    a_ours[h] = probs / probs.sum(axis=-1, keepdims=True) @ v[kv]  # [T, hd]
a_lib, _ = layers.attention_forward(q[None], k[None], v[None], mask)  # [1, H, T, hd]
check("attention", a_ours, a_lib[0])

gate, up = n[0] @ w0["mlp.gate_proj.weight"].T, n[0] @ w0["mlp.up_proj.weight"].T  # [T, I]
check("SwiGLU", gate / (1 + np.exp(-gate)) * up, layers.swiglu_forward(gate, up)[0])

# %% [markdown]
# **One decoder layer** from those primitives, in the order `model.decoder_layer_forward` runs
# them, and then the whole model: the same operations in the same order, so bit for bit.


# %%
def layer_by_hand(x, i):
    """Decoder layer i on x [1, T, d] -> (out [1, T, d], attention probabilities [H, T, T])."""
    p = model.layer_prefix(i)  # "model.layers.{i}."
    w = {name.removeprefix(p): value for name, value in params.items() if name.startswith(p)}
    n, _ = layers.rmsnorm_forward(x, w["input_layernorm.weight"], eps)  # [1, T, d]
    q = layers.linear_forward(n, w["self_attn.q_proj.weight"])[0]  # [1, T, H*hd]
    k = layers.linear_forward(n, w["self_attn.k_proj.weight"])[0]  # [1, T, Hkv*hd]
    v = layers.linear_forward(n, w["self_attn.v_proj.weight"])[0]  # [1, T, Hkv*hd]
    # split into heads: [1, T, heads*hd] -> [1, heads, T, hd]
    q, k, v = (t.reshape(1, T, -1, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
    q, _ = layers.rope_forward(q, cos, sin)  # rotate each head vector by its position
    k, _ = layers.rope_forward(k, cos, sin)
    a, (_, _, _, probs, _) = layers.attention_forward(q, k, v, mask)  # [1, H, T, hd]
    a = a.transpose(0, 2, 1, 3).reshape(1, T, H * hd)  # [1, T, H*hd]
    h = x + layers.linear_forward(a, w["self_attn.o_proj.weight"])[0]  # residual, [1, T, d]
    m, _ = layers.rmsnorm_forward(h, w["post_attention_layernorm.weight"], eps)
    gate = layers.linear_forward(m, w["mlp.gate_proj.weight"])[0]  # [1, T, I]
    up = layers.linear_forward(m, w["mlp.up_proj.weight"])[0]  # [1, T, I]
    mlp = layers.linear_forward(layers.swiglu_forward(gate, up)[0], w["mlp.down_proj.weight"])[0]
    return h + mlp, probs.reshape(H, T, T)  # probs: [1, Hkv, H // Hkv, T, T] -> [H, T, T]


ours, _ = layer_by_hand(x, 0)
library, _ = model.decoder_layer_forward(params, model.layer_prefix(0), config, x, cos, sin, mask)
print("layer 0, by hand vs model.decoder_layer_forward: max |diff| =", np.abs(ours - library).max())
assert np.array_equal(ours, library)  # the same operations in the same order: bit for bit

attention = {}  # layer -> [H, T, T]
for i in range(L):
    x, attention[i] = layer_by_hand(x, i)
final, _ = layers.rmsnorm_forward(x, params["model.norm.weight"], eps)  # [1, T, d]
logits_by_hand = final[0] @ model.lm_head_weight(params).T  # [T, d] @ [d, V] -> [T, V]
logits, hidden, _ = model.forward(params, config, ids, output_hidden=(*range(L + 1), "final"))
print("whole model, by hand vs model.forward: max |diff| =", np.abs(logits_by_hand - logits).max())
assert np.abs(logits_by_hand - logits).max() < 1e-12
assert np.abs(hidden["final"] - final[0]).max() < 1e-12  # the post-norm feature EAGLE-1 reads
assert np.abs(hidden[L] - x[0]).max() < 1e-12  # output_hidden[L]: after the last layer, pre-norm

# %% [markdown]
# ## 3. Looking inside
#
# Left: the attention pattern of one head, `softmax(q kᵀ / sqrt(head_dim) + causal mask)`, rows
# are queries, columns the keys they read. Right: the size of the residual stream entering each
# layer (`output_hidden[i]`); layer `L` is the stream after the last layer, before the final norm.

# %%
labels = [show(t) for t in ids]
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
image = left.imshow(attention[L // 2][0], cmap="viridis", vmin=0, vmax=1)
fig.colorbar(image, ax=left, label="attention probability")
left.set_xticks(range(T), labels, rotation=90)
left.set_yticks(range(T), labels)
left.set_xlabel("key: the token read")
left.set_ylabel("query: the token reading")
left.set_title(f"attention of layer {L // 2}, head 0 (each row sums to 1)")
rms = [np.sqrt((hidden[i] ** 2).mean()) for i in range(L + 1)]  # RMS over positions and width
right.plot(range(L + 1), rms, marker="o")
right.set_xlabel("i (residual stream entering layer i; i = L: after the last layer)")
right.set_ylabel("RMS over positions and width")
right.set_title("size of the residual stream")
plt.tight_layout()
plt.show()

probs = np.exp(layers.log_softmax(logits[-1]))  # [V]
print(f"after {tokenizer.decode(prompt_ids)!r} the model expects:")
for token in np.argsort(-probs)[:5]:
    print(f"  {show(token):>12}  p = {probs[token]:.3f}")

# %% [markdown]
# ## 4. The KV cache
#
# Decoding one token at a time only needs the new token's query: keys and values of the earlier
# positions never change, so we keep them in a cache. Prefill the prompt, then feed one token per
# forward; each step's logits equal the corresponding row of the full forward.

# %%
cache = KVCache.for_model(config, params, capacity=T)
split = T - 4
step_logits, _, _ = model.forward(params, config, ids[:split], cache=cache)  # prefill
print("after prefill: cache.length =", cache.length)
rows = [step_logits[-1]]
for t in range(split, T):
    step_logits, _, _ = model.forward(params, config, ids[t : t + 1], cache=cache)  # [1, V]
    rows.append(step_logits[-1])
    print(f"fed {show(ids[t])}: cache.length = {cache.length}")
cached_diff = np.abs(np.stack(rows) - logits[split - 1 :]).max()  # [5, V] vs the same rows
print("cached vs full forward: max |diff| =", cached_diff)
assert cached_diff < 1e-12

n_new = 12 if FAST else 64
for sampling in (SamplingParams(), SamplingParams(temperature=0.8, top_p=0.95)):
    result = generate(params, config, prompt_ids, max_new_tokens=n_new, sampling=sampling, seed=0)
    print(f"--- {sampling}: {len(result.tokens)} tokens, {result.ms_per_token:.2f} ms/token")
    print(tokenizer.decode(prompt_ids) + tokenizer.decode(result.tokens))
    if sampling.greedy:  # the cached loop picks the same tokens as full forwards without a cache
        assert result.tokens == greedy_reference(params, config, prompt_ids, len(result.tokens))

# %% [markdown]
# ## 5. A tree attention mask
#
# Speculative decoding checks many guesses in **one** target forward. The guesses form a tree
# (`minieagle.tree.Tree`: tokens and parent indices). Node 0, the *root*, is the last token we
# already have, not yet in the cache; below it hang the guesses: two children, and two
# grandchildren under each (here simply the target's own top-2, any tokens would do). A node may
# attend to the whole cache and to its ancestors, nothing else, and sits at position
# `cached + depth`. Then each node's logits equal those of a plain forward over the prompt
# followed by the node's root-to-node path.


# %%
def top2(context):
    """The target's two most likely next tokens after `context`."""
    logits_last = model.forward(params, config, np.asarray(context))[0][-1]  # [V]
    return [int(t) for t in np.argsort(-logits_last)[:2]]


first, second = top2(prompt_ids)
draft = trees.Tree(
    tokens=np.asarray(
        [prompt_ids[-1], first, second, *top2(prompt_ids + [first]), *top2(prompt_ids + [second])]
    ),
    parents=np.asarray([-1, 0, 0, 1, 1, 2, 2]),
)
N, past = len(draft), T - 1  # the cache holds the prompt up to, not including, the root
tree_mask = trees.attention_mask(draft, past)  # [N, past + N] bool
positions = trees.position_ids(draft, past)  # [N] = past + depth

shown = 6  # the last few cached columns are enough to see the pattern
plt.figure(figsize=(9, 4.5))
plt.imshow(tree_mask[:, past - shown :], cmap="Greys", vmin=0, vmax=1)
node_labels = [show(t) for t in draft.tokens]
plt.xticks(range(shown + N), labels[past - shown : past] + node_labels, rotation=90)
plt.yticks(range(N), [f"{n}: {t} @ {positions[n]}" for n, t in enumerate(node_labels)])
plt.axvline(shown - 0.5, color="tab:red")  # left: the cache, right: the tree
plt.xlabel(f"key: the last {shown} cached tokens | the {N} tree nodes")
plt.ylabel("query: node: token @ position")
plt.title("tree attention mask")
plt.legend(
    handles=[
        Patch(facecolor="black", label="may attend"),
        Patch(facecolor="white", edgecolor="grey", label="masked"),
        Line2D([], [], color="tab:red", label="cache | tree"),
    ],
    loc="upper left",
    bbox_to_anchor=(1.01, 1),
)
plt.tight_layout()
plt.show()

cache = KVCache.for_model(config, params, capacity=T + N)
model.forward(params, config, ids[:-1], cache=cache)  # prefill: everything but the root
tree_logits, _, _ = model.forward(
    params, config, draft.tokens, position_ids=positions, attention_mask=tree_mask, cache=cache
)  # [N, V]: all seven nodes in one forward
for n in range(N):
    path = prompt_ids[:-1] + draft.tokens[trees.path_to(draft, n)].tolist()
    plain = model.forward(params, config, np.asarray(path))[0][-1]  # [V]
    assert np.abs(tree_logits[n] - plain).max() < 1e-12, n
print(f"all {N} tree nodes match a plain forward of their path; cache.length = {cache.length}")

# %% [markdown]
# Suppose the verifier accepts the path root → node 1 → node 3: the target agrees with both
# guesses, and adds one token of its own after node 3 (the *bonus* token). The cache holds all
# seven nodes; `cache.keep(past, [0, 1, 3])` moves the accepted ones to positions `past, past + 1,
# past + 2` and drops the rest. Their keys were rotated for position `past + depth`, exactly where
# they now sit, so the cache is as if we had decoded the path one token at a time. This is what
# `minieagle.generate` does after every verification.

# %%
accepted = trees.path_to(draft, 3)
cache.keep(past, accepted)
print("kept nodes", accepted, "-> cache.length =", cache.length)
bonus = int(np.argmax(tree_logits[accepted[-1]]))  # the target's own token after node 3
after_keep = model.forward(params, config, np.asarray([bonus]), cache=cache)[0][-1]
path = prompt_ids[:-1] + draft.tokens[accepted].tolist() + [bonus]
plain = model.forward(params, config, np.asarray(path))[0][-1]
print("next step, cached vs plain: max |diff| =", np.abs(after_keep - plain).max())
assert np.abs(after_keep - plain).max() < 1e-12

# %% [markdown]
# ## 6. Checking a hand-written backward pass
#
# `model.loss_and_grads` computes every gradient with hand-written backward passes. We check one
# weight of every tensor of a `nano` model (the one with the largest gradient) against a centred
# finite difference,
# `(loss(w + ε) - loss(w - ε)) / 2ε`, whose error is O(ε²) in float64.

# %%
nano = preset("nano")
nano_params = model.init_params(nano, seed=0, dtype=np.float64)
rng = np.random.default_rng(0)
inputs, targets = (rng.integers(3, nano.vocab_size, size=(2, 8)) for _ in range(2))
_, grads = model.loss_and_grads(nano_params, nano, inputs, targets)
step = 1e-5
for name, w in nano_params.items():
    g = grads[name]
    index = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(g)), g.shape))  # largest
    saved = w[index]
    w[index] = saved + step
    plus = model.loss_and_grads(nano_params, nano, inputs, targets)[0]
    w[index] = saved - step
    minus = model.loss_and_grads(nano_params, nano, inputs, targets)[0]
    w[index] = saved
    numeric = (plus - minus) / (2 * step)
    error = abs(numeric - g[index]) / (abs(numeric) + abs(g[index]))
    print(f"{name:46} {str(index):8} {g[index]:+.6e} vs {numeric:+.6e}: rel. error {error:.0e}")
    assert error < 1e-6

# %% [markdown]
# ## Exercises
#
# Worked answers: `minieagle/assignments/notebook_answers/01_tiny_llama.md`.
#
# 1. **Predict, then run.** Give `model.decoder_layer_forward` an all-True mask
#    (`np.ones((T, T), dtype=bool)`) instead of the causal one and compare its output with the
#    causal output row by row. Which rows still agree after layer 0? After layers 0 and 1?
# 2. **Derive.** How many numbers does the KV cache hold per cached position, as a formula in
#    `num_hidden_layers`, `num_key_value_heads` and `head_dim`? Evaluate it for this model, give
#    the bytes of a full 512-token context in float64 and in float32, and say what grouped-query
#    attention saves against one key/value head per query head. Check your count with
#    `sum(k[0, :, 0].size for k in cache.keys + cache.values)`.
# 3. **Code.** Write `attention_mask_by_hand(parents, cached)` and `position_ids_by_hand(parents,
#    cached)` that only follow parent pointers, and check them with `np.array_equal` against
#    `minieagle.tree.attention_mask` and `position_ids` on section 5's tree and on
#    `trees.Tree.chain(5, [1, 2, 3])`, for `cached` = 0 and 7.
# 4. **Explain, then test.** Section 5 places node `n` at position `past + depth(n)`. Redo the
#    tree forward with `position_ids = past + np.arange(N)` (the node index instead of the depth)
#    and compare every node with the plain forward of its path. Which nodes still match, and why?
# 5. **Change and observe.** In section 6 set `step = 1e-2`, then `step = 1e-9`. Predict how the
#    relative errors move in each case and which term of the error causes it.
