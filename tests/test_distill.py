"""Self-distillation (minieagle/distill.py): the batched forward equals one sequence at a time,
the batched sampler writes what the target would write and records its true features, runs are
deterministic, resumable and refuse other settings; heads train from the shards, and a run
branched off a longer warmup-stable-decay run equals its own run from scratch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from minieagle import inference, model
from minieagle.checkpoint import load_checkpoint
from minieagle.distill import (
    DistillConfig,
    decode_batch,
    open_shards,
    run_distill,
    sample_rows,
    shard_dir,
)
from minieagle.errors import InvalidInputError
from minieagle.feature_cache import TARGET_LSE, TARGET_TOP, FeaturePool
from minieagle.generate import generate
from minieagle.kvcache import KVCache
from minieagle.optim import wsd_lr
from minieagle.sampling import SamplingParams
from minieagle.train_eagle import EagleTrainConfig, branch_from, train_eagle_head

SMALL = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained" / "small"
KEYS = (2, 6, 9, "final")


@pytest.fixture(scope="module")
def small64():
    return load_checkpoint(SMALL, dtype=np.float64)


def test_the_batched_forward_equals_each_sequence_alone(small64):
    params, config, _ = small64
    target = inference.prepare(params, config)
    rng = np.random.default_rng(0)
    lengths = [5, 9, 1, 7]
    prompts = [rng.integers(0, config.vocab_size, n) for n in lengths]
    P = max(lengths)
    padding = np.asarray([P - n for n in lengths])
    ids = np.stack([np.concatenate([np.zeros(P - len(p), int), p]) for p in prompts])  # left pad
    cache = KVCache.for_model(config, params, batch=len(lengths), capacity=32)
    logits, hidden = target.forward_batch(ids, cache=cache, padding=padding, output_hidden=KEYS)
    step = rng.integers(0, config.vocab_size, (len(lengths), 1))
    logits2, hidden2 = target.forward_batch(step, cache=cache, padding=padding, output_hidden=KEYS)
    for b, prompt in enumerate(prompts):
        alone = KVCache.for_model(config, params, capacity=32)
        full = np.concatenate([prompt, step[b]])
        want, want_hidden = target.forward(full, cache=alone, output_hidden=KEYS)
        np.testing.assert_allclose(logits[b, padding[b] :], want[:-1], atol=1e-10)
        np.testing.assert_allclose(logits2[b, 0], want[-1], atol=1e-10)
        for key in KEYS:
            np.testing.assert_allclose(hidden2[key][b, 0], want_hidden[key][-1], atol=1e-10)


def test_greedy_batched_decoding_writes_what_vanilla_decoding_writes(small64):
    """At T = 0 every row of the batch continues its prompt exactly as `generate` does alone
    (float64), and the recorded features are the target's features of the written window."""
    params, config, _ = small64
    target = inference.prepare(params, config)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, config.vocab_size, n).tolist() for n in (4, 6, 3)]
    windows, hidden, sampled = decode_batch(target, prompts, 14, KEYS, 0.0, rng)
    assert windows.shape == (3, 14) and sampled == 3 * 14 - 13
    for b, prompt in enumerate(prompts):
        vanilla = generate(params, config, prompt, max_new_tokens=14 - len(prompt),
                           sampling=SamplingParams(), stop_at_eos=False)  # fmt: skip
        assert windows[b].tolist() == prompt + vanilla.tokens
    _, truth, _ = model.forward(params, config, windows.astype(np.int64), output_hidden=KEYS)
    for key in KEYS:  # float16 storage: three significant digits
        np.testing.assert_allclose(hidden[key], truth[key], rtol=2e-3, atol=2e-3)


def _logsumexp(x):
    peak = x.max(axis=-1, keepdims=True)
    return np.log(np.exp(x - peak).sum(axis=-1)) + peak[..., 0]


def test_the_recorded_argmax_and_logsumexp_are_the_targets_at_every_position(small64):
    """Beside the features, each window position records the target's argmax and logsumexp
    there (the EAGLE-3 loss's whole-vocabulary reads): equal to those of the window's own
    forward, prompt positions (left-padded to the longest) and sampled ones alike."""
    params, config, _ = small64
    target = inference.prepare(params, config)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(3, config.vocab_size, n).tolist() for n in (4, 7, 2)]
    windows, recorded, _ = decode_batch(target, prompts, 12, KEYS, 1.0, rng)
    logits, _, _ = model.forward(params, config, windows.astype(np.int64))
    assert recorded[TARGET_TOP].dtype == np.int32 and recorded[TARGET_LSE].dtype == np.float32
    np.testing.assert_array_equal(recorded[TARGET_TOP], logits.argmax(axis=-1))
    np.testing.assert_allclose(recorded[TARGET_LSE], _logsumexp(logits), rtol=1e-6)
    # the check catches statistics one position off (each row's prediction of its own token)
    shifted = np.concatenate([recorded[TARGET_TOP][:, 1:], recorded[TARGET_TOP][:, -1:]], axis=1)
    assert np.mean(shifted == logits.argmax(axis=-1)) < 0.5


def test_the_row_sampler_draws_from_the_tempered_softmax():
    rng = np.random.default_rng(0)
    logits = np.log(np.asarray([[0.5, 0.3, 0.2, 0.0 + 1e-300]]))
    logits = np.repeat(logits, 40_000, axis=0)
    draws = sample_rows(logits, 1.0, rng)
    freq = np.bincount(draws, minlength=4) / len(draws)
    assert np.abs(freq - [0.5, 0.3, 0.2, 0.0]).sum() / 2 < 0.01
    hot = np.bincount(sample_rows(logits, 2.0, rng), minlength=4) / len(draws)
    want = np.sqrt([0.5, 0.3, 0.2, 0.0]) / np.sqrt([0.5, 0.3, 0.2]).sum()
    assert np.abs(hot - want).sum() / 2 < 0.01
    assert (sample_rows(logits[:3], 0.0, rng) == 0).all()


def test_the_sampler_check_catches_a_sampler_that_ignores_temperature():
    """The check above can fail: a sampler that forgets the temperature misses the law."""
    rng = np.random.default_rng(0)
    logits = np.repeat(np.log([[0.5, 0.3, 0.2]]), 40_000, axis=0)
    wrong = np.bincount(sample_rows(logits, 1.0, rng), minlength=3) / 40_000  # T = 2 wanted
    want = np.sqrt([0.5, 0.3, 0.2]) / np.sqrt([0.5, 0.3, 0.2]).sum()
    assert np.abs(wrong - want).sum() / 2 > 0.03


def _cfg(tmp_path, name="run", **fields) -> DistillConfig:
    base = dict(target=str(SMALL), out_dir=str(tmp_path / name), shards=3, shard_windows=6,
                window_tokens=17, prompt_tokens=4, keys=KEYS, batch_size=4,
                max_train_chars=20_000)  # fmt: skip
    return DistillConfig(**{**base, **fields})


def _shard_bytes(directory: Path) -> dict:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*.npy"))
        if p.parent.name.startswith("shard-")
    }


def test_a_run_resumed_shard_by_shard_equals_one_run(tmp_path):
    once = run_distill(_cfg(tmp_path, "once"), progress=False)
    assert once["shards_written"] == 3 and once["tokens_sampled"] == 3 * 6 * (17 - 4)
    run_distill(_cfg(tmp_path, "steps", shards=1), progress=False)
    # a shard killed while being written leaves only its .tmp directory: it is redone
    (tmp_path / "steps" / "shard-00001.tmp").mkdir()
    again = run_distill(_cfg(tmp_path, "steps"), progress=False)
    assert again["shards_written"] == 2
    assert _shard_bytes(tmp_path / "once") == _shard_bytes(tmp_path / "steps")
    record = json.loads((tmp_path / "once" / "distill.json").read_text())
    assert record["temperature"] == 1.0 and record["source"] == "corpus"
    assert len(record["target_fingerprint"]) == 16 and "prompt_source" in record
    meta = json.loads((shard_dir(tmp_path / "once", 0) / "meta.json").read_text())
    assert meta["windows"] == 6 and meta["keys"] == [2, 6, 9, "final"]


def test_another_seed_writes_other_text(tmp_path):
    run_distill(_cfg(tmp_path, "a", shards=1), progress=False)
    run_distill(_cfg(tmp_path, "b", shards=1, seed=1), progress=False)
    a = np.load(shard_dir(tmp_path / "a", 0) / "windows.npy")
    b = np.load(shard_dir(tmp_path / "b", 0) / "windows.npy")
    assert not np.array_equal(a, b)


def test_a_run_with_other_settings_is_refused(tmp_path):
    run_distill(_cfg(tmp_path, shards=1), progress=False)
    with pytest.raises(InvalidInputError, match="temperature"):
        run_distill(_cfg(tmp_path, shards=2, temperature=0.5), progress=False)


def test_workers_sharing_a_run_write_what_one_process_writes(tmp_path):
    """Two workers (0/2, 1/2) each write every other shard; together, the same bytes as one
    process; a worker outside 0..N-1 is refused naming it."""
    run_distill(_cfg(tmp_path, "one"), progress=False)
    even = run_distill(_cfg(tmp_path, "two"), progress=False, worker=(0, 2))
    assert even["shards_written"] == 2  # shards 0 and 2 of 3
    assert sorted(p.name for p in (tmp_path / "two").glob("shard-*")) == [
        "shard-00000",
        "shard-00002",
    ]
    assert run_distill(_cfg(tmp_path, "two"), progress=False, worker=(1, 2))["shards_written"] == 1
    assert _shard_bytes(tmp_path / "one") == _shard_bytes(tmp_path / "two")
    with pytest.raises(InvalidInputError, match="worker 2/2"):
        run_distill(_cfg(tmp_path, "two"), progress=False, worker=(2, 2))
    from minieagle.cli import build_parser

    args = ["distill", "--out-dir", str(tmp_path), "--worker"]
    assert build_parser().parse_args([*args, "1/2"]).worker == (1, 2)
    with pytest.raises(SystemExit):
        build_parser().parse_args([*args, "2/2"])


def test_a_shard_another_process_wrote_meanwhile_is_skipped(tmp_path, monkeypatch):
    """A shard that appears while the run works on an earlier one (another process wrote it)
    is not decoded again: the run goes on to the next."""
    import shutil

    from minieagle import distill

    run_distill(_cfg(tmp_path, "other"), progress=False)
    real_write = distill.write_shard

    def write_and_another_appears(directory, *args):
        real_write(directory, *args)
        if directory.name == "shard-00000":
            shutil.copytree(tmp_path / "other" / "shard-00001", tmp_path / "run" / "shard-00001")

    monkeypatch.setattr(distill, "write_shard", write_and_another_appears)
    summary = run_distill(_cfg(tmp_path), progress=False)
    assert summary["shards_written"] == 2  # shards 0 and 2; shard 1 came from elsewhere
    assert _shard_bytes(tmp_path / "run") == _shard_bytes(tmp_path / "other")


def test_a_run_recorded_with_a_null_template_resumes(tmp_path):
    """distill.json written with chat_template null (the Python API's None) and a resume that
    passes "" (the CLI's "the target's own") are the same setting; another template is not."""
    run_distill(_cfg(tmp_path, shards=1), progress=False)
    path = tmp_path / "run" / "distill.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "chat_template": None}))
    assert run_distill(_cfg(tmp_path, shards=2), progress=False)["shards_written"] == 1
    with pytest.raises(InvalidInputError, match="chat_template"):
        run_distill(_cfg(tmp_path, shards=3, chat_template="other.jinja"), progress=False)


def _contains(stream: np.ndarray, piece: np.ndarray) -> bool:
    """Whether `piece` occurs in `stream` as a contiguous run of ids."""
    runs = np.lib.stride_tricks.sliding_window_view(stream, len(piece))
    return bool((runs == piece).all(axis=1).any())


@pytest.mark.parametrize("split", ["val", "test", "ood"])
def test_held_out_splits_draw_their_prompts_from_their_own_text(tmp_path, split):
    """With split val / test / ood every prompt is a window of that text, not of the training
    split (12-token windows: a chance match across splits is out of reach)."""
    from minieagle.distill import _ood_stream
    from minieagle.train import token_stream

    cfg = _cfg(tmp_path, split=split, shards=1, window_tokens=14, prompt_tokens=12,
               keys=("final",), max_train_chars=0)  # fmt: skip
    run_distill(cfg, progress=False)
    _, _, tokenizer = load_checkpoint(SMALL)
    windows = np.load(shard_dir(cfg.out_dir, 0) / "windows.npy")
    streams = np.load(shard_dir(cfg.out_dir, 0) / "stream.npy")
    for row, which in zip(windows, streams, strict=True):
        corpus = cfg.corpora[which]
        text = (_ood_stream(tokenizer, corpus) if split == "ood"
                else token_stream(tokenizer, corpus, split, None)[0])  # fmt: skip
        train = token_stream(tokenizer, corpus, "train", None)[0]
        assert _contains(text, row[:12]) and not _contains(train, row[:12])
    record = json.loads((Path(cfg.out_dir) / "distill.json").read_text())
    assert record["split"] == split and "training" not in record["prompt_source"]


def test_a_run_from_before_splits_resumes_as_train_and_another_split_is_refused(tmp_path):
    run_distill(_cfg(tmp_path, shards=1), progress=False)
    path = tmp_path / "run" / "distill.json"
    record = json.loads(path.read_text())
    assert record["split"] == "train"
    del record["split"]  # written before the setting existed
    path.write_text(json.dumps(record))
    assert run_distill(_cfg(tmp_path, shards=2), progress=False)["shards_written"] == 1
    with pytest.raises(InvalidInputError, match="split"):
        run_distill(_cfg(tmp_path, shards=3, split="val"), progress=False)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("split", "validation", "split='validation' is not one of"),
     ("source", "web", "source"), ("shards", 0, "shards"), ("temperature", -1.0, "temperature"),
     ("prompt_tokens", 17, "prompt_tokens"), ("keys", (), "keys"),
     ("keys", ("final", "final"), "twice"), ("out_dir", "", "out_dir is empty")],
)  # fmt: skip
def test_bad_settings_name_the_value(tmp_path, field, value, match):
    with pytest.raises(InvalidInputError, match=match):
        _cfg(tmp_path, **{field: value})


def test_held_out_splits_do_not_tile(tmp_path):
    with pytest.raises(InvalidInputError, match="tiles the training splits"):
        _cfg(tmp_path, source="corpus-windows", split="val")


def test_a_file_where_the_run_directory_should_be_is_refused(tmp_path):
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(InvalidInputError, match="is a file"):
        _cfg(tmp_path)


def test_chat_prompts_are_rendered_with_the_template(tmp_path):
    """An instruct target's requests go through its chat template: every window starts with
    the template's user turn (the small target has no template of its own: a file of plain text
    stands in)."""
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}")
    cfg = _cfg(tmp_path, source="chat", window_tokens=160, shards=1, shard_windows=2,
               keys=("final",), chat_template=str(template))  # fmt: skip
    run_distill(cfg, progress=False)
    _, _, tokenizer = load_checkpoint(SMALL)
    windows = np.load(shard_dir(cfg.out_dir, 0) / "windows.npy")
    for row in windows:
        assert tokenizer.decode(row.tolist()).startswith("USER: ")


@pytest.mark.parametrize(
    ("batch", "file"),
    [(1, "requests.jsonl"), (2, "requests-2.jsonl"), (3, "requests-3.jsonl"),
     (4, "requests-4.jsonl"), (5, "requests-5.jsonl")],
)  # fmt: skip
def test_general_requests_are_answered_through_the_template(tmp_path, batch, file):
    """Source "requests": each window is a request of the chosen split and batch (file) rendered
    with the chat template, then the target's answer; a greedy run stops after one pass over
    the requests."""
    from minieagle.data import REQUEST_FILES, request_records
    from minieagle.distill import _PromptSource, shards_available

    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}")
    cfg = _cfg(tmp_path, source="requests", split="val", window_tokens=400, shards=1,
               shard_windows=2, keys=("final",), chat_template=str(template),
               request_batch=batch)  # fmt: skip
    run_distill(cfg, progress=False)
    _, _, tokenizer = load_checkpoint(SMALL)
    asked = {f"USER: {r['request']}\nASSISTANT:" for r in request_records("val", batch)}
    other = {f"USER: {r['request']}\nASSISTANT:" for b in REQUEST_FILES if b != batch
             for r in request_records("val", b)}  # fmt: skip
    for row in np.load(shard_dir(cfg.out_dir, 0) / "windows.npy"):
        text = tokenizer.decode(row.tolist())
        assert any(text.startswith(prompt) for prompt in asked), text[:80]
        assert not any(text.startswith(prompt) for prompt in other), text[:80]
    record = json.loads((Path(cfg.out_dir) / "distill.json").read_text())
    assert f"data/{file} " in record["prompt_source"] and record["split"] == "val"
    assert record["request_batch"] == batch
    greedy = _cfg(tmp_path, "greedy", source="requests", temperature=0.0, shards=10_000,
                  shard_windows=64)  # fmt: skip
    source = _PromptSource(greedy, [], requests=([[1]] * 130, np.zeros(130, np.int32)))
    assert shards_available(greedy, source) == 3  # 130 requests: 2 full shards and a part
    assert len(source._request_prompts(2)[0]) == 2
    sampled = _cfg(tmp_path, "t1", source="requests", shards=10_000, shard_windows=64)
    assert shards_available(sampled, _PromptSource(sampled, [], requests=source.requests)) == 10_000


def test_request_windows_take_every_request_once_a_pass_in_any_shard_order(tmp_path):
    from minieagle.distill import _PromptSource

    cfg = _cfg(tmp_path, source="requests", shard_windows=3)
    requests = ([[i] for i in range(5)], np.arange(5, dtype=np.int32) % 2)

    def shard(source, index):
        prompts, streams = source._request_prompts(index)
        assert streams.tolist() == [p[0] % 2 for p in prompts]  # each request's category
        return [p[0] for p in prompts]

    forward = _PromptSource(cfg, [], requests=requests)
    taken = [shard(forward, i) for i in range(4)]  # 12 windows: two passes and a part
    flat = sum(taken, [])
    assert sorted(flat[:5]) == sorted(flat[5:10]) == list(range(5)) and flat[:5] != flat[5:10]
    backward = _PromptSource(cfg, [], requests=requests)
    assert [shard(backward, i) for i in (3, 2, 1, 0)] == taken[::-1]
    other = _PromptSource(_cfg(tmp_path, source="requests", shard_windows=3, seed=1), [],
                          requests=requests)  # fmt: skip
    assert [shard(other, i) for i in range(4)] != taken


def test_request_runs_are_scored_and_masked_on_the_answers_as_chat_runs_are(tmp_path):
    from minieagle.train_eagle import _answer_cue

    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}")
    cfg = _head_cfg(tmp_path / "run", ("unused",))
    _, _, tokenizer = load_checkpoint(SMALL)
    cues = [_answer_cue(cfg, {"source": source, "chat_template": str(template)}, tokenizer)
            for source in ("chat", "requests", "corpus")]  # fmt: skip
    assert cues[0] and cues[1] == cues[0] and cues[2] is None


def test_a_run_from_before_request_batches_resumes_as_batch_1_and_batch_2_is_refused(tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}")
    settings = dict(source="requests", window_tokens=400, shard_windows=2, keys=("final",),
                    chat_template=str(template))  # fmt: skip
    run_distill(_cfg(tmp_path, shards=1, **settings), progress=False)
    path = tmp_path / "run" / "distill.json"
    record = json.loads(path.read_text())
    del record["request_batch"]  # written before the setting existed
    path.write_text(json.dumps(record))
    assert run_distill(_cfg(tmp_path, shards=2, **settings), progress=False)["shards_written"] == 1
    with pytest.raises(InvalidInputError, match="request_batch"):
        run_distill(_cfg(tmp_path, shards=3, request_batch=2, **settings), progress=False)


@pytest.mark.parametrize(
    ("settings", "match"),
    [({"source": "requests", "request_batch": 6},
      r"request batch 6 is not one of \[1, 2, 3, 4, 5\] \(1: data/requests.jsonl, .*5: data/req"),
     ({"source": "requests", "request_batch": True}, "request batch True"),
     ({"source": "chat", "request_batch": 2}, "only source 'requests' reads the requests")],
)  # fmt: skip
def test_a_request_batch_is_one_of_the_files_and_only_for_requests(tmp_path, settings, match):
    with pytest.raises(InvalidInputError, match=match):
        _cfg(tmp_path, **settings)


def test_requests_have_no_out_of_domain_split(tmp_path):
    with pytest.raises(InvalidInputError, match="split='ood' with source 'requests'"):
        _cfg(tmp_path, source="requests", split="ood")


def test_the_pool_reads_windows_across_shards_and_runs(tmp_path):
    run_distill(_cfg(tmp_path, "a", shards=2), progress=False)
    run_distill(_cfg(tmp_path, "b", source="corpus-windows", shards=2), progress=False)
    pool = FeaturePool(open_shards([tmp_path / "a", tmp_path / "b"]))
    assert len(pool) == 24 and pool.keys == KEYS and pool.window_tokens == 17
    windows, hidden = pool.batch([0, 7, 13, 23])
    shard = np.load(shard_dir(tmp_path / "b", 1) / "windows.npy")
    assert windows[3].tolist() == shard[5].tolist()
    final = np.load(shard_dir(tmp_path / "a", 1) / "hidden-final.npy")
    np.testing.assert_array_equal(hidden["final"][1], final[1].astype(np.float32))
    order = pool.pass_order(0)
    assert sorted(order.tolist()) == list(range(24))
    assert len(FeaturePool(open_shards([tmp_path / "a"]), limit=5)) == 5
    with pytest.raises(InvalidInputError, match="not a distillation run"):
        open_shards([tmp_path])


def test_wsd_holds_the_rate_until_the_decay():
    rates = [wsd_lr(s, max_lr=1.0, warmup_steps=2, total_steps=10, decay_steps=4)
             for s in range(10)]  # fmt: skip
    assert rates[:2] == [0.5, 1.0] and rates[2:6] == [1.0] * 4
    assert rates[6] < 1.0 and rates[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[1:], rates[2:], strict=False))
    longer = [wsd_lr(s, max_lr=1.0, warmup_steps=2, total_steps=20, decay_steps=8)
              for s in range(6)]  # fmt: skip
    assert longer == rates[:6]  # the same rate up to the shorter run's decay


@pytest.fixture(scope="module")
def feature_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    for name, source in (("corpus", "corpus-windows"), ("self", "corpus")):
        run_distill(_cfg(root, name, source=source, shards=2, shard_windows=8), progress=False)
    return root


def _head_cfg(out, features, **fields) -> EagleTrainConfig:
    base = dict(target=str(SMALL), out_dir=str(out), export_dir=str(Path(out) / "final"),
                head="eagle3", data="features", features=features, order="pass", steps=12,
                decay_steps=3, batch_size=2, seq_len=16, ttt_steps=2, warmup_steps=2,
                eval_every=100, eval_batches=1, save_every=5, max_train_chars=20_000,
                lm_head_init="target")  # fmt: skip
    return EagleTrainConfig(**{**base, **fields})


def _final_tensors(run: Path) -> dict:
    from minieagle.checkpoint import read_tensors

    return read_tensors(run / "final" / "model.safetensors")


def _without_stats(run: Path, copy: Path) -> Path:
    """A copy of distill run `run` as shards written before 2026-12-04 were: no TARGET_STATS."""
    shutil.copytree(run, copy)
    for meta_file in copy.glob("shard-*/meta.json"):
        meta = json.loads(meta_file.read_text())
        for name in meta.pop("target_stats"):
            (meta_file.parent / f"{name}.npy").unlink()
        meta_file.write_text(json.dumps(meta))
    return copy


def test_a_batch_from_recorded_stats_scores_as_one_from_the_whole_lm_head(tmp_path, feature_runs):
    """An EAGLE-3 batch made with the shards' argmax and logsumexp (the final features through
    the draft rows of the LM head only) gives the loss and gradients of one made through the
    whole head, to float32 rounding; windows of older shards without them (-1 rows) are made
    through the whole head; stats that disagree with the target change the loss."""
    from minieagle.heads.eagle3 import DraftTargets
    from minieagle.train_eagle import RECIPES

    old = _without_stats(feature_runs / "self", tmp_path / "old")
    pool = FeaturePool(open_shards([str(feature_runs / "self"), str(old)]))
    half = len(pool) // 2
    assert pool.target_stats([0])[0][0, 0] >= 0 and pool.target_stats([half])[0][0, 0] == -1
    assert FeaturePool(open_shards([str(old)])).target_stats([0]) is None
    cfg = _head_cfg(tmp_path / "unused", (str(feature_runs / "self"),))
    params, config, _ = load_checkpoint(SMALL, dtype=np.float32)
    recipe = RECIPES["eagle3"](cfg, params, config, pool)
    head = recipe.init_head(0)
    indices = [0, 3, half + 1, 5]  # three windows with stats, one without
    windows, hidden = pool.batch(indices)
    whole = recipe.batch_from_hidden(windows, hidden)
    drafted = recipe.batch_from_hidden(windows, hidden, pool.target_stats(indices))
    assert isinstance(drafted[2], DraftTargets) and drafted[2].logits.shape[-1] < config.vocab_size
    loss_a, parts_a, grads_a = recipe._ttt(head, whole)
    loss_b, parts_b, grads_b = recipe._ttt(head, drafted)
    assert loss_b == pytest.approx(loss_a, rel=1e-4)
    assert parts_b["top1"] == pytest.approx(parts_a["top1"], abs=1e-6)
    assert parts_b["accept"] == pytest.approx(parts_a["accept"], rel=1e-3)
    for name in grads_a:
        np.testing.assert_allclose(grads_b[name], grads_a[name], rtol=1e-3, atol=1e-6)
    top, lse = pool.target_stats(indices)
    top[:3, 1:] = (top[:3, 1:] + 1) % config.vocab_size  # another argmax: other positions count
    wrong = recipe.batch_from_hidden(windows, hidden, (top, lse))
    assert abs(recipe._ttt(head, wrong)[0] - loss_a) > 1e-3 * abs(loss_a)


def test_a_head_trains_alike_from_shards_with_and_without_stats(tmp_path, feature_runs):
    """The whole loop: the EAGLE-3 head trained on shards that record the target's argmax and
    logsumexp ends where the one trained through the whole LM head ends (to float32 rounding)."""
    features = (str(feature_runs / "corpus"), str(feature_runs / "self"))
    old = tuple(str(_without_stats(Path(f), tmp_path / f"old-{Path(f).name}")) for f in features)
    train_eagle_head(_head_cfg(tmp_path / "new", features, steps=4, decay_steps=1),
                     progress=False)  # fmt: skip
    train_eagle_head(_head_cfg(tmp_path / "old", old, steps=4, decay_steps=1), progress=False)
    a, b = _final_tensors(tmp_path / "new"), _final_tensors(tmp_path / "old")
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-3, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("head", ["eagle1", "eagle3"])
def test_a_branch_of_a_longer_run_equals_its_own_run(tmp_path, feature_runs, head):
    """The scaling experiment's shortcut is exact: the state a 12-step warmup-stable-decay run
    keeps at step 9 (where a 12-step run with 3 decay steps starts decaying), continued with that
    run's settings, ends with the same head as the 12-step run trained from scratch."""
    features = (str(feature_runs / "corpus"), str(feature_runs / "self"))
    init = "target" if head == "eagle3" else "random"
    own = _head_cfg(tmp_path / "own", features, head=head, steps=12, decay_steps=3,
                    lm_head_init=init)  # fmt: skip
    train_eagle_head(own, progress=False)
    long = _head_cfg(tmp_path / "long", features, head=head, steps=24, decay_steps=6,
                     keep_states=(9,), until=9, lm_head_init=init)  # fmt: skip
    log = train_eagle_head(long, progress=False)
    assert not (tmp_path / "long" / "final").exists()  # paused: not exported
    assert log["evals"][-1]["step"] == 0
    branch_from(long.out_dir, 9, tmp_path / "branch")
    branch = _head_cfg(tmp_path / "branch", features, head=head, steps=12, decay_steps=3,
                       lm_head_init=init)  # fmt: skip
    train_eagle_head(branch, progress=False)
    a, b = _final_tensors(tmp_path / "own"), _final_tensors(tmp_path / "branch")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_branch_check_catches_a_changed_schedule(tmp_path, feature_runs):
    """The equality above is no accident of the check: branching where the longer run had
    already begun its decay gives another head."""
    features = (str(feature_runs / "corpus"), str(feature_runs / "self"))
    own = _head_cfg(tmp_path / "own", features, steps=12, decay_steps=3)
    train_eagle_head(own, progress=False)
    long = _head_cfg(tmp_path / "long", features, steps=14, decay_steps=7, keep_states=(9,),
                     until=9)  # fmt: skip
    train_eagle_head(long, progress=False)
    branch_from(long.out_dir, 9, tmp_path / "branch")
    train_eagle_head(_head_cfg(tmp_path / "branch", features, steps=12, decay_steps=3),
                     progress=False)  # fmt: skip
    a, b = _final_tensors(tmp_path / "own"), _final_tensors(tmp_path / "branch")
    assert any(not np.array_equal(a[name], b[name]) for name in a)


def test_features_of_another_window_length_or_keys_are_refused(tmp_path, feature_runs):
    features = (str(feature_runs / "corpus"),)
    with pytest.raises(InvalidInputError, match="--seq-len 16"):
        train_eagle_head(_head_cfg(tmp_path / "a", features, seq_len=32), progress=False)
    run_distill(_cfg(tmp_path, "final-only", keys=("final",), shards=1), progress=False)
    with pytest.raises(InvalidInputError, match="--keys 2,6,9,final"):
        train_eagle_head(_head_cfg(tmp_path / "b", (str(tmp_path / "final-only"),)),
                         progress=False)  # fmt: skip
    with pytest.raises(InvalidInputError, match="--data features"):
        EagleTrainConfig(data="features")


def test_the_command_line_distills_and_trains_from_the_shards(tmp_path, capsys):
    from minieagle.cli import main

    out = tmp_path / "self"
    argv = ["distill", "--out-dir", str(out), "--shards", "2", "--shard-windows", "4"]
    argv += ["--window-tokens", "17", "--prompt-tokens", "4", "--keys", "final", "--quiet"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["shards_written"] == 2
    assert main(argv) == 0  # resumed: nothing left to write
    assert json.loads(capsys.readouterr().out)["shards_written"] == 0
    assert main([*argv[:-1], "--temperature", "0.5"]) == 2
    assert "temperature" in capsys.readouterr().err
    assert main(["distill", "--out-dir", str(out), "--keys", "final,99", "--quiet"]) == 2
    assert "99" in capsys.readouterr().err
    train = ["train", "eagle1", "--data", "features", "--features", str(out), "--seq-len", "16"]
    train += ["--steps", "3", "--batch-size", "2", "--order", "pass", "--decay-steps", "1"]
    train += ["--out-dir", str(tmp_path / "head"), "--eval-batches", "1", "--quiet"]
    train += ["--max-train-chars", "20000", "--warmup-steps", "1"]
    assert main(train) == 0
    assert (tmp_path / "head" / "final" / "model.safetensors").is_file()

    # a long run keeps its state at step 2; a branch of it with the short run's schedule ends
    # where the short run ends (the command line's --keep-states and --branch-from)
    def head(out, steps, decay):
        argv = list(train)
        argv[argv.index("--out-dir") + 1] = str(tmp_path / out)
        argv[argv.index("--steps") + 1], argv[argv.index("--decay-steps") + 1] = steps, decay
        return argv

    capsys.readouterr()
    assert main([*head("long", "6", "2"), "--keep-states", "2", "--until", "2"]) == 0
    assert "paused at step 2" in capsys.readouterr().out
    assert main([*head("branch", "3", "1"), "--branch-from", f"{tmp_path / 'long'}@2"]) == 0
    record = json.loads((tmp_path / "branch" / "eagle_train_config.json").read_text())
    assert record["branched_from"] == {"run": str((tmp_path / "long").resolve()), "step": 2}
    assert record["steps"] == 3 and record["decay_steps"] == 1  # its own schedule
    assert "branched_from" not in json.loads((tmp_path / "long" / "eagle_train_config.json")
                                             .read_text())  # fmt: skip
    a, b = _final_tensors(tmp_path / "head"), _final_tensors(tmp_path / "branch")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # the branch did start from the kept state: one of another seed's run ends elsewhere
    assert main([*head("seed1", "6", "2"), "--keep-states", "2", "--until", "2",
                 "--seed", "1"]) == 0  # fmt: skip
    assert main([*head("branch1", "3", "1"), "--branch-from", f"{tmp_path / 'seed1'}@2"]) == 0
    c = _final_tensors(tmp_path / "branch1")
    assert any(not np.array_equal(a[name], c[name]) for name in a)
    capsys.readouterr()
    assert main([*head("other", "3", "1"), "--branch-from", f"{tmp_path / 'long'}@1"]) == 2
    assert "kept no state at step 1" in capsys.readouterr().err


def test_blocks_are_read_in_turn_each_in_an_order_of_its_own(tmp_path):
    """A pool of blocks ("|" between them) reads block after block; the order of the first
    blocks does not change when later blocks join (a run reads them as distill writes them),
    and the draft vocabulary's counts come from the first block."""
    from minieagle.distill import open_pool

    run_distill(_cfg(tmp_path, "a", shards=4), progress=False)
    a = str(tmp_path / "a")
    two = open_pool([f"{a}@0:1", f"{a}@2:3", "|", f"{a}@1:2"])
    three = open_pool([f"{a}@0:1", f"{a}@2:3", "|", f"{a}@1:2", "|", f"{a}@3:4"])
    assert len(two) == 18 and len(three) == 24
    order = three.pass_order(0)
    assert sorted(order[:12]) == list(range(12)) and sorted(order[12:18]) == list(range(12, 18))
    assert order[:18].tolist() == two.pass_order(0).tolist()
    first = open_pool([f"{a}@0:1", f"{a}@2:3"])
    assert (three.token_counts(2048) == first.token_counts(2048)).all()
    with pytest.raises(InvalidInputError, match="not written yet"):
        open_pool([f"{a}@0:9"])
    with pytest.raises(InvalidInputError, match="DIR@START:STOP"):
        open_pool([f"{a}@x"])


@pytest.fixture(scope="module")
def held_out_chat(tmp_path_factory):
    """A held-out chat run of the small target (windows of 65 tokens) and a training run beside
    it; the small target has no chat template of its own: a plain-text one stands in."""
    root = tmp_path_factory.mktemp("held-out")
    template = root / "chat.jinja"
    template.write_text("{% for m in messages %}USER: {{ m['content'] }}\nASSISTANT:{% endfor %}")
    run_distill(_cfg(root, "held", source="chat", split="val", window_tokens=65, prompt_tokens=8,
                     shards=1, shard_windows=4, chat_template=str(template)),
                progress=False)  # fmt: skip
    run_distill(_cfg(root, "train", window_tokens=65, prompt_tokens=8, shards=1, shard_windows=4),
                progress=False)  # fmt: skip
    return root, template


@pytest.mark.parametrize("head", ["eagle1", "eagle3"])
def test_a_held_out_chat_run_is_scored_on_the_answers_alone(tmp_path, held_out_chat, head):
    """--val-features: the evaluations score the held-out run's windows as the loss would score
    them under a mask of the target's answers (`chat.answer_label_mask`), and that mask matters:
    every row gives another figure."""
    from minieagle.chat import answer_label_mask, answer_spans, assistant_cue, load_chat_template
    from minieagle.heads import eagle1, eagle3
    from minieagle.heads.eagle1 import load_head
    from minieagle.heads.eagle3_io import load_eagle3_head

    root, template = held_out_chat
    init = "target" if head == "eagle3" else "random"
    cfg = _head_cfg(tmp_path / "run", (str(root / "train"),), head=head, seq_len=64, steps=2,
                    decay_steps=1, batch_size=2, eval_batches=2, eval_every=2,
                    lm_head_init=init, val_features=(str(root / "held"),))  # fmt: skip
    log = train_eagle_head(cfg, progress=False)
    got = log["evals"][-1]
    key = "val_top1_0_{}" if head == "eagle3" else "val_top1_{}"
    assert {key.format(name) for name in ("prose", "code", "held")} <= set(got)

    params, config, tokenizer = load_checkpoint(SMALL, dtype=np.float32)
    cue = assistant_cue(tokenizer, load_chat_template(SMALL, tokenizer, str(template)))
    shard = open_shards([str(root / "held")])[0]
    windows = np.asarray(shard.windows[:], dtype=np.int64)  # 4 windows: all of them, 2 batches
    hidden = {k: np.asarray(shard.hidden[k][:], dtype=np.float32) for k in shard.keys}
    answers = answer_label_mask(*answer_spans(windows, cue), 65)
    assert 0 < answers.sum() < answers.size

    final = tmp_path / "run" / "final"
    if head == "eagle3":
        trained, hcfg, vocab = load_eagle3_head(final, target_config=config)
    else:
        trained, hcfg = load_head(final, target_dir=SMALL)

    def score(mask):  # the mean over the two evaluation batches, as the log takes it
        values = []
        for rows in (slice(0, 2), slice(2, 4)):
            h = {k: v[rows] for k, v in hidden.items()}
            if head == "eagle3":
                fused = eagle3.fuse_features(h, hcfg.aux_layers)[:, :-1]
                logits = h["final"][:, 1:] @ model.lm_head_weight(params).T
                _, parts, _ = eagle3.ttt_loss(trained, hcfg, params, vocab, windows[rows], fused,
                                              logits, mask[rows], steps=2)  # fmt: skip
                values.append(parts["top1"][0])
            else:
                f = h["final"]
                metrics = eagle1.eagle1_metrics(trained, hcfg, params, windows[rows, 1:],
                                                f[:, :-1], f[:, 1:], mask[rows])  # fmt: skip
                values.append(metrics["top1"])
        return float(np.mean(values))

    assert got[key.format("held")] == pytest.approx(score(answers), abs=1e-6)
    assert got[key.format("held")] != pytest.approx(score(np.ones_like(answers)), abs=1e-6)


def test_held_out_runs_that_cannot_be_scored_are_refused(tmp_path, held_out_chat, feature_runs):
    root, _ = held_out_chat
    held, train = str(root / "held"), str(root / "train")
    with pytest.raises(InvalidInputError, match="also in features"):
        _head_cfg(tmp_path / "a", (train,), seq_len=64, val_features=(train,))
    with pytest.raises(InvalidInputError, match="name 'held' is taken"):
        _head_cfg(tmp_path / "a", (train,), seq_len=64, val_features=(held, f"{held}@0:1"))
    with pytest.raises(InvalidInputError, match="name 'prose' is taken"):
        _head_cfg(tmp_path / "a", (train,), seq_len=64, val_features=(str(tmp_path / "prose"),))
    with pytest.raises(InvalidInputError, match="leave it empty for medusa"):
        _head_cfg(tmp_path / "a", (train,), head="medusa", lm_head_init="random", seq_len=64,
                  val_features=(held,))  # fmt: skip
    short = (str(feature_runs / "corpus"),)  # windows of 17 tokens
    with pytest.raises(InvalidInputError, match="--window-tokens 65"):
        train_eagle_head(_head_cfg(tmp_path / "b", (train,), seq_len=64, val_features=short),
                         progress=False)  # fmt: skip
    for name, run in (("other-held", held), ("other-train", train)):
        other = tmp_path / name  # the same run, said to come from another target's weights
        shutil.copytree(run, other)
        record = json.loads((other / "distill.json").read_text())
        (other / "distill.json").write_text(json.dumps({**record, "target_fingerprint": "0" * 16}))
    with pytest.raises(InvalidInputError, match="val_features entry .* another target"):
        train_eagle_head(_head_cfg(tmp_path / "c", (train,), seq_len=64,
                                   val_features=(str(tmp_path / "other-held"),)),
                         progress=False)  # fmt: skip
    with pytest.raises(InvalidInputError, match="features entry .* another target"):
        train_eagle_head(_head_cfg(tmp_path / "d", (str(tmp_path / "other-train"),), seq_len=64),
                         progress=False)  # fmt: skip


def test_the_score_cost_script_times_one_held_out_batch_both_ways(held_out_chat, monkeypatch):
    """benchmarks/score_cost.py: the recipe's loss on a held-out batch with and without the
    backward pass, the same loss both ways."""
    import importlib

    monkeypatch.syspath_prepend(str(SMALL.parents[2] / "benchmarks"))
    script = importlib.import_module("score_cost")
    root, _ = held_out_chat
    head = SMALL.parent / "small-eagle3"
    result = script.main(["--model", str(SMALL), "--head", str(head), "--data", str(root / "held"),
                          "--seq-len", "64", "--batch-size", "2", "--ttt-steps", "2",
                          "--repeats", "1"])  # fmt: skip
    assert result["same_loss"] and result["positions"] == 2 * 64
    assert set(result["seconds"]) == {"with backward", "forward only"}


def test_the_feature_step_script_times_both_ways_on_the_same_loss(tmp_path, monkeypatch):
    """benchmarks/feature_step.py at its smallest (the small target and its shipped EAGLE-3
    head): both ways timed, the same loss, a speedup and an MFU per way."""
    import importlib

    monkeypatch.syspath_prepend(str(SMALL.parents[2] / "benchmarks"))
    script = importlib.import_module("feature_step")
    out = tmp_path / "step.json"
    assert script.main(["--model", str(SMALL), "--head", str(SMALL.parent / "small-eagle3"),
                        "--batch-size", "1", "--seq-len", "16", "--ttt-steps", "2",
                        "--repeats", "1", "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    losses = list(result["losses"].values())
    assert len(losses) == 2 and losses[0] == pytest.approx(losses[1], rel=1e-5)
    for way in result["ways"].values():
        assert way["seconds"]["median"] > 0 and 0 < way["mfu"]["median"]
    assert result["speedup"]["median"] > 0 and result["draft_vocab_size"] < result["vocab_size"]


@pytest.mark.parametrize("head", ["eagle1", "eagle3"])
def test_loss_mask_answers_counts_the_answers_of_chat_runs_only(tmp_path, held_out_chat, head):
    """loss_mask="answers" (the official code's assistant-only mask): each window of a chat run
    counts the rows whose guessed token is in the target's answer (`chat.answer_label_mask`),
    a window of any other run every row; a head trained so ends elsewhere than with every row
    counted, and the run refuses to resume with the other mask."""
    from minieagle.chat import answer_label_mask, answer_spans, assistant_cue, load_chat_template
    from minieagle.distill import open_pool
    from minieagle.train_eagle import _answer_cue, _answer_masks

    root, template = held_out_chat
    chat = tmp_path / "chat"
    run_distill(_cfg(tmp_path, "chat", source="chat", window_tokens=65, prompt_tokens=8,
                     shards=1, shard_windows=4, chat_template=str(template)),
                progress=False)  # fmt: skip
    features = (str(root / "train"), str(chat))
    cfg = _head_cfg(tmp_path / "answers", features, head=head, seq_len=64, steps=3,
                    decay_steps=1, loss_mask="answers",
                    lm_head_init="target" if head == "eagle3" else "random")  # fmt: skip
    params, config, tokenizer = load_checkpoint(SMALL, dtype=np.float32)
    pool = open_pool(list(features))
    cues = {Path(f).resolve(): _answer_cue(cfg, json.loads((Path(f) / "distill.json")
                                                           .read_text()), tokenizer)
            for f in features}  # fmt: skip
    assert cues[(root / "train").resolve()] is None
    indices = [0, 1, len(pool) - 2, len(pool) - 1]  # two corpus windows, two chat windows
    windows, _ = pool.batch(indices)
    masks = _answer_masks(pool, indices, windows, cues)
    cue = assistant_cue(tokenizer, load_chat_template(SMALL, tokenizer, str(template)))
    assert masks[:2].all()
    np.testing.assert_array_equal(masks[2:], answer_label_mask(*answer_spans(windows[2:], cue), 65))
    assert 0 < masks[2:].sum() < masks[2:].size

    train_eagle_head(cfg, progress=False)
    train_eagle_head(_head_cfg(tmp_path / "all", features, head=head, seq_len=64, steps=3,
                               decay_steps=1, lm_head_init=cfg.lm_head_init),
                     progress=False)  # fmt: skip
    a, b = _final_tensors(tmp_path / "answers"), _final_tensors(tmp_path / "all")
    assert any(not np.allclose(a[name], b[name]) for name in a)
    with pytest.raises(InvalidInputError, match="--loss-mask answers"):
        train_eagle_head(_head_cfg(tmp_path / "answers", features, head=head, seq_len=64,
                                   steps=4, decay_steps=1, lm_head_init=cfg.lm_head_init),
                         progress=False)  # fmt: skip


def test_loss_mask_answers_needs_recorded_runs_and_an_eagle_head(tmp_path, feature_runs):
    features = (str(feature_runs / "self"),)
    with pytest.raises(InvalidInputError, match="'all' or 'answers'"):
        _head_cfg(tmp_path, features, loss_mask="assistant")
    with pytest.raises(InvalidInputError, match="loss_mask='all'"):
        _head_cfg(tmp_path, features, head="medusa", loss_mask="answers")
    with pytest.raises(InvalidInputError, match="loss_mask='all'"):
        EagleTrainConfig(loss_mask="answers")
