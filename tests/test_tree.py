"""The draft tree (minieagle.tree): every derived function against a brute-force oracle that walks
the parent pointers, EAGLE-1's static tree built from its path list, and the validation errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle.testing import make_topk_tree
from minieagle.tree import (
    Tree,
    ancestor_mask,
    attention_mask,
    children,
    depths,
    from_choices,
    leaf_paths,
    path_to,
    position_ids,
)

PROPERTY = settings(deadline=None, max_examples=60)

# EAGLE-1's default tree `mc_sim_7b_63` (SafeAILab/EAGLE, eagle/model/choices.py): paths of child
# ranks from the root. The name is historical. Its facts, as docs/eagle1.md and static_trees.py
# state them and asserted below: 25 drafts + the root, depth 5, 4, 8, 8, 3, 2 drafts per depth,
# 15 leaves, child ranks 0-3.
MC_SIM_7B_63 = [
    [0], [1], [2], [3],
    [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip


@st.composite
def trees(draw, max_nodes: int = 12, vocab: int = 6) -> Tree:
    """Any valid tree: each node's parent is an earlier node; tokens may repeat or be padding."""
    n = draw(st.integers(1, max_nodes))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = draw(st.lists(st.integers(-1, vocab - 1), min_size=n, max_size=n))
    return Tree(np.asarray(tokens), np.asarray(parents))


def _ancestors(tree: Tree, node: int) -> set[int]:
    """Brute force: node itself and every node reached by following parent pointers."""
    found = {node}
    while tree.parents[node] != -1:
        node = int(tree.parents[node])
        found.add(node)
    return found


# ---------------------------------------------------------------------------- derived functions


@PROPERTY
@given(trees())
def test_depths_and_children_follow_the_parent_pointers(tree):
    d = depths(tree)
    kids = children(tree)
    for i in range(len(tree)):
        assert d[i] == len(_ancestors(tree, i)) - 1
        assert kids[i] == [j for j in range(len(tree)) if tree.parents[j] == i]
    assert sum(len(k) for k in kids) == len(tree) - 1


@PROPERTY
@given(trees())
def test_ancestor_mask_is_the_ancestor_relation(tree):
    mask = ancestor_mask(tree)
    n = len(tree)
    assert mask.shape == (n, n) and mask.dtype == bool
    want = np.array([[j in _ancestors(tree, i) for j in range(n)] for i in range(n)])
    np.testing.assert_array_equal(mask, want)
    # Topological order: a node never attends to a later one.
    assert not np.triu(mask, 1).any()


@PROPERTY
@given(trees(), st.integers(0, 40))
def test_positions_and_attention_mask_continue_the_cache(tree, cached):
    np.testing.assert_array_equal(position_ids(tree, cached), cached + depths(tree))
    mask = attention_mask(tree, cached)
    assert mask.shape == (len(tree), cached + len(tree))
    assert mask[:, :cached].all()
    np.testing.assert_array_equal(mask[:, cached:], ancestor_mask(tree))


@PROPERTY
@given(trees())
def test_leaf_paths_are_every_root_to_leaf_walk(tree):
    leaves = [i for i in range(len(tree)) if i not in set(tree.parents[1:].tolist())]
    paths = leaf_paths(tree)
    assert [p[-1] for p in paths] == leaves
    for p in paths:
        assert p[0] == 0
        assert all(tree.parents[b] == a for a, b in zip(p, p[1:], strict=False))
        assert p == path_to(tree, p[-1])
        assert set(p) == _ancestors(tree, p[-1])


def test_chain_is_a_path_with_its_proposals():
    q = np.array([0.25, 0.75])
    chain = Tree.chain(5, [1, 0, 1], [q, q, None])
    np.testing.assert_array_equal(chain.tokens, [5, 1, 0, 1])
    np.testing.assert_array_equal(chain.parents, [-1, 0, 1, 2])
    assert chain.proposals[0] is None and chain.proposals[1] is q and chain.proposals[3] is None
    assert leaf_paths(chain) == [[0, 1, 2, 3]]
    assert Tree.chain(5, []).proposals == (None,)
    assert Tree.chain(5, [1, 2]).proposals == (None, None, None)


# ---------------------------------------------------------------------------- static EAGLE tree


def test_eagle1_default_tree_has_the_documented_shape():
    tree = from_choices(MC_SIM_7B_63, root=7, tokens_by_path=lambda path: path[-1])
    d = depths(tree)
    assert len(tree) == 26 and tree.tokens[0] == 7  # 25 drafts + the root
    assert d.max() == 5
    assert np.bincount(d)[1:].tolist() == [4, 8, 8, 3, 2]
    assert len(leaf_paths(tree)) == 15
    assert max(max(c) for c in MC_SIM_7B_63) == 3  # top-4 candidates per node


@settings(deadline=None, max_examples=20)
@given(st.randoms(use_true_random=False))
def test_from_choices_places_every_path_under_its_prefix(random):
    """Any listing order gives the same tree: the node of path c has the node of c[:-1] as
    parent, and its root-to-node walk spells the prefixes of c."""
    shuffled = list(MC_SIM_7B_63)
    random.shuffle(shuffled)
    name = {tuple(c): 10 + i for i, c in enumerate(MC_SIM_7B_63)}  # a distinct token per path
    tree = from_choices(shuffled, root=0, tokens_by_path=lambda path: name[path])
    node_of = {int(t): i for i, t in enumerate(tree.tokens)}
    for choice, token in name.items():
        walk = path_to(tree, node_of[token])
        assert [int(tree.tokens[n]) for n in walk[1:]] == [
            name[choice[:i]] for i in range(1, len(choice) + 1)
        ]
    # Siblings are verified in rank order.
    for kids in children(tree):
        ranks = [next(c for c, t in name.items() if t == tree.tokens[k])[-1] for k in kids]
        assert ranks == sorted(ranks)


def test_top_k_drafter_fills_a_static_shape_with_ranked_tokens():
    q = np.array([0.1, 0.4, 0.2, 0.3])
    tree = make_topk_tree(lambda context: q, [3, 1])((0, 2), rng=None)
    np.testing.assert_array_equal(tree.parents, [-1, 0, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(tree.tokens, [2, 1, 3, 2, 1, 1, 1])
    assert all(p is None for p in tree.proposals)
    wide = make_topk_tree(lambda context: q, [5])((0, 2), rng=None)
    assert wide.tokens.tolist() == [2, 1, 3, 2, 0, -1]  # more children than V: padding


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("tokens", "parents", "proposals", "message"),
    [
        ([], [], (), "at least the root token"),
        ([[1, 2]], [[-1, 0]], (), "1-D token array"),
        ([1, 2], [-1], (), r"parents has shape \(1,\) but tokens has \(2,\)"),
        ([1, 2], [0, 0], (), r"parents\[0\]=0; the root \(node 0\) must have parent -1"),
        ([1, 2, 3], [-1, 0, 2], (), r"nodes \[2\] have parents \[2\].*\[0, i\)"),
        ([1, 2, 3], [-1, 5, -1], (), r"nodes \[1, 2\] have parents \[5, -1\]"),
        ([1, 2], [-1, 0], (None,), "proposals has 1 entries for 2 nodes"),
    ],
)
def test_bad_trees_are_rejected_with_the_reason(tokens, parents, proposals, message):
    with pytest.raises(ValueError, match=message):
        Tree(np.asarray(tokens), np.asarray(parents), proposals)


def test_choices_with_a_missing_prefix_are_rejected():
    with pytest.raises(ValueError, match=r"choice \[1, 0\] has no parent \[1\]"):
        from_choices([[0], [1, 0]], root=0, tokens_by_path=lambda path: 0)


def test_bad_tree_shapes_for_the_drafters_are_rejected():
    with pytest.raises(ValueError, match="branching factor below 1"):
        make_topk_tree(lambda context: np.ones(2) / 2, [2, 0])
    with pytest.raises(ValueError, match="have parents"):
        make_topk_tree(lambda context: np.ones(2) / 2, [-1, 0, 3])


def test_shipped_default_tree_is_mc_sim_7b_63():
    from minieagle.static_trees import DEFAULT_TREE, resolve_tree

    assert resolve_tree(DEFAULT_TREE) == resolve_tree(MC_SIM_7B_63)
