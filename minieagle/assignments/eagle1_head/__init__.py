"""Assignment (d): the EAGLE-1 head, the tree attention mask and the level-by-level drafter."""

TITLE = "EAGLE-1: the feature head, the tree mask and level-by-level tree drafting"
FILES = ("heads/eagle1.py", "tree.py", "drafters/eagle1.py", "drafters/head_drafter.py")
