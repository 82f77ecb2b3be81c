"""Public tests for the EAGLE-2 tree assignment: run them with `python -m pytest` in this folder.

They check each function of `dynamic_tree.py` on a small hand-made case, exactly, and that
greedy EAGLE-2 decoding through your drafter emits the target's own greedy tokens. The grader
runs these and more (grown pools with ties, hand-made pools, the tree's size, the head forwards
per cycle, and τ with a well-calibrated head).
"""

import numpy as np
import pytest

from minieagle import model
from minieagle.config import LlamaConfig
from minieagle.drafters.eagle2 import Eagle2Drafter
from minieagle.dynamic_tree import (
    Pool,
    add_children,
    build_tree,
    empty_pool,
    next_frontier,
    rerank,
    top_children,
)
from minieagle.errors import InvalidInputError
from minieagle.generate import generate, greedy_reference
from minieagle.heads.eagle1 import Eagle1Config, init_head

# A 6-token float64 target and a randomly initialised EAGLE-1 head (built in a few ms).
CONFIG = LlamaConfig(
    vocab_size=6,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
)
TARGET = model.init_params(CONFIG, seed=0, dtype=np.float64)
HEAD_CFG = Eagle1Config.from_target(CONFIG)
HEAD = init_head(HEAD_CFG, seed=1, dtype=np.float64)


@pytest.mark.points(1)
def test_top_children_are_the_k_most_likely_tokens():
    """Each row's k most likely tokens, most likely first, the lowest id on ties, with log q."""
    log_q = np.log(np.array([[0.1, 0.3, 0.05, 0.3, 0.25], [0.4, 0.1, 0.2, 0.2, 0.1]]))
    tokens, picked = top_children(log_q, 3)
    for row in range(2):
        want = sorted(range(5), key=lambda t: (-log_q[row, t], t))[:3]
        assert np.asarray(tokens)[row].tolist() == want, (
            f"row {row}: top_children picked tokens {np.asarray(tokens)[row].tolist()}, expected "
            f"{want} (the 3 largest log q, most likely first, the lowest token id on a tie)"
        )
        assert np.array_equal(np.asarray(picked)[row], log_q[row, want]), (
            f"row {row}: the children's log q are {np.asarray(picked)[row]}, expected "
            f"{log_q[row, want]} (log_q at the chosen tokens)"
        )


# The pool of the hand-made cases, in pool order (index: token, parent, log q given the parent):
#   0: token 2, root, log q -0.5      1: token 0, root, -1.25     2: token 1, root, -2.0
#   3: token 1, parent 0, -0.25       4: token 3, parent 0, -3.0
#   5: token 0, parent 2, -0.125      6: token 2, parent 2, -1.5
ROOT_LOG_Q = [[-0.5, -1.25, -2.0]]
LEVEL_2 = ([0, 2], [[1, 3], [0, 2]], [[-0.25, -3.0], [-0.125, -1.5]])


def _two_level_pool():
    pool = add_children(empty_pool(), [-1], np.array([[2, 0, 1]]), np.array(ROOT_LOG_Q))
    expanded, tokens, log_q = LEVEL_2
    return add_children(pool, expanded, np.array(tokens), np.array(log_q))


@pytest.mark.points(2)
def test_add_children_scores_add_up_along_the_path():
    """A child's score (the log of its value) is its parent's score plus its own log q."""
    pool = _two_level_pool()
    assert len(pool) == 7, f"the pool holds {len(pool)} candidates, expected 3 + 2 * 2 = 7"
    assert pool.tokens.tolist() == [2, 0, 1, 1, 3, 0, 2], (
        f"pool tokens {pool.tokens.tolist()}, expected [2, 0, 1, 1, 3, 0, 2]: append each "
        "expanded node's children as a block, in rank order"
    )
    assert pool.parents.tolist() == [-1, -1, -1, 0, 0, 2, 2], (
        f"pool parents {pool.parents.tolist()}, expected [-1, -1, -1, 0, 0, 2, 2] (the parent's "
        "pool index, -1 for a child of the root)"
    )
    assert pool.log_q.tolist() == [-0.5, -1.25, -2.0, -0.25, -3.0, -0.125, -1.5], (
        f"pool.log_q {pool.log_q.tolist()}: keep each candidate's own log q there"
    )
    want = [-0.5, -1.25, -2.0, -0.75, -3.5, -2.125, -3.5]
    for i, (got, expected) in enumerate(zip(pool.scores.tolist(), want, strict=True)):
        assert got == expected, (
            f"candidate {i} has score {got}, expected {expected}: a value is the product of q "
            "along the path, so its log is the parent's score plus the candidate's log q (add "
            "the parent's score; 0 at the root)"
        )


@pytest.mark.points(1)
def test_next_frontier_takes_the_best_values_of_the_newest_level():
    """The k best candidates of the newest level by value (not by their own log q), best first."""
    pool = _two_level_pool()
    got = np.asarray(next_frontier(pool, 3, 2)).tolist()
    # By own log q the newest level ranks 5 (-0.125), 3 (-0.25), 6, 4; by value 3, 5, 4 = 6.
    assert got == [3, 5], (
        f"next_frontier(pool, start=3, k=2) = {got}, expected [3, 5]: rank the newest level "
        "by value (the score, the path's sum of log q), best first; [5, 3] ranks by the "
        "candidates' own log q"
    )


@pytest.mark.points(2)
def test_rerank_takes_the_best_candidates_of_the_whole_pool():
    """The count best by value, from any level: a shallow candidate that was never expanded can
    beat a deep one. Listed parents first (by depth, then pool index)."""
    # The two-level pool above, written out (ranked by value: 0, 3, 1, 2, 5, then 4 and 6).
    scores = np.array([-0.5, -1.25, -2.0, -0.75, -3.5, -2.125, -3.5])
    pool = Pool(np.array([2, 0, 1, 1, 3, 0, 2]), np.array([-1, -1, -1, 0, 0, 2, 2]), scores,
                np.array([-0.5, -1.25, -2.0, -0.25, -3.0, -0.125, -1.5]))  # fmt: skip
    for count, want in ((1, [0]), (3, [0, 1, 3]), (5, [0, 1, 2, 3, 5]), (20, list(range(7)))):
        got = np.asarray(rerank(pool.scores, pool.parents, count)).tolist()
        assert got == want, (
            f"rerank(..., count={count}) = {got}, expected {want}: the {count} highest scores "
            "of the whole pool (all candidates if fewer), listed by depth, then pool index"
        )


@pytest.mark.points(1)
def test_build_tree_maps_pool_candidates_to_tree_nodes():
    """Node 0 is the root, node j + 1 is pool candidate selected[j]; parents become tree nodes."""
    pool = Pool(
        np.array([4, 5, 3, 0, 1]),
        np.array([-1, -1, 0, 1, 3]),  # 0, 1 under the root; 2 under 0; 3 under 1; 4 under 3
        np.array([-0.1, -0.2, -3.0, -0.4, -0.5]),
        np.array([-0.1, -0.2, -2.9, -0.2, -0.1]),
    )
    try:
        tree = build_tree(9, pool, np.array([0, 1, 3, 4]))
    except InvalidInputError as error:
        raise AssertionError(
            f"build_tree refused a valid selection ({error}): map each candidate's parent "
            "(a pool index) to its tree node, node j + 1 for selected[j], the root for -1"
        ) from error
    assert tree.tokens.tolist() == [9, 4, 5, 0, 1], (
        f"tree tokens {tree.tokens.tolist()}, expected [9, 4, 5, 0, 1]: the root, then the "
        "selected candidates' tokens in order"
    )
    assert tree.parents.tolist() == [-1, 0, 0, 2, 3], (
        f"tree parents {tree.parents.tolist()}, expected [-1, 0, 0, 2, 3]: a parent is a tree "
        "node (node j + 1 = selected[j]), not a pool index"
    )
    assert all(p is None for p in tree.proposals), "without proposals every node carries None"


@pytest.mark.points(3)
def test_greedy_eagle2_decoding_is_greedy_vanilla_decoding():
    """Through `generate`, EAGLE-2 at T = 0 emits exactly the target's greedy tokens."""
    prompt, n = [1, 3, 4], 12
    drafter = Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, depth=3, top_k=3, total_tokens=10)
    try:
        result = generate(
            TARGET, CONFIG, prompt, drafter=drafter, max_new_tokens=n, stop_at_eos=False
        )
    except InvalidInputError as error:
        raise AssertionError(
            f"generate failed: {error}. Is each tree node's parent a tree node listed before it "
            "(build_tree), and the tree no larger than total_tokens, root included?"
        ) from error
    want = greedy_reference(TARGET, CONFIG, prompt, n)
    assert result.tokens == want, (
        f"EAGLE-2 emitted {result.tokens}, greedy decoding gives {want}: any tree is verified "
        "losslessly, so check that your tree's parents are tree nodes and its tokens the pool's"
    )
    assert max(result.tree_sizes) > 1, "every proposed tree held only the root: no drafts"
