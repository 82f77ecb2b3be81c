# %% [markdown]
# # 04 · EAGLE-2: a draft tree shaped by the draft's own confidence
#
# EAGLE-1 verifies the same 26-node tree shape every cycle. EAGLE-2 (Li et al. 2024b) keeps
# EAGLE-1's head, weights and verification, and changes only *which* tree is drafted: the shape
# follows the context. It rests on one claim (§3 of the paper): the draft is **well calibrated**,
# its probability `q` of a token is close to the chance the target accepts it. Then a node's
# chance of being accepted is about its **value** `V = Π q` along its path, and the best tree of
# N nodes is about the N nodes of highest value.
#
# We first rebuild one drafting cycle by hand, as notebook 01 rebuilds a decoder layer: the
# expansion levels (section 1) and the reranking (section 2), each checked against
# `minieagle.dynamic_tree` and against what `Eagle2Drafter.propose` returns. Then we verify the
# tree (section 3), compare it with EAGLE-1's static tree on held-out and out-of-domain prompts
# (section 4), test the calibration claim (section 5), check that greedy EAGLE-2 emits the
# target's greedy tokens (section 6), and size the tree for this machine (section 7).

# %%
import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minieagle
from minieagle import inference, model, sizing
from minieagle import tree as trees
from minieagle.bench import heldout_prompts, ood_prompts
from minieagle.calibration import (
    TemperatureScores,
    load_calibration,
    shipped_calibration,
    training_prompts,
)
from minieagle.checkpoint import load_checkpoint, target_fingerprint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.drafters.eagle2 import (
    DEFAULT_DEPTH,
    DEFAULT_TOP_K,
    DEFAULT_TOTAL_TOKENS,
    Eagle2Drafter,
)
from minieagle.dynamic_tree import (
    add_children,
    build_tree,
    calibration_table,
    empty_pool,
    log_softmax,
    next_frontier,
    pool_depths,
    rerank,
    top_children,
)
from minieagle.errors import InvalidInputError
from minieagle.generate import emitted_per_forward, generate
from minieagle.heads.eagle1 import head_forward, new_head_cache
from minieagle.kvcache import KVCache
from minieagle.plotting import draw_tree
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.static_trees import DEFAULT_TREE
from minieagle.train_eagle import load_or_train_head
from minieagle.verify import verify

FAST = os.environ.get("MINIEAGLE_FAST") == "1"  # the test suite sets it: shorter loops
GREEDY = SamplingParams()
RESULTS = Path(minieagle.__file__).resolve().parents[1] / "docs" / "results"
target_dir, head_dir = DEFAULT_MODEL, PRETRAINED / "small-eagle1"
params, config, tokenizer = load_checkpoint(target_dir, dtype=np.float64)
# No shipped head (yet)? A small stand-in is trained, weaker than the real one.
head, head_cfg = load_or_train_head(
    head_dir, target_dir, steps=150 if FAST else 1000, max_train_chars=40_000 if FAST else 0
)
target64 = inference.prepare(params, config)  # the fast path's layout, prepared once for generate
K, DEPTH, TOTAL = DEFAULT_TOP_K, DEFAULT_DEPTH, DEFAULT_TOTAL_TOKENS  # 8, 5, 26
print(f"top_k K = {K}, depth D = {DEPTH} (trees up to {DEPTH + 1} drafts deep), "
      f"total_tokens = {TOTAL} (root included)")  # fmt: skip


show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n


# %% [markdown]
# ## 1. Expansion by hand: a pool of k + depth·k² candidates
#
# First the library's cycle, which we then rebuild: the target has read every prompt token but
# the last one, the **root** (in decoding, the token the target emitted last), and
# `Eagle2Drafter.propose` drafts a 26-node tree under it. We keep its `pool` (every candidate
# drafted in the cycle) and `selected` (the pool indices that became the tree).
#
# **Catch-up.** The head reads the pairs `(f_t, x_{t+1})` the target committed: pair t holds the
# target's feature at position t and the token after it, and sits at position t of the head's KV
# cache. The last pair, `(f_{n-2}, root)`, gives the head's output `f̂` at the root and the root's
# draft logits. We run the readable head, `heads.eagle1.head_forward`, in float64.

# %%
prompt_ids = tokenizer.encode("def read_config(path):\n    with open(path) as", add_bos=True)
cache, prefill = KVCache.for_model(config, params), np.asarray(prompt_ids[:-1])  # all but the root
_, prompt_hidden, _ = model.forward(params, config, prefill, cache=cache, output_hidden=("final",))
drafter = Eagle2Drafter(params, config, head, head_cfg, depth=DEPTH, top_k=K, total_tokens=TOTAL)
drafter.begin(prompt_ids, prompt_hidden, GREEDY)
rng = SeededRandomness(0)
draft_tree = drafter.propose(prompt_ids[-1], rng, max_nodes=64)  # the library's cycle
pool, selected = drafter.pool, drafter.selected  # what we rebuild below

head_cache = new_head_cache(head_cfg, head, capacity=len(prompt_ids) + DEPTH * K)
pair_tokens, pair_features = np.asarray(prompt_ids[1:]), prompt_hidden["final"]  # [n-1], [n-1, d]
out, logits, _ = head_forward(head, head_cfg, params, pair_tokens, pair_features, cache=head_cache)
committed = head_cache.length  # n - 1 real pairs; the draft pairs go in the slots after them
root_feature, root_logits = out[-1], logits[-1]  # [d] f̂ at the root, [V] its draft logits
head_forwards = 1  # the catch-up
gap = np.abs(root_logits - drafter.draft_logits[0]).max()
print(f"catch-up: {committed} committed pairs; the root's draft logits differ from the "
      f"drafter's by at most {gap:.1e}")  # fmt: skip
assert gap < 1e-9


# %% [markdown]
# **The pool.** A candidate's score is the log of its value, `log V = Σ log q` along its path,
# with `q` the head's plain softmax (no temperature). The root's top-k tokens are the depth-1
# candidates. Then, `depth` times:
#
# 1. the **frontier**: the k best-scored candidates of the newest level (the lower pool index on
#    a tie);
# 2. **one** head forward over the frontier: each node is the pair (`f̂` at its parent, its own
#    token), at position `committed − 1 + depth`, `depth` places after the root's pair, as if
#    its path were the sequence; it sees the committed pairs, the cache slots of its own
#    ancestors and itself, never a sibling or cousin;
# 3. each frontier node adds its own top-k children, scored `parent score + log q`.
#
# Every child stays in the pool, expanded or not. Below, our pool is checked after every level
# twice: against `top_children`, `add_children` and `next_frontier` fed the same head logits
# (the same arithmetic, so equal bit for bit), and against the drafter's pool, whose head runs
# on the fast path (`minieagle.inference`, q/k/v fused into one matrix): the same tokens and
# parents, values equal to rounding (the printed gap).


# %%
def log_q_of(logits):
    """The draft's log q [F, V] from head logits [F, V]: a log-softmax at temperature 1."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def append_children(mine, expanded, log_q, k):
    """Our pool with the top-k children of each expanded node appended, as a block of k per
    node, most likely first (the lowest token id on a tie). expanded: pool indices [F], -1 for
    the root; log_q: [F, V] the draft's log q at each. A child's score: its parent's + its log q."""
    children = np.argsort(-log_q, axis=-1, kind="stable")[:, :k]  # [F, k] token ids
    child_log_q = np.take_along_axis(log_q, children, axis=-1)  # [F, k]
    parent_scores = np.asarray([mine["scores"][e] if e >= 0 else 0.0 for e in expanded])  # [F]
    return {
        "tokens": np.concatenate([mine["tokens"], children.reshape(-1)]),  # [F, k] -> [F k]
        "parents": np.concatenate([mine["parents"], np.repeat(expanded, k)]),  # [F k]
        "scores": np.concatenate([mine["scores"], (parent_scores[:, None] + child_log_q).ravel()]),
        "log_q": np.concatenate([mine["log_q"], child_log_q.reshape(-1)]),
    }


def check_level(mine, library, drafted):
    """Our pool against the library's functions (bit for bit) and the drafter's pool (tokens and
    parents equal; returns the largest score difference)."""
    for name in ("tokens", "parents", "scores", "log_q"):
        assert np.array_equal(mine[name], getattr(library, name)), name
    M = len(mine["tokens"])
    assert np.array_equal(mine["tokens"], drafted.tokens[:M])
    assert np.array_equal(mine["parents"], drafted.parents[:M])
    return np.abs(mine["scores"] - drafted.scores[:M]).max()


empty = {"tokens": np.zeros(0, int), "parents": np.zeros(0, int), "scores": np.zeros(0),
         "log_q": np.zeros(0)}  # fmt: skip
mine = append_children(empty, np.asarray([-1]), log_q_of(root_logits[None, :]), K)  # depth 1
library = add_children(empty_pool(), [-1], *top_children(log_softmax(root_logits[None, :]), K))
print(f"depth 1: the root's top {K}; pool {len(mine['tokens'])}; "
      f"max |our value - the drafter's| = {check_level(mine, library, pool):.1e}")  # fmt: skip
predicted = {-1: root_feature}  # pool index -> the head's output f̂ there (-1: the root)
slot = {}  # pool index -> its head cache slot
frontiers, head_masks = [], []  # per level: the nodes fed, the mask they were fed with
start = 0  # the newest level starts at this pool index
for step in range(1, DEPTH + 1):
    frontier = start + np.argsort(-mine["scores"][start:], kind="stable")[:K]  # [F] best first
    assert np.array_equal(frontier, next_frontier(library, start, K))
    base = head_cache.length  # slots in use: the committed pairs and the earlier levels
    mask = np.zeros((len(frontier), base + len(frontier)), dtype=bool)  # [F, cached + F]
    mask[:, :committed] = True  # every committed real pair
    for row, node in enumerate(frontier):
        ancestor = mine["parents"][node]
        while ancestor >= 0:  # the slots of its own ancestors below the root
            mask[row, slot[ancestor]] = True
            ancestor = mine["parents"][ancestor]
        mask[row, base + row] = True  # itself
        slot[int(node)] = base + row
    positions = np.full(len(frontier), committed - 1 + step)  # [F] one position per level
    parent_features = np.stack([predicted[int(mine["parents"][n])] for n in frontier])  # [F, d]
    out, level_logits, _ = head_forward(
        head, head_cfg, params, mine["tokens"][frontier], parent_features,
        position_ids=positions, attention_mask=mask, cache=head_cache,
    )  # fmt: skip
    head_forwards += 1
    predicted.update(zip(frontier.tolist(), out, strict=True))
    frontiers.append(frontier)
    head_masks.append(mask)
    start = len(mine["tokens"])
    mine = append_children(mine, frontier, log_q_of(level_logits), K)
    library = add_children(library, frontier, *top_children(log_softmax(level_logits), K))
    gap = check_level(mine, library, pool)
    assert len(mine["tokens"]) == K + step * K**2 and gap < 1e-9
    print(f"level {step}: {len(frontier)} frontier nodes in one head forward at position "
          f"{positions[0]}, mask {mask.shape}; depth {step + 1} added; pool {start} -> "
          f"{len(mine['tokens'])} = {K} + {step}·{K}²; max |our value - the drafter's| = "
          f"{gap:.1e}")  # fmt: skip
assert len(pool) == len(mine["tokens"]) and head_forwards == 1 + DEPTH
expanded = np.concatenate(frontiers)  # [D k] the candidates fed to the head
assert np.array_equal(np.sort(expanded), np.unique(pool.parents[pool.parents >= 0]))
print(f"{head_forwards} head forwards (catch-up + {DEPTH} levels); {len(expanded)} of "
      f"{len(pool)} candidates expanded: those with children in the drafter's pool")  # fmt: skip

fig, ax = plt.subplots(figsize=(10, 3.2))
last = head_masks[-1][:, committed:]  # [F, D F] the draft slots only (committed ones all True)
ax.imshow(last, cmap="Greys", aspect="auto")
for level in range(1, DEPTH):
    ax.axvline(level * K - 0.5, color="tab:red", lw=0.8)
ax.set_xticks([K * level + K / 2 - 0.5 for level in range(DEPTH)],
              [f"level {level + 1} slots" for level in range(DEPTH)])  # fmt: skip
ax.set_xlabel(f"head cache slot after the {committed} committed pairs (all visible, not drawn)")
ax.set_ylabel(f"node fed at level {DEPTH}\n(frontier rank)")
ax.set_title(f"the head's mask at level {DEPTH}: black = visible (its ancestors, itself)")
plt.tight_layout()
plt.show()


# %% [markdown]
# ## 2. Reranking by hand, and why the result is always a tree
#
# The tree is the root plus the `total_tokens − 1` best candidates of the **whole pool**, ranked
# by the key (−score, depth, pool index): the highest value first, the shallower node on a tie,
# then the earlier one. The chosen candidates are then listed parents-first (by depth, then pool
# index), and tree node j + 1 is chosen candidate j.
#
# Why is the chosen set *connected*, every chosen node's parent chosen too? A child's score is its
# parent's plus `log q`, and `log q ≤ 0` (adding a non-positive number never rounds up), so no
# child outscores its parent; on an exact tie the shallower node, the parent, ranks first. Hence
# every parent ranks before each of its children, and any top-N prefix of such a ranking holds
# the parent of each of its members. The cell asserts each step on our pool; a score that can
# grow along a path (here a bonus of 1 per level) breaks the first step, and the cell counts the
# chosen nodes whose parent is then left out.

# %%
M = len(mine["tokens"])
tokens, parents, scores = mine["tokens"], mine["parents"], mine["scores"]  # [M] each
level = np.ones(M, dtype=int)  # [M] depth below the root; parents come before their children
for i in np.flatnonzero(parents >= 0):
    level[i] = level[parents[i]] + 1
assert np.array_equal(level, pool_depths(parents))
ranking = np.lexsort((np.arange(M), level, -scores))  # [M] best first: the key's last is primary
chosen = ranking[: TOTAL - 1]
chosen = chosen[np.lexsort((chosen, level[chosen]))]  # parents-first: by depth, then pool index
assert np.array_equal(chosen, rerank(scores, parents, TOTAL - 1))  # the library, our pool
assert np.array_equal(chosen, selected)  # the drafter's choice from its own pool

has_parent = parents >= 0
log_q_step = scores[has_parent] - scores[parents[has_parent]]  # [M - k] each child's log q
assert (log_q_step <= 0).all()  # step 1: no child outscores its parent
place = np.empty(M, dtype=int)
place[ranking] = np.arange(M)  # [M] each candidate's place in the ranking
assert (place[has_parent] > place[parents[has_parent]]).all()  # step 2: parents rank first
print(f"all {has_parent.sum()} candidates below depth 1 rank after their parent "
      f"({np.sum(log_q_step == 0)} exact ties with it)")  # fmt: skip
in_tree = np.zeros(M, dtype=bool)
in_tree[chosen] = True
assert all(p < 0 or in_tree[p] for p in parents[chosen])  # step 3: connected
bonus = scores + 1.0 * level  # not a log-probability any more: deeper nodes gain
naive = np.argsort(-bonus, kind="stable")[: TOTAL - 1]
orphans = sum(1 for j in naive if parents[j] >= 0 and parents[j] not in set(naive.tolist()))
print(f"top {TOTAL - 1} by score + depth: {orphans} chosen nodes whose parent was left out")

node_of = {-1: 0} | {int(c): j + 1 for j, c in enumerate(chosen)}  # pool index -> tree node
my_tree = trees.Tree(np.asarray([prompt_ids[-1], *tokens[chosen]]),
                     np.asarray([-1, *(node_of[int(p)] for p in parents[chosen])]))  # fmt: skip
for other in (build_tree(prompt_ids[-1], library, chosen), draft_tree):
    assert np.array_equal(my_tree.tokens, other.tokens)
    assert np.array_equal(my_tree.parents, other.parents)
print(f"our tree of {len(my_tree)} nodes equals build_tree's and the one propose returned")

# %% [markdown]
# **Which candidates are never expanded?** Reranking chooses from the whole pool, so it may take
# a candidate the head never read. When does that happen? Within one level the key orders
# candidates by (−score, pool index), exactly as `next_frontier` does, so the tree's nodes at a
# level are that level's best-ranked candidates. A tree node was therefore never expanded in
# exactly two cases: it sits at the pool's deepest level (depth D + 1, which no forward reads),
# or the tree took more than k nodes from its level and it ranks below the top k there. The cell
# prints, for this cycle, the tree's nodes per depth and how many were never expanded, then
# counts both cases over every cycle of one generation, asserting that there is no third.

# %%
fed = np.zeros(M, dtype=bool)
fed[expanded] = True
static_per_depth = np.bincount([len(path) for path in DEFAULT_TREE], minlength=DEPTH + 2)[1:]
for d in range(1, DEPTH + 2):
    here = chosen[level[chosen] == d]
    print(f"depth {d}: {len(here):2} drafts ({np.sum(~fed[here]):2} never expanded); "
          f"EAGLE-1's static tree has {static_per_depth[d - 1]}")  # fmt: skip
print(f"expanded candidates left out of the tree: {np.sum(fed & ~in_tree)} of {len(expanded)}")


def never_expanded(pool, selected, k):
    """The tree's never-expanded drafts of one cycle, by case: (at the pool's deepest level,
    ranked below the top k of their level). Asserts the argument above: a level's chosen
    nodes are its best-ranked ones, and there is no third case."""
    depth = pool_depths(pool.parents)  # [M]
    order = np.lexsort((np.arange(len(pool)), -pool.scores, depth))  # by depth, then best first
    rank = np.empty(len(pool), dtype=int)  # [M] 0 = the best of its level
    rank[order] = np.arange(len(pool)) - np.searchsorted(depth[order], depth[order])
    for d in np.unique(depth[selected]):
        taken = np.sort(rank[selected[depth[selected] == d]])  # the tree's ranks at depth d
        assert np.array_equal(taken, np.arange(len(taken)))  # the level's best ones
    unfed = ~np.isin(selected, pool.parents)  # [N - 1] never fed to the head
    deepest, beyond_k = depth[selected] == depth.max(), rank[selected] >= k
    assert np.array_equal(unfed, deepest | beyond_k)
    return np.sum(deepest), np.sum(beyond_k & ~deepest)


class RecordingDrafter(Eagle2Drafter):
    """An Eagle2Drafter that keeps every cycle's (pool, selected)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cycles = []

    def propose(self, root, rng, max_nodes):
        draft = super().propose(root, rng, max_nodes)
        if self.pool is not None:
            self.cycles.append((self.pool, self.selected))
        return draft


n_new = 64 if FAST else 160
recorder = RecordingDrafter(
    target64, config, head, head_cfg, depth=DEPTH, top_k=K, total_tokens=TOTAL
)
dynamic_trace = generate(target64, config, prompt_ids, drafter=recorder, max_new_tokens=n_new)
cases = np.asarray([never_expanded(p, s, K) for p, s in recorder.cycles])  # [cycles, 2]
print(f"{len(recorder.cycles)} cycles, {(TOTAL - 1) * len(recorder.cycles)} tree drafts: "
      f"{cases[:, 0].sum()} never expanded at depth {DEPTH + 1}, {cases[:, 1].sum()} ranked "
      f"below the top {K} of a shallower level; cycles with at least one: "
      f"{np.sum(cases.sum(axis=1) > 0)}")  # fmt: skip

x = level + np.random.default_rng(0).uniform(-0.3, 0.3, M)  # [M] jittered depth
fig, ax = plt.subplots(figsize=(11, 4.5))
ax.scatter(x, scores, s=8, color="lightgrey", label="candidate in the pool")
ax.scatter(x[fed], scores[fed], s=40, facecolors="none", edgecolors="black",
           label="expanded (fed to the head)")  # fmt: skip
ax.scatter(x[chosen], scores[chosen], s=14, color="tab:blue", label="in the tree")
for j in chosen:  # the tree's edges; the root sits at (0, 0): log V = log 1
    xp, yp = (x[parents[j]], scores[parents[j]]) if parents[j] >= 0 else (0.0, 0.0)
    ax.plot([xp, x[j]], [yp, scores[j]], color="tab:blue", lw=0.6)
ax.axhline(scores[chosen].min(), color="tab:red", ls="--", lw=0.8,
           label=f"the {TOTAL - 1}th best score")  # fmt: skip
ax.set_xlabel("depth (drafts below the root), jittered")
ax.set_ylabel("score = log V = Σ log q along the path")
ax.set_title(f"one cycle's pool of {M} candidates and the {TOTAL}-node tree reranking chose")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
plt.tight_layout()
plt.show()


# %% [markdown]
# ## 3. The tree's mask, one target forward, and verification
#
# The target sees every tree node at position `cached + depth` with the mask "the cache, my
# ancestors, myself" (`tree.attention_mask`), the same rule the head's levels used above. All
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
draw_tree(axes[0], draft_tree, verdict.accepted, labels, next_token=show(verdict.next_token))
axes[0].set_title("the reranked tree: each node's token and its draft confidence q")
axes[1].imshow(trees.ancestor_mask(draft_tree), cmap="Greys")
axes[1].set_title(
    f"tree mask, black = visible\n(the {cached} cache columns, all visible, left out)"
)
axes[1].set_xlabel("key node")
axes[1].set_ylabel("query node")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. EAGLE-1's static tree vs EAGLE-2's dynamic tree
#
# Both verify 26 nodes per cycle with the same head; τ is the number of tokens a cycle emits
# (accepted drafts + 1), averaged over the cycles. First the prompt above: the EAGLE-2 run is the
# one section 2 recorded. EAGLE-2's tree changes depth from cycle to cycle (the dotted line);
# EAGLE-1's is always 5 deep. The cell prints which tree emitted more per cycle on this prompt.

# %%
static_trace = generate(target64, config, prompt_ids, max_new_tokens=n_new,
                        drafter=Eagle1Drafter(target64, config, head, head_cfg))  # fmt: skip
assert static_trace.tokens == dynamic_trace.tokens  # both emit the target's greedy tokens
traces = {"EAGLE-1 static": static_trace, "EAGLE-2 dynamic": dynamic_trace}
for name, result in traces.items():
    print(f"{name:15}: tau = {result.tau:.2f} over {result.target_forwards} target forwards")
lead = dynamic_trace.tau - static_trace.tau
leader = "EAGLE-2" if lead > 0 else "the static tree" if lead < 0 else "neither"
print(f"on this one prompt {leader} is ahead: tau differs by {abs(lead):.2f}")
plt.figure(figsize=(11, 3.4))
for name, result in traces.items():
    plt.step(np.arange(result.target_forwards), result.emitted_per_cycle,
             where="mid", label=f"{name}: tokens emitted (τ = {result.tau:.2f})")  # fmt: skip
plt.step(np.arange(dynamic_trace.target_forwards), dynamic_trace.drafted_depth_per_cycle,
         where="mid", ls=":", color="black", label="EAGLE-2: depth of its tree")  # fmt: skip
plt.xlabel("cycle (one target forward each)")
plt.ylabel("tokens emitted / tree depth")
plt.title("one prompt, cycle by cycle")
plt.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# One prompt decides nothing: τ moves a lot from prompt to prompt. The paper's claim is an
# average over benchmarks, at an equal budget of verified nodes. So the same comparison now runs
# on held-out prompts (`bench.heldout_prompts`: the start of test-split documents of each
# corpus) and out-of-domain ones (`bench.ood_prompts`: numpy, pytest, click and networkx docs and
# code, `minieagle/data/ood_prompts.jsonl`), all at T = 0 and 26 nodes. A third drafter ranks by
# **calibrated** values: each `log q` replaced by `log c(q)`, the acceptance rate that `q` has
# had on training prompts (`docs/results/eagle2-calibration-T0.json`, fitted for the shipped
# head; docs/calibration.md). A fourth ranks by **temperature scores**, the shipped head's T = 0
# default: `log softmax(logits / t)` at each child, with the `t` fitted by `minieagle calibrate`,
# which sees the whole distribution of a node and not only the child's `q` (docs/calibration.md,
# "Temperature scores"). A prompt whose greedy continuation ends at end of text before
# `MIN_NEW` tokens has too few cycles for a τ: it is skipped, and the cell names it.
#
# Per kind, the table pools τ over the prompts (all tokens / all cycles); "mean depth" is the
# drafted tree's depth averaged over the cycles; "+/−" counts the prompts on which a drafter's τ
# is above / below the static tree's. The last lines give the mean per-prompt difference with
# its standard error, and say which drafter is ahead.

# %%
per_kind, n_cmp, MIN_NEW = (1, 48, 16) if FAST else (6, 96, 16)
prompts = heldout_prompts(tokenizer, per_corpus=per_kind) + ood_prompts(tokenizer, per_kind)
KINDS = ("prose", "code", "ood-prose", "ood-code")
calibration, shipped = None, None
if (head_dir / "model.safetensors").is_file():  # the calibration was fitted for that head
    calibration = load_calibration(RESULTS / "eagle2-calibration-T0.json", setting="T=0",
                                   head=target_fingerprint(head_dir))  # fmt: skip
    maps = shipped_calibration(head_dir)  # the head's own calibration.json, if it has one
    shipped = maps.for_setting("T=0") if maps is not None else None
methods = {  # name -> a new drafter (one holds one sequence's state)
    "EAGLE-1 static": lambda: Eagle1Drafter(target64, config, head, head_cfg),
    "EAGLE-2": lambda: RecordingDrafter(target64, config, head, head_cfg),
    "EAGLE-2 calibrated": lambda: Eagle2Drafter(target64, config, head, head_cfg,
                                                calibration=calibration),
    "EAGLE-2 temperature": lambda: Eagle2Drafter(target64, config, head, head_cfg,
                                                 calibration=shipped),
}  # fmt: skip
if calibration is None:
    del methods["EAGLE-2 calibrated"]
if not isinstance(shipped, TemperatureScores):  # the head's T = 0 default is another map
    del methods["EAGLE-2 temperature"]
else:
    print(f"the shipped head's T = 0 scores: log softmax(logits / {shipped.temperature})")
kept, names, vanilla, skipped = [], [], [], []
runs = {name: [] for name in methods}  # name -> one GenerationResult per kept prompt
drafters = {name: [] for name in methods}
for number, (kind, ids) in enumerate(prompts):
    label = f"{kind} {sum(k == kind for k, _ in prompts[:number]) + 1}"  # kind, number in kind
    reference = generate(target64, config, ids, max_new_tokens=n_cmp)  # vanilla greedy
    if len(reference.tokens) < MIN_NEW:
        why = "end of text" if reference.stop_reason == "eos" else reference.stop_reason
        skipped.append(f"{label} ({len(reference.tokens)} tokens, then {why})")
        continue
    kept.append((kind, ids))
    names.append(label)
    vanilla.append(reference)
    for name, make in methods.items():
        drafters[name].append(make())
        runs[name].append(generate(target64, config, ids, drafter=drafters[name][-1],
                                   max_new_tokens=n_cmp))  # fmt: skip
print(f"{len(kept)} prompts x {n_cmp} new tokens; skipped (fewer than {MIN_NEW} new tokens): "
      f"{'; '.join(skipped) or 'none'}")  # fmt: skip
kinds = [kind for kind, _ in kept]
tau = {name: np.asarray([r.tau for r in results]) for name, results in runs.items()}  # [P] each
print(f"{'':20}" + "".join(f"{kind:>10}" for kind in KINDS) + "       all  mean depth  +/-")
for name, results in runs.items():
    pooled = [emitted_per_forward([r for r, k in zip(results, kinds, strict=True) if k == kind])
              for kind in KINDS]  # fmt: skip
    depth = np.mean([d for r in results for d in r.drafted_depth_per_cycle])
    static_tau = tau["EAGLE-1 static"]  # [P]
    above, below = np.sum(tau[name] > static_tau), np.sum(tau[name] < static_tau)
    versus = "" if name == "EAGLE-1 static" else f"{above}/{below}"
    print(f"{name:20}" + "".join(f"{t:10.2f}" for t in pooled)
          + f"{emitted_per_forward(results):10.2f}{depth:12.2f}  {versus}")  # fmt: skip
for name in list(methods)[1:]:
    diff = tau[name] - tau["EAGLE-1 static"]  # [P] per prompt
    se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    total = emitted_per_forward(runs[name]) - emitted_per_forward(runs["EAGLE-1 static"])
    side = "ahead of" if total > 0 else "behind" if total < 0 else "level with"
    sure = "more" if abs(diff.mean()) > 2 * se else "not more"  # NaN s.e.: "not more"
    print(f"{name} is {side} the static tree over all {len(kept)} prompts (pooled tau "
          f"{total:+.2f}); per prompt {diff.mean():+.2f} +/- {se:.2f} (s.e.), {sure} than two "
          "standard errors from 0")  # fmt: skip

fig, axes = plt.subplots(1, 2, figsize=(15, 4), width_ratios=(3, 1))
width = 0.8 / len(runs)
for m, name in enumerate(runs):
    axes[0].bar(np.arange(len(kept)) + (m - (len(runs) - 1) / 2) * width, tau[name], width,
                label=name)  # fmt: skip
axes[0].set_xticks(np.arange(len(kept)), names, rotation=60, fontsize=8)
axes[0].set_xlabel("prompt (kind, number within the kind)")
axes[0].set_ylabel("τ (tokens per cycle)")
axes[0].set_title(f"τ per prompt, T = 0, {TOTAL} nodes per cycle")
for m, (name, results) in enumerate(runs.items()):
    depths = np.concatenate([r.drafted_depth_per_cycle for r in results])
    share = np.bincount(depths, minlength=DEPTH + 2)[1:] / len(depths)  # [D + 1] depth 1 ..
    axes[1].bar(np.arange(1, DEPTH + 2) + (m - (len(runs) - 1) / 2) * width, share, width,
                label=name)  # fmt: skip
axes[1].set_xlabel("depth of the drafted tree")
axes[1].set_ylabel("share of cycles")
axes[1].set_title("tree depth per cycle")
fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=len(runs))  # both panels
plt.tight_layout(rect=(0, 0, 1, 0.9))
plt.show()

# %% [markdown]
# **When does the dynamic tree win?** Reranking spends the node budget where the value
# `V = Π q` is largest. That is the best use of a fixed budget only if values rank nodes as
# their real chances of acceptance do, that is, if the head is calibrated. Section 5 measures
# this. At T = 0, on a target as unsure as ours, a head's top token is accepted more often than
# its `q` says (points above the diagonal); a path's value multiplies one such understated factor
# per level, so deep nodes are understated most and the reranked tree tends to come out wider and
# shallower than the acceptance rates would justify. The table's mean depth shows how deep this
# run's trees were against the static tree's 5. The calibrated drafter ranks by measured
# acceptance rates instead; if its row is ahead of the static tree where the raw one is not, that
# is the paper's effect appearing once the values mean what they should. Three more things
# decide the outcome:
#
# - **the prompt**: τ spreads widely from prompt to prompt (the bars), so a single prompt, like
#   the one above, can favour either tree. Only τ pooled over many prompts, with the standard
#   error of the per-prompt difference, says which is ahead; a difference within about two
#   standard errors is not established.
# - **the domain**: docs/eagle2.md measured raw EAGLE-2 falling further behind the static tree
#   on out-of-domain prompts than on held-out ones. A plausible reason, not tested: there the
#   head's confidence is a worse guide to where it is right than the fixed shape is. Compare the
#   `ood-` columns of the table with the held-out ones.
# - **the temperature**: at T = 1 a top-k child is accepted with probability `p(x)`, so the
#   dynamic tree's τ is capped by how much target mass its children cover, whatever their
#   values (docs/calibration.md measures this, and the `sampled_tree` option that lifts the cap).
#
# The paper checked its head's calibration before relying on it (Vicuna 7B on Alpaca:
# acceptance about 0.04 below q = 0.05 and 0.98 above 0.95).

# %% [markdown]
# ## 5. Is the draft calibrated?
#
# The whole method rests on `q ≈ P(accepted)`. Each cycle the drafter records, for every node
# whose parent the target accepted (the nodes verification looked at), its draft probability `q`
# and whether it was accepted (`calibration_records`); `calibration_table` bins them by `q`, each
# bin half-open `[lo, hi)` but the last, `[0.95, 1]`, closed.
#
# What "accepted" means depends on the temperature. At T = 1 the q = 1 sibling rule accepts a
# child x of a reached node with probability exactly `p(x)` (it is the same as "draw y ~ p,
# descend if y is a child"), so a head whose `q` matches the target's `p` sits on the diagonal.
# At T = 0 a child is accepted iff it is the target's argmax: where the target itself is unsure
# (flat `p`), even a perfect draft's top token has a small `q` and is accepted anyway, so we
# expect the greedy points above the diagonal. Above it the values are too pessimistic; below
# it, too optimistic. The T = 0 records are those of the raw EAGLE-2 runs of section 4 on the
# held-out prompts; the T = 1 ones come from the same prompts sampled (prompt i with seed i).
# The last line of each table says on which side of the diagonal its points lie on average.

# %%
heldout = [i for i, kind in enumerate(kinds) if kind in ("prose", "code")]  # into `kept`
t1_drafters = [Eagle2Drafter(target64, config, head, head_cfg) for _ in heldout]
for i, d in zip(heldout, t1_drafters, strict=True):
    generate(target64, config, kept[i][1], drafter=d, max_new_tokens=n_cmp,
             sampling=SamplingParams(temperature=1.0), seed=i)  # fmt: skip
records = {
    "T = 0": [r for i in heldout for r in drafters["EAGLE-2"][i].calibration_records],
    "T = 1": [r for d in t1_drafters for r in d.calibration_records],
}
fig, ax = plt.subplots(figsize=(5.5, 4.5))
ax.plot([0, 1], [0, 1], color="grey", ls="--", label="calibrated: rate = q")
for label, pairs in records.items():
    table = calibration_table(pairs)
    print(f"{label}:   q bin      nodes  mean q  accepted")
    for b, ((lo, hi), count, mean_q, rate) in enumerate(table):
        close = "]" if b == len(table) - 1 else ")"  # only the last bin holds its upper edge
        print(f"       [{lo:.2f}, {hi:.2f}{close} {count:6}  {mean_q:6.3f}  {rate:8.3f}")
    count, mean_q, rate = (np.asarray(c) for c in zip(*[r[1:] for r in table if r[1]], strict=True))
    gap = np.sum(count * (rate - mean_q)) / count.sum()  # > 0: accepted more often than q says
    ece = np.sum(count * np.abs(rate - mean_q)) / count.sum()
    side = f"{abs(gap):.3f} above" if gap > 0 else f"{abs(gap):.3f} below" if gap < 0 else "on"
    print(f"       {len(pairs)} records; count-weighted |rate - q| = {ece:.3f}, mean rate - q = "
          f"{gap:+.3f}: on average {side} the diagonal")  # fmt: skip
    ax.scatter(mean_q, rate, s=20 + 200 * count / count.max(), alpha=0.8,
               label=f"{label} (area ∝ nodes in the bin)")  # fmt: skip
ax.set_xlabel("mean draft confidence q in the bin")
ax.set_ylabel("acceptance rate in the bin")
ax.set_title("calibration on held-out prompts")
ax.legend(loc="lower right", fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 6. Lossless: every drafter emits the target's own greedy tokens
#
# However the tree was shaped, verification keeps only what the target would have produced: at
# T = 0, on every prompt of section 4, each drafter's tokens are vanilla greedy decoding's.

# %%
for p in range(len(kept)):
    for name in methods:
        assert runs[name][p].tokens == vanilla[p].tokens, (name, names[p])
forwards = {name: sum(r.target_forwards for r in results) for name, results in runs.items()}
print(f"{len(kept)} prompts, {sum(len(r.tokens) for r in vanilla)} tokens, the same for every "
      f"drafter; target forwards: vanilla {sum(r.target_forwards for r in vanilla)}, "
      + ", ".join(f"{name} {n}" for name, n in forwards.items()))  # fmt: skip

# %% [markdown]
# ## 7. Sizing the tree for this machine
#
# A cycle drafts with top_k k and depth d, verifies N tree tokens in one target forward and
# emits τ̂ tokens on average; against vanilla decoding (one `step` a token, timed),
# `speedup(k, d, N) = τ̂ · step / cycle(k, d, N)` (`minieagle.sizing`), where a cycle costs
# `verify(N) + loop + row · τ̂ + rows(k, N, τ̂) + draft(k, min(d, N − 2))`: verify(N) is the
# measured cost curve (scaled to the forwards the loop ran), loop + row · τ̂ the speculative
# loop's own work per cycle (timed in the same runs, each top-k's fitted as a fixed part and a
# part per token kept), rows the LM-head rows the verdict reads (a chain's in one product, a
# tree's one a kept token), draft the measured drafting time of the levels the drafter runs; the
# chain of one draft, the tree that pays on a CPU, is also timed whole, and that cycle replaces
# the sum (`sizing.measured_cycle_ms` computes either). τ̂ is 1 + the expected accepted drafts
# of the tree EAGLE-2 would build, each node counted with the calibrated chance (as in section
# 5, measured on training prompts) that its whole path is accepted. More nodes raise τ̂ with
# diminishing returns. On a CPU a forward over N rows costs more as N grows, so the best N is
# small; where the cost curve is flat, as on a GPU (panel a below), extra nodes are nearly free
# and the best N can be large.

# %%
params32, _, _ = load_checkpoint(target_dir, with_tokenizer=False)  # float32: decoding's dtype
head32 = {k: v.astype(np.float32) for k, v in head.items()}  # the shipped head or the stand-in
target32 = inference.prepare(params32, config)  # the fast path's weight layout, prepared once
TOP_KS, MAX_DEPTH = ((1, 4), 4) if FAST else ((1, 2, 4, 8), 7)
calibration_prompts = (training_prompts(tokenizer, "prose", 1 if FAST else 2)
                       + training_prompts(tokenizer, "code", 1 if FAST else 2))  # fmt: skip
measured = sizing.measure_sizing(
    target32, config, head32, head_cfg, None, calibration_prompts, GREEDY,
    candidate_top_k=TOP_KS, max_depth=MAX_DEPTH,
    sizes=(2, 4, 8, 16, 26) if FAST else sizing.TOTAL_TOKENS, new_tokens=24 if FAST else 48,
)  # fmt: skip
auto = sizing.sizing_from(measured, "T=0")
print(auto.describe())
verify_ms, loop_ms, row_ms, draft_ms, tau_hat, step = (
    measured[key]
    for key in ("verify_ms", "loop_ms", "loop_ms_per_token", "draft_ms", "tau", "step_ms")
)  # fmt: skip
print(f"one vanilla step: {step:.2f} ms; verify(1) {verify_ms[1]:.2f} ms, the loop's own work "
      f"{loop_ms:.2f} ms a cycle + {row_ms:.3f} ms a token kept; "
      f"{measured['calibration_records']} calibration records, "
      f"{sum(measured['cycles'].values())} drafting cycles")  # fmt: skip


def predicted(k, d, n):  # the model's speedup over vanilla of one measured configuration
    return tau_hat[k, d, n] * step / sizing.measured_cycle_ms(measured, k, d, n)


ranking = sorted(tau_hat, key=lambda kdn: -predicted(*kdn))  # stable: ties as `choose` breaks them
if auto.total_tokens > 1:  # a tree pays here: the sizing chose the best-predicted one
    assert ranking[0] == (auto.top_k, auto.depth, auto.total_tokens)
else:  # no tree pays on this machine now (vanilla decoding is the best-predicted choice)
    assert predicted(*ranking[0]) <= 1.0 + 1e-12
print(" k  d   N  tau_hat  verify(N)   draft(k,d)  predicted speedup")
for k, d, n in ranking[:6]:
    print(f"{k:2} {d:2} {n:3}  {tau_hat[k, d, n]:7.2f}  {verify_ms[n]:6.2f} ms  "
          f"{draft_ms[k, min(d, n - 2)]:6.2f} ms  {predicted(k, d, n):6.2f}x")  # fmt: skip

# %% [markdown]
# The first line is the choice: the (top_k, depth, total_tokens) of the highest predicted speedup
# among the measured candidates (a smaller grid in FAST mode), and the best EAGLE-1 chain length.
# The table lists the runners-up; where their predicted speedups sit within a few percent of the
# winner's, the choice between them is finer than the timing noise, and any of them would do. A
# best predicted speedup below 1 would mean that, for this head on this machine, drafting does not
# pay at all.

# %%
gpu_path = RESULTS / "gpu" / "gpu-cost.json"  # `minieagle.bench.measure_cost_curve`
gpu_curve = json.loads(gpu_path.read_text())["verify"]["relative_to_one"]  # {"N": ratio}
gpu_curve = {int(n): ratio for n, ratio in gpu_curve.items()}  # {N: verify(N) / verify(1)}
sizes = sorted(verify_ms)  # [1, ...] the N measured on this machine
wide = (max(TOP_KS), min(5, MAX_DEPTH))  # the widest measured top_k at the paper's depth
fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
ax = axes[0]
ax.plot(sizes, [verify_ms[n] / verify_ms[1] for n in sizes], "o-",
        label=f"this CPU, NumPy ({os.cpu_count()} cores)")  # fmt: skip
ax.plot(sorted(gpu_curve), [gpu_curve[n] for n in sorted(gpu_curve)], "s-",
        label="H200, CuPy (docs/results/gpu)")  # fmt: skip
ax.set_xscale("log", base=2)
ax.set_xticks([1, 2, 4, 8, 16, 32, 64], ["1", "2", "4", "8", "16", "32", "64"])
ax.set_xlabel("N: tokens in one target forward")
ax.set_ylabel("verify(N) / verify(1)")
ax.set_title("(a) the cost curve")
ax.legend(fontsize=8)
ax = axes[1]
for k in TOP_KS:
    depths = range(1, MAX_DEPTH + 1)
    ax.plot(depths, [draft_ms[k, d] / step for d in depths], "o-", label=f"top_k = {k}")
ax.set_xticks(range(1, MAX_DEPTH + 1))
ax.set_xlabel("depth d (expansion steps)")
ax.set_ylabel("draft(k, d) in vanilla steps")
ax.set_title("(b) drafting cost")
ax.legend(fontsize=8)
ax = axes[2]
tree_chosen = auto.total_tokens > 1  # False: no tree pays on this machine now (k = d = 0)
lines = {(auto.top_k, auto.depth): "chosen"} if tree_chosen else {}
lines.setdefault(wide, "widest top_k measured")  # nothing new when the choice is `wide` itself
for (k, d), what in lines.items():
    ns = [n for n in sizes if (k, d, n) in tau_hat]
    ax.plot(ns, [predicted(k, d, n) for n in ns], "o-", label=f"k = {k}, d = {d} ({what})")
ax.plot([auto.total_tokens], [auto.expected_speedup], "*", ms=15, color="tab:red",
        label=f"chosen N = {auto.total_tokens}")  # fmt: skip
ax.axhline(1.0, color="grey", ls="--", label="vanilla decoding")
ax.set_xscale("log", base=2)
ticks = sorted({n for n in (2, 4, 8, 16, 32, 64) if n <= max(sizes)} | {max(sizes)})
ax.set_xticks(ticks, [str(n) for n in ticks])
ax.set_xlabel("N: total_tokens (root included)")
ax.set_ylabel("predicted speedup over vanilla")
ax.set_title("(c) the model's prediction")
ax.legend(
    loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, fontsize=8
)  # below: hides no point
plt.tight_layout()
plt.show()
n_cmp = max(n for n in sizes if n in gpu_curve)  # the largest N both machines measured
print(f"verify({n_cmp}) / verify(1): this CPU {verify_ms[n_cmp] / verify_ms[1]:.2f}, "
      f"H200 {gpu_curve[n_cmp]:.2f}; H200 over all its N: "
      f"{min(gpu_curve.values()):.2f} to {max(gpu_curve.values()):.2f}")  # fmt: skip
chosen = (f"at the chosen k = {auto.top_k}, d = {auto.depth}: "
          f"{draft_ms[auto.top_k, auto.depth] / step:.2f} vanilla steps; " if tree_chosen
          else "no tree chosen (vanilla decoding predicted fastest); ")  # fmt: skip
print(f"drafting {chosen}at k = {wide[0]}, d = {wide[1]}: {draft_ms[wide] / step:.2f}")

# %% [markdown]
# (a) The printed ratios say how much one forward over N tokens costs against one token on each
# machine. The H200 numbers are medians of a few runs of a 2.6 M-parameter model, far too small
# to fill the GPU: a forward's time is mostly per-call overhead (kernel launches), not
# arithmetic, and the printed range shows how far its curve strays from 1. The flatter the curve,
# the more nodes a cycle can verify before their cost eats the extra τ̂: the best N depends on the
# machine. (b) Each depth adds one head forward over k frontier nodes; the lines are straight by
# construction (a smaller depth's time is the deepest run's drafting time less the measured time
# of the levels it skips). (c) A curve rises while the τ̂ that more nodes buy outgrows their
# verification cost; where it peaks inside the measured N lies the model's best size for that
# (k, d); the star is the overall choice. Where no tree is predicted to beat vanilla decoding
# (a slow or busy machine can measure that), the choice is to draft nothing: the star sits at
# N = 1, speedup 1, and the "auto" row below is vanilla decoding.

# %%
held_out = heldout_prompts(tokenizer, per_corpus=1 if FAST else 3)  # the prompts judged on
candidates = {  # name -> (top_k, depth, total_tokens), None: vanilla
    "vanilla": None,
    f"auto (k={auto.top_k}, d={auto.depth}, N={auto.total_tokens})":
        (auto.top_k, auto.depth, auto.total_tokens) if tree_chosen else None,  # None: vanilla
    "fixed (k=8, d=5, N=26)": (8, 5, 26),
}  # fmt: skip


def run_once(kdn, ids):
    drafter = None if kdn is None else Eagle2Drafter(
        target32, config, head32, head_cfg, top_k=kdn[0], depth=kdn[1], total_tokens=kdn[2]
    )  # fmt: skip
    return generate(target32, config, ids, drafter=drafter, max_new_tokens=n_new)


for kdn in candidates.values():  # warm-up, not counted
    run_once(kdn, held_out[0][1])
timed = {name: [] for name in candidates}  # name -> per repeat, one result per prompt
for _ in range(2):  # repeats interleaved, so that a slow spell of the machine hits all three
    for name, kdn in candidates.items():
        timed[name].append([run_once(kdn, ids) for _, ids in held_out])


def tokens_per_s(results):
    return sum(len(r.tokens) for r in results) / sum(r.decode_seconds for r in results)


everything = {name: [r for repeat in runs for r in repeat] for name, runs in timed.items()}
speedup = {name: tokens_per_s(everything[name]) / tokens_per_s(everything["vanilla"])
           for name in candidates}  # fmt: skip
per_repeat = {name: [tokens_per_s(mine) / tokens_per_s(base)
                     for mine, base in zip(runs, timed["vanilla"], strict=True)]
              for name, runs in timed.items()}  # fmt: skip
print(f"{'':30}  tau  tau_hat  measured speedup (repeat 1, 2)  predicted speedup")
for name, kdn in candidates.items():
    tau, expected = emitted_per_forward(everything[name]), "1.00x"
    model_tau = "     "
    if kdn is not None:
        try:
            *_, t_hat, speed = sizing.choose(verify_ms, loop_ms, draft_ms, tau_hat, step_ms=step,
                                             top_k=kdn[0], depth=kdn[1],
                                             total_tokens=kdn[2])  # fmt: skip
            expected, model_tau = f"{speed:.2f}x", f"{t_hat:5.2f}"
        except InvalidInputError:
            expected = "not measured"
    repeats = ", ".join(f"{x:.2f}" for x in per_repeat[name])
    print(f"{name:30} {tau:5.2f}  {model_tau}    {speedup[name]:5.2f}x ({repeats})"
          f"{'':13}{expected}")  # fmt: skip
auto_name, fixed_name = list(candidates)[1:]
faster = speedup[auto_name] > speedup[fixed_name]
agree = all((a > f) == faster for a, f in zip(per_repeat[auto_name], per_repeat[fixed_name],
                                             strict=True))  # fmt: skip
verdict = "in both repeats" if agree else "but not in both repeats: within the noise"
print(f"the auto-sized drafter was {'faster' if faster else 'not faster'} than the fixed "
      f"26-node one: {speedup[auto_name]:.2f}x vs {speedup[fixed_name]:.2f}x over vanilla "
      f"({verdict})")  # fmt: skip

# %% [markdown]
# τ is what the held-out prompts measured, τ̂ what the model expected from the calibration runs
# on training prompts; τ̂ is an estimate (a fitted calibration map, pools from other text), so the
# two differ by however much these prompts differ from those. Timing on a shared machine is noisy
# too: the two repeats show how far one measured speedup moves between runs, and a comparison
# that flips between repeats says nothing. The last line says, from this run's numbers, whether
# sizing for this machine beat the paper's fixed 26-node tree. "not measured": that configuration
# was outside the candidates searched (FAST mode searches top_k ≤ 4, depth ≤ 4).

# %% [markdown]
# ## Exercises
#
# Worked answers: `minieagle/assignments/notebook_answers/04_eagle2.md`.
#
# 1. **Change the branching, predict, then run.** Set `K = 4` in the first code cell (sections
#    1 and 2 build their drafters with `top_k=K`). Before running, predict the pool's size, the
#    number of head forwards in a cycle, the number of expanded candidates, the shape of the
#    head's mask at level 5, and the most drafts the tree can hold at depth 1. Then run sections
#    1 and 2: every check should still pass.
# 2. **The paper's budget.** Put `K` back to 8 and set `TOTAL = 60`, the paper's budget for 7B
#    targets. Without running anything: at least how many of the tree's drafts are never expanded,
#    in every cycle, and why? Then run section 2 and compare with its counts.
# 3. **Why understated confidence makes trees shallow.** Model section 5's T = 0 points crudely:
#    the target accepts a draft of confidence `q` with probability `min(1, c·q)`, for a constant
#    `c > 1`. (a) Show that a node at depth L whose path has `c·q ≤ 1` at every level is reached
#    with probability `c^L · V`. (b) With `c = 2`, compare a depth-1 node A with `q = 0.1` and a
#    depth-3 node B whose path has `q = 0.45` at each level: which does reranking by value
#    prefer, and which is more likely to be accepted? (c) What does this do to the shape of the
#    reranked trees, and why does ranking by `log c(q)` (a calibration) fix it without breaking
#    the argument of section 2?
# 4. **The official code's mask.** The official EAGLE code builds the tree mask row by row: a
#    node's row is its parent's row with its own column set, and its position is the row's sum
#    minus 1, plus the cache length. Write `official_mask(parents)` returning the bool `[N, N]`
#    mask and the offsets `[N]`, and check it against `tree.ancestor_mask(draft_tree)` and
#    `tree.position_ids(draft_tree, cached)` for the tree of section 3.
# 5. **Half-open bins.** (a) Check that `np.histogram(q, bins=edges)[0]` gives the count column
#    of `calibration_table` for the T = 0 records of section 5 (`edges` = the table's bin edges),
#    and say why. (b) In which bin does `q = 0.05` land, and `q = 1.0`? Why does
#    `calibration_table` need a special case for `q = 1.0` after
#    `np.searchsorted(edges, q, side="right") - 1`?
