# %% [markdown]
# # 04 · EAGLE-2: a draft tree shaped by the draft's own confidence
#
# EAGLE-1 verifies the same 26-node tree shape every cycle. EAGLE-2 (Li et al. 2024b) keeps
# EAGLE-1's head, weights and verification, and changes only *which* tree is drafted: the shape
# follows the context. It rests on one claim (§3): the draft is **well calibrated**, its
# probability `q` of a token is close to the chance the target accepts it. Then a node's chance
# of being accepted is about its **value** `V = Π q` along its path, and the best tree of N nodes
# is about the N nodes of highest value. We draw one cycle (the pool of candidates, the reranked
# tree, its mask, the verification), compare with EAGLE-1's static tree, test the calibration
# claim on held-out text, and check that greedy EAGLE-2 is the target's greedy output.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from minieagle import model
from minieagle import tree as trees
from minieagle.bench import heldout_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.drafters.eagle2 import DEFAULT_DEPTH, DEFAULT_TOP_K, Eagle2Drafter
from minieagle.dynamic_tree import calibration_table, pool_depths
from minieagle.generate import generate
from minieagle.kvcache import KVCache
from minieagle.plotting import draw_tree
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.static_trees import DEFAULT_TREE
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
K, DEPTH = DEFAULT_TOP_K, DEFAULT_DEPTH  # expansion steps: drafts up to DEPTH + 1 deep


show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n


# %% [markdown]
# ## 1. Expansion: a pool of k + depth·k² candidates
#
# After the catch-up forward (as in EAGLE-1), the root's top-k tokens are the depth-1
# candidates, each scored `log q`. Then, `depth` times, the k best candidates of the newest level
# (the *frontier*) go through the head in **one** forward (tree mask, one position per level), and
# each adds its own top-k children scored `parent score + log q`: the score is `log V`. Every
# child is kept in the **pool**, expanded or not: k + depth·k² candidates, for 1 + depth head
# forwards. Below: each candidate at its depth (jittered) and its score; the black rings are the
# expanded ones, the blue ones the tree that reranking (section 2) picks from the whole pool.

# %%
prompt_ids = tokenizer.encode("def read_config(path):\n    with open(path) as", add_bos=True)
cache, prefill = KVCache.for_model(config, params), np.asarray(prompt_ids[:-1])  # all but the root
_, prompt_hidden, _ = model.forward(params, config, prefill, cache=cache, output_hidden=("final",))
drafter = Eagle2Drafter(params, config, head, head_cfg)  # depth 5, top_k 8, total_tokens 26
drafter.begin(prompt_ids, prompt_hidden, GREEDY)
rng = SeededRandomness(0)
draft_tree = drafter.propose(prompt_ids[-1], rng, max_nodes=64)
pool, selected = drafter.pool, drafter.selected  # selected[j] is tree node j + 1
level = pool_depths(pool.parents)  # [M] 1 = a child of the root
expanded = np.isin(np.arange(len(pool)), pool.parents)  # [M] fed to the head
assert len(pool) == K + DEPTH * K**2 and expanded.sum() == DEPTH * K
print(f"pool: {len(pool)} candidates, {expanded.sum()} expanded; tree: {len(draft_tree)} nodes")

x = level + np.random.default_rng(0).uniform(-0.3, 0.3, len(pool))  # [M] jittered depth
fig, ax = plt.subplots(figsize=(11, 4.5))
ax.scatter(x, pool.scores, s=8, color="lightgrey", label="candidate in the pool")
ax.scatter(x[expanded], pool.scores[expanded], s=40, facecolors="none", edgecolors="black",
           label="expanded (fed to the head)")  # fmt: skip
ax.scatter(x[selected], pool.scores[selected], s=14, color="tab:blue", label="in the tree")
for j in selected:  # the tree's edges; the root sits at (0, 0): log V = log 1
    parent = pool.parents[j]
    xp, yp = (x[parent], pool.scores[parent]) if parent >= 0 else (0.0, 0.0)
    ax.plot([xp, x[j]], [yp, pool.scores[j]], color="tab:blue", lw=0.6)
cut = pool.scores[selected].min()
ax.axhline(cut, color="tab:red", ls="--", lw=0.8, label=f"the {len(selected)}th best score")
ax.set_xlabel("depth (drafts below the root)")
ax.set_ylabel("score = log V = Σ log q along the path")
ax.legend(loc="lower left", fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. Reranking, and why the result is always a tree
#
# The tree is the root plus the `total_tokens − 1` best candidates of the **whole pool**
# (`dynamic_tree.rerank`): a shallow candidate that was never expanded can beat a deep one.
# Why is that set *connected*, every chosen node's parent chosen too? A child's score is its
# parent's plus `log q`, and `log q ≤ 0`, so no child outscores its parent; on an exact tie the
# shallower node ranks first. Hence every parent ranks before its children, and any top-N of
# such a ranking contains each chosen node's parent, which is in the pool because only expanded
# candidates have children. A score that can grow along a path (a depth bonus, say) can break it.

# %%
has_parent = pool.parents >= 0
assert (pool.scores[has_parent] <= pool.scores[pool.parents[has_parent]]).all()  # log q <= 0
chosen = set(selected.tolist())
assert all(p < 0 or p in chosen for p in pool.parents[selected])  # connected
bonus = pool.scores + 1.0 * level  # not a log-probability any more: deeper nodes gain
naive = set(np.argsort(-bonus, kind="stable")[: len(selected)].tolist())
orphans = sum(1 for j in naive if pool.parents[j] >= 0 and pool.parents[j] not in naive)
print(f"top {len(selected)} by score + depth: {orphans} nodes whose parent was left out")
tree_depth = trees.depths(draft_tree)[1:]  # [N - 1]
static_per_depth = np.bincount([len(path) for path in DEFAULT_TREE], minlength=DEPTH + 2)[1:]
for d in range(1, DEPTH + 2):
    in_tree = selected[tree_depth == d]
    print(f"depth {d}: {len(in_tree):2} drafts ({np.sum(~expanded[in_tree]):2} never expanded); "
          f"EAGLE-1's static tree has {static_per_depth[d - 1]}")  # fmt: skip

# %% [markdown]
# ## 3. The tree's mask, one target forward, and verification
#
# Tree node j + 1 is pool candidate `selected[j]`, listed parents-first; `build_tree` maps each
# candidate's parent (a pool index) to its node number. The target sees every node at position
# `cached + depth` with the mask "the cache, my ancestors, myself" (`tree.attention_mask`). All
# picks were deterministic (top-k), so no node carries a proposal distribution and `verify`
# accepts a child with probability `p(x)` (the q = 1 rule): at T = 0, iff it is the argmax.

# %%
assert all(q is None for q in draft_tree.proposals)  # deterministic picks
cached = cache.length
placement = dict(
    position_ids=trees.position_ids(draft_tree, cached),  # [N] cached + depth
    attention_mask=trees.attention_mask(draft_tree, cached),  # [N, cached + N]
)
tree_logits, _, _ = model.forward(params, config, draft_tree.tokens, cache=cache, **placement)
target_probs = np.stack([target_distribution(row, GREEDY) for row in tree_logits])  # [N, V]
verdict = verify(draft_tree, target_probs, rng)
emitted = [*draft_tree.tokens[verdict.accepted].tolist(), verdict.next_token]
print(f"{len(draft_tree)} nodes in one target forward: {len(verdict.accepted)} accepted + 1")
print(repr(tokenizer.decode(prompt_ids)), "+", repr(tokenizer.decode(emitted)))
confidence = np.concatenate([[1.0], np.exp(pool.log_q[selected])])  # [N] q (the root: 1)


fig, axes = plt.subplots(1, 2, figsize=(14, 7), width_ratios=(2, 1))
labels = [f"{show(t)} {q:.2f}" for t, q in zip(draft_tree.tokens, confidence, strict=True)]
draw_tree(axes[0], draft_tree, verdict.accepted, labels)  # minieagle/plotting.py
axes[0].set_title(f"the reranked tree; the target then emits {show(verdict.next_token)!r}")
axes[1].imshow(trees.ancestor_mask(draft_tree), cmap="Greys")
axes[1].set_title(f"tree mask (the {cached} cache columns, all True, left out)")
axes[1].set_xlabel("key node")
axes[1].set_ylabel("query node")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. EAGLE-1's static tree vs EAGLE-2's dynamic tree, on one prompt
#
# Both verify 26 nodes per cycle with the same head. τ per cycle is the number of tokens a cycle
# emits (accepted drafts + 1). EAGLE-2's tree is deep where the head is confident and wide where
# it is not; the dotted line is the depth of its tree in each cycle (EAGLE-1's is always 5).

# %%
n_new = 64 if FAST else 160
plt.figure(figsize=(11, 3.2))
static, dynamic = (Eagle1Drafter(params, config, head, head_cfg),
                   Eagle2Drafter(params, config, head, head_cfg))  # fmt: skip
for name, drafter in (("EAGLE-1 static", static), ("EAGLE-2 dynamic", dynamic)):
    result = generate(params, config, prompt_ids, drafter=drafter, max_new_tokens=n_new)
    print(f"{name:15}: tau = {result.tau:.2f} over {result.target_forwards} target forwards")
    plt.step(np.arange(result.target_forwards), result.emitted_per_cycle,
             where="mid", label=f"{name}: tokens emitted (τ = {result.tau:.2f})")  # fmt: skip
plt.step(np.arange(result.target_forwards), result.drafted_depth_per_cycle, where="mid",
         ls=":", color="black", label="EAGLE-2: depth of its tree")  # fmt: skip
plt.xlabel("cycle")
plt.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Is the draft calibrated?
#
# The whole method rests on `q ≈ P(accepted)`. Each cycle the drafter records, for every node
# whose parent the target accepted (the nodes verification looked at), its draft probability `q`
# and whether it was accepted (`calibration_records`); `calibration_table` bins them by `q`. The
# paper (Vicuna 7B, Alpaca) reports 0.04 acceptance below q = 0.05 and 0.98 above 0.95.
#
# What "accepted" means depends on the temperature. At T = 1 the q = 1 sibling rule accepts a
# child x of a reached node with probability exactly `p(x)` (it is the same as "draw y ~ p,
# descend if y is a child"), so a head whose `q` matches the target's `p` sits on the diagonal.
# At T = 0 a child is accepted iff it is the target's argmax: where the target itself is unsure
# (flat `p`), even a perfect draft's top token has a small `q` and is accepted anyway, so the
# greedy points sit above the diagonal. Above it the values are too pessimistic (trees too
# wide and shallow); below it, too optimistic.

# %%
prompts = heldout_prompts(tokenizer, per_corpus=2 if FAST else 6)
eagle2 = {}  # setting -> one GenerationResult per prompt
plt.figure(figsize=(4.5, 4.5))
plt.plot([0, 1], [0, 1], color="grey", ls="--", label="calibrated: rate = q")
for label, sampling in {"T = 0": GREEDY, "T = 1": SamplingParams(temperature=1.0)}.items():
    drafters = [Eagle2Drafter(params, config, head, head_cfg) for _ in prompts]
    eagle2[label] = [
        generate(params, config, ids, drafter=d, max_new_tokens=n_new, sampling=sampling, seed=i)
        for i, ((_, ids), d) in enumerate(zip(prompts, drafters, strict=True))
    ]
    table = calibration_table([r for drafter in drafters for r in drafter.calibration_records])
    print(f"{label}:   q bin      nodes  mean q  accepted")
    for (lo, hi), count, mean_q, rate in table:
        print(f"       [{lo:.2f}, {hi:.2f}] {count:6}  {mean_q:6.3f}  {rate:8.3f}")
    count, mean_q, rate = (np.asarray(c) for c in zip(*[r[1:] for r in table if r[1]], strict=True))
    gap = np.sum(count * (rate - mean_q)) / count.sum()  # > 0: accepted more often than q says
    ece = np.sum(count * np.abs(rate - mean_q)) / count.sum()
    print(f"       count-weighted |rate - q| = {ece:.3f}, mean rate - q = {gap:+.3f}")
    plt.scatter(mean_q, rate, s=20 + 200 * count / count.max(), label=f"{label} (size ∝ nodes)")
plt.xlabel("mean draft confidence q in the bin")
plt.ylabel("acceptance rate")
plt.legend(loc="upper left")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 6. Lossless: greedy EAGLE-2 emits the target's own greedy tokens
#
# However the tree was shaped, verification keeps only what the target would have produced.

# %%
for (corpus, ids), result in zip(prompts, eagle2["T = 0"], strict=True):
    vanilla = generate(params, config, ids, max_new_tokens=n_new)
    assert result.tokens == vanilla.tokens
    forwards = f"vanilla {vanilla.target_forwards}, EAGLE-2 {result.target_forwards}"
    print(f"{corpus:5}: the same {len(vanilla.tokens)} tokens; target forwards: {forwards}")
