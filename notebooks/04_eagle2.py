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
import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from minieagle import inference, model, sizing
from minieagle import tree as trees
from minieagle.bench import heldout_prompts
from minieagle.calibration import training_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.drafters.eagle2 import DEFAULT_DEPTH, DEFAULT_TOP_K, Eagle2Drafter
from minieagle.dynamic_tree import calibration_table, pool_depths
from minieagle.errors import InvalidInputError
from minieagle.generate import emitted_per_forward, generate
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

# %% [markdown]
# ## 7. Sizing the tree for this machine
#
# A cycle drafts with top_k k and depth d, verifies N tree tokens in one target forward and
# emits τ̂ tokens on average; against vanilla decoding (one `step` = verify(1) + loop a token),
# `speedup(k, d, N) = τ̂ · step / (verify(N) + loop + draft(k, d))` (`minieagle.sizing`).
# verify(N) is the measured cost curve, loop the speculative loop's own work per cycle, draft(k, d)
# the measured drafting time; τ̂ is 1 + the expected accepted drafts of the tree EAGLE-2 would
# build, each node counted with the calibrated (§5) chance that its whole path is accepted. More
# nodes raise τ̂ with diminishing returns. On a CPU a forward over N rows costs more as N grows,
# so the best N is small; on a GPU the cost curve is flat, extra nodes are nearly free, N is large.

# %%
params32, _, _ = load_checkpoint(target_dir, with_tokenizer=False)  # float32: decoding's dtype
head32 = {k: v.astype(np.float32) for k, v in head.items()}  # the shipped head or the stand-in
target = inference.prepare(params32, config)  # the fast path's weight layout, prepared once
TOP_KS, MAX_DEPTH = ((1, 4), 4) if FAST else ((1, 2, 4, 8), 7)
calibration_prompts = (training_prompts(tokenizer, "prose", 1 if FAST else 2)
                       + training_prompts(tokenizer, "code", 1 if FAST else 2))  # fmt: skip
measured = sizing.measure_sizing(
    target, config, head32, head_cfg, None, calibration_prompts, GREEDY,
    candidate_top_k=TOP_KS, max_depth=MAX_DEPTH,
    sizes=(2, 4, 8, 16, 26) if FAST else sizing.TOTAL_TOKENS, new_tokens=24 if FAST else 48,
)  # fmt: skip
auto = sizing.sizing_from(measured, "T=0")
print(auto.describe())
verify_ms, loop_ms, draft_ms, tau_hat = (measured[key] for key in
                                         ("verify_ms", "loop_ms", "draft_ms", "tau"))  # fmt: skip
step = verify_ms[1] + loop_ms  # one vanilla step, ms
print(f"one vanilla step: {step:.2f} ms = verify(1) {verify_ms[1]:.2f} + loop {loop_ms:.2f}; "
      f"{measured['calibration_records']} calibration records, "
      f"{sum(measured['cycles'].values())} drafting cycles")  # fmt: skip


def predicted(k, d, n):  # the model's speedup over vanilla of one measured configuration
    return tau_hat[k, d, n] * step / (verify_ms[n] + loop_ms + draft_ms[k, d])


ranking = sorted(tau_hat, key=lambda kdn: -predicted(*kdn))  # stable: ties as `choose` breaks them
assert ranking[0] == (auto.top_k, auto.depth, auto.total_tokens)
print(" k  d   N  tau_hat  verify(N)   draft(k,d)  predicted speedup")
for k, d, n in ranking[:6]:
    print(f"{k:2} {d:2} {n:3}  {tau_hat[k, d, n]:7.2f}  {verify_ms[n]:6.2f} ms  "
          f"{draft_ms[k, d]:6.2f} ms  {predicted(k, d, n):6.2f}x")  # fmt: skip

# %% [markdown]
# The first line is the choice: the (top_k, depth, total_tokens) of the highest predicted speedup
# among the measured candidates (a smaller grid in FAST mode), and the best EAGLE-1 chain length.
# The table lists the runners-up; where their predicted speedups sit within a few percent of the
# winner's, the choice between them is finer than the timing noise, and any of them would do. A
# best predicted speedup below 1 would mean that, for this head on this machine, drafting does not
# pay at all.

# %%
gpu_path = Path("../docs/results/gpu/gpu-cost.json")  # `minieagle.bench.measure_cost_curve`
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
lines = {(auto.top_k, auto.depth): "chosen"}
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
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
n_cmp = max(n for n in sizes if n in gpu_curve)  # the largest N both machines measured
print(f"verify({n_cmp}) / verify(1): this CPU {verify_ms[n_cmp] / verify_ms[1]:.2f}, "
      f"H200 {gpu_curve[n_cmp]:.2f}; H200 over all its N: "
      f"{min(gpu_curve.values()):.2f} to {max(gpu_curve.values()):.2f}")  # fmt: skip
print(f"drafting at the chosen k = {auto.top_k}, d = {auto.depth}: "
      f"{draft_ms[auto.top_k, auto.depth] / step:.2f} vanilla steps; at k = {wide[0]}, "
      f"d = {wide[1]}: {draft_ms[wide] / step:.2f}")  # fmt: skip

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
# (k, d); the star is the overall choice.

# %%
held_out = heldout_prompts(tokenizer, per_corpus=1 if FAST else 3)  # the prompts judged on
candidates = {  # name -> (top_k, depth, total_tokens), None: vanilla
    "vanilla": None,
    f"auto (k={auto.top_k}, d={auto.depth}, N={auto.total_tokens})":
        (auto.top_k, auto.depth, auto.total_tokens),
    "fixed (k=8, d=5, N=26)": (8, 5, 26),
}  # fmt: skip


def run_once(kdn, ids):
    drafter = None if kdn is None else Eagle2Drafter(
        target, config, head32, head_cfg, top_k=kdn[0], depth=kdn[1], total_tokens=kdn[2]
    )  # fmt: skip
    return generate(target, config, ids, drafter=drafter, max_new_tokens=n_new)


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
            *_, t_hat, speed = sizing.choose(verify_ms, loop_ms, draft_ms, tau_hat, top_k=kdn[0],
                                             depth=kdn[1], total_tokens=kdn[2])  # fmt: skip
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
