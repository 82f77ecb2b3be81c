"""EAGLE-1's static draft trees, written as EAGLE's path lists of child ranks.

A path `[0, 2]` is "the 3rd most likely child of the most likely child of the root": the tree
keeps its shape every cycle, and only the tokens at its nodes change (EAGLE section 4.1). A chain
of depth D is `[[0], [0, 0], ..., [0] * D]`. `minieagle.tree.from_choices` turns a path list
and a token per path into a `Tree`; the EAGLE-1 drafter (`minieagle.drafters.eagle1`) fills it.
"""

from __future__ import annotations

from minieagle.errors import InvalidInputError

# EAGLE-1's default tree (named `mc_sim_7b_63` upstream; the "63" does not describe it): 25 draft
# nodes plus the root = 26 tokens verified per cycle, depth 5, nodes per depth 4, 8, 8, 3, 2,
# 15 leaves, child ranks 0..3, deeper branches under more likely tokens. Reconstructed from those
# published statistics (listed in docs/eagle1.md), not copied from the upstream file;
# tests/test_eagle1_drafter.py checks every statistic.
DEFAULT_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)  # fmt: skip

TREE_NAMES = ("default", "mc_sim_7b_63", "chain:D")


def chain_tree(depth: int) -> tuple[tuple[int, ...], ...]:
    """The chain of `depth` drafts: each node's only child is its most likely token."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise InvalidInputError(f"chain depth={depth!r} must be a positive integer, e.g. 5")
    return tuple((0,) * n for n in range(1, depth + 1))


def resolve_tree(
    choices, max_depth: int | None = None, why: str = ""
) -> tuple[tuple[int, ...], ...]:
    """A path list from a name ("default", "mc_sim_7b_63", "chain:D") or a list of paths.

    Paths are checked: non-empty, ranks >= 0, no duplicates, every path's parent present, and the
    siblings under one parent use ranks 0, 1, 2, ... without gaps (at T > 0 rank j is the j-th
    draw without replacement, so a gap would be a draw that is never verified); with
    `max_depth`, none deeper than it, checked before anything is built (`why` says what sets
    the bound, for the message).
    Returns the paths sorted by depth, then lexicographically (parents first, as in `Tree`).
    """
    if isinstance(choices, str):
        if choices in ("default", "mc_sim_7b_63"):
            choices = DEFAULT_TREE
        elif choices.startswith("chain:"):
            depth = choices.removeprefix("chain:")
            if not depth.isdigit():
                raise InvalidInputError(
                    f"tree {choices!r} has no integer depth after 'chain:'; pass e.g. 'chain:5'"
                )
            _check_depth(int(depth), max_depth, why)  # before D paths of up to D ranks exist
            return chain_tree(int(depth))
        else:
            raise InvalidInputError(f"unknown tree {choices!r}; expected one of {list(TREE_NAMES)}")
    paths = [tuple(int(r) for r in path) for path in choices]
    _check_depth(max((len(path) for path in paths), default=0), max_depth, why)
    if not paths:
        raise InvalidInputError("the tree has no paths; pass e.g. [[0], [1], [0, 0]] or 'default'")
    seen = set(paths)
    if len(seen) != len(paths):
        raise InvalidInputError("the tree lists a path twice; give each path of child ranks once")
    for path in paths:
        if not path or min(path) < 0:
            raise InvalidInputError(
                f"path {list(path)} must be a non-empty list of ranks >= 0, e.g. [0, 1]"
            )
        if len(path) > 1 and path[:-1] not in seen:
            raise InvalidInputError(
                f"path {list(path)} has no parent {list(path[:-1])} in the tree"
            )
        if path[-1] > 0 and (*path[:-1], path[-1] - 1) not in seen:
            raise InvalidInputError(
                f"path {list(path)} has no elder sibling {[*path[:-1], path[-1] - 1]}; the "
                "children of a node must use ranks 0, 1, 2, ... without gaps"
            )
    return tuple(sorted(paths, key=lambda p: (len(p), p)))


def _check_depth(depth: int, max_depth: int | None, why: str) -> None:
    if max_depth is not None and depth > max_depth:
        raise InvalidInputError(
            f"the tree is {depth} levels deep but {why or f'at most {max_depth} fit'}; pass a "
            f"tree at most {max_depth} deep, e.g. 'chain:{min(max_depth, 5)}'"
        )
