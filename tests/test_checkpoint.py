"""Checkpoint I/O: HF layout, round trips, atomic replacement and the error messages."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from minieagle import checkpoint
from minieagle.checkpoint import (
    config_from_hf_dict,
    config_to_hf_dict,
    load_checkpoint,
    save_checkpoint,
    validate_params,
)
from minieagle.config import LlamaConfig, preset
from minieagle.model import init_params

NANO = preset("nano")


@pytest.fixture
def params():
    return init_params(NANO, seed=0)


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name


# --- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_is_bit_exact(tmp_path, dtype):
    params = init_params(NANO, seed=3, dtype=dtype)
    save_checkpoint(tmp_path / "ckpt", params, NANO, dtype=np.dtype(dtype).name)
    loaded, config, tokenizer = load_checkpoint(tmp_path / "ckpt", dtype=dtype)
    _assert_same(params, loaded)
    assert config == NANO
    assert tokenizer is None


def test_float16_storage_round_trips_within_float16_precision(tmp_path, params):
    save_checkpoint(tmp_path / "ckpt", params, NANO, dtype="float16")
    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), framework="np") as f:
        assert f.get_tensor("model.norm.weight").dtype == np.float16
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt")  # cast back to float32
    for name, value in params.items():
        assert loaded[name].dtype == np.float32
        np.testing.assert_array_equal(loaded[name], value.astype(np.float16).astype(np.float32))
        np.testing.assert_allclose(loaded[name], value, rtol=2**-11, atol=2**-24)
    stored, _, _ = load_checkpoint(tmp_path / "ckpt", dtype=None)
    assert stored["model.norm.weight"].dtype == np.float16


def test_non_contiguous_tensors_round_trip(tmp_path, params):
    # Three layouts that safetensors would write wrongly without np.ascontiguousarray.
    q = "model.layers.0.self_attn.q_proj.weight"
    gate = "model.layers.1.mlp.gate_proj.weight"
    down = "model.layers.0.mlp.down_proj.weight"
    views = dict(params)
    views[q] = np.asfortranarray(params[q])  # the transposed view of W.T: right shape, F order
    views[gate] = np.repeat(params[gate], 2, axis=1)[:, ::2]  # a strided slice
    views[down] = params[down].T.copy().T
    assert not any(views[k].flags.c_contiguous for k in (q, gate, down))
    save_checkpoint(tmp_path / "ckpt", views, NANO)
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt")
    _assert_same(params, loaded)


# --- the Hugging Face layout --------------------------------------------------------------------

# Written out by hand from HF's LlamaForCausalLM for V=320, H=32, I=64, 4 heads of 8, 2 KV heads.
HF_ONE_LAYER_UNTIED = {
    "model.embed_tokens.weight": (320, 32),
    "model.layers.0.input_layernorm.weight": (32,),
    "model.layers.0.self_attn.q_proj.weight": (32, 32),
    "model.layers.0.self_attn.k_proj.weight": (16, 32),
    "model.layers.0.self_attn.v_proj.weight": (16, 32),
    "model.layers.0.self_attn.o_proj.weight": (32, 32),
    "model.layers.0.post_attention_layernorm.weight": (32,),
    "model.layers.0.mlp.gate_proj.weight": (64, 32),
    "model.layers.0.mlp.up_proj.weight": (64, 32),
    "model.layers.0.mlp.down_proj.weight": (32, 64),
    "model.norm.weight": (32,),
    "lm_head.weight": (320, 32),
}


@pytest.mark.parametrize("tied", [False, True])
def test_safetensors_holds_exactly_the_hf_names_and_out_in_shapes(tmp_path, tied):
    config = NANO.replace(num_hidden_layers=1, tie_word_embeddings=tied)
    save_checkpoint(tmp_path / "ckpt", init_params(config), config, metadata={"step": "7"})
    expected = dict(HF_ONE_LAYER_UNTIED)
    if tied:
        del expected["lm_head.weight"]
    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), framework="np") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
        metadata = f.metadata()
    assert shapes == expected
    assert metadata["format"] == "pt" and metadata["step"] == "7"


def test_checkpoints_written_with_the_old_np_format_tag_still_load(tmp_path, params):
    save_checkpoint(tmp_path / "ckpt", params, NANO)
    weights = tmp_path / "ckpt" / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "np"})
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt")
    _assert_same(params, loaded)


def test_config_json_has_both_rope_and_dtype_spellings(tmp_path, params):
    save_checkpoint(tmp_path / "ckpt", params, NANO, dtype="float16")
    d = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert d["architectures"] == ["LlamaForCausalLM"] and d["model_type"] == "llama"
    assert d["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert d["rope_theta"] == 10000.0 and d["rope_scaling"] is None
    assert d["dtype"] == d["torch_dtype"] == "float16"
    assert d["hidden_act"] == "silu" and d["attention_bias"] is False and d["mlp_bias"] is False
    assert d["head_dim"] == 8 and d["pad_token_id"] == 0 and "minieagle_version" in d
    assert d["tie_word_embeddings"] is True and d["num_key_value_heads"] == 2


# As transformers 4.x writes a small Llama (legacy rope_theta/rope_scaling, torch_dtype).
LEGACY = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 176,
    "max_position_embeddings": 2048,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 8,
    "num_hidden_layers": 3,
    "num_key_value_heads": 4,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.44.2",
    "use_cache": True,
    "vocab_size": 1000,
}
# As transformers 5.x writes it (rope_parameters, dtype, head_dim).
NEW = {
    key: value
    for key, value in LEGACY.items()
    if key not in ("rope_theta", "rope_scaling", "torch_dtype", "transformers_version")
} | {
    "dtype": "bfloat16",
    "head_dim": 8,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
    "transformers_version": "5.0.0",
}


@pytest.mark.parametrize("d", [LEGACY, NEW], ids=["legacy", "new"])
def test_config_from_hf_dict_reads_either_spelling(d):
    config = config_from_hf_dict(d)
    assert config == LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=8,
        max_position_embeddings=2048,
        rope_theta=500000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )


def test_config_from_hf_dict_uses_hf_defaults_for_missing_fields():
    d = {k: LEGACY[k] for k in ("model_type", "vocab_size", "hidden_size", "intermediate_size")}
    config = config_from_hf_dict(d | {"num_hidden_layers": 1, "num_attention_heads": 4})
    assert config.num_key_value_heads == 4 and config.rms_norm_eps == 1e-6
    assert config.tie_word_embeddings is False and config.rope_theta == 10000.0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rope_theta": 10000.0}, "disagrees with rope_theta=10000.0"),
        ({"model_type": "mistral"}, "model_type='mistral' is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu' is not supported"),
        ({"attention_bias": True}, "attention_bias=true is not supported"),
        ({"mlp_bias": True}, "mlp_bias=true"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_type='llama3'"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type='yarn'"),
        ({"eos_token_id": [1, 2]}, "eos_token_id=[1, 2] must be a single integer"),
    ],
)
def test_config_from_hf_dict_rejects_what_it_cannot_run(change, message):
    with pytest.raises(ValueError) as info:
        config_from_hf_dict(NEW | change)
    assert message in str(info.value)


def test_config_from_hf_dict_requires_the_shape_fields():
    with pytest.raises(ValueError, match="config has no hidden_size"):
        config_from_hf_dict({k: v for k, v in NEW.items() if k != "hidden_size"})


@settings(max_examples=30, deadline=None)
@given(
    heads=st.sampled_from([(4, 1), (4, 2), (4, 4), (2, 2)]),
    head_dim=st.sampled_from([2, 8, 16]),
    tied=st.booleans(),
    theta=st.floats(1.0, 1e7),
    eps=st.floats(1e-8, 1e-3),
)
def test_config_survives_the_hf_dict_round_trip(heads, head_dim, tied, theta, eps):
    config = NANO.replace(
        num_attention_heads=heads[0],
        num_key_value_heads=heads[1],
        head_dim=head_dim,
        tie_word_embeddings=tied,
        rope_theta=theta,
        rms_norm_eps=eps,
    )
    assert config_from_hf_dict(json.loads(json.dumps(config_to_hf_dict(config)))) == config


# --- atomic replacement -------------------------------------------------------------------------


def test_saving_over_a_checkpoint_replaces_it(tmp_path, params):
    from minieagle.tokenizer import Tokenizer

    save_checkpoint(tmp_path / "ckpt", params, NANO, Tokenizer([]))
    assert (tmp_path / "ckpt" / "tokenizer.json").exists()
    new = init_params(NANO, seed=1)
    save_checkpoint(tmp_path / "ckpt", new, NANO)
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt")
    _assert_same(new, loaded)
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["config.json", "model.safetensors"]
    assert os.listdir(tmp_path) == ["ckpt"]


def test_a_failed_save_leaves_the_old_checkpoint(tmp_path, params, monkeypatch):
    save_checkpoint(tmp_path / "ckpt", params, NANO)

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(checkpoint, "save_file", crash)  # after config.json is written
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(tmp_path / "ckpt", init_params(NANO, seed=1), NANO)
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt")
    _assert_same(params, loaded)
    assert os.listdir(tmp_path) == ["ckpt"]


def test_a_failed_swap_puts_the_old_checkpoint_back(tmp_path, params, monkeypatch):
    save_checkpoint(tmp_path / "ckpt", params, NANO)
    calls, rename = [], os.rename

    def rename_failing_second(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # old is aside, new not yet in place
            raise OSError("simulated crash")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", rename_failing_second)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path / "ckpt", init_params(NANO, seed=1), NANO)
    monkeypatch.undo()
    loaded, _, _ = load_checkpoint(tmp_path / "ckpt")
    _assert_same(params, loaded)
    assert os.listdir(tmp_path) == ["ckpt"]


def test_load_points_at_the_old_checkpoint_after_a_hard_crash_mid_swap(tmp_path, params):
    save_checkpoint(tmp_path / "ckpt", params, NANO)
    os.rename(tmp_path / "ckpt", tmp_path / ".ckpt.old-1234abcd")  # as the swap leaves it
    with pytest.raises(FileNotFoundError, match=r"previous one at .*\.ckpt\.old-1234abcd"):
        load_checkpoint(tmp_path / "ckpt")


def test_save_refuses_to_replace_a_directory_with_other_files(tmp_path, params):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"not part of a checkpoint \(\['notes.txt'\]\)"):
        save_checkpoint(tmp_path, params, NANO)
    assert os.listdir(tmp_path) == ["notes.txt"]


# --- validation and error messages --------------------------------------------------------------


@pytest.fixture
def saved(tmp_path, params):
    return save_checkpoint(tmp_path / "ckpt", params, NANO)


def _rewrite_weights(directory, edit) -> None:
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"))


def test_missing_directory_and_files_are_named(tmp_path, saved):
    with pytest.raises(FileNotFoundError, match="checkpoint directory .*nowhere does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    (saved / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors is missing; re-save"):
        load_checkpoint(saved)
    (saved / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        load_checkpoint(saved)


def test_truncated_safetensors_is_reported(saved):
    data = (saved / "model.safetensors").read_bytes()
    (saved / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors is truncated or corrupt"):
        load_checkpoint(saved)


def test_malformed_config_json_is_reported(saved):
    (saved / "config.json").write_text('{"vocab_size": 320,')
    with pytest.raises(ValueError, match=r"config\.json is malformed JSON"):
        load_checkpoint(saved)


def test_config_that_does_not_match_the_tensors_is_reported(saved):
    d = json.loads((saved / "config.json").read_text())
    (saved / "config.json").write_text(json.dumps(d | {"hidden_size": 64}))
    with pytest.raises(ValueError) as info:
        load_checkpoint(saved)
    message = str(info.value)
    assert "model.safetensors does not match" in message
    assert "'model.embed_tokens.weight' has shape (320, 32) but the config expects (320, 64)" in (
        message
    )


def test_nan_and_inf_are_counted(saved):
    def poison(tensors):
        tensors["model.norm.weight"][:3] = np.nan
        tensors["model.norm.weight"][5] = -np.inf

    _rewrite_weights(saved, poison)
    with pytest.raises(ValueError, match="'model.norm.weight' has 3 NaN and 1 inf values"):
        load_checkpoint(saved)


def test_missing_and_unexpected_tensors_are_named(saved):
    _rewrite_weights(saved, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(
        ValueError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"
    ):
        load_checkpoint(saved)
    bias = "model.layers.0.self_attn.q_proj.bias"
    _rewrite_weights(saved, lambda t: t.update({bias: np.zeros(32, np.float32)}))
    with pytest.raises(ValueError, match=f"unexpected tensor '{bias}'.*no such parameter"):
        load_checkpoint(saved)


def test_tied_and_untied_lm_head_mismatch_is_explained(saved, params):
    # HF files sometimes store the tied head anyway, equal to the embedding: still refused.
    head = params["model.embed_tokens.weight"].copy()
    _rewrite_weights(saved, lambda t: t.update({"lm_head.weight": head}))
    with pytest.raises(ValueError, match="tie_word_embeddings=true means the LM head reuses"):
        load_checkpoint(saved)
    untied = NANO.replace(tie_word_embeddings=False)
    with pytest.raises(ValueError, match="missing tensor 'lm_head.weight'.*=false means"):
        validate_params(params, untied)


def test_save_validates_before_writing(tmp_path, params):
    bad = dict(params)
    bad["model.norm.weight"] = np.ones(31, np.float32)
    with pytest.raises(ValueError, match=r"'model\.norm\.weight' has shape \(31,\) .* \(32,\)"):
        save_checkpoint(tmp_path / "ckpt", bad, NANO)
    bad["model.norm.weight"] = np.full(32, np.nan, np.float32)
    with pytest.raises(ValueError, match="32 NaN and 0 inf"):
        save_checkpoint(tmp_path / "ckpt", bad, NANO)
    assert os.listdir(tmp_path) == []


def test_save_rejects_bad_dtype_metadata_and_overflow(tmp_path, params):
    with pytest.raises(ValueError, match="dtype='int8' is not one of"):
        save_checkpoint(tmp_path / "ckpt", params, NANO, dtype="int8")
    with pytest.raises(ValueError, match="is not str -> str"):
        save_checkpoint(tmp_path / "ckpt", params, NANO, metadata={"step": 7})
    big = dict(params)
    big["model.norm.weight"] = np.full(32, 1e6, np.float32)
    with pytest.raises(ValueError, match="'model.norm.weight' overflows float16"):
        save_checkpoint(tmp_path / "ckpt", big, NANO, dtype="float16")
    assert os.listdir(tmp_path) == []


def test_sharded_checkpoints_are_refused(saved):
    (saved / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ValueError, match="is sharded"):
        load_checkpoint(saved)


def test_tokenizer_is_saved_and_loaded(tmp_path, params):
    """Our format in minieagle_tokenizer.json, the HF export in tokenizer.json (+ config);
    loading reads ours (tests/test_hf_tokenizer.py checks the HF files)."""
    from minieagle.tokenizer import Tokenizer

    save_checkpoint(tmp_path / "ckpt", params, NANO, Tokenizer([(3 + 97, 3 + 98)]))
    names = {"minieagle_tokenizer.json", "tokenizer.json", "tokenizer_config.json"}
    assert names <= set(os.listdir(tmp_path / "ckpt"))
    _, _, tokenizer = load_checkpoint(tmp_path / "ckpt")
    assert isinstance(tokenizer, Tokenizer) and tokenizer.merges == [(100, 101)]
    assert load_checkpoint(tmp_path / "ckpt", with_tokenizer=False)[2] is None


def test_real_tokenizer_round_trips_through_a_checkpoint(tmp_path, params):
    tokenizer_module = pytest.importorskip("minieagle.tokenizer")
    tokenizer = tokenizer_module.Tokenizer([])
    save_checkpoint(tmp_path / "ckpt", params, NANO, tokenizer)
    _, _, loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.encode("checkpoint") == tokenizer.encode("checkpoint")


def test_saved_checkpoint_is_readable_by_everyone(tmp_path):
    """mkdtemp creates 0o700 directories; a shipped model must be readable by other users."""
    import stat

    from minieagle.config import preset
    from minieagle.model import init_params

    directory = save_checkpoint(tmp_path / "m", init_params(preset("nano")), preset("nano"))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755
    for child in directory.iterdir():
        assert stat.S_IMODE(child.stat().st_mode) == 0o644, child.name


def test_config_json_records_the_tokenizers_padding_id(tmp_path):
    """An imported model's padding id (SmolLM2's is 2, its EOS) reaches config.json; ours is 0."""
    from minieagle.cli import PRETRAINED
    from minieagle.hf_tokenizer import (
        HFTokenizer,
        export_hf_tokenizer_config,
        export_hf_tokenizer_json,
    )

    params, config, ours = load_checkpoint(PRETRAINED / "small")
    tokenizer_config = export_hf_tokenizer_config(ours)
    tokenizer_config["pad_token"] = "<|eos|>"
    hf = HFTokenizer(export_hf_tokenizer_json(ours), tokenizer_config)
    assert hf.pad_id == 2
    for tokenizer, pad in ((hf, 2), (ours, 0), (None, 0)):
        save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
        assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["pad_token_id"] == pad
