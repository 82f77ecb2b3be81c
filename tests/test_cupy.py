"""The CuPy lane: the same code on a GPU gives the NumPy results and keeps its arrays on the GPU.

Skipped (see conftest.py) unless CuPy imports and a CUDA device is visible. Each test runs the
NumPy path and the CuPy path on the same parameters and inputs and compares them: to 1e-10 in
float64 and to 5e-4 of each tensor's scale in float32 (cuBLAS sums in another order). Randomness
is never compared across backends: greedy decoding uses none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from minieagle import backend, model, optim
from minieagle.config import preset
from minieagle.generate import generate, greedy_reference
from minieagle.kvcache import KVCache

pytestmark = pytest.mark.gpu

CONFIG = preset("nano")
TOLERANCE = {np.float64: 1e-10, np.float32: 5e-4}


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def _params(dtype) -> dict[str, np.ndarray]:
    return model.init_params(CONFIG, seed=0, dtype=dtype)


def _assert_close(cp, got, reference, tol: float, where: str = "out") -> None:
    """Every array of `got` is a CuPy array within tol (relative to the largest entry of the
    NumPy reference) of the reference; other leaves are equal, floats within tol."""
    if isinstance(reference, np.generic):
        reference = np.asarray(reference)
    if isinstance(reference, np.ndarray):
        assert isinstance(got, cp.ndarray), f"{where} left the GPU: {type(got)}"
        host = backend.to_host(got)
        assert host.shape == reference.shape and host.dtype == reference.dtype, where
        if reference.size:
            scale = max(1.0, float(np.max(np.abs(reference))))
            error = float(np.max(np.abs(host.astype(np.float64) - reference)))
            assert error <= tol * scale, f"{where} differs from NumPy by {error:.3g}"
    elif isinstance(reference, dict):
        assert got.keys() == reference.keys(), where
        for key in reference:
            _assert_close(cp, got[key], reference[key], tol, f"{where}[{key!r}]")
    elif isinstance(reference, list | tuple):
        assert len(got) == len(reference), where
        for i, (g, r) in enumerate(zip(got, reference, strict=True)):
            _assert_close(cp, g, r, tol, f"{where}[{i}]")
    elif isinstance(reference, float):
        assert abs(got - reference) <= tol * max(1.0, abs(reference)), where
    else:
        assert got == reference, f"{where}: {got!r} != {reference!r}"


def _tree_step(params, prompt, block, mask, positions):
    """Prefill, one draft-tree block (mask, positions, feature taps), keep a path, crop."""
    cache = KVCache.for_model(CONFIG, params, capacity=32)
    prefill, _, _ = model.forward(params, CONFIG, prompt, cache=cache)
    start = cache.length
    logits, hidden, _ = model.forward(
        params,
        CONFIG,
        block,
        position_ids=positions,
        attention_mask=mask,
        cache=cache,
        output_hidden=(0, CONFIG.num_hidden_layers, "final"),
    )
    cache.keep(start, [0, 2, 3])
    kept = [buf[:, :, : cache.length, :] for buf in cache.keys + cache.values]
    cache.crop(start + 1)
    return prefill, logits, hidden, kept, cache.length


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_forward_with_cache_and_tree_mask_matches_numpy(cp, dtype):
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, CONFIG.vocab_size, 6)
    block = rng.integers(0, CONFIG.vocab_size, 4)  # root 0 with children 1, 2; 3 under 2
    ancestors = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=bool)
    mask = np.concatenate([np.ones((4, 6), dtype=bool), ancestors], axis=1)  # [4, 6 + 4]
    positions = 6 + np.array([0, 1, 1, 2])
    inputs = (_params(dtype), prompt, block, mask, positions)
    reference = _tree_step(*inputs)
    _assert_close(cp, _tree_step(*backend.put(inputs, cp)), reference, TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_loss_and_grads_match_numpy(cp, dtype):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, CONFIG.vocab_size, (3, 9))  # repeated ids exercise the scatter-add
    targets = np.roll(ids, -1, axis=1)
    targets[:, -1] = -100
    inputs = (_params(dtype), CONFIG, ids, targets)
    loss, grads = model.loss_and_grads(*backend.put(inputs, cp))
    loss_np, grads_np = model.loss_and_grads(*inputs)
    assert isinstance(loss, float)
    _assert_close(cp, (loss, grads), (loss_np, grads_np), TOLERANCE[dtype])


def test_clipping_and_adamw_step_match_numpy(cp):
    ids = np.random.default_rng(3).integers(0, CONFIG.vocab_size, (2, 8))

    def step(params, ids):
        _, grads = model.loss_and_grads(params, CONFIG, ids, ids)
        norm = optim.clip_grad_norm(grads, max_norm=1e-3)
        adam = optim.AdamW(params)
        adam.step(params, grads, lr=1e-2)
        return norm, params, adam.state_tensors()

    reference = step(_params(np.float64), ids)  # the step updates its parameters in place
    on_gpu = step(backend.put(_params(np.float64), cp), cp.asarray(ids))
    _assert_close(cp, on_gpu, reference, TOLERANCE[np.float64])


def test_greedy_generation_matches_numpy_and_the_cache_free_oracle(cp):
    params = _params(np.float64)
    prompt, n = [CONFIG.bos_token_id, 40, 41, 42], 12
    tokens = generate(backend.put(params, cp), CONFIG, prompt, max_new_tokens=n, stop_at_eos=False)
    expected = generate(params, CONFIG, prompt, max_new_tokens=n, stop_at_eos=False)
    assert tokens.tokens == expected.tokens
    assert greedy_reference(backend.put(params, cp), CONFIG, prompt, n) == expected.tokens


def test_scatter_add_rows_adds_repeated_rows_on_the_gpu(cp):
    rows = np.array([0, 1, 1, 3, 1])
    values = np.random.default_rng(4).standard_normal((5, 4))
    got = backend.scatter_add_rows((6, 4), cp.asarray(rows), cp.asarray(values))
    _assert_close(cp, got, backend.scatter_add_rows((6, 4), rows, values), 1e-12)
    np.testing.assert_allclose(backend.to_host(got)[1], values[1] + values[2] + values[4])


def test_backend_helpers_keep_cupy_arrays_on_the_gpu(cp):
    like = cp.zeros(1)
    assert backend.array_module(like) is cp
    assert backend.array_module(np.zeros(1), like) is cp
    assert isinstance(backend.arange(4, like=like), cp.ndarray)
    assert isinstance(backend.zeros((2, 3), like=like), cp.ndarray)
    assert isinstance(backend.to_device(np.arange(3), like=like), cp.ndarray)
    host = backend.to_host(backend.to_device(np.arange(3.0), like=like))
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, np.arange(3.0))


@pytest.fixture(scope="module")
def shipped():
    """The shipped target, heads and draft model in float64 (NumPy), loaded once."""
    from minieagle.checkpoint import load_checkpoint
    from minieagle.heads.eagle1 import load_head
    from minieagle.heads.eagle3_io import load_eagle3_head

    root = Path(__file__).parents[1] / "minieagle" / "pretrained"
    params, config, tokenizer = load_checkpoint(root / "small", dtype=np.float64)
    draft = load_checkpoint(root / "small-draft", dtype=np.float64, with_tokenizer=False)[:2]
    eagle1 = load_head(root / "small-eagle1", dtype=np.float64)
    eagle3 = load_eagle3_head(root / "small-eagle3", dtype=np.float64, target_config=config)
    return params, config, tokenizer, draft, eagle1, eagle3


def _drafter(method, params, config, draft, eagle1, eagle3):
    from minieagle.drafters import build_drafter

    if method == "vanilla":
        return None
    if method == "draft-model":
        return build_drafter(method, draft_model=draft)
    head = eagle3 if method == "eagle3" else eagle1
    return build_drafter(method, target=(params, config), head=head)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("method", ["vanilla", "draft-model", "eagle1", "eagle2", "eagle3"])
def test_every_method_on_the_gpu_emits_the_numpy_tokens(cp, shipped, method, temperature):
    """The whole speculative loop (target, head or draft model, tree building, verification,
    cache surgery) on CuPy arrays emits exactly the tokens of the NumPy run, in float64: greedy,
    and at T = 1 with the same seed (the random draws are made on the host from host copies of
    the distributions, which agree to ~1e-15, so a draw could differ only on an exact tie)."""
    from minieagle.sampling import SamplingParams

    params, config, tokenizer, draft, eagle1, eagle3 = shipped
    on_gpu = backend.put((params, draft, eagle1, eagle3), cp)
    prompt = tokenizer.encode("def read_config(path):\n", add_bos=True)
    sampling = SamplingParams(temperature=temperature)
    runs = []
    for target, d, e1, e3 in ((params, draft, eagle1, eagle3), on_gpu):
        drafter = _drafter(method, target, config, d, e1, e3)
        result = generate(
            target, config, prompt, drafter=drafter, max_new_tokens=24, sampling=sampling,
            seed=7, stop_at_eos=False,
        )  # fmt: skip
        runs.append(result)
    cpu, gpu = runs
    assert gpu.tokens == cpu.tokens
    assert gpu.accepted_per_cycle == cpu.accepted_per_cycle
    if method != "vanilla" and temperature == 0.0:
        assert max(gpu.accepted_per_cycle) > 0, "no draft was ever accepted: the check is idle"


def test_the_bench_cost_curve_times_gpu_forwards(cp, shipped):
    """measure_verify_cost runs on CuPy arrays and waits for the kernels (positive times)."""
    from minieagle.costs import measure_verify_cost

    params, config, tokenizer, *_ = shipped
    prompt = tokenizer.encode("The garbage collector", add_bos=True)
    cost = measure_verify_cost(backend.put(params, cp), config, prompt, sizes=(1, 8), repeats=2)
    assert cost["relative_to_one"]["1"] == 1.0
    assert all(spread["min"] > 0 for spread in cost["ms"].values())


def test_generate_with_method_auto_on_the_gpu_decodes_with_the_gpu_measurement(cp, capsys):
    """`minieagle generate --device gpu` with the default --method auto: the method fastest.json
    records for the small target on a GPU, named by --stats as measured on a GPU, and greedy
    output equal to vanilla's on the GPU."""
    import json

    from minieagle.cli import main
    from minieagle.shipped import FASTEST_FILE

    entries = json.loads(FASTEST_FILE.read_text())["targets"]
    gpu = next(e for e in entries if e["name"] == "small" and e.get("device") == "gpu")
    method = gpu["T=0"]["method"]
    prompt = ["generate", "def read_config(path):\n", "--max-new-tokens", "16", "--device", "gpu"]
    assert main([*prompt, "--stats"]) == 0
    out, err = capsys.readouterr()
    assert f"[--method auto: {method}" in err and "measured fastest for small on a GPU" in err
    assert main([*prompt, "--method", "vanilla"]) == 0
    assert capsys.readouterr().out == out
