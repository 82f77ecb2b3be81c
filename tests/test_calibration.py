"""Calibrated scores for EAGLE-2's dynamic tree (minieagle.calibration), and the sampled tree.

- Pool-adjacent-violators equals the max-min formula of weighted isotonic regression (an
  independent oracle); fitted maps are non-decreasing, within [epsilon, 1], and reproduce the
  acceptance rates of dense data; files round-trip and refuse the wrong setting or head.
- Calibrated pools: rerank always gives a connected tree of the exact size, parents first, and
  it is the top of the calibrated ranking (the guard never fires). Negative controls: a map
  above 1 or a non-monotone map is refused, and each is shown to break what it would break
  (a disconnected top set caught by the connectivity check; an expansion that drafts the wrong
  children).
- The drafter: scores are Σ log c(q) along the path while the recorded confidence stays q; the
  calibration changes the trees; greedy decoding with it is the greedy reference; at T > 0 the
  exact law of the emitted tokens is the target's.
- The sampled tree (`sampled_tree=True`) carries proposals and keeps the exact law, drawing
  only the draws it can use (a prefix per node, fewer than top_k per expanded node); scoring
  the draws by the drawn tokens' own q breaks it (caught by the law check).
- Training prompts come from the train split only, validation prompts from the val split.
- A head's maps (`HeadCalibration`, the file shipped beside a head): they round-trip, refuse
  another head, give a setting's map only where it was recorded as helping; the drafter picks
  the map of the setting it decodes in (negative control: a drafter that keeps the first map
  for every setting is caught); `build_drafter`'s defaults (`tree_options`): the shipped maps
  of a head directory, none for a head given as arrays, the sampled tree at T > 0.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_eagle2 import LAW_CASES, LOGIT_VALUES, _assert_valid_selection, _key
from tiny_eagle import CONFIG, HEAD, HEAD_CFG, LAW_TOLERANCE, TARGET, V
from tiny_eagle import run as _run

from minieagle import dynamic_tree as dt
from minieagle import tree as trees
from minieagle.calibration import (
    HEAD_FILE,
    PRIOR_POINTS,
    Calibration,
    HeadCalibration,
    TemperatureScores,
    _pool_adjacent_violators,
    fit_calibration,
    load_any_calibration,
    load_calibration,
    load_head_calibration,
    save_calibration,
    save_head_calibration,
    shipped_calibration,
    training_prompts,
    validation_prompts,
)
from minieagle.drafters.eagle2 import Eagle2Drafter
from minieagle.drafters.head_drafter import draft_children
from minieagle.errors import InvalidInputError
from minieagle.generate import generate, greedy_reference
from minieagle.sampling import SamplingParams, SeededRandomness, setting_name
from minieagle.testing import generation_law, target_law, total_variation

# A map far from the identity: confidence matters little (the tiny head is nearly one-hot, so
# a map that only reshapes the middle would leave its trees unchanged).
KNOTS = ([0.0, 0.2, 1.0], [0.3, 0.5, 0.6])


def _calibration(sampling=None, sampled_tree=False) -> Calibration:
    setting = setting_name(sampling or SamplingParams(), sampled_tree=sampled_tree)
    return Calibration(*KNOTS, setting)


def _drafter(depth=2, top_k=3, total_tokens=10, cls=Eagle2Drafter, **options):
    return cls(
        TARGET, CONFIG, HEAD, HEAD_CFG, depth=depth, top_k=top_k, total_tokens=total_tokens,
        **options,
    )  # fmt: skip


# ---------------------------------------------------------------------------- fitting


def _isotonic_oracle(y, w) -> np.ndarray:
    """Weighted isotonic regression by the max-min formula: fit_i = max over s <= i of min
    over t >= i of the weighted mean of y[s..t]. O(n^3), obviously right."""
    n = len(y)

    def mean(s, t):
        return np.dot(w[s : t + 1], y[s : t + 1]) / w[s : t + 1].sum()

    return np.array([max(min(mean(s, t) for t in range(i, n)) for s in range(i + 1))
                     for i in range(n)])  # fmt: skip


@settings(max_examples=100)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 0.25]), st.sampled_from([0.5, 1, 3])),
                min_size=1, max_size=12))  # fmt: skip
def test_pool_adjacent_violators_is_isotonic_regression(points):
    y, w = (np.asarray(v, dtype=np.float64) for v in zip(*points, strict=True))
    means, sizes = _pool_adjacent_violators(y, w)
    fit = np.repeat(means, sizes)
    np.testing.assert_allclose(fit, _isotonic_oracle(y, w), rtol=0, atol=1e-12)
    assert (np.diff(means) > 0).all()  # pooled until strictly increasing: one knot per level


@settings(max_examples=100)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=60),
       st.sampled_from([0.0, 1.0, 5.0]))  # fmt: skip
def test_fitted_maps_are_monotone_within_epsilon_and_one(records, prior_weight):
    calibration = fit_calibration(records, setting="T=0", prior_weight=prior_weight)
    grid = np.linspace(-0.1, 1.1, 241)
    values = calibration(grid)
    assert (np.diff(values) >= 0).all()
    assert values.min() >= 1e-3 and values.max() <= 1.0
    assert np.isfinite(calibration.log_acceptance(np.log(np.linspace(1e-12, 1, 50)))).all()
    assert calibration.records == len(records)


def test_the_fit_reproduces_dense_rates_and_pools_violators():
    dense = [(0.1, i < 60) for i in range(100)] + [(0.5, i < 90) for i in range(100)]
    calibration = fit_calibration(dense, setting="T=0", prior_weight=0)
    np.testing.assert_allclose(calibration([0.0, 0.1, 0.3, 0.5, 1.0]), [0.6, 0.6, 0.75, 0.9, 0.9])
    # The prior (acceptance = q at 21 points, weight 1 each) barely moves the knots of 200
    # records; between them, where there are no data, it pulls the map toward the diagonal.
    shrunk = fit_calibration(dense, setting="T=0")
    for q, rate in ((0.1, 0.6), (0.5, 0.9)):
        knot = np.argmin(np.abs(shrunk.confidence - q))
        assert abs(shrunk.confidence[knot] - q) < 0.02
        assert abs(shrunk.acceptance[knot] - rate) < 0.03
    # A violator: more confident, less accepted; the two pool into one level.
    violating = [(0.1, i < 80) for i in range(100)] + [(0.5, i < 40) for i in range(100)]
    pooled = fit_calibration(violating, setting="T=0", prior_weight=0)
    np.testing.assert_allclose(pooled([0.0, 0.3, 1.0]), 0.6)
    # Never accepted: clipped to epsilon, so log c stays finite.
    never = fit_calibration([(0.5, False)] * 10, setting="T=0", prior_weight=0, epsilon=1e-3)
    np.testing.assert_allclose(never([0.0, 1.0]), 1e-3)
    # Sparse data: the prior keeps the map near the diagonal.
    sparse = fit_calibration([(0.9, True)], setting="T=0")
    assert abs(float(sparse(0.5)) - 0.5) < 0.05
    assert len(PRIOR_POINTS) == 21


def test_files_round_trip_and_refuse_the_wrong_setting_or_head(tmp_path):
    calibration = fit_calibration([(0.2, True), (0.4, False)] * 5, setting="T=1", head="abc")
    path = save_calibration(calibration, tmp_path / "c.json")
    document = json.loads(path.read_text())
    assert document["setting"] == "T=1" and document["head"] == "abc"
    assert document["records"] == 10
    loaded = load_calibration(path, setting="T=1", head="abc")
    np.testing.assert_array_equal(loaded.confidence, calibration.confidence)
    np.testing.assert_array_equal(loaded.acceptance, calibration.acceptance)
    with pytest.raises(InvalidInputError, match="fitted for setting 'T=1', not 'T=0'"):
        load_calibration(path, setting="T=0")
    with pytest.raises(InvalidInputError, match="fitted for head 'abc', not 'xyz'"):
        load_calibration(path, head="xyz")
    document["knots"]["acceptance"][-1] = 1.5
    path.write_text(json.dumps(document))
    with pytest.raises(InvalidInputError, match=r"c.json: acceptance values span .* outside"):
        load_calibration(path)
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(InvalidInputError, match="not a minieagle-calibration version 1 or 2"):
        load_calibration(path)


@pytest.mark.parametrize(
    ("knots", "message"),
    [
        (([0.1, 0.5], [0.5, 2.0]), r"acceptance values span \[0.5, 2.0\], outside \(0, 1\]"),
        (([0.1, 0.5], [0.0, 0.5]), r"acceptance values span \[0.0, 0.5\], outside \(0, 1\]"),
        (([0.1, 0.5], [0.9, 0.2]), "acceptance falls from 0.9 to 0.2"),
        (([0.5, 0.1], [0.2, 0.9]), "must increase strictly within"),
        (([0.1, 1.5], [0.2, 0.9]), "must increase strictly within"),
        (([0.1, np.nan], [0.2, 0.9]), "NaN or inf"),
        (([0.1], [0.2, 0.9]), "as many acceptance values"),
    ],
)
def test_bad_maps_are_refused(knots, message):
    with pytest.raises(InvalidInputError, match=message):
        Calibration(*knots, "T=0")


@pytest.mark.parametrize(
    ("records", "kwargs", "message"),
    [
        ([], {}, "no records to fit"),
        ([(1.5, True)], {}, r"record \(confidence=1.5, accepted=1.0\) is not a probability"),
        ([(0.5, 0.3)], {}, "0/1 outcome"),
        ([(0.5, True)], {"epsilon": 0.0}, r"epsilon=0.0 is outside \(0, 1\)"),
        ([(0.5, True)], {"prior_weight": -1.0}, "prior_weight=-1.0 is negative"),
    ],
)
def test_bad_records_are_refused(records, kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        fit_calibration(records, setting="T=0", **kwargs)


def test_setting_names():
    assert setting_name(SamplingParams()) == "T=0"
    assert setting_name(SamplingParams(), sampled_tree=True) == "T=0"  # greedy ignores it
    assert setting_name(SamplingParams(temperature=1.0)) == "T=1"
    assert setting_name(SamplingParams(temperature=0.7, top_k=4, top_p=0.95), sampled_tree=True) \
        == "T=0.7,top_k=4,top_p=0.95,sampled"  # fmt: skip


# ---------------------------------------------------------------------------- calibrated pools


@st.composite
def calibrations(draw):
    """A random valid map; values of exactly 1 make log c = 0 ties between parent and child."""
    size = draw(st.integers(1, 5))
    x = np.unique(draw(st.lists(st.sampled_from(np.linspace(0, 1, 11).tolist()),
                                min_size=size, max_size=size)))  # fmt: skip
    y = np.sort(draw(st.lists(st.sampled_from([1e-3, 0.05, 0.3, 0.7, 1.0, 1.0]),
                              min_size=len(x), max_size=len(x))))  # fmt: skip
    return Calibration(x, y, "T=0")


@st.composite
def calibrated_pools(draw):
    """A pool grown by the real expansion bookkeeping, scored by a random calibration."""
    calibration = draw(calibrations())
    k, vocab, steps = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(0, 3))

    def children_of(rows):
        logits = draw(st.lists(LOGIT_VALUES, min_size=rows * vocab, max_size=rows * vocab))
        tokens, log_q = dt.top_children(dt.log_softmax(np.reshape(logits, (rows, vocab))), k)
        return tokens, log_q, calibration.log_acceptance(log_q)

    pool = dt.add_children(dt.empty_pool(), [-1], *children_of(1))
    frontier = dt.next_frontier(pool, 0, k)
    for _ in range(steps):
        start = len(pool)
        pool = dt.add_children(pool, frontier, *children_of(len(frontier)))
        frontier = dt.next_frontier(pool, start, k)
    return pool, calibration


@settings(deadline=None, max_examples=100)
@given(calibrated_pools(), st.integers(2, 40))
def test_calibrated_rerank_is_a_connected_tree_of_the_top_values(grown, total_tokens):
    pool, calibration = grown
    selected = dt.rerank(pool.scores, pool.parents, total_tokens - 1)
    _assert_valid_selection(pool, selected, total_tokens)  # connected, exact size, parents first
    chosen = set(selected.tolist())
    for a in chosen:  # the top of the calibrated ranking: the guard never fired
        for b in set(range(len(pool))) - chosen:
            assert _key(pool, a) < _key(pool, b)
    for i, parent in enumerate(pool.parents):  # Σ log c(q), never rising along a path
        above = pool.scores[parent] if parent >= 0 else 0.0
        assert pool.scores[i] == above + calibration.log_acceptance(pool.log_q[i]) <= above


def test_a_map_above_one_would_disconnect_the_tree():
    """Negative control: c(q) = 2q (refused by Calibration and add_children) lets a child
    outscore its parent; the top set by value is then disconnected, and the connectivity check
    catches it. rerank's guard still returns a tree, but no longer the best values."""
    with pytest.raises(InvalidInputError, match="outside"):
        Calibration([0.0, 1.0], [1e-3, 2.0], "T=0")
    log_q = np.log([[0.6, 0.4]])
    with pytest.raises(InvalidInputError, match="log_accept holds .* > 0"):
        dt.add_children(dt.empty_pool(), [-1], np.asarray([[0, 1]]), log_q, np.log(2) + log_q)
    # The pool such a map would score: root -> a (q 0.6), b (q 0.4); a -> c (q 0.9).
    log_q = np.log([0.6, 0.4, 0.9])
    parents = np.asarray([-1, -1, 0])
    scores = np.log(2) + log_q
    scores[2] += scores[0]  # 0.77 > a's 0.18: the child outscores its parent
    pool = dt.Pool(np.asarray([3, 4, 5]), parents, scores, log_q)
    top = np.argsort(-scores, kind="stable")[:1]
    with pytest.raises(AssertionError, match="disconnected"):
        _assert_valid_selection(pool, top, 2)
    guarded = dt.rerank(pool.scores, pool.parents, 1)
    _assert_valid_selection(pool, guarded, 2)
    assert guarded.tolist() == [0] != top.tolist()  # the guard fired


def test_a_non_monotone_map_would_draft_the_wrong_children():
    """Negative control: the expansion drafts each node's top-k tokens by q. A map that falls
    (refused by Calibration) would rank an undrafted token above a drafted one."""
    with pytest.raises(InvalidInputError, match="acceptance falls"):
        Calibration([0.2, 0.5], [0.9, 0.2], "T=0")

    def falling(q):
        return np.interp(q, [0.2, 0.5], [0.9, 0.2])

    log_q = np.log([[0.5, 0.3, 0.2]])
    drafted, _ = dt.top_children(log_q, 1)  # token 0, q = 0.5
    assert drafted.tolist() == [[0]]
    assert falling(0.2) > falling(0.3) > falling(0.5)  # token 2 would rank first
    monotone = Calibration([0.2, 0.5], [0.2, 0.9], "T=0")
    order = np.argsort(-monotone(np.exp(log_q[0])), kind="stable")
    assert order[0] == drafted[0, 0]


# ---------------------------------------------------------------------------- the drafter


def test_scores_are_calibrated_and_records_stay_raw():
    calibration = _calibration()
    drafter = _drafter(3, 3, 12, calibration=calibration)
    cycles = []  # (pool, selected) per cycle
    propose = drafter.propose

    def recording(root, rng, max_nodes):
        tree = propose(root, rng, max_nodes)
        cycles.append((drafter.pool, drafter.selected))
        return tree

    drafter.propose = recording
    result = _run([1, 3, 4], drafter, n=10)
    raw, calibrated = set(), set()
    for pool, selected in cycles:
        above = np.where(pool.parents >= 0, pool.scores[pool.parents], 0.0)
        np.testing.assert_array_equal(pool.scores, above + calibration.log_acceptance(pool.log_q))
        raw |= set(np.exp(pool.log_q[selected]).tolist())
        calibrated |= set(calibration(np.exp(pool.log_q[selected])).tolist())
    records = drafter.calibration_records
    assert all(q in raw for q, _ in records)  # the confidence recorded is q, not c(q)
    assert sum(q not in calibrated for q, _ in records) >= len(records) // 2
    assert sum(a for _, a in records) == sum(result.accepted_per_cycle)


def test_the_calibration_changes_the_trees():
    changed = 0
    for prompt in ([1, 3], [4, 0, 5], [2, 2, 2, 2], [5, 1, 0], [0, 4]):
        shapes = []
        for calibration in (None, _calibration()):
            drafter = _drafter(3, 3, 8, calibration=calibration)
            _run(prompt, drafter, n=1)
            shapes.append(drafter.selected.tolist())
        changed += shapes[0] != shapes[1]
    assert changed >= 4


@settings(deadline=None, max_examples=20)
@given(st.lists(st.integers(0, V - 1), min_size=1, max_size=8), st.integers(1, 3),
       st.integers(1, 4), st.integers(2, 16), st.integers(0, 12))  # fmt: skip
def test_greedy_calibrated_eagle2_is_greedy_vanilla(prompt, depth, top_k, total_tokens, n):
    top_k = min(top_k, total_tokens - 1)
    drafter = _drafter(depth, top_k, total_tokens, calibration=_calibration())
    assert _run(prompt, drafter, n=n).tokens == greedy_reference(TARGET, CONFIG, prompt, n)


def _assert_target_law(prompt, make_drafter, sampling, n):
    law, accepted = generation_law(TARGET, CONFIG, prompt, make_drafter, sampling, n)
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, n)) <= LAW_TOLERANCE
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances were walked


@pytest.mark.parametrize(("sampling", "depth", "n", "prompt"), LAW_CASES, ids=str)
def test_calibrated_eagle2_has_the_target_law(sampling, depth, n, prompt):
    calibration = _calibration(sampling)
    _assert_target_law(prompt, lambda: _drafter(depth, 2, 4, calibration=calibration), sampling, n)


def test_the_setting_and_type_are_checked():
    with pytest.raises(InvalidInputError, match="fitted for 'T=0' but this decoding is 'T=1'"):
        _run([1, 3], _drafter(calibration=_calibration()), SamplingParams(temperature=1.0))
    sampled = SamplingParams(temperature=1.0)
    with pytest.raises(InvalidInputError, match="this decoding is 'T=1,sampled'"):
        _run([1, 3], _drafter(calibration=_calibration(sampled), sampled_tree=True), sampled)
    with pytest.raises(InvalidInputError, match="calibration is a function; pass a"):
        _drafter(calibration=lambda q: q)
    with pytest.raises(InvalidInputError, match="sampled_tree=1 must be True, False or None"):
        _drafter(sampled_tree=1)
    asked = []  # a map for no tree of this decoding is refused before any sizing is measured
    open_tree = Eagle2Drafter(TARGET, CONFIG, HEAD, HEAD_CFG, depth=None, top_k=None,
                              total_tokens=None, calibration=_calibration(), sampled_tree=None,
                              sizer=asked.append)  # fmt: skip
    with pytest.raises(InvalidInputError, match="decoding is 'T=1' or 'T=1,sampled'"):
        _run([1, 3], open_tree, sampled)
    assert asked == []


# ---------------------------------------------------------------------------- the sampled tree

# (sampling, depth, top_k, total_tokens, n, prompt): siblings drawn and dropped by reranking
# (first token), a chain of draws over several cycles, both; small enough to enumerate.
SAMPLED_CASES = [
    (SamplingParams(temperature=1.0, top_k=2), 1, 2, 3, 1, [1, 0]),
    (SamplingParams(temperature=2.0, top_k=2), 1, 2, 3, 1, [3, 1]),
    (SamplingParams(temperature=1.0, top_k=2), 2, 1, 3, 2, [1, 3]),
    (SamplingParams(temperature=1.0, top_k=2), 1, 2, 3, 2, [3, 1]),
    # top-p keeps 2 tokens of one expanded node's draft law and 1 of the other's: a level of
    # unequal numbers of draws (`test_a_sampled_level_can_draw_unequal_numbers_per_node`)
    (SamplingParams(temperature=2.0, top_p=0.8), 1, 2, 3, 2, [1, 0]),
]


@pytest.mark.parametrize("calibrated", [False, True], ids=["raw", "calibrated"])
@pytest.mark.parametrize(("sampling", "depth", "top_k", "total", "n", "prompt"), SAMPLED_CASES,
                         ids=str)  # fmt: skip
def test_the_sampled_tree_has_the_target_law(sampling, depth, top_k, total, n, prompt, calibrated):
    calibration = _calibration(sampling, sampled_tree=True) if calibrated else None

    def make():
        return _drafter(depth, top_k, total, sampled_tree=True, calibration=calibration)

    _assert_target_law(prompt, make, sampling, n)


def test_a_sampled_level_can_draw_unequal_numbers_per_node(monkeypatch):
    """The last SAMPLED_CASES case reaches a level whose nodes' processed draft laws keep 2 and
    1 tokens: the level is added node by node, each with its own number of draws (its law is
    checked above)."""
    import minieagle.drafters.eagle2 as eagle2_module

    sampling, depth, top_k, total, _, prompt = SAMPLED_CASES[-1]
    calls = []

    def counting(pool, parents, tokens, *rest):
        calls.append((len(parents), tokens.shape[1]))
        return dt.add_children(pool, parents, tokens, *rest)

    monkeypatch.setattr(eagle2_module, "add_children", counting)
    generate(TARGET, CONFIG, prompt, drafter=_drafter(depth, top_k, total, sampled_tree=True),
             max_new_tokens=1, sampling=sampling, seed=0)  # fmt: skip
    assert calls == [(1, 2), (1, 2), (1, 1)]  # the root's 2 draws; then 2 and 1


class _TokenScored(Eagle2Drafter):
    """Draws every sampled child first and scores each by the drawn token's own log q: which
    draws are kept then depends on the draws themselves, and the verified tokens are biased.
    (The drafter scores before it draws, so this bug cannot be planted through its hooks.)"""

    def _add_level(self, pool, expanded, logits, rng, proposals):
        if proposals is None:
            return super()._add_level(pool, expanded, logits, rng, proposals)
        for parent, row in zip(expanded, logits, strict=True):
            drawn = draft_children(row, self.top_k, self.sampling, rng)
            tokens = np.asarray([[token for token, _ in drawn]])  # [1, m]
            own_log_q = dt.log_softmax(row)[tokens]  # [1, m] the drawn tokens' own log q
            pool = dt.add_children(pool, [parent], tokens, own_log_q, own_log_q)
            proposals += [proposal for _, proposal in drawn]
        return pool


def test_the_law_check_catches_token_dependent_scores_of_draws():
    sampling, depth, top_k, total, n, prompt = SAMPLED_CASES[0]

    def make():
        return _drafter(depth, top_k, total, cls=_TokenScored, sampled_tree=True)

    law, _ = generation_law(TARGET, CONFIG, prompt, make, sampling, n)
    assert total_variation(law, target_law(TARGET, CONFIG, prompt, sampling, n)) > 1e-3


class _CountingRandomness(SeededRandomness):
    def __init__(self, seed):
        super().__init__(seed)
        self.draws = 0

    def draw(self, probs):
        self.draws += 1
        return super().draw(probs)


def test_the_sampled_tree_draws_only_what_it_can_use():
    """Every kept node was drawn (no placeholder reaches the tree), and far fewer draws are
    made than top_k per expanded node (what drawing every child would cost)."""
    depth, top_k, total = 3, 3, 6
    drafter = _drafter(depth, top_k, total, sampled_tree=True)
    trees_seen, expanded = [], []
    original, feed = drafter.propose, drafter._frontier_logits

    def propose(root, rng, max_nodes):
        expanded.append(1)  # the root
        trees_seen.append(original(root, rng, max_nodes))
        return trees_seen[-1]

    def frontier_logits(root, pool, frontier, outputs):
        expanded.append(len(frontier))
        return feed(root, pool, frontier, outputs)

    drafter.propose, drafter._frontier_logits = propose, frontier_logits
    rng = _CountingRandomness(5)
    _run([1, 3, 4], drafter, SamplingParams(temperature=1.0), rng, n=12)
    assert all((tree.tokens >= 0).all() for tree in trees_seen)
    drawing_every_child = top_k * sum(expanded)
    verifier_draws = len(trees_seen)  # at most one correction or bonus draw per cycle
    assert rng.draws - verifier_draws <= 0.6 * drawing_every_child, (rng.draws, drawing_every_child)


def test_the_sampled_tree_carries_proposals_and_greedy_ignores_it():
    sampling = SamplingParams(temperature=1.0)
    drafter = _drafter(3, 3, 12, sampled_tree=True)
    recorder = []
    original = drafter.propose

    def propose(root, rng, max_nodes):
        recorder.append(original(root, rng, max_nodes))
        return recorder[-1]

    drafter.propose = propose
    _run([1, 3, 4], drafter, sampling, SeededRandomness(3), n=12)
    for tree in recorder:
        for kids in trees.children(tree):
            tried = np.ones(V)
            for child in kids:  # draw j's proposal: q without draws 1..j-1, all of them kept
                q = tree.proposals[child]
                first = tree.proposals[kids[0]] * tried
                np.testing.assert_allclose(q, first / first.sum(), rtol=0, atol=1e-15)
                assert q[tree.tokens[child]] > 0
                tried[tree.tokens[child]] = 0
    assert any(len(kids) > 1 for tree in recorder for kids in trees.children(tree))
    greedy = [_drafter(3, 3, 12, sampled_tree=flag) for flag in (False, True)]
    runs = [_run([1, 3, 4], d, n=12) for d in greedy]
    assert runs[0].tokens == runs[1].tokens
    assert greedy[0].selected.tolist() == greedy[1].selected.tolist()


# ---------------------------------------------------------------------------- training prompts


def test_training_prompts_come_from_the_train_split_only():
    from minieagle.checkpoint import load_checkpoint
    from minieagle.cli import DEFAULT_MODEL
    from minieagle.data import load_split

    _, _, tokenizer = load_checkpoint(DEFAULT_MODEL)
    for corpus in ("prose", "code"):
        prompts = training_prompts(tokenizer, corpus, 5, length=24, seed=7)
        assert prompts == training_prompts(tokenizer, corpus, 5, length=24, seed=7)
        assert prompts != training_prompts(tokenizer, corpus, 5, length=24, seed=8)
        train = "\n".join(d.text for d in load_split(corpus, "train"))
        test = "\n".join(d.text for d in load_split(corpus, "test"))
        for kind, ids in prompts:
            assert kind == corpus and len(ids) == 24 and ids[0] == tokenizer.bos_id
            text = tokenizer.decode(ids[1:])[:60]
            assert text in train and text not in test
    with pytest.raises(InvalidInputError, match="count=100000 exceeds the"):
        training_prompts(tokenizer, "prose", 100_000)
    with pytest.raises(InvalidInputError, match="length=1 must be an integer >= 2"):
        training_prompts(tokenizer, "prose", 2, length=1)


class _ChatTokenizer:
    """The small target's tokenizer with a chat template, as an instruct model's has."""

    chat_template = "{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}"

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def test_an_instruct_target_is_tuned_on_chat_requests():
    """With a chat template, the tuning prompts are requests about the same windows rendered
    with it (what an instruct model is used with); without one, the windows themselves."""
    from minieagle.calibration import CHAT_PASSAGE_TOKENS, tuning_prompts, tuning_template
    from minieagle.checkpoint import load_checkpoint
    from minieagle.cli import DEFAULT_MODEL
    from minieagle.distill import CHAT_REQUESTS

    _, _, tokenizer = load_checkpoint(DEFAULT_MODEL)
    chat = _ChatTokenizer(tokenizer)
    assert tuning_template(tokenizer) is None and tuning_template(chat) == chat.chat_template
    plain = tuning_prompts(tokenizer, "train", 3)
    assert plain == training_prompts(tokenizer, "prose", 3, seed=0) + training_prompts(
        tokenizer, "code", 3, seed=1
    )
    requests = tuning_prompts(chat, "train", 3)
    windows = training_prompts(tokenizer, "prose", 3, CHAT_PASSAGE_TOKENS, 0) + (
        training_prompts(tokenizer, "code", 3, CHAT_PASSAGE_TOKENS, 1)
    )  # <bos> and all but the last of the passages' tokens
    leads = [r.split("{passage}")[0].strip()[:20] for r in CHAT_REQUESTS]
    for (kind, ids), (window_kind, window) in zip(requests, windows, strict=True):  # the same
        text = tokenizer.decode(ids)
        assert kind == window_kind and text.startswith("USER: ") and text.endswith("ASSISTANT:")
        assert tokenizer.decode(window[1:]).strip() in text
        assert any(lead in text for lead in leads)
    assert tuning_prompts(chat, "val", 2) != tuning_prompts(tokenizer, "val", 2)


def test_validation_prompts_come_from_the_val_split_only():
    from minieagle.checkpoint import load_checkpoint
    from minieagle.cli import DEFAULT_MODEL
    from minieagle.data import load_split

    _, _, tokenizer = load_checkpoint(DEFAULT_MODEL)
    for corpus in ("prose", "code"):
        prompts = validation_prompts(tokenizer, corpus, 4, length=24, seed=0)
        texts = {split: "\n".join(d.text for d in load_split(corpus, split))
                 for split in ("train", "val", "test")}  # fmt: skip
        for kind, ids in prompts:
            assert kind == corpus and len(ids) == 24 and ids[0] == tokenizer.bos_id
            text = tokenizer.decode(ids[1:])[:60]
            assert text in texts["val"] and text not in texts["test"]
        # boilerplate lines recur across documents, so not every window is absent from train
        assert sum(tokenizer.decode(ids[1:])[:60] in texts["train"] for _, ids in prompts) < 4
    with pytest.raises(InvalidInputError, match="prose val documents"):
        validation_prompts(tokenizer, "prose", 100_000)


# ---------------------------------------------------------------------------- a head's maps

T0, T1 = SamplingParams(), SamplingParams(temperature=1.0)
HEAD_KNOTS = {
    "T=0": KNOTS,
    "T=1": ([0.0, 1.0], [0.1, 0.9]),
    "T=1,sampled": ([0.0, 1.0], [0.2, 0.7]),
}


def _head_maps(use=None, head="abc") -> HeadCalibration:
    use = use or {"T=0": True, "T=1": False, "T=1,sampled": True}
    maps = {s: Calibration(*k, s, records=7, head=head) for s, k in HEAD_KNOTS.items()}
    validation = {s: {"tau_raw": 2.0, "tau_calibrated": 2.5 if use[s] else 1.5} for s in maps}
    return HeadCalibration(head, maps, use, validation, {"command": "minieagle calibrate"})


def _check_head_maps(maps: HeadCalibration) -> None:
    """for_setting gives each setting's own map where it is used, None elsewhere."""
    for setting, fitted in maps.maps.items():
        got = maps.for_setting(setting)
        if maps.use[setting]:
            assert got is not None and got.setting == setting, f"{setting}: {got}"
            assert np.array_equal(got.confidence, fitted.confidence)
        else:
            assert got is None, f"{setting}: a map that did not help is used"
    assert maps.for_setting("T=0.7") is None


def test_head_maps_round_trip_and_refuse_another_head(tmp_path):
    maps = _head_maps()
    path = save_head_calibration(maps, tmp_path / HEAD_FILE)
    loaded = load_head_calibration(path, head="abc")
    _check_head_maps(loaded)
    assert loaded.use == maps.use and loaded.validation == maps.validation
    assert loaded.provenance == {"command": "minieagle calibrate"}
    assert isinstance(load_any_calibration(path), HeadCalibration)
    single = save_calibration(_calibration(), tmp_path / "one.json")
    assert isinstance(load_any_calibration(single), Calibration)
    with pytest.raises(InvalidInputError, match="fitted for head 'abc', not 'xyz'; refit"):
        load_head_calibration(path, head="xyz")
    with pytest.raises(InvalidInputError, match="use=.* must say True or False"):
        HeadCalibration("abc", maps.maps, {"T=0": True})
    with pytest.raises(InvalidInputError, match=r"maps\[.T=1.\] must be a Calibration or Temp"):
        HeadCalibration("abc", {"T=1": _calibration()}, {"T=1": True})


def test_head_maps_checker_catches_maps_used_where_they_did_not_help():
    """Negative control: a for_setting that ignores `use` (or mixes settings up) is caught."""

    class IgnoresUse(HeadCalibration):
        def for_setting(self, setting):
            return self.maps.get(setting)

    class FirstMapAlways(HeadCalibration):
        def for_setting(self, setting):
            return next(iter(self.maps.values()))

    fine = _head_maps()
    for broken in (IgnoresUse, FirstMapAlways):
        with pytest.raises(AssertionError):
            _check_head_maps(broken(fine.head, fine.maps, fine.use))


def _fake_head_dir(path, payload=b"weights"):
    """A directory whose model.safetensors `target_fingerprint` can read."""
    path.mkdir()
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)],
                               "data_offsets": [0, len(payload)]}}).encode()  # fmt: skip
    (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + payload)
    return path


def test_shipped_maps_apply_only_to_the_head_they_were_fitted_for(tmp_path):
    from minieagle.checkpoint import target_fingerprint

    head_dir = _fake_head_dir(tmp_path / "head")
    assert shipped_calibration(head_dir) is None  # no file: raw scores
    save_head_calibration(_head_maps(head=target_fingerprint(head_dir)), head_dir / HEAD_FILE)
    _check_head_maps(shipped_calibration(head_dir))
    other = _fake_head_dir(tmp_path / "retrained", b"other weights")
    save_head_calibration(_head_maps(head=target_fingerprint(head_dir)), other / HEAD_FILE)
    with pytest.warns(UserWarning, match="its maps are not used .* minieagle calibrate --head"):
        assert shipped_calibration(other) is None


def test_the_drafter_ranks_by_the_map_of_the_setting_it_decodes_in():
    """A head's maps: at T = 0 the drafter's trees are those of the T = 0 map alone; at T = 1
    with the top-k tree (map not used) those of raw scores; with the sampled tree its map."""
    maps = _head_maps()
    cases = ((T0, False, maps.maps["T=0"]), (T1, False, None), (T1, True, maps.maps["T=1,sampled"]))
    for sampling, sampled, expected in cases:
        pools = []
        for calibration in (maps, expected):
            drafter = _drafter(3, 3, 8, calibration=calibration, sampled_tree=sampled)
            _run([1, 3], drafter, sampling, SeededRandomness(1), n=4)
            pools.append(drafter.pool.scores)
            assert drafter.tree_sampled == sampled
        assert drafter.active_calibration is expected
        np.testing.assert_array_equal(pools[0], pools[1])


def test_build_drafter_defaults_come_from_one_place(tmp_path):
    """tree_options, which build_drafter and the CLI share: "auto" reads the head directory's
    maps (none for a head given as arrays), "none" turns them off, a single map fixes the tree
    it was fitted for; without a sizer the sampled tree is drawn at T > 0 only."""
    from minieagle.checkpoint import target_fingerprint
    from minieagle.drafters import build_drafter, tree_options

    head_dir = _fake_head_dir(tmp_path / "head")
    maps = _head_maps(head=target_fingerprint(head_dir))
    save_head_calibration(maps, head_dir / HEAD_FILE)
    chosen, sampled = tree_options("auto", None, head_dir)
    _check_head_maps(chosen)
    assert sampled is None
    assert tree_options("auto", None, None) == (None, None)
    assert tree_options("none", None, head_dir) == (None, None)
    assert tree_options(None, True, head_dir) == (None, True)
    path = save_calibration(_calibration(T1, sampled_tree=True), tmp_path / "sampled.json")
    assert tree_options(path, None, None)[1] is True
    path = save_calibration(_calibration(T1), tmp_path / "topk.json")
    assert tree_options(path, None, None)[1] is False
    with pytest.raises(InvalidInputError, match="fitted for head ''"):
        tree_options(path, None, head_dir)  # a map of unknown provenance, another head's
    for sampling, want in ((T0, False), (T1, True)):
        drafter = build_drafter("eagle2", target=(TARGET, CONFIG), head=(HEAD, HEAD_CFG),
                                depth=2, top_k=2, total_tokens=5)  # fmt: skip
        _run([1, 3], drafter, sampling, SeededRandomness(0), n=3)
        assert drafter.tree_sampled is want and drafter.active_calibration is None


# ---------------------------------------------------------------------------- temperature scores


def test_temperature_scores_are_the_log_softmax_of_the_scaled_logits():
    logits = np.array([[2.0, 0.5, -1.0, 0.0, -np.inf], [0.1, 0.2, 3.0, -np.inf, 1.0]])
    tokens = np.array([[0, 3], [2, 4]])
    for t in (0.25, 0.5, 1.0, 2.0):
        got = TemperatureScores(t, "T=0").log_acceptance_of_logits(logits, tokens)
        want = np.take_along_axis(dt.log_softmax(logits / t), tokens, axis=-1)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert np.isfinite(got).all() and (got <= 0).all()
    # t = 1 is raw scores: the log q the tree ranks by without a map
    raw_tokens, raw_log_q = dt.top_children_of_logits(logits, 2)
    one = TemperatureScores(1.0, "T=0").log_acceptance_of_logits(logits, raw_tokens)
    np.testing.assert_allclose(one, raw_log_q, rtol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0, "setting": "T=0"}, "finite number > 0"),
        ({"temperature": -1.0, "setting": "T=0"}, "finite number > 0"),
        ({"temperature": float("nan"), "setting": "T=0"}, "finite number > 0"),
        ({"temperature": True, "setting": "T=0"}, "finite number > 0"),
        ({"temperature": 0.5, "setting": ""}, "must name the sampling setting"),
        ({"temperature": 0.5, "setting": "T=1,sampled"}, "rank a top-k tree's children"),
    ],
)
def test_bad_temperature_scores_are_refused(kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        TemperatureScores(**kwargs)


def _trees_changed_by(scores) -> int:
    """On how many of five prompts a drafter ranking by `scores` drafts another first tree than
    one ranking by raw scores."""
    changed = 0
    for prompt in ([1, 3], [4, 0, 5], [2, 2, 2, 2], [5, 1, 0], [0, 4]):
        shapes = []
        for calibration in (None, scores):
            drafter = _drafter(3, 3, 8, calibration=calibration)
            _run(prompt, drafter, n=1)
            shapes.append(drafter.selected.tolist())
        changed += shapes[0] != shapes[1]
    return changed


def test_the_drafter_ranks_by_temperature_scores():
    """A temperature drafts other trees than raw scores (the tiny head is nearly one-hot, so a
    flattening one: t = 3), and the drafter reports the scores it used. Negative control: t = 1
    is raw scores, which is what a drafter ignoring the temperature would draft, and the count
    then stays 0."""
    scores = TemperatureScores(3.0, "T=0")
    assert _trees_changed_by(scores) >= 3
    assert _trees_changed_by(TemperatureScores(1.0, "T=0")) == 0
    drafter = _drafter(2, 3, 8, calibration=scores)
    _run([1, 3], drafter, n=1)
    assert drafter.active_calibration is scores
    assert drafter.decide(SamplingParams())["calibration"] == "T=0"


@settings(deadline=None, max_examples=20)
@given(st.lists(st.integers(0, V - 1), min_size=1, max_size=8), st.integers(1, 3),
       st.integers(1, 4), st.integers(2, 16), st.integers(0, 12),
       st.sampled_from([0.3, 2.0]))  # fmt: skip
def test_greedy_eagle2_with_temperature_scores_is_greedy_vanilla(prompt, depth, top_k, total, n, t):
    top_k = min(top_k, total - 1)
    drafter = _drafter(depth, top_k, total, calibration=TemperatureScores(t, "T=0"))
    assert _run(prompt, drafter, n=n).tokens == greedy_reference(TARGET, CONFIG, prompt, n)


@pytest.mark.parametrize(("sampling", "depth", "n", "prompt"), LAW_CASES, ids=str)
def test_eagle2_with_temperature_scores_has_the_target_law(sampling, depth, n, prompt):
    scores = TemperatureScores(0.3, setting_name(sampling))
    _assert_target_law(prompt, lambda: _drafter(depth, 2, 4, calibration=scores), sampling, n)


def test_temperature_scores_refuse_the_sampled_tree_and_round_trip(tmp_path):
    t1 = SamplingParams(temperature=1.0)
    with pytest.raises(InvalidInputError, match="fitted for 'T=1' but this decoding is 'T=1,sa"):
        _run([1, 3], _drafter(calibration=TemperatureScores(0.5, "T=1"), sampled_tree=True), t1)
    scores = TemperatureScores(0.35, "T=0", "abc", {0.25: 4.1, 0.35: 4.3})
    path = save_calibration(scores, tmp_path / "t.json")
    assert json.loads(path.read_text())["version"] == 2
    assert load_calibration(path, setting="T=0", head="abc") == scores
    assert isinstance(load_any_calibration(path), TemperatureScores)
    maps = _head_maps()
    mixed = HeadCalibration(maps.head, {**maps.maps, "T=0": TemperatureScores(0.5, "T=0", "abc")},
                            maps.use, maps.validation)  # fmt: skip
    head_path = save_head_calibration(mixed, tmp_path / HEAD_FILE)
    assert json.loads(head_path.read_text())["version"] == 2
    loaded = load_head_calibration(head_path, head="abc")
    assert loaded.for_setting("T=0") == TemperatureScores(0.5, "T=0", "abc")
    assert loaded.for_setting("T=1,sampled").setting == "T=1,sampled"
    # isotonic maps only: the version 1 file, as before temperature scores existed
    assert json.loads(save_head_calibration(maps, tmp_path / "v1.json").read_text())["version"] == 1
