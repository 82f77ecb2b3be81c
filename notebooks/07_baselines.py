# %% [markdown]
# # 07 · Baselines: prompt lookup and Medusa beside EAGLE
#
# Every EAGLE paper measures itself against two neighbours that draft without a draft model:
#
# - **prompt lookup** (Saxena 2023; `prompt_lookup_num_tokens` in Hugging Face) copies what
#   followed the same n-gram earlier in the context. No training, no model, no features;
# - **Medusa-1** (Cai et al. 2024) puts K small heads on the target's last feature, head k
#   guessing the token k + 1 positions ahead, and verifies a static tree of their top guesses.
#
# We rebuild each drafter by hand and check it against the library (sections 1 and 2), as
# notebooks 02 and 03 did for speculative sampling and EAGLE-1. Section 3 builds the exact output
# law of Medusa's own verifier, "typical acceptance", and shows on a tiny model that it is not the
# target's law. Section 4 reads the benchmark's results for every method on held-out and "edit
# this code" prompts. References: `minieagle/drafters/prompt_lookup.py`,
# [docs/medusa.md](../docs/medusa.md), `minieagle/typical_acceptance.py`,
# [docs/lossless.md](../docs/lossless.md).

# %%
import functools
import json
import os

import matplotlib.pyplot as plt
import numpy as np

from minieagle import model, testing
from minieagle import tree as trees
from minieagle.bench import edit_prompts, heldout_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL, PRETRAINED
from minieagle.config import LlamaConfig
from minieagle.drafters.medusa import DEFAULT_MEDUSA_TREE, MedusaDrafter
from minieagle.drafters.prompt_lookup import PromptLookupDrafter, find_match
from minieagle.generate import generate
from minieagle.heads.medusa import load_medusa_heads, medusa_forward
from minieagle.kvcache import KVCache
from minieagle.plotting import draw_tree
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.typical_acceptance import typical_threshold, typical_verify
from minieagle.verify import verify

FAST = os.environ.get("MINIEAGLE_FAST") == "1"  # the test suite sets it: shorter loops
GREEDY, T1 = SamplingParams(), SamplingParams(temperature=1.0)
params, config, tokenizer = load_checkpoint(DEFAULT_MODEL, dtype=np.float64)
show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n
n_new = 32 if FAST else 64


def softmax(logits):
    """The [V] probabilities of [V] logits at temperature 1."""
    return target_distribution(logits, T1)


# %% [markdown]
# ## 1. Prompt lookup by hand
#
# Each cycle, prompt lookup takes the last n tokens of the context (the prompt and everything
# emitted so far, ending with the root), for n from `max_matching_ngram_size` (2) down to 1, and
# looks for them earlier in the context, longest n first. At the **most recent** earlier
# occurrence it copies what followed, `prompt_lookup_num_tokens` (10) drafts as a chain. The
# match ends `shift` tokens before the root, and draft i copies the token `shift` places before
# it; when the copy runs into the end of the context it reads the drafts it has just proposed, so
# a loop of period 3 still gives 10 drafts. (Hugging Face takes the *first* occurrence and stops
# at the end of the context; the module docstring of `minieagle/drafters/prompt_lookup.py` gives
# the measurements behind both choices.) No match at all: no drafts, a plain decoding step.


# %%
def prompt_lookup_by_hand(context, num_tokens=10, max_ngram=2):
    """(n, end, drafts): the longest n-gram (n <= max_ngram) of the context's end that occurs
    earlier, the index where its most recent earlier occurrence ends, and the num_tokens drafts
    copied after it; None when not even the last token occurs earlier."""
    L = len(context)
    for n in range(min(max_ngram, L - 1), 0, -1):
        ngram = context[L - n :]
        for start in range(L - n - 1, -1, -1):  # the match must end by L - 2: most recent first
            if context[start : start + n] == ngram:
                end = start + n - 1
                shift = L - 1 - end  # draft at position i copies position i - shift
                sequence = list(context)
                for _ in range(num_tokens):
                    sequence.append(sequence[-shift])
                return n, end, sequence[L:]
    return None


def library_drafts(context, max_nodes=64):
    """The drafts `PromptLookupDrafter.propose` makes after `context` (a chain: its tokens)."""
    drafter = PromptLookupDrafter()
    drafter.begin(context, {}, GREEDY)
    return drafter.propose(context[-1], SeededRandomness(0), max_nodes=max_nodes).tokens[1:]


context = [5, 7, 9, 5, 7, 3, 8, 5, 7]
n, end, drafts = prompt_lookup_by_hand(context)
print(f"context {context}: the last {n} tokens {context[-n:]} last occurred ending at index {end}")
print(f"drafts: {drafts}")
assert (n, end) == find_match(context, 2)
assert drafts == library_drafts(context).tolist()

rng = np.random.default_rng(0)
contexts = [rng.integers(0, 4, size=rng.integers(1, 14)).tolist() for _ in range(300)]
for ctx in contexts:  # short contexts over 4 tokens: n = 2, n = 1 and no match all occur
    match = prompt_lookup_by_hand(ctx)
    assert (match[:2] if match else None) == find_match(ctx, 2)
    assert (match[2] if match else []) == library_drafts(ctx).tolist()
kinds = [(m[0] if m else 0) for m in map(prompt_lookup_by_hand, contexts)]
print(f"{len(contexts)} random contexts, by hand == PromptLookupDrafter.propose; matched with "
      f"n = 2: {kinds.count(2)}, n = 1: {kinds.count(1)}, no match: {kinds.count(0)}")  # fmt: skip

# %% [markdown]
# The match `[5, 7]` occurs twice before the root; the most recent occurrence (ending at index 4)
# wins, and what followed it, `3 8 5 7`, repeats with period 4 once the copy reaches the end.
#
# **On a real prompt.** The "edit this code" prompts (`minieagle.bench.edit_prompts`) hold a
# function from the held-out code, a comment asking for it again with one parameter renamed, and
# the renamed first line: a model that does what is asked mostly repeats the prompt, the case
# prompt lookup is made for. We decode the shortest of the eight greedily with the shipped `small`
# target, with and without prompt lookup. The drafts are deterministic, so verification is
# lossless (docs/lossless.md): the greedy output must be vanilla's, token for token. Whether it
# copies, and so how many drafts are accepted, depends on the target; the cell prints τ (tokens
# emitted per target forward, the bonus included; vanilla decoding has τ = 1).

# %%
edit = min(edit_prompts(tokenizer), key=lambda kind_ids: len(kind_ids[1]))[1]
print(repr(tokenizer.decode(edit)[-120:]))
vanilla = generate(params, config, edit, max_new_tokens=n_new)
pld = generate(params, config, edit, max_new_tokens=n_new, drafter=PromptLookupDrafter())
assert pld.tokens == vanilla.tokens
print(f"prompt lookup: the same {len(pld.tokens)} tokens as vanilla greedy, "
      f"{pld.target_forwards} target forwards instead of {vanilla.target_forwards}, "
      f"τ = {pld.tau:.2f}")  # fmt: skip
print(repr(tokenizer.decode(pld.tokens)))

# %% [markdown]
# ## 2. Medusa heads by hand
#
# Head k (k = 1 .. K = 4) reads the target's feature `h_t` (its last hidden state after the final
# RMSNorm, the vector its LM head reads) and guesses `x_{t+k+1}`, k tokens below the root
# `x_{t+1}` the target chose from `h_t` (docs/medusa.md, "The heads"):
#
# ```
# r_k      = h_t + SiLU(W_k h_t + b_k)     [d] -> [d]    one residual SiLU block
# logits_k = r_k W_k,lmᵀ                   [d] -> [V]    head k's own LM head
# ```
#
# In the first cycle the root is the prompt's last token and `h_t` the feature of the token before
# it. We compute the four heads' logits by hand and compare them with
# `heads.medusa.medusa_forward` and with what `MedusaDrafter.propose` used (`draft_logits`).

# %%
heads, medusa_cfg = load_medusa_heads(
    PRETRAINED / "small-medusa", target_dir=DEFAULT_MODEL, dtype=np.float64
)
prompt_ids = tokenizer.encode("def read_config(path):\n    with open(path) as", add_bos=True)
ids = np.asarray(prompt_ids)  # [n]
_, prompt_hidden, _ = model.forward(params, config, ids[:-1], output_hidden=("final",))
h = prompt_hidden["final"][-1]  # [d]: the feature of the token before the root


def silu(z):
    return z / (1.0 + np.exp(-z))


W = [heads[f"medusa_head.{k}.0.linear.weight"] for k in range(medusa_cfg.num_heads)]  # [d, d]
b = [heads[f"medusa_head.{k}.0.linear.bias"] for k in range(medusa_cfg.num_heads)]  # [d]
W_lm = [heads[f"medusa_head.{k}.1.weight"] for k in range(medusa_cfg.num_heads)]  # [V, d]
r = [h + silu(W_k @ h + b_k) for W_k, b_k in zip(W, b, strict=True)]  # K x [d]
logits_by_hand = np.stack([r_k @ W_lm_k.T for r_k, W_lm_k in zip(r, W_lm, strict=True)])  # [K, V]
library_logits, _ = medusa_forward(heads, medusa_cfg, model.lm_head_weight(params), h)  # [K, V]
drafter = MedusaDrafter(params, config, heads, medusa_cfg)  # tree="default"
drafter.begin(prompt_ids, prompt_hidden, GREEDY)
medusa_tree = drafter.propose(prompt_ids[-1], SeededRandomness(0), max_nodes=64)
for name, library in (("medusa_forward", library_logits), ("drafter", drafter.draft_logits)):
    gap = np.abs(logits_by_hand - library).max()
    print(f"head logits by hand vs {name:14}: max |diff| = {gap:.1e}")
    np.testing.assert_allclose(logits_by_hand, library, rtol=0, atol=1e-12)
for k, row in enumerate(logits_by_hand, start=1):
    q = softmax(row)
    top = np.argsort(-q, kind="stable")[:3]
    print(f"head {k} (x_t+{k + 1}):", ", ".join(f"{show(t)!r} {q[t]:.2f}" for t in top))

# %% [markdown]
# The by-hand logits agree with the library's to rounding, not bit for bit: `medusa_forward`
# writes SiLU as `z · σ(z)` and multiplies as `h Wᵀ` (`layers.linear_forward`) where we wrote
# `W h`: the same float64 products, summed in another order.
#
# **The static tree.** A node at path `(r_1, .., r_D)` of child ranks holds head D's `r_D`-th most
# likely token. The default tree (`DEFAULT_MEDUSA_TREE`) has 21 such paths, one level per head
# (the cell prints the nodes per depth). A guess does not depend on its parent's token (the
# heads see only `h_t`), so every node at one depth with the same rank holds the same token. We
# build the tree by hand from the ranked logits and compare it with the drafter's; then the target
# verifies it in one forward with its tree mask (notebook 03, section 5).

# %%
ranked = [np.argsort(-row, kind="stable") for row in logits_by_hand]  # K x [V], most likely first
node_of = {(): 0}  # path of ranks -> node index
tokens_by_hand, parents_by_hand = [prompt_ids[-1]], [-1]
for path in sorted(DEFAULT_MEDUSA_TREE, key=lambda p: (len(p), p)):  # parents first
    node_of[path] = len(tokens_by_hand)
    tokens_by_hand.append(int(ranked[len(path) - 1][path[-1]]))  # head D, rank r_D
    parents_by_hand.append(node_of[path[:-1]])
np.testing.assert_array_equal(tokens_by_hand, medusa_tree.tokens)
np.testing.assert_array_equal(parents_by_hand, medusa_tree.parents)
assert medusa_tree.proposals is None or all(q is None for q in medusa_tree.proposals)
per_depth = np.bincount(trees.depths(medusa_tree))[1:]  # drafts at depth 1 .. K
print(f"tree by hand == MedusaDrafter.propose: {len(medusa_tree)} nodes (root + "
      f"{len(DEFAULT_MEDUSA_TREE)} drafts, {per_depth.tolist()} at depths 1-{len(per_depth)}), "
      "every proposal deterministic")  # fmt: skip

cache = KVCache.for_model(config, params)  # the target's cache: the prompt without the root
model.forward(params, config, ids[:-1], cache=cache)
cached = cache.length
tree_logits, _, _ = model.forward(
    params, config, medusa_tree.tokens, cache=cache,
    position_ids=trees.position_ids(medusa_tree, cached),  # [N]: cached + depth
    attention_mask=trees.attention_mask(medusa_tree, cached),  # [N, cached + N]
)  # fmt: skip
target_probs = np.stack([target_distribution(row, GREEDY) for row in tree_logits])  # [N, V]
verdict = verify(medusa_tree, target_probs, SeededRandomness(0))
emitted = [*medusa_tree.tokens[verdict.accepted].tolist(), verdict.next_token]
print(f"{len(medusa_tree)} nodes in one target forward: {len(verdict.accepted)} accepted + 1:",
      repr(tokenizer.decode(emitted)))  # fmt: skip

depth = trees.depths(medusa_tree)
head_probs = [1.0] + [  # head D's probability of each draft (the root: 1)
    softmax(logits_by_hand[depth[node] - 1])[token]
    for node, token in enumerate(medusa_tree.tokens[1:].tolist(), start=1)
]  # fmt: skip
labels = [f"{show(t)}\n{q:.2f}" for t, q in zip(medusa_tree.tokens, head_probs, strict=True)]
fig, ax = plt.subplots(figsize=(10, 6.5))
draw_tree(ax, medusa_tree, verdict.accepted, labels, next_token=show(verdict.next_token))
ax.set_title("one Medusa cycle: each draft with its head's probability (head D at depth D)")
plt.tight_layout()
plt.show()

# %% [markdown]
# The same token appears under different parents at one depth: the tree spends its nodes on the
# *combinations* of each head's top guesses, and only one path of them can be the text.
#
# **The whole loop.** `generate` with the Medusa drafter, greedy, on one held-out code prompt
# (prompt lookup beside it): whatever the drafts, the lossless verifier keeps only the target's
# own greedy tokens (the asserts), and τ says how many tokens each target forward emitted.

# %%
code_prompt = next(ids for kind, ids in heldout_prompts(tokenizer, per_corpus=1) if kind == "code")
vanilla = generate(params, config, code_prompt, max_new_tokens=n_new)
runs = {
    "medusa": generate(params, config, code_prompt, max_new_tokens=n_new,
                       drafter=MedusaDrafter(params, config, heads, medusa_cfg)),
    "prompt lookup": generate(params, config, code_prompt, max_new_tokens=n_new,
                              drafter=PromptLookupDrafter()),
}  # fmt: skip
for name, result in runs.items():
    assert result.tokens == vanilla.tokens
    print(f"{name:13}: the same {len(result.tokens)} tokens as vanilla greedy, "
          f"{result.target_forwards} target forwards instead of {vanilla.target_forwards}, "
          f"τ = {result.tau:.2f}")  # fmt: skip

# %% [markdown]
# ## 3. Typical acceptance changes the output law
#
# Medusa's paper does not verify with rejection sampling. Its **typical acceptance** (§2.3.1)
# accepts a candidate `x` when the target gives it enough probability,
#
# `p(x) > min(ε, δ · exp(−H(p)))`   (H: the entropy of the target's `p` at that node),
#
# takes the longest run of such tokens along any path of the tree, and draws the next token from
# `p` truncated to the tokens at or above the threshold (`typical_acceptance.typical_verify`, with
# the official code's ε = 0.09, δ = 0.3). Nothing compares `p` with how the candidate was
# proposed, and a typical candidate is accepted *every* time, where the lossless rule accepts a
# deterministic candidate with probability `p(x)` (notebook 02, section 1).
#
# minieagle's Medusa drafter is verified by the lossless `verify`, like every other method; we
# keep `typical_verify` only to measure what it would change. On a model small enough to
# enumerate: a tiny Llama (vocabulary 6, `model.init_params`, float64) is the target, a second
# one with other weights the draft, and the tree holds the draft's top-2 tokens at the root and
# its top-1 under each (`testing.make_topk_tree`, shape `[2, 1]`: deterministic candidates, like
# Medusa's). `testing.one_cycle_law` walks every branch of the real verifier and returns the
# exact law of the next 2 tokens; `testing.autoregressive_law` is the target's own.

# %%
tiny_config = LlamaConfig(
    vocab_size=6, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
    initializer_range=0.5,  # wide: peaked, context-dependent distributions (tests do the same)
    bos_token_id=1, eos_token_id=2,
)  # fmt: skip
tiny_target = model.init_params(tiny_config, seed=0, dtype=np.float64)
tiny_draft = model.init_params(tiny_config, seed=1, dtype=np.float64)


@functools.cache
def next_dist(context):
    """The target's p after `context` (a tuple of ids), T = 1: [V]."""
    logits, _, _ = model.forward(tiny_target, tiny_config, np.asarray(context))  # [L, V]
    return target_distribution(logits[-1], T1)


@functools.cache
def draft_dist(context):
    """The draft's q after `context`, T = 1: [V]."""
    logits, _, _ = model.forward(tiny_draft, tiny_config, np.asarray(context))  # [L, V]
    return target_distribution(logits[-1], T1)


def typical(epsilon=0.09, delta=0.3):
    """typical_verify with these thresholds, in verify's signature."""
    return functools.partial(typical_verify, epsilon=epsilon, delta=delta)


medusa_like_tree = testing.make_topk_tree(draft_dist, [2, 1])
context = (1, 0)  # <bos>, then token 0
target_law = testing.autoregressive_law(next_dist, context, 2)  # {(t1, t2): probability}
laws = {
    "lossless verify": testing.one_cycle_law(verify, next_dist, medusa_like_tree, context, 2),
    "typical acceptance": testing.one_cycle_law(typical(), next_dist, medusa_like_tree, context, 2),
}
p = next_dist(context)
example = medusa_like_tree(context, None)
print(f"p after {context}: {np.round(p, 3)}, typical threshold {typical_threshold(p):.3f}")
print(f"tree: tokens {example.tokens.tolist()}, parents {example.parents.tolist()}")
tv = {name: testing.total_variation(law, target_law) for name, law in laws.items()}
for name, law in laws.items():
    accepted = testing.accepted_count_law(
        verify if name == "lossless verify" else typical(), next_dist, medusa_like_tree, context
    )
    print(f"{name:18}: TV(law, target's law) = {tv[name]:.1e}, expected accepted drafts = "
          f"{sum(count * prob for count, prob in accepted.items()):.3f}, "
          f"{len(law)} of {len(target_law)} sequences possible")  # fmt: skip
assert tv["lossless verify"] < 1e-12 and tv["typical acceptance"] > 0.05
starts = sorted({seq[0] for seq in laws["typical acceptance"]})
print(f"typical acceptance emits only sequences starting with {starts}; the root's candidates "
      f"are {example.tokens[1:3].tolist()}")  # fmt: skip

shown = sorted(target_law, key=lambda s: (-target_law[s], s))[:10]
shown += [s for s in laws["typical acceptance"] if s not in shown]  # what typical can emit
x = np.arange(len(shown))
fig, ax = plt.subplots(figsize=(11, 3.6))
ax.bar(x - 0.27, [target_law[s] for s in shown], 0.27, label="target (autoregressive)")
for offset, (name, law) in zip((0.0, 0.27), laws.items(), strict=True):
    ax.bar(x + offset, [law.get(s, 0.0) for s in shown], 0.27, label=f"{name} (TV {tv[name]:.2f})")
ax.set_xticks(x, [f"{a},{b}" for a, b in shown])
ax.set_xlabel(f"next two tokens after {context} (the target's 10 most likely, then any other)")
ax.set_ylabel("exact probability")
ax.set_title("the law of the next 2 tokens after one cycle, tree [2, 1] of the draft's top-k")
ax.legend(loc="upper right")
plt.tight_layout()
plt.show()

# %% [markdown]
# The lossless verifier reproduces the target's law to rounding (the assert). Typical acceptance
# can emit only a few of the 36 sequences, those whose first token is the candidate it accepted
# (the cell prints which), and gives every other sequence probability zero, however likely the
# target finds it. That is the trade: more accepted drafts per cycle for an output that is no
# longer a sample from the target. The paper's claim that typical acceptance keeps quality is
# about the *quality* of the answers it produces on benchmarks, not about their law;
# `tests/test_typical_acceptance.py` asserts the difference, and that at T = 0 (one-hot `p`,
# only the argmax is typical) the two verifiers agree.
#
# **How the distance depends on ε.** ε caps the threshold: it is `min(ε, δ · exp(−H(p)))`. With
# 6 tokens `exp(−H(p)) ≥ 1/6`, so `δ · exp(−H(p)) ≥ 0.05`: below ε = 0.05 the threshold is ε
# everywhere, above it ε matters only where `p` is peaked enough that `δ · exp(−H(p)) > ε`. We
# sweep ε with δ = 0.3 over the six contexts `(1, x)`, and print and plot the mean TV and the mean
# number of accepted drafts against the lossless verifier's.

# %%
epsilons = [0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.09, 0.12, 0.2, 0.3]
contexts = [(1, token) for token in range(tiny_config.vocab_size)]
targets = {c: testing.autoregressive_law(next_dist, c, 2) for c in contexts}


def mean_accepted(verify_fn):
    """E[accepted drafts] of one cycle, averaged over the six contexts."""
    return np.mean([sum(n * q for n, q in testing.accepted_count_law(
        verify_fn, next_dist, medusa_like_tree, c).items()) for c in contexts])  # fmt: skip


sweep_tv = [
    np.mean([testing.total_variation(testing.one_cycle_law(
        typical(eps), next_dist, medusa_like_tree, c, 2), targets[c]) for c in contexts])
    for eps in epsilons
]  # fmt: skip
sweep_accepted = [mean_accepted(typical(eps)) for eps in epsilons]
lossless_accepted = mean_accepted(verify)
lossless_tv = np.mean([testing.total_variation(testing.one_cycle_law(
    verify, next_dist, medusa_like_tree, c, 2), targets[c]) for c in contexts])  # fmt: skip
for eps, d, a in zip(epsilons, sweep_tv, sweep_accepted, strict=True):
    print(f"ε = {eps:5.3f}: mean TV = {d:.3f}, mean accepted drafts = {a:.2f}")
print(f"lossless verify: mean TV = {lossless_tv:.1e}, mean accepted drafts = "
      f"{lossless_accepted:.2f}")  # fmt: skip
assert lossless_tv < 1e-12 and min(sweep_tv) > 0.1  # far from the target at every ε
assert min(sweep_accepted) > lossless_accepted  # and always accepting more
assert all(np.diff(sweep_accepted) <= 0)  # fewer as ε grows

fig, axes = plt.subplots(1, 2, figsize=(12, 3.4))
axes[0].plot(epsilons, sweep_tv, marker="o", label="typical acceptance (δ = 0.3)")
axes[0].axhline(lossless_tv, color="tab:green", ls="--", label="lossless verify")
axes[0].set_ylabel("mean TV to the target's law")
axes[0].set_title("distance from the target's law of 2 tokens")
axes[1].plot(epsilons, sweep_accepted, marker="o", label="typical acceptance (δ = 0.3)")
axes[1].axhline(lossless_accepted, color="tab:green", ls="--", label="lossless verify")
axes[1].set_ylabel("mean accepted drafts per cycle")
axes[1].set_ylim(0, 2.4)
axes[1].set_title("what it buys: accepted drafts (at most 2)")
for ax in axes:
    ax.set_xscale("log")
    ax.set_xlabel("ε (log scale)")
    ax.legend(loc="upper right")
plt.tight_layout()
plt.show()

# %% [markdown]
# At every ε of the sweep typical acceptance accepts more drafts than the lossless rule and its
# mean TV stays above 0.1 (the asserts; the printed means). A small ε makes almost every candidate
# typical (the threshold falls below `p` of the drafted tokens); a larger ε raises the threshold
# and accepts fewer, never more (asserted), but the distance does not fall to zero: a typical
# candidate is still taken with certainty and the next token is still drawn from a truncated `p`.
#
# ## 4. The methods side by side
#
# `minieagle bench --suite methods` decodes held-out prompts (`--prompts heldout`: windows of the
# prose and code test splits) and the "edit this code" prompts (`--prompts edit`) with every
# method, at T = 0 and T = 1, and writes τ and the wall-clock speedup over vanilla (median over
# repeats) to `docs/results/baselines-heldout-methods.json` and
# `docs/results/baselines-edit-methods.json` (the report's format is
# `bench_methods.format_report`'s; docs/benchmarks.md describes the suite). We print the paper's
# table from them, pooled over each file's prompts (the `all` rows). `eagle1-chain-auto`, `eagle2`
# and `eagle3` are sized automatically for the machine and setting (docs/speed.md); the cell
# names any method that drafted nothing (τ = 1 by construction).

# %%
results_dir = PRETRAINED.parents[1] / "docs" / "results"  # the repository's docs/results
prompt_sets = {"held-out": "baselines-heldout-methods.json", "edit": "baselines-edit-methods.json"}
bench = {name: results_dir / file for name, file in prompt_sets.items()}
missing = [str(path) for path in bench.values() if not path.is_file()]
if missing:
    print("not measured yet:", ", ".join(missing))
    print("write them with `minieagle bench --suite methods --prompts heldout|edit "
          "--out docs/results/baselines-<prompts>.json`")  # fmt: skip
    table = {}
else:
    table = {name: json.loads(path.read_text()) for name, path in bench.items()}
    methods = [m for m in table["held-out"]["T=0"]["all"] if m in table["edit"]["T=0"]["all"]]
    header = f"{'method':18}" + "".join(
        f" | {name:>8} {setting}: τ, speedup" for name in prompt_sets for setting in ("T=0", "T=1")
    )
    print(header)
    print("-" * len(header))
    for method in methods:
        cells = []
        for name in prompt_sets:
            for setting in ("T=0", "T=1"):
                entry = table[name][setting]["all"][method]
                cells.append(f"{entry['tau']:4.2f}, {entry['speedup']['median']:4.2f}x".rjust(24))
        print(f"{method:18}" + "".join(f" | {cell}" for cell in cells))
    for name in prompt_sets:
        for setting in ("T=0", "T=1"):
            rows = table[name][setting]["all"]
            idle = [m for m in methods if m != "vanilla" and rows[m]["mean_tree_size"] == 1]
            if idle:
                print(f"{name} {setting}: drafted nothing (mean tree size 1): {', '.join(idle)}")

# %% [markdown]
# A grouped bar chart of τ: one group per method, one bar per prompt set, at each temperature.

# %%
if table:
    fig, axes = plt.subplots(1, 2, figsize=(14, 3.8), sharey=True)
    x = np.arange(len(methods))
    for ax, setting in zip(axes, ("T=0", "T=1"), strict=True):
        for offset, name in zip((-0.2, 0.2), prompt_sets, strict=True):
            taus = [table[name][setting]["all"][m]["tau"] for m in methods]
            ax.bar(x + offset, taus, 0.4, label=f"{name} prompts")
        ax.set_xticks(x, methods, rotation=45, ha="right")
        ax.set_xlabel("method")
        ax.set_title(f"τ, {setting}")
        ax.legend(loc="upper center", ncol=2)
    highest = max(
        e["tau"] for t in table.values() for s in ("T=0", "T=1") for e in t[s]["all"].values()
    )
    axes[0].set_ylim(0, 1.3 * highest)  # room for the legend above the bars
    axes[0].set_ylabel("τ (tokens per target forward)")
    plt.tight_layout()
    plt.show()

# %% [markdown]
# Where is copying enough? The cell below prints, per prompt set and temperature, the method with
# the largest τ and the fastest one, prompt lookup's τ as a fraction of the best EAGLE variant's
# and of Medusa's, and each one's drafting cost per cycle (in vanilla decoding steps, the report's
# `draft` column). Read them with two facts in mind. Prompt lookup's drafts are right only where
# the continuation repeats the context; on the edit prompts that depends on whether the target
# actually copies the function (section 1 shows the one we decoded). EAGLE's head drafts from the
# target's features whatever the text, and Medusa's heads too, but without seeing the tokens they
# draft after (docs/medusa.md, "What the numbers say"). Where prompt lookup's fraction is near or
# above 1, copying is enough; where it is well below 1, feature-level drafting wins on τ.

# %%
if table:
    for name in prompt_sets:
        for setting in ("T=0", "T=1"):
            rows = table[name][setting]["all"]
            eagle = max((m for m in rows if m.startswith("eagle")), key=lambda m: rows[m]["tau"])
            winner = max(rows, key=lambda m: rows[m]["tau"])
            fastest = max(rows, key=lambda m: rows[m]["speedup"]["median"])
            line = [f"{name:8} {setting}: largest τ {winner} ({rows[winner]['tau']:.2f}), fastest "
                    f"{fastest} ({rows[fastest]['speedup']['median']:.2f}x)"]  # fmt: skip
            for rival in (eagle, "medusa"):
                if "pld" in rows and rival in rows:
                    ratio = rows["pld"]["tau"] / rows[rival]["tau"]
                    line.append(f"pld τ / {rival} τ = {ratio:.2f}")
            costs = ", ".join(f"{m} {rows[m]['draft_cost']:.2f}"
                              for m in ("pld", "medusa", eagle) if m in rows)  # fmt: skip
            print("; ".join(line) + f"\n    drafting cost per cycle (vanilla steps): {costs}")

# %% [markdown]
# Speed can disagree with τ. Prompt lookup drafts almost for free (compare the drafting costs
# printed above) and verifies a chain of at most 10 drafts, so it can be the fastest method with a
# smaller τ; when it is, the line names it as the fastest. Two traits of this tiny target matter
# when reading the edit column. The edit prompts favour copying only if the target does copy the
# function (section 1 prints what it wrote for one of them). And greedy decoding of a small model
# falls into loops (section 1's continuation repeats `name,`), which copying predicts well and
# sampling at T = 1 breaks: compare prompt lookup's τ at T = 0 and T = 1 in the table.

# %% [markdown]
# ## Exercises
#
# Worked answers: `minieagle/assignments/notebook_answers/07_baselines.md`.
#
# 1. **Change and observe.** In section 3, change the tree from `[2, 1]` to `[1, 1]` (one chain
#    of the draft's top-1 tokens) and to `[3]` (three candidates at the root, depth 1). Before
#    running, predict for each whether typical acceptance's TV at ε = 0.09 grows or shrinks, and
#    whether the lossless verifier's TV changes. Then run and explain what you see.
# 2. **Derive.** For a tree with one deterministic candidate `x` at the root and k = 1 token,
#    write the law of the emitted token under typical acceptance as a function of `p`, `x` and the
#    threshold `t = min(ε, δ · exp(−H(p)))`, and compare it with the lossless rule's. Show that
#    for δ < 1 the two agree for every `x` exactly when `p` is one-hot. Why does δ ≤ 1 guarantee
#    that the truncated distribution the next token is drawn from is never empty?
# 3. **Code: prompt lookup with Hugging Face's rules.** Write `hf_prompt_lookup(context,
#    num_tokens=10, max_ngram=2)` that takes the *first* occurrence of the longest matching n-gram
#    and stops copying at the end of the context (no repeats). Check it on section 1's `context`
#    (predict its drafts first), and check that on contexts where the n-gram occurs only once and
#    the copy does not run into the end it returns `prompt_lookup_by_hand`'s drafts.
# 4. **Explain.** In section 2's tree, the depth-2 nodes under the root's first and second child
#    hold the same token at the same rank. Why can at most one of them be accepted at T = 0, and
#    what does that say about how many of a Medusa tree's nodes can ever be useful in one cycle?
#    How does EAGLE's tree (notebook 03, section 4) avoid that?
