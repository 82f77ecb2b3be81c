"""The tree picture the notebooks share (minieagle/plotting.py): its colours say what the verifier
did with each node (checked against the verifier itself on random trees), and it draws one
labelled box per node with a legend that covers none of them."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minieagle import verify as verify_module
from minieagle.plotting import (
    ACCEPTED,
    NOT_TRIED,
    REJECTED,
    UNREACHED,
    draw_tree,
    tree_colours,
)
from minieagle.sampling import SeededRandomness
from minieagle.tree import Tree

# root 0 -> 1, 2; 1 -> 3, 4; 2 -> 5
TREE = Tree(np.array([10, 11, 12, 13, 14, 15]), np.array([-1, 0, 0, 1, 1, 2]))
# root 0 -> 1 (padding), 2, 3; 2 -> 4
PADDED = Tree(np.array([10, -1, 12, 13, 14]), np.array([-1, 0, 0, 0, 2]))


def old_rule(tree, accepted) -> list[str]:
    """The rule draw_tree used before: every non-accepted child of a reached node was drawn as
    rejected, including siblings after the accepted one (never tried) and padding (skipped)."""
    reached = {0, *(int(a) for a in accepted)}
    return [
        ACCEPTED if node in reached else REJECTED if tree.parents[node] in reached else UNREACHED
        for node in range(len(tree))
    ]


# ---------------------------------------------------------------------------- each case


def test_siblings_after_the_accepted_child_are_not_tried():
    expected = [ACCEPTED, ACCEPTED, NOT_TRIED, REJECTED, ACCEPTED, UNREACHED]
    assert tree_colours(TREE, [1, 4]) == expected
    assert old_rule(TREE, [1, 4]) != expected  # node 2 came after the accepted node 1


def test_siblings_before_the_accepted_child_were_tried_and_rejected():
    assert tree_colours(TREE, [2]) == [
        ACCEPTED, REJECTED, ACCEPTED, UNREACHED, UNREACHED, REJECTED,
    ]  # fmt: skip


def test_children_of_a_node_with_no_accepted_child_were_all_tried():
    assert tree_colours(TREE, []) == [ACCEPTED, REJECTED, REJECTED] + [UNREACHED] * 3
    assert tree_colours(TREE, [1]) == [
        ACCEPTED, ACCEPTED, NOT_TRIED, REJECTED, REJECTED, UNREACHED,
    ]  # fmt: skip


def test_padding_is_never_rejected():
    expected = [ACCEPTED, NOT_TRIED, REJECTED, REJECTED, UNREACHED]
    assert tree_colours(PADDED, []) == expected
    assert old_rule(PADDED, []) != expected  # the old rule drew the padding node as rejected
    assert tree_colours(PADDED, [2]) == [ACCEPTED, NOT_TRIED, ACCEPTED, NOT_TRIED, REJECTED]


# ---------------------------------------------------------------------------- the verifier


@st.composite
def verified_trees(draw):
    """(tree, target_probs): a random tree whose nodes hold distinct tokens (node i: token i)
    or padding (-1), and one-hot target rows, each at a child's token or at a token no child
    holds, so that the walk stops anywhere."""
    n = draw(st.integers(1, 12))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [0] + [-1 if draw(st.integers(0, 4)) == 0 else i for i in range(1, n)]
    vocab = n + 1  # token n is held by no node
    probs = np.zeros((n, vocab))
    for node in range(n):
        probs[node, draw(st.integers(0, vocab - 1))] = 1.0
    return Tree(np.asarray(tokens), np.asarray(parents)), probs


def colour_errors(colour_rule, tree, target_probs) -> list[int]:
    """The nodes `colour_rule` colours otherwise than the verifier treated them: run `verify`,
    record which candidates it tried (each `acceptance_probability` call names one token, and
    token i is node i), and compare."""
    tried = []
    real = verify_module.acceptance_probability

    def recording(p, q, token):
        tried.append(token)
        return real(p, q, token)

    with mock.patch.object(verify_module, "acceptance_probability", recording):
        verdict = verify_module.verify(tree, target_probs, SeededRandomness(0))
    reached = {0, *verdict.accepted}
    truth = [
        ACCEPTED if node in reached
        else REJECTED if node in tried
        else NOT_TRIED if tree.parents[node] in reached
        else UNREACHED
        for node in range(len(tree))
    ]  # fmt: skip
    colours = colour_rule(tree, verdict.accepted)
    return [node for node in range(len(tree)) if colours[node] != truth[node]]


@settings(max_examples=300, deadline=None)
@given(verified_trees())
def test_colours_are_what_the_verifier_did(case):
    assert colour_errors(tree_colours, *case) == []


def test_the_verifier_check_catches_the_old_rule():
    """The property above fails for the old rule on the two cases it got wrong."""
    tree = Tree(np.arange(len(TREE)), TREE.parents)  # node i holds token i
    probs = np.zeros((len(tree), len(tree) + 1))  # [N, V], one-hot rows
    probs[:, -1] = 1.0  # below the root the target wants a token no node holds
    probs[0] = np.eye(len(tree) + 1)[1]  # at the root it takes node 1: node 2 is never tried
    assert colour_errors(tree_colours, tree, probs) == []
    assert colour_errors(old_rule, tree, probs) == [2]
    padded = Tree(np.array([0, -1, 2, 3, 4]), PADDED.parents)
    probs = np.zeros((len(padded), len(padded) + 1))
    probs[:, -1] = 1.0  # no child is ever taken: the padding node 1 is skipped, not rejected
    assert colour_errors(tree_colours, padded, probs) == []
    assert colour_errors(old_rule, padded, probs) == [1]


# ---------------------------------------------------------------------------- the drawing


def _bbox(artist, renderer):
    return artist.get_window_extent(renderer)


def test_draw_tree_boxes_every_node_with_its_label_and_the_legend_covers_none():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"n{i}" for i in range(len(TREE))]
    draw_tree(ax, TREE, [1, 4], labels, next_token="x")
    texts = {t.get_text(): t.get_bbox_patch().get_facecolor() for t in ax.texts}
    assert set(texts) == {*labels, "target: x"}
    assert texts["n5"] == matplotlib.colors.to_rgba(UNREACHED)
    assert texts["n3"] == matplotlib.colors.to_rgba(REJECTED)
    assert texts["n2"] == matplotlib.colors.to_rgba(NOT_TRIED)
    legend = ax.get_legend()
    assert len(legend.get_texts()) == 4
    assert ax.get_xlabel() and ax.get_ylabel()
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend_box = _bbox(legend, renderer)
    axes_box = ax.get_window_extent(renderer)
    for text in ax.texts:
        box = _bbox(text.get_bbox_patch(), renderer)
        assert not box.overlaps(legend_box), text.get_text()
        assert axes_box.contains(box.x0, box.y0) and axes_box.contains(box.x1, box.y1), (
            text.get_text()
        )  # every box inside the axes: none clipped
    plt.close(fig)
