"""Hidden tests for the verifier assignment: exact losslessness, and efficiency.

Every law here is exact (`minieagle.testing.exact_distribution` walks every branch of the
submitted code's coins and draws), so a pass is a proof for these cases and a failure names the
sequence whose probability is wrong. The efficiency tests compare the exact chance of accepting,
and the expected number of accepted drafts, with the closed forms of recursive rejection sampling.
"""

import numpy as np
import pytest

from minieagle.testing import (
    assert_lossless,
    assert_lossless_multi_cycle,
    exact_distribution,
    make_sampled_tree,
    make_topk_tree,
)
from minieagle.tree import Tree
from minieagle.verify import verify

V = 4


def _dist(context, salt):
    """A fixed, context-dependent distribution over V tokens (some zeros, like top-k)."""
    seed = (hash(tuple(context)) * 31 + salt) % (2**32)
    p = np.random.default_rng(seed).dirichlet(np.ones(V))
    p[np.argmin(p)] = 0.0 if salt == 1 else p[np.argmin(p)]
    return p / p.sum()


def target(context):
    return _dist(context, 1)


def draft(context):
    return _dist(context, 2)


CONTEXT = (3, 1)


def _lossless(make_tree, k=3):
    try:
        assert_lossless(verify, target, make_tree, CONTEXT, k)
    except ValueError as error:  # the enumerator refuses a coin outside [0, 1] or a bad draw
        raise AssertionError(f"not lossless, and your rng calls were invalid: {error}") from error


@pytest.mark.points(2)
def test_lossless_deterministic_chain():
    """A chain of top-1 drafts (q = None): the emitted tokens follow the target exactly."""
    _lossless(make_topk_tree(draft, [1, 1, 1]))


@pytest.mark.points(2)
def test_lossless_deterministic_tree():
    """A top-k tree (EAGLE-2/3): several deterministic children per node."""
    _lossless(make_topk_tree(draft, [3, 2]))


@pytest.mark.points(2)
def test_lossless_sampled_chain():
    """A chain drawn from q (classic speculative sampling): accept with min(1, p(x) / q(x))."""
    _lossless(make_sampled_tree(draft, [1, 1], without_replacement=False))


@pytest.mark.points(2)
def test_lossless_sampled_tree_with_replacement():
    """Siblings drawn i.i.d. from q (SpecInfer)."""
    _lossless(make_sampled_tree(draft, [2, 1], without_replacement=False))


@pytest.mark.points(2)
def test_lossless_sampled_tree_without_replacement():
    """Siblings drawn without replacement (EAGLE-1 at T > 0): each carries its conditional q."""
    _lossless(make_sampled_tree(draft, [2, 1], without_replacement=True))


@pytest.mark.points(2)
def test_lossless_over_several_cycles():
    """Cycles repeated until 4 tokens are out: nothing leaks from one cycle into the next."""
    try:
        assert_lossless_multi_cycle(verify, target, make_topk_tree(draft, [2, 1]), CONTEXT, 4)
    except ValueError as error:
        raise AssertionError(f"not lossless, and your rng calls were invalid: {error}") from error


@pytest.mark.points(1)
def test_accepted_nodes_form_a_path():
    """Accepted nodes go root to leaf: each is a child of the one before."""
    tree = Tree(np.array([0, 1, 2, 3, 1]), np.array([-1, 0, 0, 1, 3]))
    probs = np.full((5, V), 1.0 / V)
    for outcome in exact_distribution(lambda rng: tuple(verify(tree, probs, rng).accepted)):
        parents = [0, *outcome]
        for parent, node in zip(parents[:-1], outcome, strict=True):
            assert tree.parents[node] == parent, (
                f"accepted nodes {list(outcome)} are not a path from the root: node {node} is "
                f"not a child of node {parent}. After a child is accepted, descend into it and "
                "stop trying its siblings"
            )


@pytest.mark.points(1)
def test_padding_children_are_skipped():
    """A child with token < 0 is padding: never accepted, never changes p."""
    tree = Tree(np.array([0, -1, 2]), np.array([-1, 0, 0]))
    probs = np.array([[0.1, 0.2, 0.3, 0.4]] * 3)
    law = exact_distribution(lambda rng: (tuple(verify(tree, probs, rng).accepted),))
    assert np.isclose(law.get(((2,),), 0.0), 0.3), (
        f"the padding child (token -1) must be skipped and node 2 (token 2) accepted with "
        f"p = 0.3; got the law {law}"
    )


def _accept_law(tree, probs):
    return exact_distribution(lambda rng: len(verify(tree, probs, rng).accepted))


@pytest.mark.points(2)
def test_efficiency_deterministic_siblings():
    """Two top-k children a, b: one of them is accepted with p(a) + p(b), not less."""
    p = np.array([0.1, 0.45, 0.3, 0.15])
    tree = Tree(np.array([0, 1, 2]), np.array([-1, 0, 0]))
    law = _accept_law(tree, np.stack([p, p, p]))
    got, want = 1.0 - law.get(0, 0.0), p[1] + p[2]
    assert np.isclose(got, want), (
        f"the chance of accepting a draft at the root is {got:.4f}, but recursive rejection "
        f"sampling accepts one of two deterministic children with p(a) + p(b) = {want:.4f}"
        + (": your verifier accepts nothing" if got == 0 else ": it rejects too often")
    )


@pytest.mark.points(2)
def test_efficiency_sampled_candidate():
    """A draft drawn from q is accepted with sum_x min(p(x), q(x)) = 1 - TV(p, q)."""
    context = (0,)
    make_tree = make_sampled_tree(draft, [1], without_replacement=False)
    p, q = target(context), draft(context)

    def accepted(rng):
        tree = make_tree(context, rng)
        rows = np.stack([target(context), target((*context, int(tree.tokens[1])))])
        return len(verify(tree, rows, rng).accepted)

    law = exact_distribution(accepted)
    got, want = law.get(1, 0.0), float(np.minimum(p, q).sum())
    assert np.isclose(got, want), (
        f"a sampled draft is accepted with probability {got:.4f}; min(1, p(x) / q(x)) accepts "
        f"with sum_x min(p(x), q(x)) = {want:.4f}"
        + (": your verifier accepts nothing" if got == 0 else "")
    )


@pytest.mark.points(2)
def test_efficiency_expected_accepted_length():
    """Deterministic chain: E[accepted] = p1(x1) + p1(x1) p2(x2) + ... (each step's chance)."""
    tree = Tree.chain(0, [1, 2, 3])
    probs = np.array([[0.1, 0.6, 0.2, 0.1], [0.2, 0.1, 0.5, 0.2], [0.3, 0.3, 0.1, 0.3], [0.25] * 4])
    law = _accept_law(tree, probs)
    got = sum(n * prob for n, prob in law.items())
    want = 0.6 + 0.6 * 0.5 + 0.6 * 0.5 * 0.3
    assert np.isclose(got, want), (
        f"expected accepted drafts {got:.4f}, recursive rejection sampling gives {want:.4f}"
        + (": your verifier accepts nothing" if got == 0 else ": it rejects drafts it could keep")
    )


# ---------------------------------------------------------------- the walk, step by step
# Each test below isolates one step of the walk, so a mistake there is named, not only "not
# lossless". Their trees use deterministic children (q = None), whose closed forms are simple:
# child i is accepted with p(i) however many siblings came before it.


def _joint(tree, probs):
    """{(accepted nodes, next token): probability}, one verify call per branch."""

    def run(rng):
        verdict = verify(tree, probs, rng)
        return tuple(int(n) for n in verdict.accepted), int(verdict.next_token)

    return exact_distribution(run)


@pytest.mark.points(1)
def test_the_correction_after_a_rejection_is_drawn_from_the_residual():
    """All children rejected: the next token comes from the residual, never a rejected draft."""
    p = np.array([0.1, 0.45, 0.3, 0.15])
    tree = Tree(np.array([0, 1]), np.array([-1, 0]))  # one deterministic child, token 1
    law = _joint(tree, np.stack([p, np.full(V, 1.0 / V)]))
    rejected = {x: prob for (accepted, x), prob in law.items() if not accepted}
    total = sum(rejected.values())
    want = residual_of_deterministic(p, [1])
    got = np.array([rejected.get(x, 0.0) / total for x in range(V)])
    assert np.allclose(got, want, atol=1e-12), (
        f"after the root's only child (token 1) is rejected, next_token follows {got.round(4)}, "
        f"expected the residual {want.round(4)}: the correction is drawn from the residual p "
        "(the rejected draft's mass removed and renormalised), not from the target's row "
        "target_probs[node]"
    )


def residual_of_deterministic(p, tokens):
    """p with the deterministic drafts `tokens` zeroed, renormalised."""
    r = p.copy()
    r[tokens] = 0.0
    return r / r.sum()


@pytest.mark.points(1)
def test_the_residual_is_chained_across_siblings():
    """Three deterministic siblings: each is accepted with its own p(x), which holds only if each
    rejection updates the current p (p <- residual(p, q, x)), not the node's original row."""
    p = np.array([0.3, 0.25, 0.2, 0.25])
    tree = Tree(np.array([0, 0, 1, 2]), np.array([-1, 0, 0, 0]))  # children tokens 0, 1, 2
    law = _joint(tree, np.stack([p] + [np.full(V, 1.0 / V)] * 3))
    for node, token in ((1, 0), (2, 1), (3, 2)):
        got = sum(prob for (accepted, _), prob in law.items() if accepted[:1] == (node,))
        assert np.isclose(got, p[token], atol=1e-12), (
            f"sibling {node} (token {token}, tried after {node - 1} rejected siblings) is "
            f"accepted with probability {got:.4f}, expected p({token}) = {p[token]:.4f}: after "
            "each rejection replace p by residual(p, q, token) of the CURRENT p, so the "
            "residuals chain across siblings (not residual of the node's original row)"
        )


@pytest.mark.points(1)
def test_the_bonus_after_a_leaf_comes_from_the_leafs_row():
    """Every draft accepted down to a leaf: the bonus token follows target_probs[leaf]."""
    root_row = np.eye(V)[2]  # the target surely continues with token 2: the draft is accepted
    leaf_row = np.array([0.1, 0.2, 0.3, 0.4])
    tree = Tree.chain(0, [2])
    law = _joint(tree, np.stack([root_row, leaf_row]))
    got = np.array([law.get(((1,), x), 0.0) for x in range(V)])
    assert np.allclose(got, leaf_row, atol=1e-12), (
        f"the draft (node 1, a leaf) is always accepted; the bonus token then follows "
        f"{got.round(4)}, expected target_probs[1] = {leaf_row}: the bonus is drawn from the "
        "row after the last accepted node (the leaf), not from its parent's row"
    )
