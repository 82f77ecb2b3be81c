# %% [markdown]
# # 01 · A tiny Llama, one step at a time
#
# We follow one prompt through the shipped target model: text → tokens → embeddings → each decoder
# layer → logits. At every stage we redo the computation by hand with `minieagle.layers` and check
# that it equals the library's forward. Then we look at the KV cache and at a *tree* attention
# mask, the two tools speculative decoding is built from. The weights are loaded in float64, so
# "equal" means equal to rounding (1e-12), not "close".

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

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
# bytes, and every later id a merge of two earlier tokens. Any string round-trips.

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

# %% [markdown]
# ## 3. Looking inside
#
# Left: the attention pattern of one head, `softmax(q kᵀ / sqrt(head_dim) + causal mask)`, rows
# are queries, columns the keys they read. Right: the size of the residual stream entering each
# layer (`output_hidden[i]`); layer `L` is the stream after the last layer, before the final norm.

# %%
labels = [show(t) for t in ids]
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
left.imshow(attention[L // 2][0], cmap="viridis")
left.set_xticks(range(T), labels, rotation=90)
left.set_yticks(range(T), labels)
left.set_title(f"layer {L // 2}, head 0")
rms = [np.sqrt((hidden[i] ** 2).mean()) for i in range(L + 1)]  # RMS over positions and width
right.plot(range(L + 1), rms, marker="o")
right.set_xlabel("residual stream entering layer i")
right.set_ylabel("RMS")
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
plt.figure(figsize=(7, 4))
plt.imshow(tree_mask[:, past - shown :], cmap="Greys")
node_labels = [show(t) for t in draft.tokens]
plt.xticks(range(shown + N), labels[past - shown : past] + node_labels, rotation=90)
plt.yticks(range(N), [f"{n}: {t} @ {positions[n]}" for n, t in enumerate(node_labels)])
plt.axvline(shown - 0.5, color="tab:red")  # left: the cache, right: the tree
plt.title("tree mask (black = may attend), rows: node: token @ position")
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
