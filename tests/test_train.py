"""Training the target (minieagle.train): it learns, it exports a loadable model, and a run that
crashes (mid-step or mid-save) and resumes ends bitwise equal to a run that never stopped.

All runs are the nano preset for 30 steps (about a second each); the bundled 320-token tokenizer
avoids training one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from minieagle import model
from minieagle import train as train_module
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import PRETRAINED
from minieagle.config import preset
from minieagle.tokenizer import Tokenizer
from minieagle.train import TrainConfig, evaluate, token_stream, train

TOKENIZER = str(PRETRAINED / "tokenizer-320.json")
STEPS, SAVE_EVERY = 30, 10


class SimulatedCrash(Exception):
    """Stands in for a kill or a full disk at a chosen moment."""


def _config(out_dir: Path, **changes) -> TrainConfig:
    fields = dict(
        preset="nano",
        out_dir=str(out_dir),
        tokenizer=TOKENIZER,
        steps=STEPS,
        batch_size=4,
        seq_len=32,
        lr=1e-2,
        warmup_steps=5,
        eval_every=15,
        save_every=SAVE_EVERY,
        max_train_chars=50_000,
    )
    fields.update(changes)
    return TrainConfig(**fields)


def _state(out_dir: Path) -> dict[str, np.ndarray]:
    """Parameters and optimizer moments saved in a run directory."""
    state = load_file(out_dir / "state" / "params.safetensors")
    state.update(load_file(out_dir / "state" / "optimizer.safetensors"))
    return state


def _differing(out_dir: Path, reference: Path) -> list[str]:
    """Names of saved tensors that are not bitwise equal between two run directories."""
    mine, theirs = _state(out_dir), _state(reference)
    assert mine.keys() == theirs.keys()
    return sorted(name for name in mine if not np.array_equal(mine[name], theirs[name]))


def _count_steps(monkeypatch, crash_at: int | None = None) -> list[int]:
    """Count training steps (calls of loss_and_grads), optionally crashing on call `crash_at`."""
    real, calls = model.loss_and_grads, []

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) == crash_at:
            raise SimulatedCrash(f"killed during step call {crash_at}")
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "loss_and_grads", counted)
    return calls


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict]:
    """One uninterrupted run: (its directory, its log)."""
    out_dir = tmp_path_factory.mktemp("uninterrupted")
    return out_dir, train(_config(out_dir), progress=False)


# ---------------------------------------------------------------------------- learning, export


def test_validation_loss_falls_below_the_initial_loss(reference):
    out_dir, log = reference
    config, tokenizer = preset("nano"), Tokenizer.load(TOKENIZER)
    initial_params = model.init_params(config, seed=0)
    assert [record["step"] for record in log["evals"]] == [15, 30]
    for corpus in ("prose", "code"):
        stream, _ = token_stream(tokenizer, corpus, "val", out_dir, 50_000)
        initial = evaluate(initial_params, config, stream, 32, 4, 4)
        assert initial == pytest.approx(np.log(config.vocab_size), abs=0.1)  # near uniform
        assert log["evals"][-1][f"val_loss_{corpus}"] < initial - 0.5


def test_the_exported_model_loads_and_is_the_trained_one(reference):
    out_dir, log = reference
    assert Path(log["export_dir"]) == out_dir / "final"
    params, config, tokenizer = load_checkpoint(log["export_dir"])
    assert config == preset("nano")
    trained = load_file(out_dir / "state" / "params.safetensors")
    assert params.keys() == trained.keys()
    assert all(np.array_equal(params[name], trained[name]) for name in params)
    text = "def f(x):\n    return x"
    assert tokenizer.encode(text) == Tokenizer.load(TOKENIZER).encode(text)
    hf_config = json.loads((out_dir / "final" / "config.json").read_text())
    assert hf_config["model_type"] == "llama"
    assert hf_config["architectures"] == ["LlamaForCausalLM"]


# ---------------------------------------------------------------------------- resume


def test_a_run_killed_mid_step_resumes_to_the_same_bits(tmp_path, monkeypatch, reference):
    _count_steps(monkeypatch, crash_at=25)  # step 25 of 30; the last save was at step 20
    with pytest.raises(SimulatedCrash):
        train(_config(tmp_path), progress=False)
    monkeypatch.undo()
    steps = _count_steps(monkeypatch)
    log = train(_config(tmp_path), progress=False)
    assert len(steps) == STEPS - 20  # it resumed from the step-20 state, not from scratch
    assert _differing(tmp_path, reference[0]) == []
    val = [(r["step"], r["val_loss_prose"], r["val_loss_code"]) for r in log["evals"]]
    assert val == [
        (r["step"], r["val_loss_prose"], r["val_loss_code"]) for r in reference[1]["evals"]
    ]


def test_resume_check_catches_a_resume_that_forgets_the_data_order(
    tmp_path, monkeypatch, reference
):
    """A broken resume that restores parameters and moments but not the batch sampler's RNG."""
    _count_steps(monkeypatch, crash_at=25)
    with pytest.raises(SimulatedCrash):
        train(_config(tmp_path), progress=False)
    monkeypatch.undo()
    real_load = train_module._load_state

    def load_without_rng(*args):
        step, _, log = real_load(*args)
        return step, np.random.default_rng(12345).bit_generator.state, log

    monkeypatch.setattr(train_module, "_load_state", load_without_rng)
    train(_config(tmp_path), progress=False)
    assert len(_differing(tmp_path, reference[0])) > 0


def test_no_resume_starts_over(tmp_path, monkeypatch, reference):
    _count_steps(monkeypatch, crash_at=25)
    with pytest.raises(SimulatedCrash):
        train(_config(tmp_path), progress=False)
    monkeypatch.undo()
    steps = _count_steps(monkeypatch)
    train(_config(tmp_path), resume=False, progress=False)
    assert len(steps) == STEPS
    assert _differing(tmp_path, reference[0]) == []


def _crash_on(monkeypatch, module, name: str, hit) -> None:
    """Make module.name raise SimulatedCrash on the first call for which hit(call number, args)."""
    real, calls = getattr(module, name), []

    def crashing(*args, **kwargs):
        calls.append(args)
        if hit(len(calls), args):
            raise SimulatedCrash(f"{name}{args}")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, crashing)


SAVE_CRASHES = {
    # each save writes params then moments: calls 3 and 4 belong to the step-20 save
    "writing params": (train_module, "save_file", lambda n, args: n == 3),
    "writing moments": (train_module, "save_file", lambda n, args: n == 4),
    # the step-20 save moves the step-10 state aside, then the new one into place
    "moving the old state aside": (os, "replace", lambda n, a: Path(a[1]).name == "state.old"),
    "moving the new state in": (
        os,
        "replace",
        lambda n, a: Path(a[0]).name == "state.tmp" and Path(a[1]).with_name("state.old").exists(),
    ),
}


@pytest.mark.parametrize("moment", SAVE_CRASHES)
def test_a_crash_mid_save_keeps_the_previous_state(tmp_path, monkeypatch, reference, moment):
    module, name, hit = SAVE_CRASHES[moment]
    _crash_on(monkeypatch, module, name, hit)
    with pytest.raises(SimulatedCrash):
        train(_config(tmp_path), progress=False)
    monkeypatch.undo()
    steps = _count_steps(monkeypatch)
    train(_config(tmp_path), progress=False)
    assert len(steps) == STEPS - 10  # resumed from the intact step-10 state
    assert _differing(tmp_path, reference[0]) == []


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"preset": "huge"}, "unknown preset 'huge'; expected one of"),
        ({"steps": 0}, "steps=0 must be a positive integer"),
        (
            {"tokenizer": str(PRETRAINED / "tokenizer-512.json")},
            "tokenizer has vocab_size=512 but preset 'nano' expects 320",
        ),
    ],
)
def test_bad_configurations_are_refused(tmp_path, changes, message):
    with pytest.raises(ValueError) as error:
        train(_config(tmp_path, **changes), progress=False)
    assert message in str(error.value)
