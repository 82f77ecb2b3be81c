"""The EAGLE-3 head on disk (minieagle.heads.eagle3_io) against its spec,
docs/formats/eagle3-layout.md.

The spec is written here as data (tensor names, shapes in the page's symbols, dtypes, config
keys) and checked by `spec_problems`. That function reads the raw safetensors header bytes and
`safe_open(..., framework="np")`, never minieagle's own reader. Negative controls show that it
fails on deliberately wrong saves. The aux-layer ids expected here are written out by hand from
the page's numbering table; they are not computed by the code under test.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import save_file

from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.heads.eagle3 import DraftVocab, Eagle3Config, init_head
from minieagle.heads.eagle3_io import load_eagle3_head, save_eagle3_head

# Seven layers: the smallest target whose default aux layers (2, L//2, L-3) = (2, 3, 4) are
# distinct; SpecForge/SGLang number them as the outputs of layers [1, 2, 3].
TARGET = LlamaConfig(
    vocab_size=16,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=7,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
)
IDS = np.array([0, 1, 3, 4, 5, 7, 9, 11, 12, 15])  # the draft vocabulary: 10 of 16 ids
N, V, D = len(IDS), TARGET.vocab_size, TARGET.hidden_size
DEFAULT_SERVING_IDS = [1, 2, 3]

# ---------------------------------------------------------------------------- the spec as data

# name -> (shape in the page's symbols, dtype); "float" is the weights' storage dtype.
TENSOR_SPEC = {
    "fc.weight": (("d", "3d"), "float"),
    "midlayer.input_layernorm.weight": (("d",), "float"),
    "midlayer.hidden_norm.weight": (("d",), "float"),
    "midlayer.self_attn.q_proj.weight": (("H*h", "2d"), "float"),
    "midlayer.self_attn.k_proj.weight": (("Hkv*h", "2d"), "float"),
    "midlayer.self_attn.v_proj.weight": (("Hkv*h", "2d"), "float"),
    "midlayer.self_attn.o_proj.weight": (("d", "H*h"), "float"),
    "midlayer.post_attention_layernorm.weight": (("d",), "float"),
    "midlayer.mlp.gate_proj.weight": (("I", "d"), "float"),
    "midlayer.mlp.up_proj.weight": (("I", "d"), "float"),
    "midlayer.mlp.down_proj.weight": (("d", "I"), "float"),
    "norm.weight": (("d",), "float"),
    "lm_head.weight": (("N", "d"), "float"),
    "d2t": (("N",), "int64"),
    "t2d": (("V",), "bool"),
}
HEADER_DTYPES = {
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "bool": "BOOL",
}


def _symbols(target: LlamaConfig, draft_vocab_size: int) -> dict[str, int]:
    d, h = target.hidden_size, target.head_dim
    return {
        "d": d,
        "2d": 2 * d,
        "3d": 3 * d,
        "H*h": target.num_attention_heads * h,
        "Hkv*h": target.num_key_value_heads * h,
        "I": target.intermediate_size,
        "N": draft_vocab_size,
        "V": target.vocab_size,
    }


def _config_spec(target: LlamaConfig, draft_vocab_size: int, aux, serving_ids) -> dict:
    """config.json key -> the value the page prescribes."""
    eagle_config = {"use_aux_hidden_state": True}
    if serving_ids is not None:
        eagle_config["eagle_aux_hidden_state_layer_ids"] = serving_ids
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": target.hidden_size,
        "intermediate_size": target.intermediate_size,
        "num_attention_heads": target.num_attention_heads,
        "num_key_value_heads": target.num_key_value_heads,
        "head_dim": target.head_dim,
        "vocab_size": target.vocab_size,
        "draft_vocab_size": draft_vocab_size,
        "target_hidden_size": target.hidden_size,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "eagle_config": eagle_config,
        "minieagle_head": "eagle3",
        "minieagle_aux_layers": list(aux),
        "minieagle_target_tie_word_embeddings": target.tie_word_embeddings,
    }


def _raw_header(path: Path) -> dict:
    """The safetensors JSON header, read from the bytes: what a PyTorch loader sees."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(length))


def spec_problems(
    directory,
    target=TARGET,
    draft_vocab_size=N,
    aux=(2, 3, 4),
    serving_ids=DEFAULT_SERVING_IDS,
    weights="float32",
) -> list[str]:
    """Every way the head directory differs from docs/formats/eagle3-layout.md. serving_ids:
    eagle_config's eagle_aux_hidden_state_layer_ids, None where the page says to leave it out."""
    directory = Path(directory)
    problems = []
    files = sorted(p.name for p in directory.iterdir())
    if files != ["config.json", "model.safetensors"]:
        problems.append(f"files {files}")
    config = json.loads((directory / "config.json").read_text())
    for key, want in _config_spec(target, draft_vocab_size, aux, serving_ids).items():
        if config.get(key, "<absent>") != want:
            problems.append(f"config {key}={config.get(key, '<absent>')!r}, spec {want!r}")
    sizes = _symbols(target, draft_vocab_size)
    path = directory / "model.safetensors"
    header = {k: v for k, v in _raw_header(path).items() if k != "__metadata__"}
    if sorted(header) != sorted(TENSOR_SPEC):
        problems.append(f"tensor names {sorted(header)}")
    tensors = {}
    with safe_open(str(path), framework="np") as f:
        for name in f.keys():
            tensors[name] = f.get_tensor(name)
    for name, (symbols, kind) in TENSOR_SPEC.items():
        if name not in header:
            continue
        shape = [sizes[s] for s in symbols]
        dtype = weights if kind == "float" else kind
        if header[name]["shape"] != shape:
            problems.append(f"{name} has shape {header[name]['shape']}, spec {shape} ({symbols})")
        if header[name]["dtype"] != HEADER_DTYPES[dtype]:
            problems.append(f"{name} has header dtype {header[name]['dtype']}, spec {dtype}")
        if tensors[name].dtype != np.dtype(dtype) or not tensors[name].flags.c_contiguous:
            problems.append(f"{name} reads back as {tensors[name].dtype}, not {dtype} contiguous")
    if "d2t" in tensors and "t2d" in tensors:
        d2t, t2d = tensors["d2t"], tensors["t2d"]
        ids = np.arange(d2t.shape[0]) + d2t  # target_id = draft_id + d2t[draft_id]
        if not (np.all(np.diff(ids) > 0) and ids[0] >= 0 and ids[-1] < sizes["V"]):
            problems.append(f"arange(N) + d2t = {ids} is not strictly increasing in [0, V)")
        elif t2d.shape != (sizes["V"],) or t2d.sum() != len(ids) or not np.all(t2d[ids]):
            problems.append("t2d does not mark exactly the target ids of d2t")
    return problems


# ---------------------------------------------------------------------------- helpers


def _head(cfg: Eagle3Config, seed=0, dtype=np.float32) -> dict:
    """A head whose tensors all differ (unit norm gains would hide a swapped norm)."""
    rng = np.random.default_rng(seed)
    head = init_head(cfg, seed=seed, dtype=np.float64)
    return {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(dtype) for k, v in head.items()}


def _saved(tmp_path, target=TARGET, ids=IDS, aux=None, **save_options) -> tuple[Path, tuple]:
    """A head for `target` saved under tmp_path / "head": (directory, (head, cfg, vocab))."""
    cfg = Eagle3Config.from_target(target, aux_layers=aux, draft_vocab_size=len(ids))
    vocab = DraftVocab(ids, target.vocab_size)
    dtype = save_options.get("dtype", "float32")
    head = _head(cfg, dtype=dtype)
    directory = save_eagle3_head(tmp_path / "head", head, cfg, vocab, **save_options)
    return directory, (head, cfg, vocab)


def _edit_config(directory: Path, edit) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


def _edit_tensors(directory: Path, edit) -> None:
    path = directory / "model.safetensors"
    with safe_open(str(path), framework="np") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    edit(tensors)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))


def _strip_minieagle_keys(config: dict) -> None:
    """What SpecForge writes has none of our keys."""
    for key in [k for k in config if k.startswith("minieagle_")]:
        del config[key]


def _error(directory, **load_options) -> str:
    with pytest.raises(InvalidInputError) as info:
        load_eagle3_head(directory, **load_options)
    return str(info.value)


# ---------------------------------------------------------------------------- the spec


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ids", [IDS, np.arange(V)], ids=["reduced", "full"])
def test_a_saved_head_meets_the_spec(tmp_path, dtype, ids):
    directory, _ = _saved(tmp_path, ids=ids, dtype=dtype)
    assert spec_problems(directory, draft_vocab_size=len(ids), weights=dtype) == []
    with safe_open(str(directory / "model.safetensors"), framework="np") as f:
        assert f.metadata()["format"] == "pt"  # the tag transformers 4.x requires


def test_the_aux_ids_of_the_shipped_12_layer_target_are_those_of_the_table(tmp_path):
    """The page's table: inputs of layers 2, 6, 9 are written as SpecForge/SGLang ids 1, 5, 8."""
    target = TARGET.replace(num_hidden_layers=12)
    directory, (_, cfg, _) = _saved(tmp_path, target=target)
    assert cfg.aux_layers == (2, 6, 9)
    assert spec_problems(directory, target=target, aux=(2, 6, 9), serving_ids=[1, 5, 8]) == []


def test_the_buffers_give_what_sglang_and_vllm_compute(tmp_path):
    """SGLang: hot_token_id = d2t + arange(N). vLLM: draft logits scattered into a -inf [V] row
    at arange(N) + d2t. Both must land on the draft vocabulary, i.e. on t2d."""
    directory, _ = _saved(tmp_path)
    with safe_open(str(directory / "model.safetensors"), framework="np") as f:
        d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
    assert np.array_equal(d2t + np.arange(N), IDS)
    draft_logits = np.random.default_rng(0).standard_normal((3, N))
    full = np.full((3, V), -np.inf)
    full[:, np.arange(N) + d2t] = draft_logits
    assert np.array_equal(np.isfinite(full), np.broadcast_to(t2d, (3, V)))


WRONG_SAVES = {
    "lm_head saved [d, N]": (
        lambda t: t.update({"lm_head.weight": t["lm_head.weight"].T}),
        None,
        "lm_head.weight has shape [8, 10], spec [10, 8]",
    ),
    "d2t saved as int32": (
        lambda t: t.update({"d2t": t["d2t"].astype(np.int32)}),
        None,
        "d2t has header dtype I32, spec int64",
    ),
    "t2d saved as uint8": (
        lambda t: t.update({"t2d": t["t2d"].astype(np.uint8)}),
        None,
        "t2d has header dtype U8, spec bool",
    ),
    "ids in input-of-layer numbering": (
        None,
        lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 3, 4]),
        "'eagle_aux_hidden_state_layer_ids': [2, 3, 4]}, spec",
    ),
    "tied lm_head": (None, lambda c: c.update(tie_word_embeddings=True), "tie_word_embeddings"),
    "an extra tensor": (
        lambda t: t.update({"fc.bias": np.zeros(D, np.float32)}),
        None,
        "tensor names",
    ),
    "d2t off by one": (lambda t: t.update({"d2t": t["d2t"] + 1}), None, "strictly increasing"),
}


@pytest.mark.parametrize("wrong", WRONG_SAVES)
def test_the_spec_check_fails_on_a_deliberately_wrong_save(tmp_path, wrong):
    edit_tensors, edit_config, problem = WRONG_SAVES[wrong]
    directory, _ = _saved(tmp_path)
    if edit_tensors is not None:
        _edit_tensors(directory, edit_tensors)
    if edit_config is not None:
        _edit_config(directory, edit_config)
    problems = spec_problems(directory)
    assert problems and any(problem in p for p in problems), problems


# ---------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ids", [IDS, np.arange(V)], ids=["reduced", "full"])
def test_save_then_load_is_exact(tmp_path, dtype, ids):
    directory, (head, cfg, vocab) = _saved(
        tmp_path, ids=ids, dtype=np.dtype(dtype).name, target_dir="somewhere/target"
    )
    loaded, loaded_cfg, loaded_vocab = load_eagle3_head(directory, dtype=dtype)
    assert loaded_cfg == cfg
    assert np.array_equal(loaded_vocab.ids, vocab.ids) and loaded_vocab.target_vocab_size == V
    assert loaded.keys() == head.keys()
    for name in head:
        assert loaded[name].dtype == dtype and np.array_equal(loaded[name], head[name]), name
    config = json.loads((directory / "config.json").read_text())
    assert config["minieagle_target"] == "somewhere/target"


@settings(max_examples=25)
@given(st.sets(st.integers(0, V - 1), min_size=1))
def test_every_draft_vocabulary_meets_the_spec_and_round_trips(ids):
    ids = np.array(sorted(ids))
    with tempfile.TemporaryDirectory() as tmp:
        directory, (_, cfg, _) = _saved(Path(tmp), ids=ids)
        assert spec_problems(directory, draft_vocab_size=len(ids)) == []
        _, loaded_cfg, vocab = load_eagle3_head(directory)
    assert loaded_cfg == cfg and np.array_equal(vocab.ids, ids)


def test_strided_and_fortran_ordered_tensors_are_saved_as_their_values(tmp_path):
    """safetensors writes an array's memory as is: a strided view must be made contiguous."""
    cfg = Eagle3Config.from_target(TARGET, draft_vocab_size=N)
    head = _head(cfg)
    wide = np.repeat(head["lm_head.weight"], 2, axis=1)
    strided = dict(head, **{"lm_head.weight": wide[:, ::2]})  # a view with stride 2
    strided["fc.weight"] = np.asfortranarray(head["fc.weight"])
    assert not strided["lm_head.weight"].flags.c_contiguous
    save_eagle3_head(tmp_path / "head", strided, cfg, DraftVocab(IDS, V))
    loaded, _, _ = load_eagle3_head(tmp_path / "head")
    assert all(np.array_equal(loaded[k], head[k]) for k in head)


def test_saving_again_replaces_the_whole_head(tmp_path):
    directory, (head, cfg, vocab) = _saved(tmp_path)
    save_eagle3_head(directory, _head(cfg, seed=5), cfg, vocab)
    assert not np.array_equal(load_eagle3_head(directory)[0]["fc.weight"], head["fc.weight"])


# ---------------------------------------------------------------------------- SpecForge's files


def test_a_file_without_minieagle_keys_takes_its_aux_layers_from_the_serving_ids(tmp_path):
    """Non-default layers, so that reading the ids + 1 and falling back to the default differ."""
    directory, (head, cfg, vocab) = _saved(tmp_path, aux=(1, 3, 5))
    assert spec_problems(directory, aux=(1, 3, 5), serving_ids=[0, 2, 4]) == []
    _edit_config(directory, _strip_minieagle_keys)
    loaded, loaded_cfg, loaded_vocab = load_eagle3_head(directory, target_config=TARGET)
    assert loaded_cfg.aux_layers == (1, 3, 5)
    assert loaded_cfg.draft_vocab_size == N and np.array_equal(loaded_vocab.ids, IDS)
    assert all(np.array_equal(loaded[k], head[k]) for k in head)


def test_a_file_without_any_aux_ids_takes_the_default_of_the_target(tmp_path):
    directory, _ = _saved(tmp_path)

    def strip_everything(config):
        _strip_minieagle_keys(config)
        del config["eagle_config"]

    _edit_config(directory, strip_everything)
    assert load_eagle3_head(directory, target_config=TARGET)[1].aux_layers == (2, 3, 4)
    assert "pass target_config=" in _error(directory)


def test_a_stored_embedding_is_accepted_and_dropped(tmp_path):
    directory, (head, _, _) = _saved(tmp_path)
    embedding = np.ones((V, D), np.float32)
    _edit_tensors(directory, lambda t: t.update({"embed_tokens.weight": embedding}))
    loaded, _, _ = load_eagle3_head(directory)
    assert loaded.keys() == head.keys()
    _edit_tensors(directory, lambda t: t.update({"embed_tokens.weight": embedding[:, :4]}))
    assert "'embed_tokens.weight' has shape (16, 4), expected (16, 8)" in _error(directory)


def test_a_full_vocabulary_may_leave_out_d2t_and_t2d(tmp_path):
    directory, _ = _saved(tmp_path, ids=np.arange(V))
    _edit_tensors(directory, lambda t: [t.pop("d2t"), t.pop("t2d")])
    _, cfg, vocab = load_eagle3_head(directory)
    assert cfg.draft_vocab_size == V and np.array_equal(vocab.ids, np.arange(V))


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "other, shapes",
    [
        (TARGET.replace(hidden_size=12), "hidden_size=8 .* but the target has hidden_size=12"),
        (TARGET.replace(vocab_size=20), "vocab_size=16 .* but the target has .* vocab_size=20"),
    ],
    ids=["hidden", "vocab"],
)
def test_a_head_for_another_target_is_refused(tmp_path, other, shapes):
    directory, _ = _saved(tmp_path)
    message = _error(directory, target_config=other)
    assert "config.json" in message and "this head is for another target" in message
    assert "train an EAGLE-3 head for this target" in message
    with pytest.raises(InvalidInputError, match=shapes):
        load_eagle3_head(directory, target_config=other)


@pytest.mark.parametrize(
    "ids, target, problem",
    [
        ([1, 1, 3], None, "must name three distinct target layers in increasing order"),
        ([3, 2, 1], None, "must name three distinct target layers in increasing order"),
        ([1, 2], None, "must name three distinct target layers"),
        ([1, 3, 7], TARGET, "reaches target layer 8, but the target has num_hidden_layers=7"),
        ([1, 2, 3], TARGET.replace(num_hidden_layers=4), "num_hidden_layers=4"),
        ("[1, 2, 3]", None, "must be a JSON array"),
        ([1, 2.0, 3], None, "must be a JSON integer"),
    ],
)
def test_wrong_aux_layer_ids_are_refused(tmp_path, ids, target, problem):
    directory, _ = _saved(tmp_path)

    def specforge_ids(config):
        _strip_minieagle_keys(config)
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids

    _edit_config(directory, specforge_ids)
    message = _error(directory, target_config=target)
    assert str(directory / "config.json") in message and problem in message


def test_our_aux_layers_and_the_serving_ids_must_agree(tmp_path):
    directory, _ = _saved(tmp_path)
    _edit_config(directory, lambda c: c.update(minieagle_aux_layers=[1, 2, 3]))
    assert "disagree: the ids should be [0, 1, 2]" in _error(directory)


def test_d2t_and_t2d_that_disagree_are_refused(tmp_path):
    directory, _ = _saved(tmp_path)
    unmarked = int(np.setdiff1d(np.arange(V), IDS)[0])

    def mark_one_more(tensors):
        tensors["t2d"][unmarked] = True

    _edit_tensors(directory, mark_one_more)
    message = _error(directory)
    assert "model.safetensors" in message and "t2d marks 11 target ids but d2t has 10" in message


def test_a_decreasing_d2t_is_refused(tmp_path):
    directory, _ = _saved(tmp_path)
    _edit_tensors(directory, lambda t: t.update({"d2t": t["d2t"][::-1].copy()}))
    assert "do not increase" in _error(directory)


def test_a_draft_vocabulary_larger_than_the_target_s_is_refused(tmp_path):
    directory, _ = _saved(tmp_path)
    _edit_config(directory, lambda c: c.update(draft_vocab_size=V + 1))
    assert "draft_vocab_size=17 exceeds the target's vocab_size=16" in _error(directory)


def test_nan_weights_are_refused_with_their_count(tmp_path):
    directory, _ = _saved(tmp_path)

    def poison(tensors):
        tensors["midlayer.mlp.up_proj.weight"][0, :2] = np.nan

    _edit_tensors(directory, poison)
    assert "'midlayer.mlp.up_proj.weight' has 2 NaN and 0 inf values" in _error(directory)


@pytest.mark.parametrize(
    "drop, problem",
    [
        (("d2t", "t2d"), "there is no d2t or t2d, but draft_vocab_size=10 is below vocab_size=16"),
        (("t2d",), "there is d2t but no t2d"),
        (("d2t",), "there is t2d but no d2t"),
    ],
)
def test_a_reduced_vocabulary_without_its_buffers_is_refused(tmp_path, drop, problem):
    directory, _ = _saved(tmp_path)
    _edit_tensors(directory, lambda t: [t.pop(name) for name in drop])
    assert problem in _error(directory)


@pytest.mark.parametrize(
    "name, cast, problem",
    [
        ("d2t", np.int32, "d2t is int32 (10,); expected int64 (10,)"),
        ("t2d", np.int64, "t2d is int64 (16,); expected bool (16,)"),
        ("lm_head.weight", np.int64, "'lm_head.weight' has dtype int64; expected floating point"),
    ],
)
def test_tensors_of_the_wrong_dtype_are_refused(tmp_path, name, cast, problem):
    directory, _ = _saved(tmp_path)
    _edit_tensors(directory, lambda t: t.update({name: t[name].astype(cast)}))
    assert problem in _error(directory)


def test_a_transposed_lm_head_is_refused(tmp_path):
    directory, _ = _saved(tmp_path)
    _edit_tensors(directory, lambda t: t.update({"lm_head.weight": t["lm_head.weight"].T}))
    assert "'lm_head.weight' has shape (8, 10), expected (10, 8)" in _error(directory)


def test_a_truncated_weights_file_is_refused(tmp_path):
    directory, _ = _saved(tmp_path)
    path = directory / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    message = _error(directory)
    assert str(path) in message and "truncated or corrupt" in message


MALFORMED_CONFIGS = {
    "{not json": "is malformed JSON",
    "[1, 2]": "holds a JSON array, not an object",
    "architectures": "architectures=['LlamaForCausalLM'] is not an EAGLE-3 draft head",
    "draft_vocab_size": "draft_vocab_size='10' must be a JSON integer",
    "num_hidden_layers": "num_hidden_layers=2; minieagle's EAGLE-3 head is one decoder layer",
    "target_hidden_size": "target_hidden_size=16 differs from hidden_size=8",
    "eagle_config": "eagle_config=[1, 2, 3] must be a JSON object",
    "minieagle_head": "minieagle_head='eagle1' contradicts",
}
BAD_VALUES = {
    "architectures": ["LlamaForCausalLM"],
    "draft_vocab_size": "10",
    "num_hidden_layers": 2,
    "target_hidden_size": 16,
    "eagle_config": [1, 2, 3],
    "minieagle_head": "eagle1",
}


@pytest.mark.parametrize("bad", MALFORMED_CONFIGS)
def test_a_malformed_config_is_refused(tmp_path, bad):
    """bad: the whole file's text, or the key given a bad value."""
    directory, _ = _saved(tmp_path)
    if bad in BAD_VALUES:
        _edit_config(directory, lambda config: config.update({bad: BAD_VALUES[bad]}))
    else:
        (directory / "config.json").write_text(bad)
    message = _error(directory)
    assert str(directory / "config.json") in message and MALFORMED_CONFIGS[bad] in message


def test_missing_files_are_missing(tmp_path):
    with pytest.raises(MissingFileError, match=r"config.json is missing"):
        load_eagle3_head(tmp_path / "nothing")
    directory, _ = _saved(tmp_path)
    (directory / "model.safetensors").unlink()
    with pytest.raises(MissingFileError, match=r"model.safetensors is missing"):
        load_eagle3_head(directory)


def test_a_head_used_with_another_target_warns(tmp_path):
    target, other = tmp_path / "target", tmp_path / "other"
    for directory, value in ((target, 1.0), (other, 2.0)):  # two targets' weights
        directory.mkdir()
        save_file({"w": np.full(3, value, np.float32)}, str(directory / "model.safetensors"))
    head_dir, _ = _saved(tmp_path, target_dir=target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_eagle3_head(head_dir, target_dir=target)
    with pytest.warns(UserWarning, match=r"trained for .*target.* train a head for this target"):
        load_eagle3_head(head_dir, target_dir=other)


# ---------------------------------------------------------------------------- bad saves


def test_bad_saves_are_refused(tmp_path):
    cfg = Eagle3Config.from_target(TARGET, draft_vocab_size=N)
    head, vocab = _head(cfg), DraftVocab(IDS, V)
    with pytest.raises(InvalidInputError, match=r"maps 16 ids into 16, but the head has draft"):
        save_eagle3_head(tmp_path / "head", head, cfg, DraftVocab.full(V))
    with pytest.raises(InvalidInputError, match=r"pass the DraftVocab the head was trained with"):
        save_eagle3_head(tmp_path / "head", head, cfg, IDS)
    with pytest.raises(InvalidInputError, match=r"missing tensor 'norm.weight' of shape \(8,\)"):
        save_eagle3_head(
            tmp_path / "head", {k: v for k, v in head.items() if k != "norm.weight"}, cfg, vocab
        )
    poisoned = dict(head, **{"fc.weight": np.full_like(head["fc.weight"], np.inf)})
    with pytest.raises(InvalidInputError, match=r"'fc.weight' has 0 NaN and 192 inf values"):
        save_eagle3_head(tmp_path / "head", poisoned, cfg, vocab)
    for dtype in ("int64", "bfloat16"):
        with pytest.raises(InvalidInputError, match=rf"dtype='{dtype}' is not one of"):
            save_eagle3_head(tmp_path / "head", head, cfg, vocab, dtype=dtype)
    huge = dict(head, **{"fc.weight": head["fc.weight"] * 1e6})
    with pytest.raises(InvalidInputError, match=r"'fc.weight' overflows float16"):
        save_eagle3_head(tmp_path / "head", huge, cfg, vocab, dtype="float16")
    assert not (tmp_path / "head").exists()


def test_a_head_that_fuses_the_embeddings_saves_without_serving_ids(tmp_path):
    """Layer 0's input has no output-of-layer id; the file must not pretend it has one."""
    with pytest.warns(UserWarning, match=r"SpecForge/SGLang ids cannot name \(id -1\)"):
        directory, (_, cfg, _) = _saved(tmp_path, aux=(0, 3, 6))
    assert spec_problems(directory, aux=(0, 3, 6), serving_ids=None) == []
    assert load_eagle3_head(directory)[1] == cfg


# ----------------------------------------------------------------------- the official EAGLE code


def official_eagle3_module(config: dict) -> dict[str, tuple]:
    """The tensors of the official EAGLE-3 head module (SafeAILab/EAGLE, branch main,
    eagle/model/cnets.py, `Model.__init__`), name -> shape, listed by hand from its source:
    its own embed_tokens [V, d], lm_head [N, d], fc reading 3 * target_hidden_size (3 * d when
    the config has none), the decoder layer `midlayer` with head_dim = d // heads, the buffers
    d2t [N] and t2d [V]."""
    d, v, n = config["hidden_size"], config["vocab_size"], config["draft_vocab_size"]
    heads, kv, inner = (
        config[k] for k in ("num_attention_heads", "num_key_value_heads", "intermediate_size")
    )
    h = d // heads
    shapes = {
        "embed_tokens.weight": (v, d),
        "lm_head.weight": (n, d),
        "fc.weight": (d, 3 * config.get("target_hidden_size", d)),
        "norm.weight": (d,),
        "midlayer.hidden_norm.weight": (d,),
        "midlayer.input_layernorm.weight": (d,),
        "midlayer.post_attention_layernorm.weight": (d,),
        "midlayer.self_attn.q_proj.weight": (heads * h, 2 * d),
        "midlayer.self_attn.k_proj.weight": (kv * h, 2 * d),
        "midlayer.self_attn.v_proj.weight": (kv * h, 2 * d),
        "midlayer.self_attn.o_proj.weight": (d, heads * h),
        "midlayer.mlp.gate_proj.weight": (inner, d),
        "midlayer.mlp.up_proj.weight": (inner, d),
        "midlayer.mlp.down_proj.weight": (d, inner),
        "d2t": (n,),
        "t2d": (v,),
    }
    if v == n:  # ea_model.py deletes both buffers when the vocabularies are the same size
        del shapes["d2t"], shapes["t2d"]
    return shapes


def official_eagle3_load(head_dir: Path, target_dir: Path) -> tuple[dict, set]:
    """What `EaModel.from_pretrained(use_eagle3=True, ...)` of the official code leaves in its
    head module, mimicked in NumPy from its rules (ea_model.py, cnets.py): (state, the names left
    at their initial values). The module starts from random values (nn.Embedding draws N(0, 1));
    only when config.json has no `target_hidden_size` does it read the target's embedding,
    through the target's model.safetensors.index.json; then it loads the head's
    model.safetensors with strict=False: a name it lacks is ignored, a name the file lacks keeps
    its value, a shape that differs is an error."""
    config = json.loads((head_dir / "config.json").read_text())
    rng = np.random.default_rng(0)
    shapes = official_eagle3_module(config)
    state = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    initial = set(state)
    if "target_hidden_size" not in config:
        index = json.loads((target_dir / "model.safetensors.index.json").read_text())
        shard = target_dir / index["weight_map"]["model.embed_tokens.weight"]
        with safe_open(shard, framework="np") as f:
            state["embed_tokens.weight"] = f.get_tensor("model.embed_tokens.weight")
        initial.discard("embed_tokens.weight")
    with safe_open(head_dir / "model.safetensors", framework="np") as f:
        for name in f.keys():
            if name in shapes:
                tensor = f.get_tensor(name)
                assert tensor.shape == shapes[name], f"size mismatch for {name}"
                state[name] = tensor
                initial.discard(name)
    return state, initial


@pytest.fixture
def official_target(tmp_path):
    """A target checkpoint for TARGET (one model.safetensors, no index: as minieagle saves)."""
    from minieagle.checkpoint import save_checkpoint
    from minieagle.model import init_params

    return save_checkpoint(tmp_path / "target", init_params(TARGET, seed=3), TARGET)


def test_the_official_code_drafts_with_a_random_embedding_from_our_plain_head(
    tmp_path, official_target
):
    """The bug the export fixes: our head carries target_hidden_size, so the official loader
    skips the target's embedding, and the file has none: embed_tokens stays random, silently."""
    head_dir, _ = _saved(tmp_path, target_dir=official_target)
    _, initial = official_eagle3_load(head_dir, official_target)
    assert initial == {"embed_tokens.weight"}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_official_export_loads_every_tensor_into_the_official_module(
    tmp_path, official_target, capsys, dtype
):
    from minieagle import cli
    from minieagle.checkpoint import load_checkpoint

    head_dir, (head, _, vocab) = _saved(tmp_path, target_dir=official_target)
    out = tmp_path / "official"
    argv = ["export", "eagle3", "--head", str(head_dir), "--target", str(official_target)]
    assert cli.main([*argv, "--out", str(out), "--dtype", dtype]) == 0
    assert capsys.readouterr().out == f"EAGLE-3 head with embed_tokens.weight written to {out}\n"
    state, initial = official_eagle3_load(out, official_target)
    assert initial == set()
    target, _, _ = load_checkpoint(official_target)
    np.testing.assert_array_equal(
        state["embed_tokens.weight"], target["model.embed_tokens.weight"].astype(dtype)
    )
    for name, value in head.items():
        np.testing.assert_array_equal(state[name], value.astype(dtype))
    np.testing.assert_array_equal(state["d2t"], vocab.d2t)
    np.testing.assert_array_equal(state["t2d"], vocab.t2d)
    assert json.loads((out / "config.json").read_text())["target_hidden_size"] == D  # SGLang, vLLM
    back, _, back_vocab = load_eagle3_head(out, dtype=None)  # ours reads it, dropping the embedding
    assert set(back) == set(head) and back_vocab.ids.tolist() == IDS.tolist()


def test_heads_the_official_code_cannot_run_as_trained_are_refused(tmp_path, official_target):
    from minieagle.checkpoint import save_checkpoint
    from minieagle.heads.eagle3_io import export_official
    from minieagle.model import init_params

    head_dir, _ = _saved(tmp_path, aux=(1, 3, 5), target_dir=official_target)
    with pytest.raises(
        InvalidInputError,
        match=r"target layers \[1, 3, 5\], but the official EAGLE code always fuses \[2, 3, 4\]",
    ):
        export_official(head_dir, official_target, tmp_path / "out")
    other = TARGET.replace(hidden_size=16, head_dim=4)
    wider = save_checkpoint(tmp_path / "wider", init_params(other, seed=1), other)
    head_dir, _ = _saved(tmp_path, target_dir=official_target)
    with pytest.raises(InvalidInputError, match=r"has hidden_size=8 but the target .* has 16"):
        export_official(head_dir, wider, tmp_path / "out")
    wide_heads = TARGET.replace(head_dim=8)  # 2 heads of 8 on a width of 8
    target = save_checkpoint(tmp_path / "wide", init_params(wide_heads, seed=1), wide_heads)
    head_dir, _ = _saved(tmp_path, target=wide_heads, target_dir=target)
    with pytest.raises(InvalidInputError, match=r"head_dim=8 x 2 heads != hidden_size=8; the off"):
        export_official(head_dir, target, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.real_model
def test_the_shipped_smollm2_head_exports_for_the_official_code(tmp_path, smollm2_dir):
    """The head the issue measured (top-1 agreement 187 / 1018 with a random embedding): its
    export leaves nothing of the official module at its initial value."""
    from minieagle.checkpoint import load_checkpoint
    from minieagle.heads.eagle3_io import export_official
    from minieagle.shipped import resolve_head

    out = export_official(resolve_head("smollm2-eagle3"), smollm2_dir, tmp_path / "official")
    state, initial = official_eagle3_load(out, smollm2_dir)
    assert initial == set()
    target, _, _ = load_checkpoint(smollm2_dir, with_tokenizer=False)
    np.testing.assert_array_equal(
        state["embed_tokens.weight"], target["model.embed_tokens.weight"].astype(np.float16)
    )
