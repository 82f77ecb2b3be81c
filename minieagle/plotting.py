"""Pictures the notebooks share. Functions draw on a matplotlib `Axes` they are given, so the
package itself never imports matplotlib (a dependency of the notebooks and tests only)."""

from __future__ import annotations

import itertools

import numpy as np

from minieagle import tree as trees

ACCEPTED, REJECTED, UNREACHED = "palegreen", "lightsalmon", "white"


def tree_colours(tree, accepted) -> list[str]:
    """Per node: ACCEPTED for the root and the accepted drafts, REJECTED for the other children
    of those nodes (verification reached their parent and did not take them), UNREACHED for the
    rest (their parent was never accepted)."""
    reached = {0, *(int(a) for a in accepted)}
    return [
        ACCEPTED if node in reached else REJECTED if tree.parents[node] in reached else UNREACHED
        for node in range(len(tree))
    ]


def draw_tree(ax, tree, accepted, labels, *, next_token: str | None = None) -> None:
    """A draft tree with nodes at x = depth and leaves spread on y (the first child on top),
    coloured by `tree_colours`, each boxed with labels[node], and a legend. next_token: the
    target's own token after the last accepted node, drawn beside it."""
    kids, y, leaves = trees.children(tree), {}, itertools.count()

    def place(node):
        y[node] = np.mean([place(c) for c in kids[node]]) if kids[node] else next(leaves)
        return y[node]

    place(0)
    depth = trees.depths(tree)
    for node, colour in enumerate(tree_colours(tree, accepted)):
        parent = max(tree.parents[node], 0)  # the root: a zero-length edge to itself
        ax.plot([depth[parent], depth[node]], [y[parent], y[node]], color="grey", lw=0.8)
        ax.text(depth[node], y[node], labels[node], ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round", facecolor=colour))  # fmt: skip
    if next_token is not None:
        last = ([0, *accepted])[-1]
        ax.text(depth[last] + 0.6, y[last], f"target: {next_token}", fontsize=8,
                bbox=dict(boxstyle="round", facecolor="white", linestyle="--"))  # fmt: skip
    ax.set_xlim(-0.5, depth.max() + (1 if next_token is not None else 0.5))
    ax.set_xticks(range(depth.max() + 1))
    ax.invert_yaxis()  # the most likely child on top
    ax.set_xlabel("depth (drafts below the root)")
    ax.set_yticks([])
    for colour, label in ((ACCEPTED, "root / accepted"), (REJECTED, "checked, rejected"),
                          (UNREACHED, "never reached")):  # fmt: skip
        ax.scatter([], [], marker="s", s=80, color=colour, edgecolors="black", label=label)
    ax.legend(loc="lower right", fontsize=8)
