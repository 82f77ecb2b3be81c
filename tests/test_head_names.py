"""Shipped heads by name and by default (row 19 of issue 22): `--head smollm2-eagle3` works from
any directory, and a method without --head gets the shipped head trained for its target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minieagle import cli
from minieagle.cli.methods import head_dir
from minieagle.errors import MissingFileError
from minieagle.shipped import PRETRAINED, default_head, resolve_head, shipped_heads


def test_a_shipped_head_is_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("smollm2-eagle1", "smollm2-eagle3", "small-eagle1", "small-medusa"):
        assert resolve_head(name) == PRETRAINED / name
    args = cli.build_parser().parse_args(["generate", "x", "--method", "eagle3", "--head",
                                          "smollm2-eagle3"])  # fmt: skip
    assert head_dir(args) == PRETRAINED / "smollm2-eagle3"


def test_a_directory_wins_over_a_shipped_name_and_an_unknown_name_lists_the_shipped_ones(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2-eagle1").mkdir()  # the user's own head of the same name
    assert resolve_head("smollm2-eagle1").resolve() == (tmp_path / "smollm2-eagle1").resolve()
    with pytest.raises(MissingFileError, match="'smollm2-eagle9' is neither a directory") as e:
        resolve_head("smollm2-eagle9")
    assert all(head.name in str(e.value) for head in shipped_heads())
    assert resolve_head("runs/my-head") == Path("runs/my-head")  # a path: the loader explains


def _target(tmp_path, name, **shapes):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(shapes))
    return directory


@pytest.mark.parametrize(
    ("method", "smollm2_head", "small_head"),
    [
        ("eagle1", "smollm2-eagle1", "small-eagle1"),
        ("eagle2", "smollm2-eagle1", "small-eagle1"),
        ("eagle3", "smollm2-eagle3", "small-eagle3"),
        ("medusa", "small-medusa", "small-medusa"),
    ],
)
def test_the_default_head_is_the_one_trained_for_the_target(
    tmp_path, method, smollm2_head, small_head
):
    """A SmolLM2 target (its shapes, any directory) gets the SmolLM2 heads, the small target
    its own; a target no shipped head fits gets the small target's head, whose load then
    explains the mismatch (medusa ships no SmolLM2 heads)."""
    smollm2 = _target(tmp_path, "smollm2-135m-instruct", vocab_size=49152, hidden_size=576)
    assert default_head(method, smollm2) == PRETRAINED / smollm2_head
    assert default_head(method, PRETRAINED / "small") == PRETRAINED / small_head
    other = _target(tmp_path, "other", vocab_size=320, hidden_size=64)
    assert default_head(method, other) == PRETRAINED / small_head
    args = cli.build_parser().parse_args(["generate", "x", "--method", method, "--model",
                                          str(smollm2)])  # fmt: skip
    assert head_dir(args) == PRETRAINED / smollm2_head


def test_the_wider_small_eagle3_head_is_shipped_to_be_named_not_defaulted(tmp_path, monkeypatch):
    """`small-eagle3-wide` (its MLP four times the target's width) is found by name, loads with
    its width and its calibration, and drafts greedy text equal to vanilla's with τ above 3 on a
    held-out prompt; without --head the small target keeps `small-eagle3`, the head measured
    faster on the reference CPU, although both fit it (`ALTERNATIVES`)."""
    from minieagle import shipped
    from minieagle.bench import heldout_prompts
    from minieagle.checkpoint import load_checkpoint
    from minieagle.drafters import build_drafter
    from minieagle.generate import emitted_per_forward, generate
    from minieagle.shipped import ALTERNATIVES, DEFAULT_MODEL

    monkeypatch.chdir(tmp_path)
    wide = resolve_head("small-eagle3-wide")
    assert wide == PRETRAINED / "small-eagle3-wide" and wide.name in ALTERNATIVES
    config = json.loads((wide / "config.json").read_text())
    assert config["intermediate_size"] == 1536  # the target's MLP: 384
    assert (wide / "calibration.json").is_file()
    assert default_head("eagle3", DEFAULT_MODEL) == PRETRAINED / "small-eagle3"
    monkeypatch.setattr(shipped, "ALTERNATIVES", frozenset({"small-eagle3"}))  # the rule at work
    assert default_head("eagle3", DEFAULT_MODEL) == PRETRAINED / "small-eagle3-wide"
    params, model_config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    (_, ids), *_ = heldout_prompts(tokenizer, per_corpus=1)
    vanilla = generate(params, model_config, ids, max_new_tokens=32, stop_at_eos=False)
    drafter = build_drafter("eagle3", target=(params, model_config), head="small-eagle3-wide")
    result = generate(params, model_config, ids, drafter=drafter, max_new_tokens=32,
                      stop_at_eos=False)  # fmt: skip
    assert result.tokens == vanilla.tokens
    assert emitted_per_forward([result]) > 3.0
