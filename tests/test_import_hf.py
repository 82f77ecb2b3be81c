"""Importing local Hugging Face Llama directories: single and sharded safetensors, float16 and
bfloat16, the side files, what is dropped, and the errors."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from minieagle.checkpoint import config_to_hf_dict, load_checkpoint, save_checkpoint
from minieagle.config import preset
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.importers import import_model, read_model
from minieagle.importers.hf_llama import read_hf_llama
from minieagle.model import forward, init_params

NANO = preset("nano").replace(tie_word_embeddings=False)
IDS = np.array([5, 17, 99, 3, 250, 7, 7, 31], dtype=np.int64)
SIDE = {
    "tokenizer.json": '{"model": {"type": "BPE"}}',
    "tokenizer_config.json": '{"bos_token": "<s>"}',
    "generation_config.json": '{"eos_token_id": 2}',
    "special_tokens_map.json": '{"eos_token": "</s>"}',
}


@pytest.fixture(scope="module")
def params():
    return init_params(NANO.replace(initializer_range=0.5), seed=2)


def logits_of(params, config=NANO):
    return forward(params, config, IDS)[0]


def write_config(directory, config=NANO, **changes):
    directory.mkdir(parents=True, exist_ok=True)
    d = config_to_hf_dict(config) | changes
    (directory / "config.json").write_text(json.dumps(d))


def write_sharded(directory, params, shards: int = 3, config=NANO, side=True):
    """A HF directory with `params` split across `shards` files and an index, as
    transformers' save_pretrained writes it."""
    write_config(directory, config)
    names = sorted(params)
    weight_map = {}
    for k in range(shards):
        shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: params[name] for name in names[k::shards]}
        save_file(part, str(directory / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    for name, text in (SIDE if side else {}).items():
        (directory / name).write_text(text)
    return directory


def write_raw_safetensors(path, tensors: dict[str, tuple[str, tuple, bytes]]):
    """A safetensors file written byte by byte (name -> (dtype, shape, data)), for dtypes NumPy
    lacks (BF16): an 8-byte little-endian header length, the JSON header, the data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    blob = b"".join(data for _, _, data in tensors.values())
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + blob)


# --- what comes in --------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_a_single_file_directory_imports_exactly(tmp_path, tied):
    config = NANO.replace(tie_word_embeddings=tied)
    params = init_params(config, seed=4)
    save_checkpoint(tmp_path / "hf", params, config)
    model = read_hf_llama(tmp_path / "hf", progress=False)
    assert model.config == config and model.notes == []
    np.testing.assert_array_equal(logits_of(model.params, config), logits_of(params, config))


def test_a_sharded_directory_imports_with_its_side_files(tmp_path, params):
    source = write_sharded(tmp_path / "hf", params, shards=3)
    out = import_model(source, tmp_path / "ckpt", progress=False)
    loaded, config, _ = load_checkpoint(out, with_tokenizer=False)
    assert config == NANO
    np.testing.assert_array_equal(logits_of(loaded), logits_of(params))
    for name, text in SIDE.items():
        assert (out / name).read_text() == text


def test_float16_and_bfloat16_weights_widen_to_float32(tmp_path, params):
    directory = tmp_path / "hf"
    write_config(directory)
    expected, raw = {}, {}
    for k, (name, value) in enumerate(sorted(params.items())):
        if k % 2:  # bfloat16: the top 16 bits of the float32
            bits = (value.view(np.uint32) >> 16).astype("<u2")
            raw[name] = ("BF16", value.shape, bits.tobytes())
            expected[name] = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            raw[name] = ("F16", value.shape, value.astype("<f2").tobytes())
            expected[name] = value.astype(np.float16).astype(np.float32)
    write_raw_safetensors(directory / "model.safetensors", raw)
    model = read_hf_llama(directory, progress=False)
    for name, value in expected.items():
        assert model.params[name].dtype == np.float32
        np.testing.assert_array_equal(model.params[name], value, err_msg=name)
    # The negative control: bfloat16 read as if it were float16 would not match.
    bf16 = next(name for name in raw if raw[name][0] == "BF16")
    as_f16 = np.frombuffer(raw[bf16][2], dtype="<f2").astype(np.float32).reshape(raw[bf16][1])
    assert not np.array_equal(as_f16, expected[bf16])


def test_rotary_buffers_and_a_tied_head_are_dropped_with_a_note(tmp_path):
    config = NANO.replace(tie_word_embeddings=True)
    params = init_params(config, seed=5)
    extra = dict(params)
    extra["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(4, dtype=np.float32)
    extra["lm_head.weight"] = params["model.embed_tokens.weight"]
    write_sharded(tmp_path / "hf", extra, shards=2, config=config, side=False)
    model = read_hf_llama(tmp_path / "hf", progress=False)
    assert sorted(model.params) == sorted(params)
    assert any("rotary_emb.inv_freq" in note for note in model.notes)
    assert any("lm_head.weight" in note and "tie_word_embeddings" in note for note in model.notes)
    np.testing.assert_array_equal(logits_of(model.params, config), logits_of(params, config))


def test_read_model_dispatches_on_what_it_is_given(tmp_path, params):
    write_sharded(tmp_path / "hf", params, shards=2)
    assert read_model(tmp_path / "hf", progress=False).config == NANO
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8)
    with pytest.raises(InvalidInputError, match=r"weights\.bin is neither a \.gguf file"):
        read_model(tmp_path / "weights.bin")
    with pytest.raises(MissingFileError, match=r"absent does not exist; pass a \.gguf file"):
        read_model(tmp_path / "absent")


# --- bad input ------------------------------------------------------------------------------


def test_an_index_naming_a_missing_shard_is_refused_naming_both(tmp_path, params):
    directory = write_sharded(tmp_path / "hf", params, shards=3)
    (directory / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(MissingFileError) as error:
        read_hf_llama(directory, progress=False)
    message = str(error.value)
    assert "model.safetensors.index.json names the shard model-00002-of-00003" in message
    assert "download that shard" in message


def test_an_index_placing_a_tensor_in_a_shard_that_lacks_it_is_refused(tmp_path, params):
    directory = write_sharded(tmp_path / "hf", params, shards=2)
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    held_by = index["weight_map"]["model.norm.weight"]
    wrong = next(shard for shard in shards if shard != held_by)
    index["weight_map"]["model.norm.weight"] = wrong
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        InvalidInputError, match=rf"places 'model\.norm\.weight' in {wrong}.*re-download"
    ):
        read_hf_llama(directory, progress=False)


def test_shapes_that_disagree_with_config_json_are_refused(tmp_path, params):
    directory = write_sharded(tmp_path / "hf", params, shards=2)
    write_config(directory, NANO.replace(intermediate_size=48))
    with pytest.raises(
        InvalidInputError,
        match=r"'model\.layers\.0\.mlp\.gate_proj\.weight' has shape \(64, 32\).*config\.json",
    ):
        read_hf_llama(directory, progress=False)


def test_another_architecture_biases_and_integer_weights_are_refused(tmp_path, params):
    directory = write_sharded(tmp_path / "hf", params, shards=1)
    write_config(directory, architectures=["MistralForCausalLM"])
    with pytest.raises(
        InvalidInputError, match=r"config\.json describes \['MistralForCausalLM'\].*pick a Llama"
    ):
        read_hf_llama(directory, progress=False)

    with_bias = dict(params, **{"model.layers.0.self_attn.q_proj.bias": np.zeros(32, np.float32)})
    directory = write_sharded(tmp_path / "bias", with_bias, shards=1)
    with pytest.raises(InvalidInputError, match=r"q_proj\.bias'?: minieagle's Llama has no biases"):
        read_hf_llama(directory, progress=False)

    as_int8 = dict(params, **{"model.norm.weight": np.ones(32, np.int8)})
    directory = write_sharded(tmp_path / "int8", as_int8, shards=1)
    with pytest.raises(
        InvalidInputError, match=r"'model\.norm\.weight' is stored as I8.*unquantized"
    ):
        read_hf_llama(directory, progress=False)


def test_missing_weights_and_a_truncated_file_are_refused_naming_the_file(tmp_path, params):
    directory = tmp_path / "hf"
    write_config(directory)
    with pytest.raises(
        MissingFileError, match=r"neither model\.safetensors nor model\.safetensors\.index\.json"
    ):
        read_hf_llama(directory, progress=False)
    save_file(params, str(directory / "model.safetensors"), metadata={"format": "pt"})
    data = (directory / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        InvalidInputError,
        match=r"model\.safetensors is not a readable safetensors file.*re-download",
    ):
        read_hf_llama(directory, progress=False)


def test_a_nan_weight_is_refused_naming_the_file_the_tensor_and_a_fix(tmp_path, params):
    broken = dict(params)
    broken["model.layers.1.mlp.up_proj.weight"] = params["model.layers.1.mlp.up_proj.weight"].copy()
    broken["model.layers.1.mlp.up_proj.weight"][3, 4] = np.nan
    directory = write_sharded(tmp_path / "hf", broken, shards=2)
    shard = json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"][
        "model.layers.1.mlp.up_proj.weight"
    ]
    with pytest.raises(InvalidInputError) as error:
        read_hf_llama(directory, progress=False)
    assert str(error.value).startswith(
        f"{directory / shard}: tensor 'model.layers.1.mlp.up_proj.weight' has 1 NaN and 0 inf "
        "values; "
    )
    assert "re-download it" in str(error.value)


@pytest.mark.parametrize("pad", [5, None])
def test_config_jsons_padding_id_is_kept(tmp_path, params, pad):
    directory = write_sharded(tmp_path / "hf", params, shards=1)
    write_config(directory, pad_token_id=pad)
    out = import_model(directory, tmp_path / "ckpt", progress=False)
    assert json.loads((out / "config.json").read_text())["pad_token_id"] == pad
    write_config(directory, pad_token_id=NANO.vocab_size)
    with pytest.raises(InvalidInputError, match=r"pad_token_id=320 is outside \[0, vocab_size"):
        import_model(directory, tmp_path / "ckpt", progress=False)


def test_the_import_command_writes_the_checkpoint_and_prints_where(tmp_path, params, capsys):
    from minieagle.cli import main

    source = write_sharded(tmp_path / "hf", params, shards=2)
    assert main(["import", str(source), "--out", str(tmp_path / "ckpt"), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "ckpt")
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt", with_tokenizer=False)
    np.testing.assert_array_equal(logits_of(loaded), logits_of(params))
    assert main(["import", str(source)]) == 2
    assert "--out is required to import" in capsys.readouterr().err
    assert main(["import", str(source), "--out", str(tmp_path / "x"), "--dtype", "bfloat16"]) == 2
