"""Losslessness, proved case by case: the exact output law of the real verifier equals the target's.

For arbitrary targets and drafts (zeros, one-hot, near-ties, p == q, disjoint supports, and targets
processed by temperature / top-k / top-p), arbitrary small trees (duplicates, padding) and every
way of drafting them (deterministic top-k picks, sampled with replacement, sampled without
replacement, chains), `assert_lossless` enumerates every branch of the drafting and verification
randomness and compares the law of the emitted tokens with the target's autoregressive law, to
1e-12 in float64. `speculative_law` does the same across repeated cycles.

Each check is shown to catch a deliberately broken verifier on a fixed case (the negative
controls), and a Monte Carlo test runs the real verifier on a seeded generator against the
non-flaky bound `tv_bound`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minieagle import block_verify
from minieagle.block_verify import verify_block
from minieagle.sampling import SamplingParams, SeededRandomness, target_distribution
from minieagle.testing import (
    accepted_count_law,
    assert_efficient,
    assert_lossless,
    assert_lossless_multi_cycle,
    autoregressive_law,
    exact_distribution,
    make_sampled_tree,
    make_topk_tree,
    one_cycle_law,
    speculative_law,
    total_variation,
    tv_bound,
)
from minieagle.tree import Tree, children, depths, path_to
from minieagle.verify import Verdict, verify

PROPERTY = settings(deadline=None, max_examples=100)
MAX_TOKENS = 3  # the law is compared over at most this many emitted tokens


# ---------------------------------------------------------------------------- next-token models


@dataclass(frozen=True)
class TableModel:
    """A next-token law that depends on the last `order` tokens through a lookup table.

    rows: float64 [R, V] next-token distributions; index: int [V] * order, the row after each
    tail of `order` tokens. Called with a context (tuple of ints) it returns a read-only [V].
    """

    rows: np.ndarray
    index: np.ndarray

    def __call__(self, context: tuple) -> np.ndarray:
        return self.rows[self.index[tuple(context[-self.index.ndim :])]]

    def restricted(self, allowed: np.ndarray) -> TableModel:
        """The same table with every row conditioned on the token set `allowed` (bool [V])."""
        rows = self.rows * allowed
        rows[rows.sum(axis=1) == 0] = allowed  # a row with no mass there: uniform on `allowed`
        return _table(rows / rows.sum(axis=1, keepdims=True), self.index)


def _table(rows, index) -> TableModel:
    rows = np.array(rows, dtype=np.float64)
    rows.setflags(write=False)  # a drafter or verifier that writes into p fails loudly
    return TableModel(rows, np.asarray(index))


def _normalised(weights) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


@st.composite
def probability_vectors(draw, vocab: int) -> np.ndarray:
    """float64 [vocab]: sparse weights, a one-hot, a near-tie between two tokens, or uniform."""
    kind = draw(st.sampled_from(["weights", "one_hot", "near_tie", "uniform"]))
    if kind == "one_hot" or (kind == "near_tie" and vocab == 1):
        return np.eye(vocab)[draw(st.integers(0, vocab - 1))]
    if kind == "near_tie":
        a, b = draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=2, unique=True))
        w = np.zeros(vocab)
        w[a], w[b] = 0.5 + draw(st.floats(0, 1e-9)), 0.5
        return _normalised(w)
    if kind == "uniform":
        return np.full(vocab, 1.0 / vocab)
    weights = draw(
        st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)), min_size=vocab, max_size=vocab)
    )
    if sum(weights) == 0:
        weights[draw(st.integers(0, vocab - 1))] = 1.0
    return _normalised(weights)


@st.composite
def table_models(draw, vocab: int) -> TableModel:
    order = draw(st.integers(1, 2))
    rows = draw(st.lists(probability_vectors(vocab), min_size=1, max_size=3))
    index = draw(
        st.lists(st.integers(0, len(rows) - 1), min_size=vocab**order, max_size=vocab**order)
    )
    return _table(rows, np.reshape(index, (vocab,) * order))


@st.composite
def processed_models(draw, vocab: int) -> TableModel:
    """A table of logits turned into distributions by `target_distribution` (temperature, top-k,
    top-p), the way the target's rows reach the verifier in `generate`."""
    params = SamplingParams(
        temperature=draw(st.sampled_from([0.0, 0.5, 0.7, 1.0, 1.5])),
        top_k=draw(st.integers(0, 3)),
        top_p=draw(st.sampled_from([1.0, 0.9, 0.6, 0.3])),
    )
    logit_rows = draw(
        st.lists(
            st.lists(
                st.sampled_from([-2.0, 0.0, 0.5, 1.0]) | st.floats(-4, 4),
                min_size=vocab,
                max_size=vocab,
            ),
            min_size=1,
            max_size=3,
        )
    )
    rows = [target_distribution(np.asarray(row), params) for row in logit_rows]
    index = draw(st.lists(st.integers(0, len(rows) - 1), min_size=vocab, max_size=vocab))
    return _table(rows, index)


@st.composite
def target_and_draft(draw, vocab: int):
    """(target, draft): independent, identical (p == q), or on disjoint supports."""
    target = draw(st.one_of(table_models(vocab), processed_models(vocab)))
    relation = draw(st.sampled_from(["independent", "independent", "same", "disjoint"]))
    if relation == "same":
        return target, target
    draft = draw(st.one_of(table_models(vocab), processed_models(vocab)))
    if relation == "disjoint":
        allowed = np.asarray(draw(st.lists(st.booleans(), min_size=vocab, max_size=vocab)))
        if allowed.all() or not allowed.any():
            allowed[0] = not allowed[0]
        target, draft = target.restricted(allowed), draft.restricted(~allowed)
    return target, draft


@dataclass(frozen=True)
class Case:
    """One property-test case: models, the context (ending in the root) and the tree's shape
    (a parents array); `tokens` are the fixed draft tokens of a static tree (-1 = padding)."""

    target: TableModel
    draft: TableModel
    context: tuple
    parents: tuple
    tokens: tuple = ()

    @property
    def k(self) -> int:
        """Tokens to compare: enough to reach the deepest draft and its bonus, capped at
        MAX_TOKENS to keep the law small."""
        return int(
            min(depths(Tree(np.zeros(len(self.parents)), self.parents)).max() + 1, MAX_TOKENS)
        )

    def static_tree(self, context: tuple, rng) -> Tree:
        return Tree(np.asarray([context[-1], *self.tokens]), np.asarray(self.parents))


@st.composite
def cases(draw, max_vocab: int, max_nodes: int, static: bool = False, chain: bool = False):
    vocab = draw(st.integers(2, max_vocab))
    target, draft = draw(target_and_draft(vocab))
    context = tuple(draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=2)))
    n = draw(st.integers(2, max_nodes))
    if chain:
        parents = tuple(range(-1, n - 1))
    else:
        parents = (-1, *(draw(st.integers(0, i - 1)) for i in range(1, n)))
    tokens = ()
    if static:
        tokens = tuple(draw(st.lists(st.integers(-1, vocab - 1), min_size=n - 1, max_size=n - 1)))
    return Case(target, draft, context, parents, tokens)


def _constant(p) -> TableModel:
    """A model whose next-token law is p after every token."""
    p = np.asarray(p, dtype=np.float64)
    return _table([p], np.zeros(len(p), dtype=np.int64))


# Fixed, stated distributions for the explicit examples and the negative controls (V = 3).
P = np.array([0.3, 0.3, 0.4])
Q = np.array([0.7, 0.2, 0.1])
CONTEXT = (0, 0)


# ---------------------------------------------------------------------------- one cycle


@PROPERTY
@given(cases(max_vocab=5, max_nodes=6, static=True))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0, 0), (0, 1, 2)))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0, 0, 2), (1, -1, 1, 2)))
def test_static_trees_with_duplicates_and_padding_are_lossless(case):
    """Deterministic candidates (proposal None) with any fixed tokens: repeats, padding (-1),
    tokens the target never emits."""
    assert_lossless(verify, case.target, case.static_tree, case.context, case.k)


@PROPERTY
@given(cases(max_vocab=5, max_nodes=6))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0, 1)))
def test_top_k_trees_are_lossless(case):
    """EAGLE-2/3: candidates are the draft's top-k at each node, verified with q treated as 1."""
    make_tree = make_topk_tree(case.draft, case.parents)
    assert_lossless(verify, case.target, make_tree, case.context, case.k)


@PROPERTY
@given(cases(max_vocab=4, max_nodes=4), st.booleans())
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0, 0)), True)
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0, 1)), False)
def test_sampled_trees_are_lossless(case, without_replacement):
    """SpecInfer (siblings i.i.d. from q) and EAGLE-1 (siblings without replacement, each with
    its conditional q): the drafting draws are enumerated together with the verifier's."""
    make_tree = make_sampled_tree(case.draft, case.parents, without_replacement)
    assert_lossless(verify, case.target, make_tree, case.context, case.k)


@PROPERTY
@given(cases(max_vocab=3, max_nodes=4, chain=True))
def test_sampled_chains_are_lossless(case):
    """Classic speculative sampling (Leviathan et al. 2023): gamma drafts, each with its q."""
    make_tree = make_sampled_tree(case.draft, case.parents, without_replacement=False)
    assert_lossless(verify, case.target, make_tree, case.context, len(case.parents))


# ---------------------------------------------------------------------------- several cycles


@PROPERTY
@given(cases(max_vocab=3, max_nodes=3), st.sampled_from(["top-k", "with", "without"]))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0)), "without")
def test_repeated_cycles_are_lossless(case, drafting):
    """Cycles repeat until 3 tokens are out, each tree drafted from the context so far: the
    tokens follow the target's autoregressive law (2 or 3 cycles per outcome)."""
    if drafting == "top-k":
        make_tree = make_topk_tree(case.draft, case.parents)
    else:
        make_tree = make_sampled_tree(case.draft, case.parents, drafting == "without")
    assert_lossless_multi_cycle(verify, case.target, make_tree, case.context, 3)


def test_speculative_law_needs_the_root_to_be_the_last_token():
    target = _table([[0.5, 0.5]], [0, 0])
    wrong_root = lambda ctx, rng: Tree(np.asarray([1 - ctx[-1]]), np.asarray([-1]))  # noqa: E731
    with pytest.raises(ValueError, match="root token 1 for a context ending in 0"):
        speculative_law(verify, target, wrong_root, (0,), 2)


# ---------------------------------------------------------------------------- the drafters


def test_sampling_without_replacement_carries_the_conditional_q():
    """Siblings drawn without replacement: P(a then b) = q(a) q(b) / (1 - q(a)), the second
    carries q with a removed, and a slot with nothing left to draw is padding."""
    q = np.array([0.5, 0.3, 0.2, 0.0])
    make_tree = make_sampled_tree(lambda ctx: q, [4], without_replacement=True)

    def drafted(rng):
        tree = make_tree((0,), rng)
        assert tree.proposals[1] is not None and np.array_equal(tree.proposals[1], q)
        second = np.where(np.arange(4) == tree.tokens[1], 0.0, q) / (1 - q[tree.tokens[1]])
        np.testing.assert_allclose(tree.proposals[2], second, rtol=0, atol=1e-15)
        assert tree.tokens[4] == -1 and tree.proposals[4] is None  # q(3) = 0: nothing left
        return tuple(tree.tokens[1:3].tolist())

    law = exact_distribution(drafted)
    for (a, b), prob in law.items():
        assert prob == pytest.approx(q[a] * q[b] / (1 - q[a]), abs=1e-15)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-15) and len(law) == 6


def test_sampling_with_replacement_draws_siblings_independently():
    q = np.array([0.7, 0.3])
    make_tree = make_sampled_tree(lambda ctx: q, [2], without_replacement=False)
    law = exact_distribution(lambda rng: tuple(make_tree((0,), rng).tokens[1:].tolist()))
    assert law == pytest.approx({(a, b): q[a] * q[b] for a in range(2) for b in range(2)})


# ---------------------------------------------------------------------------- negative controls


def _one_hot(token: int, vocab: int) -> np.ndarray:
    return np.eye(vocab)[token]


def student_verify(
    tree: Tree,
    target_probs: np.ndarray,
    rng,
    *,
    renormalise: bool = True,
    residual_after_rejection: bool = True,
    bonus=None,
) -> Verdict:
    """Recursive rejection sampling written out plainly, with one switch per classic mistake.

    With the defaults it is correct (and must pass every check below); each switch breaks one
    step. bonus(tree, node, p) -> [V], if given, replaces the leaf's p for the bonus draw.
    """
    vocab = target_probs.shape[1]
    kids = children(tree)
    node, accepted = 0, []
    while True:
        p = np.array(target_probs[node])
        for child in kids[node]:
            x = int(tree.tokens[child])
            if x < 0:
                continue
            q = tree.proposals[child]
            q = _one_hot(x, vocab) if q is None else q
            if rng.coin(min(1.0, p[x] / q[x])):
                accepted.append(child)
                node = child
                break
            if residual_after_rejection:
                excess = np.maximum(p - q, 0.0)
                p = excess / excess.sum() if renormalise and excess.sum() > 0 else excess
        else:
            if bonus is not None and not kids[node]:
                p = bonus(tree, node, p)
            return Verdict(accepted, int(rng.draw(p / p.sum())))


def _untempered(temperature: float):
    """Bonus from softmax(logits) instead of softmax(logits / T): p_T ** T renormalised."""
    return lambda tree, node, p: _normalised(p**temperature)


def _bonus_from_leaf_proposal(tree, node, p):
    return tree.proposals[node]


def _with_unconditional_q(make_tree, draft_dist):
    """Candidates drawn without replacement, but every sibling labelled with the unconditional
    q of its parent (the EAGLE-1 detail that SpecInfer's rule needs, forgotten)."""

    def broken(context, rng):
        tree = make_tree(context, rng)
        proposals = [None]
        for node in range(1, len(tree)):
            path = path_to(tree, int(tree.parents[node]))[1:]
            proposals.append(draft_dist(context + tuple(int(tree.tokens[n]) for n in path)))
        return Tree(tree.tokens, tree.parents, tuple(proposals))

    return broken


# Fixed, stated cases: V = 3, P and Q above, targets and drafts that ignore the context.
TEMPERATURE = 0.5
LOGITS = np.array([1.0, 0.0, -0.5])
TEMPERED = target_distribution(LOGITS, SamplingParams(temperature=TEMPERATURE))
NEGATIVE_CASES = {
    # name: (verify_fn, target, make_tree, k)
    "(a) residual not renormalised before the next sibling": (
        lambda t, p, r: student_verify(t, p, r, renormalise=False),
        _constant(P),
        make_topk_tree(_constant(Q), [2]),
        1,
    ),
    "(b) p instead of the residual after a rejection": (
        lambda t, p, r: student_verify(t, p, r, residual_after_rejection=False),
        _constant(P),
        make_sampled_tree(_constant(Q), [1], without_replacement=False),
        1,
    ),
    "(c) the draft's q with a top-k (deterministic) candidate": (
        verify,
        _constant(P),
        lambda ctx, rng: Tree.chain(ctx[-1], [int(np.argmax(Q))], [Q]),
        1,
    ),
    "(d) bonus from the untempered p": (
        lambda t, p, r: student_verify(t, p, r, bonus=_untempered(TEMPERATURE)),
        _constant(TEMPERED),
        make_topk_tree(_constant(Q), [1]),
        2,
    ),
    "(d) bonus from the draft's q": (
        lambda t, p, r: student_verify(t, p, r, bonus=_bonus_from_leaf_proposal),
        _constant(P),
        make_sampled_tree(_constant(Q), [1], without_replacement=False),
        2,
    ),
    "(e) without-replacement siblings verified with the unconditional q": (
        verify,
        _constant(P),
        _with_unconditional_q(make_sampled_tree(_constant(Q), [2], True), _constant(Q)),
        1,
    ),
}


@pytest.mark.parametrize("name", NEGATIVE_CASES)
def test_a_broken_verifier_is_caught(name):
    """Each bug moves the law by a total variation of 0.09 to 0.24 on its case (one cycle), far
    beyond rounding, and both the one-cycle and the multi-cycle checks report it."""
    verify_fn, target, make_tree, k = NEGATIVE_CASES[name]
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless(verify_fn, target, make_tree, CONTEXT, k)
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless_multi_cycle(verify_fn, target, make_tree, CONTEXT, k + 1)
    got = one_cycle_law(verify_fn, target, make_tree, CONTEXT, k)
    assert total_variation(got, autoregressive_law(target, CONTEXT, k)) > 0.05


@pytest.mark.parametrize("name", NEGATIVE_CASES)
def test_the_same_cases_pass_when_nothing_is_broken(name):
    """Positive control: the correct verifier (ours and the student's with no switch) and a
    correctly labelled tree pass each case above, so the failure is the bug's alone."""
    _, target, make_tree, k = NEGATIVE_CASES[name]
    if name.startswith("(c)"):
        make_tree = make_topk_tree(_constant(Q), [1])
    if name.startswith("(e)"):
        make_tree = make_sampled_tree(_constant(Q), [2], without_replacement=True)
    for verify_fn in (verify, student_verify):
        assert_lossless(verify_fn, target, make_tree, CONTEXT, k)
        assert_lossless_multi_cycle(verify_fn, target, make_tree, CONTEXT, k + 1)


# ---------------------------------------------------------------------------- block verification


@PROPERTY
@given(cases(max_vocab=4, max_nodes=5), st.sampled_from(["top-k", "with", "without"]))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 1, 2)), "with")
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 0, 1, 2)), "without")
def test_block_verification_is_lossless(case, drafting):
    """Block verification (minieagle/block_verify.py) of chains and trees, deterministic and
    sampled (siblings with and without replacement): the exact law of one cycle (below: of
    repeated cycles) is the target's."""
    if drafting == "top-k":
        make_tree = make_topk_tree(case.draft, case.parents)
    else:
        make_tree = make_sampled_tree(case.draft, case.parents, drafting == "without")
    assert_lossless(verify_block, case.target, make_tree, case.context, case.k)


@PROPERTY
@given(cases(max_vocab=4, max_nodes=5, chain=True), st.sampled_from(["top-k", "sampled"]))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 1, 2)), "sampled")
def test_block_verification_of_a_chain_accepts_no_less(case, drafting):
    """On a chain (Sun et al.'s setting, where no valid verifier accepts more) the exact chance
    of accepting and the expected number accepted are never below token-by-token verification's.
    (On trees it is not a theorem: docs/lossless.md §6 measures both.)"""
    if drafting == "top-k":
        make_tree = make_topk_tree(case.draft, case.parents)
    else:
        make_tree = make_sampled_tree(case.draft, case.parents, without_replacement=False)
    assert_efficient(verify_block, case.target, make_tree, case.context, reference_fn=verify)


@PROPERTY
@given(cases(max_vocab=3, max_nodes=3), st.sampled_from(["top-k", "with", "without"]))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 1)), "with")
def test_block_verification_over_repeated_cycles_is_lossless(case, drafting):
    if drafting == "top-k":
        make_tree = make_topk_tree(case.draft, case.parents)
    else:
        make_tree = make_sampled_tree(case.draft, case.parents, drafting == "without")
    assert_lossless_multi_cycle(verify_block, case.target, make_tree, case.context, 3)


@PROPERTY
@given(cases(max_vocab=5, max_nodes=6, static=True))
def test_block_verification_of_static_trees_with_duplicates_and_padding_is_lossless(case):
    assert_lossless(verify_block, case.target, case.static_tree, case.context, case.k)


@PROPERTY
@given(cases(max_vocab=4, max_nodes=4), st.booleans())
def test_block_verification_of_one_level_is_recursive_rejection_sampling(case, without):
    """Children of the root only: the root's mass is 1 throughout, so the rule is `verify`'s
    and so is the exact law of what is accepted."""
    parents = (-1, *(0,) * (len(case.parents) - 1))
    make_tree = make_sampled_tree(case.draft, parents, without)
    block = accepted_count_law(verify_block, case.target, make_tree, case.context)
    token = accepted_count_law(verify, case.target, make_tree, case.context)
    for n in block.keys() | token.keys():
        assert block.get(n, 0.0) == pytest.approx(token.get(n, 0.0), abs=1e-12)


@pytest.mark.parametrize(
    ("shape", "block_mean", "token_mean"),
    [([1, 1, 1], 1.359, 1.176), ([2, 1, 1], 1.885667, 1.633333)],
)
def test_block_verification_accepts_more_than_token_by_token(shape, block_mean, token_mean):
    """Fixed cases, drafts from Q against P (both constant), siblings without replacement. Token
    by token a rejected token ends its path; the block keeps paths whose later tokens the target
    favours: more accepted drafts per cycle, the same chance of accepting one."""
    make_tree = make_sampled_tree(_constant(Q), shape, without_replacement=True)
    block, token = (accepted_count_law(f, _constant(P), make_tree, CONTEXT)
                    for f in (verify_block, verify))  # fmt: skip
    assert sum(n * p for n, p in block.items()) == pytest.approx(block_mean, abs=1e-4)
    assert sum(n * p for n, p in token.items()) == pytest.approx(token_mean, abs=1e-4)
    assert block[0] == pytest.approx(token[0], abs=1e-12)


def test_block_verification_refuses_bad_input_naming_it():
    tree = Tree.chain(0, [1, 2], proposals=[np.array([0.5, 0.0, 0.5]), np.array([0.2, 0.2, 0.6])])
    rows = np.full((3, 3), 1 / 3)
    with pytest.raises(ValueError, match="target_probs has 2 rows for 3 nodes"):
        verify_block(tree, rows[:2], SeededRandomness(0))
    with pytest.raises(ValueError, match="candidate token 1 at node 1 has proposal probability 0"):
        verify_block(tree, rows, SeededRandomness(0))


def test_block_verification_walks_a_chain_thousands_deep():
    """No recursion: a 5,000-draft greedy chain (prompt lookup can draft that many) is judged,
    and its verdict is `verify`'s."""
    vocab, n = 4, 5000
    tokens = np.arange(n + 1) % vocab
    tree = Tree(tokens, np.arange(-1, n))
    rows = np.eye(vocab)[(np.arange(n + 1) + 1) % vocab]  # [N, V]: greedy, each draft right
    rows[3000] = np.eye(vocab)[0]  # ... until after node 3000, whose child the target refuses
    want = verify(tree, rows, SeededRandomness(0))
    got = verify_block(tree, rows, SeededRandomness(0))
    assert got == want and len(got.accepted) == 3000 and got.next_token == 0


@pytest.mark.parametrize(
    ("helper", "broken"),
    [
        # the refused child's share not renormalised away: a node is then kept too rarely
        ("_after_refusal", lambda mass, q: np.maximum(mass - q, 0.0)),
        # renormalised to a whole distribution, as at the root: a node is kept too often
        ("_after_refusal", lambda mass, q: np.maximum(mass - q, 0.0)
         / max(np.maximum(mass - q, 0.0).sum(), 1e-300)),  # fmt: skip
        # the child's weight against the parent's normalised mass: each token judged alone
        ("_child_weight", lambda mass, q, x, node: min(1.0, mass[x] / mass.sum() / q[x])),
    ],
)
def test_a_broken_block_verifier_is_caught(monkeypatch, helper, broken):
    """Each bug in one step of block verification moves the law of a chain of three far beyond
    rounding: the exact check reports it."""
    make_tree = make_sampled_tree(_constant(Q), [1, 1, 1], without_replacement=False)
    monkeypatch.setattr(block_verify, helper, broken)
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless(verify_block, _constant(P), make_tree, CONTEXT, 3)
    got = one_cycle_law(verify_block, _constant(P), make_tree, CONTEXT, 3)
    assert total_variation(got, autoregressive_law(_constant(P), CONTEXT, 3)) > 0.02


def _assert_cut_chains_agree(verify_fn, target, make, parents, context) -> None:
    """A chain's first c drafts are judged as if the chain ended there: for every cut c, the
    exact law of min(accepted, c) on the whole chain equals the law of accepted on the chain
    cut after c drafts (drafting enumerated too)."""
    whole = accepted_count_law(verify_fn, target, make(parents), context)
    for cut in range(1, len(parents) - 1):
        folded: dict = {}
        for n, p in whole.items():
            folded[min(n, cut)] = folded.get(min(n, cut), 0.0) + p
        short = accepted_count_law(verify_fn, target, make(parents[: cut + 1]), context)
        for n in folded.keys() | short.keys():
            assert folded.get(n, 0.0) == pytest.approx(short.get(n, 0.0), abs=1e-12), (
                f"cut after {cut} drafts: P(min(accepted, {cut}) = {n}) is {folded.get(n, 0.0):.6f}"
                f" on the whole chain, {short.get(n, 0.0):.6f} on the cut one"
            )


@PROPERTY
@given(cases(max_vocab=4, max_nodes=5, chain=True), st.sampled_from(["top-k", "sampled"]))
@example(Case(_constant(P), _constant(Q), CONTEXT, (-1, 0, 1, 2)), "sampled")
def test_block_verification_judges_a_chains_first_drafts_as_if_it_ended_there(case, drafting):
    """What lets the tree sizing read every shorter chain from one long chain's verdicts
    (`sizing.expected_accepted` cuts the calibration runs' chains of 8): under block
    verification node j of a chain is kept with probability E[w_j], its weight, whatever is
    drafted below it (docs/lossless.md §6: judging a node keeps it with its mass's total, on
    average over the draws under it). Token by token it holds trivially; both are checked."""
    if drafting == "top-k":
        make = functools.partial(make_topk_tree, case.draft)
    else:
        make = functools.partial(make_sampled_tree, case.draft, without_replacement=False)
    for verify_fn in (verify_block, verify):
        _assert_cut_chains_agree(verify_fn, case.target, make, case.parents, case.context)


def test_the_cut_chain_check_catches_a_verifier_that_looks_ahead():
    """Negative control: a (lossless) verifier that refuses every draft of a chain longer than
    two drafts and judges shorter ones as blocks; its first draft's verdict depends on what is
    drafted below it, which the check reports."""

    def looks_ahead(tree, target_probs, rng):
        if len(tree) > 3:
            return Verdict([], int(rng.draw(np.asarray(target_probs[0], dtype=np.float64))))
        return verify_block(tree, target_probs, rng)

    make = functools.partial(make_sampled_tree, _constant(Q), without_replacement=False)
    with pytest.raises(AssertionError, match="cut after 1 drafts"):
        _assert_cut_chains_agree(looks_ahead, _constant(P), make, (-1, 0, 1, 2), CONTEXT)


# ---------------------------------------------------------------------------- Monte Carlo

MC_VOCAB, MC_SAMPLES, MC_DELTA = 10, 100_000, 1e-9


def _first_token_frequencies(verify_fn, p: np.ndarray, q: np.ndarray, samples: int) -> np.ndarray:
    """Run drafting (3 siblings without replacement) and verification `samples` times on one
    seeded generator; the frequencies [V] of the first emitted token."""
    rng = SeededRandomness(20240601)
    make_tree = make_sampled_tree(lambda ctx: q, [3], without_replacement=True)
    rows = np.tile(p, (4, 1))  # [N = 4, V]: the target does not depend on the context
    counts = np.zeros(len(p))
    for _ in range(samples):
        tree = make_tree(CONTEXT, rng)
        verdict = verify_fn(tree, rows, rng)
        first = tree.tokens[verdict.accepted[0]] if verdict.accepted else verdict.next_token
        counts[first] += 1
    return counts / samples


def _mc_case():
    generator = np.random.default_rng(7)
    p = generator.dirichlet(np.ones(MC_VOCAB))
    q = generator.dirichlet(np.ones(MC_VOCAB))
    p[3] = 0.0  # a token the target never emits but the draft proposes
    return p / p.sum(), q


def test_monte_carlo_first_token_is_within_the_bound():
    """The real verifier with production randomness: the empirical law of the first token is
    within tv_bound of p, which fails with probability below 1e-9 when the verifier is exact."""
    p, q = _mc_case()
    freq = _first_token_frequencies(verify, p, q, MC_SAMPLES)
    bound = tv_bound(MC_VOCAB, MC_SAMPLES, MC_DELTA)
    assert 0.5 * np.abs(freq - p).sum() <= bound
    assert freq[3] == 0.0


def test_monte_carlo_catches_a_broken_verifier():
    """Negative control (b): its exact bias is more than twice the bound, so its empirical TV
    exceeds the bound except with probability below 1e-9 (triangle inequality)."""
    p, q = _mc_case()

    def broken(t, probs, r):
        return student_verify(t, probs, r, residual_after_rejection=False)

    bound = tv_bound(MC_VOCAB, MC_SAMPLES // 4, MC_DELTA)
    make_tree = make_sampled_tree(lambda ctx: q, [3], without_replacement=True)
    exact = one_cycle_law(broken, lambda ctx: p, make_tree, CONTEXT, 1)
    bias = total_variation(exact, autoregressive_law(lambda ctx: p, CONTEXT, 1))
    assert bias > 2 * bound
    freq = _first_token_frequencies(broken, p, q, MC_SAMPLES // 4)
    assert 0.5 * np.abs(freq - p).sum() > bound


def test_tv_bound_matches_the_derivation():
    """½ sqrt(V / N) + sqrt(ln(1 / delta) / 2N): 0.0152 for V = 10, N = 1e5, delta = 1e-9."""
    assert tv_bound(10, 100_000, 1e-9) == pytest.approx(0.005 + 0.010181, abs=1e-5)
