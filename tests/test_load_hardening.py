"""What loading and `generate` do with bad files and bad arguments (issue 8): explained errors
that name the file or the value, never a bare traceback or a silently wrong run.

Checkpoints and EAGLE heads share one reader (`read_config_json`, `read_tensors`), so each kind
of damage is tried on both. Unreadable files are simulated (the tests may run as root, whom
chmod does not stop). Heads and draft models record the target they were trained for and warn
when used with another. `generate` refuses text and non-integers, accepts a prompt that fills
the context, and a context of 10^9 positions costs only the positions used.
"""

from __future__ import annotations

import errno
import hashlib
import json
import pathlib
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from minieagle import checkpoint, model
from minieagle.checkpoint import config_from_hf_dict, config_to_hf_dict, load_checkpoint
from minieagle.checkpoint import save_checkpoint as save_target
from minieagle.cli import DEFAULT_HEAD, DEFAULT_MODEL
from minieagle.config import preset
from minieagle.drafters.draft_model import DraftModelDrafter
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.generate import generate, greedy_reference
from minieagle.heads.eagle1 import Eagle1Config, init_head, load_head, save_head
from minieagle.kvcache import KVCache

NANO = preset("nano")
HEAD_CFG = Eagle1Config.from_target(NANO)


@pytest.fixture
def target(tmp_path):
    return save_target(tmp_path / "target", model.init_params(NANO, seed=0), NANO)


@pytest.fixture
def head(tmp_path):
    return save_head(tmp_path / "head", init_head(HEAD_CFG, seed=1), HEAD_CFG)


# Every damage below is tried on a checkpoint and on a head: they share one reading path.
LOADERS = pytest.mark.parametrize("kind", ["target", "head"])


def _saved(kind, request):
    """The directory the fixture named `kind` saved."""
    return request.getfixturevalue(kind)


def _load(kind, directory):
    return load_checkpoint(directory) if kind == "target" else load_head(directory)


def _rewrite_weights(directory, edit) -> None:
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"))


# ---------------------------------------------------------------------------- 1. damaged files


@LOADERS
def test_nan_and_inf_in_the_weights_are_counted_per_tensor(kind, request):
    directory = _saved(kind, request)
    name = "fc.weight" if kind == "head" else "model.norm.weight"

    def poison(tensors):
        tensors[name].reshape(-1)[:3] = np.nan
        tensors[name].reshape(-1)[5] = np.inf

    _rewrite_weights(directory, poison)
    with pytest.raises(InvalidInputError) as info:
        _load(kind, directory)
    message = str(info.value)
    assert f"{directory / 'model.safetensors'} does not match" in message
    assert f"tensor {name!r} has 3 NaN and 1 inf values" in message


@LOADERS
def test_integer_weights_are_refused(kind, request):
    directory = _saved(kind, request)
    name = "fc.weight" if kind == "head" else "model.norm.weight"
    _rewrite_weights(directory, lambda t: t.update({name: t[name].astype(np.int32)}))
    with pytest.raises(InvalidInputError, match=f"{name}' has dtype int32; expected floating"):
        _load(kind, directory)


@LOADERS
def test_truncated_weights_name_the_file(kind, request):
    directory = _saved(kind, request)
    path = directory / "model.safetensors"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(InvalidInputError) as info:
        _load(kind, directory)
    assert f"{path} is truncated or corrupt" in str(info.value)
    assert "re-save or re-download it" in str(info.value)


@LOADERS
@pytest.mark.parametrize(
    ("text", "problem"),
    [('{"vocab_size": 320,', "is malformed JSON"), ("[1, 2]", "holds a JSON array, not an object")],
)
def test_bad_config_json_names_the_file(kind, request, text, problem):
    directory = _saved(kind, request)
    (directory / "config.json").write_text(text)
    with pytest.raises(InvalidInputError, match=f"{directory / 'config.json'} {problem}"):
        _load(kind, directory)


def test_a_nan_head_is_refused_on_save_with_the_count(tmp_path):
    head = init_head(HEAD_CFG, seed=1)
    head["layers.0.mlp.up_proj.weight"][0, :2] = np.nan
    with pytest.raises(InvalidInputError, match="'layers.0.mlp.up_proj.weight' has 2 NaN and 0"):
        save_head(tmp_path / "head", head, HEAD_CFG)


def test_a_head_bias_flag_must_be_a_json_boolean(head):
    d = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps(d | {"bias": "false"}))
    with pytest.raises(InvalidInputError, match="bias='false' must be a JSON boolean"):
        load_head(head)


# ---------------------------------------------------------------------------- 2. unreadable


@LOADERS
@pytest.mark.parametrize("file", ["config.json", "model.safetensors"])
def test_a_directory_where_a_file_should_be_is_not_called_missing(kind, request, file):
    directory = _saved(kind, request)
    (directory / file).unlink()
    (directory / file).mkdir()
    with pytest.raises(InvalidInputError, match=f"{directory / file} is a directory where a file"):
        _load(kind, directory)


def test_a_checkpoint_path_that_is_a_file_is_not_called_missing(target):
    with pytest.raises(InvalidInputError, match="is a file, not a checkpoint directory"):
        load_checkpoint(target / "config.json")


def _deny(path):
    def raise_permission_error(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    return raise_permission_error


def _denied_for(path, original):
    """`original` (a method or function of a path), except that `path` raises EACCES."""

    def patched(first, *args, **kwargs):
        if str(first) == str(path):
            _deny(path)()
        return original(first, *args, **kwargs)

    return patched


@LOADERS
def test_an_unreadable_config_is_reported_as_unreadable(kind, request, monkeypatch):
    directory = _saved(kind, request)
    path = directory / "config.json"
    monkeypatch.setattr(pathlib.Path, "read_bytes", _denied_for(path, pathlib.Path.read_bytes))
    monkeypatch.setattr(pathlib.Path, "read_text", _denied_for(path, pathlib.Path.read_text))
    with pytest.raises(InvalidInputError, match=f"cannot read {path}: permission denied; fix"):
        _load(kind, directory)


@LOADERS
def test_unreadable_weights_are_reported_as_unreadable(kind, request, monkeypatch):
    directory = _saved(kind, request)
    path = directory / "model.safetensors"
    monkeypatch.setattr(checkpoint, "safe_open", _denied_for(path, checkpoint.safe_open))
    with pytest.raises(InvalidInputError, match=f"cannot read {path}: permission denied; fix"):
        _load(kind, directory)


@LOADERS
def test_a_file_that_cannot_be_looked_at_is_not_called_missing(kind, request, monkeypatch):
    """stat() itself denied, as for a file in a directory without search permission."""
    directory = _saved(kind, request)
    path = directory / "model.safetensors"
    monkeypatch.setattr(pathlib.Path, "stat", _denied_for(path, pathlib.Path.stat))
    with pytest.raises(InvalidInputError, match=f"cannot read {path}: permission denied"):
        _load(kind, directory)


def test_a_missing_head_file_is_still_missing(head):
    (head / "model.safetensors").unlink()
    with pytest.raises(MissingFileError, match=r"model\.safetensors is missing; train a head"):
        load_head(head)


# ---------------------------------------------------------------------------- 3. config types


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("tie_word_embeddings", "false", "string"),
        ("tie_word_embeddings", 0, "integer"),
        ("hidden_size", "32", "string"),
        ("hidden_size", 32.0, "number"),
        ("num_hidden_layers", True, "boolean"),
        ("max_position_embeddings", None, None),  # null: HF's default, not an error
        ("rms_norm_eps", "1e-5", "string"),
        ("rope_theta", "10000", "string"),
        ("attention_bias", "false", "string"),
        ("bos_token_id", 1.0, "number"),
    ],
)
def test_config_values_must_have_their_json_type(key, value, kind):
    d = config_to_hf_dict(NANO) | {key: value}
    d.pop("rope_parameters")  # so a top-level rope_theta is the only spelling
    if kind is None:
        assert config_from_hf_dict(d).max_position_embeddings == 2048
        return
    with pytest.raises(InvalidInputError) as info:
        config_from_hf_dict(d)
    message = str(info.value)
    assert f"{key}={value!r} must be" in message and f"not a JSON {kind}" in message
    assert "without quotes" in message  # the fix


def test_a_string_false_is_not_read_as_true(target):
    """The reported case, through load_checkpoint: the message names config.json."""
    d = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps(d | {"tie_word_embeddings": "false"}))
    with pytest.raises(InvalidInputError) as info:
        load_checkpoint(target)
    assert str(target / "config.json") in str(info.value)
    assert "tie_word_embeddings='false' must be a JSON boolean, not a JSON string" in str(
        info.value
    )


@pytest.mark.parametrize(("key", "value"), [("rope_theta", float("nan")), ("rms_norm_eps", -1.0)])
def test_config_numbers_must_be_finite_and_positive(key, value):
    d = config_to_hf_dict(NANO) | {key: value}
    d.pop("rope_parameters")
    with pytest.raises(InvalidInputError, match=f"{key}="):
        config_from_hf_dict(d)


# ---------------------------------------------------------------------------- 4. trained for whom


@pytest.fixture
def other_target(tmp_path):
    """A target with the same shapes as `target`, other weights."""
    return save_target(tmp_path / "other", model.init_params(NANO, seed=5), NANO)


def _weights_digest(path) -> str:
    """sha256 of a safetensors file less its header's metadata: the tensor entries (sorted JSON)
    then the data bytes, as the file format lays them out."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    del header["__metadata__"]
    entries = json.dumps(header, sort_keys=True).encode()
    return hashlib.sha256(entries + data[8 + length :]).hexdigest()[:16]


def test_a_head_records_the_fingerprint_of_its_target(tmp_path, target):
    save_head(tmp_path / "h", init_head(HEAD_CFG, seed=1), HEAD_CFG, target_dir=target)
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    digest = _weights_digest(target / "model.safetensors")
    assert config["minieagle_target_fingerprint"] == digest
    assert checkpoint.target_fingerprint(target) == digest
    assert config["minieagle_target"] == str(target)


def test_the_same_weights_saved_again_keep_their_fingerprint(tmp_path):
    """safetensors writes header metadata in no fixed order, and a re-save or a fresh import
    records another version or notes: none of it may change a target's identity (else a shipped
    head warns on every machine that imports its target afresh). Other weights still differ."""
    params = model.init_params(NANO, seed=3)
    notes = {f"note_{i}": f"text {i}" for i in range(8)}
    first = checkpoint.target_fingerprint(save_target(tmp_path / "a", params, NANO))
    for k in range(3):
        again = save_target(tmp_path / f"b{k}", params, NANO, metadata=notes)
        assert checkpoint.target_fingerprint(again) == first
    changed = dict(params, **{"model.norm.weight": params["model.norm.weight"] * 2})
    assert checkpoint.target_fingerprint(save_target(tmp_path / "c", changed, NANO)) != first


def test_a_head_used_with_another_target_warns(tmp_path, target, other_target):
    save_head(tmp_path / "h", init_head(HEAD_CFG, seed=1), HEAD_CFG, target_dir=target)
    a, b = checkpoint.target_fingerprint(target), checkpoint.target_fingerprint(other_target)
    assert a != b
    expected = (
        f"this head was trained for {target} (fingerprint {a}), not {other_target} ({b}); "
        "acceptance will be poor — train a head for this target"
    )
    with pytest.warns(UserWarning) as record:
        load_head(tmp_path / "h", target_dir=other_target)
    assert [str(w.message) for w in record] == [expected]
    assert record[0].filename == __file__  # points at the caller's line, not inside minieagle
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_head(tmp_path / "h", target_dir=target)  # its own target: silent
        load_head(tmp_path / "h")  # no target given: nothing to compare


def test_a_head_without_a_fingerprint_loads_silently(head, other_target):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_head(head, target_dir=other_target)
    assert checkpoint.check_trained_for(head, other_target) is None


def test_a_draft_model_records_its_target_in_its_metadata(tmp_path, target, other_target):
    draft = save_target(
        tmp_path / "draft",
        model.init_params(NANO.replace(num_hidden_layers=1), seed=2),
        NANO.replace(num_hidden_layers=1),
        metadata=checkpoint.target_record(target),
    )
    assert checkpoint.check_trained_for(draft, target, kind="draft model") is True
    with pytest.warns(UserWarning, match=f"this draft model was trained for {target} "):
        assert checkpoint.check_trained_for(draft, other_target, kind="draft model") is False


def test_the_shipped_head_records_the_shipped_target():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_head(DEFAULT_HEAD, target_dir=DEFAULT_MODEL)
    assert checkpoint.check_trained_for(DEFAULT_HEAD, DEFAULT_MODEL, kind="head") is True


# ---------------------------------------------------------------------------- 5. generate's args

SMALL_CONTEXT = NANO.replace(max_position_embeddings=32)
PARAMS = model.init_params(SMALL_CONTEXT, seed=3, dtype=np.float64)


def test_text_is_not_read_as_token_ids():
    with pytest.raises(InvalidInputError) as info:
        generate(PARAMS, SMALL_CONTEXT, "12", max_new_tokens=2)
    assert str(info.value) == (
        "prompt_ids is a str; encode text with the tokenizer first: "
        "tokenizer.encode(text, add_bos=True)"
    )


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([1, True], r"prompt_ids\[1\]=True is a bool, not a token id"),
        ([1, 2.0], r"prompt_ids\[1\]=2.0 is a float, not a token id"),
        ([1, np.float32(2)], r"prompt_ids\[1\]=.* is a float32, not a token id"),
        ([[1, 2]], r"prompt_ids\[0\]=\[1, 2\] is a list"),
        (np.ones((2, 2), dtype=np.int64), r"an array of shape \(2, 2\)"),
        (np.array([1.0, 2.0]), "dtype float64; pass a 1-D integer array"),
        (None, "prompt_ids is a NoneType"),
        (5, "prompt_ids is a int"),
        (b"12", "prompt_ids is a bytes"),
        ([1, 2**70], f"token id {2**70} is outside"),
    ],
)
def test_prompts_that_are_not_token_ids_are_refused(prompt, message):
    with pytest.raises(InvalidInputError, match=message):
        generate(PARAMS, SMALL_CONTEXT, prompt, max_new_tokens=2)


@pytest.mark.parametrize("count", [1.5, float("nan"), True, "8", None, np.float64(2)])
def test_max_new_tokens_must_be_a_whole_number(count):
    with pytest.raises(InvalidInputError, match=r"max_new_tokens=.* pass a whole number"):
        generate(PARAMS, SMALL_CONTEXT, [1, 5], max_new_tokens=count)


def test_numpy_ints_are_token_ids_and_counts():
    expected = generate(PARAMS, SMALL_CONTEXT, [1, 5, 6], max_new_tokens=3).tokens
    ids = np.array([1, 5, 6], dtype=np.int32)
    assert generate(PARAMS, SMALL_CONTEXT, ids, max_new_tokens=np.int64(3)).tokens == expected
    assert generate(PARAMS, SMALL_CONTEXT, (1, 5, 6), max_new_tokens=3).tokens == expected


def _drafters():
    draft_config = SMALL_CONTEXT.replace(num_hidden_layers=1)
    head_cfg = Eagle1Config.from_target(SMALL_CONTEXT)
    return {
        "vanilla": lambda: None,
        "draft-model": lambda: DraftModelDrafter(
            model.init_params(draft_config, seed=4), draft_config
        ),
        "eagle1": lambda: Eagle1Drafter(
            PARAMS, SMALL_CONTEXT, init_head(head_cfg, 6, np.float64), head_cfg
        ),
    }


@pytest.mark.parametrize("method", ["vanilla", "draft-model", "eagle1"])
def test_a_prompt_that_fills_the_context_gets_one_token(method):
    """Prefill n - 1 positions, verify the root at position n - 1, emit what it predicts."""
    n = SMALL_CONTEXT.max_position_embeddings
    prompt = [1] + [(7 * i) % 300 + 3 for i in range(n - 1)]
    result = generate(
        PARAMS, SMALL_CONTEXT, prompt, drafter=_drafters()[method](), max_new_tokens=10
    )
    assert result.tokens == greedy_reference(PARAMS, SMALL_CONTEXT, prompt, 1)
    assert result.stop_reason == "context_full"
    with pytest.raises(InvalidInputError, match=f"the prompt has {n + 1} tokens"):
        generate(PARAMS, SMALL_CONTEXT, [*prompt, 1], max_new_tokens=10)


# ---------------------------------------------------------------------------- 6. cache growth

HUGE_CONTEXT = NANO.replace(max_position_embeddings=10**9)


class _RecordedCache(KVCache):
    """A KVCache that remembers every instance, to look at its buffers after `generate`."""

    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _RecordedCache.made.append(self)


@pytest.mark.parametrize("method", ["vanilla", "draft-model", "eagle1"])
def test_a_huge_context_allocates_only_what_is_used(monkeypatch, method):
    """max_position_embeddings = 10^9 used to allocate every position up front (MemoryError).
    The prompt crosses the first buffer size, so the caches grow during decoding, and the tokens
    still equal the cache-free oracle's."""
    monkeypatch.setattr(_RecordedCache, "made", [])
    for module in ("generate", "drafters.draft_model", "heads.eagle1"):
        monkeypatch.setattr(f"minieagle.{module}.KVCache", _RecordedCache)
    params = model.init_params(HUGE_CONTEXT, seed=3, dtype=np.float64)
    drafter = None
    if method == "draft-model":
        draft_config = HUGE_CONTEXT.replace(num_hidden_layers=1)
        drafter = DraftModelDrafter(model.init_params(draft_config, seed=4), draft_config)
    elif method == "eagle1":
        head_cfg = Eagle1Config.from_target(HUGE_CONTEXT)
        head = init_head(head_cfg, seed=6, dtype=np.float64)
        drafter = Eagle1Drafter(params, HUGE_CONTEXT, head, head_cfg, choices="chain:3")
    prompt = [1] + [(7 * i) % 300 + 3 for i in range(250)]
    result = generate(params, HUGE_CONTEXT, prompt, drafter=drafter, max_new_tokens=12)
    assert result.tokens == greedy_reference(params, HUGE_CONTEXT, prompt, 12)
    assert len(_RecordedCache.made) == (2 if drafter else 1)
    for cache in _RecordedCache.made:
        assert cache.capacity == 10**9
        assert cache.length > KVCache.INITIAL_POSITIONS
        for buffer in cache.keys + cache.values:
            assert buffer.shape[2] == 2 * KVCache.INITIAL_POSITIONS  # grown once, by doubling


class _Preallocated(KVCache):
    INITIAL_POSITIONS = 10**6  # more than any capacity below: every position from the start


def test_a_grown_cache_equals_a_preallocated_one():
    """The same appends, keeps and crops on a cache that starts small and grows, on one that
    holds every position from the start, and on a plain list of arrays (the oracle)."""
    rng = np.random.default_rng(0)
    like = np.zeros(1, dtype=np.float64)
    grown, full = (cls(2, 1, 2, 4, 3000, like) for cls in (KVCache, _Preallocated))
    assert grown.keys[0].shape[2] == 256 and full.keys[0].shape[2] == 3000
    oracle = [np.zeros((1, 2, 0, 4)) for _ in range(4)]  # keys of layers 0, 1, then values
    sizes = []
    while full.length < 2500:
        start, T = full.length, int(rng.integers(1, 60))
        new = [rng.standard_normal((1, 2, T, 4)) for _ in range(4)]
        oracle = [np.concatenate([o, x], axis=2) for o, x in zip(oracle, new, strict=True)]
        for cache in (grown, full):
            for layer in (0, 1):
                keys, values = cache.append(layer, new[layer], new[2 + layer])
                assert np.array_equal(keys, oracle[layer])  # the valid keys, new ones included
                assert np.array_equal(values, oracle[2 + layer])
        if rng.random() < 0.5:  # keep an increasing subset of the block, like tree acceptance
            kept = sorted(rng.choice(T, size=int(rng.integers(0, T + 1)), replace=False))
            for cache in (grown, full):
                cache.keep(start, kept)
            oracle = [
                np.concatenate([o[:, :, :start], o[:, :, start:][:, :, kept]], 2) for o in oracle
            ]
        elif rng.random() < 0.2:
            for cache in (grown, full):
                cache.crop(start)
            oracle = [o[:, :, :start] for o in oracle]
        sizes.append(grown.keys[0].shape[2])
        for cache in (grown, full):
            valid = [b[:, :, : cache.length] for b in cache.keys + cache.values]
            assert all(np.array_equal(v, o) for v, o in zip(valid, oracle, strict=True))
    assert sorted(set(sizes)) == [256, 512, 1024, 2048, 3000]  # doubled, capped at capacity
    too_many = np.zeros((1, 2, 3001 - grown.length, 4))
    with pytest.raises(InvalidInputError, match="KV cache overflow"):
        grown.append(0, too_many, too_many)
