# %% [markdown]
# # 02 · Speculative sampling by hand
#
# A cheap *draft* proposes tokens; the *target* checks them all in one forward and keeps a prefix.
# At temperature > 0 "checks" means **rejection sampling** (Leviathan et al. 2023; Chen et al.
# 2023): the tokens that come out follow the target's distribution *exactly*, whatever the draft
# proposed. We compute that claim, prove it case by case with an exact enumerator, test it by
# Monte Carlo, extend it to trees (SpecInfer; EAGLE), and finally run a real draft model.
#
# `p` is the target's distribution, `q` the draft's: float64 vectors of shape `[V]` (Chen et al.
# swap the letters; the rule is the same).

# %%
import os
from functools import cache

import matplotlib.pyplot as plt
import numpy as np

from minieagle import model, testing
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import PRETRAINED
from minieagle.config import preset
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.generate import generate
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.testing import assert_lossless, exact_distribution, tv_bound
from minieagle.tree import Tree, path_to
from minieagle.verify import residual, verify

FAST = os.environ.get("MINIEAGLE_FAST") == "1"  # the test suite sets it: shorter loops
V, T1 = 8, SamplingParams(temperature=1.0)
p = target_distribution(np.array([2.0, 1.5, 0.3, 1.0, -0.5, 0.0, 0.8, -1.0]), T1)  # [V]
q = target_distribution(np.array([1.0, 2.2, 0.5, 0.2, 0.6, -1.0, 0.9, -0.3]), T1)  # [V]

# %% [markdown]
# ## 1. One position: accept with min(1, p/q), else draw from the residual
#
# The draft drew `x ~ q`. Keep it with probability `min(1, p(x)/q(x))`: tokens the draft
# over-proposes (`q > p`) are thinned out, the others always kept. On rejection, draw a
# replacement from the **residual** `r = norm(max(0, p − q))`: the mass the draft under-proposes.

# %%
accept = np.minimum(1.0, p / q)  # [V] acceptance probability of each token
r = residual(p, q, token=0)  # [V] norm(max(0, p - q)); `token` only matters for a one-hot q
tokens = np.arange(V)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
axes[0].bar(tokens - 0.2, p, 0.4, label="p (target)")
axes[0].bar(tokens + 0.2, q, 0.4, label="q (draft)")
axes[0].legend()
axes[1].bar(tokens, accept, color="tab:green")
axes[1].set_title("min(1, p/q)")
axes[2].bar(tokens, r, color="tab:red")
axes[2].set_title("residual norm(max(0, p − q))")
plt.tight_layout()
plt.show()

# %% [markdown]
# `x` comes out by two routes: the draft proposed `x` and it was kept, or *something* was rejected
# and the residual produced `x`. With the acceptance rate `β = Σ min(p, q)`,
# `q(x)·min(1, p(x)/q(x)) = min(p, q)(x)` and `P(reject) = 1 − β = Σ max(0, p − q)`, so
#
# `P(emit x) = min(p, q)(x) + (1 − β)·max(0, p − q)(x) / (1 − β) = p(x)`.

# %%
beta = np.minimum(p, q).sum()
emit = q * accept + (1 - beta) * r  # [V]
print(f"acceptance rate beta = {beta:.4f} = 1 - TV(p, q) = {1 - 0.5 * np.abs(p - q).sum():.4f}")
print("P(emit x) :", np.round(emit, 6))
print("p(x)      :", np.round(p, 6))
assert np.abs(emit - p).max() < 1e-15

# %% [markdown]
# ## 2. The exact law of the real code
#
# The algebra checks the rule; now the *code*. `minieagle.verify.verify` takes its randomness
# through two methods, `rng.coin(prob)` and `rng.draw(probs)`. `exact_distribution(fn)` runs
# `fn(rng)` with an `rng` that, at each new coin or draw, stops and restarts the run once per
# outcome, carrying that outcome's probability. Every branch of the program is walked once with the
# product of its probabilities, so the result *is* the output law of the code, to float64
# rounding. Nothing is sampled: for this `p` and `q` it is a proof, not an estimate.
#
# The draft's own draw `x ~ q` is enumerated too. The tree is a chain: the root, one draft.

# %%
target_probs = np.stack([p, p[::-1]])  # [N=2, V]: p at the root, any p after the draft token


def first_token(rng):
    """One speculative step with one draft token; returns the first emitted token."""
    x = rng.draw(q)  # the draft samples from the very q it hands to the verifier
    verdict = verify(Tree.chain(root=0, drafts=[x], proposals=[q]), target_probs, rng)
    return x if verdict.accepted else verdict.next_token


law = exact_distribution(first_token)  # {token: probability}
exact = np.array([law.get(x, 0.0) for x in range(V)])
print("exact law of verify:", np.round(exact, 6))
print(f"max |law - p| = {np.abs(exact - p).max():.1e}")
assert np.abs(exact - p).max() < 1e-15

# %% [markdown]
# Over several tokens `p` depends on the context. We make up a tiny "language model"
# (`target_next`: logits seeded by the context) and a draft that is a noisy copy of it, draft a
# chain of γ = 2 tokens, and compare the law of the first 3 emitted tokens (`one_cycle_law`: one
# speculative cycle, then plain sampling if fewer came out) with the target's autoregressive law.


# %%
@cache
def target_next(context):
    """p after `context` (a tuple of ids): a made-up but fixed distribution [V]."""
    return target_distribution(2 * np.random.default_rng(context).standard_normal(V), T1)


@cache
def draft_next(context):
    """q after `context`: the target's logits plus noise, like a decent small draft model."""
    noise = np.random.default_rng((99, *context)).standard_normal(V)  # [V]
    return target_distribution(np.log(target_next(context)) + noise, T1)


def draft_chain(context, rng, gamma=2):
    """Classic speculative decoding: sample gamma drafts, each with the q it came from (the same
    as `testing.make_sampled_tree(draft_next, [1] * gamma, without_replacement=False)`)."""
    drafts, proposals = [], []
    for _ in range(gamma):
        proposals.append(draft_next(context + tuple(drafts)))
        drafts.append(rng.draw(proposals[-1]))
    return Tree.chain(context[-1], drafts, proposals)


context = (1, 2)
got = testing.one_cycle_law(verify, target_next, draft_chain, context, k=3)  # {(t1, t2, t3): prob}
want = testing.autoregressive_law(target_next, context, k=3)
tv = testing.total_variation(got, want)
print(f"{len(want)} sequences of 3 tokens; TV(speculative, target) = {tv:.1e}")
assert tv < 1e-12

# %% [markdown]
# ## 3. Monte Carlo, for comparison
#
# The same step run 20 000 times with a seeded `SeededRandomness`. The empirical distribution only
# approaches `p`, at a TV distance of about `½·sqrt(V/N)`. `tv_bound(V, N, delta)` is a threshold
# exceeded with probability at most `delta` (that expectation plus McDiarmid's inequality): a test
# using it is not flaky, but it only detects errors larger than the bound.

# %%
N = 20_000
rng = SeededRandomness(0)
empirical = np.bincount([first_token(rng) for _ in range(N)], minlength=V) / N  # [V]
tv = 0.5 * np.abs(empirical - p).sum()
print(f"TV(empirical, p) = {tv:.4f} <= tv_bound(V, N) = {tv_bound(V, N):.4f}")
assert tv <= tv_bound(V, N)
plt.figure(figsize=(6, 3))
plt.bar(tokens - 0.2, empirical, 0.4, label=f"{N} runs of verify")
plt.bar(tokens + 0.2, p, 0.4, label="p")
plt.legend()
plt.show()

# %% [markdown]
# ## 4. Trees: several candidates per node
#
# The verifier tries a node's children in order; after a rejection `p` becomes the residual and
# the next child is tested against it (SpecInfer's multi-step speculative sampling). Each child
# must carry the distribution it was *really* drawn from (`Tree.proposals`):
#
# - **deterministic** candidates (EAGLE-2/3 take the draft's top-k) come from a point mass,
#   `q = one-hot` (`None`): accept with `p(x)`, else zero `p(x)` and renormalise;
# - **sampled** candidates (EAGLE-1 at T > 0) are drawn without replacement: a later sibling's
#   `q` is the draft's `q` with the earlier ones removed and renormalised.
#
# `minieagle.testing` builds both kinds from any draft distribution. Shape `[3, 2]` is three
# children under the root and two under each; the sampled tree keeps to `[3]`, since the exact
# check enumerates every draw of the drafter too.

# %%
topk_tree = testing.make_topk_tree(draft_next, [3, 2])
sampled_tree = testing.make_sampled_tree(draft_next, [3], without_replacement=True)
example = topk_tree(context, None)  # deterministic: the rng is not used
print("top-k tree:   tokens", example.tokens, "parents", example.parents)
example = sampled_tree(context, SeededRandomness(0))
print("sampled tree: tokens", example.tokens, "parents", example.parents, "proposals [3, V]:")
print(np.round(np.stack(example.proposals[1:]), 3))  # [3, V]: each row zero at earlier siblings


def node_contexts(tree, context):
    """What the target has seen at each node: the context, then the node's path."""
    return [context + tuple(tree.tokens[path_to(tree, i)[1:]].tolist()) for i in range(len(tree))]


def root_hit(make_tree):
    """The exact probability that some child of the root is accepted."""

    def run(rng):
        tree = make_tree(context, rng)
        target_probs = np.stack([target_next(c) for c in node_contexts(tree, context)])  # [N, V]
        return bool(verify(tree, target_probs, rng).accepted)

    return exact_distribution(run).get(True, 0.0)


for name, make_tree, k in (("top-k", topk_tree, 3), ("sampled", sampled_tree, 2)):
    tv = assert_lossless(verify, target_next, make_tree, context, k)
    print(f"{name:7} siblings: exact over {k} tokens (TV {tv:.0e}), P(accept at root) = "
          f"{root_hit(make_tree):.4f}")  # fmt: skip
covered = target_next(context)[topk_tree(context, None).tokens[1:4]].sum()
print(f"target mass on the top-k children: {covered:.4f}")
assert abs(root_hit(topk_tree) - covered) < 1e-15

# %% [markdown]
# With one-hot proposals a child is accepted exactly when a draw from `p` would have picked it, so
# a top-k node accepts with the target mass its children cover; sampled siblings can do better or
# worse, depending on how close `q` is to `p`.
#
# **The classic mistake** (SafeAILab/EAGLE issues #110, #183): take the top-k candidates but put
# the draft's real `q(x)` into `min(1, p/q)`. Those tokens were not drawn from `q`, so the
# rejection-sampling argument does not apply. The exact check catches it and says by how much.


# %%
def topk_tree_labelled_q(context, rng):
    """The top-k tree, each child wrongly labelled as drawn from the draft's q at its parent."""
    tree = topk_tree(context, rng)
    seen = node_contexts(tree, context)  # seen[tree.parents[i]]: the context node i was drafted in
    labels = (None, *(draft_next(seen[tree.parents[i]]) for i in range(1, len(tree))))
    return Tree(tree.tokens, tree.parents, labels)


try:
    assert_lossless(verify, target_next, topk_tree_labelled_q, context, k=3)
    raise RuntimeError("the broken verification was not caught")
except AssertionError as error:
    print("caught:", error)

# %% [markdown]
# ## 5. End to end: a draft model and a real target
#
# The shipped target `pretrained/small` (12 layers) and draft `pretrained/small-draft` (2 layers,
# same tokenizer), or two random `nano` models if those are not there. `DraftModelDrafter`
# proposes a chain of γ = 4 tokens per cycle; τ is the tokens emitted per target forward (bonus
# included); `acceptance_by_depth` is n-α, the chance draft n is accepted when drafts 1..n-1 were.

# %%
target_dir, draft_dir = PRETRAINED / "small", PRETRAINED / "small-draft"
if (target_dir / "model.safetensors").is_file() and (draft_dir / "model.safetensors").is_file():
    params, config, tokenizer = load_checkpoint(target_dir, dtype=np.float64)
    draft_params, draft_config, _ = load_checkpoint(draft_dir, dtype=np.float64)
    prompt_ids = tokenizer.encode("def read_config(path):\n", add_bos=True)
else:
    print("no shipped checkpoints: two random nano models instead")
    config = draft_config = preset("nano")
    params = model.init_params(config, seed=0, dtype=np.float64)
    draft_params = model.init_params(draft_config, seed=1, dtype=np.float64)
    prompt_ids, tokenizer = [1, 40, 41, 42], None

n_new = 24 if FAST else 128
for sampling in (SamplingParams(), T1):
    drafter = DraftModelDrafter(draft_params, draft_config, gamma=4)
    result = generate(
        params, config, prompt_ids, drafter=drafter, max_new_tokens=n_new, sampling=sampling, seed=0
    )
    rates = ", ".join(f"{a:.2f}" for a in result.acceptance_by_depth(4))
    print(f"T={sampling.temperature}: tau = {result.tau:.2f}, n-alpha = [{rates}]")
    if tokenizer is not None:
        print("   ", repr(tokenizer.decode(result.tokens)))
    if sampling.greedy:  # lossless at T = 0 means: the very tokens of vanilla greedy decoding
        vanilla = generate(params, config, prompt_ids, max_new_tokens=n_new)
        assert result.tokens == vanilla.tokens
        forwards = result.target_forwards, vanilla.target_forwards
        print("    == vanilla greedy, with {} target forwards instead of {}".format(*forwards))
