"""Public tests for the eagle1_head assignment: run them with `python -m pytest` in this folder.

They check the tree mask and positions on one small tree, the head on one input against the
paper's equations written out plainly, the shape of a drafted tree, and that greedy decoding
through your drafter emits exactly what vanilla greedy decoding emits. The grader runs these and
more (random trees, caches, tree masks in the head, every node of a drafted tree against the head
run along its path, sampled drafting, and a head that agrees with the target).
"""

import numpy as np
import pytest

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.generate import generate, greedy_reference
from minieagle.heads.eagle1 import Eagle1Config, head_forward, init_head
from minieagle.sampling import SamplingParams, SeededRandomness
from minieagle.static_trees import resolve_tree
from minieagle.tree import Tree, ancestor_mask, from_choices, position_ids

# A 6-token target with peaked, context-dependent next-token laws (float64 throughout).
CONFIG = LlamaConfig(
    vocab_size=6,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
HEAD_CFG = Eagle1Config.from_target(CONFIG)
HEAD = init_head(HEAD_CFG, seed=1, dtype=np.float64)  # random: any head must stay lossless
TOLERANCE = 1e-12


# ---------------------------------------------------------------------------- the tree


def _true_ancestors(parents, i):
    """Node i and every node above it, by walking up the parent pointers."""
    seen = [i]
    while parents[seen[-1]] >= 0:
        seen.append(int(parents[seen[-1]]))
    return seen


@pytest.mark.points(1)
def test_ancestor_mask_of_a_small_tree():
    """mask[i, j] iff j is i or an ancestor of i: parent, grandparent, ... up to the root."""
    parents = [-1, 0, 0, 1, 1, 3, 5]  # depths 0, 1, 1, 2, 2, 3, 4
    tree = Tree(np.arange(7), np.array(parents))
    got = np.asarray(ancestor_mask(tree))
    assert got.shape == (7, 7) and got.dtype == bool, (
        f"ancestor_mask must return a bool [N, N] array, got {got.dtype} {got.shape}"
    )
    for i in range(7):
        ancestors = _true_ancestors(parents, i)
        for j in range(7):
            if got[i, j] and j not in ancestors:
                raise AssertionError(
                    f"node {i} sees node {j}, which is not on its path from the root "
                    f"(path {ancestors[::-1]}): a node sees itself and its ancestors only"
                )
            if not got[i, j] and j in ancestors:
                what = (
                    "itself"
                    if j == i
                    else "its parent"
                    if j == parents[i]
                    else f"its ancestor {j}, above its parent (grandparent or higher)"
                )
                raise AssertionError(
                    f"ancestor_mask[{i}, {j}] is False but node {i} must see {what}: a node "
                    f"sees every node on its path {ancestors[::-1]}, not only its parent"
                )


@pytest.mark.points(1)
def test_position_ids_are_cached_plus_depth():
    """A node sits at cached + depth, as if its root-to-node path were the sequence."""
    tree = Tree(np.arange(7), np.array([-1, 0, 0, 1, 1, 3, 5]))
    want = 10 + np.array([0, 1, 1, 2, 2, 3, 4])
    got = np.asarray(position_ids(tree, 10))
    assert got.shape == want.shape and np.array_equal(got, want), (
        f"position_ids(tree, cached=10) = {got.tolist()}, expected cached + depth = "
        f"{want.tolist()}: siblings share a position; a node's index in the tree is not its "
        "depth"
    )


# ---------------------------------------------------------------------------- the head


def plain_head(tokens, features, head=HEAD, target=TARGET, cfg=HEAD_CFG, swap=False, bias=True):
    """The paper's equations written out for one sequence: e = E[x_{t+1}], z = [e, f_t],
    x = z W_fcᵀ + b, f̂ = DecoderLayer(x) (causal), logits = f̂ W_lmᵀ. swap / bias=False give
    two wrong versions, to name a mistake."""
    e = target["model.embed_tokens.weight"][np.asarray(tokens)]  # [T, d]
    z = np.concatenate([features, e] if swap else [e, features], axis=-1)  # [T, 2d]
    x = z @ head["fc.weight"].T + (head["fc.bias"] if bias else 0.0)  # [T, d]
    cos, sin, mask = model.placement(cfg.layer, len(x), 0, None, None, like=x)
    f_hat, _ = model.decoder_layer_forward(head, "layers.0.", cfg.layer, x[None], cos, sin, mask)
    return f_hat[0], f_hat[0] @ model.lm_head_weight(target).T  # [T, d], [T, V]


def _largest(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


@pytest.mark.points(2)
def test_head_forward_follows_the_papers_equations():
    """f̂ and logits equal e = Embed(x_{t+1}), fc([e, f_t]), the decoder layer, the LM head."""
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, CONFIG.vocab_size, 5)
    features = rng.standard_normal((5, CONFIG.hidden_size))
    predicted, logits, _ = head_forward(HEAD, HEAD_CFG, TARGET, tokens, features)
    want_f, want_logits = plain_head(tokens, features)
    assert np.shape(predicted) == want_f.shape and np.shape(logits) == want_logits.shape, (
        f"for unbatched inputs (tokens [T], features [T, d]) return f̂ [T, d] and logits "
        f"[T, V] = {want_f.shape}, {want_logits.shape}; got {np.shape(predicted)}, "
        f"{np.shape(logits)} (drop the batch axis you added)"
    )
    error = _largest(predicted, want_f)
    if error > TOLERANCE:
        if _largest(predicted, plain_head(tokens, features, swap=True)[0]) <= TOLERANCE:
            raise AssertionError(
                "fc's input is concatenated in the wrong order: yours is [f_t, Embed(x_{t+1})], "
                "the head's is [Embed(x_{t+1}), f_t] (the order fc.weight was trained for)"
            )
        if _largest(predicted, plain_head(tokens, features, bias=False)[0]) <= TOLERANCE:
            raise AssertionError("f̂ matches fc without its bias: add fc.bias when cfg.fc_bias")
        raise AssertionError(
            f"f̂ differs from the paper's equations by up to {error:.3g}: check Embed(x_{{t+1}}) "
            "from the target's embedding, z = [e, f_t], fc (+ bias), then "
            "model.decoder_layer_forward with cos, sin and the mask from model.placement"
        )
    error = _largest(logits, np.asarray(predicted) @ model.lm_head_weight(TARGET).T)
    assert error <= TOLERANCE, (
        f"f̂ is right but the logits are off by {error:.3g}: logits = f̂ W_lmᵀ, the target's "
        "LM head (model.lm_head_weight(target_params)) applied to the predicted feature"
    )


# ---------------------------------------------------------------------------- the drafter


def _begin(drafter, prompt, sampling=None):
    """Start `drafter` on `prompt` as generate does: features of every prompt token but the
    last (the first root)."""
    _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray(prompt[:-1]), output_hidden=("final",))
    drafter.begin(prompt, {"final": hidden["final"]}, sampling or SamplingParams())


@pytest.mark.points(1)
def test_drafted_tree_has_the_static_shape_and_the_heads_top_tokens():
    """Greedy: the tree's parents are the static tree's; each node's children are the top
    tokens of the head's draft logits at it, most likely first."""
    drafter = Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=[[0], [1], [0, 0], [0, 1]])
    _begin(drafter, [1, 3, 4])
    tree = drafter.propose(4, SeededRandomness(0), max_nodes=32)
    want = from_choices(resolve_tree([[0], [1], [0, 0], [0, 1]]), 4, lambda path: 0)
    assert list(tree.parents) == list(want.parents) and int(tree.tokens[0]) == 4, (
        f"the drafted tree has tokens {list(tree.tokens)} and parents {list(tree.parents)}; "
        f"the static tree [[0], [1], [0, 0], [0, 1]] has parents {list(want.parents)} under "
        "the root 4 (nodes by depth, then rank; each node's parent is the node it was drafted "
        "from)"
    )
    draft_logits = drafter.draft_logits
    for parent, kids in ((0, [1, 2]), (1, [3, 4])):
        order = np.argsort(-draft_logits[parent], kind="stable")[:2].tolist()
        got = [int(t) for t in tree.tokens[kids]]
        assert got == order, (
            f"node {parent}'s children are tokens {got}, expected the top-2 of the head's draft "
            f"logits there, most likely first: {order}"
            + (
                " (node 1's logits were never computed: feed each level that has children "
                "to the head with _feed_level)"
                if np.isnan(draft_logits[parent]).any()
                else ""
            )
        )


@pytest.mark.points(2)
def test_greedy_chain_decoding_equals_vanilla_greedy():
    """Greedy speculative decoding is lossless: whatever the head drafts, the tokens are the
    target's own greedy continuation."""
    for prompt in ([1, 3], [4, 0, 5]):
        drafter = Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="chain:3")
        result = generate(
            TARGET,
            CONFIG,
            prompt,
            drafter=drafter,
            max_new_tokens=12,
            stop_at_eos=False,
            rng=SeededRandomness(0),
        )
        want = greedy_reference(TARGET, CONFIG, prompt, 12)
        if result.tokens != want:
            first = next(
                (k for k, (a, b) in enumerate(zip(result.tokens, want, strict=False)) if a != b),
                min(len(result.tokens), len(want)),
            )
            raise AssertionError(
                f"greedy EAGLE-1 (chain:3) after {prompt} emitted {result.tokens}, vanilla "
                f"greedy decoding emits {want} (first difference at token {first}). Drafts "
                "cannot change greedy output if the target verifies the tree right: check "
                "tree.ancestor_mask, tree.position_ids (cached + depth) and that each node's "
                "parent is the node it was drafted from"
            )
