"""The tree picture the notebooks share (minieagle/plotting.py): its colours follow verification
and it draws one labelled box per node."""

from __future__ import annotations

import numpy as np
import pytest

from minieagle.plotting import ACCEPTED, REJECTED, UNREACHED, draw_tree, tree_colours
from minieagle.tree import Tree

# root 0 -> 1, 2; 1 -> 3, 4; 2 -> 5
TREE = Tree(np.array([10, 11, 12, 13, 14, 15]), np.array([-1, 0, 0, 1, 1, 2]))


def test_colours_follow_the_accepted_path():
    assert tree_colours(TREE, [1, 4]) == [
        ACCEPTED, ACCEPTED, REJECTED, REJECTED, ACCEPTED, UNREACHED,
    ]  # fmt: skip
    assert tree_colours(TREE, []) == [ACCEPTED, REJECTED, REJECTED] + [UNREACHED] * 3


def test_draw_tree_boxes_every_node_with_its_label():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    labels = [f"n{i}" for i in range(len(TREE))]
    draw_tree(ax, TREE, [1, 4], labels, next_token="x")
    texts = {t.get_text(): t.get_bbox_patch().get_facecolor() for t in ax.texts}
    assert set(texts) == {*labels, "target: x"}
    assert texts["n5"] == matplotlib.colors.to_rgba(UNREACHED)
    assert texts["n2"] == matplotlib.colors.to_rgba(REJECTED)
    assert len(ax.get_legend().get_texts()) == 3
    plt.close(fig)
