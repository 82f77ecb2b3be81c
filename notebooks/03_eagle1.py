# %% [markdown]
# # 03 · EAGLE-1: drafting features, not tokens
#
# EAGLE-1 (Li et al. 2024) drafts with a single decoder layer, the *head*, that reads the target's
# own **feature** `f_t` (its last hidden state, after the final RMSNorm) and predicts the next one,
# `f̂_{t+1}`; the target's frozen LM head turns that into a draft distribution. The head also reads
# the token one step ahead: its input at position t is `[Embed(x_{t+1}), f_t]`. We measure the
# shipped head, see why the shifted token matters, draw one drafting step as a tree, compare a
# chain with EAGLE-1's 26-node tree, and check that greedy EAGLE-1 is the target's greedy output.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from minieagle import model
from minieagle import tree as trees
from minieagle.bench import heldout_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.data import load_split
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.generate import GenerationResult, generate
from minieagle.heads.eagle1 import eagle1_metrics, head_forward
from minieagle.kvcache import KVCache
from minieagle.plotting import draw_tree
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.train_eagle import load_or_train_head
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


def cosine(u, v):
    """Cosine similarity along the last axis: [.., d] x [.., d] -> [..]."""
    return (u * v).sum(-1) / np.linalg.norm(u, axis=-1) / np.linalg.norm(v, axis=-1)


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
plt.xlabel(r"cos(guess, $f_{t+1}$), one count per position")
plt.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. The shifted token removes the sampling uncertainty
#
# The feature `f_t` summarises the text up to `x_t`, but `x_{t+1}` is then *sampled* from
# `softmax(LMHead(f_t))`. Where that distribution is split between two tokens, `f_{t+1}` depends on
# which one came out, and a head fed `f_t` alone could only predict a blur of both futures. EAGLE
# feeds the sampled token too, so the head knows which branch it is on.
#
# We take the held-out position where the target is most evenly split between its top two tokens
# `a` and `b`, feed the head `[Embed(a), f_t]` or `[Embed(b), f_t]`, and compare its distribution
# `q` over `x_{t+2}` with the target's `p` after `… a` and after `… b`. A head that uses the token
# follows the branch it was given: its overlap `Σ min(p, q)` is larger with that branch's `p`.

# %%
probs = np.stack([softmax(row) for row in logits[:, :-1].reshape(-1, V)])  # [B*L, V]
row, t = divmod(int(np.argmax(np.sort(probs, axis=-1)[:, -2])), length)  # max 2nd probability
p_split = probs[row * length + t]  # [V] the target's distribution over x_{t+1}
a, b = np.argsort(-p_split)[:2]
prefix = windows[row, : t + 1]  # [t + 1] = x_0 .. x_t
print(f"…{tokenizer.decode(prefix[-12:].tolist())!r} -> p({show(a)!r}) = {p_split[a]:.2f}, "
      f"p({show(b)!r}) = {p_split[b]:.2f}")  # fmt: skip
p = {c: softmax(model.forward(params, config, np.append(prefix, c))[0][-1]) for c in (a, b)}
fig, axes = plt.subplots(1, 2, figsize=(12, 3.2))
for ax, choice in zip(axes, (a, b), strict=True):
    shifted = np.append(tokens[row, :t], choice)  # [t + 1] = x_1 .. x_t, then the choice
    _, head_logits, _ = head_forward(head, head_cfg, params, shifted, features[row, : t + 1])
    q = softmax(head_logits[-1])  # [V] the head's draft distribution over x_{t+2}
    overlap = [np.minimum(p[c], q).sum() for c in (a, b)]
    print(f"head given {show(choice)!r}: Σ min(p, q) with p after {show(a)!r} = {overlap[0]:.2f}, "
          f"after {show(b)!r} = {overlap[1]:.2f}")  # fmt: skip
    shown = np.argsort(-(p[choice] + q))[:8]  # the 8 tokens with the most mass in either
    ax.bar(np.arange(8) - 0.2, p[choice][shown], 0.4, label=f"target after …{show(choice)}")
    ax.bar(np.arange(8) + 0.2, q[shown], 0.4, label=f"head given $x_{{t+1}}$ = {show(choice)}")
    ax.set_xticks(np.arange(8), [show(s) for s in shown])
    ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# The paper's ablation (Fig. 4, Vicuna 7B) puts numbers on the idea: a head reading only tokens
# gave a 1.5x speedup, only features 1.9x, features and the shifted token 2.8x.
#
# ## 3. One drafting step, drawn as a tree
#
# `Eagle1Drafter.propose` first *catches up*: one head forward over the pairs `(f_t, x_{t+1})` the
# target has committed (real features: only these stay in the head's KV cache). Then it fills the
# static 26-node tree **level by level**, one head forward per level: a node's children are the
# top-ranked tokens of the draft distribution at it, each fed as the pair (f̂ at its parent, its
# token) at position "parent + 1", seeing only the cache and its own ancestors. The target verifies
# all 26 nodes in **one** forward with the tree attention mask; `verify` walks down from the root.

# %%
prompt_ids = tokenizer.encode("def read_config(path):\n    with open(path) as", add_bos=True)
cache, prefill = KVCache.for_model(config, params), np.asarray(prompt_ids[:-1])  # all but the root
_, prompt_hidden, _ = model.forward(params, config, prefill, cache=cache, output_hidden=("final",))
drafter = Eagle1Drafter(params, config, head, head_cfg)  # choices="default": 26 nodes
drafter.begin(prompt_ids, prompt_hidden, GREEDY)
rng = SeededRandomness(0)
draft_tree = drafter.propose(prompt_ids[-1], rng, max_nodes=64)
cached = cache.length
placement = dict(  # each node at position cached + depth, seeing the cache and its ancestors
    position_ids=trees.position_ids(draft_tree, cached),  # [N]
    attention_mask=trees.attention_mask(draft_tree, cached),  # [N, cached + N]
)
tree_logits, _, _ = model.forward(params, config, draft_tree.tokens, cache=cache, **placement)
target_probs = np.stack([target_distribution(row, GREEDY) for row in tree_logits])  # [N, V]
verdict = verify(draft_tree, target_probs, rng)
emitted = [*draft_tree.tokens[verdict.accepted].tolist(), verdict.next_token]
print(f"{len(draft_tree)} nodes in one target forward: {len(verdict.accepted)} accepted + 1")
print(repr(tokenizer.decode(prompt_ids)), "+", repr(tokenizer.decode(emitted)))


fig, axes = plt.subplots(1, 2, figsize=(14, 6), width_ratios=(2, 1))
probs = (
    [1.0]
    + [  # the head's probability of each draft given its parent (the root: 1)
        softmax(drafter.draft_logits[p])[t]
        for p, t in zip(draft_tree.parents[1:], draft_tree.tokens[1:], strict=True)
    ]
)
labels = [f"{show(t)}\n{q:.2f}" for t, q in zip(draft_tree.tokens, probs, strict=True)]
draw_tree(axes[0], draft_tree, verdict.accepted, labels, next_token=show(verdict.next_token))
shown_cache = 4  # the mask's first `cached` columns are all True; show the last 4 of them
axes[1].imshow(trees.attention_mask(draft_tree, cached)[:, cached - shown_cache :], cmap="Greys")
axes[1].axvline(shown_cache - 0.5, color="tab:red")
axes[1].set_title(f"tree attention mask (… {shown_cache} cache columns | {len(draft_tree)} nodes)")
axes[1].set_xlabel("key")
axes[1].set_ylabel("query node")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Chain vs tree
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
fig, axes = plt.subplots(1, 2, figsize=(12, 3.2))
for offset, (choices, results) in zip((-0.2, 0.2), runs.items(), strict=True):
    pooled = GenerationResult([], 0, "", 0)  # every cycle of every prompt
    for result in results:
        pooled.accepted_per_cycle += result.accepted_per_cycle
        pooled.emitted_per_cycle += result.emitted_per_cycle
        pooled.drafted_depth_per_cycle += result.drafted_depth_per_cycle
    alpha = pooled.acceptance_by_depth(5)
    print(f"{choices:8} tau = {pooled.tau:.2f}, n-alpha (n = 0..4) =", np.round(alpha, 2))
    axes[0].bar(np.arange(5) + offset, alpha, 0.4, label=f"{choices} (τ = {pooled.tau:.2f})")
    axes[1].bar(np.arange(len(prompts)) + offset, [r.tau for r in results], 0.4, label=choices)
axes[0].set_xlabel("n (drafted features already in the input)")
axes[0].set_ylabel("n-α")
axes[0].legend()
axes[1].set_xticks(np.arange(len(prompts)), [corpus for corpus, _ in prompts])
axes[1].set_ylabel("τ per prompt")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Lossless: greedy EAGLE-1 emits the target's own greedy tokens
#
# However good or bad the head, verification keeps only what the target would have produced.
# At temperature 0 that means the very same token sequence as vanilla greedy decoding, with fewer
# target forwards.

# %%
for (corpus, ids), chain, tree in zip(prompts, runs["chain:5"], runs["default"], strict=True):
    vanilla = generate(params, config, ids, max_new_tokens=n_new)
    assert chain.tokens == vanilla.tokens and tree.tokens == vanilla.tokens
    forwards = vanilla.target_forwards, chain.target_forwards, tree.target_forwards
    print(f"{corpus:5}: the same {len(vanilla.tokens)} tokens; target forwards: "
          "vanilla {}, chain {}, tree {}".format(*forwards))  # fmt: skip
