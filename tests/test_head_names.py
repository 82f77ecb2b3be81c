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
