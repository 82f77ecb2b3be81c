"""The feature cache (minieagle/feature_cache.py) and the chat self-distillation data of head
training: cached features are the target's to float16 precision; a build killed part way resumes
without recomputing what is on disk and ends identical to an uninterrupted one; a cache made for
other windows or another target is refused; a cache of more keys serves fewer; both recipes build
the same batch from cached hidden states as from a target forward; a head trains on the cache;
chat prompts are the template's rendering of a request about a corpus passage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from minieagle import feature_cache, model
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import PRETRAINED
from minieagle.config import preset
from minieagle.errors import InvalidInputError
from minieagle.feature_cache import FeatureCache, tile_windows
from minieagle.train_eagle import (
    Eagle1Recipe,
    Eagle3Recipe,
    EagleTrainConfig,
    chat_prompt,
    generated_stream,
    train_eagle_head,
)

CONFIG = preset("nano")
KEYS = (1, "final")


@pytest.fixture(scope="module")
def params():
    return model.init_params(CONFIG, seed=0, dtype=np.float32)


def _windows(count=10, width=9, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, CONFIG.vocab_size, (count, width)), np.arange(count) % 2


def _build(directory, params, windows, sources, keys=KEYS, fingerprint="t0", chunk=3):
    return FeatureCache.build(
        directory, params, CONFIG, windows, sources, keys, fingerprint=fingerprint, chunk=chunk,
        progress=False,
    )  # fmt: skip


def test_cached_features_are_the_targets_to_float16_precision(tmp_path, params):
    windows, sources = _windows()
    cache = _build(tmp_path / "c", params, windows, sources)
    assert len(cache) == 10
    got_windows, hidden = cache.batch([7, 2, 2])
    np.testing.assert_array_equal(got_windows, windows[[7, 2, 2]])
    _, reference, _ = model.forward(params, CONFIG, windows[[7, 2, 2]], output_hidden=KEYS)
    for key in KEYS:
        assert hidden[key].dtype == np.float32
        scale = np.max(np.abs(reference[key]))
        assert np.max(np.abs(hidden[key] - reference[key])) <= 1e-3 * scale
        assert np.max(np.abs(hidden[key] - reference[key])) > 0  # really stored in float16


def test_a_killed_build_resumes_where_the_disk_says_and_ends_the_same(
    tmp_path, params, monkeypatch
):
    windows, sources = _windows()
    whole = _build(tmp_path / "whole", params, windows, sources)
    real_forward, calls = model.forward, []

    def counted_forward(*args, **kwargs):  # a kill during the third chunk of the first build
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(feature_cache.model, "forward", counted_forward)
    with pytest.raises(KeyboardInterrupt):
        _build(tmp_path / "killed", params, windows, sources)
    assert json.loads((tmp_path / "killed" / "progress.json").read_text()) == {"done": 6}
    resumed = _build(tmp_path / "killed", params, windows, sources)
    assert len(calls) == 3 + 2  # then windows 6..8 and 9: the two chunks not yet on disk
    for key in KEYS:
        np.testing.assert_array_equal(resumed.hidden[key], whole.hidden[key])


def test_a_cache_for_other_windows_keys_or_target_is_refused(tmp_path, params):
    windows, sources = _windows()
    _build(tmp_path / "c", params, windows, sources)
    other, _ = _windows(seed=1)
    with pytest.raises(InvalidInputError, match=r"made for other windows_checksum.*delete"):
        _build(tmp_path / "c", params, other, sources)
    with pytest.raises(InvalidInputError, match=r"target_fingerprint"):
        _build(tmp_path / "c", params, windows, sources, fingerprint="another")
    with pytest.raises(InvalidInputError, match=r"other keys"):
        _build(tmp_path / "c", params, windows, sources, keys=(2, "final"))
    fewer = _build(tmp_path / "c", params, windows, sources, keys=("final",))
    assert fewer.keys == KEYS  # a cache of more keys serves fewer


def test_tile_windows_covers_each_stream_without_overlap():
    streams = [np.arange(100), np.arange(1000, 1025)]
    windows, sources = tile_windows(streams, 9, np.random.default_rng(0))
    assert windows.shape == (12, 10) and sorted(sources.tolist()) == [0] * 10 + [1] * 2
    assert sorted(windows[:, 0].tolist()) == [*range(0, 100, 10), 1000, 1010]
    assert len(tile_windows(streams, 9, np.random.default_rng(0), max_windows=5)[0]) == 5
    with pytest.raises(InvalidInputError, match="lower --seq-len"):
        tile_windows([np.arange(5)], 9, np.random.default_rng(0))


@pytest.fixture(scope="module")
def small():
    return load_checkpoint(PRETRAINED / "small", dtype=np.float32)


@pytest.mark.parametrize("recipe_class", [Eagle1Recipe, Eagle3Recipe])
def test_a_batch_from_cached_hidden_states_equals_one_from_the_forward(small, recipe_class):
    params, config, _ = small
    head = "eagle1" if recipe_class is Eagle1Recipe else "eagle3"
    cfg = EagleTrainConfig(head=head, target=str(PRETRAINED / "small"), seq_len=16)
    windows = np.random.default_rng(0).integers(0, config.vocab_size, (2, 17))
    recipe = recipe_class(cfg, params, config, [windows.reshape(-1)])
    _, hidden, _ = model.forward(params, config, windows, output_hidden=recipe.feature_keys)
    direct, cached = recipe.target_batch(windows), recipe.batch_from_hidden(windows, hidden)
    for a, b in zip(direct, cached, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_a_head_trains_on_cached_features(tmp_path):
    cfg = EagleTrainConfig(
        target=str(PRETRAINED / "small"), out_dir=str(tmp_path / "run"), cache_features=True,
        steps=40, batch_size=4, seq_len=32, max_train_chars=20_000, eval_every=40,
        eval_batches=1, warmup_steps=5, lr=8e-3,
    )  # fmt: skip
    log = train_eagle_head(cfg, progress=False)
    first, last = log["evals"][0], log["evals"][-1]
    assert last["val_loss_prose"] < first["val_loss_prose"]
    meta = json.loads((tmp_path / "run" / "features" / "meta.json").read_text())
    assert meta["keys"] == ["final"] and meta["dtype"] == "float16"
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_prompts_wrap_a_corpus_passage_in_the_template(small):
    _, _, tokenizer = small
    passage = tokenizer.encode("def read_config(path):")
    text = tokenizer.decode(chat_prompt(tokenizer, CHATML, "code", passage))
    assert text.startswith("<|im_start|>user\nExplain what this Python code does")
    assert "```python\ndef read_config(path):\n```" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_chat_self_distillation_answers_each_request(small, tmp_path):
    params, config, tokenizer = small
    stream = np.asarray(tokenizer.encode("The garbage collector frees memory. " * 20))
    cfg = EagleTrainConfig(
        target=str(PRETRAINED / "small"), seq_len=48, data="generated", generated_tokens=120,
        prompt_tokens=8, chat_prompts=True, generate_temperature=0.0,
    )  # fmt: skip
    ids = generated_stream(
        params, config, [stream], cfg, tmp_path / "chat.npy", chat=(tokenizer, CHATML, ["prose"])
    )
    text = tokenizer.decode(ids.tolist())
    assert text.count("<|im_start|>user\nExplain the following passage") >= 2
    assert text.count("<|im_start|>assistant\n") == text.count("<|im_start|>user")
    again = generated_stream(params, config, [stream], cfg, tmp_path / "chat.npy")
    np.testing.assert_array_equal(again, ids)  # cached on disk
    assert Path(tmp_path / "chat.npy").is_file()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"chat_prompts": True}, "data='corpus' generates none"),
        ({"max_windows": 10}, "pass --cache-features or --data features with it"),
    ],
)
def test_options_that_would_be_ignored_are_refused(changes, message):
    with pytest.raises(InvalidInputError, match=message):
        EagleTrainConfig(target=str(PRETRAINED / "small"), **changes)
