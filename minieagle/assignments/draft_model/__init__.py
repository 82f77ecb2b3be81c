"""Assignment (c): classic speculative decoding's draft-model drafter."""

from minieagle.assignments.grader import PlantedBug

TITLE = "The draft-model drafter: a chain from a small Llama, its KV cache rolled back"
FILES = ("drafters/draft_model.py",)
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
