"""Course assignments made from the library's own code, and their autograder.

The reference implementation is the single source of every assignment: a region of library code
between `### BEGIN SOLUTION <name>` and `### END SOLUTION` is what the student writes. `make`
copies the files that hold an assignment's regions into a student folder with those regions
replaced by `raise NotImplementedError`, beside a handout and the public tests; `grade` runs the
public and hidden tests against a submission, with the submitted files standing in for the
library's own, and reports a score per test. See docs/assignments.md.

This package imports nothing from the rest of minieagle at import time: the overlay that swaps a
student's module in must be installed before the module it replaces is first imported.
"""
