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
    PlantedBug(
        "correction drawn from the original p instead of the residual",
        "verify.py",
        "            return Verdict(accepted, int(rng.draw(p)))\n",
        "            return Verdict(accepted, int(rng.draw(np.asarray(target_probs[node]))))\n",
        "the correction is drawn from the residual",
    ),
    PlantedBug(
        "residual not chained across siblings",
        "verify.py",
        "            p = residual(p, q, token)\n",
        "            p = residual(np.asarray(target_probs[node], dtype=np.float64), q, token)\n",
        "the residuals chain across siblings",
    ),
    PlantedBug(
        "bonus drawn from the parent's row",
        "verify.py",
        "        p = np.asarray(target_probs[node], dtype=np.float64)\n",
        "        p = np.asarray(target_probs[node], dtype=np.float64) if kids[node] or not "
        "accepted else p\n",
        "not from its parent's row",
    ),
)
