# %% [markdown]
# # 03 · EAGLE-1: drafting features, not tokens
#
# EAGLE-1 (Li et al. 2024) drafts with a single decoder layer, the *head*, that reads the target's
# own **feature** `f_t` (its last hidden state, after the final RMSNorm) and predicts the next one,
# `f̂_{t+1}`; the target's frozen LM head turns that into a draft distribution. The head also reads
# the token one step ahead: its input at position t is `[Embed(x_{t+1}), f_t]`.
#
# We first measure the shipped head and see why the shifted token matters (sections 1-2). Then, as
# notebook 01 did for the target's layers, we rebuild each mechanism by hand and check it against
# the library: the head's forward (3), the catch-up pass and the tree drafted level by level (4),
# verification (5), the catch-up after verification (6). Then a chain against EAGLE-1's 26-node
# tree (7), losslessness (8), and a head trained here, start to finish (9). The reference for every
# step is [docs/eagle1.md](../docs/eagle1.md).

# %%
import contextlib
import io
import os
import tempfile

import matplotlib.pyplot as plt
import numpy as np

from minieagle import layers, model
from minieagle import tree as trees
from minieagle.bench import heldout_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.data import load_split
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.generate import GenerationResult, generate
from minieagle.heads.eagle1 import (
    LAYER_PREFIX,
    eagle1_metrics,
    head_forward,
    load_head,
    new_head_cache,
)
from minieagle.kvcache import KVCache
from minieagle.plotting import draw_tree
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.static_trees import resolve_tree
from minieagle.train_eagle import EagleTrainConfig, load_or_train_head, train_eagle1
from minieagle.verify import verify

FAST = os.environ.get("MINIEAGLE_FAST") == "1"  # the test suite sets it: shorter loops
GREEDY = SamplingParams()
target_dir, head_dir = DEFAULT_MODEL, PRETRAINED / "small-eagle1"
params, config, tokenizer = load_checkpoint(target_dir, dtype=np.float64)
# No shipped head (yet)? A small stand-in is trained, weaker than the real one.
head, head_cfg = load_or_train_head(
    head_dir, target_dir, steps=150 if FAST else 1000, max_train_chars=40_000 if FAST else 0
)
lm_head = model.lm_head_weight(params)  # [V, d], tied to the embedding in the small target
n_head, V = sum(w.size for w in head.values()), config.vocab_size
print(f"head: fc {head['fc.weight'].shape} + one decoder layer, {n_head:,} trainable parameters")


show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n


def softmax(logits):
    """The [V] probabilities of [V] logits at temperature 1."""
    return target_distribution(logits, SamplingParams(temperature=1.0))


def cosine(u, v):
    """Cosine similarity along the last axis: [.., d] x [.., d] -> [..]."""
    return (u * v).sum(-1) / np.linalg.norm(u, axis=-1) / np.linalg.norm(v, axis=-1)


# %% [markdown]
# ## 1. Predicting the next feature, and through it the next token
#
# The feature is what the LM head reads: `logits = f @ LMHeadᵀ`. On held-out text (the `test`
# splits) we run the target once for the features, then the head over every position at once
# (`head_forward`, causal, as in training), and compare `f̂_{t+1}` with the real `f_{t+1}`: cosine
# similarity, SmoothL1 (the regression loss), and **top-1 agreement** (the head's argmax token is
# the target's). The baseline "the feature does not change" (`f̂_{t+1} = f_t`) is the yardstick.

# %%
length, per_corpus = 128, 2 if FAST else 8
texts = [
    doc.text[: 8 * length]
    for corpus in ("prose", "code")
    for doc in [d for d in load_split(corpus, "test") if len(d.text) >= 8 * length][:per_corpus]
]
windows = np.stack([tokenizer.encode(text, add_bos=True)[: length + 1] for text in texts])
logits, hidden, _ = model.forward(params, config, windows, output_hidden=("final",))  # [B, L+1, V]
assert np.abs(hidden["final"] @ lm_head.T - logits).max() < 1e-10  # the LM head's input
tokens = windows[:, 1:]  # [B, L] x_{t+1}, the shifted tokens
features, next_features = hidden["final"][:, :-1], hidden["final"][:, 1:]  # [B, L, d] each
predicted, _, _ = head_forward(head, head_cfg, params, tokens, features)  # [B, L, d]

target_top1 = logits[:, 1:].argmax(-1)  # [B, L]: the target's token after each head position
for name, guess in (("head f̂_t+1", predicted), ("copy f_t", features)):
    agree = ((guess @ lm_head.T).argmax(-1) == target_top1).mean()
    print(f"{name:11} cos(guess, f_t+1) = {cosine(guess, next_features).mean():.3f}, "
          f"top-1 agreement = {agree:.3f}")  # fmt: skip
mask = np.ones(tokens.shape, dtype=bool)
metrics = eagle1_metrics(head, head_cfg, params, tokens, features, next_features, mask)
print(f"head: SmoothL1 = {metrics['smooth_l1']:.4f}, soft CE = {metrics['soft_ce']:.3f}, "
      f"Σ min(p, q) = {metrics['accept']:.3f} (a first draft's acceptance at T = 1)")  # fmt: skip
plt.figure(figsize=(6, 3))
bins = np.linspace(-0.2, 1, 49)
for guess, label in ((features, r"copy: $f_t$"), (predicted, r"head: $\hat f_{t+1}$")):
    plt.hist(cosine(guess, next_features).ravel(), bins, alpha=0.6, label=label)
plt.xlabel(r"cos(guess, $f_{t+1}$)")
plt.ylabel("positions")
plt.title(f"{windows.size - len(windows)} held-out positions")
plt.legend(loc="upper left")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. The shifted token removes the sampling uncertainty
#
# The feature `f_t` summarises the text up to `x_t`, but `x_{t+1}` is then *sampled* from
# `softmax(LMHead(f_t))`. Where that distribution is split between two tokens, `f_{t+1}` depends on
# which one came out, and a head fed `f_t` alone could only predict a blur of both futures. EAGLE
# feeds the sampled token too, so the head knows which branch it is on (docs/eagle1.md, "Why the
# shifted token").
#
# We take the held-out position where the target is most evenly split between its top two tokens
# `a` and `b`, feed the head `[Embed(a), f_t]` or `[Embed(b), f_t]`, and compare its distribution
# `q` over `x_{t+2}` with the target's `p` after `… a` and after `… b`. A head that uses the token
# follows the branch it was given: its overlap `Σ min(p, q)` should be larger with that branch's
# `p`. The cell prints, for each branch, whether it is.

# %%
probs = np.stack([softmax(row) for row in logits[:, :-1].reshape(-1, V)])  # [B*L, V]
row, t = divmod(int(np.argmax(np.sort(probs, axis=-1)[:, -2])), length)  # max 2nd probability
p_split = probs[row * length + t]  # [V] the target's distribution over x_{t+1}
a, b = np.argsort(-p_split)[:2]
prefix = windows[row, : t + 1]  # [t + 1] = x_0 .. x_t
print(f"…{tokenizer.decode(prefix[-12:].tolist())!r} -> p({show(a)!r}) = {p_split[a]:.2f}, "
      f"p({show(b)!r}) = {p_split[b]:.2f}")  # fmt: skip
p = {c: softmax(model.forward(params, config, np.append(prefix, c))[0][-1]) for c in (a, b)}
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
for ax, choice in zip(axes, (a, b), strict=True):
    other = b if choice == a else a
    shifted = np.append(tokens[row, :t], choice)  # [t + 1] = x_1 .. x_t, then the choice
    _, head_logits, _ = head_forward(head, head_cfg, params, shifted, features[row, : t + 1])
    q = softmax(head_logits[-1])  # [V] the head's draft distribution over x_{t+2}
    same, crossed = np.minimum(p[choice], q).sum(), np.minimum(p[other], q).sum()
    print(f"head given {show(choice)!r}: Σ min(p, q) with p after {show(choice)!r} = "
          f"{same:.2f}, after {show(other)!r} = {crossed:.2f} -> follows its branch: "
          f"{same > crossed}")  # fmt: skip
    shown = np.argsort(-(p[choice] + q))[:8]  # the 8 tokens with the most mass in either
    ax.bar(np.arange(8) - 0.2, p[choice][shown], 0.4, label=f"target after …{show(choice)}")
    ax.bar(np.arange(8) + 0.2, q[shown], 0.4, label=f"head given $x_{{t+1}}$ = {show(choice)}")
    ax.set_xticks(np.arange(8), [show(s) for s in shown])
    ax.set_xlabel(r"token $x_{t+2}$ (the 8 most likely under either)")
    ax.set_ylabel("probability")
    ax.set_title(f"branch {show(choice)!r}")
    ax.legend(loc="upper right")
plt.tight_layout()
plt.show()

# %% [markdown]
# The paper's ablation (Fig. 4, Vicuna 7B) puts numbers on the idea: a head reading only tokens
# gave a 1.5x speedup, only features 1.9x, features and the shifted token 2.8x.
#
# ## 3. The head by hand
#
# `heads.eagle1.head_forward` is five steps (docs/eagle1.md, "The head"):
#
# ```
# e  = E[x_{t+1}]                 [T, d]    the target's embedding, frozen
# z  = [e, f_t]                   [T, 2d]   concatenated in this order
# x  = z W_fcᵀ + b_fc             [T, d]    fc: Linear 2d -> d
# f̂  = DecoderLayer(x)            [T, d]    one Llama layer WITHOUT input_layernorm
# q  = softmax(f̂ W_lmᵀ)           [T, V]    the target's LM head, frozen
# ```
#
# We run them on the pairs the drafter reads first, the prompt's: `(f_t, x_{t+1})` for
# t = 0 … n − 2 (the last prompt token is the first *root*; its own feature is not known yet). The
# decoder layer is notebook 01's `layer_by_hand` minus the first RMSNorm: the layer attends over
# `x` itself. Each step uses the same `minieagle.layers` calls as the library in the same order,
# so every intermediate must equal the library's **bit for bit**; we read the library's
# intermediates from the caches `head_forward(..., keep_caches=True)` keeps for the backward pass.

# %%
prompt_ids = tokenizer.encode("def read_config(path):\n    with open(path) as", add_bos=True)
ids = np.asarray(prompt_ids)  # [n]
_, prompt_hidden, _ = model.forward(params, config, ids[:-1], output_hidden=("final",))
prompt_features = prompt_hidden["final"]  # [n - 1, d]: f_0 .. f_{n-2}
shifted_tokens = ids[1:]  # [n - 1]: x_1 .. x_{n-1}, the last one the root
T = len(shifted_tokens)
layer_cfg = head_cfg.layer
H, Hkv, hd = layer_cfg.num_attention_heads, layer_cfg.num_key_value_heads, layer_cfg.head_dim
w = {name.removeprefix(LAYER_PREFIX): value for name, value in head.items()}  # fc.*, mlp.*, ...


def head_layer_by_hand(x, cos, sin, mask):
    """The head's decoder layer on x [1, T, d], without input_layernorm -> f̂ [1, T, d]."""
    q = layers.linear_forward(x, w["self_attn.q_proj.weight"])[0]  # [1, T, H*hd]
    k = layers.linear_forward(x, w["self_attn.k_proj.weight"])[0]  # [1, T, Hkv*hd]
    v = layers.linear_forward(x, w["self_attn.v_proj.weight"])[0]
    # split into heads: [1, T, heads*hd] -> [1, heads, T, hd]
    q, k, v = (t.reshape(1, x.shape[1], -1, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
    q, _ = layers.rope_forward(q, cos, sin)
    k, _ = layers.rope_forward(k, cos, sin)
    a, _ = layers.attention_forward(q, k, v, mask)  # [1, H, T, hd]
    a = a.transpose(0, 2, 1, 3).reshape(1, x.shape[1], H * hd)  # [1, T, H*hd]
    h = x + layers.linear_forward(a, w["self_attn.o_proj.weight"])[0]  # residual, [1, T, d]
    m, _ = layers.rmsnorm_forward(h, w["post_attention_layernorm.weight"], layer_cfg.rms_norm_eps)
    gate = layers.linear_forward(m, w["mlp.gate_proj.weight"])[0]  # [1, T, I]
    up = layers.linear_forward(m, w["mlp.up_proj.weight"])[0]
    mlp = layers.linear_forward(layers.swiglu_forward(gate, up)[0], w["mlp.down_proj.weight"])[0]
    return h + mlp


e, _ = layers.embedding_forward(params["model.embed_tokens.weight"], shifted_tokens[None])
z = np.concatenate([e, prompt_features[None]], axis=-1)  # [1, T, d] ++ [1, T, d] -> [1, T, 2d]
x = layers.linear_forward(z, w["fc.weight"])[0] + w["fc.bias"]  # [1, T, 2d] -> [1, T, d]
cos, sin = layers.rope_tables(np.arange(T), hd, layer_cfg.rope_theta, x.dtype)  # [T, hd] each
f_hat = head_layer_by_hand(x, cos, sin, model.causal_mask(0, T))  # [1, T, d]
draft_logits_by_hand = layers.linear_forward(f_hat, lm_head)[0]  # [1, T, V]

library_f_hat, library_logits, (c_fc, c_layer, _, _) = head_forward(
    head, head_cfg, params, shifted_tokens, prompt_features, keep_caches=True
)
library_z = c_fc[0]  # fc's input, kept for its backward
library_x = c_layer[1][0][0]  # q_proj's input: x itself, as the layer has no input_layernorm
for name, ours, library in (
    ("z = [e, f]", z, library_z),
    ("x = fc(z)", x, library_x),
    ("f̂", f_hat[0], library_f_hat),
    ("logits", draft_logits_by_hand[0], library_logits),
):
    np.testing.assert_array_equal(ours, library)  # same operations, same order: bit for bit
    print(f"{name:10} {str(ours.shape):14} by hand == head_forward, bit for bit")
root_q = softmax(library_logits[-1])  # [V]: the draft distribution over the root's children
print(f"after the root {show(ids[-1])!r} the head drafts:",
      ", ".join(f"{show(c)!r} {root_q[c]:.2f}" for c in np.argsort(-root_q)[:4]))  # fmt: skip

# %% [markdown]
# ## 4. The catch-up pass, then the tree level by level
#
# `Eagle1Drafter.propose` (docs/eagle1.md, "Drafting") does two things each cycle:
#
# 1. **Catch-up**: one head forward over every pair the target has committed since the last cycle,
#    appended to the head's KV cache. In the first cycle that is the prompt's pairs of section 3;
#    the last output is `f̂` at the root and the draft distribution over its children.
# 2. **Level by level**: the static tree (`static_trees.resolve_tree("default")`, 25 paths of child
#    ranks such as `(0, 2)` = "the third child of the most likely child") is filled one depth at a
#    time. A node's children are the top-ranked tokens of the draft distribution at it; then **one
#    head forward** reads every node of the level that has children of its own, each as the pair
#    (`f̂` at its parent, its token), at position id `committed − 1 + depth`, under a mask that lets
#    it see the committed cache, the slots of its own ancestors and itself.
#
# To compare the drafter with our rebuild we listen in on it: a small wrapper records the tokens,
# position ids and mask of every head forward it makes.


# %%
def listen_in(drafter, calls: list) -> None:
    """Make `drafter` append to `calls`, for each head forward, its tokens, features, the head
    cache's length before it and its placement (position ids, mask), then run it unchanged."""
    library_forward = drafter.draft.forward

    def recorded(tokens, features, cache, **kwargs):
        placement = {k: v for k, v in kwargs.items() if k in ("position_ids", "attention_mask")}
        calls.append(dict(tokens=np.asarray(tokens), features=np.asarray(features),
                          past=cache.length, **placement))  # fmt: skip
        return library_forward(tokens, features, cache, **kwargs)

    drafter.draft.forward = recorded


cache = KVCache.for_model(config, params)  # the target's cache: the prompt without the root
model.forward(params, config, ids[:-1], cache=cache)
drafter = Eagle1Drafter(params, config, head, head_cfg)  # choices="default": 26 nodes
drafter.begin(prompt_ids, prompt_hidden, GREEDY)
calls = []  # one dict per head forward the drafter makes
listen_in(drafter, calls)
rng = SeededRandomness(0)
draft_tree = drafter.propose(prompt_ids[-1], rng, max_nodes=64)
committed = drafter.committed  # head-cache slots holding real pairs: the prompt's n - 1

catch_up = calls[0]
np.testing.assert_array_equal(catch_up["tokens"], shifted_tokens)  # x_1 .. x_{n-1}
np.testing.assert_array_equal(catch_up["features"], prompt_features)  # f_0 .. f_{n-2}
assert catch_up["past"] == 0 and "attention_mask" not in catch_up  # an empty cache, causal
assert committed == T
root_gap = np.abs(drafter.draft_logits[0] - library_logits[-1]).max()
print(f"catch-up: {T} prompt pairs, causal; root logits vs section 3: max |diff| = {root_gap:.1e}")
np.testing.assert_allclose(drafter.draft_logits[0], library_logits[-1], rtol=0, atol=1e-12)

# %% [markdown]
# The drafter's root logits equal ours to rounding, not bit for bit: it runs the head on the fast
# path (`inference.PreparedEagle1Head`), which multiplies by the q, k, v projections as one fused
# matrix and by transposed weights, so BLAS sums the same products in another order. Hence
# `assert_allclose(..., atol=1e-12)` (float64) from here on.
#
# Now the tree by hand. Our own head cache gets the same catch-up; then per level we pick the
# children by rank (`np.argsort(-logits, kind="stable")`: most likely first, the lowest id on
# ties, the drafter's rule), build the level's mask from `tree.ancestor_mask` of the tree so far
# and its position ids from `tree.position_ids`, and run `head_forward` on the level.

# %%
paths = resolve_tree("default")  # sorted by depth, then ranks: parents first
has_children = {path[:-1] for path in paths}
head_cache = new_head_cache(head_cfg, head, capacity=config.max_position_embeddings)
catch_up_f_hat, catch_up_logits, _ = head_forward(
    head, head_cfg, params, shifted_tokens, prompt_features, cache=head_cache
)
np.testing.assert_array_equal(catch_up_logits, library_logits)  # with a cache: the same bits

node_of = {(): 0}  # path of ranks -> node index
tree_tokens, tree_parents = [prompt_ids[-1]], [-1]
node_f_hat, node_logits = {0: catch_up_f_hat[-1]}, {0: catch_up_logits[-1]}  # node -> [d], [V]
slots = []  # nodes whose draft pairs follow the committed ones in the head cache, in order
level_masks = []  # (depth, fed nodes, mask, draft slots so far) of each level, for the figure
drafter_levels = iter(calls[1:])  # the drafter's head forwards after its catch-up
for depth in range(1, max(map(len, paths)) + 1):
    level = [path for path in paths if len(path) == depth]
    for path in level:
        parent = node_of[path[:-1]]
        ranked = np.argsort(-node_logits[parent], kind="stable")  # [V] most likely first
        node_of[path] = len(tree_tokens)
        tree_tokens.append(int(ranked[path[-1]]))
        tree_parents.append(parent)
    fed = [node_of[path] for path in level if path in has_children]
    if not fed:  # the deepest level: its nodes have no children to draft
        continue
    call = next(drafter_levels)
    slots += fed
    so_far = trees.Tree(np.asarray(tree_tokens), np.asarray(tree_parents))
    ancestors = trees.ancestor_mask(so_far)[np.ix_(fed, slots)]  # [T, drafted slots]
    level_mask = np.concatenate([np.ones((len(fed), committed), dtype=bool), ancestors], axis=1)
    positions = trees.position_ids(so_far, committed - 1)[fed]  # [T] = committed - 1 + depth
    np.testing.assert_array_equal(level_mask, call["attention_mask"])  # what the drafter used
    np.testing.assert_array_equal(positions, call["position_ids"])
    np.testing.assert_array_equal([tree_tokens[n] for n in fed], call["tokens"])
    level_f_hat, level_logits, _ = head_forward(
        head, head_cfg, params, np.asarray([tree_tokens[n] for n in fed]),
        np.stack([node_f_hat[tree_parents[n]] for n in fed]),  # [T, d] f̂ at each parent
        position_ids=positions, attention_mask=level_mask, cache=head_cache,
    )  # fmt: skip
    for i, node in enumerate(fed):
        node_f_hat[node], node_logits[node] = level_f_hat[i], level_logits[i]
    level_masks.append((depth, fed, level_mask, list(slots)))
    print(f"depth {depth}: {len(level)} nodes drafted, {len(fed)} fed at position "
          f"{positions[0]}; mask {level_mask.shape} == the drafter's")  # fmt: skip

np.testing.assert_array_equal(tree_tokens, draft_tree.tokens)
np.testing.assert_array_equal(tree_parents, draft_tree.parents)
assert len(calls) == 1 + len(level_masks) and head_cache.length == drafter.cache.length
for node, row in node_logits.items():
    np.testing.assert_allclose(row, drafter.draft_logits[node], rtol=0, atol=1e-12)
print(f"tree by hand == drafter.propose: {len(draft_tree)} tokens and parents; "
      f"{1 + len(level_masks)} head forwards (catch-up + {len(level_masks)} levels)")  # fmt: skip

fig, axes = plt.subplots(1, len(level_masks), figsize=(13, 2.8),
                         width_ratios=[1 + len(level[3]) for level in level_masks])  # fmt: skip
for ax, (depth, fed, level_mask, drafted) in zip(axes, level_masks, strict=True):
    ax.imshow(level_mask[:, committed - 1 :], cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.axvline(0.5, color="tab:red")  # left: the last committed slot, right: the draft slots
    ax.set_xticks(range(1 + len(drafted)), ["…"] + [str(n) for n in drafted])
    ax.set_yticks(range(len(fed)), [str(n) for n in fed])
    ax.set_xlabel("key: committed | draft slot (node)")
    ax.set_ylabel("query node")
    ax.set_title(f"depth {depth}")
fig.suptitle("the head's attention mask at each level (black = may attend)")
plt.tight_layout()
plt.show()

# %% [markdown]
# Each level's nodes see every committed slot (left of the red line; only the last one is drawn,
# as "…"), then only the draft slots of their own ancestors and themselves: never a sibling or a
# cousin. The mask's
# width grows by each level's nodes because the draft slots stay in the head cache until the next
# cycle crops them.
#
# ## 5. Verification, drawn as a tree
#
# The target verifies all 26 nodes in **one** forward, with its own tree mask
# (`tree.attention_mask`, nodes at `cached + depth`, notebook 01 section 5), and `verify` walks
# down from the root (docs/lossless.md): at each reached node it tries the children **in order**
# and descends into the first one it accepts (at T = 0: the one equal to the target's argmax). So
# the siblings after an accepted child are never tried. The picture (`plotting.draw_tree`)
# colours each node by what the verifier did with it.

# %%
cached = cache.length
placement = dict(  # each node at position cached + depth, seeing the cache and its ancestors
    position_ids=trees.position_ids(draft_tree, cached),  # [N]
    attention_mask=trees.attention_mask(draft_tree, cached),  # [N, cached + N]
)
tree_logits, tree_hidden, _ = model.forward(
    params, config, draft_tree.tokens, cache=cache, output_hidden=("final",), **placement
)  # [N, V], and the target's features at the N nodes
target_probs = np.stack([target_distribution(row, GREEDY) for row in tree_logits])  # [N, V]
verdict = verify(draft_tree, target_probs, rng)
emitted = [*draft_tree.tokens[verdict.accepted].tolist(), verdict.next_token]
print(f"{len(draft_tree)} nodes in one target forward: {len(verdict.accepted)} accepted + 1")
print(repr(tokenizer.decode(prompt_ids)), "+", repr(tokenizer.decode(emitted)))

fig, axes = plt.subplots(1, 2, figsize=(14, 6.5), width_ratios=(2, 1))
draft_probs = [1.0] + [  # the head's probability of each draft given its parent (the root: 1)
    softmax(drafter.draft_logits[p])[t]
    for p, t in zip(draft_tree.parents[1:], draft_tree.tokens[1:], strict=True)
]  # fmt: skip
labels = [f"{show(t)}\n{q:.2f}" for t, q in zip(draft_tree.tokens, draft_probs, strict=True)]
draw_tree(axes[0], draft_tree, verdict.accepted, labels, next_token=show(verdict.next_token))
axes[0].set_title("one EAGLE-1 cycle: each draft with the head's probability for it")
shown_cache = 4  # the mask's first `cached` columns are all True; show the last 4 of them
axes[1].imshow(trees.attention_mask(draft_tree, cached)[:, cached - shown_cache :], cmap="Greys")
axes[1].axvline(shown_cache - 0.5, color="tab:red")
axes[1].set_title(f"target's tree mask (… {shown_cache} cache columns | {len(draft_tree)} nodes)")
axes[1].set_xlabel("key (cache position, then node)")
key_ticks = [0, shown_cache, *range(shown_cache + 5, shown_cache + len(draft_tree), 5)]
axes[1].set_xticks(key_ticks, [f"pos {cached - shown_cache}", "node 0",
                               *(str(k - shown_cache) for k in key_ticks[2:])])  # fmt: skip
axes[1].set_ylabel("query node")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 6. Catching up after verification
#
# The head's KV cache must hold real features only (docs/eagle1.md, "The head's KV cache holds
# real features only"). The draft slots of section 4 paired the head's *guesses* `f̂` with draft
# tokens; now the target has computed the real features of the accepted path in its verification
# forward. `accept` queues the new committed pairs
#
# `(f(root), a_1), (f(a_1), a_2), …, (f(a_k), next)`
#
# for the accepted drafts `a_1 … a_k` and the target's next token, and the next `propose` crops the
# draft slots and reads those pairs in one catch-up forward before it drafts again. By hand: the
# same pairs, our cache cropped to the committed slots, one `head_forward`.

# %%
path = [0, *verdict.accepted]  # the root and the accepted drafts
cache.keep(cached, path)  # the target's cache keeps the accepted path (notebook 01, section 5)
fresh = tree_hidden["final"][path]  # [k + 1, d]: the target's features at root, a_1 .. a_k
for node, f in zip(path, fresh, strict=True):
    if node in node_f_hat:  # a fed node's f̂ was the head's guess of the feature there
        print(f"node {node:2} {show(draft_tree.tokens[node])!r:9}: cos(head's guess f̂, target's "
              f"f) = {cosine(node_f_hat[node], f):.3f}")  # fmt: skip
drafter.accept(draft_tree.tokens[path].tolist(), {"final": fresh}, verdict.next_token)
pending_tokens = np.asarray([*draft_tree.tokens[verdict.accepted], verdict.next_token])  # [k + 1]
next_tree = drafter.propose(verdict.next_token, rng, max_nodes=64)

catch_up = calls[1 + len(level_masks)]  # the first head forward of the second cycle
np.testing.assert_array_equal(catch_up["tokens"], pending_tokens)
np.testing.assert_array_equal(catch_up["features"], fresh)
assert catch_up["past"] == committed  # the draft slots were cropped before it
head_cache.crop(committed)
_, pending_logits, _ = head_forward(
    head, head_cfg, params, pending_tokens, fresh, cache=head_cache
)  # [k + 1, V]
np.testing.assert_allclose(drafter.draft_logits[0], pending_logits[-1], rtol=0, atol=1e-12)
assert drafter.committed == head_cache.length == committed + len(path)
print(f"catch-up: {len(path)} new pairs after {committed} committed ones, as by hand")

# The same root logits from scratch: the target and the head over the whole text, no cache.
text = [*prompt_ids, *pending_tokens.tolist()]  # prompt, accepted drafts, next token (new root)
_, text_hidden, _ = model.forward(params, config, np.asarray(text[:-1]), output_hidden=("final",))
_, uncached_logits, _ = head_forward(head, head_cfg, params, np.asarray(text[1:]),
                                     text_hidden["final"])  # fmt: skip
gap = np.abs(drafter.draft_logits[0] - uncached_logits[-1]).max()
print(f"two catch-ups with a cache vs one uncached head forward over all {len(text) - 1} pairs: "
      f"max |diff| = {gap:.1e}")  # fmt: skip
np.testing.assert_allclose(drafter.draft_logits[0], uncached_logits[-1], rtol=0, atol=1e-12)

# %% [markdown]
# The head's guesses `f̂` along the accepted path are close to the target's features, not equal
# to them (the cosines above). Keeping them would feed the head its own errors cycle after cycle;
# the catch-up replaces them by the real features, so each cycle drafts from the state a head
# forward over the whole text would reach, equal to rounding (the last check).
#
# ## 7. Chain vs tree
#
# A chain of 5 drafts (`chain:5`) against the 26-node tree, greedy, on held-out prompts. τ counts
# the tokens emitted per target forward (the bonus token included; vanilla decoding has τ = 1).
# n-α (`acceptance_by_depth`) is the chance a draft at depth n + 1 is accepted when everything
# above it was; in the tree, any of the siblings at that depth may be the accepted one.

# %%
prompts = heldout_prompts(tokenizer, per_corpus=3 if FAST else 6)
n_new = 48 if FAST else 128
runs = {  # tree -> one GenerationResult per prompt; a drafter holds one sequence's state
    choices: [generate(params, config, ids, max_new_tokens=n_new,
                       drafter=Eagle1Drafter(params, config, head, head_cfg, choices=choices))
              for _, ids in prompts]
    for choices in ("chain:5", "default")
}  # fmt: skip


def pooled(results) -> GenerationResult:
    """One GenerationResult holding every cycle of `results`, for τ and n-α over all prompts."""
    total = GenerationResult([], 0, "", 0)
    for result in results:
        total.accepted_per_cycle += result.accepted_per_cycle
        total.emitted_per_cycle += result.emitted_per_cycle
        total.drafted_depth_per_cycle += result.drafted_depth_per_cycle
    return total


fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
for offset, (choices, results) in zip((-0.2, 0.2), runs.items(), strict=True):
    alpha = pooled(results).acceptance_by_depth(5)
    tau = pooled(results).tau
    print(f"{choices:8} tau = {tau:.2f}, n-alpha (n = 0..4) =", np.round(alpha, 2))
    axes[0].bar(np.arange(5) + offset, alpha, 0.4, label=f"{choices} (τ = {tau:.2f})")
    axes[1].bar(np.arange(len(prompts)) + offset, [r.tau for r in results], 0.4, label=choices)
axes[0].set_xlabel("n (drafted features already in the input)")
axes[0].set_ylabel("n-α")
axes[0].set_ylim(0, 1.35)
axes[0].set_title("acceptance by depth, all prompts pooled")
axes[0].legend(loc="upper center", ncol=2)
axes[1].set_xticks(
    np.arange(len(prompts)), [f"{corpus[0]}{i}" for i, (corpus, _) in enumerate(prompts)]
)
axes[1].set_xlabel("held-out prompt (p = prose, c = code)")
axes[1].set_ylabel("τ (tokens per target forward)")
axes[1].set_ylim(0, 1.3 * max(r.tau for results in runs.values() for r in results))
axes[1].set_title("τ per prompt")
axes[1].legend(loc="upper center", ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 8. Lossless: greedy EAGLE-1 emits the target's own greedy tokens
#
# However good or bad the head, verification keeps only what the target would have produced.
# At temperature 0 that means the very same token sequence as vanilla greedy decoding. Every
# cycle emits at least one token, so it never takes more target forwards than vanilla decoding,
# which takes one per token.

# %%
for (corpus, ids), chain, tree in zip(prompts, runs["chain:5"], runs["default"], strict=True):
    vanilla = generate(params, config, ids, max_new_tokens=n_new)
    assert chain.tokens == vanilla.tokens and tree.tokens == vanilla.tokens
    forwards = vanilla.target_forwards, chain.target_forwards, tree.target_forwards
    assert max(forwards[1:]) <= forwards[0] == len(vanilla.tokens)
    print(f"{corpus:5}: the same {len(vanilla.tokens):3} tokens ({vanilla.stop_reason}); target "
          "forwards: vanilla {:3}, chain {:3}, tree {:3}".format(*forwards))  # fmt: skip

# %% [markdown]
# ## 9. Training a head, start to finish
#
# Where does the head come from? `train_eagle.train_eagle1` (docs/eagle1.md, "Training") runs the
# frozen target over random windows of the `prose` and `code` train splits for the features, and
# trains the head's `fc` and layer on
#
# `L = SmoothL1(f̂_{t+1}, f_{t+1}) + 0.1 · CE(p_{t+1}, q_{t+1})`
#
# (feature regression plus the cross-entropy of the draft distribution against the target's own),
# with `U(−0.1, 0.1)` noise on the input features, AdamW, warmup and a cosine schedule. Every
# `eval_every` steps it measures both terms on fixed `val` windows. The shipped head had 2500 steps
# of 8 windows × 256 positions; ours gets a small fraction of that, and we compare the two on the
# test windows of section 1 and with τ on two of the prompts of section 7.

# %%
steps = 30 if FAST else 300
with tempfile.TemporaryDirectory() as run_dir:
    train_cfg = EagleTrainConfig(
        target=str(target_dir), out_dir=run_dir, steps=steps, batch_size=2 if FAST else 4,
        seq_len=32 if FAST else 64, warmup_steps=steps // 10, eval_every=steps // 10,
        eval_batches=1 if FAST else 2, save_every=steps, export_dir=f"{run_dir}/head",
        max_train_chars=20_000 if FAST else 300_000,  # a prefix of each corpus: quick to tokenize
    )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):  # its per-evaluation lines: plotted below
        log = train_eagle1(train_cfg, progress=False)
    trained_head, trained_cfg = load_head(f"{run_dir}/head", dtype=np.float64)
positions_seen = steps * train_cfg.batch_size * train_cfg.seq_len
print(f"trained {steps} steps x {train_cfg.batch_size} windows x {train_cfg.seq_len} positions = "
      f"{positions_seen:,} positions (the shipped head: {2500 * 8 * 256:,}), "
      f"{log['s_per_step']:.2f} s per step")  # fmt: skip

evals = log["evals"]
for part in ("smooth_l1", "soft_ce"):
    first, last = ([evals[i][f"val_{part}_{c}"] for c in ("prose", "code")] for i in (0, -1))
    print(f"val {part:9} (prose, code): step 0 {np.round(first, 3)} -> step {steps} "
          f"{np.round(last, 3)}")  # fmt: skip
    assert all(b < a for a, b in zip(first, last, strict=True))  # both corpora learned
for name, candidate, candidate_cfg in (
    ("trained", trained_head, trained_cfg),
    ("shipped", head, head_cfg),
):
    test = eagle1_metrics(candidate, candidate_cfg, params, tokens, features, next_features, mask)
    print(f"{name} head on section 1's test windows: SmoothL1 = {test['smooth_l1']:.3f}, "
          f"soft CE = {test['soft_ce']:.2f}, top-1 = {test['top1']:.3f}")  # fmt: skip
couple = [0, len(prompts) // 2]  # section 7's first prose and first code prompt
taus = {"trained": [], "shipped": []}
for i in couple:
    trained_drafter = Eagle1Drafter(params, config, trained_head, trained_cfg)
    trained_run = generate(
        params, config, prompts[i][1], max_new_tokens=n_new, drafter=trained_drafter
    )
    assert trained_run.tokens == runs["default"][i].tokens  # lossless with either head
    taus["trained"].append(trained_run.tau)
    taus["shipped"].append(runs["default"][i].tau)
    print(f"prompt {prompts[i][0][0]}{i}, default tree: τ = {taus['trained'][-1]:.2f} with the "
          f"trained head, {taus['shipped'][-1]:.2f} with the shipped head")  # fmt: skip

fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
step_axis = [record["step"] for record in evals]
for ax, part, label in ((axes[0], "smooth_l1", "SmoothL1(f̂, f)"),
                        (axes[1], "soft_ce", "CE(p, q)")):  # fmt: skip
    for corpus in ("prose", "code"):
        ax.plot(step_axis, [r[f"val_{part}_{corpus}"] for r in evals], marker="o", label=corpus)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{label}, val windows")
    ax.set_title(("feature regression" if part == "smooth_l1" else "token cross-entropy")
                 + " (validation)")  # fmt: skip
    ax.legend(loc="upper right")
for offset, (name, values) in zip((-0.2, 0.2), taus.items(), strict=True):
    axes[2].bar(np.arange(len(couple)) + offset, values, 0.4, label=f"{name} head")
axes[2].set_xticks(np.arange(len(couple)), [f"{prompts[i][0][0]}{i}" for i in couple])
axes[2].set_xlabel("held-out prompt (section 7's labels)")
axes[2].set_ylabel("τ, default tree")
axes[2].set_ylim(0, 1.3 * max(max(v) for v in taus.values()))
axes[2].set_title("τ on two held-out prompts")
axes[2].legend(loc="upper center", ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# Both terms fall from the untrained head's values at step 0 (the assert checks the last
# evaluation against the first). With so few positions the trained head should still be well
# behind the shipped one; the cell prints both on the same test windows and the same two prompts.
# Whatever the head, the output is the target's: the assert above checks that both heads emit
# the same tokens.
#
# ## Exercises
#
# Worked answers: `minieagle/assignments/notebook_answers/03_eagle1.md`.
#
# 1. **Change and observe.** In section 9, train with `inputs="feature"` in `EagleTrainConfig`
#    (the paper's feature-only ablation: the head never sees the sampled token). Before running,
#    predict how the final validation CE, the test top-1 and τ compare with the `token+feature`
#    head trained for the same steps. Which section of this notebook explains the direction?
# 2. **Positions.** In the first cycle `committed` (head cache) equals `cached` (target cache), yet
#    the drafter puts a depth-k node at `committed − 1 + k` and the target puts the same node at
#    `cached + k`. Explain the offset from what one head position holds, and check it on the
#    prompt of section 3.
# 3. **What the verifier tried.** In section 5's picture, count the drafts the verifier actually
#    tested. Show that at T = 0, whatever the tree, it tests at most
#    Σ (number of children) over the root and the accepted nodes, and say when it tests exactly
#    that many. Why would colouring the siblings after an accepted child "rejected" be wrong?
# 4. **Code: a chain by hand.** Write `draft_chain(root, depth)` that drafts `chain:depth` for the
#    prompt of section 3 with `head_forward` and a head cache only (no mask or position ids: why
#    are the defaults right for a chain?), and check its tokens against
#    `Eagle1Drafter(..., choices=f"chain:{depth}").propose(...)`.
