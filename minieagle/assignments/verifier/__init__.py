"""Assignment (b): the lossless verifier, for chains and trees, greedy and sampled."""

TITLE = "The lossless verifier: recursive rejection sampling over a draft tree"
FILES = ("verify.py",)
