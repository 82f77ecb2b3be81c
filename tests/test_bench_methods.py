"""The bound the methods benchmark reports: tau / (verification cost + drafting cost), each per
cycle in vanilla steps, computed from hand-made generation results whose costs are known."""

from __future__ import annotations

import pytest

from minieagle.bench_methods import _bound
from minieagle.generate import GenerationResult

VERIFY_MS = {1: 2.0, 4: 3.0, 8: 5.0}  # a cost curve: forward(N) in ms
VANILLA_MS = 2.5  # vanilla decoding, ms per token (the forward plus the loop's own work)


def _result(tree_sizes, draft_ms_per_cycle):
    result = GenerationResult([], 4, "max_new_tokens", len(tree_sizes))
    result.tree_sizes = list(tree_sizes)
    result.draft_seconds = draft_ms_per_cycle * len(tree_sizes) / 1e3
    return result


def test_the_bound_counts_the_cost_curve_at_each_cycles_size_and_the_drafting_time():
    results = [_result([4, 4, 8], 0.5), _result([8], 0.5)]
    got = _bound(results, tau=3.0, speedup=1.2, verify_ms=VERIFY_MS, vanilla_ms=VANILLA_MS)
    verify = (1.5 + 1.5 + 2.5 + 2.5) / 4  # forward(N) / forward(1), mean over the 4 cycles
    draft = 0.5 / VANILLA_MS
    assert got["mean_tree_size"] == pytest.approx(6.0)
    assert got["verify_cost"] == pytest.approx(verify)
    assert got["draft_cost"] == pytest.approx(draft)
    assert got["bound"] == pytest.approx(3.0 / (verify + draft))
    assert got["of_bound"] == pytest.approx(1.2 / got["bound"])


def test_vanilla_sits_exactly_on_its_bound():
    """A drafter that proposes nothing verifies one token per cycle and drafts for no time:
    bound 1, and a speedup of 1 is all of it."""
    got = _bound([_result([1] * 5, 0.0)], tau=1.0, speedup=1.0, verify_ms=VERIFY_MS,
                 vanilla_ms=VANILLA_MS)  # fmt: skip
    assert (got["verify_cost"], got["draft_cost"], got["bound"], got["of_bound"]) == (1, 0, 1, 1)


def test_the_check_catches_a_bound_that_ignores_the_drafting_time(monkeypatch):
    """Negative control: with the drafting time dropped the bound rises and the first test's
    assertions fail."""
    from minieagle import bench_methods

    real = bench_methods._bound

    def forgets_drafting(results, *args, **kwargs):
        for r in results:
            r.draft_seconds = 0.0
        return real(results, *args, **kwargs)

    monkeypatch.setattr(bench_methods, "_bound", forgets_drafting)
    results = [_result([4, 4, 8], 0.5), _result([8], 0.5)]
    got = bench_methods._bound(results, 3.0, 1.2, VERIFY_MS, VANILLA_MS)
    with pytest.raises(AssertionError):
        assert got["draft_cost"] == pytest.approx(0.5 / VANILLA_MS)


def test_each_method_decodes_with_its_own_generate_options(monkeypatch):
    """compare_methods' generate_options reach `generate` for their method only: the same
    drafter can run side by side under two settings (here the verification rule)."""
    from minieagle import bench_methods

    seen = []

    def recording_generate(*args, **kwargs):
        seen.append(kwargs.get("verification", "default"))
        raise StopIteration  # nothing more is needed from the run

    monkeypatch.setattr(bench_methods, "generate", recording_generate)
    methods = {"vanilla": lambda: None, "other": lambda: None}
    with pytest.raises(StopIteration):
        bench_methods.compare_methods(None, None, methods, [("prose", [1, 2])],
                                      generate_options={"other": {"verification": "token"}})
    assert seen == ["default"]  # the warm-up of vanilla, which has no options
    seen.clear()
    with pytest.raises(StopIteration):
        bench_methods.compare_methods(None, None, {"other": lambda: None, "vanilla": lambda: None},
                                      [("prose", [1, 2])],
                                      generate_options={"other": {"verification": "token"}})
    assert seen == ["token"]
