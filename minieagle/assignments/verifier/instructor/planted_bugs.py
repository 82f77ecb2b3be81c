"""Planted bugs of the verifier assignment, for `minieagle assignment check`.

Instructors only: each quotes a line of the solution, so the student edition leaves this
file out. See grader.PlantedBug."""

from minieagle.assignments.grader import PlantedBug

PLANTED_BUGS = (
    PlantedBug(
        "never accepts a draft",
        "verify.py",
        "    kids = children(tree)\n",
        "    kids = [[] for _ in range(len(tree))]\n",
        "accepts nothing",
    ),
    PlantedBug(
        "residual not renormalised",
        "verify.py",
        "    return r / total if total > 0 else p\n",
        "    return r\n",
        "residual",
    ),
    PlantedBug(
        "accepts with p(x) instead of p(x)/q(x)",
        "verify.py",
        "    return float(min(1.0, p[token] / q[token]))\n",
        "    return float(min(1.0, p[token]))\n",
        "min(1, p(x) / q(x))",
    ),
    PlantedBug(
        "keeps trying siblings after an acceptance",
        "verify.py",
        "                node = child\n                break\n",
        "                node = child\n",
        "after a child is accepted",
    ),
)
