"""Assignment (f): EAGLE-3's training-time test: the unroll, its attention, loss and backward."""

TITLE = "EAGLE-3's training-time test: the head unrolled on its own outputs"
FILES = ("heads/eagle3.py",)
