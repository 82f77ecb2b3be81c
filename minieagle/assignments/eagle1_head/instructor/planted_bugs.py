"""Planted bugs of the eagle1_head assignment, for `minieagle assignment check`.

Instructors only: each quotes a line of the solution, so the student edition leaves this
file out. See grader.PlantedBug."""

from minieagle.assignments.grader import PlantedBug

PLANTED_BUGS = (
    PlantedBug(
        "tree mask sees only the parent",
        "tree.py",
        "mask[i] |= mask[tree.parents[i]]",
        "mask[i, tree.parents[i]] = True",
        "not only its parent",
    ),
    PlantedBug(
        "features and embeddings concatenated in the wrong order",
        "heads/eagle1.py",
        "xp.concat(streams, axis=-1) if len(streams) == 2",
        "xp.concat(streams[::-1], axis=-1) if len(streams) == 2",
        "wrong order",
    ),
    PlantedBug(
        "positions by node index instead of depth",
        "tree.py",
        "    return cached + depths(tree)\n",
        "    return cached + np.arange(len(tree))\n",
        "cached + depth",
    ),
    PlantedBug(
        "the head drafts from unshifted tokens",
        "drafters/head_drafter.py",
        "            [tokens[n] for n in fed], features,",
        "            [tokens[parents[n]] for n in fed], features,",
        "shifted token",
    ),
    PlantedBug(
        "nodes of a level see their siblings",
        "drafters/head_drafter.py",
        "            mask[i, base + i] = True\n",
        "            mask[i, base : base + count] = True\n",
        "sibling",
    ),
    PlantedBug(
        "the deepest level fed to the head too",
        "drafters/eagle1.py",
        "            fed = [node for node, path in new_nodes if path in has_children]\n",
        "            fed = [node for node, _ in new_nodes]\n",
        "the deepest level has none",
    ),
)
