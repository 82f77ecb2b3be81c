"""Pictures the notebooks share. Functions draw on a matplotlib `Axes` they are given, so the
package itself never imports matplotlib (a dependency of the notebooks and tests only)."""

from __future__ import annotations

import itertools

import numpy as np

from minieagle import tree as trees

ACCEPTED, REJECTED, NOT_TRIED, UNREACHED = "palegreen", "lightsalmon", "lightgrey", "white"
LEGEND = (
    (ACCEPTED, "root / accepted"),
    (REJECTED, "tried, rejected"),
    (NOT_TRIED, "not tried (after the accepted sibling, or padding)"),
    (UNREACHED, "never reached"),
)


def tree_colours(tree, accepted) -> list[str]:
    """Per node, what verification (`minieagle.verify.verify`) did with it, given the accepted
    path `accepted` (non-root nodes, root to leaf).

    The verifier reaches the root and each accepted node and tries that node's children in node
    order, stopping at the first one it accepts. So a child of a reached node is REJECTED if it
    comes before the accepted child (or the node has no accepted child: all were tried), and
    NOT_TRIED if it comes after the accepted child or is padding (token < 0, which the verifier
    skips). The root and accepted nodes are ACCEPTED; every other node is UNREACHED (its parent
    was never accepted)."""
    reached = [0, *(int(a) for a in accepted)]
    colours = [UNREACHED] * len(tree)
    for node in reached:
        colours[node] = ACCEPTED
    kids = trees.children(tree)
    for node, taken in itertools.zip_longest(reached, reached[1:]):
        after_taken = False  # whether the accepted child came before this one
        for child in kids[node]:
            if child == taken:
                after_taken = True
            elif after_taken or tree.tokens[child] < 0:
                colours[child] = NOT_TRIED
            else:
                colours[child] = REJECTED
    return colours


def draw_tree(ax, tree, accepted, labels, *, next_token: str | None = None) -> None:
    """A draft tree with nodes at x = depth and leaves spread on y (the first child on top),
    coloured by `tree_colours`, each boxed with labels[node], and a legend below the axes (it
    never covers a node). next_token: the target's own token after the last accepted node,
    drawn beside it."""
    kids, y, leaves = trees.children(tree), {}, itertools.count()

    def place(node):
        y[node] = np.mean([place(c) for c in kids[node]]) if kids[node] else next(leaves)
        return y[node]

    place(0)
    depth = trees.depths(tree)
    colours = tree_colours(tree, accepted)
    for node, colour in enumerate(colours):
        parent = max(tree.parents[node], 0)  # the root: a zero-length edge to itself
        ax.plot([depth[parent], depth[node]], [y[parent], y[node]], color="grey", lw=0.8)
        ax.text(depth[node], y[node], labels[node], ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round", facecolor=colour))  # fmt: skip
    if next_token is not None:
        last = ([0, *accepted])[-1]
        ax.text(depth[last] + 0.6, y[last], f"target: {next_token}", fontsize=8,
                bbox=dict(boxstyle="round", facecolor="white", linestyle="--"))  # fmt: skip
    ax.set_xlim(-0.5, depth.max() + (1 if next_token is not None else 0.5))
    ax.set_ylim(max(y.values()) + 0.7, -0.7)  # inverted: the most likely child on top
    ax.set_xticks(range(depth.max() + 1))
    ax.set_xlabel("depth (drafts below the root)")
    ax.set_yticks([])
    ax.set_ylabel("siblings, in verification order (top first)")
    for colour, label in LEGEND:
        ax.scatter([], [], marker="s", s=80, color=colour, edgecolors="black", label=label)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8, frameon=False)
