"""Planted bugs of the eagle2_tree assignment, for `minieagle assignment check`.

Instructors only: each quotes a line of the solution, so the student edition leaves this
file out. See grader.PlantedBug."""

from minieagle.assignments.grader import PlantedBug

PLANTED_BUGS = (
    PlantedBug(
        "values not accumulated along the path",
        "dynamic_tree.py",
        "(parent_scores[:, None] + log_accept).reshape(-1)",
        "log_accept.reshape(-1)",
        "add the parent's score",
    ),
    PlantedBug(
        "frontier picked by the newest level's own log q",
        "dynamic_tree.py",
        "    scores = pool.scores[start:]\n",
        "    scores = pool.log_q[start:]\n",
        "by value",
    ),
    PlantedBug(
        "rerank keeps the top of the ranking even when a parent is missing",
        "dynamic_tree.py",
        "    if np.all((parents[top] < 0) | chosen[np.maximum(parents[top], 0)]):\n",
        "    if True:\n",
        "without its parent",
    ),
    PlantedBug(
        "rerank breaks ties by pool index only, not toward the shallower candidate",
        "dynamic_tree.py",
        "    ranked = np.lexsort((np.arange(len(scores)), depth, -scores))  # best first\n",
        "    ranked = np.lexsort((np.arange(len(scores)), -scores))  # best first\n",
        "shallower",
    ),
    PlantedBug(
        "total_tokens taken as the number of drafts (the root forgotten)",
        "drafters/eagle2.py",
        "        drafts = min(self.total_tokens, max_nodes) - 1\n",
        "        drafts = min(self.total_tokens, max_nodes)\n",
        "counts the root",
    ),
    PlantedBug(
        "tree parents left as pool indices",
        "dynamic_tree.py",
        "    parents = node_of[pool.parents[selected] + 1]\n",
        "    parents = pool.parents[selected] + 1\n",
        "tree node",
    ),
)
