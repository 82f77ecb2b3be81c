"""Assignment (e): EAGLE-2's dynamic draft tree, expansion by value and reranking."""

TITLE = "EAGLE-2's dynamic draft tree: expansion by value, reranking, and the tree"
FILES = ("dynamic_tree.py", "drafters/eagle2.py")
