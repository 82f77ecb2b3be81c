"""Training the EAGLE-1 head (minieagle.train_eagle): it learns, it leaves the target untouched, it
exports a loadable head, and a run killed mid-step resumes to the same bits as one that never
stopped.

The target is a nano model trained for 30 steps with the bundled 320-token tokenizer; every run
is a few dozen steps on short windows (about a second).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from minieagle import train_eagle as train_eagle_module
from minieagle.cli import PRETRAINED, main
from minieagle.config import preset
from minieagle.heads.eagle1 import load_head
from minieagle.train import TrainConfig, train
from minieagle.train_eagle import EagleTrainConfig, train_eagle1

STEPS, SAVE_EVERY = 20, 5


class SimulatedCrash(Exception):
    """Stands in for a kill at a chosen moment."""


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> Path:
    """A nano target trained for 30 steps: enough for peaked, predictable next-token laws."""
    run = tmp_path_factory.mktemp("target")
    config = TrainConfig(
        preset="nano",
        out_dir=str(run),
        tokenizer=str(PRETRAINED / "tokenizer-320.json"),
        steps=30,
        batch_size=4,
        seq_len=32,
        lr=1e-2,
        warmup_steps=5,
        eval_every=30,
        save_every=30,
        max_train_chars=50_000,
    )
    return Path(train(config, progress=False)["export_dir"])


def _fingerprint(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _config(target_dir: Path, out_dir: Path, **changes) -> EagleTrainConfig:
    fields = dict(
        target=str(target_dir),
        out_dir=str(out_dir),
        steps=STEPS,
        batch_size=4,
        seq_len=32,
        lr=1e-2,
        warmup_steps=3,
        eval_every=10,
        eval_batches=2,
        save_every=SAVE_EVERY,
        max_train_chars=50_000,
    )
    fields.update(changes)
    return EagleTrainConfig(**fields)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, target_dir) -> tuple[Path, dict, dict]:
    """One uninterrupted run: (its directory, its log, the target's file hashes before it)."""
    before = _fingerprint(target_dir)
    out_dir = tmp_path_factory.mktemp("uninterrupted")
    return out_dir, train_eagle1(_config(target_dir, out_dir), progress=False), before


def _state(out_dir: Path) -> dict[str, np.ndarray]:
    state = load_file(out_dir / "state" / "params.safetensors")
    state.update(load_file(out_dir / "state" / "optimizer.safetensors"))
    return state


def _differing(out_dir: Path, reference_dir: Path) -> list[str]:
    mine, theirs = _state(out_dir), _state(reference_dir)
    assert mine.keys() == theirs.keys()
    return sorted(name for name in mine if not np.array_equal(mine[name], theirs[name]))


def _count_steps(monkeypatch, crash_at: int | None = None) -> list[int]:
    """Count training steps (calls of eagle1_loss), optionally crashing on call `crash_at`."""
    real, calls = train_eagle_module.eagle1_loss, []

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) == crash_at:
            raise SimulatedCrash(f"killed during step call {crash_at}")
        return real(*args, **kwargs)

    monkeypatch.setattr(train_eagle_module, "eagle1_loss", counted)
    return calls


# ---------------------------------------------------------------------------- learning, export


def test_validation_loss_falls_and_agreement_rises(reference):
    _, log, _ = reference
    assert [record["step"] for record in log["evals"]] == [0, 10, 20]
    first, last = log["evals"][0], log["evals"][-1]
    for corpus in ("prose", "code"):
        assert last[f"val_loss_{corpus}"] < 0.8 * first[f"val_loss_{corpus}"]
        assert last[f"val_smooth_l1_{corpus}"] < first[f"val_smooth_l1_{corpus}"]
        assert last[f"val_top1_{corpus}"] > first[f"val_top1_{corpus}"]
        assert 0 <= last[f"val_accept_{corpus}"] <= 1


def test_the_target_is_not_modified(reference, target_dir):
    assert _fingerprint(target_dir) == reference[2]


def test_the_exported_head_loads_and_is_the_trained_one(reference, target_dir):
    out_dir, log, _ = reference
    assert Path(log["export_dir"]) == out_dir / "final"
    head, cfg = load_head(log["export_dir"])
    assert cfg.inputs == "token+feature" and cfg.layer == preset("nano").replace(
        num_hidden_layers=1
    )
    trained = load_file(out_dir / "state" / "params.safetensors")
    assert head.keys() == trained.keys()
    assert all(np.array_equal(head[name], trained[name]) for name in head)
    config = json.loads((out_dir / "final" / "config.json").read_text())
    assert config["minieagle_target"] == str(target_dir)


# ---------------------------------------------------------------------------- resume


def test_a_run_killed_mid_step_resumes_to_the_same_bits(
    tmp_path, monkeypatch, reference, target_dir
):
    _count_steps(monkeypatch, crash_at=18)  # step 18 of 20; the last save was at step 15
    with pytest.raises(SimulatedCrash):
        train_eagle1(_config(target_dir, tmp_path), progress=False)
    monkeypatch.undo()
    steps = _count_steps(monkeypatch)
    log = train_eagle1(_config(target_dir, tmp_path), progress=False)
    assert len(steps) == STEPS - 15  # it resumed from the step-15 state, not from scratch
    assert _differing(tmp_path, reference[0]) == []
    assert [r["val_loss_code"] for r in log["evals"]] == [
        r["val_loss_code"] for r in reference[1]["evals"]
    ]


def test_resume_check_catches_a_resume_that_forgets_the_noise_and_data_order(
    tmp_path, monkeypatch, reference, target_dir
):
    _count_steps(monkeypatch, crash_at=18)
    with pytest.raises(SimulatedCrash):
        train_eagle1(_config(target_dir, tmp_path), progress=False)
    monkeypatch.undo()
    real_load = train_eagle_module._load_state

    def load_without_rng(*args):
        step, _, log = real_load(*args)
        return step, np.random.default_rng(12345).bit_generator.state, log

    monkeypatch.setattr(train_eagle_module, "_load_state", load_without_rng)
    train_eagle1(_config(target_dir, tmp_path), progress=False)
    assert len(_differing(tmp_path, reference[0])) > 0


def test_a_run_continues_a_trained_head(tmp_path, target_dir, reference):
    """init_from: the run's first evaluation is the saved run's last (the same head on the same
    validation windows), not a fresh head's; a head of other inputs is refused."""
    _, saved_log, _ = reference
    cfg = _config(target_dir, tmp_path / "continued", init_from=saved_log["export_dir"],
                  steps=2, eval_every=2, seed=5)  # fmt: skip
    first = train_eagle1(cfg, progress=False)["evals"][0]
    last_saved, fresh_first = saved_log["evals"][-1], saved_log["evals"][0]
    for key in ("val_loss_prose", "val_loss_code"):
        assert first[key] == pytest.approx(last_saved[key], rel=1e-6)
        assert first[key] != pytest.approx(fresh_first[key], rel=1e-3)
    other = _config(target_dir, tmp_path / "other", init_from=saved_log["export_dir"],
                    inputs="token")  # fmt: skip
    with pytest.raises(ValueError, match="has tensors|reads inputs"):
        train_eagle1(other, progress=False)


def test_resuming_a_run_of_another_head_is_refused(tmp_path, target_dir):
    train_eagle1(_config(target_dir, tmp_path, steps=2, save_every=1), progress=False)
    with pytest.raises(ValueError, match=r"holds a run with inputs='token\+feature', not 'token'"):
        train_eagle1(_config(target_dir, tmp_path, steps=2, inputs="token"), progress=False)


# ---------------------------------------------------------------------------- command line, errors


def test_the_command_line_trains_an_ablation_head(tmp_path, target_dir, capsys):
    argv = ["train", "eagle1", "--target", str(target_dir), "--out-dir", str(tmp_path / "run")]
    argv += ["--inputs", "feature", "--noise", "0.05", "--steps", "2", "--batch-size", "2"]
    argv += ["--seq-len", "16", "--eval-batches", "1", "--max-train-chars", "20000", "--quiet"]
    assert main(argv) == 0
    assert "EAGLE-1 head written to" in capsys.readouterr().out
    _, cfg = load_head(tmp_path / "run" / "final")
    assert cfg.inputs == "feature"
    saved = json.loads((tmp_path / "run" / "eagle_train_config.json").read_text())
    assert saved["noise"] == 0.05
    assert main(argv + ["--preset", "nano"]) == 2
    assert "--preset does not apply to eagle1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"inputs": "both"}, "inputs='both' is not one of"),
        ({"steps": 0}, "steps=0 must be a positive integer"),
        ({"noise": -0.1}, "noise=-0.1 is negative"),
        ({"seq_len": 200}, "seq_len=200 needs windows of 201 tokens, more than the target's"),
    ],
)
def test_bad_configurations_are_refused(tmp_path, target_dir, changes, message):
    with pytest.raises(ValueError) as error:
        train_eagle1(_config(target_dir, tmp_path, **changes), progress=False)
    assert message in str(error.value)


def test_training_on_target_generated_continuations(tmp_path, target_dir):
    """data="generated": the target writes the training text first (cached, so a rerun reads the
    same text instead of generating again); the head trains on it and is exported."""
    from minieagle import train_eagle

    cfg = _config(target_dir, tmp_path / "gen", data="generated", generated_tokens=400, steps=4)
    log = train_eagle.train_eagle1(cfg, progress=False)
    assert Path(log["export_dir"], "model.safetensors").is_file()
    cached = list((tmp_path / "gen").glob("generated-*.npy"))
    assert len(cached) == 1
    text = np.load(cached[0])
    assert len(text) >= 400 and text.min() >= 0

    cfg_again = _config(
        target_dir, tmp_path / "gen", data="generated", generated_tokens=400, steps=6
    )
    train_eagle.train_eagle1(cfg_again, progress=False)
    assert np.array_equal(np.load(cached[0]), text)  # read from the cache, not regenerated


def test_generated_text_continues_prompts_with_the_targets_greedy_tokens(tmp_path, target_dir):
    from minieagle.checkpoint import load_checkpoint
    from minieagle.generate import greedy_reference
    from minieagle.train_eagle import generated_stream

    params, config, _ = load_checkpoint(target_dir)
    cfg = _config(
        target_dir,
        tmp_path,
        data="generated",
        generated_tokens=60,
        seq_len=15,
        generate_temperature=0.0,
        prompt_tokens=6,
    )
    corpus = np.arange(3, 203, dtype=np.int32) % config.vocab_size
    ids = generated_stream(params, config, [corpus], cfg, None)
    piece = ids[:16]  # prompt of 6 + 10 generated
    assert piece[6:].tolist() == greedy_reference(params, config, piece[:6].tolist(), 10)


def test_writing_the_generated_text_resumes_after_a_kill(tmp_path, target_dir, monkeypatch):
    """A generation killed mid-way continues from its last partial save (every 2 continuations
    here) and ends with the same text as one that never stopped, without redoing saved work."""
    from minieagle import generate as generate_module
    from minieagle.checkpoint import load_checkpoint
    from minieagle.train_eagle import generated_stream

    params, config, _ = load_checkpoint(target_dir)
    cfg = _config(target_dir, tmp_path, data="generated", generated_tokens=150, seq_len=15,
                  prompt_tokens=6)  # fmt: skip
    corpus = np.arange(3, 203, dtype=np.int32) % config.vocab_size
    monkeypatch.setattr(train_eagle_module, "GENERATION_CHECKPOINT_EVERY", 2)
    whole = generated_stream(params, config, [corpus], cfg, tmp_path / "whole.npy")
    real, calls = generate_module.generate, []

    def killed_at_seven(*args, **kwargs):
        calls.append(1)
        if len(calls) == 7:
            raise SimulatedCrash("killed while the target writes")
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_module, "generate", killed_at_seven)
    with pytest.raises(SimulatedCrash):
        generated_stream(params, config, [corpus], cfg, tmp_path / "killed.npy")
    assert (tmp_path / "killed.npy.partial.npz").is_file()
    calls.clear()
    resumed = generated_stream(params, config, [corpus], cfg, tmp_path / "killed.npy")
    assert np.array_equal(resumed, whole)
    assert len(calls) == 10 - 6  # 10 continuations in all; 6 were saved before the kill
    assert not (tmp_path / "killed.npy.partial.npz").exists()


def test_unknown_data_source_is_refused(tmp_path, target_dir):
    with pytest.raises(ValueError, match="data='web' is not one of"):
        _config(target_dir, tmp_path, data="web")


def test_load_or_train_head_loads_a_saved_head_and_trains_a_missing_one(tmp_path, target_dir):
    from minieagle.heads.eagle1 import load_head
    from minieagle.train_eagle import load_or_train_head

    trained, cfg = load_or_train_head(
        tmp_path / "missing", target_dir, steps=3, max_train_chars=50_000
    )
    assert not (tmp_path / "missing").exists()  # the stand-in lived in a temporary directory
    save_dir = tmp_path / "saved"
    from minieagle.heads.eagle1 import save_head

    save_head(save_dir, trained, cfg)
    loaded, _ = load_or_train_head(save_dir, target_dir, steps=3)
    reference, _ = load_head(save_dir, dtype=np.float64)
    assert all(np.array_equal(loaded[k], reference[k]) for k in reference)
