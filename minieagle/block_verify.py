"""Block verification: every drafted path judged as one block, from the leaves back to the root.

`minieagle.verify` judges a tree token by token from the root (recursive rejection sampling): a
token whose target/draft ratio p/q is below 1 is accepted with probability p/q, and once it is
rejected everything under it is lost. Judged as a block, a path whose later tokens the target
favours more than the draft did can make up for an early token the draft overrated: on a chain this
is block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding"),
which no valid verifier beats in expected accepted tokens; Traversal Verification (Weng et al.
2025) carries the idea to trees. The rule here is ours, derived and proved in docs/lossless.md
("Block verification"), and checked exactly by `tests/test_lossless.py` on every small case.

Each node v is judged with a *mass* m_v: a sub-probability vector over the token after v, of total
M_v <= 1, the chance the cycle keeps v (or a node under it) given that v was drafted. The root's
mass is the target's distribution p_root (M = 1: the root is always kept). Judging v:

1. Each child c of v in order, token x drawn from proposal q (one-hot at x for a deterministic
   pick), gets the weight w_c = min(1, m(x) / q(x)) and is judged with mass w_c * p_c (p_c the
   target's distribution after c). If c or a node under it is kept, that path is accepted.
2. If not (probability rho = 1 - sum min(q, m) over the draws of x), v's mass becomes what the
   target still owes there, renormalised by that chance: m <- max(0, m - q) / rho.
3. Once every child is refused, v itself is kept with probability M (the total of m), and the
   next token is drawn from m / M.

By induction from the leaves, judging v keeps it with probability exactly M_v and then emits its
next token with law m_v / M_v (docs/lossless.md); at the root that is the target's law. On a
chain this is Sun et al.'s block verification; on one node with many children it is recursive
rejection sampling (`verify`) itself, since there M = 1 throughout. At T = 0 it gives the greedy
verdict. On a tree it is not always ahead of `verify`: a node kept with M < 1 weighs its later
children against a smaller mass than `verify` would, and on some random trees it keeps fewer
tokens (`benchmarks/block_verification.py --random-trees`); on the drafts of the shipped heads it
keeps more at every temperature measured, which is why `generate(verification="block")` is the
default ("token" uses `verify`).
"""

from __future__ import annotations

import numpy as np

from minieagle.errors import InvalidInputError
from minieagle.sampling import Randomness
from minieagle.tree import Tree, children
from minieagle.verify import Verdict


def verify_block(tree: Tree, target_probs, rng: Randomness) -> Verdict:
    """Judge `tree` path by path, leaves first (module docstring). Arguments and result as
    `minieagle.verify.verify`: target_probs row i is the target's processed distribution after
    node i; tokens < 0 are padding, skipped with what hangs under them.

    The walk is depth first with an explicit stack (a chain may be thousands of nodes deep):
    each frame is a node being judged, its current mass, its children not yet judged, and the
    proposal its own token was drawn from (for its parent's update if it is refused)."""
    if len(target_probs) != len(tree):
        raise InvalidInputError(
            f"target_probs has {len(target_probs)} rows for {len(tree)} nodes; "
            "pass the target distribution at every node"
        )
    kids = children(tree)
    vocab = len(np.asarray(target_probs[0]))
    stack = [_Frame(0, np.asarray(target_probs[0], dtype=np.float64), iter(kids[0]), None)]
    while True:
        frame = stack[-1]
        child = next((c for c in frame.todo if int(tree.tokens[c]) >= 0), None)
        if child is not None:  # judge the next child: descend, or refuse it at once
            token, q = int(tree.tokens[child]), _proposal(tree, child, vocab)
            weight = _child_weight(frame.mass, q, token, child)
            if weight > 0:
                row = np.asarray(target_probs[child], dtype=np.float64)
                stack.append(_Frame(child, weight * row, iter(kids[child]), q))
            else:  # weight 0: nothing under it can be kept (no coin, no target row)
                frame.mass = _after_refusal(frame.mass, q)
            continue
        total = float(frame.mass.sum())  # every child refused: the node itself
        if len(stack) == 1:  # the root, M = 1: kept surely (an empty mass only by rounding)
            p = frame.mass / total if total > 0 else np.asarray(target_probs[0], np.float64)
            return Verdict([], int(rng.draw(p)))
        if total > 0 and rng.coin(min(1.0, total)):
            return Verdict([f.node for f in stack[1:]], int(rng.draw(frame.mass / total)))
        stack.pop()
        stack[-1].mass = _after_refusal(stack[-1].mass, frame.proposal)


class _Frame:
    """A node being judged: its mass, an iterator over its children, its token's proposal."""

    def __init__(self, node: int, mass: np.ndarray, todo, proposal):
        self.node, self.mass, self.todo, self.proposal = node, mass, todo, proposal


def _child_weight(mass: np.ndarray, q: np.ndarray, token: int, node: int) -> float:
    """w = min(1, m(x) / q(x)): the child's chance of being kept, given its token x."""
    if q[token] <= 0:
        raise InvalidInputError(
            f"candidate token {token} at node {node} has proposal probability 0; a sampled "
            "candidate must come from the q it carries (pass None for deterministic picks)"
        )
    return min(1.0, float(mass[token] / q[token]))


def _after_refusal(mass: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The node's mass once a child drawn from q was refused: max(0, m - q) / rho, rho = 1 -
    sum min(q, m) the chance of that refusal. rho = 0 (the child was kept surely) happens only
    through rounding; the mass is then left as it was."""
    refused = 1.0 - float(np.minimum(q, mass).sum())
    return np.maximum(mass - q, 0.0) / refused if refused > 0 else mass


def _proposal(tree: Tree, node: int, vocab: int) -> np.ndarray:
    """The distribution node's token was drawn from: its proposal, or one-hot at the token for
    a deterministic pick."""
    q = tree.proposals[node]
    if q is None:
        q = np.zeros(vocab)
        q[int(tree.tokens[node])] = 1.0
    return np.asarray(q, dtype=np.float64)
