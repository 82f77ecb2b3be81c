# %% [markdown]
# # 02 · Speculative sampling by hand
#
# A cheap *draft* proposes tokens; the *target* checks them all in one forward and keeps a prefix.
# At temperature > 0 "checks" means **rejection sampling** (Leviathan et al. 2023; Chen et al.
# 2023): the tokens that come out follow the target's distribution *exactly*, whatever the draft
# proposed. We rebuild each piece by hand and check it against the library:
#
# 1. the rule at one position, accept or draw from the residual (`minieagle.verify`), bit for bit;
# 2. its output law, computed exactly by walking every branch of the real code;
# 3. the same by Monte Carlo, for comparison;
# 4. the walk down a draft *tree* (`minieagle.verify.verify`), whose law we match exactly, and
#    block verification (`minieagle.block_verify`), which judges each path as a whole;
# 5. a real draft model (`minieagle.drafters.draft_model`) and the whole speculative loop
#    (`minieagle.generate`), which we match token for token.
#
# `p` is the target's distribution, `q` the draft's: float64 vectors of shape `[V]` (Chen et al.
# swap the letters; the rule is the same). Two numbers describe a run, as the code and the EAGLE
# papers define them: **τ**, the tokens emitted per target forward (the target's own token
# included), and **n-α** for n = 0, 1, 2, ...: the acceptance rate of the draft at depth n + 1
# among the cycles that accepted the n drafts above it. So 0-α is the acceptance rate of the first
# draft token.

# %%
import os
from functools import cache

import matplotlib.pyplot as plt
import numpy as np

from minieagle import model, testing
from minieagle.block_verify import verify_block
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import PRETRAINED
from minieagle.config import preset
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.generate import generate
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.testing import assert_lossless, exact_distribution, tv_bound
from minieagle.tree import Tree, path_to
from minieagle.verify import acceptance_probability, residual, verify

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
#
# A *deterministic* candidate (a top-k pick, as in EAGLE-2/3) was not drawn from `q` at all; it was
# proposed with certainty, so its proposal is the point mass `q = e_x` (the library writes `None`).
# The rule becomes: keep `x` with probability `p(x)`; on rejection zero `p(x)` and renormalise.
# Both cases, written from the rule alone, against `minieagle.verify`:


# %%
def acceptance_by_hand(p, q, x):
    """min(1, p(x) / q(x)); q = None is a deterministic candidate, proposed with q(x) = 1."""
    ### BEGIN SOLUTION verifier
    return min(1.0, p[x]) if q is None else min(1.0, p[x] / q[x])
    ### END SOLUTION


def residual_by_hand(p, q, x):
    """What p becomes once candidate x, proposed from q, is rejected: norm(max(0, p - q))."""
    ### BEGIN SOLUTION verifier
    if q is None:  # q = e_x: max(0, p - e_x) is p with p(x) zeroed
        r = p.copy()
        r[x] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    return r / r.sum()
    ### END SOLUTION


for x in range(V):
    for proposal in (q, None):
        assert acceptance_by_hand(p, proposal, x) == acceptance_probability(p, proposal, x)
        assert np.array_equal(residual_by_hand(p, proposal, x), residual(p, proposal, x))
print("acceptance and residual by hand == minieagle.verify for every x, sampled and "
      "deterministic: bit for bit")  # fmt: skip

accept = np.array([acceptance_by_hand(p, q, x) for x in range(V)])  # [V]
r = residual_by_hand(p, q, 0)  # [V]; for a sampled q the residual does not depend on x
tokens = np.arange(V)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
axes[0].bar(tokens - 0.2, p, 0.4, label="p (target)")
axes[0].bar(tokens + 0.2, q, 0.4, label="q (draft)")
axes[0].set_title("the two distributions")
axes[0].set_ylabel("probability")
axes[0].legend()
axes[1].bar(tokens, accept, color="tab:green")
axes[1].set_title("acceptance probability min(1, p/q)")
axes[1].set_ylabel("P(keep x | x was drafted)")
axes[2].bar(tokens, r, color="tab:red")
axes[2].set_title("residual norm(max(0, p − q))")
axes[2].set_ylabel("probability after a rejection")
for ax in axes:
    ax.set_xlabel("token x")
    ax.set_xticks(tokens)
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
plt.figure(figsize=(6.5, 3.2))
plt.bar(tokens - 0.2, empirical, 0.4, label=f"{N} runs of verify")
plt.bar(tokens + 0.2, p, 0.4, label="p (exact)")
plt.xlabel("first emitted token")
plt.ylabel("probability")
plt.title("Monte Carlo estimate of the output law vs p")
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


# %% [markdown]
# **The walk, by hand.** Start at the root with the target's `p` there. Try the node's children in
# node order (skipping padding slots, token −1): accept child `x` with `min(1, p(x)/q(x))` and
# descend into it, or, on rejection, replace `p` by the residual and try the next child. When no
# child is accepted (a leaf has none), draw the next token from the current `p`. We check it
# against `verify` twice: with the same seeded randomness both give the same verdict, and the
# exact laws of (accepted path, next token), drafting included, are identical dictionaries.


# %%
def verify_by_hand(tree, target_probs, rng):
    """Recursive rejection sampling down `tree`; target_probs[i]: p after node i [V].
    Returns (accepted nodes from the root down, the next token)."""
    ### BEGIN SOLUTION verifier
    node, accepted = 0, []
    while True:
        p = target_probs[node]  # [V]
        for child in range(1, len(tree)):  # node order: parents come before children
            if tree.parents[child] != node or tree.tokens[child] < 0:
                continue
            x, q = int(tree.tokens[child]), tree.proposals[child]
            if rng.coin(acceptance_by_hand(p, q, x)):
                accepted.append(child)
                node = child
                break
            p = residual_by_hand(p, q, x)
        else:  # no child accepted
            return tuple(accepted), int(rng.draw(p))
    ### END SOLUTION


def library_walk(tree, target_probs, rng):
    """`minieagle.verify.verify`, its Verdict as a hashable (accepted, next token) pair."""
    verdict = verify(tree, target_probs, rng)
    return tuple(verdict.accepted), verdict.next_token


def verdict_law(walk, make_tree):
    """The exact law of walk's (accepted, next token) on make_tree's trees after `context`."""

    def run(rng):
        tree = make_tree(context, rng)
        target_probs = np.stack([target_next(c) for c in node_contexts(tree, context)])  # [N, V]
        return walk(tree, target_probs, rng)

    return exact_distribution(run)


laws = {}  # name -> the library's exact law, reused below
for name, make_tree in (("top-k", topk_tree), ("sampled", sampled_tree)):
    for seed in range(50):
        ours_rng, library_rng = SeededRandomness(seed), SeededRandomness(seed)
        tree = make_tree(context, ours_rng)
        assert make_tree(context, library_rng).tokens.tolist() == tree.tokens.tolist()
        probs = np.stack([target_next(c) for c in node_contexts(tree, context)])  # [N, V]
        assert verify_by_hand(tree, probs, ours_rng) == library_walk(tree, probs, library_rng)
    ours, library = verdict_law(verify_by_hand, make_tree), verdict_law(library_walk, make_tree)
    assert ours == library  # the same outcomes with the same probabilities, bit for bit
    laws[name] = library
    print(f"{name:7} tree: same verdict for 50 seeds; identical exact laws over "
          f"{len(ours)} outcomes (accepted path, next token)")  # fmt: skip


# %% [markdown]
# Both kinds of tree are lossless: one cycle followed by plain sampling gives the target's exact
# law of the next tokens. We also measure the chance that some child of the root is accepted.


# %%
def root_hit(law):
    """From a verdict law: the exact probability that some child of the root is accepted."""
    return sum(prob for (accepted, _), prob in law.items() if accepted)


for name, make_tree, k in (("top-k", topk_tree, 3), ("sampled", sampled_tree, 2)):
    tv = assert_lossless(verify, target_next, make_tree, context, k)
    print(f"{name:7} siblings: exact over {k} tokens (TV {tv:.0e}), P(accept at root) = "
          f"{root_hit(laws[name]):.4f}")  # fmt: skip
covered = target_next(context)[topk_tree(context, None).tokens[1:4]].sum()
print(f"target mass on the top-k children: {covered:.4f}")
assert abs(root_hit(laws["top-k"]) - covered) < 1e-15

# %% [markdown]
# With one-hot proposals a child is accepted exactly when a draw from `p` would have picked it, so
# a top-k node accepts with the target mass its children cover (the assert above); sampled
# siblings can do better or worse, depending on how close `q` is to `p`.
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
# ## 4b. Judging a path as one block
#
# Token by token, a draft the target likes less than the draft did (`p(x) < q(x)`) survives only
# with probability `p(x)/q(x)`, and everything under it is lost with it, however much the target
# likes the tokens after it. **Block verification** (`minieagle.block_verify.verify_block`, the
# default of `generate`) judges each path as a whole, from the leaves back to the root: every node
# carries a *mass* `m` (at most 1 in total), its child `x ~ q` gets the weight `min(1, m(x)/q(x))`,
# a refused child leaves `max(0, m − q)` renormalised by the chance of its refusal, and a node
# whose children were all refused is kept with probability equal to its mass. On a chain this is
# Sun et al.'s block verification, on one level the recursive rejection above; docs/lossless.md §6
# proves the law is still the target's. The exact check agrees, and the exact law of *how many*
# drafts a cycle keeps shows the gain:


# %%
block_cases = {
    "chain of 3": testing.make_sampled_tree(draft_next, [1, 1, 1], without_replacement=True),
    "tree [2, 1]": testing.make_sampled_tree(draft_next, [2, 1], without_replacement=True),
}
kept_laws = {}
for name, make_tree in block_cases.items():
    for verifier in (verify, verify_block):
        tv = assert_lossless(verifier, target_next, make_tree, context, k=2)
        law = testing.accepted_count_law(verifier, target_next, make_tree, context)
        kept_laws[name, verifier.__name__] = law
        mean = sum(n * prob for n, prob in law.items())
        print(f"{name:11} {verifier.__name__:12} lossless over 2 tokens (TV {tv:.0e}); "
              f"E[drafts kept] = {mean:.4f}, P(none kept) = {law.get(0, 0.0):.4f}")  # fmt: skip

fig, axes = plt.subplots(1, len(block_cases), figsize=(10, 3.2))
for ax, name in zip(axes, block_cases, strict=True):
    for shift, verifier in ((-0.2, "verify"), (0.2, "verify_block")):
        law = kept_laws[name, verifier]
        counts = np.arange(4)
        ax.bar(counts + shift, [law.get(n, 0.0) for n in counts], width=0.4,
               label="token by token" if verifier == "verify" else "as one block")  # fmt: skip
    ax.set_title(name)
    ax.set_xlabel("drafts kept in one cycle")
    ax.set_xticks(np.arange(4))
axes[0].set_ylabel("exact probability")
axes[0].legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# The block keeps the same first draft just as often (the root's children are judged alike) but
# keeps longer paths more often. On the tiny target's validation prompts at T = 1 this is +4 %
# tokens per forward for EAGLE-1's `chain:3`, +11 % for `chain:5`, +5 % for the default EAGLE-2
# tree and +15 % for EAGLE-3's deeper one (docs/lossless.md §6).

# %% [markdown]
# ## 5. End to end: a draft model and a real target
#
# The shipped target `pretrained/small` (12 layers) and draft `pretrained/small-draft` (2 layers,
# same tokenizer), or two random `nano` models if those are not there. `DraftModelDrafter`
# proposes a chain of γ = 4 tokens per cycle: at T = 0 the draft's argmax each time (a
# deterministic candidate, `q = None`), at T > 0 a draw from the draft's distribution processed
# exactly like the target's, which travels with the token as its `q`. By hand, with full forwards
# and no KV cache, the same proposal looks like this:

# %%
target_dir, draft_dir = PRETRAINED / "small", PRETRAINED / "small-draft"
if (target_dir / "model.safetensors").is_file() and (draft_dir / "model.safetensors").is_file():
    params, config, tokenizer = load_checkpoint(target_dir, dtype=np.float64)
    draft_params, draft_config, _ = load_checkpoint(draft_dir, dtype=np.float64)
    prompt_ids = tokenizer.encode("def read_config(path):\n", add_bos=True)
    show = tokenizer.token_text  # a token as readable text: spaces as ·, newlines as \\n
else:
    print("no shipped checkpoints: two random nano models instead")
    config = draft_config = preset("nano")
    params = model.init_params(config, seed=0, dtype=np.float64)
    draft_params = model.init_params(draft_config, seed=1, dtype=np.float64)
    prompt_ids, tokenizer, show = [1, 40, 41, 42], None, str
gamma = 4


def draft_chain_by_hand(context, rng, sampling):
    """DraftModelDrafter's proposal after `context` (a list; its last token is the root): gamma
    drafts, each the draft model's argmax (T = 0, q = None) or a draw from its processed q."""
    drafts, proposals = [], []
    for _ in range(gamma):
        ids = np.asarray(context + drafts)  # [T] the whole sequence: no cache
        logits = model.forward(draft_params, draft_config, ids)[0][-1]  # [V] after the last token
        if sampling.greedy:
            token, proposal = int(np.argmax(logits)), None
        else:
            proposal = target_distribution(logits, sampling)  # [V] the q the verifier will see
            token = int(rng.draw(proposal))
        drafts.append(token)
        proposals.append(proposal)
    return Tree.chain(context[-1], drafts, proposals)


for sampling in (SamplingParams(), T1):
    drafter = DraftModelDrafter(draft_params, draft_config, gamma=gamma)
    drafter.begin(prompt_ids, {}, sampling)
    library_chain = drafter.propose(prompt_ids[-1], SeededRandomness(0), max_nodes=gamma + 1)
    chain = draft_chain_by_hand(prompt_ids, SeededRandomness(0), sampling)
    assert chain.tokens.tolist() == library_chain.tokens.tolist()
    pairs = zip(chain.proposals[1:], library_chain.proposals[1:], strict=True)  # per draft
    q_gap = max((np.abs(ours - lib).max() for ours, lib in pairs if ours is not None), default=0.0)
    assert q_gap < 1e-12  # the drafter's cached forwards round differently, by ~1e-15
    gap = "q = None: deterministic" if sampling.greedy else f"max |q by hand - q| = {q_gap:.1e}"
    print(f"T={sampling.temperature}: drafts {[show(t) for t in chain.tokens[1:]]} "
          f"== DraftModelDrafter.propose; {gap}")  # fmt: skip

# %% [markdown]
# **The whole loop, by hand.** Each cycle drafts a chain after the tokens so far (its root is the
# last one), runs the target once over the context and the chain (a plain forward: rows `root,
# draft 1, ..., draft γ` hold the target's `p` after each node), walks the chain with
# `verify_by_hand`, and emits the accepted drafts and then the target's own token: the correction
# after a rejection, or the bonus token when every draft was accepted. It draws from the same
# seeded randomness in the same order as `minieagle.generate` judging token by token
# (`verification="token"`; its default judges the chain as one block, section 4b): the drafter's
# draws, then the verifier's coins and draw, so the two must agree token for token.


# %%
def speculative_by_hand(prompt_ids, n_new, sampling, seed):
    """The draft-model speculative loop; stops after n_new tokens or at end-of-text.
    Returns (tokens, drafts accepted per cycle)."""
    rng = SeededRandomness(seed)
    tokens, accepted_per_cycle = [], []
    while True:
        context = prompt_ids + tokens
        chain = draft_chain_by_hand(context, rng, sampling)
        ids = np.asarray(context[:-1] + chain.tokens.tolist())  # [T + gamma] context, drafts
        logits = model.forward(params, config, ids)[0][-len(chain) :]  # [gamma + 1, V]
        target_probs = [target_distribution(row, sampling) for row in logits]  # p at each node
        accepted, next_token = verify_by_hand(chain, target_probs, rng)
        accepted_per_cycle.append(len(accepted))
        for token in [*chain.tokens[list(accepted)].tolist(), next_token]:
            tokens.append(token)
            if token == config.eos_token_id or len(tokens) == n_new:
                return tokens, accepted_per_cycle


def alpha_by_hand(accepted_per_cycle):
    """n-α for n = 0 .. gamma-1, every cycle having drafted a full chain of gamma: among the
    cycles that accepted at least n drafts, the fraction that accepted draft n + 1 too."""
    a = np.asarray(accepted_per_cycle)
    return [(a > n).sum() / (a >= n).sum() if (a >= n).any() else np.nan for n in range(gamma)]


n_new = 24 if FAST else 128
alphas = {}
for sampling in (SamplingParams(), T1):
    drafter = DraftModelDrafter(draft_params, draft_config, gamma=gamma)
    result = generate(params, config, prompt_ids, drafter=drafter, max_new_tokens=n_new,
                      sampling=sampling, seed=0, verification="token")  # fmt: skip
    tokens, accepted = speculative_by_hand(prompt_ids, n_new, sampling, seed=0)
    assert tokens == result.tokens and accepted == result.accepted_per_cycle
    assert set(result.drafted_depth_per_cycle) == {gamma}  # every cycle drafted a full chain
    alphas[sampling.temperature] = result.acceptance_by_depth(gamma)  # [0-α, ..., 3-α]
    np.testing.assert_array_equal(alpha_by_hand(accepted), alphas[sampling.temperature])
    reached = [int((np.asarray(accepted) >= n).sum()) for n in range(gamma)]
    rates = ", ".join(f"{n}-α {a:.2f}" for n, a in enumerate(alphas[sampling.temperature]))
    print(f"T={sampling.temperature}: by hand == generate ({len(tokens)} tokens, "
          f"{len(accepted)} cycles); tau = {result.tau:.2f}; {rates}")  # fmt: skip
    print(f"    cycles behind 0-α .. {gamma - 1}-α: {reached}")
    if tokenizer is not None:
        print("   ", repr(tokenizer.decode(result.tokens)))
    if sampling.greedy:  # lossless at T = 0 means: the very tokens of vanilla greedy decoding
        vanilla = generate(params, config, prompt_ids, max_new_tokens=n_new)
        assert result.tokens == vanilla.tokens
        forwards = result.target_forwards, vanilla.target_forwards
        print("    == vanilla greedy, with {} target forwards instead of {}".format(*forwards))

depth = np.arange(gamma)
plt.figure(figsize=(7, 3.4))
for offset, (temperature, alpha) in zip((-0.2, 0.2), alphas.items(), strict=True):
    plt.bar(depth + offset, alpha, 0.4, label=f"T = {temperature}")
plt.xticks(depth, [f"{n}-α" for n in depth])
plt.xlabel("n: the draft at depth n + 1 (0-α is the first draft)")
plt.ylabel("acceptance rate n-α")
plt.ylim(0, 1.05)
plt.title(f"draft model, γ = {gamma}, {n_new} new tokens")
plt.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
plt.tight_layout()
plt.show()

# %% [markdown]
# Each n-α counts only the cycles that reached depth n + 1 with everything above it accepted, the
# counts printed under each run; a rate resting on a handful of cycles is a rough estimate, and a
# rate with no cycle behind it is `nan`. At T = 0 the output is exactly vanilla greedy decoding,
# in fewer target forwards whenever drafts are accepted; at T = 1 it is a sample from the target's
# own distribution (sections 2 and 4 prove that law; this run is one draw from it).
#
# ## Exercises
#
# Worked answers: `minieagle/assignments/notebook_answers/02_speculative_sampling.md`.
#
# 1. **Predict, then run.** Set `q = p.copy()` (a perfect draft) and rerun sections 1 and 2.
#    Before running, predict β, the acceptance probabilities, what `residual(p, q, 0)` and
#    `residual_by_hand(p, q, 0)` return when `max(0, p − q)` has no mass at all, and whether the
#    bit-for-bit check survives. Why can that difference never change what `verify` emits?
# 2. **Derive.** For a deterministic candidate (`q = e_x`), show from section 1's two routes that
#    `P(emit y) = p(y)` for every token `y`. Then, for a chain of γ drafts in which every cycle
#    drafted all γ, show that `1 + 0-α + 0-α·1-α + ... + 0-α·1-α···(γ−1)-α` equals the mean
#    number of tokens emitted per cycle, and say why section 5's τ can be slightly smaller.
# 3. **Change and observe.** In section 4 change the top-k shape from `[3, 2]` to `[5, 2]` (and
#    the `covered` line to the five children). Predict `P(accept at root)` before running, using
#    only `target_next(context)` and `draft_next(context)`, then check it against the output.
# 4. **Code.** Write `greedy_walk(tree, target_argmax)` for T = 0: follow the child equal to the
#    target's argmax at the current node, and emit the argmax where none is. Check it against
#    `minieagle.testing.reference_greedy_verify` and against `verify` with one-hot `target_probs`
#    on the top-k trees of section 4 for contexts `(a, b)` with `a, b` in `range(V)`.
