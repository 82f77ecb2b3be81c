"""Training the EAGLE-3 head (minieagle.train_eagle with head="eagle3"): it learns at every TTT
step, leaves the target untouched, exports a head the serving layout loader reads back (with the
draft vocabulary the run built), resumes a killed run to the same bits, refuses to resume another
head, and the command line drives it.

The target is a 4-layer nano-width model trained for 30 steps (EAGLE-3 fuses three distinct
layers: here the inputs of layers 1, 2, 3, which the serving ids can name); each run is a few
dozen short steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from minieagle import train_eagle as train_eagle_module
from minieagle.checkpoint import load_checkpoint, save_checkpoint
from minieagle.cli import PRETRAINED, main
from minieagle.config import preset
from minieagle.heads import eagle3
from minieagle.heads.eagle3_io import load_eagle3_head
from minieagle.train import TrainConfig, train
from minieagle.train_eagle import EagleTrainConfig, draft_vocab_size_for, train_eagle_head

STEPS, SAVE_EVERY, AUX = 16, 4, (1, 2, 3)


class SimulatedCrash(Exception):
    """Stands in for a kill at a chosen moment."""


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> Path:
    """A nano-width target with four layers, trained for 30 steps."""
    run = tmp_path_factory.mktemp("target3")
    config = TrainConfig(
        preset="nano", out_dir=str(run), tokenizer=str(PRETRAINED / "tokenizer-320.json"),
        steps=30, batch_size=4, seq_len=32, lr=1e-2, warmup_steps=5, eval_every=30,
        save_every=30, max_train_chars=50_000,
    )  # fmt: skip
    two_layers = Path(train(config, progress=False)["export_dir"])
    params, config2, tokenizer = load_checkpoint(two_layers)
    deeper = config2.replace(num_hidden_layers=4)
    for name in list(params):  # layers 2 and 3: copies of 1, so the target stays sane
        if name.startswith("model.layers.1."):
            for extra in (2, 3):
                params[name.replace("layers.1.", f"layers.{extra}.")] = params[name].copy()
    save_checkpoint(run / "four", params, deeper, tokenizer)
    return run / "four"


def _config(target_dir: Path, out_dir: Path, **changes) -> EagleTrainConfig:
    fields = dict(
        target=str(target_dir), out_dir=str(out_dir), head="eagle3", aux_layers=AUX,
        ttt_steps=3, steps=STEPS, batch_size=4, seq_len=24, lr=1e-2, warmup_steps=3,
        eval_every=8, eval_batches=2, save_every=SAVE_EVERY, max_train_chars=50_000,
    )  # fmt: skip
    fields.update(changes)
    return EagleTrainConfig(**fields)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, target_dir):
    out_dir = tmp_path_factory.mktemp("uninterrupted3")
    before = (target_dir / "model.safetensors").read_bytes()
    return out_dir, train_eagle_head(_config(target_dir, out_dir), progress=False), before


def _state(out_dir: Path) -> dict:
    state = load_file(out_dir / "state" / "params.safetensors")
    state.update(load_file(out_dir / "state" / "optimizer.safetensors"))
    return state


def _count_steps(monkeypatch, crash_at: int | None = None) -> list[int]:
    """Count training steps (calls of ttt_loss from the recipe's loss), optionally crashing."""
    real, calls = train_eagle_module.Eagle3Recipe.loss, []

    def counted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == crash_at:
            raise SimulatedCrash(f"killed during step call {crash_at}")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(train_eagle_module.Eagle3Recipe, "loss", counted)
    return calls


def test_loss_falls_and_every_step_learns(reference):
    _, log, _ = reference
    assert [record["step"] for record in log["evals"]] == [0, 8, 16]
    first, last = log["evals"][0], log["evals"][-1]
    for corpus in ("prose", "code"):
        assert last[f"val_loss_{corpus}"] < 0.9 * first[f"val_loss_{corpus}"]
        for s in range(3):  # each unrolled step, its own outputs as input from s = 1 on
            assert last[f"val_top1_{s}_{corpus}"] > first[f"val_top1_{s}_{corpus}"]
            assert 0 <= last[f"val_accept_{s}_{corpus}"] <= 1


def test_the_target_is_not_modified(reference, target_dir):
    assert (target_dir / "model.safetensors").read_bytes() == reference[2]


def test_the_exported_head_is_the_trained_one_with_its_vocabulary(reference, target_dir):
    out_dir, log, _ = reference
    head, cfg, vocab = load_eagle3_head(log["export_dir"], target_dir=target_dir)
    trained = load_file(out_dir / "state" / "params.safetensors")
    assert head.keys() == trained.keys()
    assert all(np.array_equal(head[name], trained[name]) for name in head)
    assert cfg.aux_layers == AUX and cfg.layer.hidden_size == preset("nano").hidden_size
    # The vocabulary is the most frequent training tokens, as many as cover 99% of them.
    _, _, tokenizer = load_checkpoint(target_dir)
    streams = [
        train_eagle_module.token_stream(tokenizer, c, "train", out_dir, 50_000)[0]
        for c in ("prose", "code")
    ]
    counts = sum(np.bincount(s, minlength=320)[:320] for s in streams)
    size = draft_vocab_size_for(counts, 0.99)
    assert vocab.size == cfg.draft_vocab_size == size < 320
    assert np.array_equal(vocab.ids, eagle3.draft_vocab_from_counts(counts, size).ids)


def test_draft_vocab_size_for_counts():
    counts = np.asarray([50, 0, 30, 15, 5])
    assert draft_vocab_size_for(counts, 0.5) == 1
    assert draft_vocab_size_for(counts, 0.8) == 2
    assert draft_vocab_size_for(counts, 0.95) == 3
    assert draft_vocab_size_for(counts, 1.0) == 4


def test_a_run_killed_mid_step_resumes_to_the_same_bits(
    tmp_path, monkeypatch, reference, target_dir
):
    _count_steps(monkeypatch, crash_at=14)  # the last save was at step 12
    with pytest.raises(SimulatedCrash):
        train_eagle_head(_config(target_dir, tmp_path), progress=False)
    monkeypatch.undo()
    steps = _count_steps(monkeypatch)
    train_eagle_head(_config(target_dir, tmp_path), progress=False)
    assert len(steps) == STEPS - 12
    mine, theirs = _state(tmp_path), _state(reference[0])
    assert all(np.array_equal(mine[name], theirs[name]) for name in theirs)


def test_resuming_another_head_is_refused(tmp_path, target_dir):
    train_eagle_head(_config(target_dir, tmp_path, steps=2, save_every=1), progress=False)
    with pytest.raises(ValueError, match="holds a run with draft_vocab_size=0, not 100"):
        train_eagle_head(
            _config(target_dir, tmp_path, steps=3, draft_vocab_size=100), progress=False
        )
    eagle1 = _config(target_dir, tmp_path, steps=3, head="eagle1", aux_layers=())
    with pytest.raises(ValueError, match="holds a run with head='eagle3', not 'eagle1'"):
        train_eagle_head(eagle1, progress=False)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"head": "eagle4"}, "head='eagle4' is not one of"),
        ({"ttt_steps": 0}, "ttt_steps=0 must be >= 1"),
        ({"step_weight": 1.5}, r"step_weight=1.5 must be in \(0, 1\]"),
        ({"draft_vocab_size": -1}, "draft_vocab_size=-1 must be >= 0"),
        ({"draft_vocab_coverage": 0.0}, r"draft_vocab_coverage=0.0 must be in \(0, 1\]"),
        ({"lm_head_init": "zeros"}, "lm_head_init='zeros' is not one of"),
        ({"head": "eagle1", "aux_layers": (), "lm_head_init": "target"}, "is for EAGLE-3 heads"),
        ({"head_intermediate_size": -1}, "head_intermediate_size=-1 with head='eagle3'"),
        (
            {"head": "eagle1", "aux_layers": (), "head_intermediate_size": 64},
            "sets the MLP width of an EAGLE-3 head",
        ),
    ],
)
def test_bad_settings_are_refused(tmp_path, target_dir, changes, message):
    with pytest.raises(ValueError, match=message):
        _config(target_dir, tmp_path, **changes)


@pytest.mark.parametrize("init", ["random", "target"])
def test_the_draft_lm_head_starts_at_random_or_as_the_targets_rows(tmp_path, target_dir, init):
    """lm_head_init="target": draft row i is the target's LM-head row vocab.ids[i] and the final
    norm is the target's; "random" (the official code) leaves both as `eagle3.init_head` makes
    them."""
    params, config, _ = load_checkpoint(target_dir)
    cfg = _config(target_dir, tmp_path, lm_head_init=init)
    streams = [np.arange(config.vocab_size)[::-1] % 200]  # ids 0..199: a reduced vocabulary
    recipe = train_eagle_module.Eagle3Recipe(cfg, params, config, streams)
    head = recipe.init_head(seed=0)
    ids = recipe.vocab.ids
    assert len(ids) < config.vocab_size
    copied = np.array_equal(head["lm_head.weight"], params["model.embed_tokens.weight"][ids])
    same_norm = np.array_equal(head["norm.weight"], params["model.norm.weight"])
    assert copied == same_norm == (init == "target")
    fresh = eagle3.init_head(recipe.head_cfg, seed=0)
    assert all(
        np.array_equal(head[k], fresh[k])
        for k in fresh
        if k not in ("lm_head.weight", "norm.weight")
    )


def test_a_run_continues_a_trained_head_with_its_vocabulary(tmp_path, target_dir, reference):
    """init_from: the run starts at the saved head (its first evaluation is the saved run's
    last, on the same validation windows) and keeps its draft vocabulary, though this run's
    text (a shorter prefix of the corpora) would count another one."""
    saved_dir, saved_log, _ = reference
    other_text = {"max_train_chars": 8_000, "steps": 2, "eval_every": 2, "seed": 3}
    fresh = train_eagle_module.Eagle3Recipe(
        _config(target_dir, tmp_path / "fresh", **other_text), *load_checkpoint(target_dir)[:2],
        [train_eagle_module.token_stream(load_checkpoint(target_dir)[2], c, "train",
                                         tmp_path, 8_000)[0] for c in ("prose", "code")],
    )  # fmt: skip
    _, _, saved_vocab = load_eagle3_head(saved_log["export_dir"])
    assert not np.array_equal(fresh.vocab.ids, saved_vocab.ids)  # the test can tell them apart
    cfg = _config(target_dir, tmp_path / "continued", init_from=saved_log["export_dir"],
                  **{**other_text, "max_train_chars": 50_000})  # fmt: skip
    log = train_eagle_head(cfg, progress=False)
    first, last_saved = log["evals"][0], saved_log["evals"][-1]
    assert first["step"] == 0
    for key in ("val_loss_prose", "val_loss_code", "val_top1_2_code"):
        assert first[key] == pytest.approx(last_saved[key], rel=1e-6)
    _, _, vocab = load_eagle3_head(log["export_dir"])
    assert np.array_equal(vocab.ids, saved_vocab.ids)
    short = _config(target_dir, tmp_path / "short", init_from=saved_log["export_dir"], **other_text)
    assert np.array_equal(
        train_eagle_module.Eagle3Recipe(short, *load_checkpoint(target_dir)[:2], []).vocab.ids,
        saved_vocab.ids,
    )
    smaller = len(saved_vocab.ids) - 1
    with pytest.raises(ValueError, match=f"draft_vocab_size={smaller} is smaller than the head"):
        train_eagle_head(_config(target_dir, tmp_path / "d", init_from=saved_log["export_dir"],
                                 draft_vocab_size=smaller), progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="both say how the LM head starts"):
        _config(target_dir, tmp_path, init_from=saved_log["export_dir"], lm_head_init="target")


def _assert_drafts_greedy_text(target_dir: Path, head_dir: str, capsys) -> None:
    """`minieagle generate --method eagle3` with the head prints vanilla's greedy text."""
    generate = ["generate", "def", "--model", str(target_dir), "--max-new-tokens", "8"]
    capsys.readouterr()
    assert main([*generate, "--method", "vanilla"]) == 0
    vanilla = capsys.readouterr().out
    assert main([*generate, "--method", "eagle3", "--head", head_dir]) == 0
    assert capsys.readouterr().out == vanilla


def test_a_wider_head_trains_saves_its_width_and_drafts(tmp_path, target_dir, capsys):
    """head_intermediate_size: the head's MLP is that wide (not the target's), the exported
    config.json says so (what SGLang and vLLM read), it loads and drafts exact greedy text, and
    a run of the other width is neither resumed nor continued from it."""
    _, target_config, _ = load_checkpoint(target_dir)
    wide = 3 * target_config.intermediate_size
    log = train_eagle_head(_config(target_dir, tmp_path / "wide", steps=3, save_every=1,
                                   head_intermediate_size=wide), progress=False)  # fmt: skip
    head, cfg, _ = load_eagle3_head(log["export_dir"], target_config=target_config)
    assert cfg.layer.intermediate_size == wide
    assert head["midlayer.mlp.down_proj.weight"].shape == (target_config.hidden_size, wide)
    saved = json.loads((Path(log["export_dir"]) / "config.json").read_text())
    assert saved["intermediate_size"] == wide
    _assert_drafts_greedy_text(target_dir, log["export_dir"], capsys)
    with pytest.raises(ValueError, match=f"holds a run with head_intermediate_size={wide}"):
        train_eagle_head(_config(target_dir, tmp_path / "wide", steps=4), progress=False)
    with pytest.raises(ValueError, match=f"narrower than the head in .*\\({wide}\\)"):
        train_eagle_head(_config(target_dir, tmp_path / "c", init_from=log["export_dir"],
                                 head_intermediate_size=wide - 1), progress=False)  # fmt: skip


def test_a_trained_head_continues_wider_from_where_it_stopped(tmp_path, target_dir, reference):
    """init_from with a larger head_intermediate_size: `widen_mlp` adds MLP units that start
    silent (zero down_proj columns), so the widened head computes what the saved one did (its
    first evaluation is the saved run's last, on the same windows) and then trains them."""
    _, saved_log, _ = reference
    saved, saved_cfg, _ = load_eagle3_head(saved_log["export_dir"])
    width = 2 * saved_cfg.layer.intermediate_size
    wide, wide_cfg = eagle3.widen_mlp(saved, saved_cfg, width, seed=1)
    assert wide_cfg.layer.intermediate_size == width
    down = wide["midlayer.mlp.down_proj.weight"]
    assert np.all(down[:, saved_cfg.layer.intermediate_size :] == 0)
    assert np.any(wide["midlayer.mlp.gate_proj.weight"][saved_cfg.layer.intermediate_size :])
    cfg = _config(target_dir, tmp_path / "wider", init_from=saved_log["export_dir"], steps=2,
                  eval_every=2, head_intermediate_size=width)  # fmt: skip
    log = train_eagle_head(cfg, progress=False)
    first, last_saved = log["evals"][0], saved_log["evals"][-1]
    for key in ("val_loss_prose", "val_loss_code", "val_top1_2_code"):
        assert first[key] == pytest.approx(last_saved[key], rel=1e-6)
    trained, trained_cfg, _ = load_eagle3_head(log["export_dir"])
    assert trained_cfg.layer.intermediate_size == width
    assert np.any(trained["midlayer.mlp.down_proj.weight"][:, saved_cfg.layer.intermediate_size :])
    with pytest.raises(ValueError, match="narrower than the head's"):
        eagle3.widen_mlp(saved, saved_cfg, saved_cfg.layer.intermediate_size - 1)


def test_a_trained_head_continues_with_a_larger_draft_vocabulary(tmp_path, target_dir, reference,
                                                                 capsys):
    """init_from with a larger draft_vocab_size: the head keeps its tokens and their trained
    rows (`eagle3.widen_vocab`), gains the run's most frequent other tokens, saves the larger
    vocabulary, resumes with the same one, and drafts exact greedy text."""
    _, saved_log, _ = reference
    saved, saved_cfg, saved_vocab = load_eagle3_head(saved_log["export_dir"])
    params, target_config, tokenizer = load_checkpoint(target_dir)
    assert saved_cfg.draft_vocab_size < target_config.vocab_size - 8  # room to grow
    size = saved_cfg.draft_vocab_size + 8
    cfg = _config(target_dir, tmp_path / "more", init_from=saved_log["export_dir"], steps=2,
                  eval_every=2, save_every=1, draft_vocab_size=size)  # fmt: skip
    log = train_eagle_head(cfg, progress=False)
    head, head_cfg, vocab = load_eagle3_head(log["export_dir"])
    assert head_cfg.draft_vocab_size == len(vocab.ids) == size
    assert set(saved_vocab.ids.tolist()) < set(vocab.ids.tolist())
    streams = [train_eagle_module.token_stream(tokenizer, c, "train", tmp_path, 50_000)[0]
               for c in ("prose", "code")]  # fmt: skip
    counts = sum(np.bincount(s, minlength=target_config.vocab_size) for s in streams)
    added = np.setdiff1d(vocab.ids, saved_vocab.ids)
    others = np.setdiff1d(np.setdiff1d(np.arange(target_config.vocab_size), saved_vocab.ids), added)
    assert counts[added].min() >= counts[others].max()  # the most frequent of the others
    resumed = train_eagle_head(_config(target_dir, tmp_path / "more", steps=3, save_every=1,
                                       eval_every=2, init_from=saved_log["export_dir"],
                                       draft_vocab_size=size), progress=False)  # fmt: skip
    assert np.array_equal(load_eagle3_head(resumed["export_dir"])[2].ids, vocab.ids)
    _assert_drafts_greedy_text(target_dir, log["export_dir"], capsys)


def test_a_draft_vocabulary_grows_keeping_the_heads_rows():
    """eagle3.widen_vocab: kept ids keep their rows (moved to their new draft ids), the added
    ids are the most frequent others (ties: the lower id), and a new row is the target's row
    through the least-squares map from the target's rows to the head's: exact when the head's
    rows are such a map of the target's. Shrinking and counts of the wrong shape are refused."""
    target = preset("nano").replace(vocab_size=200, num_hidden_layers=4)
    V, d = target.vocab_size, target.hidden_size
    rng = np.random.default_rng(0)
    target_rows = rng.standard_normal((V, d))
    carry = rng.standard_normal((d, d))
    old_ids = np.arange(0, 2 * (d + 20), 2)  # more kept rows than the map has columns
    head = {"lm_head.weight": (target_rows[old_ids] @ carry).astype(np.float32), "fc.weight": 0}
    counts = np.zeros(V)
    counts[[5, 199, 3]] = [7, 9, 7]  # 199 first, then 3 before 5 (a tie: the lower id)
    counts[old_ids] = 100  # the head's own: not added again
    N = len(old_ids)
    base = eagle3.Eagle3Config.from_target(target, aux_layers=AUX, draft_vocab_size=N)
    vocab = eagle3.DraftVocab(old_ids, V)
    grown, grown_cfg, grown_vocab = eagle3.widen_vocab(head, base, vocab, counts, N + 2,
                                                       target_rows)  # fmt: skip
    assert grown_cfg.draft_vocab_size == N + 2
    assert grown_vocab.ids.tolist() == sorted([*old_ids.tolist(), 199, 3])
    rows = grown["lm_head.weight"]
    assert rows.shape == (N + 2, d) and rows.dtype == np.float32
    where = np.searchsorted(grown_vocab.ids, old_ids)
    assert np.array_equal(rows[where], head["lm_head.weight"])
    for token in (3, 199):
        new = rows[np.searchsorted(grown_vocab.ids, token)]
        np.testing.assert_allclose(new, target_rows[token] @ carry, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match=rf"size={N - 1} is outside \[{N}, 200\]: .* only grow"):
        eagle3.widen_vocab(head, base, vocab, counts, N - 1, target_rows)
    with pytest.raises(ValueError, match=r"counts has shape \(199,\); expected \[200\]"):
        eagle3.widen_vocab(head, base, vocab, counts[:-1], N + 2, target_rows)


def test_bad_heads_are_refused_before_training(tmp_path, target_dir):
    with pytest.raises(ValueError, match="draft_vocab_size=321 is larger than the target's"):
        train_eagle_head(_config(target_dir, tmp_path, draft_vocab_size=321), progress=False)
    outside = _config(target_dir, tmp_path / "b", aux_layers=(1, 2, 4))
    with pytest.raises(ValueError, match=r"aux_layers=\(1, 2, 4\) reach outside"):
        train_eagle_head(outside, progress=False)
    with pytest.raises(ValueError, match="not three distinct increasing layers"):
        train_eagle_head(_config(target_dir, tmp_path / "c", aux_layers=()), progress=False)


def test_the_command_line_trains_an_eagle3_head(tmp_path, target_dir, capsys):
    argv = ["train", "eagle3", "--target", str(target_dir), "--out-dir", str(tmp_path / "run")]
    argv += ["--aux-layers", "1", "2", "3", "--ttt-steps", "2", "--draft-vocab-size", "200"]
    argv += ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-batches", "1"]
    argv += ["--max-train-chars", "20000", "--lm-head-init", "target", "--quiet"]
    assert main(argv) == 0
    assert "EAGLE-3 head written to" in capsys.readouterr().out
    _, cfg, vocab = load_eagle3_head(tmp_path / "run" / "final")
    assert cfg.draft_vocab_size == vocab.size == 200
    saved = json.loads((tmp_path / "run" / "eagle_train_config.json").read_text())
    assert saved["head"] == "eagle3" and saved["ttt_steps"] == 2
    assert saved["lm_head_init"] == "target"
    assert main([*argv, "--inputs", "token"]) == 2
    assert "--inputs applies to `train eagle1`, not `train eagle3`" in capsys.readouterr().err
    generate = ["generate", "def", "--model", str(target_dir), "--method", "eagle3"]
    generate += ["--max-new-tokens", "6", "--head"]
    assert main([*generate, str(tmp_path / "run" / "final")]) == 0
    capsys.readouterr()
    assert main([*generate, str(tmp_path / "missing")]) == 2
    assert "is missing" in capsys.readouterr().err


# ---------------------------------------------------------------------------- one target feature


def test_a_single_aux_layer_is_accepted_and_checked_early(target_dir, tmp_path):
    assert _config(target_dir, tmp_path, aux_layers=[4]).aux_layers == (4,)  # the top feature
    with pytest.raises(ValueError, match=r"must be three layer indices .* or one"):
        _config(target_dir, tmp_path, aux_layers=(1, 2))
    with pytest.raises(ValueError, match=r"aux_layers=\(5,\) is outside \[0, 4\]"):
        train_eagle_head(_config(target_dir, tmp_path, aux_layers=(5,)), progress=False)


def test_the_command_line_trains_a_top_feature_head_saved_for_minieagle_only(
    tmp_path, target_dir, capsys
):
    """`--aux-layers 4` on the 4-layer target: the paper's ablation head that reads the top
    feature only. Its file has no serving ids (engines fuse three layers), it loads back, and
    it drafts."""
    argv = ["train", "eagle3", "--target", str(target_dir), "--out-dir", str(tmp_path / "run")]
    argv += ["--aux-layers", "4", "--ttt-steps", "2", "--steps", "2", "--batch-size", "2"]
    argv += ["--seq-len", "16", "--eval-batches", "1", "--max-train-chars", "20000", "--quiet"]
    with pytest.warns(UserWarning, match=r"aux_layers=\(4,\) is one target feature; serving"):
        assert main(argv) == 0
    capsys.readouterr()
    final = tmp_path / "run" / "final"
    config = json.loads((final / "config.json").read_text())
    assert "eagle_config" not in config and config["minieagle_aux_layers"] == [4]
    head, cfg, _ = load_eagle3_head(final, target_dir=target_dir)
    d = cfg.layer.hidden_size
    assert cfg.aux_layers == (4,) and head["fc.weight"].shape == (d, d)
    saved = json.loads((tmp_path / "run" / "eagle_train_config.json").read_text())
    assert saved["aux_layers"] == [4]
    generate = ["generate", "def", "--model", str(target_dir), "--method", "eagle3"]
    assert main([*generate, "--max-new-tokens", "6", "--head", str(final)]) == 0
    config["minieagle_aux_layers"] = [5]
    (final / "config.json").write_text(json.dumps(config))
    _, target_config, _ = load_checkpoint(target_dir)
    with pytest.raises(ValueError, match=r"minieagle_aux_layers=\[5\] names no stream of the "
                       r"target \(0 to num_hidden_layers=4\)"):  # fmt: skip
        load_eagle3_head(final, target_config=target_config)


def test_scoring_a_run_runs_no_backward_pass(tmp_path, target_dir, monkeypatch):
    """Every eval (step 0, every eval_every steps, the end) scores the head on the validation
    batches: forward only, so a run's backward passes are exactly its training steps."""
    real, backward_calls = eagle3._ttt_backward, []

    def counted(*args):
        backward_calls.append(1)
        return real(*args)

    monkeypatch.setattr(eagle3, "_ttt_backward", counted)
    steps = _count_steps(monkeypatch)
    log = train_eagle_head(_config(target_dir, tmp_path, steps=4, eval_every=2), progress=False)
    assert len(log["evals"]) >= 3  # step 0, 2 and 4 were scored
    assert len(backward_calls) == len(steps) == 4
