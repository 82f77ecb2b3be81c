"""The trainers (minieagle.train, minieagle.train_eagle) against what goes wrong around them:
crashes during saves, again and again; two trainers on one run directory; leftovers of crashed
exports; read-only directories; a resume with another preset, tokenizer or target; data shorter
than a window; corrupt token caches; bad settings; a diverging run.

Every run is the nano preset for a few steps on 2,000 characters per corpus (tens of ms). POSIX
only: the run lock is flock, the dead and live owners of leftovers are processes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from safetensors.numpy import load_file

from minieagle import model
from minieagle import train as train_module
from minieagle import train_eagle as train_eagle_module
from minieagle.checkpoint import (
    CONFIG_FILE,
    TOKENIZER_FILES,
    WEIGHTS_FILE,
    load_checkpoint,
    save_checkpoint,
    write_directory_atomically,
)
from minieagle.cli import PRETRAINED, main
from minieagle.config import preset
from minieagle.errors import InvalidInputError, TrainingDivergedError
from minieagle.optim import AdamW
from minieagle.tokenizer import Tokenizer
from minieagle.train import TrainConfig, token_stream, train
from minieagle.train_eagle import EagleTrainConfig, train_eagle1

TOKENIZER = str(PRETRAINED / "tokenizer-320.json")
STEPS, SAVE_EVERY = 6, 2


class SimulatedCrash(Exception):
    """Stands in for a kill or a power cut at a chosen moment (not an OSError, so that no
    `except OSError` in the code under test can swallow it)."""


def _config(out_dir: Path, **changes) -> TrainConfig:
    fields = dict(
        preset="nano",
        out_dir=str(out_dir),
        tokenizer=TOKENIZER,
        steps=STEPS,
        batch_size=2,
        seq_len=16,
        lr=1e-2,
        warmup_steps=2,
        eval_every=STEPS,
        eval_batches=1,
        save_every=SAVE_EVERY,
        max_train_chars=2_000,
    )
    fields.update(changes)
    return TrainConfig(**fields)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The directory of one uninterrupted run."""
    out_dir = tmp_path_factory.mktemp("uninterrupted")
    train(_config(out_dir), progress=False)
    return out_dir


def _run_dir(tmp_path: Path, reference: Path, name: str = "run") -> Path:
    """A fresh run directory holding the reference run's token caches (skips tokenizing)."""
    out_dir = tmp_path / name
    out_dir.mkdir()
    for cache in reference.glob("tokens-*.npy"):
        shutil.copy(cache, out_dir / cache.name)
    return out_dir


def _saved(out_dir: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The tensors (params and moments) and the state.json saved in a run directory."""
    state = out_dir / "state"
    tensors = load_file(state / "params.safetensors")
    tensors.update(load_file(state / "optimizer.safetensors"))
    return tensors, json.loads((state / "state.json").read_text())


def _assert_same_bits(out_dir: Path, reference: Path) -> None:
    mine, my_info = _saved(out_dir)
    theirs, their_info = _saved(reference)
    assert mine.keys() == theirs.keys()
    assert [n for n in mine if not np.array_equal(mine[n], theirs[n])] == []
    assert (my_info["step"], my_info["rng"]) == (their_info["step"], their_info["rng"])


def _count_steps(monkeypatch, crash_at: int | None = None, corrupt=None) -> list[int]:
    """Count training steps (calls of loss_and_grads); optionally crash on call `crash_at`, or
    pass each call's (loss, grads) and call number through `corrupt`."""
    real, calls = model.loss_and_grads, []

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) == crash_at:
            raise SimulatedCrash(f"killed during step call {crash_at}")
        loss, grads = real(*args, **kwargs)
        return corrupt(len(calls), loss, grads) if corrupt else (loss, grads)

    monkeypatch.setattr(model, "loss_and_grads", counted)
    return calls


# ---------------------------------------------------------------------------- 1. crashes in saves


class Call(NamedTuple):
    """One call through which a save changes the disk: the function's name, its arguments, and
    the name of the directory `shutil.rmtree` is deleting when it is made (else None)."""

    name: str
    args: tuple
    deleting: str | None


class DiskCrash:
    """Raise SimulatedCrash instead of the first disk call of a save for which
    `hit(call, calls made before it in this save)` holds: a crash between two moments of the
    protocol. Deleting a directory goes through unlink and rmdir, so a crash can land midway.

    `save`: count only the calls of `train._save_state`, and crash in the run's save number
    `save`; None: count every call. fsync does nothing meanwhile: only a power cut could tell."""

    CALLS = ((os, "mkdir"), (os, "replace"), (os, "rename"), (os, "unlink"), (os, "rmdir"))

    def __init__(self, monkeypatch, hit=lambda call, done: False, *, save=None):
        self.hit, self.save, self.saves, self.done, self.deleting = hit, save, 0, [], None
        self.counting = save is None
        for module, name in self.CALLS + ((train_module, "save_file"), (os, "fsync")):
            real = (lambda fd: None) if name == "fsync" else getattr(module, name)
            monkeypatch.setattr(module, name, self._wrap(name, real))
        real_rmtree = shutil.rmtree

        def rmtree(path, *args, **kwargs):
            self.deleting = Path(path).name
            try:
                return real_rmtree(path, *args, **kwargs)
            finally:
                self.deleting = None

        monkeypatch.setattr(shutil, "rmtree", rmtree)
        if save is not None:
            real_save = train_module._save_state

            def counted_save(*args):
                self.saves, self.done, self.counting = self.saves + 1, [], True
                try:
                    real_save(*args)
                finally:
                    self.counting = False

            monkeypatch.setattr(train_module, "_save_state", counted_save)

    def _wrap(self, name, real):
        def wrapped(*args, **kwargs):
            if self.counting and self.saves == (self.save or 0):
                call = Call(name, args, self.deleting)
                if self.hit(call, self.done):
                    raise SimulatedCrash(f"before {call}")
                self.done.append(call)
            return real(*args, **kwargs)

        return wrapped

    def committed(self) -> bool:
        """Whether the save renamed its new state into place before the crash."""
        return any(c.name == "replace" and Path(c.args[0]).name == "state.tmp" for c in self.done)


def _at_call(number: int):
    """Hit disk call `number` of the save."""
    return lambda call, done: len(done) + 1 == number


def _seen(done: list[Call], name: str, deleting: str | None = None) -> int:
    return sum(c.name == name and c.deleting == deleting for c in done)


# Moments of a save, by what it does (the same in any version of the protocol that does it).
MOMENTS = {
    "writing params": lambda c, done: c.name == "save_file" and not _seen(done, "save_file"),
    "writing moments": lambda c, done: c.name == "save_file" and _seen(done, "save_file") == 1,
    "moving state aside": lambda c, done: c.name == "replace" and c.args[1].name == "state.old",
    "committing state.tmp": lambda c, done: c.name == "replace" and c.args[0].name == "state.tmp",
    "midway deleting state.old": lambda c, done: (
        c.name == "unlink" and c.deleting == "state.old" and _seen(done, "unlink", "state.old") == 1
    ),
    "midway deleting state.tmp": lambda c, done: (
        c.name == "unlink" and c.deleting == "state.tmp" and _seen(done, "unlink", "state.tmp") == 1
    ),
}


def _state_of_step(step: int) -> tuple[dict, AdamW]:
    """Params and an optimizer whose every value depends on `step` (to recognise a loaded state)."""
    weights = np.arange(12, dtype=np.float32).reshape(4, 3)
    params = {"weight": weights + step, "norm": np.full(3, -step, dtype=np.float32)}
    optimizer = AdamW(params)
    for name, value in params.items():
        optimizer.m[name][...] = 2 * value
        optimizer.v[name][...] = value * value
    optimizer.step_count = step
    return params, optimizer


def _save(out_dir: Path, step: int) -> None:
    params, optimizer = _state_of_step(step)
    train_module._save_state(out_dir, params, optimizer, step, {"draws": step}, {"evals": [step]})


def _resume(out_dir: Path) -> int:
    """What a resumed run does: tidy, then load the newest state, checked bit for bit."""
    train_module._discard_unfinished_save(out_dir)
    state_dir = train_module._newest_state(out_dir)
    assert state_dir is not None, f"no state to resume from: {sorted(os.listdir(out_dir))}"
    params, optimizer = _state_of_step(999)
    step, rng_state, log = train_module._load_state(state_dir, params, optimizer)
    expected, expected_optimizer = _state_of_step(step)
    assert all(np.array_equal(params[n], expected[n]) for n in params)
    assert all(np.array_equal(optimizer.m[n], expected_optimizer.m[n]) for n in params)
    assert all(np.array_equal(optimizer.v[n], expected_optimizer.v[n]) for n in params)
    assert (optimizer.step_count, rng_state, log) == (step, {"draws": step}, {"evals": [step]})
    return step


def _crashing_save(out_dir: Path, step: int, at: int) -> tuple[bool, bool]:
    """Save `step`, crashing before disk call `at`: (crashed, committed before the crash)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        crash = DiskCrash(monkeypatch, _at_call(at))
        try:
            _save(out_dir, step)
        except SimulatedCrash:
            return True, crash.committed()
    return False, True


@pytest.mark.parametrize("layout", ["state", "state.old"])
@pytest.mark.parametrize("first", range(1, 16))
def test_two_crashes_anywhere_in_two_saves_resume_from_the_newest_committed_state(
    tmp_path, monkeypatch, layout, first
):
    """Crash before disk call `first` of the save of step 20, resume, crash before every disk
    call of the next save, resume again: each resume loads (bit for bit) the newest state
    whose save got past its commit, and a final save leaves nothing else behind. layout
    "state.old" starts from what older versions leave after a crash between their renames."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # only a power cut could tell; it is slow
    for second in range(1, 30):
        out_dir = tmp_path / f"{second}"
        out_dir.mkdir()
        _save(out_dir, 10)
        if layout == "state.old":
            os.rename(out_dir / "state", out_dir / "state.old")
        _, committed = _crashing_save(out_dir, 20, first)
        step = _resume(out_dir)
        assert step == (20 if committed else 10)
        crashed_again, committed = _crashing_save(out_dir, step + 10, second)
        resumed = _resume(out_dir)
        assert resumed == (step + 10 if committed else step)
        _save(out_dir, resumed + 10)
        assert _resume(out_dir) == resumed + 10
        assert sorted(os.listdir(out_dir)) == ["state"]
        if not crashed_again:
            break  # `second` passed the last disk call of the save
    assert not crashed_again, "the second save made more disk calls than the loop tried"


def test_the_crash_points_cover_every_disk_call_of_a_save(tmp_path, monkeypatch):
    """The parametrisation above reaches every disk call of a save (and 15 is past the last)."""
    _save(tmp_path, 10)
    crash = DiskCrash(monkeypatch)
    _save(tmp_path, 20)
    assert 8 <= len(crash.done) <= 14
    for moment, hit in MOMENTS.items():
        if moment != "midway deleting state.tmp":  # only after a crashed save
            assert sum(hit(call, crash.done[:i]) for i, call in enumerate(crash.done)) == 1


def _crashing_run(out_dir: Path, moment: str, save: int, newest: int) -> int:
    """Run, crashing at `moment` of the run's save number `save`; returns the step of the
    newest committed state afterwards, given `newest` before."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        crash = DiskCrash(monkeypatch, MOMENTS[moment], save=save)
        try:
            train(_config(out_dir), progress=False)
        except SimulatedCrash:
            crashed_step = newest + save * SAVE_EVERY
            return crashed_step if crash.committed() else crashed_step - SAVE_EVERY
    return STEPS  # the moment never came: the run finished


@pytest.mark.parametrize("first", MOMENTS)
def test_a_run_crashing_in_two_saves_ends_with_the_same_bits(
    tmp_path, monkeypatch, reference, first
):
    """Crash at moment `first` of the save of step 4; the resumed run crashes at any moment of
    its first save; a third run redoes only the steps after the newest committed state and ends
    bitwise equal (params, moments, step, RNG) to a run that never stopped."""
    crashed_once = _run_dir(tmp_path, reference, "once")
    newest_once = _crashing_run(crashed_once, first, 2, 0)
    steps = _count_steps(monkeypatch)
    for second in MOMENTS:
        out_dir = tmp_path / second
        shutil.copytree(crashed_once, out_dir)
        newest = _crashing_run(out_dir, second, 1, newest_once)
        steps.clear()
        train(_config(out_dir), progress=False)
        assert len(steps) == STEPS - newest, f"then {second}"
        _assert_same_bits(out_dir, reference)


def test_resume_reads_the_state_old_an_older_version_left(tmp_path, monkeypatch, reference):
    """Older versions crashed between their two renames left `state.old/` and `state.tmp/`."""
    out_dir = _run_dir(tmp_path, reference)
    _count_steps(monkeypatch, crash_at=5)  # the last save was at step 4
    with pytest.raises(SimulatedCrash):
        train(_config(out_dir), progress=False)
    monkeypatch.undo()
    os.rename(out_dir / "state", out_dir / "state.old")
    (out_dir / "state.tmp").mkdir()
    (out_dir / "state.tmp" / "params.safetensors").write_bytes(b"half written")
    steps = _count_steps(monkeypatch)
    train(_config(out_dir), progress=False)
    assert len(steps) == STEPS - 4
    _assert_same_bits(out_dir, reference)
    assert not (out_dir / "state.old").exists() and not (out_dir / "state.tmp").exists()


def test_an_incomplete_state_is_ignored_with_a_warning(tmp_path, monkeypatch, reference):
    """A half-deleted `state.old/` (an older version crashed while deleting it) cannot be
    resumed: the run says so and starts over, instead of failing on every resume."""
    out_dir = _run_dir(tmp_path, reference)
    train(_config(out_dir, steps=2), progress=False)
    os.rename(out_dir / "state", out_dir / "state.old")
    (out_dir / "state.old" / "params.safetensors").unlink()
    steps = _count_steps(monkeypatch)
    with pytest.warns(UserWarning, match=r"ignoring the incomplete training state \['state.old'\]"):
        train(_config(out_dir), progress=False)
    assert len(steps) == STEPS
    _assert_same_bits(out_dir, reference)


# ---------------------------------------------------------------------------- 2. one trainer


def _hold_lock(out_dir: Path, pid: str) -> int:
    """Lock out_dir/.lock as a trainer does, recording `pid`; returns the descriptor."""
    out_dir.mkdir(parents=True, exist_ok=True)
    handle = os.open(out_dir / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(handle, f"{pid}\n".encode())
    return handle


def test_a_second_trainer_on_a_locked_run_directory_is_refused(tmp_path, monkeypatch, reference):
    out_dir = _run_dir(tmp_path, reference)
    handle = _hold_lock(out_dir, "4242")
    steps = _count_steps(monkeypatch)
    try:
        message = f"another training run (pid 4242) is using {out_dir}; wait for it to finish"
        with pytest.raises(InvalidInputError, match=re.escape(message) + " or pass another"):
            train(_config(out_dir), progress=False)
    finally:
        os.close(handle)
    assert steps == []
    train(_config(out_dir), progress=False)  # the lock is free again
    assert len(steps) == STEPS


def test_the_lock_records_the_pid_and_is_released_when_the_run_fails(tmp_path, monkeypatch):
    recorded = []

    def note_the_lock(*args):
        recorded.append((tmp_path / ".lock").read_text())
        raise SimulatedCrash("killed")

    monkeypatch.setattr(train_module, "_tokenizer_for", note_the_lock)
    with pytest.raises(SimulatedCrash):
        train(_config(tmp_path), progress=False)
    assert recorded == [f"{os.getpid()}\n"]
    os.close(_hold_lock(tmp_path, "test"))  # would raise BlockingIOError if still held


def test_a_trainer_in_another_process_holds_the_lock_until_it_dies(tmp_path, reference):
    out_dir = _run_dir(tmp_path, reference)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from minieagle.train import _exclusive_run\n"
         "with _exclusive_run(Path(sys.argv[1])):\n print('locked', flush=True); sys.stdin.read()",
         str(out_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(InvalidInputError, match=f"another training run \\(pid {holder.pid}\\)"):
            train(_config(out_dir), progress=False)
    finally:
        holder.kill()  # a kill, not an exit: the OS releases the lock
        holder.wait()
    train(_config(out_dir), progress=False)


# ---------------------------------------------------------------------------- 3. export leftovers


def _finished_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _nano_checkpoint(directory: Path) -> None:
    config = preset("nano")
    save_checkpoint(directory, model.init_params(config), config, Tokenizer.load(TOKENIZER))


def test_a_save_removes_what_crashed_saves_of_it_left_and_keeps_live_ones(tmp_path):
    final = tmp_path / "final"
    _nano_checkpoint(final)
    dead, sleeper = _finished_pid(), subprocess.Popen(["sleep", "60"])
    try:
        abandoned = [
            f".final.saving-{dead}-a1b2c3d4",  # a save killed while writing
            f".final.old-{dead}-0123abcd",  # a save killed between its two renames
            ".final.saving-k2j4h5g6",  # older versions' names carry no pid
            ".final.old-89abcdef",
        ]
        kept = [
            f".final.saving-{sleeper.pid}-zzzzzzzz",  # a live process is writing it
            f".other.saving-{dead}-a1b2c3d4",  # another directory's
            ".final.saving-notes",  # not a name a save gives
        ]
        for name in abandoned + kept:
            (tmp_path / name).mkdir()
            (tmp_path / name / "model.safetensors").write_bytes(b"partial")
        _nano_checkpoint(final)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["final", *kept])
    load_checkpoint(final)


def test_temporary_names_carry_the_pid_and_the_old_directory_goes(tmp_path, monkeypatch):
    final = tmp_path / "final"
    _nano_checkpoint(final)
    names, real_rename = [], os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (names.append(Path(b).name), real_rename(a, b)))
    write_directory_atomically(
        final,
        lambda new: names.append(new.name),
        own_files=(CONFIG_FILE, WEIGHTS_FILE, *TOKENIZER_FILES),
        kind="checkpoint",
    )
    pid = os.getpid()
    assert names[0].startswith(f".final.saving-{pid}-")
    assert names[1].startswith(f".final.old-{pid}-") and names[2] == "final"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


# ---------------------------------------------------------------------------- 4. writable dirs


def _deny_writes_under(monkeypatch, directory: Path) -> None:
    """Make creating files or directories under `directory` fail as a read-only directory
    does (chmod cannot show it when the tests run as root)."""
    real_open, real_mkdir = os.open, os.mkdir

    def denied(path) -> bool:
        return Path(path).absolute().is_relative_to(directory.absolute())

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and kwargs.get("dir_fd") is None and denied(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if denied(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)


@pytest.mark.parametrize("which", ["--out-dir", "--export-dir"])
def test_a_read_only_directory_is_refused_before_any_training(
    tmp_path, monkeypatch, reference, which
):
    out_dir = _run_dir(tmp_path, reference)
    read_only = out_dir if which == "--out-dir" else tmp_path / "exports"
    read_only.mkdir(exist_ok=True)
    _deny_writes_under(monkeypatch, read_only)
    steps = _count_steps(monkeypatch)
    cfg = _config(out_dir, export_dir=str(tmp_path / "exports" / "model"))
    message = f"cannot write to {read_only} (Permission denied); make it writable (chmod u+w"
    with pytest.raises(InvalidInputError, match=re.escape(message) + f".* or pass another {which}"):
        train(cfg, progress=False)
    assert steps == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_chmod_read_only_out_dir_is_refused(tmp_path):
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    out_dir.chmod(0o555)
    try:
        with pytest.raises(InvalidInputError, match="chmod u\\+w"):
            train(_config(out_dir), progress=False)
    finally:
        out_dir.chmod(0o755)


def test_an_out_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "run").write_text("notes")
    with pytest.raises(InvalidInputError, match="--out-dir .*run is a file, not a directory"):
        train(_config(tmp_path / "run"), progress=False)
    with pytest.raises(InvalidInputError, match="cannot create --out-dir .*run/sub"):
        train(_config(tmp_path / "run" / "sub"), progress=False)
    with pytest.raises(InvalidInputError, match="--export-dir .*run is a file"):
        train(_config(tmp_path / "ok", export_dir=str(tmp_path / "run")), progress=False)


# ---------------------------------------------------------------------------- 5. the same run


def test_resuming_with_another_preset_is_refused_naming_both(tmp_path, monkeypatch, reference):
    out_dir = _run_dir(tmp_path, reference)
    train(_config(out_dir, steps=2), progress=False)
    tiny = _config(out_dir, preset="tiny", tokenizer=str(PRETRAINED / "tokenizer-512.json"))
    steps = _count_steps(monkeypatch)
    with pytest.raises(InvalidInputError) as error:
        train(tiny, progress=False)
    assert f"{out_dir} holds a run with preset='nano', not 'tiny'" in str(error.value)
    for fix in ("pass --preset nano to resume it", "another --out-dir", "--no-resume"):
        assert fix in str(error.value)
    assert steps == []
    train(tiny, resume=False, progress=False)  # starting over is allowed
    assert len(steps) == STEPS


def test_resuming_with_another_tokenizer_is_refused(tmp_path, reference):
    out_dir = _run_dir(tmp_path, reference)
    train(_config(out_dir, steps=2), progress=False)
    tokenizer = Tokenizer.load(TOKENIZER)
    merges = [tuple(m) for m in json.loads(Path(TOKENIZER).read_text())["merges"]]
    Tokenizer(merges[:-1] + [(merges[-1][1], merges[-1][0])], tokenizer.pattern).save(
        tmp_path / "other.json"
    )
    with pytest.raises(InvalidInputError, match="holds a run with tokenizer_sha256='[0-9a-f]{12}'"):
        train(_config(out_dir, tokenizer=str(tmp_path / "other.json")), progress=False)


def test_a_saved_state_of_another_model_is_refused_naming_tensor_and_run(tmp_path, reference):
    """Without the run's record (a run directory of an older version) the tensors still tell."""
    out_dir = _run_dir(tmp_path, reference)
    train(_config(out_dir, steps=2), progress=False)
    (out_dir / "train_config.json").unlink()
    tiny = _config(out_dir, preset="tiny", tokenizer=str(PRETRAINED / "tokenizer-512.json"))
    with pytest.raises(InvalidInputError) as error:
        train(tiny, progress=False)
    message = str(error.value)
    assert f"{out_dir / 'state'} holds the training state of another model" in message
    assert "'model.embed_tokens.weight' has shape (320, 32) there, (512, 64) here" in message
    assert f"the earlier run in {out_dir}" in message and "--no-resume" in message


# ---------------------------------------------------------------------------- 6. short data


def test_a_window_longer_than_the_data_is_refused_naming_the_stream(tmp_path, target_dir):
    message = r"the prose train token stream has \d+ tokens, fewer than seq_len \+ 2 = 122"
    fix = r".*lower --seq-len or raise --max-train-chars"
    with pytest.raises(InvalidInputError, match=message + fix):
        train(_config(tmp_path / "t", seq_len=120, max_train_chars=100), progress=False)
    with pytest.raises(InvalidInputError, match=message + fix):
        cfg = _eagle_config(target_dir, tmp_path / "e", seq_len=120, max_train_chars=100)
        train_eagle1(cfg, progress=False)


def test_a_seq_len_beyond_the_models_positions_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="seq_len=200 is more than preset 'nano'"):
        train(_config(tmp_path, seq_len=200), progress=False)


# ---------------------------------------------------------------------------- 7. token caches


CORRUPTIONS = {
    "garbage bytes": lambda path, ids: path.write_bytes(b"\x93NUMPY garbage"),
    "empty file": lambda path, ids: path.write_bytes(b""),
    "floats": lambda path, ids: np.save(path, ids.astype(np.float32)),
    "two dimensions": lambda path, ids: np.save(path, ids.reshape(1, -1)),
    "ids beyond the vocabulary": lambda path, ids: np.save(path, ids + 320),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_a_corrupt_token_cache_is_named_and_rebuilt(tmp_path, corruption):
    tokenizer = Tokenizer.load(TOKENIZER)
    ids, _ = token_stream(tokenizer, "prose", "val", tmp_path, 2_000)
    (cache,) = tmp_path.glob("tokens-prose-val-*.npy")
    CORRUPTIONS[corruption](cache, ids)
    with pytest.warns(UserWarning, match=f"token cache {re.escape(str(cache))} is .*; rebuilding"):
        again, _ = token_stream(tokenizer, "prose", "val", tmp_path, 2_000)
    assert np.array_equal(again, ids) and np.array_equal(np.load(cache), ids)
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.name]


# ---------------------------------------------------------------------------- 8. eagle resume


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> Path:
    """An untrained nano target with the bundled 320-token tokenizer."""
    directory = tmp_path_factory.mktemp("target") / "nano"
    _nano_checkpoint(directory)
    return directory


def _eagle_config(target, out_dir: Path, **changes) -> EagleTrainConfig:
    fields = dict(
        target=str(target),
        out_dir=str(out_dir),
        steps=2,
        batch_size=2,
        seq_len=16,
        warmup_steps=1,
        eval_every=2,
        eval_batches=1,
        save_every=1,
        max_train_chars=2_000,
    )
    fields.update(changes)
    return EagleTrainConfig(**fields)


def _count_head_steps(monkeypatch) -> list[int]:
    real, calls = train_eagle_module.eagle1_loss, []
    monkeypatch.setattr(
        train_eagle_module, "eagle1_loss", lambda *a, **k: (calls.append(1), real(*a, **k))[1]
    )
    return calls


def test_eagle_resume_accepts_the_same_target_however_spelt(tmp_path, monkeypatch, target_dir):
    out_dir = tmp_path / "run"
    train_eagle1(_eagle_config(target_dir, out_dir), progress=False)
    steps = _count_head_steps(monkeypatch)
    monkeypatch.chdir(target_dir.parent)
    for spelling, total in ((f"{target_dir}/", 3), (target_dir.name, 4), ("./nano/", 5)):
        train_eagle1(_eagle_config(spelling, out_dir, steps=total), progress=False)
    assert len(steps) == 3  # one new step per resume: none started over


def test_eagle_resume_refuses_a_target_retrained_in_place(tmp_path, monkeypatch, target_dir):
    target = tmp_path / "target"
    shutil.copytree(target_dir, target)
    out_dir = tmp_path / "run"
    train_eagle1(_eagle_config(target, out_dir), progress=False)
    config = preset("nano")
    save_checkpoint(target, model.init_params(config, seed=1), config, Tokenizer.load(TOKENIZER))
    steps = _count_head_steps(monkeypatch)
    with pytest.raises(InvalidInputError) as error:
        train_eagle1(_eagle_config(target, out_dir, steps=3), progress=False)
    message = str(error.value)
    assert f"{out_dir} holds a head trained for the target {target.resolve()} (fingerp" in message
    assert "pass the original --target to resume it, or another --out-dir" in message
    assert "--no-resume would start over (discards progress)" in message
    assert steps == []


def test_eagle_resume_compares_the_resolved_path_of_an_older_run_file(
    tmp_path, monkeypatch, target_dir
):
    """Run files of older versions record the target as given, without a fingerprint."""
    out_dir = tmp_path / "run"
    train_eagle1(_eagle_config(target_dir, out_dir), progress=False)
    record = json.loads((out_dir / "eagle_train_config.json").read_text())
    del record["target_fingerprint"]
    record["target"] = f"{target_dir}/"
    (out_dir / "eagle_train_config.json").write_text(json.dumps(record))
    steps = _count_head_steps(monkeypatch)
    train_eagle1(_eagle_config(target_dir, out_dir, steps=3), progress=False)
    assert len(steps) == 1
    record["target"] = str(tmp_path)
    (out_dir / "eagle_train_config.json").write_text(json.dumps(record))
    with pytest.raises(InvalidInputError, match="fingerprint not recorded"):
        train_eagle1(_eagle_config(target_dir, out_dir, steps=4), progress=False)


# ---------------------------------------------------------------------------- 9. settings


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_train_chars": -5}, "max_train_chars=-5 must be >= 0 (0 = the whole split)"),
        ({"lr": 0.0}, "lr=0.0 must be a positive, finite number"),
        ({"lr": float("nan")}, "lr=nan must be a positive, finite number"),
        ({"lr": float("inf")}, "lr=inf must be a positive, finite number"),
        ({"warmup_steps": -1}, "warmup_steps=-1 must be >= 0"),
        ({"weight_decay": -0.1}, "weight_decay=-0.1 must be a finite number >= 0"),
        ({"grad_clip": 0.0}, "grad_clip=0.0 must be > 0"),
        ({"seed": -1}, "seed=-1 must be >= 0"),
        ({"export_dtype": "int8"}, "export_dtype='int8' is not one of"),
        ({"corpora": ()}, "corpora=() must be one or more of ('prose', 'code')"),
        ({"corpora": ("web",)}, "corpora=('web',) must be one or more of"),
    ],
)
@pytest.mark.parametrize("trainer", ["target", "eagle1"])
def test_bad_settings_are_refused_naming_the_field(tmp_path, trainer, changes, message):
    with pytest.raises(InvalidInputError) as error:
        if trainer == "target":
            _config(tmp_path, **changes)
        else:
            _eagle_config(tmp_path, tmp_path, **changes)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"p_weight": -1.0}, "p_weight=-1.0 is negative or not finite"),
        ({"noise": float("nan")}, "noise=nan is negative or not finite"),
        ({"generate_temperature": -1.0}, "generate_temperature=-1.0 must be >= 0"),
        ({"prompt_tokens": 0}, "prompt_tokens=0 must be in [1, seq_len=16]"),
        ({"prompt_tokens": 17}, "prompt_tokens=17 must be in [1, seq_len=16]"),
        ({"data": "generated", "generated_tokens": 10}, "generated_tokens=10 is too few"),
    ],
)
def test_bad_head_settings_are_refused_naming_the_field(tmp_path, changes, message):
    with pytest.raises(InvalidInputError) as error:
        _eagle_config(tmp_path, tmp_path, **changes)
    assert message in str(error.value)


# ---------------------------------------------------------------------------- 10. divergence


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflows
def test_a_diverging_run_names_step_loss_and_lr_and_keeps_its_last_state(tmp_path, reference):
    out_dir = _run_dir(tmp_path, reference)
    with pytest.raises(TrainingDivergedError) as error:
        train(_config(out_dir, lr=1e6, steps=30, save_every=1), progress=False)
    found = re.search(r"training diverged at step (\d+): the loss is nan", str(error.value))
    assert found, str(error.value)
    assert re.search(r"at learning rate [0-9.e+]+ \(--lr 1e\+06\); lower --lr", str(error.value))
    tensors, info = _saved(out_dir)
    assert info["step"] == int(found[1])  # the state before the diverged step stays
    assert all(np.isfinite(value).all() for value in tensors.values())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflows
def test_the_command_line_reports_divergence_in_one_line(tmp_path, capsys):
    argv = ["train", "target", "--preset", "nano", "--tokenizer", TOKENIZER, "--lr", "1e6"]
    argv += ["--out-dir", str(tmp_path), "--steps", "30", "--batch-size", "2", "--seq-len", "16"]
    argv += ["--max-train-chars", "2000", "--quiet"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: training diverged at step ")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflows
def test_an_update_that_would_make_the_state_nan_is_never_saved(tmp_path, monkeypatch, reference):
    """A finite loss with an infinite gradient (an overflow in the backward pass) before the
    save of step 4: the run stops at that step and the step-2 state stays on disk, finite."""

    def infinite_gradient(call, loss, grads):
        if call == 4:
            grads["model.norm.weight"][0] = np.inf
        return loss, grads

    out_dir = _run_dir(tmp_path, reference)
    _count_steps(monkeypatch, corrupt=infinite_gradient)
    with pytest.raises(TrainingDivergedError) as error:
        train(_config(out_dir), progress=False)
    tensors, info = _saved(out_dir)
    assert all(np.isfinite(value).all() for value in tensors.values())
    assert info["step"] == 2
    assert re.search(r"at step 3: the loss is [0-9.]+ and the gradient norm inf", str(error.value))


def test_save_state_refuses_nan_values_and_keeps_the_saved_state(tmp_path):
    _save(tmp_path, 10)
    params, optimizer = _state_of_step(20)
    optimizer.v["norm"][0] = np.nan
    with pytest.raises(TrainingDivergedError, match=r"at step 20 \['v.norm'\] hold NaN or inf"):
        train_module._save_state(tmp_path, params, optimizer, 20, {"draws": 20}, {"evals": [20]})
    assert _resume(tmp_path) == 10
