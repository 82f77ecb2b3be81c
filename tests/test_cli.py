"""The `minieagle` command (minieagle.cli) on a temporary nano checkpoint, and the FLOP counts of
`minieagle bench` (minieagle.bench), checked by counting the matmuls a forward really runs."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minieagle import bench, layers, model
from minieagle.checkpoint import load_checkpoint, save_checkpoint
from minieagle.cli import PRETRAINED, main
from minieagle.config import LlamaConfig, preset
from minieagle.generate import generate
from minieagle.kvcache import KVCache
from minieagle.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A nano model with the bundled 320-token tokenizer, saved in the HF layout."""
    directory = tmp_path_factory.mktemp("models") / "nano"
    config = preset("nano")
    tokenizer = Tokenizer.load(PRETRAINED / "tokenizer-320.json")
    save_checkpoint(directory, model.init_params(config, seed=1), config, tokenizer)
    return str(directory)


# ---------------------------------------------------------------------------- generate, demo


def test_generate_prints_the_prompt_and_the_greedy_continuation(checkpoint, capsys):
    prompt = "def area(radius):\n"
    code = main(["generate", prompt, "--model", checkpoint, "--max-new-tokens", "6", "--stats"])
    out, err = capsys.readouterr()
    params, config, tokenizer = load_checkpoint(checkpoint)
    ids = tokenizer.encode(prompt, add_bos=True)
    expected = generate(params, config, ids, max_new_tokens=6).tokens
    assert code == 0
    assert out == prompt + tokenizer.decode(expected) + "\n"
    assert f"[vanilla: {len(expected)} tokens, " in err
    assert "ms/token, tau 1.00 tokens per target forward, stop: " in err


def test_method_auto_decodes_with_the_method_measured_fastest(
    checkpoint, capsys, tmp_path, monkeypatch
):
    """The default --method auto: the shipped target gets the method minieagle/pretrained/
    fastest.json records for its setting (its greedy output unchanged), named by --stats, found
    by its name and weights' size without hashing them; a copy of its weights elsewhere is
    matched by fingerprint; a model measured nowhere gets vanilla, with the reason."""
    from minieagle import checkpoint as checkpoints
    from minieagle.shipped import fastest_method

    prompt = ["generate", "def read_config(path):\n", "--max-new-tokens", "12", "--stats"]
    fastest = json.loads((PRETRAINED / "fastest.json").read_text())["targets"]
    small = next(entry for entry in fastest if entry["name"] == "small")
    for flags, setting in (([], "T=0"), (["--temperature", "1"], "T>0")):
        assert main([*prompt, *flags]) == 0
        out, err = capsys.readouterr()
        method = small[setting]["method"]
        assert f"[{method}: 12 tokens" in err and f"[--method auto: {method}" in err
        if setting == "T=0":  # greedy: the very tokens of vanilla (sampled: the same law only)
            assert main([*prompt, *flags, "--method", "vanilla"]) == 0
            assert capsys.readouterr().out == out
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if (PRETRAINED / "small" / name).is_file():
            (copy / name).write_bytes((PRETRAINED / "small" / name).read_bytes())
    assert fastest_method(copy, greedy=True)["method"] == small["T=0"]["method"]
    hashed = []
    real_fingerprint = checkpoints.target_fingerprint
    monkeypatch.setattr(checkpoints, "target_fingerprint",
                        lambda d: hashed.append(d) or real_fingerprint(d))  # fmt: skip
    assert fastest_method(PRETRAINED / "small", greedy=True)["method"] == small["T=0"]["method"]
    assert hashed == []  # the name and the size found it
    assert fastest_method(copy, greedy=True)["method"] == small["T=0"]["method"]
    assert hashed == [copy]  # another name: the fingerprint
    chosen = fastest_method(checkpoint, greedy=True)
    assert chosen["method"] == "vanilla" and "no measurement of nano" in chosen["why"]


def test_method_auto_on_a_gpu_reads_the_gpu_measurement_or_says_it_has_none(
    checkpoint, tmp_path, monkeypatch
):
    """--method auto with --device gpu takes the target's GPU entry of fastest.json (the shipped
    file has one for the small target, measured on an H200, and its choice differs from the
    CPU's); a target measured on the CPU only gets its CPU entry and a note saying so, which
    --stats shows; the CPU keeps its own entries."""
    from minieagle import shipped
    from minieagle.cli.methods import describe_auto_method

    fastest = json.loads((PRETRAINED / "fastest.json").read_text())["targets"]
    gpu = next(e for e in fastest if e["name"] == "small" and e.get("device") == "gpu")
    cpu = next(e for e in fastest if e["name"] == "small" and e.get("device", "cpu") == "cpu")
    for greedy, setting in ((True, "T=0"), (False, "T>0")):
        on_gpu = shipped.fastest_method(PRETRAINED / "small", greedy=greedy, device="gpu")
        assert on_gpu["device"] == "gpu" and on_gpu["method"] == gpu[setting]["method"]
        assert on_gpu["source"] == gpu[setting]["source"] and "note" not in on_gpu
        on_cpu = shipped.fastest_method(PRETRAINED / "small", greedy=greedy)
        assert on_cpu["source"] == cpu[setting]["source"] and on_cpu["device"] == "cpu"
    assert gpu["T=0"]["method"] != cpu["T=0"]["method"]  # why the device matters
    assert " on a GPU at T=0: " in describe_auto_method(
        shipped.fastest_method(PRETRAINED / "small", greedy=True, device="gpu"))  # fmt: skip
    # a file with the CPU entry alone: the GPU run falls back to it and says so
    only_cpu = tmp_path / "fastest.json"
    data = json.loads((PRETRAINED / "fastest.json").read_text())
    data["targets"] = [e for e in data["targets"] if e.get("device", "cpu") == "cpu"]
    only_cpu.write_text(json.dumps(data))
    monkeypatch.setattr(shipped, "FASTEST_FILE", only_cpu)
    chosen = shipped.fastest_method(PRETRAINED / "small", greedy=True, device="gpu")
    assert chosen["method"] == cpu["T=0"]["method"] and chosen["device"] == "cpu"
    assert "no gpu measurement of small" in chosen["note"]
    assert "; measured on the CPU: " in describe_auto_method(chosen)
    nowhere = shipped.fastest_method(checkpoint, greedy=True, device="gpu")
    assert nowhere["method"] == "vanilla" and "no measurement of nano" in nowhere["why"]


def test_sampling_follows_the_seed(checkpoint, capsys):
    def sample(seed: int) -> str:
        flags = ["--temperature", "1", "--max-new-tokens", "20", "--seed", str(seed)]
        assert main(["generate", "The", "--model", checkpoint, *flags]) == 0
        return capsys.readouterr().out

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_demo_runs_greedy_and_sampled_on_prose_and_code(checkpoint, tmp_path, capsys):
    draft = tmp_path / "draft"
    params, config, tokenizer = load_checkpoint(checkpoint)
    save_checkpoint(draft, params, config, tokenizer)  # the target as its own draft model
    flags = ["--draft-model", str(draft), "--head", str(tmp_path / "no-head")]
    flags += ["--eagle3-head", str(tmp_path / "no-eagle3-head")]
    assert main(["demo", "--model", checkpoint, "--max-new-tokens", "5", *flags]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "2 layers, width 32" in out
    for kind in ("prose", "code"):
        assert f"=== {kind} prompt, greedy ===" in out
        assert f"=== {kind} prompt, sampled (T=0.7, top_p=0.9, seed 0) ===" in out
    assert "draft-model" in out and "eagle1" not in out and "eagle3" not in out
    assert "pld" in out and "medusa" not in out  # the shipped heads fit the shipped target only
    assert "medusa skipped" in captured.err
    assert out.count("identical greedy output from every method: True") == 2


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--top-p", "1.5"], "top_p=1.5 is outside (0, 1]"),
        (["--temperature", "-1"], "temperature=-1.0 is negative"),
        (["--top-k", "-2"], "argument --top-k: -2 is below 0; pass 0 (off)"),
        (["--max-new-tokens", "-1"], "argument --max-new-tokens: -1 is below 0; pass a count"),
        (["--seed", "-1"], "argument --seed: -1 is below 0; pass a seed"),
        (["--max-new-tokens", "1.5"], "argument --max-new-tokens: '1.5' is not an integer"),
        (["--temperature", "nan"], "argument --temperature: nan is not a finite number"),
    ],
)
def test_bad_sampling_flags_exit_2_with_the_fix(checkpoint, capsys, flags, message):
    assert main(["generate", "Hi", "--model", checkpoint, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") or err.startswith("usage: ")
    assert message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--repeats", "0"], "argument --repeats: 0 is below 1"),
        (["bench", "--new-tokens", "0"], "argument --new-tokens: 0 is below 1"),
        (["bench", "--prompts-per-corpus", "0"], "argument --prompts-per-corpus: 0 is below 1"),
        (["generate", "x", "--method", "eagle1", "--tree", "chain", "--depth", "0"],
         "argument --depth: 0 is below 1"),
        (["generate", "x", "--method", "eagle1", "--depth", "3"],
         "--depth 3 applies to eagle1 only with --tree chain"),
        (["generate", "x", "--method", "vanilla", "--gamma", "2"],
         "--gamma applies to --method draft-model, not vanilla"),
        (["generate", "x", "--gamma", "2"],
         "--gamma applies to --method draft-model; the default, --method auto, picks"),
        (["generate", "x", "--total-tokens", "3"], "--total-tokens applies to --method eagle2"),
        (["generate", "x", "--method", "eagle2", "--tree-top-k", "5000", "--total-tokens", "26"],
         "--tree-top-k 5000 exceeds --total-tokens - 1 = 25"),
        (["generate", "x", "--method", "eagle2", "--tree-top-k", "5000"],
         "--tree-top-k 5000 exceeds --total-tokens - 1 = 63, the largest tree auto sizing"),
        (["train", "target", "--max-train-chars", "-5"], "argument --max-train-chars: -5 is below"),
        (["train", "target", "--features", "runs/x"], "--features applies to training a head"),
        (["train", "draft-model", "--decay-steps", "5"], "--decay-steps applies to training"),
        (["train", "eagle3", "--branch-from", "runs/long"], "expected RUN@STEP, e.g. runs/l"),
        (["train", "eagle3", "--branch-from", "runs/long@5", "--no-resume"],
         "--branch-from starts from a kept state and --no-resume"),
        (["train", "eagle3", "--keep-states", "0"], "argument --keep-states: 0 is below 1"),
        (["train", "target", "--loss-mask", "answers"], "--loss-mask applies to training a head"),
        (["train", "eagle3", "--loss-mask", "answers"], "loss_mask='answers' masks the answers"),
        (["train", "eagle3", "--loss-mask", "assistant"], "argument --loss-mask: invalid choice"),
    ],
)  # fmt: skip
def test_out_of_range_and_misplaced_flags_exit_2_naming_the_flag(capsys, argv, message):
    """Issue 8: each of these ran (or crashed with a traceback) before the flags were checked."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_bench_out_into_a_missing_directory_fails_before_measuring(tmp_path, capsys, monkeypatch):
    from minieagle import bench as bench_module

    monkeypatch.setattr(bench_module, "run_bench", lambda args: pytest.fail("measured first"))
    out = tmp_path / "missing" / "bench.json"
    assert main(["bench", "--out", str(out)]) == 2
    assert f"the directory {out.parent} does not exist" in capsys.readouterr().err


def test_a_missing_model_directory_exits_2(tmp_path, capsys):
    assert main(["generate", "Hi", "--model", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_model_without_tokenizer_is_refused(tmp_path, checkpoint, capsys):
    params, config, _ = load_checkpoint(checkpoint)
    save_checkpoint(tmp_path / "bare", params, config)
    assert main(["generate", "Hi", "--model", str(tmp_path / "bare")]) == 2
    assert "has no tokenizer.json" in capsys.readouterr().err


def test_a_flag_of_the_wrong_type_is_a_usage_error(capsys):
    assert main(["generate", "Hi", "--top-k", "many"]) == 2
    assert "argument --top-k: 'many' is not an integer" in capsys.readouterr().err


def test_python_dash_m_minieagle_help():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-m", "minieagle", "--help"], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    for command in ("demo", "generate", "train", "bench"):
        assert command in run.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "minieagle", "generate"], capture_output=True, text=True, env=env
    )
    assert missing.returncode == 2
    assert "the following arguments are required: prompt" in missing.stderr


# ---------------------------------------------------------------------------- bench


def test_bench_writes_its_measurements(checkpoint, tmp_path, capsys, monkeypatch):
    small_peak = functools.partial(bench.measure_matmul_peak, sizes=(64,), repeats=2)
    few_steps = functools.partial(bench.measure_training, batch_size=2, steps=1, warmup=0)
    monkeypatch.setattr(bench, "measure_matmul_peak", small_peak)  # the test needs no real peak
    monkeypatch.setattr(bench, "measure_training", few_steps)
    out = tmp_path / "bench.json"
    flags = ["--model", checkpoint, "--repeats", "1", "--new-tokens", "3", "--out", str(out)]
    assert main(["bench", *flags]) == 0
    assert "MFU" in capsys.readouterr().out
    results = json.loads(out.read_text())
    config = preset("nano")
    assert results["training"]["seq_len"] == config.max_position_embeddings  # 256 capped
    assert results["training"]["flops_per_token"] == bench.train_flops_per_token(config, 128)
    for key in ("ms_per_token", "prefill_ms", "gflops"):
        assert results["decode"][key]["min"] <= results["decode"][key]["median"]
    mfu, achieved = results["training"]["mfu"]["median"], results["training"]["gflops"]["median"]
    assert mfu == pytest.approx(achieved / results["matmul"]["peak_gflops"])
    assert main(["bench", "--model", checkpoint, "--repeats", "0"]) == 2


GQA_UNTIED = LlamaConfig(
    vocab_size=40,
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=32,
    tie_word_embeddings=False,
)


def _counted_flops(monkeypatch) -> list[int]:
    """Make the layers count the FLOPs of every matmul they run (2 per multiply-add)."""
    counts = []
    linear_forward, linear_backward = layers.linear_forward, layers.linear_backward
    attention_forward, attention_backward = layers.attention_forward, layers.attention_backward

    def counted_linear_forward(x, weight):
        counts.append(2 * math.prod(x.shape[:-1]) * weight.size)
        return linear_forward(x, weight)

    def counted_linear_backward(dout, cache):
        weight = cache[1]
        counts.append(4 * math.prod(dout.shape[:-1]) * weight.size)  # dx and dweight
        return linear_backward(dout, cache)

    def counted_attention_forward(q, k, v, mask):
        counts.append(4 * q.size * k.shape[2])  # q @ k^T and probs @ v, S keys each
        return attention_forward(q, k, v, mask)

    def counted_attention_backward(dout, cache):
        keys = cache[1]
        counts.append(8 * dout.size * keys.shape[2])  # dprobs, dv, dscores @ k, dscores^T @ q
        return attention_backward(dout, cache)

    monkeypatch.setattr(layers, "linear_forward", counted_linear_forward)
    monkeypatch.setattr(layers, "linear_backward", counted_linear_backward)
    monkeypatch.setattr(layers, "attention_forward", counted_attention_forward)
    monkeypatch.setattr(layers, "attention_backward", counted_attention_backward)
    return counts


@pytest.mark.parametrize("config", [preset("nano"), GQA_UNTIED], ids=["nano", "gqa-untied"])
def test_flop_formulas_match_the_matmuls_a_forward_runs(config, monkeypatch):
    params = model.init_params(config)
    weight_sizes = [math.prod(s) for s in model.param_shapes(config).values() if len(s) == 2]
    lookup = config.vocab_size * config.hidden_size  # the embedding is a lookup, not a matmul
    tied_head = lookup if config.tie_word_embeddings else 0  # ... unless it is also the head
    assert bench.matmul_params(config) == sum(weight_sizes) - lookup + tied_head
    counts = _counted_flops(monkeypatch)
    past = 9
    cache = KVCache.for_model(config, params)
    model.forward(params, config, np.arange(3, 3 + past), cache=cache)
    counts.clear()
    model.forward(params, config, np.asarray([5]), cache=cache)
    assert sum(counts) == bench.forward_flops_per_token(config, past + 1)
    counts.clear()
    B, T = 2, 7
    ids = np.ones((B, T), dtype=np.int64)
    model.loss_and_grads(params, config, ids, ids)
    assert sum(counts) == B * T * bench.train_flops_per_token(config, T)


def test_generate_ranks_the_dynamic_tree_by_a_calibration(capsys):
    """--calibration / --sampled-tree reach Eagle2Drafter; a map fitted for another sampling
    setting or another head, and the flags for another method, end in one line and exit 2."""
    results = REPO / "docs" / "results"
    base = ["generate", "The garbage collector", "--max-new-tokens", "8"]
    t0, t1_sampled = (
        results / "eagle2-calibration-T0.json",
        results / "eagle2-calibration-T1-sampled.json",
    )
    assert main([*base, "--method", "eagle2", "--calibration", str(t0)]) == 0
    sampled = ["--sampled-tree", "--temperature", "1", "--calibration", str(t1_sampled)]
    assert main([*base, "--method", "eagle2", *sampled]) == 0
    capsys.readouterr()
    for argv, message in (
        ([*base, "--method", "eagle2", "--calibration", str(t0), "--temperature", "1"],
         "the calibration was fitted for 'T=0' but this decoding is 'T=1"),
        ([*base, "--method", "eagle3", "--calibration", str(t0)], "was fitted for head"),
        ([*base, "--calibration", str(t0)], "--calibration applies to --method eagle2 or eagle3"),
        ([*base, "--method", "eagle1", "--sampled-tree"], "--sampled-tree applies to --method"),
    ):  # fmt: skip
        assert main(argv) == 2
        assert message in capsys.readouterr().err


def _copy_head(source: Path, destination: Path) -> Path:
    """The head's weights and config (no calibration.json) in a directory of its own."""
    destination.mkdir()
    for name in ("config.json", "model.safetensors"):
        (destination / name).write_bytes((source / name).read_bytes())
    return destination


def test_calibrate_ships_maps_that_decoding_uses_by_default(tmp_path, capsys):
    """`minieagle calibrate --head DIR` writes DIR/calibration.json for the head's weights,
    each setting used exactly where its validation τ beat the raw one; generate then ranks by
    it unless --calibration none; once the weights change (a retrained head) it is not used,
    with a warning naming the command that refits it."""
    from minieagle.calibration import (
        HeadCalibration,
        TemperatureScores,
        fit_calibration,
        load_head_calibration,
        save_head_calibration,
    )
    from minieagle.checkpoint import target_fingerprint

    head = _copy_head(PRETRAINED / "small-eagle1", tmp_path / "head")
    tiny = ["--fit-prompts", "1", "--val-prompts", "1", "--fit-tokens", "6", "--val-tokens", "6"]
    assert main(["calibrate", "--head", str(head), *tiny]) == 0
    written = capsys.readouterr().out.strip()
    assert written == str(head / "calibration.json")
    maps = load_head_calibration(written, head=target_fingerprint(head))
    assert set(maps.maps) == {"T=0", "T=1", "T=1,sampled"}
    for setting, numbers in maps.validation.items():
        helped = numbers["tau_calibrated"] > numbers["tau_raw"]
        helped &= numbers["prompts_above_raw"] > numbers["prompts_below_raw"]
        assert maps.use[setting] == helped
        candidates = numbers["candidates"]  # the isotonic map, and temperatures for top-k trees
        expected = {"isotonic"} if setting.endswith(",sampled") else {"isotonic", "temperature"}
        assert set(candidates) == expected
        helping = {n: c["tau"] for n, c in candidates.items() if c["helps"]}
        assert numbers["kind"] == (max(helping, key=helping.get) if helping else "isotonic")
        assert maps.use[setting] == bool(helping)
        if numbers["kind"] == "temperature":  # the grid's best on the training prompts
            tau = maps.maps[setting].training_tau
            assert set(tau) == {0.25, 0.35, 0.5, 0.7}
            assert tau[maps.maps[setting].temperature] == max(tau.values())
    assert maps.provenance["command"].startswith(f"minieagle calibrate --head {head}")
    assert maps.provenance["validation"]["split"] == "val"
    # Six tokens decide little: from here on every map is marked as having helped, the T = 0
    # scores being the isotonic map (the temperature scores are checked after).
    everywhere = dict.fromkeys(maps.maps, True)
    isotonic = {**maps.maps, "T=0": fit_calibration([(0.2, True), (0.4, False)] * 5,
                                                    setting="T=0", head=maps.head)}  # fmt: skip
    save_head_calibration(HeadCalibration(maps.head, isotonic, everywhere), written)
    base = ["generate", "The garbage collector", "--max-new-tokens", "8", "--method", "eagle2",
            "--head", str(head), "--total-tokens", "8", "--stats"]  # fmt: skip
    for extra, line in (
        ([], "top-k tree, calibrated scores (T=0 map)"),
        (["--calibration", "none"], "top-k tree, raw scores"),
        (["--temperature", "1"], "sampled tree, calibrated scores (T=1,sampled map)"),
        (["--temperature", "1", "--sampled-tree", "off"], "top-k tree, calibrated scores (T=1 "),
    ):  # fmt: skip
        assert main([*base, *extra]) == 0
        assert f"[dynamic tree: {line}" in capsys.readouterr().err
    scaled = {**isotonic, "T=0": TemperatureScores(0.35, "T=0", maps.head)}
    save_head_calibration(HeadCalibration(maps.head, scaled, everywhere), written)
    assert main(base) == 0
    assert "[dynamic tree: top-k tree, temperature scores, t = 0.35 (T=0)]" in (
        capsys.readouterr().err
    )
    weights = head / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8 + int.from_bytes(data[:8], "little")] ^= 1  # the first weight's lowest bit: retrained
    weights.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="its maps are not used .* minieagle calibrate --head"):
        assert main(base) == 0
    assert "raw scores" in capsys.readouterr().err


def test_calibrate_fits_the_maps_on_the_tree_it_is_given(tmp_path, capsys, monkeypatch):
    """--depth / --tree-top-k / --total-tokens: the maps are fitted and judged on that tree
    (every drafter calibrate builds has those sizes), the file and its command record it; a
    tree that cannot hold its top-k is refused naming both values."""
    import minieagle.drafters.eagle2 as eagle2
    from minieagle.calibration import load_head_calibration

    built = []
    real = eagle2.Eagle2Drafter.__init__

    def spy(self, *args, **kwargs):
        built.append((kwargs["depth"], kwargs["top_k"], kwargs["total_tokens"]))
        real(self, *args, **kwargs)

    monkeypatch.setattr(eagle2.Eagle2Drafter, "__init__", spy)
    head = _copy_head(PRETRAINED / "small-eagle1", tmp_path / "head")
    tiny = ["--fit-prompts", "1", "--val-prompts", "1", "--fit-tokens", "4", "--val-tokens", "4",
            "--temperatures", "none"]  # fmt: skip
    tree = ["--depth", "2", "--tree-top-k", "3", "--total-tokens", "7"]
    assert main(["calibrate", "--head", str(head), *tiny, *tree]) == 0
    maps = load_head_calibration(capsys.readouterr().out.strip())
    assert maps.provenance["tree"] == {"depth": 2, "top_k": 3, "total_tokens": 7}
    assert maps.provenance["command"].endswith(" ".join(tree))
    assert built and set(built) == {(2, 3, 7)}
    built.clear()
    assert main(["calibrate", "--head", str(head), *tiny, "--total-tokens", "12"]) == 0
    assert set(built) == {(5, 8, 12)}  # the others stay the method's defaults
    assert main(["calibrate", "--head", str(head), *tiny, "--tree-top-k", "9",
                 "--total-tokens", "6"]) == 2  # fmt: skip
    assert "top_k=9 exceeds total_tokens - 1 = 5" in capsys.readouterr().err


def test_a_corrupt_shipped_map_is_one_error_naming_the_file(tmp_path, capsys):
    head = _copy_head(PRETRAINED / "small-eagle1", tmp_path / "head")
    (head / "calibration.json").write_text('{"format": "minieagle-head-calibration", "version": 1}')
    argv = ["generate", "x", "--method", "eagle2", "--head", str(head), "--total-tokens", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {head / 'calibration.json'} lacks 'settings'") and "None" not in err
    )
    assert main([*argv, "--calibration", "none"]) == 0  # the way around it


def test_calibrate_refuses_a_head_that_is_not_an_eagle_head(capsys):
    assert main(["calibrate", "--head", "small-medusa"]) == 2
    assert "is not an EAGLE-1 or EAGLE-3 head" in capsys.readouterr().err


# ---------------------------------------------------------------------------- interrupts, pipes


def test_ctrl_c_while_the_arguments_are_parsed_exits_130_in_one_line(monkeypatch, capsys):
    """A Ctrl-C during the first moments (building the parser, importing the commands) is
    inside main's handling: exit 130 and one line, no KeyboardInterrupt traceback."""
    import minieagle.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(minieagle.cli, "build_parser", interrupted)
    assert main(["generate", "x"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted") and err.count("\n") == 1


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`minieagle ... | head`: the pipe's reader is gone before the command writes (its read end
    is closed before the command starts, so the write fails for sure). The command exits 141,
    as a program killed by SIGPIPE does, and prints nothing: no "error:", no traceback, no
    "Exception ignored" at shutdown."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "minieagle", "generate", "The", "--max-new-tokens", "2"],
            stdout=write_end, stderr=subprocess.PIPE,
            text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert run.stderr == ""
    assert run.returncode == 141


def test_a_broken_pipe_inside_a_command_is_quiet_too(monkeypatch, capsys):
    """Whichever write meets the closed pipe (here one inside the command), main exits 141
    without a word; argparse's own --help swallows the error itself and exits 0."""
    from minieagle.cli import generate as generate_command

    def writes_into_a_closed_pipe(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(generate_command, "cmd_generate", writes_into_a_closed_pipe)
    assert main(["generate", "x"]) == 141
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------- export, import


EXPORT = ["export", "eagle1", "--head", str(PRETRAINED / "small-eagle1")]
EXPORT += ["--target", str(PRETRAINED / "small")]


@pytest.mark.parametrize("command", [EXPORT, ["import", "model.gguf"]])
@pytest.mark.parametrize("out", ["", " ", ".", ".."])
def test_export_and_import_refuse_to_replace_the_current_directory(
    command, out, tmp_path, monkeypatch, capsys
):
    """--out '' (or '.', or a directory above this one) would replace the directory the user
    is in: exit 2 with one line naming --out, and the directory is untouched."""
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main([*command, "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out!r}") and err.count("\n") == 1
    assert list(here.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_export_refuses_a_full_directory_that_holds_no_export(tmp_path, capsys):
    """An existing directory with files but no config.json is no earlier export: refused
    before anything is written; an earlier export (config.json there) is replaced."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json.bak").write_text("{}")
    assert main([*EXPORT, "--out", str(other)]) == 2
    assert "holds no earlier output" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["config.json.bak"]
    earlier = tmp_path / "earlier"
    assert main([*EXPORT, "--out", str(earlier)]) == 0
    assert main([*EXPORT, "--out", str(earlier)]) == 0


def test_calibrate_takes_a_temperature_grid_or_none(tmp_path, capsys):
    """--temperatures narrows the grid a top-k tree's temperature scores are fitted over (and
    the command recorded says so); none fits the isotonic maps alone; a bad grid is one error
    naming the value."""
    from minieagle.calibration import load_head_calibration

    head = _copy_head(PRETRAINED / "small-eagle1", tmp_path / "head")
    tiny = ["--fit-prompts", "1", "--val-prompts", "1", "--fit-tokens", "6", "--val-tokens", "6"]
    assert main(["calibrate", "--head", str(head), *tiny, "--temperatures", "0.5"]) == 0
    maps = load_head_calibration(capsys.readouterr().out.strip())
    assert maps.provenance["temperatures"] == [0.5]
    assert maps.provenance["command"].endswith("--temperatures 0.5")
    for setting in ("T=0", "T=1"):
        assert set(maps.validation[setting]["candidates"]) == {"isotonic", "temperature"}
    assert main(["calibrate", "--head", str(head), *tiny, "--temperatures", "none"]) == 0
    maps = load_head_calibration(capsys.readouterr().out.strip())
    assert maps.provenance["temperatures"] == []
    assert all(set(v["candidates"]) == {"isotonic"} for v in maps.validation.values())
    for bad in ("0", "0.5,-1", "x", "nan"):
        assert main(["calibrate", "--head", str(head), *tiny, "--temperatures", bad]) == 2
        assert f"--temperatures: '{bad}': expected temperatures > 0" in capsys.readouterr().err


def test_the_sizing_line_says_when_an_expansion_threshold_cuts_the_sized_tree(capsys):
    """The sizer predicts trees grown in full; with --expand-threshold the --stats line says
    its expectation does not count the cut (and says nothing of it without one)."""
    from types import SimpleNamespace

    from minieagle.cli.generate import print_drafter_lines
    from minieagle.sizing import Sizing

    sizing = Sizing(depth=3, top_k=1, total_tokens=4, chain=0, expected_tau=1.9,
                    expected_speedup=1.2, chain_tau=1.0, chain_speedup=1.0,
                    setting="T=0")  # fmt: skip
    print_drafter_lines(SimpleNamespace(sizing=sizing, expand_threshold=0.4), None)
    line = capsys.readouterr().err
    assert "auto sizing (T=0)" in line and "--expand-threshold 0.4 may draft fewer" in line
    print_drafter_lines(SimpleNamespace(sizing=sizing, expand_threshold=0.0), None)
    assert "expand-threshold" not in capsys.readouterr().err
