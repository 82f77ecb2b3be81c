"""Hidden tests for the eagle1_head assignment: the head, the tree mask and the drafter, exactly.

Every oracle is independent of the submitted files: the tree's mask and depths by walking parent
pointers; the head by the paper's equations written out from `model` and `layers` pieces; a
drafted node's draft logits by running that plain head along the node's path as an ordinary
sequence; greedy decoding by `generate.greedy_reference` (a full forward per token). Efficiency
is checked with a head built to agree with the target, which must get every draft accepted.
"""

import numpy as np
import pytest
from test_public import CONFIG, HEAD, HEAD_CFG, TARGET  # the same tiny target and head

from minieagle import inference, model
from minieagle import tree as trees
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.generate import generate, greedy_reference
from minieagle.heads.eagle1 import (
    Eagle1Config,
    eagle1_loss,
    head_forward,
    init_head,
    new_head_cache,
)
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.static_trees import resolve_tree
from minieagle.tree import Tree

TOLERANCE = 1e-12
# The drafter runs the head on the fast path (inference.py) with a KV cache and a tree mask; the
# oracle is uncached and plain, so the two agree up to the rounding of a different summation order.
DRAFT_TOLERANCE = 1e-10
SMALL_TREE = [[0], [1], [0, 0]]


def _noisy_head(cfg, seed):
    """A random head whose norm gains and fc bias are not 1 and 0 (those would hide bugs)."""
    head = init_head(cfg, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed)
    for name, value in head.items():
        if name.endswith(("norm.weight", "fc.bias")):
            head[name] = 1.0 + 0.3 * rng.standard_normal(value.shape)
    return head


def plain_head(head, cfg, tokens, features, *, swap=False, bias=True):
    """The paper's equations for one causal sequence: e = E[x_{t+1}], z = [e, f_t] (or one of
    them for the ablations), x = z W_fcᵀ (+ b), f̂ = DecoderLayer(x), logits = f̂ W_lmᵀ.
    swap / bias=False give two wrong versions, to name a mistake."""
    streams = []
    if cfg.inputs != "feature":
        streams.append(TARGET["model.embed_tokens.weight"][np.asarray(tokens)])  # [T, d]
    if cfg.inputs != "token":
        streams.append(np.asarray(features))  # [T, d]
    z = np.concatenate(streams[::-1] if swap else streams, axis=-1)  # [T, fc_in]
    x = z @ head["fc.weight"].T  # [T, fc_in] -> [T, d]
    if cfg.fc_bias and bias:
        x = x + head["fc.bias"]
    cos, sin, mask = model.placement(cfg.layer, len(x), 0, None, None, like=x)
    f_hat, _ = model.decoder_layer_forward(head, "layers.0.", cfg.layer, x[None], cos, sin, mask)
    return f_hat[0], f_hat[0] @ model.lm_head_weight(TARGET).T  # [T, d], [T, V]


def _head_mistake(head, cfg, tokens, features, predicted, logits) -> str | None:
    """None if (predicted, logits) are the plain head's on one sequence, else what is wrong."""
    want_f, want_logits = plain_head(head, cfg, tokens, features)
    error = _largest(predicted, want_f)
    if error <= TOLERANCE:
        error = _largest(logits, want_logits)
        if error <= TOLERANCE:
            return None
        return (
            f"f̂ is right but the logits are off by {error:.3g}: logits = f̂ W_lmᵀ with the "
            "target's LM head, model.lm_head_weight(target_params)"
        )
    if _largest(predicted, plain_head(head, cfg, tokens, features, swap=True)[0]) <= TOLERANCE:
        return (
            "fc's input is concatenated in the wrong order: [f_t, Embed(x_{t+1})] instead of "
            "[Embed(x_{t+1}), f_t]"
        )
    if _largest(predicted, plain_head(head, cfg, tokens, features, bias=False)[0]) <= TOLERANCE:
        return "f̂ matches fc without its bias: add fc.bias when cfg.fc_bias"
    return (
        f"f̂ differs from the paper's equations by {error:.3g}: Embed(x_{{t+1}}), z = [e, f_t], "
        "fc (+ bias), model.decoder_layer_forward with model.placement's cos, sin and mask"
    )


def _largest(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))))


def _random_tree(rng, n):
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    return Tree(rng.integers(0, 6, n), np.array(parents))


def _walk_up(parents, i):
    path = [i]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return path


# ---------------------------------------------------------------------------- the tree


@pytest.mark.points(2)
def test_ancestor_mask_on_random_trees():
    """Every node sees exactly the nodes on its root path, in trees of every shape."""
    rng = np.random.default_rng(0)
    shapes = [Tree.chain(0, [1, 2, 3, 4]), trees.from_choices(resolve_tree("default"), 0, len)]
    for tree in shapes + [_random_tree(rng, int(rng.integers(1, 14))) for _ in range(30)]:
        got = np.asarray(trees.ancestor_mask(tree))
        n = len(tree)
        assert got.shape == (n, n) and got.dtype == bool, (
            f"ancestor_mask must return bool [N, N] = ({n}, {n}), got {got.dtype} {got.shape}"
        )
        for i in range(n):
            path = _walk_up(tree.parents, i)
            want = np.zeros(n, dtype=bool)
            want[path] = True
            missing = [j for j in path if not got[i, j]]
            extra = [int(j) for j in np.flatnonzero(got[i] & ~want)]
            assert not missing, (
                f"in the tree with parents {tree.parents.tolist()}, node {i} does not see "
                f"{missing} of its root path {path[::-1]}: a node sees itself and every "
                "ancestor (parent, grandparent, ... root), not only its parent"
            )
            assert not extra, (
                f"in the tree with parents {tree.parents.tolist()}, node {i} sees {extra}, which "
                f"are not on its root path {path[::-1]} (siblings, cousins or descendants)"
            )


@pytest.mark.points(1)
def test_positions_and_attention_mask_under_a_cache():
    """position_ids = cached + depth; the full mask sees every cached slot, then the tree."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        tree = _random_tree(rng, int(rng.integers(1, 14)))
        cached = int(rng.integers(0, 9))
        depth = np.array([len(_walk_up(tree.parents, i)) - 1 for i in range(len(tree))])
        got = np.asarray(trees.position_ids(tree, cached))
        assert np.array_equal(got, cached + depth), (
            f"tree with parents {tree.parents.tolist()}: position_ids(tree, cached={cached}) = "
            f"{got.tolist()}, expected cached + depth = {(cached + depth).tolist()} (a node "
            "sits where it would in its path's sequence; not at cached + its index)"
        )
        mask = np.asarray(trees.attention_mask(tree, cached))
        assert mask[:, :cached].all() and np.array_equal(
            mask[:, cached:], trees.ancestor_mask(tree)
        ), "attention_mask must be [all cached slots | ancestor_mask]; check ancestor_mask"


# ---------------------------------------------------------------------------- the head


def _inputs(rng, shape):
    return rng.integers(0, CONFIG.vocab_size, shape), rng.standard_normal((*shape, 16))


@pytest.mark.points(1)
def test_head_forward_on_a_batch_and_on_ablation_heads():
    """A batch [B, T] gives each row's plain forward; the token-only and feature-only heads of
    the paper's ablation (fc d -> d) read just their one stream."""
    rng = np.random.default_rng(4)
    tokens, features = _inputs(rng, (2, 5))
    head = _noisy_head(HEAD_CFG, 5)
    predicted, logits, _ = head_forward(head, HEAD_CFG, TARGET, tokens, features)
    assert np.shape(predicted) == (2, 5, 16) and np.shape(logits) == (2, 5, 6), (
        f"batched inputs (tokens [2, 5], features [2, 5, 16]) give f̂ [2, 5, 16] and logits "
        f"[2, 5, 6]; got {np.shape(predicted)} and {np.shape(logits)}"
    )
    for b in range(2):
        mistake = _head_mistake(head, HEAD_CFG, tokens[b], features[b], predicted[b], logits[b])
        assert mistake is None, (
            f"batch row {b} of [B, T] inputs: {mistake} (concatenate on the last axis)"
        )
    for inputs in ("token", "feature"):
        cfg = Eagle1Config.from_target(CONFIG, inputs=inputs)
        head = _noisy_head(cfg, 6)
        predicted, logits, _ = head_forward(head, cfg, TARGET, tokens[0], features[0])
        mistake = _head_mistake(head, cfg, tokens[0], features[0], predicted, logits)
        assert mistake is None, (
            f"the inputs={inputs!r} ablation head (fc {cfg.fc_in} -> 16) reads only "
            f"{'Embed(x_{t+1})' if inputs == 'token' else 'f_t'}: {mistake}"
        )


def _path_errors(head, prefix_tokens, prefix_features, tree_tokens, tree_features, parents):
    """Per tree node: max |head_forward over the tree (cached prefix, tree mask, depth
    positions) - plain head over the node's path as a sequence|, at the node's position."""
    T, n = len(prefix_tokens), len(parents)
    cache = new_head_cache(HEAD_CFG, head, capacity=32)
    head_forward(head, HEAD_CFG, TARGET, prefix_tokens, prefix_features, cache=cache)
    mask = np.zeros((n, T + n), dtype=bool)  # [nodes, cached + nodes]
    mask[:, :T] = True
    for i in range(n):
        mask[i, [T + j for j in _walk_up(parents, i)]] = True
    depth = np.array([len(_walk_up(parents, i)) - 1 for i in range(n)])
    got_f, got_logits, _ = head_forward(
        head,
        HEAD_CFG,
        TARGET,
        tree_tokens,
        tree_features,
        position_ids=T + depth,
        attention_mask=mask,
        cache=cache,
    )
    errors = []
    for i in range(n):
        path = _walk_up(parents, i)[::-1]
        want_f, want_logits = plain_head(
            head,
            HEAD_CFG,
            np.concatenate([prefix_tokens, tree_tokens[path]]),
            np.concatenate([prefix_features, tree_features[path]]),
        )
        errors.append(max(_largest(got_f[i], want_f[-1]), _largest(got_logits[i], want_logits[-1])))
    return errors


@pytest.mark.points(2)
def test_head_forward_with_a_cache_a_tree_mask_and_positions():
    """Under a cached prefix, a tree-masked forward at depth positions gives each node what
    the head gives at the end of its own path, run as a plain sequence."""
    rng = np.random.default_rng(7)
    head = _noisy_head(HEAD_CFG, 8)
    prefix_tokens, prefix_features = _inputs(rng, (5,))
    tree_tokens, tree_features = _inputs(rng, (6,))
    predicted, logits, _ = head_forward(head, HEAD_CFG, TARGET, prefix_tokens, prefix_features)
    mistake = _head_mistake(head, HEAD_CFG, prefix_tokens, prefix_features, predicted, logits)
    assert mistake is None, f"even without a cache or a tree: {mistake}"
    errors = _path_errors(
        head, prefix_tokens, prefix_features, tree_tokens, tree_features, [-1, 0, 0, 1, 2, 3]
    )
    worst = int(np.argmax(errors))
    assert errors[worst] <= DRAFT_TOLERANCE, (
        f"after a cached prefix of 5 pairs, tree node {worst} (errors per node "
        f"{[f'{e:.1e}' for e in errors]}) differs from the head run along its path by "
        f"{errors[worst]:.3g}: pass `cache` to decoder_layer_forward, and position_ids and "
        "attention_mask, with past = cache.length, to model.placement"
    )


@pytest.mark.points(1)
def test_head_gradients_reach_fc_through_the_caches():
    """eagle1_loss's gradients (head_backward on your caches) match centred differences."""
    rng = np.random.default_rng(9)
    head = _noisy_head(HEAD_CFG, 10)
    tokens, features = _inputs(rng, (4,))
    next_features = rng.standard_normal((4, 16))
    mask = np.ones(4)

    def loss(params):
        value, _, grads = eagle1_loss(
            params, HEAD_CFG, TARGET, tokens, features, next_features, mask
        )
        return value, grads

    try:
        _, grads = loss(head)
    except NameError as error:
        raise AssertionError(
            f"eagle1_loss failed with NameError ({error}): head_forward must leave c_fc "
            "(linear_forward's cache of fc), c_layer (decoder_layer_forward's cache) and "
            "lm_head for the line that builds the caches head_backward reads"
        ) from error
    eps = 1e-6
    for name, index in (("fc.weight", (3, 20)), ("fc.weight", (7, 2)), ("fc.bias", (5,))):
        plus, minus = dict(head), dict(head)
        plus[name], minus[name] = head[name].copy(), head[name].copy()
        plus[name][index] += eps
        minus[name][index] -= eps
        numeric = (loss(plus)[0] - loss(minus)[0]) / (2 * eps)
        error = abs(grads[name][index] - numeric)
        assert error <= 1e-6 * max(1.0, abs(numeric)), (
            f"d loss / d {name}{list(index)} is {grads[name][index]:.6g} from head_backward but "
            f"{numeric:.6g} by centred differences: the caches (c_fc from fc's linear_forward "
            "on [e, f_t], c_layer from decoder_layer_forward) must be those of this forward"
        )


# ---------------------------------------------------------------------------- the drafter


class _Recording:
    """Wraps a drafter for `generate`: keeps the sequence so far, the target features the
    drafter was given (one per token but the last), and per cycle (the sequence ending in the
    root, those features, the tree, the draft logits)."""

    feature_keys = ("final",)

    def __init__(self, inner):
        self.inner, self.cycles = inner, []

    def begin(self, prompt_ids, features, sampling):
        self.sequence = list(prompt_ids)
        self.features = list(features.get("final", ()))  # n - 1 rows [d]
        self.inner.begin(prompt_ids, features, sampling)

    def propose(self, root, rng, max_nodes):
        tree = self.inner.propose(root, rng, max_nodes)
        self.cycles.append(
            (list(self.sequence), list(self.features), tree, self.inner.draft_logits)
        )
        return tree

    def accept(self, tokens, features, next_token):
        self.sequence += [*tokens[1:], next_token]
        self.features += list(features["final"])
        self.inner.accept(tokens, features, next_token)


def _run(prompt, drafter, n, sampling=None, seed=0):
    return generate(
        TARGET,
        CONFIG,
        prompt,
        drafter=drafter,
        sampling=sampling or SamplingParams(),
        rng=SeededRandomness(seed),
        max_new_tokens=n,
        stop_at_eos=False,
    )


def _sequential_logits(sequence, features, tree, shifted=True):
    """{node: the plain head's logits after the node's pair}: the real pairs (x_{t+1}, f_t) of
    `sequence` (ending in the root) with the target `features` the drafter was given, then
    along the node's path the pairs (f̂ of the step before, the node's token) at the next
    positions. shifted=False pairs f̂ with the parent's token instead (a mistake, to name it)."""
    base_tokens, base_features = list(sequence[1:]), list(features)
    pairs = {0: ([], [])}  # node -> its path's pairs after the real ones
    out = {}
    for node in range(len(tree)):
        tokens, path_features = pairs[node]
        f_hat, logits = plain_head(
            HEAD,
            HEAD_CFG,
            np.asarray(base_tokens + tokens),
            np.stack(base_features + path_features),
        )
        out[node] = logits[-1]
        for child in np.flatnonzero(tree.parents == node):
            token = int(tree.tokens[child] if shifted else tree.tokens[node])
            pairs[int(child)] = (tokens + [token], path_features + [f_hat[-1]])
    return out


def _check_against_paths(recorder, label, why):
    """Every node with draft logits against the head run along its path; `why`: what to check
    when a node is off."""
    for sequence, features, tree, draft_logits in recorder.cycles:
        want = _sequential_logits(sequence, features, tree)
        for node in np.flatnonzero(~np.isnan(draft_logits[:, 0])):
            error = _largest(draft_logits[node], want[int(node)])
            if error <= DRAFT_TOLERANCE:
                continue
            unshifted = _sequential_logits(sequence, features, tree, shifted=False)
            if _largest(draft_logits[node], unshifted[int(node)]) <= DRAFT_TOLERANCE:
                raise AssertionError(
                    f"{label}: node {node} was fed its parent's token: each node is fed as the "
                    "pair (f̂ at its parent, the node's own token), the shifted token x_{t+1} "
                    "that follows the parent"
                )
            depth = len(_walk_up(tree.parents, int(node))) - 1
            raise AssertionError(
                f"{label}: the draft logits at node {node} (depth {depth}) differ by "
                f"{error:.3g} from the head run along its path as a plain sequence: {why}"
            )


@pytest.mark.points(2)
def test_every_drafted_node_equals_the_head_run_along_its_path():
    """Tree drafting is sequential drafting done at once: a node's draft logits are the head's
    after the real pairs and the pairs along the node's path, fed one by one."""
    chain = _Recording(Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="chain:3"))
    _run([1, 3, 4, 0], chain, 6)
    _check_against_paths(
        chain,
        "chain:3",
        "in _feed_level a node is the pair (f̂ at its parent, its own token) at position "
        "committed - 1 + depth, seeing the committed slots, its ancestors' slots and itself",
    )
    tree = _Recording(Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="default"))
    _run([1, 3, 4, 0], tree, 6)
    fed = sum(int(np.sum(~np.isnan(logits[:, 0]))) for *_, logits in tree.cycles)
    assert fed >= 20, (
        f"only {fed} nodes got draft logits in {len(tree.cycles)} cycles of the default tree: "
        "feed every level's nodes that have children of their own to the head"
    )
    _check_against_paths(
        tree,
        "default tree",
        "chains (one node per level) were right, so the nodes fed in one forward disturb each "
        "other: a node's mask row sees the committed slots, its own ancestors' slots and "
        "itself, never a sibling or cousin fed in the same level; all of a level share the "
        "position committed - 1 + depth",
    )


@pytest.mark.points(2)
def test_one_head_forward_per_level_that_has_children(monkeypatch):
    """Efficiency: a cycle runs the head once to catch up, then once per level whose nodes have
    children, over exactly those nodes; the deepest level is never fed (its logits are unused)."""
    fed = []
    forward = inference.PreparedEagle1Head.forward

    def counting(self, tokens, *args, **kwargs):
        fed.append(len(tokens))
        return forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(inference.PreparedEagle1Head, "forward", counting)
    _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray([1, 3]), output_hidden=("final",))
    for choices in ("default", "chain:4", SMALL_TREE):
        paths = resolve_tree(choices)
        parents_of = {path[:-1] for path in paths}
        want = [sum(1 for p in paths if len(p) == d and p in parents_of) for d in range(1, 99)]
        want = [n for n in want if n]  # nodes with children, level by level below the root
        drafter = Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=choices)
        drafter.begin([1, 3, 4], {"final": hidden["final"]}, SamplingParams())
        fed.clear()
        drafter.propose(4, SeededRandomness(0), max_nodes=64)
        levels = fed[1:]  # fed[0]: the catch-up over the pending real pairs
        assert levels == want, (
            f"{choices} tree: after the catch-up, the head ran {len(levels)} forwards over "
            f"{levels} nodes, expected {len(want)} over {want}: one forward per level, feeding "
            "only the nodes that have children in the static tree; the deepest level has none, "
            "so feeding it costs a head forward whose logits are never read"
        )


@pytest.mark.points(1)
def test_drafted_trees_keep_the_static_shape_when_pruned():
    """The default tree, chains, and prefixes of the default tree (max_nodes) keep their shape."""
    _, hidden, _ = model.forward(TARGET, CONFIG, np.asarray([1, 3]), output_hidden=("final",))
    for choices, max_nodes in (("chain:4", 32), ("default", 32), ("default", 13), ("default", 2)):
        drafter = Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=choices)
        drafter.begin([1, 3, 4], {"final": hidden["final"]}, SamplingParams())
        tree = drafter.propose(4, SeededRandomness(0), max_nodes=max_nodes)
        want = trees.from_choices(resolve_tree(choices), 4, lambda path: 0).parents[:max_nodes]
        assert tree.parents.tolist() == want.tolist(), (
            f"{choices} tree with max_nodes={max_nodes}: parents {tree.parents.tolist()}, "
            f"expected {want.tolist()} (propose passes a prefix of the sorted paths; grow "
            "exactly those, level by level, each node under the node it was drafted from)"
        )


def _why_not_lossless():
    """Name the likelier cause when greedy output differs from vanilla."""
    tree = trees.from_choices(resolve_tree("default"), 0, lambda path: 0)
    depth = np.array([len(_walk_up(tree.parents, i)) - 1 for i in range(len(tree))])
    try:
        if not np.array_equal(trees.position_ids(tree, 5), 5 + depth):
            return "tree.position_ids is wrong for the default tree: a node sits at cached + depth"
        for i in range(len(tree)):
            if sorted(np.flatnonzero(trees.ancestor_mask(tree)[i])) != sorted(
                _walk_up(tree.parents, i)
            ):
                return (
                    f"tree.ancestor_mask is wrong for node {i} of the default tree: the target "
                    "verifies each node seeing every ancestor, not only its parent"
                )
    except Exception as error:  # a crash in the tree functions is the cause too
        return f"tree functions raised {type(error).__name__}: {error}"
    return (
        "the mask and positions are right, so check the tree: parents[i] must be the node i "
        "was drafted from, tokens[i] its drafted token"
    )


@pytest.mark.points(2)
def test_greedy_tree_decoding_equals_vanilla_greedy():
    """Lossless at T = 0 for the default tree and a small one, on several prompts, up to a
    full context (where propose prunes the tree)."""
    cases = [
        (prompt, choices, 12)
        for prompt in ([1], [4, 0, 5], [2, 2, 2, 2])
        for choices in ("default", SMALL_TREE)
    ]
    cases.append(([1, 3, 4], "default", CONFIG.max_position_embeddings))
    accepted = set()
    for prompt, choices, n in cases:
        result = _run(prompt, Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=choices), n)
        want = greedy_reference(TARGET, CONFIG, prompt, len(result.tokens))
        assert result.tokens == want, (
            f"greedy EAGLE-1 with the {choices} tree after {prompt} emitted {result.tokens}, "
            f"vanilla greedy emits {want}: {_why_not_lossless()}"
        )
        accepted |= set(result.accepted_per_cycle)
    assert max(accepted) >= 2, (
        f"accepted drafts per cycle {sorted(accepted)}: with this head some deep drafts are "
        "accepted; does your drafter propose trees at all?"
    )


@pytest.mark.points(1)
def test_sampled_children_carry_the_distribution_they_were_drawn_from():
    """At T > 0 each child's proposal is the draft distribution at its parent with its elder
    siblings removed and renormalised (what draft_children returns): the verifier needs it."""
    sampling = SamplingParams(temperature=1.0)
    recorder = _Recording(Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="default"))
    _run([1, 3, 4], recorder, 8, sampling, seed=7)
    checked = 0
    for *_, tree, draft_logits in recorder.cycles:
        for parent, kids in enumerate(trees.children(tree)):
            q = target_distribution(draft_logits[parent], sampling) if kids else None
            for child in kids:
                proposal = tree.proposals[child]
                assert proposal is not None, (
                    f"node {child} was sampled at T > 0 but its proposal is None (which means "
                    "a deterministic pick): store the q that draft_children returns with it"
                )
                assert _largest(proposal, q) <= 1e-15, (
                    f"node {child}'s proposal is not the draft distribution at its parent "
                    f"{parent} without its elder siblings: keep draft_children's q per child"
                )
                token = int(tree.tokens[child])
                q = q.copy()
                q[token] = 0.0
                q = q / q.sum() if q.any() else q
                checked += 1
    assert checked >= 20, f"only {checked} sampled children in {len(recorder.cycles)} cycles"


def _agreeing_pair():
    """A target whose feature f_t = RMSNorm(E[x_t]) depends on x_t alone (its attention and MLP
    outputs are zeroed), and a head that predicts it exactly up to a positive scale: fc picks
    Embed(x_{t+1}) and the head's layer adds nothing. Its greedy drafts are the target's."""
    config = CONFIG.replace(tie_word_embeddings=False)
    target = model.init_params(config, seed=1, dtype=np.float64)
    head_cfg = Eagle1Config.from_target(config)
    head = init_head(head_cfg, seed=1, dtype=np.float64)
    for params in (target, head):
        for name in params:
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                params[name] = np.zeros_like(params[name])
    head["fc.weight"] = np.concatenate([np.eye(16), np.zeros((16, 16))], axis=1)
    head["fc.bias"] = np.zeros(16)
    return target, config, head, head_cfg


@pytest.mark.points(2)
def test_a_head_that_agrees_with_the_target_gets_every_draft_accepted():
    """Efficiency: with a head whose drafts are the target's greedy tokens, every cycle accepts
    a full path (tau = depth + 1). A drafter that proposes nothing is lossless, and fails here."""
    target, config, head, head_cfg = _agreeing_pair()
    for choices, depth in (("chain:3", 3), ("default", 5)):
        drafter = Eagle1Drafter(target, config, head, head_cfg, choices=choices)
        result = generate(
            target,
            config,
            [1, 3, 4],
            drafter=drafter,
            max_new_tokens=4 * (depth + 1),
            stop_at_eos=False,
            rng=SeededRandomness(0),
        )
        accepted = result.accepted_per_cycle
        if accepted == [depth] * 4:
            continue
        if max(accepted) == 0 and max(result.tree_sizes) == 1:
            why = "your drafter proposed only the root: draft the tree"
        elif max(accepted) == 1:
            why = (
                "only first drafts were accepted: deeper nodes must be fed as (f̂ at the "
                "parent, the node's own token), the shifted token x_{t+1}"
            )
        else:
            why = "deep drafts were rejected: check each level's pairs, mask and positions"
        raise AssertionError(
            f"with a head that agrees with the target, the {choices} tree accepted {accepted} "
            f"drafts per cycle, expected {[depth] * 4} (tau {result.tau:.2f}, expected "
            f"{depth + 1}): {why}"
        )
