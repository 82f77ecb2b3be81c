"""Tests for minieagle.sampling: the processed distribution and the randomness interface.

Oracles are independent of the module: a float64 softmax written here, Python's own sort for
"the k largest", exact enumeration of the inverse CDF on a grid of uniforms, and a statistical
check with a bound that fails with probability below 1e-9 (and is shown to catch a broken sampler).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minieagle.sampling import (
    SamplingParams,
    SeededRandomness,
    _inverse_cdf,
    sample_token,
    target_distribution,
)

_SETTINGS = settings(deadline=None, max_examples=200)


def _softmax(x: np.ndarray) -> np.ndarray:
    """The float64 oracle: exp(x - max) / sum."""
    e = np.exp(x - np.max(x))
    return e / e.sum()


def _logits(bound: float = 20.0, max_size: int = 12):
    """Logit vectors [V], 1 <= V <= max_size, with frequent exact ties (small integers)."""
    element = st.floats(-bound, bound) | st.integers(-3, 3).map(float)
    return st.integers(1, max_size).flatmap(lambda v: hnp.arrays(np.float64, v, elements=element))


# Temperatures in [0.1, 10] with logits in [-20, 20] keep every exp((x - max) / T) >= exp(-400) > 0,
# so the support of the output is exactly the kept set.
_temperatures = st.floats(0.1, 10.0)
_top_p = st.just(1.0) | st.floats(0.0, 1.0, exclude_min=True)
_params = st.builds(
    SamplingParams,
    temperature=st.just(0.0) | _temperatures,
    top_k=st.integers(0, 14),
    top_p=_top_p,
)


def _one_hot(index: int, size: int) -> np.ndarray:
    out = np.zeros(size)
    out[index] = 1.0
    return out


# --- target_distribution -------------------------------------------------------------------------


@_SETTINGS
@given(logits=_logits(), params=_params)
def test_distribution_is_a_probability_vector(logits, params):
    probs = target_distribution(logits, params)
    assert isinstance(probs, np.ndarray) and probs.dtype == np.float64
    assert probs.shape == logits.shape
    assert np.all(probs >= 0)
    assert abs(probs.sum() - 1) <= 1e-12


@_SETTINGS
@given(logits=_logits(), params=_params)
def test_support_is_the_highest_logits_with_renormalised_softmax_on_it(logits, params):
    probs = target_distribution(logits, params)
    kept = probs > 0
    if kept.all():
        dropped_max = -np.inf
    else:
        dropped_max = logits[~kept].max()
    assert logits[kept].min() >= dropped_max
    if not params.greedy:
        expected = _softmax(logits[kept] / params.temperature)
        np.testing.assert_allclose(probs[kept], expected, rtol=1e-9, atol=1e-15)


@_SETTINGS
@given(logits=_logits(), temperature=_temperatures, top_k=st.integers(1, 14), top_p=_top_p)
def test_top_k_one_is_greedy(logits, temperature, top_k, top_p):
    greedy = target_distribution(logits, SamplingParams())
    assert np.array_equal(greedy, _one_hot(int(np.argmax(logits)), logits.size))
    top1 = target_distribution(logits, SamplingParams(temperature, top_k=1, top_p=top_p))
    assert np.array_equal(top1, greedy)


@_SETTINGS
@given(logits=_logits())
def test_temperature_to_zero_is_greedy(logits):
    ranked = np.sort(logits)
    assume(logits.size > 1 and ranked[-1] > ranked[-2])  # a unique argmax
    # Every non-max weight is exp(-gap / T) <= exp(-800) == 0.0 in float64: an exact one-hot.
    temperature = (ranked[-1] - ranked[-2]) / 800
    assume(temperature > 0)
    probs = target_distribution(logits, SamplingParams(temperature=temperature))
    assert np.array_equal(probs, target_distribution(logits, SamplingParams()))


@_SETTINGS
@given(logits=_logits())
def test_plain_settings_are_softmax(logits):
    probs = target_distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0))
    np.testing.assert_allclose(probs, _softmax(logits), rtol=1e-12, atol=1e-300)


@_SETTINGS
@given(logits=_logits(), temperature=st.floats(0.05, 20.0))
def test_temperature_scales_logits(logits, temperature):
    probs = target_distribution(logits, SamplingParams(temperature=temperature))
    np.testing.assert_allclose(probs, _softmax(logits / temperature), rtol=1e-9, atol=1e-300)


@_SETTINGS
@given(logits=_logits(), temperature=_temperatures, data=st.data())
def test_top_k_keeps_exactly_the_k_highest(logits, temperature, data):
    k = data.draw(st.integers(1, logits.size), label="top_k")
    probs = target_distribution(logits, SamplingParams(temperature, top_k=k))
    by_rank = sorted(range(logits.size), key=lambda i: (-logits[i], i))  # ties: lowest id first
    assert set(np.flatnonzero(probs)) == set(by_rank[:k])


@_SETTINGS
@given(logits=_logits(), temperature=_temperatures, top_k=st.integers(0, 14), top_p=_top_p)
@example(logits=np.zeros(4), temperature=1.0, top_k=0, top_p=0.5)  # ties: exactly 2 of 4 needed
def test_top_p_keeps_the_minimal_most_probable_set(logits, temperature, top_k, top_p):
    before = target_distribution(logits, SamplingParams(temperature, top_k=top_k))  # top-p off
    probs = target_distribution(logits, SamplingParams(temperature, top_k=top_k, top_p=top_p))
    kept = probs > 0
    mass = before[kept].sum()
    assert mass >= top_p - 1e-12
    assert mass - before[kept].min() < top_p + 1e-12  # dropping the smallest goes below top_p
    if not kept.all():
        assert before[kept].min() >= before[~kept].max()
    np.testing.assert_allclose(probs[kept], before[kept] / mass, rtol=1e-12)


@pytest.mark.parametrize("top_p, kept", [(0.25, 1), (0.5, 2), (0.75, 3), (0.76, 4), (1.0, 4)])
def test_top_p_stops_at_the_first_prefix_reaching_it(top_p, kept):
    # Four equal logits: the prefix masses 0.25, 0.5, 0.75, 1 are exact, so a mass equal to top_p
    # already suffices and no tolerance can hide an extra token.
    probs = target_distribution(np.zeros(4), SamplingParams(1.0, top_p=top_p))
    np.testing.assert_array_equal(probs, [1 / kept] * kept + [0.0] * (4 - kept))


def test_top_k_is_applied_before_top_p():
    logits = np.log([0.5, 0.3, 0.2])
    probs = target_distribution(logits, SamplingParams(1.0, top_k=2, top_p=0.6))
    # top-k first: [0.625, 0.375, 0] and 0.625 >= 0.6 keeps one token. The other order (top-p on
    # the full distribution, then top-k) would give [0.625, 0.375, 0].
    np.testing.assert_allclose(probs, [1.0, 0.0, 0.0])


@_SETTINGS
@given(
    grid=st.integers(1, 12).flatmap(
        lambda v: hnp.arrays(np.int64, v, elements=st.integers(-160, 160))
    ),
    shift=st.integers(-800, 800),
    params=_params,
)
def test_adding_a_constant_to_logits_changes_nothing(grid, shift, params):
    # Logits on a grid of 1/8 make x + c exact, so the result must be identical, not just close
    # (off the grid, x + c can round two distinct logits into a tie and move the argmax).
    logits = grid / 8.0
    shifted = target_distribution(logits + shift / 8.0, params)
    assert np.array_equal(shifted, target_distribution(logits, params))


def test_top_k_larger_than_vocab_keeps_everything():
    logits = np.array([0.0, 1.0, 2.0])
    wide = target_distribution(logits, SamplingParams(1.0, top_k=50))
    np.testing.assert_allclose(wide, _softmax(logits), rtol=1e-12)


def test_extreme_logits_do_not_overflow():
    logits = np.array([-1.7e308, 0.0, 1.7e308])
    for temperature in (1e-300, 1.0, 1e300):
        probs = target_distribution(logits, SamplingParams(temperature))
        assert np.all(np.isfinite(probs)) and abs(probs.sum() - 1) < 1e-12


class _FakeDeviceArray:
    """Behaves like a CuPy array: `.get()` copies to the host, implicit conversion raises."""

    def __init__(self, data):
        self._data = np.asarray(data, dtype=np.float32)
        self.get_calls = 0

    def get(self):
        self.get_calls += 1
        return self._data.copy()

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed; use .get()")


def test_device_logits_cross_to_the_host_explicitly():
    host = np.array([0.5, -1.0, 2.0, 2.0], dtype=np.float32)
    device = _FakeDeviceArray(host)
    params = SamplingParams(0.7, top_k=3, top_p=0.9)
    probs = target_distribution(device, params)
    assert device.get_calls == 1
    assert probs.dtype == np.float64
    assert np.array_equal(probs, target_distribution(host, params))


@pytest.mark.gpu
def test_cupy_logits_give_the_numpy_distribution():
    cupy = pytest.importorskip("cupy")
    logits = np.random.default_rng(0).normal(size=64).astype(np.float32)
    params = SamplingParams(0.8, top_k=20, top_p=0.9)
    expected = target_distribution(logits, params)
    assert np.array_equal(target_distribution(cupy.asarray(logits), params), expected)
    tokens = [sample_token(cupy.asarray(logits), params, SeededRandomness(s)) for s in range(5)]
    assert tokens == [sample_token(logits, params, SeededRandomness(s)) for s in range(5)]


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"top_p": 0.0}, ["top_p=0.0", "(0, 1]", "such as 0.9"]),
        ({"top_p": 1.5}, ["top_p=1.5 is outside (0, 1]; pass a probability such as 0.9"]),
        ({"top_p": math.nan}, ["top_p=nan", "(0, 1]"]),
        ({"temperature": -1}, ["temperature=-1 is negative; pass 0 for greedy", "such as 0.7"]),
        ({"temperature": math.nan}, ["temperature=nan", "pass 0 for greedy"]),
        ({"temperature": math.inf}, ["temperature=inf", "not finite", "pass 0 for greedy"]),
        ({"top_k": -1}, ["top_k=-1 is negative", "pass 0 to turn top-k off"]),
        ({"top_k": 2.5}, ["top_k=2.5 is not an integer"]),
    ],
)
def test_invalid_params_are_rejected_with_a_fix(kwargs, words):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(0.7, top_k=5, top_p=0.9)])
def test_non_finite_logits_are_rejected_with_their_count(params):
    logits = np.array([0.0, np.nan, 1.0, np.inf, -np.inf, 2.0])
    with pytest.raises(ValueError, match=r"3 non-finite value\(s\) \(NaN or inf\) among V=6"):
        target_distribution(logits, params)


def test_logits_must_be_one_vector():
    with pytest.raises(ValueError, match=r"shape \[V\]; got shape \(2, 3\)"):
        target_distribution(np.zeros((2, 3)), SamplingParams())
    with pytest.raises(ValueError, match=r"got shape \(0,\)"):
        target_distribution(np.zeros(0), SamplingParams())


# --- sample_token --------------------------------------------------------------------------------


class _NoRandomness:
    def coin(self, p_true):
        raise AssertionError("greedy decoding must not consume randomness")

    def draw(self, probs):
        raise AssertionError("greedy decoding must not consume randomness")


class _RecordingRandomness:
    def __init__(self, answer: int):
        self.answer = answer
        self.seen = []

    def coin(self, p_true):
        raise AssertionError("sampling a token needs no coin")

    def draw(self, probs):
        self.seen.append(probs)
        return self.answer


@_SETTINGS
@given(logits=_logits(), params=_params)
def test_sample_token_draws_from_target_distribution(logits, params):
    probs = target_distribution(logits, params)
    if params.greedy:
        assert sample_token(logits, params, _NoRandomness()) == int(np.argmax(logits))
        return
    rng = _RecordingRandomness(answer=logits.size - 1)
    assert sample_token(logits, params, rng) == logits.size - 1
    assert len(rng.seen) == 1 and np.array_equal(rng.seen[0], probs)


# --- randomness ----------------------------------------------------------------------------------


def _sequence(rng: SeededRandomness, n: int = 50) -> list:
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    return [(rng.coin(0.5), rng.draw(probs)) for _ in range(n)]


def test_same_seed_same_sequence():
    assert _sequence(SeededRandomness(7)) == _sequence(SeededRandomness(7))
    assert _sequence(SeededRandomness(7)) != _sequence(SeededRandomness(8))


_weights_with_zeros = st.integers(1, 12).flatmap(
    lambda v: hnp.arrays(np.float64, v, elements=st.just(0.0) | st.floats(0.0, 1.0))
)


@_SETTINGS
@given(weights=_weights_with_zeros, seed=st.integers(0, 2**32 - 1))
def test_draw_never_returns_a_zero_probability_index(weights, seed):
    assume(weights.sum() > 0)
    probs = weights / weights.sum()
    rng = SeededRandomness(seed)
    assert all(probs[rng.draw(probs)] > 0 for _ in range(20))


@_SETTINGS
@given(weights=_weights_with_zeros, data=st.data())
def test_inverse_cdf_boundaries_never_hit_a_zero_probability_index(weights, data):
    assume(weights.sum() > 0)
    probs = weights / weights.sum()
    cdf = np.cumsum(probs)
    # The uniforms most likely to slip onto an empty step: cdf values, their neighbours, 0 and 1-.
    edges = [0.0, 1.0 - 2.0**-53, *cdf, *np.nextafter(cdf, 0.0), *np.nextafter(cdf, 2.0)]
    edges.append(data.draw(st.floats(0.0, 1.0, exclude_max=True), label="u"))
    for u in edges:
        if 0.0 <= u < 1.0:
            assert probs[_inverse_cdf(probs, u)] > 0


@_SETTINGS
@given(
    counts=st.integers(1, 8).flatmap(lambda v: st.lists(st.integers(0, 16), min_size=v, max_size=v))
)
def test_inverse_cdf_law_is_exact_on_a_grid_of_uniforms(counts):
    # With dyadic probabilities c/16 every cdf step is a multiple of 1/16, so exactly 256 * p_i of
    # the uniforms j/256 land on index i: the law of the draw, enumerated without sampling.
    assume(sum(counts) > 0)
    probs = np.array(counts, dtype=np.float64) / sum(counts)
    assume(np.all(probs * 256 == np.round(probs * 256)))
    hits = np.bincount([_inverse_cdf(probs, j / 256) for j in range(256)], minlength=probs.size)
    assert np.array_equal(hits, probs * 256)


def test_inverse_cdf_of_one_is_the_last_positive_index():
    assert _inverse_cdf(np.array([0.25, 0.75, 0.0, 0.0]), 1.0) == 1
    assert _inverse_cdf(np.array([0.0, 0.25, 0.75]), 0.0) == 1


# McDiarmid: the TV distance between p and the empirical law of N i.i.d. draws over V categories
# has E[TV] <= 1/2 sqrt(V/N) (Cauchy-Schwarz on each |count_i/N - p_i|) and moves by at most 1/N
# when one draw changes, so P(TV >= 1/2 sqrt(V/N) + t) <= exp(-2 N t^2). With t chosen so that
# exp(-2 N t^2) = delta = 1e-9, a correct sampler fails this test with probability below 1e-9.
_PROBS = np.array([0.05, 0.15, 0.1, 0.0, 0.2, 0.05, 0.1, 0.05, 0.1, 0.2])
_N_DRAWS = 100_000


def _tv_bound(vocab_size: int, n: int, delta: float = 1e-9) -> float:
    return 0.5 * math.sqrt(vocab_size / n) + math.sqrt(math.log(1 / delta) / (2 * n))


def _empirical_tv(rng, probs: np.ndarray, n: int) -> float:
    draws = np.array([rng.draw(probs) for _ in range(n)])
    return 0.5 * float(np.abs(np.bincount(draws, minlength=probs.size) / n - probs).sum())


class _DropsLastToken(SeededRandomness):
    """A deliberately broken sampler: it never emits the last token (renormalises without it)."""

    def draw(self, probs) -> int:
        truncated = np.asarray(probs, dtype=np.float64).copy()
        truncated[-1] = 0.0
        return super().draw(truncated / truncated.sum())


def test_draw_frequencies_match_probabilities():
    bound = _tv_bound(_PROBS.size, _N_DRAWS)
    assert bound == pytest.approx(0.0152, abs=1e-4)
    assert _empirical_tv(SeededRandomness(0), _PROBS, _N_DRAWS) <= bound


def test_frequency_check_catches_a_biased_sampler():
    # The broken sampler is off by TV = p[-1] = 0.2, far beyond the bound: the check must fail.
    assert _empirical_tv(_DropsLastToken(0), _PROBS, _N_DRAWS) > _tv_bound(_PROBS.size, _N_DRAWS)


# Hoeffding: |mean of N coins - p| >= t with probability <= 2 exp(-2 N t^2); t for 2e-9.
def _coin_error(rng, p: float, n: int) -> float:
    return abs(sum(rng.coin(p) for _ in range(n)) / n - p)


def _coin_bound(n: int, delta: float = 1e-9) -> float:
    return math.sqrt(math.log(2 / delta) / (2 * n))


class _LeaningCoin(SeededRandomness):
    """A deliberately broken coin, True 5 points more often than asked."""

    def coin(self, p_true: float) -> bool:
        return super().coin(min(1.0, p_true + 0.05))


def test_coin_frequency_matches_and_catches_a_biased_coin():
    assert _coin_error(SeededRandomness(1), 0.3, _N_DRAWS) <= _coin_bound(_N_DRAWS)
    assert _coin_error(_LeaningCoin(1), 0.3, _N_DRAWS) > _coin_bound(_N_DRAWS)


def test_coin_extremes_are_certain():
    rng = SeededRandomness(2)
    assert not any(rng.coin(0.0) for _ in range(1000))
    assert all(rng.coin(1.0) for _ in range(1000))


@pytest.mark.parametrize("p_true", [-0.1, 1.5, math.nan])
def test_coin_rejects_non_probabilities(p_true):
    with pytest.raises(ValueError, match=r"outside \[0, 1\]; pass a probability"):
        SeededRandomness(0).coin(p_true)


@pytest.mark.parametrize(
    "probs, match",
    [
        ([0.5, -0.1, 0.6], r"1 negative or non-finite"),
        ([0.5, np.nan, 0.5], r"1 negative or non-finite"),
        ([0.2, 0.2], r"sum to 0.4.*normalise them first"),
        ([[0.5, 0.5]], r"shape \[V\]; got shape \(1, 2\)"),
        ([], r"got shape \(0,\)"),
    ],
)
def test_draw_rejects_non_probability_vectors(probs, match):
    with pytest.raises(ValueError, match=match):
        SeededRandomness(0).draw(np.array(probs, dtype=np.float64))


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.integers(-3, 3), min_size=1, max_size=40).map(lambda v: np.asarray(v, float)),
    st.integers(0, 45),
)
def test_top_k_indices_equals_a_stable_full_sort(values, k):
    """Ties (many, with small integer values) keep the lowest index, as a stable sort does."""
    from minieagle.sampling import top_k_indices

    expected = np.argsort(-values, kind="stable")[:k]
    assert top_k_indices(values, k).tolist() == expected.tolist()


@settings(deadline=None, max_examples=200)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.integers(1, 30)),
        elements=st.one_of(st.integers(-3, 3).map(float), st.floats(-5, 5)),
    ),
    st.integers(0, 35),
)
def test_top_k_rows_equals_a_stable_full_sort_of_each_row(values, k):
    """The batched top-k (one partition for all rows, with the tie fallback) ranks each row as
    a stable sort does: largest first, the lowest index on ties."""
    from minieagle.sampling import top_k_rows

    expected = np.argsort(-values, axis=-1, kind="stable")[:, :k]
    assert top_k_rows(values, k).tolist() == expected.tolist()


@_SETTINGS
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(0, 5), st.integers(1, 12)),
        elements=st.floats(-20, 20) | st.integers(-3, 3).map(float),
    ),
    _params,
)
def test_target_distributions_is_target_distribution_of_each_row(logits, params):
    """The batched law of a sampled tree's level (one softmax for all rows when nothing is
    filtered) equals the one-row law row by row, to rounding."""
    from minieagle.sampling import target_distributions

    got = target_distributions(logits, params)
    assert got.shape == logits.shape
    for row, law in zip(logits, got, strict=True):
        np.testing.assert_allclose(law, target_distribution(row, params), rtol=1e-12, atol=1e-15)


def test_target_distributions_rejects_bad_rows_as_target_distribution_does():
    from minieagle.sampling import target_distributions

    with pytest.raises(ValueError, match=r"1 non-finite value\(s\) \(NaN or inf\) among 6"):
        target_distributions(np.array([[0.0, 1.0, 2.0], [0.0, np.nan, 1.0]]), SamplingParams(1.0))
    with pytest.raises(ValueError, match=r"shape \[F, V\] with V > 0; got shape \(3,\)"):
        target_distributions(np.zeros(3), SamplingParams(1.0))
