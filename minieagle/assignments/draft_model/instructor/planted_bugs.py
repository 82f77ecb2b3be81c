"""Planted bugs of the draft_model assignment, for `minieagle assignment check`.

Instructors only: each quotes a line of the solution, so the student edition leaves this
file out. See grader.PlantedBug."""

from minieagle.assignments.grader import PlantedBug

PLANTED_BUGS = (
    PlantedBug(
        "draft cache never rolled back",
        "drafters/draft_model.py",
        "        self.cache.crop(committed + kept)\n",
        "",
        "roll",
    ),
    PlantedBug(
        "sampled drafts labelled as deterministic",
        "drafters/draft_model.py",
        "            proposals.append(q)\n",
        "            proposals.append(None)\n",
        "carry",
    ),
    PlantedBug(
        "the unread last draft is forgotten",
        "drafters/draft_model.py",
        "        self.pending = list(tokens[1 + kept :])",
        "        self.pending = []",
        "pending",
    ),
    PlantedBug(
        "one draft too few",
        "drafters/draft_model.py",
        "        for i in range(gamma):\n",
        "        for i in range(gamma - 1):\n",
        "gamma",
    ),
)
