"""Hardware-aware tree sizing (minieagle.sizing) and the drafters' `sizer` option.

- `choose` returns the configuration of the highest predicted speedup
  τ̂·step / (verify[N] + loop + draft[k, d]) (a brute-force oracle, hand-made and Hypothesis
  cases), honours fixed top_k / depth / total_tokens, falls back to drafting nothing when no
  tree is predicted to beat vanilla decoding (only when nothing is fixed), and refuses fixed
  sizes that match no candidate. Negative controls: a choice that forgets the loop cost, one
  that takes the step from the cost curve, one that ignores a fixed size and one that never
  drafts nothing are each caught.
- The timing of the calibration runs: the timed target's view decodes the same tokens as the
  target, each cycle's loop time is small next to its forward on the tiny target, and an
  accept made slower by 5 ms shows in the loop time (a loop timing that missed it is caught).
- `expected_accepted` sums g(V) over the reranked candidates of the pool cut to depth + 1;
  candidates deeper than that never count (a version without the cut is caught).
- `_TimedDrafter` records one (V, on the accepted path) pair per verified draft, as many on
  the path as the cycle accepted, with V the drafted node's value, and drafts what the bare
  drafter drafts (an off-by-one marking is caught); near a full context, a cycle that drafts
  nothing records nothing.
- `measure_sizing` end to end on the tiny target: every cost and τ̂ is present, τ̂ lies in
  [1, N] and never falls as N or d grows; `sizing_from` picks one of the candidates (corrupted
  measurements are caught by the same checker).
- `auto_size` measures once per machine, identity and sampling setting, caches atomically, and
  measures again (never raises) over a corrupt or outdated cache file (`measure_sizing` faked,
  so no decoding runs; a cache that never hits and a key that ignores the sampling are caught).
- At T > 0 with the tree left open (sampled_tree=None) `auto_size` sizes the top-k and the
  sampled tree, sharing the budget and the verify costs, caches each, and keeps the faster,
  naming the other (a planted "always the first tree" is caught); the calibration a drafter
  ranks by is part of the cache key and of the file (another map is measured again).
- The drafters take the sizer's sizes at `begin`: EAGLE-2 grows the sized tree and stays the
  greedy reference, total_tokens = 1 drafts nothing; EAGLE-1's `choices="auto"` drafts the
  sized chain (0: nothing); inconsistent options are refused.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_eagle import CONFIG, HEAD, HEAD_CFG, TARGET, run

from minieagle import inference, sizing
from minieagle.calibration import Calibration, fit_calibration
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.drafters.eagle2 import Eagle2Drafter
from minieagle.dynamic_tree import Pool, rerank
from minieagle.errors import InvalidInputError
from minieagle.generate import generate, greedy_reference
from minieagle.sampling import SamplingParams
from minieagle.sizing import Sizing, _TimedDrafter, choose, expected_accepted, sizing_from

PROMPT = [1, 3, 4, 0, 5]
NOTHING = (0, 0, 1, 1.0, 1.0)  # choose's "draft nothing": vanilla decoding, speedup 1

# ---------------------------------------------------------------------------- choose

VERIFY = {1: 1.0, 2: 1.2, 4: 1.5, 8: 2.5}
LOOP = 0.5
STEP = 1.2  # a vanilla step: not verify(1) + loop, which the cost curve would say
DRAFT = {(1, 1): 0.3, (1, 2): 0.5, (2, 1): 0.4, (2, 2): 0.7}
# (2, 2, 4): 3.0 * 1.2 / (1.5 + 0.5 + 0.7) = 1.333 is the best tree;
# the best with top_k = 1 is (1, 2, 4): 2.6 * 1.2 / 2.5 = 1.248.
TAU = {
    (1, 1, 2): 1.6, (1, 1, 4): 1.7, (1, 1, 8): 1.7,
    (1, 2, 2): 1.6, (1, 2, 4): 2.6, (1, 2, 8): 2.6,
    (2, 1, 4): 2.2, (2, 1, 8): 2.4,
    (2, 2, 4): 3.0, (2, 2, 8): 3.5,
}  # fmt: skip


def _speed(verify, loop, draft, k, d, n, t, step=STEP, per_token=0.0, rows=None,
           by_k=None, whole=None) -> float:  # fmt: skip
    if (k, n) in (whole or {}):  # a cycle timed whole
        return t * step / whole[k, n]
    loop, per_token = (by_k or {}).get(k, (loop, per_token))  # a top_k's own loop, if given
    read = 0.0
    if rows is not None:  # a chain's N rows in one product, a tree's a product per kept token
        read = rows.product_ms + rows.row_ms * n if k == 1 else rows.per_token_ms[k] * t
    drafting = draft.get((k, min(d, n - 2)), draft[k, d])  # the levels the drafter runs
    return t * step / (verify[n] + loop + per_token * t + read + drafting)


def _check_choose(choose_fn, verify, loop, draft, tau, step=STEP, per_token=0.0, rows=None,
                  **fixed) -> None:  # fmt: skip
    """Assert that choose_fn(...) is a brute-force argmax of the predicted speedup over the
    candidates `fixed` allows (plus drafting nothing when nothing is fixed), or raises
    InvalidInputError when none is allowed."""
    allowed = {
        (k, d, n): t
        for (k, d, n), t in tau.items()
        if all(
            fixed.get(name) in (None, got)
            for name, got in zip(("top_k", "depth", "total_tokens"), (k, d, n), strict=True)
        )
    }
    free = all(value is None for value in fixed.values())
    costs = {"loop_ms_per_token": per_token} if per_token else {}
    if rows is not None:
        costs["rows"] = rows
    if not allowed and not free:
        with pytest.raises(InvalidInputError):
            choose_fn(verify, loop, draft, tau, step_ms=step, **costs, **fixed)
        return
    best = max((_speed(verify, loop, draft, *key, t, step, per_token, rows)
                for key, t in allowed.items()), default=0.0)  # fmt: skip
    if free:
        best = max(best, 1.0)
    k, d, n, t, speed = choose_fn(verify, loop, draft, tau, step_ms=step, **costs, **fixed)
    if (k, d, n) == (0, 0, 1):
        assert free, f"drafting nothing was chosen although {fixed} were fixed"
        assert (t, speed) == (1.0, 1.0)
    else:
        assert (k, d, n) in allowed, f"{(k, d, n)} is not a candidate allowed by {fixed}"
        assert t == allowed[k, d, n]
        expected = _speed(verify, loop, draft, k, d, n, t, step, per_token, rows)
        assert math.isclose(speed, expected, rel_tol=1e-12)
    assert speed >= best - 1e-9, f"chose speedup {speed}, but {best} was possible"


def test_choose_hand_made_picks_the_best_tree_and_honours_fixed_sizes():
    """On hand-made costs the best tree is (2, 2, 4); fixing top_k = 1 gives (1, 2, 4); fixing
    depth = 1 and total_tokens = 8 gives (2, 1, 8); every answer is the brute-force argmax."""
    assert choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP)[:3] == (2, 2, 4)
    assert choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, top_k=1)[:3] == (1, 2, 4)
    assert choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, depth=1, total_tokens=8)[:3] == (
        2, 1, 8,
    )  # fmt: skip
    k, d, n, t, speed = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP)
    assert t == 3.0 and math.isclose(speed, 3.0 * 1.2 / 2.7)
    for fixed in (
        {},
        {"top_k": 1},
        {"top_k": 2},
        {"depth": 1},
        {"total_tokens": 2},
        {"top_k": 2, "depth": 1, "total_tokens": 8},
    ):
        _check_choose(choose, VERIFY, LOOP, DRAFT, TAU, **fixed)


def test_choose_drafts_nothing_only_when_no_tree_pays_and_nothing_is_fixed():
    """With every τ̂ too low to pay for its costs, choose returns (0, 0, 1, 1.0, 1.0); with a
    size fixed it returns the best allowed tree even though it is slower than vanilla."""
    slow = {key: 1.0 + 0.1 * (key[2] - 1) / key[2] for key in TAU}  # τ̂ < 1.1: nothing pays
    assert all(_speed(VERIFY, LOOP, DRAFT, *key, t) < 1 for key, t in slow.items())
    assert choose(VERIFY, LOOP, DRAFT, slow, step_ms=STEP) == NOTHING
    k, d, n, _, speed = choose(VERIFY, LOOP, DRAFT, slow, step_ms=STEP, top_k=2)
    assert k == 2 and speed < 1
    _check_choose(choose, VERIFY, LOOP, DRAFT, slow)
    _check_choose(choose, VERIFY, LOOP, DRAFT, slow, top_k=2)
    _check_choose(choose, VERIFY, LOOP, DRAFT, slow, depth=1)


@pytest.mark.parametrize(
    "fixed",
    [
        {"top_k": 4},
        {"depth": 3},
        {"total_tokens": 3},
        {"top_k": 2, "total_tokens": 2},
        {"top_k": 1, "depth": 1, "total_tokens": 3},
    ],
)
def test_choose_refuses_fixed_sizes_matching_no_candidate(fixed):
    """Fixed sizes no measured candidate has raise InvalidInputError naming them."""
    with pytest.raises(InvalidInputError, match="no candidate size matches"):
        choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, **fixed)
    _check_choose(choose, VERIFY, LOOP, DRAFT, TAU, **fixed)


def _choose_without_loop(verify_ms, loop_ms, draft_ms, tau, *, step_ms, **fixed):
    """Planted bug: the loop overhead left out of the cycle's cost."""
    return choose(verify_ms, 0.0, draft_ms, tau, step_ms=step_ms, **fixed)


def _choose_step_from_the_curve(verify_ms, loop_ms, draft_ms, tau, *, step_ms, **fixed):
    """Planted bug (the model before 2026-12-02): a vanilla step taken as verify(1) + loop."""
    return choose(verify_ms, loop_ms, draft_ms, tau, step_ms=verify_ms[1] + loop_ms, **fixed)


def _choose_loop_per_cycle_only(verify_ms, loop_ms, draft_ms, tau, *, step_ms,
                                loop_ms_per_token=0.0, **fixed):  # fmt: skip
    """Planted bug (the model before the per-token part): the rows the verdict reads left out."""
    return choose(verify_ms, loop_ms, draft_ms, tau, step_ms=step_ms, **fixed)


ROW = 0.2  # ms per token kept: (2, 2, 4) 3.6 / 3.3 = 1.09 stays best, (1, 2, 4) 3.12 / 3.02


def test_choose_counts_the_loop_per_token_kept():
    """With a per-token loop cost, the predicted speedup charges τ̂ rows to each tree: choose
    is the brute-force argmax of τ̂ step / (verify + loop + row τ̂ + draft); leaving the rows
    out (the loop as one constant) is caught by the same check."""
    k, d, n, t, speed = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, loop_ms_per_token=ROW)
    assert (k, d, n) == (2, 2, 4) and math.isclose(speed, 3.0 * 1.2 / (2.7 + 0.6))
    for fixed in ({}, {"top_k": 1}, {"depth": 1}, {"top_k": 2, "total_tokens": 8}):
        _check_choose(choose, VERIFY, LOOP, DRAFT, TAU, per_token=ROW, **fixed)
    with pytest.raises(AssertionError):
        _check_choose(_choose_loop_per_cycle_only, VERIFY, LOOP, DRAFT, TAU, per_token=ROW)


def _choose_rows_per_token_for_chains(verify_ms, loop_ms, draft_ms, tau, *, step_ms, rows=None,
                                      **fixed):  # fmt: skip
    """Planted bug (the model before LazyLogits read a chain's rows together): a chain's
    rows charged a product per kept token, as a tree's."""
    per_token = {1: rows.product_ms + rows.row_ms, **rows.per_token_ms}
    return choose(verify_ms, loop_ms, draft_ms, tau, step_ms=step_ms,
                  rows=sizing.RowCosts(0.0, 0.0, per_token), **fixed)  # fmt: skip


ROWS = sizing.RowCosts(product_ms=0.3, row_ms=0.02, per_token_ms={2: 0.3})


def test_choose_counts_a_chains_rows_as_one_product_and_a_trees_per_token():
    """The LM-head rows: a chain's N in one product (0.3 + 0.02 N ms), a tree's 0.3 ms per
    kept token. (1, 2, 4): 2.6 * 1.2 / (1.5 + 0.5 + 0.38 + 0.5) = 1.083 beats (2, 2, 4):
    3.6 / (1.5 + 0.5 + 0.9 + 0.7) = 1.0; charging the chain per token as well (0.32 * 2.6)
    would pick the tree, which the brute-force check catches."""
    k, d, n, t, speed = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, rows=ROWS)
    assert (k, d, n) == (1, 2, 4) and math.isclose(speed, 2.6 * 1.2 / 2.88)
    for fixed in ({}, {"top_k": 2}, {"depth": 1}, {"top_k": 1, "total_tokens": 8}):
        _check_choose(choose, VERIFY, LOOP, DRAFT, TAU, rows=ROWS, **fixed)
    with pytest.raises(AssertionError):
        _check_choose(_choose_rows_per_token_for_chains, VERIFY, LOOP, DRAFT, TAU, rows=ROWS)
    assert ROWS.per_cycle(4, 8, 2.0) == pytest.approx(0.64)  # no top_k 4 measured: one row each


def _choose_draft_at_depth(verify_ms, loop_ms, draft_ms, tau, *, step_ms, **fixed):
    """Planted bug (the model before 2026-12-03): every tree charged its depth's drafting,
    though a tree of N nodes runs min(depth, N - 2) expansion levels (a chain of one, none)."""
    at_depth = {key: ms for key, ms in draft_ms.items() if key[1] > 0}
    return choose(verify_ms, loop_ms, at_depth, tau, step_ms=step_ms, **fixed)


def test_choose_charges_the_levels_a_tree_runs():
    """A chain of one draft (N = 2) runs no expansion level whatever its depth: with depth 0's
    drafting free, (1, 1, 2) at τ̂ 2.0 is 2.4 / 1.7 = 1.41 and beats the tree (2, 2, 4), 1.333;
    charged depth 1's 0.3 ms it would be 1.2, and the brute-force check catches that."""
    draft = {**DRAFT, (1, 0): 0.0, (2, 0): 0.1}
    tau = {**TAU, (1, 1, 2): 2.0, (1, 2, 2): 2.0}
    k, d, n, t, speed = choose(VERIFY, LOOP, draft, tau, step_ms=STEP)
    assert (k, n) == (1, 2) and math.isclose(speed, 2.0 * 1.2 / 1.7)
    for fixed in ({}, {"top_k": 2}, {"depth": 2}, {"total_tokens": 4}):
        _check_choose(choose, VERIFY, LOOP, draft, tau, **fixed)
    with pytest.raises(AssertionError):
        _check_choose(_choose_draft_at_depth, VERIFY, LOOP, draft, tau)


def test_choose_charges_each_top_k_its_own_loop():
    """Each top_k's own loop fit, where given, replaces the pooled one: with the pooled loop
    (0.5 ms + 0.2 ms a kept token) the tree (2, 2, 4) wins (3.6 / 3.3 = 1.09); with the
    chain's own loop free, (1, 2, 4) runs 3.12 / 2.0 = 1.56. Ignoring the per-top_k fits
    (the pooled loop for all) is caught by comparing with the hand computation."""
    by_k = {1: (0.0, 0.0)}
    k, d, n, t, speed = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, loop_ms_per_token=ROW,
                               loop_by_top_k=by_k)  # fmt: skip
    assert (k, d, n) == (1, 2, 4) and math.isclose(speed, 2.6 * 1.2 / (1.5 + 0.5))
    pooled = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, loop_ms_per_token=ROW)
    assert pooled[:3] == (2, 2, 4)
    fixed_k2 = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, loop_ms_per_token=ROW,
                      loop_by_top_k=by_k, top_k=2)  # fmt: skip
    assert fixed_k2[:3] == (2, 2, 4) and math.isclose(fixed_k2[-1], 3.0 * 1.2 / 3.3)


def test_choose_takes_a_cycle_timed_whole_over_its_parts():
    """A chain of one timed whole (cycle_ms[1, 2]) is charged that, not verify + loop + draft:
    at 1.2 ms, (1, 1, 2) runs 1.6 * 1.2 / 1.2 = 1.6 and beats the tree (2, 2, 4), 1.333; from
    its parts (1.2 + 0.5 + 0.3) it would be 0.96. Other sizes keep the model."""
    whole = {(1, 2): 1.2}
    k, d, n, t, speed = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, cycle_ms=whole)
    assert (k, n) == (1, 2) and math.isclose(speed, 1.6)
    k, d, n, t, speed = choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP, cycle_ms=whole, top_k=2)
    assert (k, d, n) == (2, 2, 4) and math.isclose(speed, 3.0 * 1.2 / 2.7)
    assert choose(VERIFY, LOOP, DRAFT, TAU, step_ms=STEP)[:3] == (2, 2, 4)  # from the parts


def test_the_eagle1_chain_can_be_a_chain_of_one():
    """EAGLE-1's chain of D drafts is the top_k = 1 tree of D + 1 nodes at any depth: where the
    chain of one pays best, `--tree auto` gets chain:1 (the chain candidates once required
    N = depth + 2, which left the chain of one out: chain 0, no chain, though it paid)."""
    m = {"verify_ms": {1: 1.0, 2: 1.2, 3: 2.0}, "step_ms": 1.1, "loop_ms": 0.1,
         "loop_ms_per_token": 0.0, "draft_ms": {(1, 0): 0.05, (1, 1): 0.1},
         "tau": {(1, 1, 2): 1.5, (1, 1, 3): 1.6}}  # fmt: skip
    s = sizing_from(m, "T=0")
    assert (s.top_k, s.total_tokens, s.chain) == (1, 2, 1), s.describe()
    assert s.chain_tau == 1.5 and math.isclose(s.chain_speedup, 1.5 * 1.1 / (1.2 + 0.1 + 0.05))
    assert "EAGLE-1 chain:1" in s.describe()


def test_fit_rows_recovers_a_planted_product_and_row_cost():
    """fit_rows on (rows, ms) products made as 4.0 + 0.3 R ms with noise gives about
    (4.0, 0.3); one row count gives its median as the fixed part; a negative slope is
    clipped to 0; no products give (0, 0)."""
    rng = np.random.default_rng(1)
    counts = rng.choice([1, 1, 1, 2, 3, 8], size=300)
    fixed, per_row = sizing.fit_rows([(int(r), 4.0 + 0.3 * r + rng.normal(0, 0.2)) for r in counts])
    assert abs(fixed - 4.0) < 0.15 and abs(per_row - 0.3) < 0.05
    assert sizing.fit_rows([(1, 2.0), (1, 4.0), (1, 3.0)]) == (3.0, 0.0)
    assert sizing.fit_rows([(1, 5.0), (8, 1.0)])[1] == 0.0
    assert sizing.fit_rows([]) == (0.0, 0.0)


def test_fit_loop_recovers_a_planted_fixed_and_per_token_cost():
    """fit_loop on (ms, tokens kept) records made as 0.7 + 4.5 k ms with noise gives about
    (0.7, 4.5); one kept length only gives no slope (its median as the fixed part); a negative
    slope is clipped to 0; no records give (0, 0)."""
    rng = np.random.default_rng(0)
    kept = rng.integers(1, 6, size=200)
    records = [(0.7 + 4.5 * k + rng.normal(0, 0.3), int(k)) for k in kept]
    fixed, per_token = sizing.fit_loop(records)
    assert abs(fixed - 0.7) < 0.2 and abs(per_token - 4.5) < 0.1
    assert sizing.fit_loop([(2.0, 3), (4.0, 3), (3.0, 3)]) == (3.0, 0.0)
    assert sizing.fit_loop([(5.0, 1), (3.0, 2), (1.0, 3)])[1] == 0.0
    assert sizing.fit_loop([]) == (0.0, 0.0)


def _choose_ignoring_fixed(verify_ms, loop_ms, draft_ms, tau, *, step_ms, **fixed):
    """Planted bug: the fixed sizes ignored."""
    return choose(verify_ms, loop_ms, draft_ms, tau, step_ms=step_ms)


def _choose_never_nothing(verify_ms, loop_ms, draft_ms, tau, *, step_ms, **fixed):
    """Planted bug: drafting nothing is never a candidate (the best tree of any top_k)."""
    if fixed:
        return choose(verify_ms, loop_ms, draft_ms, tau, step_ms=step_ms, **fixed)
    tops = {key[0] for key in tau}
    return max(
        (choose(verify_ms, loop_ms, draft_ms, tau, step_ms=step_ms, top_k=k) for k in tops),
        key=lambda c: c[-1],
    )


@pytest.mark.parametrize(
    "buggy, tau, fixed",
    [
        (_choose_without_loop, TAU, {}),
        (_choose_step_from_the_curve, TAU, {}),
        (_choose_ignoring_fixed, TAU, {"top_k": 1}),
        (_choose_never_nothing, {key: 1.0 + 0.1 * (key[2] - 1) / key[2] for key in TAU}, {}),
    ],
    ids=["forgets-loop-cost", "step-from-the-curve", "ignores-fixed-top-k",
         "never-drafts-nothing"],  # fmt: skip
)
def test_choose_checker_catches_planted_bugs(buggy, tau, fixed):
    """Negative control: `_check_choose` rejects each planted mistake."""
    with pytest.raises(AssertionError):
        _check_choose(buggy, VERIFY, LOOP, DRAFT, tau, **fixed)


SIZES = (1, 2, 3, 4, 6)
KS = (1, 2)
DEPTHS = (1, 2)
TAU_KEYS = [(k, d, n) for k in KS for d in DEPTHS for n in SIZES if n >= k + 1]
ms = st.floats(0.01, 5.0, allow_nan=False)


@st.composite
def _costs(draw):
    verify = dict(zip(SIZES, sorted(draw(st.lists(ms, min_size=5, max_size=5))), strict=True))
    loop = draw(st.floats(0.0, 2.0))
    step = draw(ms)
    draft = {(k, d): draw(ms) for k in KS for d in DEPTHS}
    tau = {(k, d, n): draw(st.floats(1.0, float(n))) for k, d, n in TAU_KEYS}
    fixed = {
        "top_k": draw(st.sampled_from([None, None, 1, 2, 3])),
        "depth": draw(st.sampled_from([None, None, 1, 2, 3])),
        "total_tokens": draw(st.sampled_from([None, None, *SIZES, 5])),
    }
    return verify, loop, draft, tau, step, {k: v for k, v in fixed.items() if v is not None}


@settings(max_examples=150)
@given(_costs())
def test_choose_is_the_brute_force_argmax(costs):
    """For random costs and τ̂ (and random, sometimes unmatched, fixed sizes), choose equals the
    brute-force argmax of τ̂·step / (verify[N] + loop + draft[k, d]) or raises."""
    verify, loop, draft, tau, step, fixed = costs
    _check_choose(choose, verify, loop, draft, tau, step, **fixed)


# ---------------------------------------------------------------------------- expected_accepted


def _pool(parents, q) -> Pool:
    """A level-ordered pool from parents (-1 = root) and each candidate's own q."""
    parents = np.asarray(parents, dtype=np.int64)
    log_q = np.log(np.asarray(q, dtype=np.float64))
    scores = np.zeros(len(parents))
    for i, p in enumerate(parents):
        scores[i] = (scores[p] if p >= 0 else 0.0) + log_q[i]
    return Pool(np.arange(len(parents)) % 6, parents, scores, log_q)


# a (0.9), b (0.05) | c = a·0.95, d = a·0.03 | e = c·0.95, f = c·0.02: the best leaf e is deep.
HAND_POOL = _pool([-1, -1, 0, 0, 2, 2], [0.9, 0.05, 0.95, 0.03, 0.95, 0.02])


def _depths(parents) -> list[int]:
    out = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def _oracle_expected(pool, on_path, depth, drafts) -> float:
    n = sum(1 for x in _depths(pool.parents) if x <= depth + 1)
    chosen = rerank(pool.scores[:n], pool.parents[:n], drafts)
    return float(sum(float(on_path(np.exp(pool.scores[i]))) for i in chosen))


def _check_expected(fn, pool, on_path, depth, drafts) -> None:
    got = fn(pool, on_path, depth, drafts)
    want = _oracle_expected(pool, on_path, depth, drafts)
    assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), (got, want)


def _no_depth_cut(pool, on_path, depth, drafts) -> float:
    """Planted bug: the whole pool is reranked, whatever the depth."""
    chosen = rerank(pool.scores, pool.parents, drafts)
    return float(on_path(np.exp(pool.scores[chosen])).sum())


def test_expected_accepted_hand_pool():
    """Hand-made pool: depth 1 (candidates up to depth 2) with 3 drafts picks a, c, b; depth 2
    picks a, c, e; drafts beyond the cut pool take all of it; the identity and a fitted
    calibration both agree with the oracle."""
    a, b, c = 0.9, 0.05, 0.9 * 0.95
    e, d = c * 0.95, 0.9 * 0.03
    identity = lambda v: v  # noqa: E731
    assert math.isclose(expected_accepted(HAND_POOL, identity, 1, 3), a + c + b)
    assert math.isclose(expected_accepted(HAND_POOL, identity, 2, 3), a + c + e)
    assert math.isclose(expected_accepted(HAND_POOL, identity, 1, 10), a + b + c + d)
    assert math.isclose(expected_accepted(HAND_POOL, identity, 0, 10), a + b)
    records = [(0.9, True), (0.85, True), (0.8, False), (0.05, False), (0.03, False)] * 5
    fitted = fit_calibration(records, setting="T=0")
    flat = Calibration([0.0, 1.0], [0.5, 0.5], "T=0")
    assert math.isclose(expected_accepted(HAND_POOL, flat, 2, 4), 2.0)
    for on_path in (identity, fitted, flat):
        for depth in range(4):
            for drafts in range(1, 8):
                _check_expected(expected_accepted, HAND_POOL, on_path, depth, drafts)


def test_expected_accepted_checker_catches_a_missing_depth_cut():
    """Negative control: ignoring the depth cut counts the deep leaf e instead of b."""
    identity = lambda v: v  # noqa: E731
    assert _no_depth_cut(HAND_POOL, identity, 1, 3) != pytest.approx(
        expected_accepted(HAND_POOL, identity, 1, 3)
    )
    with pytest.raises(AssertionError):
        _check_expected(_no_depth_cut, HAND_POOL, identity, 1, 3)


@st.composite
def _random_pools(draw):
    levels = draw(st.integers(1, 4))
    parents, q, previous = [], [], [-1]
    for _ in range(levels):
        width = draw(st.integers(1, 4))
        start = len(parents)
        for _ in range(width):
            parents.append(draw(st.sampled_from(previous)))
            q.append(draw(st.floats(0.01, 1.0)))
        previous = list(range(start, len(parents)))
    return _pool(parents, q)


@settings(max_examples=100)
@given(_random_pools(), st.integers(0, 4), st.integers(1, 10))
def test_expected_accepted_ignores_candidates_below_the_cut(pool, depth, drafts):
    """On random level-ordered pools, expected_accepted equals the oracle, and dropping or
    rescoring the candidates deeper than depth + 1 never changes it."""
    on_path = Calibration([0.0, 0.3, 1.0], [0.1, 0.6, 0.9], "T=0")
    _check_expected(expected_accepted, pool, on_path, depth, drafts)
    n = sum(1 for x in _depths(pool.parents) if x <= depth + 1)
    cut = Pool(pool.tokens[:n], pool.parents[:n], pool.scores[:n], pool.log_q[:n])
    scores = pool.scores.copy()
    for i in range(n, len(pool)):  # deep candidates as good as they can be: q = 1
        scores[i] = scores[pool.parents[i]]
    deep = Pool(pool.tokens, pool.parents, scores, pool.log_q)
    value = expected_accepted(pool, on_path, depth, drafts)
    assert expected_accepted(cut, on_path, depth, drafts) == value
    assert expected_accepted(deep, on_path, depth, drafts) == value


# ---------------------------------------------------------------------------- _TimedDrafter


def _eagle2(**sizes):
    sizes = {"depth": 2, "top_k": 2, "total_tokens": 6} | sizes
    return Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, **sizes)


def _path_flags(tree, kept_tokens) -> list[bool]:
    """For nodes 1..N-1 of `tree`: is its root path's token sequence a prefix of the kept
    tokens (the root plus the accepted drafts)?"""
    flags = []
    for node in range(1, len(tree)):
        path = []
        while node >= 0:
            path.append(int(tree.tokens[node]))
            node = int(tree.parents[node])
        flags.append(path[::-1] == list(kept_tokens[: len(path)]))
    return flags


def _timed_run(prompt, n, timed_cls=_TimedDrafter):
    """(result, timed drafter, per cycle: (the records its accept added, the drafted nodes'
    values exp(score) from the inner drafter's pool and selection, and whether each drafted
    node lies on the accepted path, both None for a bare root))."""
    timed = timed_cls(_eagle2())
    per_cycle, drafted = [], []
    accept, propose = timed.accept, timed.propose

    def watching_propose(root, rng, max_nodes):
        tree = propose(root, rng, max_nodes)
        inner = timed.inner
        values = np.exp(inner.pool.scores[inner.selected]) if len(tree) > 1 else None
        drafted.append((tree, values))
        return tree

    def counting_accept(tokens, features, next_token):
        before = len(timed.path_records)
        accept(tokens, features, next_token)
        tree, values = drafted[-1]
        flags = _path_flags(tree, tokens) if values is not None else None
        per_cycle.append((timed.path_records[before:], values, flags))

    timed.accept, timed.propose = counting_accept, watching_propose
    result = generate(TARGET, CONFIG, prompt, drafter=timed, max_new_tokens=n, stop_at_eos=False)
    return result, timed, per_cycle


def _check_path_records(result, timed, per_cycle) -> None:
    assert len(per_cycle) == result.target_forwards == len(result.tree_sizes)
    for cycle, (records, values, flags) in enumerate(per_cycle):
        assert len(records) == result.tree_sizes[cycle] - 1, f"cycle {cycle}: {len(records)}"
        on = sum(1 for _, on_path in records if on_path)
        assert on == result.accepted_per_cycle[cycle], f"cycle {cycle}: {on} on the path"
        if values is not None:
            assert [v for v, _ in records] == values.tolist(), f"cycle {cycle}: other values"
            assert [f for _, f in records] == flags, f"cycle {cycle}: other nodes on the path"
    assert len(timed.path_records) == sum(size - 1 for size in result.tree_sizes)
    assert len(timed.pools) == sum(1 for size in result.tree_sizes if size > 1)


def _off_by_one(timed_cls):
    class OffByOne(timed_cls):
        """Planted bug: node i + 2 marked for value i (records shifted by one node)."""

        def accept(self, tokens, features, next_token):
            before = len(self.path_records)
            super().accept(tokens, features, next_token)
            new = self.path_records[before:]
            flags = [on for _, on in new][1:] + [False]
            self.path_records[before:] = [(v, f) for (v, _), f in zip(new, flags, strict=True)]

    return OffByOne


def test_timed_drafter_records_each_verified_draft_and_its_path():
    """Per cycle: one record per verified draft (tree size - 1), as many on the accepted path
    as the cycle accepted, each record's value the drafted node's V = exp(score); timing
    lists have one propose per cycle and `depth` levels each; the drafting is unchanged."""
    result, timed, per_cycle = _timed_run(PROMPT, 12)
    assert 0 < sum(result.accepted_per_cycle) < sum(s - 1 for s in result.tree_sizes)
    _check_path_records(result, timed, per_cycle)
    assert len(timed.propose_ms) == result.target_forwards
    assert len(timed.level_ms) == 2 * result.target_forwards  # depth 2, no cut at 6 nodes
    bare = run(PROMPT, _eagle2(), n=12)
    assert bare.tokens == result.tokens and bare.tree_sizes == result.tree_sizes
    assert result.tokens == greedy_reference(TARGET, CONFIG, PROMPT, 12)


def test_timed_drafter_checker_catches_shifted_path_marks():
    """Negative control: marking the wrong node of each record as on the path is caught."""
    with pytest.raises(AssertionError):
        _check_path_records(*_timed_run(PROMPT, 12, _off_by_one(_TimedDrafter)))


def test_timed_drafter_records_nothing_for_a_cycle_that_drafts_nothing():
    """Decoding until the context is full, the last cycles shrink to a bare root; such a cycle
    verifies no draft and must add no record and no pool."""
    prompt = ([1] + [3, 4, 0, 5] * 20)[:52]
    result, timed, per_cycle = _timed_run(prompt, 40)
    if not (result.stop_reason == "context_full" and result.tree_sizes[-1] == 1):
        pytest.fail(f"no bare-root cycle to check: {result.tree_sizes}")
    _check_path_records(result, timed, per_cycle)


# ---------------------------------------------------------------------------- measure_sizing

MEASURE_PROMPTS = [("t", [1, 3, 4, 0, 5]), ("c", [1, 5, 0, 3, 3, 4])]
MEASURE_K, MEASURE_DEPTH, MEASURE_SIZES = (1, 2), 2, (2, 3, 4, 6)


@pytest.fixture(scope="module")
def measured():
    return sizing.measure_sizing(
        TARGET,
        CONFIG,
        HEAD,
        HEAD_CFG,
        None,
        MEASURE_PROMPTS,
        SamplingParams(),
        candidate_top_k=MEASURE_K,
        max_depth=MEASURE_DEPTH,
        sizes=MEASURE_SIZES,
        new_tokens=8,
    )


class _Measuring(Exception):
    """Raised by the instrumented verify measurement: what stderr held when measuring began."""


def test_measuring_announces_itself_with_an_estimate_before_it_measures(monkeypatch, capsys):
    """Row 18: the first measurement (the verify cost curve) starts after one stderr line that
    says what is measured, for about how long, that it is cached and how to skip it."""

    def instrumented(*args, **kwargs):
        raise _Measuring(capsys.readouterr().err)

    monkeypatch.setattr(sizing, "measure_verify_ms", instrumented)
    with pytest.raises(_Measuring) as seen:
        sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                              SamplingParams(), progress=True, budget_s=30)  # fmt: skip
    (line,) = [x for x in str(seen.value).splitlines() if x.strip()]
    assert "sizing the draft tree for this machine: measuring for about 30 s" in line
    assert "cached" in line and "--total-tokens N --depth D --tree-top-k K" in line


def test_measuring_is_quiet_without_progress(monkeypatch, capsys):
    """Negative control: progress=False prints nothing (tests and notebooks)."""

    def instrumented(*args, **kwargs):
        raise _Measuring(capsys.readouterr().err)

    monkeypatch.setattr(sizing, "measure_verify_ms", instrumented)
    with pytest.raises(_Measuring) as seen:
        sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                              SamplingParams(), budget_s=30)  # fmt: skip
    assert str(seen.value) == ""


def test_a_calibration_run_past_its_deadline_stops_after_min_cycles():
    """The time budget bounds a calibration run by cycles: a deadline already past stops it
    once MIN_CYCLES cycles are recorded (every recorded cycle complete, its τ̂ records fitted),
    where no deadline decodes every prompt to new_tokens (more cycles)."""
    run = functools.partial(
        sizing.calibration_run, TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
        SamplingParams(), 2, depth=2, new_tokens=24,
    )  # fmt: skip
    ticks = []
    bounded = run(deadline=0.0, on_cycle=lambda: ticks.append(1))
    assert len(bounded.pools) == sizing.MIN_CYCLES == len(ticks)
    assert bounded.on_path.records > 0 and bounded.propose_ms > 0
    # every cycle but the prompt's last is timed (loop and forward)
    assert len(bounded.loops) == len(bounded.forwards) == sizing.MIN_CYCLES - 1
    assert len(run().pools) > sizing.MIN_CYCLES


def test_the_chains_calibration_run_keeps_more_cycles_past_its_deadline(monkeypatch):
    """The chain's run (top_k = 1) decides whether any draft pays on a CPU: past its deadline
    it still records MIN_CHAIN_CYCLES cycles (4 once left SmolLM2's τ̂ off by 0.6), shared
    over every prompt (48 decoded in turn had read one or two of 8); the other top_k
    MIN_CYCLES, from the first prompt."""
    monkeypatch.setattr(sizing, "MIN_CHAIN_CYCLES", 9)
    made = []
    tree_drafter = sizing.tree_drafter

    def counting(*args, **kwargs):
        make = tree_drafter(*args, **kwargs)
        return lambda: made.append(1) or make()

    monkeypatch.setattr(sizing, "tree_drafter", counting)
    run = functools.partial(
        sizing.calibration_run, TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
        SamplingParams(), depth=2, new_tokens=24, deadline=0.0,
    )  # fmt: skip
    chain = run(1)
    assert len(chain.pools) == 9 and len(made) == len(MEASURE_PROMPTS) == 2, "every prompt"
    assert len(chain.vanilla_ms) == 2
    made.clear()
    assert len(run(2).pools) == sizing.MIN_CYCLES and len(made) == 1


def _timed_decoding(slow_accept_ms: float = 0.0):
    """Decode PROMPT with a chain drafter behind a `_Stopwatch` against a `_TimedTarget`
    (the drafter's accept made slower by slow_accept_ms): (result, stopwatch)."""
    clock = sizing._TimedTarget(sizing.inference.prepare(TARGET, CONFIG))
    drafter = Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="chain:3")
    if slow_accept_ms:
        accept = drafter.accept

        def slow(*args, **kwargs):
            time.sleep(slow_accept_ms / 1e3)
            return accept(*args, **kwargs)

        drafter.accept = slow
    timed = sizing._Stopwatch(drafter, clock)
    result = generate(clock.view(), CONFIG, PROMPT, drafter=timed, max_new_tokens=24,
                      stop_at_eos=False)  # fmt: skip
    return result, timed


def test_the_stopwatch_times_the_loop_and_the_forward_without_changing_the_tokens():
    """The timed view decodes the tokens the target does; every cycle but the last has a
    forward time above 0 with its tree's size, and a loop time that is what is left of the
    cycle (at least 0 within the clock's resolution)."""
    result, timed = _timed_decoding()
    plain = generate(TARGET, CONFIG, PROMPT, drafter=Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG,
                     choices="chain:3"), max_new_tokens=24, stop_at_eos=False)  # fmt: skip
    assert result.tokens == plain.tokens
    cycles = result.target_forwards
    assert len(timed.forwards()) == len(timed.loops()) == cycles - 1
    assert [n for _, n in timed.forwards()] == result.tree_sizes[:-1]
    assert all(ms > 0 for ms, _ in timed.forwards())
    assert all(ms > -0.05 for ms, _ in timed.loops())
    # each cycle's tokens kept: the accepted path, root included
    assert [kept for _, kept in timed.loops()] == [a + 1 for a in result.accepted_per_cycle[:-1]]


def test_a_slower_accept_shows_in_the_loop_time():
    """5 ms more in every accept raises the median loop time by about 5 ms (the loop is the
    cycle less its propose and forward, so the accept is in it); a loop timing that left the
    accept out, as a forward-only timer would, is caught by the same check."""
    _, fast = _timed_decoding()
    _, slow = _timed_decoding(slow_accept_ms=5.0)
    gain = statistics.median(ms for ms, _ in slow.loops()) - statistics.median(
        ms for ms, _ in fast.loops()
    )
    assert 4.0 < gain < 20.0
    wrong = statistics.median(ms for ms, _ in slow.forwards()) - statistics.median(
        ms for ms, _ in fast.forwards()
    )
    assert not 4.0 < wrong < 20.0


def test_the_sizing_curve_leaves_the_logits_lazy_and_the_readable_path_refuses_it(monkeypatch):
    """measure_verify_ms(lazy_logits=True) times fast-path forwards asked for lazy logits (no
    LM-head row computed, as in verification), every one of them; on the readable path, which
    always computes every row, lazy_logits is refused."""
    from minieagle import inference
    from minieagle.costs import measure_verify_cost

    asked, forward = [], inference.PreparedTarget.forward

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("lazy_logits", False))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(inference.PreparedTarget, "forward", spy)
    prompt = MEASURE_PROMPTS[0][1]
    lazy = sizing.measure_verify_ms(TARGET, CONFIG, prompt, (1, 2), repeats=1, lazy_logits=True)
    assert set(lazy) == {1, 2} and all(ms > 0 for ms in lazy.values())
    assert asked and all(asked[1:])  # the prompt's prefill aside, every timed forward lazy
    with pytest.raises(InvalidInputError, match="lazy_logits=True needs fast=True"):
        measure_verify_cost(TARGET, CONFIG, prompt, sizes=(1,), repeats=1, lazy_logits=True)


def test_vanilla_is_timed_only_where_the_step_is_not_known(monkeypatch):
    """A first sizing times a vanilla step after each calibration prompt; a second one given
    the costs (the other tree at T > 0) takes the step from them and decodes no vanilla."""
    calls = []
    real = sizing._vanilla_ms

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sizing, "_vanilla_ms", counted)
    kwargs = dict(candidate_top_k=(1,), max_depth=MEASURE_DEPTH, sizes=MEASURE_SIZES, new_tokens=8)
    first = sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                                  SamplingParams(), **kwargs)  # fmt: skip
    assert len(calls) == len(MEASURE_PROMPTS)
    costs = (first["verify_ms"], first["step_ms"])
    second = sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                                   SamplingParams(), costs=costs, **kwargs)  # fmt: skip
    assert len(calls) == len(MEASURE_PROMPTS) and second["step_ms"] == first["step_ms"]


def test_an_eagle1_chain_is_timed_on_its_own_drafter():
    """With chain_drafter (EAGLE-1's `--tree auto`), the chain's drafts are timed on that
    drafter: draft_ms[1, d] runs from its 2-draft time to its (max_depth + 1)-draft time, and
    τ̂ still comes from the calibration run; other top_k are refused with the chain drafter."""
    made = []

    def chain(drafts):
        made.append(drafts)
        return Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices=f"chain:{drafts}")

    m = sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                              SamplingParams(), candidate_top_k=(1,), max_depth=MEASURE_DEPTH,
                              sizes=MEASURE_SIZES, new_tokens=8, chain_drafter=chain)  # fmt: skip
    assert set(made) == {1, 2, 3, MEASURE_DEPTH + 1}  # chains of 1, 2, 3 also timed whole
    _check_measured(m, (1,), MEASURE_DEPTH, MEASURE_SIZES)
    with pytest.raises(InvalidInputError, match="candidate_top_k=.1, 2.; pass candidate_top_k"):
        sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                              SamplingParams(), candidate_top_k=(1, 2), chain_drafter=chain)


def _check_measured(m, ks, max_depth, sizes) -> None:
    assert set(m["verify_ms"]) == {1, *sizes}
    assert all(v > 0 for v in m["verify_ms"].values())
    assert m["loop_ms"] >= 0 and m["step_ms"] > 0
    assert set(m["draft_ms"]) == {(k, d) for k in ks for d in range(0, max_depth + 1)}
    assert all(v >= 0 for v in m["draft_ms"].values())
    for k in ks:  # depth 0 (the root's children alone) costs at most depth 1
        assert m["draft_ms"][k, 0] <= m["draft_ms"][k, 1]
    assert set(m["loop_by_top_k"]) == set(ks)  # each top_k's own loop fit
    if 1 in ks:  # the short chains, timed whole
        whole = {(1, d + 1) for d in sizing.WHOLE_CHAINS if d + 1 in sizes and d <= max_depth + 1}
        assert set(m["cycle_ms"]) == whole and all(ms > 0 for ms in m["cycle_ms"].values())
    assert all(fixed >= 0 and per >= 0 for fixed, per in m["loop_by_top_k"].values())
    want = {  # every tree of N nodes the pool of k + d k^2 candidates can fill
        (k, d, n)
        for k in ks
        for d in range(1, max_depth + 1)
        for n in sizes
        if k + 1 <= n <= 1 + k + d * k * k
    }
    assert set(m["tau"]) == want
    for (k, d, n), t in m["tau"].items():
        assert 1.0 <= t <= n, f"τ̂{(k, d, n)} = {t} outside [1, {n}]"
        for bigger in (b for b in sizes if b > n and (k, d, b) in m["tau"]):
            assert t <= m["tau"][k, d, bigger] + 1e-12, f"τ̂ falls from N={n} to {bigger}"
        if d < max_depth:
            assert t <= m["tau"][k, d + 1, n] + 1e-12, f"τ̂ falls from depth {d} to {d + 1}"
    assert set(m["cycles"]) == set(ks) and all(c > 0 for c in m["cycles"].values())
    assert m["calibration_records"] > 0


def test_measure_sizing_end_to_end_on_the_tiny_target(measured):
    """Every size has a verify cost, every (k, d) a draft cost, every valid (k, d, N) a τ̂ in
    [1, N], non-decreasing in N and in d; the result is JSON-ready after the cache's
    conversion."""
    _check_measured(measured, MEASURE_K, MEASURE_DEPTH, MEASURE_SIZES)
    assert any(t > 1 for t in measured["tau"].values()), "the tiny head accepts some drafts"
    as_json = json.dumps(sizing._measured_to_json(measured, "T=0"))
    expected = sizing._expected_keys(MEASURE_K, MEASURE_DEPTH, MEASURE_SIZES)
    back = sizing._measured_from_json(json.loads(as_json), "T=0", expected)
    assert back == measured


def test_measure_sizing_times_the_lm_head_rows_apart_from_the_loop(monkeypatch, measured):
    """With every LM-head product slowed by a planted 30 ms, the measured row costs carry it
    (a chain's product, a tree's rows per kept token) and the loop's own work does not: the
    loop is timed less its rows (a loop that kept them would be above 30 ms)."""
    rows = measured["rows"]  # a row costs something; how it splits into a + b R is the fit's
    assert rows.product_ms + rows.row_ms > 0 and rows.per_token_ms[2] > 0
    compute = inference.LazyLogits.__getitem__

    def slow(self, i):
        if i not in self.rows:
            time.sleep(0.03)
        return compute(self, i)

    monkeypatch.setattr(inference.LazyLogits, "__getitem__", slow)
    m = sizing.measure_sizing(TARGET, CONFIG, HEAD, HEAD_CFG, None, MEASURE_PROMPTS,
                              SamplingParams(), candidate_top_k=MEASURE_K, max_depth=MEASURE_DEPTH,
                              sizes=MEASURE_SIZES, new_tokens=8)  # fmt: skip
    assert m["rows"].product_ms >= 25 and m["rows"].per_token_ms[2] >= 10, m["rows"]
    assert m["loop_ms"] + 4 * m["loop_ms_per_token"] < 15, (m["loop_ms"], m["loop_ms_per_token"])


@pytest.mark.parametrize("corruption", ["tau-above-n", "tau-falls-with-n", "size-missing"])
def test_measured_checker_catches_corrupted_measurements(measured, corruption):
    """Negative control: a τ̂ above N, a τ̂ that falls as N grows and a missing verify cost
    are each caught."""
    m = {key: dict(value) if isinstance(value, dict) else value for key, value in measured.items()}
    if corruption == "tau-above-n":
        m["tau"][2, 1, 3] = 3.5
    elif corruption == "tau-falls-with-n":
        m["tau"][1, 2, 6] = m["tau"][1, 2, 4] - 0.1
    else:
        del m["verify_ms"][4]
    with pytest.raises(AssertionError):
        _check_measured(m, MEASURE_K, MEASURE_DEPTH, MEASURE_SIZES)


def _check_sizing(s: Sizing, m, **fixed) -> None:
    tree = (s.top_k, s.depth, s.total_tokens)
    assert tree in m["tau"] or (not fixed and tree == (0, 0, 1))
    for name, value in fixed.items():
        assert getattr(s, name) == value
    if tree != (0, 0, 1):
        assert s.expected_tau == m["tau"][tree]
        assert math.isclose(
            s.expected_speedup,
            _speed(m["verify_ms"], m["loop_ms"], m["draft_ms"], *tree, s.expected_tau,
                   m["step_ms"], m["loop_ms_per_token"], m.get("rows"), m.get("loop_by_top_k"),
                   m.get("cycle_ms")),
        )
        whole = m["step_ms"] * s.expected_tau / sizing.measured_cycle_ms(m, *tree)
        assert math.isclose(s.expected_speedup, whole)  # the notebook's formula, the same
    else:
        assert (s.expected_tau, s.expected_speedup) == (1.0, 1.0)
    if s.chain:
        chains = {t for (k, _, n), t in m["tau"].items() if k == 1 and n == s.chain + 1}
        assert chains and s.chain_tau in chains  # the chain of s.chain drafts, at any depth
        assert s.chain_speedup >= 1
    else:
        assert (s.chain_tau, s.chain_speedup) == (1.0, 1.0)
    if not fixed:
        assert s.expected_speedup >= 1


def test_sizing_from_picks_a_measured_candidate(measured):
    """sizing_from's tree is one of the measured candidates (or drafting nothing), its chain a
    measured chain (or none), fixed sizes are kept, and the costs are reported."""
    s = sizing_from(measured, "T=0")
    _check_sizing(s, measured)
    assert s.setting == "T=0" and "auto sizing (T=0)" in s.describe()
    assert set(s.costs["draft_ms"]) == {"1,0", "1,1", "1,2", "2,0", "2,1", "2,2"}
    for fixed in ({"top_k": 2}, {"depth": 1}, {"total_tokens": 4}, {"top_k": 1, "depth": 2}):
        _check_sizing(sizing_from(measured, "T=0", **fixed), measured, **fixed)


def test_the_description_says_how_many_cycles_each_prediction_rests_on(measured):
    """`--stats` shows the cycles behind τ̂ (a τ̂ from 4 cycles once chose a drafter 6 % slower
    than vanilla): the chosen tree's top_k's and the chain's (top_k = 1) run."""
    for top_k in (1, 2):
        s = sizing_from(measured, "T=0", top_k=top_k, total_tokens=3)
        assert s.cycles == measured["cycles"] and s.total_tokens > 1
        line, count = s.describe(), measured["cycles"][top_k]
        assert f"(expected tau {s.expected_tau:.2f} from {count} cycles," in line
        if s.chain:
            assert f"{s.chain_tau:.2f} from {measured['cycles'][1]} cycles," in line
    assert "cycles" not in NO_TREE.describe()
    # cheap drafting makes trees pay: the choice is then a tree
    cheap = {
        **measured,
        "draft_ms": {key: 0.0 for key in measured["draft_ms"]},
        "verify_ms": {n: 1.0 for n in measured["verify_ms"]},
        "step_ms": 1.0,
        "loop_ms": 0.0,
        "loop_ms_per_token": 0.0,
        "loop_by_top_k": {},
        "cycle_ms": {},
    }
    s = sizing_from(cheap, "T=0")
    _check_sizing(s, cheap)
    assert s.total_tokens > 1 and s.chain > 0 and s.expected_speedup > 1
    assert s.expected_tau == max(cheap["tau"].values())


# ---------------------------------------------------------------------------- auto_size cache


def _fake_measurements(calls, sampled_gain=1.0):
    """A stand-in for measure_sizing: records its call, returns measurements of the same shape
    for its candidate_top_k and max_depth (sampled_gain: τ̂'s excess over 1 is scaled by it
    for the sampled tree)."""

    def fake(
        target,
        config,
        head,
        head_cfg,
        vocab,
        prompts,
        sampling,
        *,
        candidate_top_k,
        max_depth,
        progress=False,
        sizes=sizing.TOTAL_TOKENS,
        sampled_tree=False,
        calibration=None,
        costs=None,
        budget_s=None,
        **_,
    ):
        calls.append(
            {"sampling": sampling, "candidate_top_k": candidate_top_k, "max_depth": max_depth,
             "sampled_tree": sampled_tree, "calibration": calibration, "costs": costs,
             "budget_s": budget_s}
        )  # fmt: skip
        sizes = sorted({1, *sizes})
        depths = range(1, max_depth + 1)
        gain = sampled_gain if sampled_tree else 1.0
        return {
            "verify_ms": {n: 1.0 + 0.02 * n for n in sizes},
            "step_ms": 1.1,
            "loop_ms": 0.25,
            "loop_ms_per_token": 0.01,
            "loop_by_top_k": {k: (0.25, 0.01) for k in candidate_top_k},
            "cycle_ms": {(1, 2): 1.3} if 1 in candidate_top_k else {},
            "rows": sizing.RowCosts(0.05, 0.01, {k: 0.06 for k in candidate_top_k if k != 1}),
            "draft_ms": {
                (k, d): 0.05 * k * max(d, 0.5) for k in candidate_top_k for d in (0, *depths)
            },
            "tau": {
                (k, d, n): min(n, 1.0 + gain * (n - 1) * (1 - 0.5 ** min(d + 1, n - 1)) / (n + k))
                for k, d, n in sizing._tau_keys(candidate_top_k, max_depth, sizes)
            },
            "calibration_records": 123,
            "cycles": {k: 7 for k in candidate_top_k},
        }

    return fake


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """(auto(identity, sampling, **fixed), the fake measure_sizing calls, the sizing dir)."""
    monkeypatch.setenv("MINIEAGLE_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(sizing, "measure_sizing", _fake_measurements(calls))

    def auto(identity="target|head", sampling=None, **fixed):
        return sizing.auto_size(
            TARGET,
            CONFIG,
            HEAD,
            HEAD_CFG,
            None,
            sampling or SamplingParams(),
            MEASURE_PROMPTS,
            identity=identity,
            progress=False,
            **fixed,
        )

    return auto, calls, tmp_path / "sizing"


def _check_cache_keys(auto, calls, folder) -> None:
    first = auto()
    assert len(calls) == 1 and len(list(folder.glob("*.json"))) == 1
    assert auto() == first and len(calls) == 1, "the same identity and setting measured again"
    auto("another|head")
    assert len(calls) == 2, "another identity read the first one's sizes"
    hot = auto(sampling=SamplingParams(temperature=1.0))
    assert len(calls) == 3, "another sampling setting read the T=0 sizes"
    assert hot.setting == "T=1" and calls[-1]["sampling"] == SamplingParams(temperature=1.0)
    assert auto() == first and auto("another|head") is not None and len(calls) == 3
    assert len(list(folder.glob("*.json"))) == 3
    assert not list(folder.glob("*.tmp")), "a partial file was left behind"


def test_auto_size_measures_once_per_identity_and_setting(cache):
    """The first call measures and writes one JSON file; the same identity and setting then
    load it (no measuring, an equal Sizing); another identity or sampling setting measures
    again; no *.tmp file remains."""
    auto, calls, folder = cache
    _check_cache_keys(auto, calls, folder)
    data = json.loads(next(iter(folder.glob("*.json"))).read_text())
    assert data["version"] == sizing.SIZING_VERSION and data["calibration_records"] == 123
    assert calls[0]["candidate_top_k"] == sizing.CANDIDATE_TOP_K
    assert calls[0]["max_depth"] == sizing.MAX_DEPTH


def test_cache_checker_catches_a_cache_that_never_hits(cache, monkeypatch):
    """Negative control: a cache whose files never read back (never hits) is caught."""
    auto, calls, folder = cache

    def unreadable(*_):
        raise ValueError("planted bug")

    monkeypatch.setattr(sizing, "_measured_from_json", unreadable)
    with pytest.raises(AssertionError, match="measured again"):
        _check_cache_keys(auto, calls, folder)


def test_cache_checker_catches_a_key_without_the_sampling_setting(cache, monkeypatch):
    """Negative control: a cache key that ignores the sampling setting is caught."""
    auto, calls, folder = cache
    monkeypatch.setattr(sizing, "setting_name", lambda sampling, **_: "T=0")
    with pytest.raises(AssertionError, match="another sampling setting"):
        _check_cache_keys(auto, calls, folder)


def test_auto_size_measures_user_fixed_sizes_too(cache):
    """A fixed top_k outside the candidates and a depth beyond MAX_DEPTH join the measured
    search (and the cache key); the Sizing keeps them."""
    auto, calls, _ = cache
    s = auto(top_k=3, depth=sizing.MAX_DEPTH + 2)
    assert calls[-1]["candidate_top_k"] == tuple(sorted({*sizing.CANDIDATE_TOP_K, 3}))
    assert calls[-1]["max_depth"] == sizing.MAX_DEPTH + 2
    assert (s.top_k, s.depth) == (3, sizing.MAX_DEPTH + 2)
    auto()
    assert len(calls) == 2, "the free search read the constrained search's measurements"


@pytest.mark.parametrize(
    "content",
    ["{", "", json.dumps({"version": sizing.SIZING_VERSION}), "OLD", "\x00\xff"],
    ids=["truncated", "empty", "missing-keys", "old-version", "binary"],
)
def test_auto_size_measures_again_over_a_corrupt_cache_file(cache, content):
    """A corrupt, incomplete or outdated cache file is measured again (never raised), the file
    rewritten whole, the same Sizing returned, no *.tmp left."""
    auto, calls, folder = cache
    first = auto()
    (path,) = folder.glob("*.json")
    if content == "OLD":
        data = json.loads(path.read_text())
        content = json.dumps(data | {"version": sizing.SIZING_VERSION - 1})
    path.write_text(content, encoding="latin-1")
    assert auto() == first and len(calls) == 2
    assert json.loads(path.read_text())["version"] == sizing.SIZING_VERSION
    assert auto() == first and len(calls) == 2
    assert not list(folder.glob("*.tmp"))


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        "null",
        json.dumps(
            {
                "version": sizing.SIZING_VERSION,
                "verify_ms": {"1": None},
                "loop_ms": 0,
                "draft_ms": {},
                "tau": {},
                "calibration_records": 0,
                "cycles": {},
            }
        ),
    ],
    ids=["list", "null", "null-value"],
)
def test_auto_size_measures_again_over_a_wrongly_shaped_cache_file(cache, content):
    """A cache file of the wrong JSON shape is measured again, like any corrupt file."""
    auto, calls, folder = cache
    first = auto()
    (path,) = folder.glob("*.json")
    path.write_text(content)
    assert auto() == first and len(calls) == 2


def _edit(data: dict, field: str, key, value) -> dict:
    """data with data[field][key] set to value (removed when value is ...)."""
    data = json.loads(json.dumps(data))
    if key is None:
        data[field] = value
    elif value is ...:
        del data[field][key]
    else:
        data[field][key] = value
    return data


BAD_ENTRIES = {
    "verify-missing-N": ("verify_ms", "26", ...),
    "draft-missing-k,d": ("draft_ms", "2,3", ...),
    "tau-missing": ("tau", "8,7,64", ...),
    "tau-extra": ("tau", "8,7,65", 3.0),
    "verify-extra": ("verify_ms", "65", 2.0),
    "cycles-extra": ("cycles", "3", 7),
    "verify-nan": ("verify_ms", "26", float("nan")),
    "verify-zero": ("verify_ms", "1", 0.0),
    "verify-negative": ("verify_ms", "8", -1.0),
    "verify-huge": ("verify_ms", "1", 1e9),
    "verify-below-one": ("verify_ms", "64", 1e-6),
    "loop-inf": ("loop_ms", None, float("inf")),
    "loop-huge": ("loop_ms", None, 1e9),
    "step-zero": ("step_ms", None, 0.0),
    "step-missing": ("step_ms", None, None),
    "draft-negative": ("draft_ms", "1,1", -0.5),
    "tau-nan": ("tau", "2,2,5", float("nan")),
    "tau-below-one": ("tau", "2,2,5", 0.0),
    "tau-above-N": ("tau", "2,2,5", 9.0),
    "records-negative": ("calibration_records", None, -1),
    "records-float": ("calibration_records", None, 1.5),
    "setting": ("setting", None, "T=1"),
    "calibration": ("calibration", None, "0123456789abcdef"),
    "extra-field": ("surprise", None, 1),
}


@pytest.mark.parametrize("entry", list(BAD_ENTRIES.values()), ids=list(BAD_ENTRIES))
def test_a_bad_cache_entry_is_measured_again_with_a_warning(cache, entry):
    """Rows 4 and 5 of issue 22: a key missing or extra, a time that is NaN, 0, negative or
    absurd, a τ̂ outside [1, N], another setting or an extra field: a warning naming the file
    and the fault, measured again, the same Sizing as the first measurement, the file
    replaced by a valid one."""
    auto, calls, folder = cache
    first = auto()
    (path,) = folder.glob("*.json")
    path.write_text(json.dumps(_edit(json.loads(path.read_text()), *entry)))
    with pytest.warns(UserWarning, match=r"sizing cache file .* is not valid \(.*\); measuring"):
        again = auto()
    assert again == first and len(calls) == 2
    assert auto() == first and len(calls) == 2, "the replaced file did not read back"


def test_a_valid_cache_entry_reads_back_without_a_warning(cache, recwarn):
    """Negative control of the validation: the file a measurement wrote is accepted as is."""
    auto, calls, _ = cache
    first = auto()
    assert auto() == first and len(calls) == 1
    assert not [w for w in recwarn if "sizing" in str(w.message)]


@pytest.mark.parametrize("fault", ["file-for-directory", "unwritable"])
def test_an_unwritable_cache_is_optional(cache, monkeypatch, fault):
    """Row 6: a file where the sizing directory should be, or a directory that refuses writes
    (read-only; simulated, since root writes anyway): the sizes are measured and used, with
    one warning; nothing is raised."""
    auto, calls, folder = cache
    if fault == "file-for-directory":
        folder.write_text("not a directory")
    else:
        folder.mkdir()

        def refuse(self, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(self))

        monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.warns(UserWarning, match="cannot write the sizing cache .* serve this run only"):
        sized = auto()
    assert sized.setting == "T=0" and len(calls) == 1


def test_an_empty_home_writes_no_cache_at_the_filesystem_root(cache, monkeypatch, tmp_path):
    """Row 7: HOME empty and MINIEAGLE_CACHE unset: no cache directory (never /.cache), one
    warning naming MINIEAGLE_CACHE, the sizes measured and used."""
    from minieagle.cache import cache_root

    auto, calls, _ = cache
    monkeypatch.delenv("MINIEAGLE_CACHE")
    monkeypatch.setenv("HOME", "")
    with pytest.raises(InvalidInputError, match="HOME is empty .* set MINIEAGLE_CACHE"):
        cache_root()
    made = []
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: made.append(self))
    with pytest.warns(UserWarning, match="set MINIEAGLE_CACHE"):
        sized = auto()
    assert sized.setting == "T=0" and len(calls) == 1 and made == []
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "minieagle"


@settings(max_examples=50)
@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=8))
def test_the_verify_curve_is_the_lower_envelope_of_its_measurements(times):
    """Non-decreasing in N, never above a measurement at N, and equal to the least time
    measured at N or beyond (a disturbed small N, e.g. verify(1) > verify(2), is replaced)."""
    measured = {2**i: t for i, t in enumerate(times)}
    curve = sizing.lower_envelope(measured)
    assert list(curve) == sorted(measured)
    values = list(curve.values())
    assert all(a <= b for a, b in zip(values, values[1:], strict=False))
    for n, ms in curve.items():
        assert ms == min(t for m, t in measured.items() if m >= n)


def test_the_envelope_checker_catches_a_curve_kept_as_measured(monkeypatch):
    """Negative control: keeping the measurements as they are fails on a disturbed verify(1)."""
    monkeypatch.setattr(sizing, "lower_envelope", lambda measured: dict(measured))
    with pytest.raises(AssertionError):
        test_the_verify_curve_is_the_lower_envelope_of_its_measurements.hypothesis.inner_test(
            [5.0, 1.4, 1.3]
        )


# ---------------------------------------------------------------------------- both trees

HOT = SamplingParams(temperature=1.0)


@pytest.fixture
def both_trees(monkeypatch, tmp_path):
    """auto(sampled_gain, **options): auto_size at T = 1 with the tree left open, over a
    fake measure_sizing whose sampled tree's τ̂ is scaled by sampled_gain; and its calls."""
    monkeypatch.setenv("MINIEAGLE_CACHE", str(tmp_path))
    calls = []

    def auto(sampled_gain, sampling=HOT, **options):
        monkeypatch.setattr(sizing, "measure_sizing", _fake_measurements(calls, sampled_gain))
        return sizing.auto_size(TARGET, CONFIG, HEAD, HEAD_CFG, None, sampling, MEASURE_PROMPTS,
                                identity="t|h", progress=False, sampled_tree=None,
                                **options)  # fmt: skip

    return auto, calls, tmp_path / "sizing"


def _check_tree_choice(auto, calls, folder) -> None:
    """Both trees sized at T = 1 (the second reusing the first's verify costs, the budget
    shared), the faster kept whichever it is, the other named; cached (a second call
    measures nothing); one tree at T = 0."""
    for gain, want in ((3.0, True), (0.2, False)):
        calls.clear()
        for old in folder.glob("*.json"):
            old.unlink()
        chosen = auto(gain)
        assert [c["sampled_tree"] for c in calls] == [False, True], "both trees are measured"
        assert calls[0]["costs"] is None and calls[1]["costs"] is not None
        half = sizing.SIZING_SECONDS / 2  # the first tree gets half, the second what is left
        assert calls[0]["budget_s"] <= half <= calls[1]["budget_s"] <= sizing.SIZING_SECONDS
        assert chosen.sampled_tree is want, f"sampled gain {gain}: kept the slower tree"
        assert chosen.setting == ("T=1,sampled" if want else "T=1")
        assert chosen.alternative["sampled_tree"] is (not want)
        assert chosen.expected_speedup >= chosen.alternative["expected_speedup"]
        assert ("sampled tree:" if want else "top-k tree:") in chosen.describe()
        assert len(list(folder.glob("*.json"))) == 2
        assert auto(gain) == chosen and len(calls) == 2, "both trees' sizes are cached"
    calls.clear()
    greedy = auto(3.0, sampling=SamplingParams())
    assert [c["sampled_tree"] for c in calls] == [False] and greedy.sampled_tree is False


def test_at_t1_both_trees_are_sized_and_the_faster_kept(both_trees):
    _check_tree_choice(*both_trees)


def test_the_second_tree_keeps_half_the_budget_when_the_first_overruns(both_trees, monkeypatch):
    """The first tree's runs may overrun their share (each keeps its least cycles, the chains
    are timed whole): the second tree still gets half of the budget, not what is left (once
    nothing, and its sizes came from 4 cycles a top_k)."""
    auto, calls, _ = both_trees
    clock = iter([0.0, 1000.0])  # the first tree took 1,000 s
    monkeypatch.setattr(sizing.time, "perf_counter", lambda: next(clock, 1000.0))
    auto(3.0)
    assert [c["budget_s"] for c in calls] == [sizing.SIZING_SECONDS / 2] * 2


def test_tree_choice_checker_catches_a_sizing_that_keeps_the_first_tree(both_trees, monkeypatch):
    """Negative control: auto_size with its choice planted to keep the first (top-k) tree."""
    monkeypatch.setattr(sizing, "_faster", lambda options: options[0])
    with pytest.raises(AssertionError, match="kept the slower tree"):
        _check_tree_choice(*both_trees)


def test_the_drafters_calibration_is_measured_and_keys_the_cache(both_trees):
    """Each tree is measured ranking by its own setting's map (a head's maps give each its
    own); another map is measured again, the same map read back; the file names the map."""
    from minieagle.calibration import HeadCalibration

    auto, calls, folder = both_trees
    first = Calibration([0.0, 1.0], [0.2, 0.9], "T=1")
    maps = HeadCalibration("h", {"T=1": first, "T=1,sampled": Calibration([0.0, 1.0], [0.1, 0.6],
                           "T=1,sampled")}, {"T=1": True, "T=1,sampled": True})  # fmt: skip
    auto(3.0, calibration=maps)
    assert [c["calibration"] for c in calls] == [first, maps.maps["T=1,sampled"]]
    files = {json.loads(f.read_text())["calibration"] for f in folder.glob("*.json")}
    assert files == {sizing.calibration_id(first), sizing.calibration_id(maps.maps["T=1,sampled"])}
    auto(3.0, calibration=maps)
    assert len(calls) == 2, "the same maps measured again"
    unused = HeadCalibration("h", maps.maps, {"T=1": False, "T=1,sampled": True})
    chosen = auto(3.0, calibration=unused)
    assert len(calls) == 3 and calls[-1]["calibration"] is None and not calls[-1]["sampled_tree"]
    assert chosen.calibrated, "the sampled tree (chosen) ranks by its map"
    assert sizing.calibration_id(None) == "none" != sizing.calibration_id(first)


def test_eagle2_draws_the_tree_the_sizer_chose():
    """sampled_tree=None takes the sizer's tree at T > 0 (proposals carried: sampled), a
    forced option wins over it, and greedy decoding never samples."""
    for option, sized, sampling, want in (
        (None, True, HOT, True), (None, False, HOT, False), (False, True, HOT, False),
        (True, False, HOT, True), (None, True, SamplingParams(), False),
    ):  # fmt: skip
        sizes = _sizing()
        sizes.sampled_tree = sized
        drafter = Eagle2Drafter(
            TARGET, CONFIG, HEAD, HEAD_CFG, depth=None, top_k=None, total_tokens=None,
            sampled_tree=option, sizer=_sizer(sizes),
        )  # fmt: skip
        trees = []
        original = drafter.propose

        def propose(root, rng, max_nodes, original=original, trees=trees):
            trees.append(original(root, rng, max_nodes))
            return trees[-1]

        drafter.propose = propose
        run(PROMPT, drafter, sampling=sampling, n=6)
        assert drafter.tree_sampled is want, (option, sized, sampling)
        carried = any(p is not None for t in trees for p in t.proposals)
        assert carried is want


# ---------------------------------------------------------------------------- drafters


def _sizer(sizes: Sizing, seen=None):
    def sizer(sampling):
        if seen is not None:
            seen.append(sampling)
        return sizes

    return sizer


def _sizing(depth=2, top_k=2, total_tokens=5, chain=2) -> Sizing:
    return Sizing(depth, top_k, total_tokens, chain, 2.0, 1.5, 1.8, 1.3, "T=0")


NO_TREE = Sizing(0, 0, 1, 0, 1.0, 1.0, 1.0, 1.0, "T=0")


def _sized_eagle2(sizes, seen=None, **fixed):
    args = {"depth": None, "top_k": None, "total_tokens": None} | fixed
    return Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, **args, sizer=_sizer(sizes, seen))


def test_eagle2_takes_the_sizers_sizes_at_begin_and_stays_lossless():
    """The sizer is asked at begin with the decoding's sampling; the drafter then grows the
    sized tree (every tree at most total_tokens nodes, the full size reached) and its greedy
    output is the greedy reference."""
    seen = []
    sizes = _sizing(depth=2, top_k=2, total_tokens=5)
    drafter = _sized_eagle2(sizes, seen)
    assert (drafter.depth, drafter.top_k, drafter.total_tokens, drafter.sizing) == (None,) * 4
    result = run(PROMPT, drafter, n=12)
    assert seen == [SamplingParams()]
    assert drafter.sizing is sizes
    assert (drafter.depth, drafter.top_k, drafter.total_tokens) == (2, 2, 5)
    assert max(result.tree_sizes) == 5 and all(1 < s <= 5 for s in result.tree_sizes)
    assert result.tokens == greedy_reference(TARGET, CONFIG, PROMPT, 12)
    fixed = _eagle2(depth=2, top_k=2, total_tokens=5)
    assert run(PROMPT, fixed, n=12).tree_sizes == result.tree_sizes  # same trees as fixed sizes
    hot = SamplingParams(temperature=1.0)
    run(PROMPT, _sized_eagle2(sizes, seen), sampling=hot, n=4)
    assert seen[-1] == hot


def test_eagle2_sized_to_draft_nothing_is_vanilla_decoding():
    """total_tokens = 1 (depth = top_k = 0): one target forward per token, tau 1, bare-root
    trees, the output of vanilla decoding. Negative control: a real tree needs fewer forwards,
    so the forward count does tell the two apart."""
    n = 12
    result = run(PROMPT, _sized_eagle2(NO_TREE), n=n)
    assert result.target_forwards == n and result.tau == 1.0
    assert result.tree_sizes == [1] * n and result.accepted_per_cycle == [0] * n
    assert (
        result.tokens
        == run(PROMPT, None, n=n).tokens
        == greedy_reference(TARGET, CONFIG, PROMPT, n)
    )
    assert run(PROMPT, _sized_eagle2(_sizing()), n=n).target_forwards < n


def test_eagle1_auto_chain_drafts_the_sized_chain():
    """choices="auto" with a sizer: chain = 2 drafts a 2-draft chain every cycle (3 nodes) and
    stays the greedy reference; chain = 0 drafts nothing. Negative control: chain = 3 gives
    4-node trees, so the size check distinguishes chain lengths."""
    n = 12
    reference = greedy_reference(TARGET, CONFIG, PROMPT, n)
    seen = []
    drafter = Eagle1Drafter(
        TARGET, CONFIG, HEAD, HEAD_CFG, choices="auto", sizer=_sizer(_sizing(chain=2), seen)
    )
    result = run(PROMPT, drafter, n=n)
    assert seen == [SamplingParams()] and drafter.sizing.chain == 2
    assert set(result.tree_sizes) == {3} and result.drafted_depth_per_cycle[0] == 2
    assert result.tokens == reference
    three = Eagle1Drafter(
        TARGET, CONFIG, HEAD, HEAD_CFG, choices="auto", sizer=_sizer(_sizing(chain=3))
    )
    assert set(run(PROMPT, three, n=n).tree_sizes) == {4}
    none = Eagle1Drafter(
        TARGET, CONFIG, HEAD, HEAD_CFG, choices="auto", sizer=_sizer(_sizing(chain=0))
    )
    result = run(PROMPT, none, n=n)
    assert result.target_forwards == n and result.tree_sizes == [1] * n
    assert result.tokens == reference


def test_inconsistent_sizer_options_are_refused():
    """choices="auto" needs a sizer and a sizer needs choices="auto"; sizing refuses a fixed
    top_k above the largest tree it considers (boundary accepted), and a sized EAGLE-2 drafter
    one above a fixed total_tokens - 1."""
    with pytest.raises(InvalidInputError, match="go together"):
        Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="auto")
    with pytest.raises(InvalidInputError, match="go together"):
        Eagle1Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, choices="chain:2", sizer=_sizer(_sizing()))
    largest = max(sizing.TOTAL_TOKENS)
    with pytest.raises(InvalidInputError, match="exceeds total_tokens - 1"):
        sizing.check_fixed_sizes(top_k=largest)
    sizing.check_fixed_sizes(top_k=largest - 1)
    assert _sized_eagle2(_sizing(), top_k=largest - 1).top_k == largest - 1
    with pytest.raises(InvalidInputError, match="exceeds total_tokens - 1"):
        _sized_eagle2(_sizing(), top_k=5, total_tokens=5)
    with pytest.raises(InvalidInputError):
        _sized_eagle2(_sizing(), depth=0)


def test_path_acceptance_reads_the_depth_where_the_value_says_nothing():
    """Every node scores V = 1 (a sampled tree's first draws), but depth-1 nodes are always on
    the accepted path and depth-2 nodes never: the per-depth maps tell them apart, where a
    single map over all depths (the negative control) cannot; a depth with fewer than
    MIN_RECORDS records falls back to the map over all depths."""
    from minieagle.calibration import fit_calibration

    enough = sizing.PathAcceptance.MIN_RECORDS
    records = [(1.0, True)] * enough + [(1.0, False)] * enough + [(1.0, False)] * 3
    depths = [1] * enough + [2] * enough + [3] * 3
    g = sizing.PathAcceptance(records, depths, "T=1")
    at = g(np.ones(3), np.asarray([1, 2, 3]))
    assert at[0] > 0.9 and at[1] < 0.1
    assert at[2] == pytest.approx(float(g.pooled(np.ones(1))[0]))
    single = fit_calibration(records, setting="T=1")(np.ones(2))
    assert single[0] == single[1]
