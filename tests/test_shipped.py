"""The shipped models: Hugging Face layout, trained (not random), and lossless speculative decoding
on held-out prompts in float64."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors import safe_open

from minieagle.bench import heldout_prompts
from minieagle.checkpoint import load_checkpoint, save_checkpoint
from minieagle.cli import DEFAULT_DRAFT_MODEL, DEFAULT_MODEL, PRETRAINED
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.generate import generate
from minieagle.train import evaluate, token_stream


def _hf_llama_names(layers: int, tied: bool) -> dict[str, str]:
    """What transformers' LlamaForCausalLM names its tensors (shape keys written out by hand)."""
    names = {"model.embed_tokens.weight": "V,H", "model.norm.weight": "H"}
    for i in range(layers):
        for short, shape in (
            ("input_layernorm.weight", "H"),
            ("post_attention_layernorm.weight", "H"),
            ("self_attn.q_proj.weight", "Hq,H"),
            ("self_attn.k_proj.weight", "Hkv,H"),
            ("self_attn.v_proj.weight", "Hkv,H"),
            ("self_attn.o_proj.weight", "H,Hq"),
            ("mlp.gate_proj.weight", "I,H"),
            ("mlp.up_proj.weight", "I,H"),
            ("mlp.down_proj.weight", "H,I"),
        ):
            names[f"model.layers.{i}.{short}"] = shape
    if not tied:
        names["lm_head.weight"] = "V,H"
    return names


@pytest.mark.parametrize("directory", [DEFAULT_MODEL, DEFAULT_DRAFT_MODEL], ids=["target", "draft"])
def test_shipped_checkpoint_has_the_hugging_face_layout(directory):
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["rope_parameters"]["rope_theta"] == config["rope_theta"]
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    sizes = {
        "V": config["vocab_size"],
        "H": config["hidden_size"],
        "I": config["intermediate_size"],
        "Hq": config["num_attention_heads"] * head_dim,
        "Hkv": config["num_key_value_heads"] * head_dim,
    }
    expected = _hf_llama_names(config["num_hidden_layers"], config["tie_word_embeddings"])
    with safe_open(directory / "model.safetensors", framework="np") as f:
        assert set(f.keys()) == set(expected)
        for name, shape in expected.items():
            want = [sizes[s] for s in shape.split(",")]
            assert list(f.get_slice(name).get_shape()) == want, name


def test_shipped_checkpoint_round_trips_bit_for_bit(tmp_path):
    params, config, tokenizer = load_checkpoint(DEFAULT_MODEL, dtype=None)
    save_checkpoint(tmp_path / "copy", params, config, tokenizer, dtype="float16")
    again, config_again, tokenizer_again = load_checkpoint(tmp_path / "copy", dtype=None)
    assert config_again == config and tokenizer_again.merges == tokenizer.merges
    for name, value in params.items():
        assert again[name].dtype == value.dtype and np.array_equal(again[name], value), name
    original = (DEFAULT_MODEL / "model.safetensors").read_bytes()
    assert (tmp_path / "copy" / "model.safetensors").read_bytes()[-1000:] == original[-1000:]


@pytest.mark.parametrize("directory", [DEFAULT_MODEL, DEFAULT_DRAFT_MODEL], ids=["target", "draft"])
def test_shipped_models_are_trained_language_models(directory):
    """Held-out loss far below a uniform guess (ln 2048 = 7.6 nats): the weights are trained."""
    params, config, tokenizer = load_checkpoint(directory)
    for corpus in ("prose", "code"):
        stream, _ = token_stream(tokenizer, corpus, "val", None)
        loss = evaluate(params, config, stream[:20_000], seq_len=128, batches=2, batch_size=4)
        assert loss < 0.6 * math.log(config.vocab_size), (corpus, loss)


@pytest.fixture(scope="module")
def shipped_float64():
    target = load_checkpoint(DEFAULT_MODEL, dtype=np.float64)
    draft = load_checkpoint(DEFAULT_DRAFT_MODEL, dtype=np.float64, with_tokenizer=False)
    return target, draft


def test_greedy_speculative_equals_greedy_vanilla_on_heldout_prompts(shipped_float64):
    (params, config, tokenizer), (draft_params, draft_config, _) = shipped_float64
    accepted = 0
    for _, prompt in heldout_prompts(tokenizer, per_corpus=3, length=24):
        vanilla = generate(params, config, prompt, max_new_tokens=24, stop_at_eos=False)
        drafter = DraftModelDrafter(draft_params, draft_config, gamma=4)
        spec = generate(
            params, config, prompt, drafter=drafter, max_new_tokens=24, stop_at_eos=False
        )
        assert spec.tokens == vanilla.tokens
        accepted += sum(spec.accepted_per_cycle)
    assert accepted > 0  # the draft model really proposes tokens the target keeps


@pytest.mark.parametrize("method", ["eagle1", "eagle1-chain", "eagle2", "eagle3"])
def test_greedy_eagle_equals_greedy_vanilla_on_heldout_prompts(shipped_float64, method):
    from minieagle.cli import DEFAULT_EAGLE3_HEAD, DEFAULT_HEAD
    from minieagle.drafters import build_drafter
    from minieagle.heads.eagle1 import load_head
    from minieagle.heads.eagle3_io import load_eagle3_head

    (params, config, tokenizer), _ = shipped_float64
    if method == "eagle3":
        head = load_eagle3_head(DEFAULT_EAGLE3_HEAD, dtype=np.float64, target_config=config)
    else:
        head = load_head(DEFAULT_HEAD, dtype=np.float64)
    name, _, variant = method.partition("-")
    options = {"tree": "chain:5"} if variant == "chain" else {}
    accepted = 0
    for _, prompt in heldout_prompts(tokenizer, per_corpus=3, length=24):
        vanilla = generate(params, config, prompt, max_new_tokens=24, stop_at_eos=False)
        drafter = build_drafter(name, target=(params, config), head=head, **options)
        spec = generate(
            params, config, prompt, drafter=drafter, max_new_tokens=24, stop_at_eos=False
        )
        assert spec.tokens == vanilla.tokens
        accepted += sum(spec.accepted_per_cycle)
    assert accepted > 0


# ------------------------------------------------------ every shipped file, in today's formats

SHIPPED_FILES = sorted(
    str(path.relative_to(PRETRAINED)) for path in PRETRAINED.rglob("*") if path.is_file()
)


@pytest.mark.parametrize("name", SHIPPED_FILES)
def test_every_shipped_file_is_in_the_current_formats(name):
    """What a user downloads with the package is what today's code writes: safetensors headers
    tagged "pt" (transformers 4.x refuses "np"), a Hugging Face tokenizer.json that the
    `tokenizers` library reads (ours beside it in minieagle_tokenizer.json), the version that
    wrote each file. A file of no known kind fails too, so a new kind is checked when added."""
    import tokenizers

    from minieagle.shipped import FASTEST_FILE, FASTEST_FORMAT
    from minieagle.tokenizer import FORMAT, Tokenizer

    path = PRETRAINED / name
    if path.name == "model.safetensors":
        with safe_open(path, framework="np") as f:
            header = f.metadata()
        assert header["format"] == "pt"
        assert header["minieagle_version"] not in ("", "unknown")
    elif path.name == "config.json":
        assert json.loads(path.read_text())["minieagle_version"] not in ("", "unknown")
    elif path.name == "tokenizer.json":  # the HF export, encoding as ours does
        hf = tokenizers.Tokenizer.from_file(str(path))
        ours = Tokenizer.load(path.with_name("minieagle_tokenizer.json"))
        text = "def read_config(path):\n    return json.load(open(path))  # café, naïve ✓"
        assert hf.encode(text, add_special_tokens=False).ids == ours.encode(text)
    elif path.name == "calibration.json":  # a head's maps, fitted for its weights as shipped
        from minieagle.calibration import load_head_calibration
        from minieagle.checkpoint import target_fingerprint

        maps = load_head_calibration(path, head=target_fingerprint(path.parent))
        assert {"T=0", "T=1", "T=1,sampled"} <= set(maps.maps)
    elif path.name == "tokenizer_config.json":
        assert json.loads(path.read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    elif path == FASTEST_FILE:  # what --method auto picks, per target and setting
        from minieagle.cli.flags import METHOD_FLAGS, METHODS

        data = json.loads(path.read_text())
        assert data["format"] == FASTEST_FORMAT and data["targets"]
        for entry in data["targets"]:
            for setting in ("T=0", "T>0"):
                chosen = entry[setting]
                assert chosen["method"] in METHODS and set(chosen.get("flags", {})) <= set(
                    METHOD_FLAGS
                )
                assert (PRETRAINED.parents[1] / chosen["source"]).is_file()  # the measurement
    elif path.name == "minieagle_tokenizer.json" or path.parent == PRETRAINED:
        assert json.loads(path.read_text())["format"] == FORMAT  # our own, standalone
        assert Tokenizer.load(path).vocab_size > 256
    else:
        pytest.fail(f"{name}: a shipped file of no known kind; add its format check here")
