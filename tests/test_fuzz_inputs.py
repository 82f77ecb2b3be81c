"""Fuzzing the two front doors, the `minieagle` command and `generate`, with Hypothesis.

The property (issue 8): every input either runs or ends with one clear message and the documented
exit code — never a traceback, never a hang.
- The command: `main(argv)` returns 0, or 2 with `error: ...` (or argparse's usage message) on
  stderr; no exception escapes it, and each call ends within a time bound (the models are nano,
  so any legal run is short; a hang would be caught by the bound).
- `generate`: returns a result, or raises `MinieagleError` (never IndexError, TypeError, ...).
The checks have negative controls: a command whose handler raises a bare exception is reported
as a traceback, and a `generate` that lets a TypeError out fails the API property.
"""

from __future__ import annotations

import contextlib
import io
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minieagle import cli, model
from minieagle.checkpoint import save_checkpoint
from minieagle.config import preset
from minieagle.errors import EXIT_ERROR, EXIT_OK, MinieagleError
from minieagle.generate import generate
from minieagle.heads.eagle1 import Eagle1Config, init_head, save_head
from minieagle.sampling import SamplingParams
from minieagle.tokenizer import Tokenizer

SECONDS_PER_CALL = 30.0  # nano models: a legal run takes well under a second or two
NANO = preset("nano")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A nano target, draft model and EAGLE-1 head, plus broken model directories."""
    root = tmp_path_factory.mktemp("fuzz")
    tokenizer = Tokenizer.load(cli.PRETRAINED / "tokenizer-320.json")
    target = model.init_params(NANO, seed=1)
    save_checkpoint(root / "target", target, NANO, tokenizer)
    draft = NANO.replace(num_hidden_layers=1)
    save_checkpoint(root / "draft", model.init_params(draft, seed=2), draft, tokenizer)
    head_cfg = Eagle1Config.from_target(NANO)
    save_head(root / "head", init_head(head_cfg, seed=3), head_cfg)
    (root / "a-file").write_text("not a model\n")
    (root / "empty").mkdir()
    return _Models(
        {
            "target": str(root / "target"),
            "draft": str(root / "draft"),
            "head": str(root / "head"),
            "bad": [str(root / "missing"), str(root / "a-file"), str(root / "empty")],
            "out": str(root / "out"),
            "params": target,
        }
    )


class _Models(dict):
    """The fixture's paths and arrays, with a short repr for Hypothesis' failure reports."""

    def __repr__(self) -> str:
        return "<nano models>"


def _run_cli(argv) -> tuple[int, str, float]:
    """(exit code, stderr, seconds) of main(argv); any escaping exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, err.getvalue(), time.perf_counter() - start


def _assert_clean(code: int, err: str, seconds: float) -> None:
    assert code in (EXIT_OK, EXIT_ERROR), (code, err)
    assert "Traceback" not in err
    if code == EXIT_ERROR:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines, "an error exit must say why"
        assert lines[-1].startswith("error: ") or ": error: argument" in lines[-1], err
    assert seconds < SECONDS_PER_CALL


# Values a careless user or a hostile script might type, for any flag.
_WILD = st.sampled_from(
    ["0", "1", "2", "3", "-1", "-7", "1.5", "nan", "inf", "-inf", "", "abc", "1e6", "5000",
     "1000000000", "0x10", " 4", "4 "]
)  # fmt: skip
_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@st.composite
def _generate_argv(draw, models):
    argv = ["generate", draw(_TEXT)]
    model_dir = draw(st.sampled_from([models["target"]] * 4 + models["bad"]))
    argv += ["--model", model_dir]
    method = draw(st.sampled_from(["vanilla", "draft-model", "eagle1", "eagle2", "eagle9"]))
    argv += ["--method", method]
    argv += ["--draft-model", models["draft"]] if draw(st.booleans()) else []
    argv += ["--head", draw(st.sampled_from([models["head"], *models["bad"]]))]
    flags = ["--temperature", "--top-k", "--top-p", "--seed", "--gamma", "--depth",
             "--tree-top-k", "--total-tokens", "--max-new-tokens"]  # fmt: skip
    for flag in draw(st.lists(st.sampled_from(flags), max_size=4, unique=True)):
        argv += [flag, draw(_WILD)]
    if draw(st.booleans()):
        argv += ["--tree", draw(st.sampled_from(["default", "chain", "star"]))]
    if draw(st.booleans()):
        argv += ["--stats"]
    if "--max-new-tokens" not in argv:
        argv += ["--max-new-tokens", str(draw(st.integers(0, 20)))]
    return argv


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generate_command_runs_or_explains(models, data):
    argv = data.draw(_generate_argv(models))
    _assert_clean(*_run_cli(argv))


@pytest.mark.parametrize(
    "flags",
    [
        ["--method", "vanilla"],
        ["--method", "draft-model", "--gamma", "3"],
        ["--method", "eagle1", "--tree", "chain", "--depth", "2"],
        ["--method", "eagle2", "--tree-top-k", "3", "--total-tokens", "6"],
        ["--temperature", "0.7", "--top-k", "5", "--top-p", "0.9"],
    ],
)
def test_the_fuzzed_generate_command_also_succeeds(models, flags):
    """The fuzz strategy's legal corner runs (so the property is not met by errors alone)."""
    argv = ["generate", "def f(x):", "--model", models["target"], *flags, "--max-new-tokens", "5"]
    if "draft-model" in flags:
        argv += ["--draft-model", models["draft"]]
    if any(m in flags for m in ("eagle1", "eagle2")):
        argv += ["--head", models["head"]]
    code, err, seconds = _run_cli(argv)
    assert code == EXIT_OK, err
    _assert_clean(code, err, seconds)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_bench_command_runs_or_explains(models, data):
    argv = ["bench", "--suite", "methods", "--model", models["target"]]
    argv += ["--head", models["head"], "--draft-model", models["draft"]]
    for flag in ("--repeats", "--new-tokens", "--prompts-per-corpus"):
        argv += [flag, data.draw(st.sampled_from(["0", "-1", "1", "2", "x", "nan"]))]
    if data.draw(st.booleans()):
        outs = [models["out"] + "/missing/b.json", models["out"], "/proc/forbidden.json"]
        argv += ["--out", data.draw(st.sampled_from(outs))]
    for flag in data.draw(st.lists(st.sampled_from(["--depth", "--gamma", "--tree-top-k"]))):
        argv += [flag, data.draw(_WILD)]
    _assert_clean(*_run_cli(argv))


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_train_command_runs_or_explains(models, data, tmp_path_factory):
    what = data.draw(st.sampled_from(["target", "draft-model", "eagle1", "medusa"]))
    out_dir = data.draw(st.sampled_from([str(tmp_path_factory.mktemp("run")), models["bad"][1]]))
    argv = ["train", what, "--out-dir", out_dir, "--quiet", "--steps", "1"]
    argv += ["--eval-every", "1", "--save-every", "1", "--eval-batches", "1"]
    seq_len = data.draw(st.sampled_from(["8", "0", "100000"]))
    argv += ["--batch-size", "2", "--seq-len", seq_len]
    argv += ["--max-train-chars", data.draw(st.sampled_from(["3000", "-5", "0x"]))]
    if what == "eagle1":
        argv += ["--target", data.draw(st.sampled_from([models["target"], *models["bad"]]))]
    else:
        argv += ["--preset", data.draw(st.sampled_from(["nano", "huge"]))]
        argv += ["--tokenizer", str(cli.PRETRAINED / "tokenizer-320.json")]
    for flag in data.draw(st.lists(st.sampled_from(["--lr", "--warmup-steps", "--seed"]))):
        argv += [flag, data.draw(_WILD)]
    _assert_clean(*_run_cli(argv))


def test_the_clean_exit_check_catches_a_traceback(monkeypatch, models):
    """Negative controls: a handler that lets a bare exception out escapes main() (so the fuzz
    tests fail on it), and the clean-exit check refuses a traceback, an exit code outside the
    documented ones, a silent error and a slow run."""

    def broken(args):
        raise IndexError("index 7 is out of bounds")

    from minieagle.cli import generate as generate_command

    monkeypatch.setattr(generate_command, "cmd_generate", broken)
    with pytest.raises(IndexError):
        _run_cli(["generate", "x", "--model", models["target"]])
    for code, err, seconds in (
        (1, "Traceback (most recent call last):\nIndexError: 7\n", 0.1),
        (3, "error: odd\n", 0.1),
        (2, "", 0.1),
        (0, "", SECONDS_PER_CALL + 1),
    ):
        with pytest.raises(AssertionError):
            _assert_clean(code, err, seconds)


# ---------------------------------------------------------------------------- generate (API)

_PROMPTS = st.one_of(
    st.text(max_size=4),
    st.lists(st.integers(-3, NANO.vocab_size + 3), max_size=6),
    st.lists(st.floats(allow_nan=True), min_size=1, max_size=3),
    st.lists(st.booleans(), min_size=1, max_size=3),
    st.lists(st.lists(st.integers(0, 5), max_size=2), min_size=1, max_size=2),
    st.builds(lambda n: np.arange(n, dtype=np.int64) % NANO.vocab_size, st.integers(0, 140)),
    st.builds(lambda n: np.ones((n, 2), dtype=np.int64), st.integers(1, 3)),
    st.none(),
    st.integers(0, 5),
)
_COUNTS = st.one_of(
    st.integers(-3, 200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.just("8"),
    st.just(np.int64(3)),
)


def _call_generate(params, prompt, count):
    return generate(params, NANO, prompt, max_new_tokens=count, sampling=SamplingParams(), seed=0)


@settings(max_examples=150)
@given(prompt=_PROMPTS, count=_COUNTS)
def test_generate_runs_or_raises_an_explained_error(models, prompt, count):
    start = time.perf_counter()
    try:
        result = _call_generate(models["params"], prompt, count)
    except MinieagleError as error:
        assert str(error)
    else:
        assert len(result.tokens) <= count
        assert isinstance(count, (int, np.integer)) and not isinstance(count, bool)
        assert not isinstance(prompt, str)
        assert math.isnan(result.tau) or result.tau >= 1.0
    assert time.perf_counter() - start < SECONDS_PER_CALL


def test_the_api_property_catches_an_unexplained_error(models):
    """Negative control: generate given a string that a careless implementation indexes would
    raise a bare TypeError/IndexError; the property above demands MinieagleError."""
    with pytest.raises(MinieagleError):
        _call_generate(models["params"], "12", 4)
    with pytest.raises(MinieagleError):
        _call_generate(models["params"], [1, 2], float("nan"))
