"""Training the target model: token streams from the bundled corpora, the loop, validation,
checkpoints and resume. Read top to bottom: run directory -> data -> batches -> step -> evaluate
-> save.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file
from tqdm import tqdm

from minieagle import model
from minieagle.checkpoint import STORAGE_DTYPES, _fsync, save_checkpoint
from minieagle.config import LlamaConfig, preset
from minieagle.data import CORPORA
from minieagle.errors import InvalidInputError, TrainingDivergedError
from minieagle.optim import AdamW, AdamWConfig, clip_grad_norm, cosine_lr

try:
    import fcntl
except ImportError:  # Windows has no flock: runs there are not locked
    fcntl = None

RUN_FILE = "train_config.json"
LOCK_FILE = ".lock"
# The saved state: `state/` is the newest, `state.old/` its predecessor while a save swaps them,
# `state.tmp/` a save being written (never read). `_save_state` gives the protocol.
STATE, STATE_OLD, STATE_TMP = "state", "state.old", "state.tmp"
STATE_FILES = ("params.safetensors", "optimizer.safetensors", "state.json")
START_OVER = "or --no-resume to start over (discards progress)"


@dataclass
class TrainConfig:
    """Everything one training run needs; saved beside its checkpoints as `train_config.json`."""

    preset: str = "nano"
    out_dir: str = "runs/nano"
    tokenizer: str = ""  # path to tokenizer.json; "" = train one on the corpus
    corpora: tuple[str, ...] = ("prose", "code")
    steps: int = 200
    batch_size: int = 8
    seq_len: int = 64
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_batches: int = 4
    save_every: int = 100
    seed: int = 0
    export_dir: str = ""  # where the final model goes (HF layout); "" = out_dir/final
    export_dtype: str = "float32"
    max_train_chars: int = 0  # 0 = the whole train split; else a prefix per corpus (tests)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.corpora = tuple(self.corpora)
        _check_shared_fields(self)


def _check_shared_fields(cfg) -> None:
    """Check the fields TrainConfig and EagleTrainConfig share; each message names the field,
    the value, what is expected and an example."""
    for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches", "save_every"):
        if getattr(cfg, name) <= 0:
            raise InvalidInputError(f"{name}={getattr(cfg, name)} must be a positive integer")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise InvalidInputError(f"lr={cfg.lr} must be a positive, finite number such as 3e-3")
    if cfg.warmup_steps < 0:
        raise InvalidInputError(f"warmup_steps={cfg.warmup_steps} must be >= 0 (0 = no warmup)")
    if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
        raise InvalidInputError(
            f"weight_decay={cfg.weight_decay} must be a finite number >= 0 such as 0.1 (0 = none)"
        )
    if not cfg.grad_clip > 0:
        raise InvalidInputError(
            f"grad_clip={cfg.grad_clip} must be > 0: the largest global gradient norm, e.g. 1.0"
        )
    if cfg.seed < 0:
        raise InvalidInputError(f"seed={cfg.seed} must be >= 0 (NumPy's generators need it)")
    if cfg.max_train_chars < 0:
        raise InvalidInputError(
            f"max_train_chars={cfg.max_train_chars} must be >= 0 (0 = the whole split)"
        )
    if cfg.export_dtype not in STORAGE_DTYPES:
        raise InvalidInputError(
            f"export_dtype={cfg.export_dtype!r} is not one of {STORAGE_DTYPES}; pass 'float32' "
            "(or 'float16' for half the size)"
        )
    if not cfg.corpora or any(corpus not in CORPORA for corpus in cfg.corpora):
        raise InvalidInputError(f"corpora={cfg.corpora} must be one or more of {CORPORA}")


# ---------------------------------------------------------------------------- run directory


def _prepare_run_dirs(out_dir: Path, export_dir: Path) -> None:
    """Create the run directory and check that it, and the place of the export, can be written:
    a read-only or misspelt directory is reported now, not by the first save or the export."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidInputError(
            f"--out-dir {out_dir} is a file, not a directory; pass a directory path (the run "
            "keeps its state, token caches and lock there)"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InvalidInputError(
            f"cannot create --out-dir {out_dir} ({error.strerror}); pass a path under a writable "
            "directory"
        ) from error
    _require_writable(out_dir, "--out-dir")
    if export_dir.exists() and not export_dir.is_dir():
        raise InvalidInputError(
            f"--export-dir {export_dir} is a file; pass a directory path for the exported model"
        )
    parent = export_dir.parent  # the export is written as a sibling, then renamed into place
    while not parent.exists():
        parent = parent.parent
    _require_writable(parent, "--export-dir")


def _require_writable(directory: Path, flag: str) -> None:
    """Create and delete a probe file in `directory` (permission bits alone do not tell: root,
    read-only mounts, ACLs)."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise InvalidInputError(
            f"cannot write to {directory} ({error.strerror}); make it writable (chmod u+w "
            f"{directory}) or pass another {flag}"
        ) from error


@contextlib.contextmanager
def _exclusive_run(out_dir: Path):
    """Hold an exclusive lock on out_dir/.lock for the whole run, so that two trainers never
    write one run directory. The file records the holder's pid for the other's message; the OS
    releases the lock when the holder exits, however it exits."""
    if fcntl is None:
        yield
        return
    handle = os.open(out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(handle, 32).decode(errors="replace").strip() or "unknown"
            raise InvalidInputError(
                f"another training run (pid {holder}) is using {out_dir}; wait for it to finish "
                "or pass another --out-dir"
            ) from None
        os.ftruncate(handle, 0)
        os.write(handle, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(handle)  # releases the lock


def _read_run_record(path: Path) -> dict:
    """The settings a run recorded in its run file; {} when there is none (or it is damaged:
    `_load_state` still checks every tensor)."""
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _refuse_other_run(out_dir: Path, recorded: dict, identity: dict, fixes: dict) -> None:
    """Refuse to resume the run in `out_dir` when a model-defining setting in `identity` differs
    from the one it `recorded`; `fixes[key]` (formatted with the recorded value) says how to
    resume it. Settings older versions did not record are not compared."""
    for key, value in identity.items():
        if key in recorded and recorded[key] != value:
            raise InvalidInputError(
                f"{out_dir} holds a run with {key}={recorded[key]!r}, not {value!r}; "
                f"{fixes[key].format(recorded=recorded[key])}, pass another --out-dir for a new "
                f"run, {START_OVER}"
            )


# ---------------------------------------------------------------------------- data


def encode_documents(tokenizer, documents, max_chars: int = 0) -> np.ndarray:
    """One stream of ids: <bos> doc <eos> <bos> doc <eos> ... as int32 [N]."""
    ids, used = [], 0
    for doc in documents:
        text = doc.text
        if max_chars and used + len(text) > max_chars:
            text = text[: max_chars - used]
        ids.extend(tokenizer.encode(text, add_bos=True, add_eos=True))
        used += len(text)
        if max_chars and used >= max_chars:
            break
    return np.asarray(ids, dtype=np.int32)


def _tokenizer_key(tokenizer) -> str:
    """A short hash of the tokenizer's file content (names the token caches)."""
    if not hasattr(tokenizer, "save"):  # an HF tokenizer: the files it would write
        from minieagle.hf_tokenizer import tokenizer_files

        text = json.dumps(tokenizer_files(tokenizer), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(Path(tmp) / "tokenizer.json")
        return hashlib.sha256((Path(tmp) / "tokenizer.json").read_bytes()).hexdigest()[:12]


def _read_token_cache(path: Path, vocab_size: int) -> np.ndarray | None:
    """The ids cached at `path`, or None, with a warning naming the file, when it cannot be read
    or is not a 1-D int32 stream of ids in [0, vocab_size): the caller then rebuilds it."""
    try:
        ids = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        problem = f"unreadable ({error})"
    else:
        if not (isinstance(ids, np.ndarray) and ids.dtype == np.int32 and ids.ndim == 1):
            problem = f"not a 1-D int32 array ({getattr(ids, 'dtype', type(ids).__name__)})"
        elif ids.size == 0 or ids.min() < 0 or ids.max() >= vocab_size:
            problem = f"not a stream of token ids in [0, {vocab_size})"
        else:
            return ids
    warnings.warn(f"token cache {path} is {problem}; rebuilding it", stacklevel=3)
    return None


def _write_token_cache(path: Path, ids: np.ndarray) -> None:
    """Save `ids` at `path` through a temporary file renamed over it: never half a cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, ids)
    os.replace(tmp, path)


def token_stream(
    tokenizer, corpus: str, split: str, cache_dir: Path | None, max_chars: int = 0
) -> tuple[np.ndarray, int]:
    """(ids, n_bytes) of a corpus split, cached on disk keyed by the tokenizer's content."""
    from minieagle.data import load_split

    documents = load_split(corpus, split)
    key = _tokenizer_key(tokenizer)
    path = cache_dir / f"tokens-{corpus}-{split}-{key}-{max_chars}.npy" if cache_dir else None
    ids = None
    if path is not None and path.exists():
        ids = _read_token_cache(path, tokenizer.vocab_size)
    if ids is None:
        ids = encode_documents(tokenizer, documents, max_chars)
        if path is not None:
            _write_token_cache(path, ids)
    text_bytes = sum(len(d.text.encode("utf-8")) for d in documents)
    if max_chars:
        text_bytes = min(text_bytes, len("".join(d.text for d in documents)[:max_chars].encode()))
    return ids, text_bytes


def _require_stream_length(stream: np.ndarray, name: str, seq_len: int) -> None:
    """Refuse a token stream too short for one window of seq_len + 1 tokens: `sample_batch` and
    the evaluations need at least seq_len + 2."""
    if len(stream) < seq_len + 2:
        raise InvalidInputError(
            f"the {name} token stream has {len(stream)} tokens, fewer than seq_len + 2 = "
            f"{seq_len + 2} (windows of seq_len + 1 tokens); lower --seq-len or raise "
            "--max-train-chars (0 = the whole split)"
        )


def sample_batch(
    streams: list[np.ndarray], batch_size: int, seq_len: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Random windows, each from a corpus chosen uniformly: (inputs, targets) int [B, T]."""
    rows = []
    for _ in range(batch_size):
        stream = streams[rng.integers(len(streams))]
        start = rng.integers(0, len(stream) - seq_len - 1)
        rows.append(stream[start : start + seq_len + 1])
    window = np.stack(rows).astype(np.int64)  # [B, T + 1]
    return window[:, :-1], window[:, 1:]


def evaluate(
    params, config: LlamaConfig, stream: np.ndarray, seq_len: int, batches: int, batch_size: int
) -> float:
    """Mean next-token loss (nats) over fixed, evenly spaced windows of a validation stream."""
    starts = np.linspace(0, len(stream) - seq_len - 2, batches * batch_size).astype(np.int64)
    losses = []
    for chunk in np.array_split(starts, batches):
        window = np.stack([stream[s : s + seq_len + 1] for s in chunk]).astype(np.int64)
        logits, _, _ = model.forward(params, config, window[:, :-1])
        logp = model.layers.log_softmax(logits)
        picked = np.take_along_axis(logp, window[:, 1:, None], axis=-1)
        losses.append(-float(picked.mean()))
    return float(np.mean(losses))


# ---------------------------------------------------------------------------- state on disk


def _is_complete(state_dir: Path) -> bool:
    """Whether `state_dir` holds all the state files. A save renames a directory into place only
    after writing and fsyncing them all, and deleting one removes whole files, so a directory
    with all three is a whole state."""
    return all((state_dir / name).is_file() for name in STATE_FILES)


def _newest_state(out_dir: Path) -> Path | None:
    """The state a resume reads: `state/` if complete, else `state.old/` (a crash between a
    save's two renames; also the layout older versions leave), else None, with a warning when
    an incomplete one is ignored. `state.tmp/` is never read: no save committed it."""
    for name in (STATE, STATE_OLD):
        if _is_complete(out_dir / name):
            return out_dir / name
    damaged = [name for name in (STATE, STATE_OLD) if (out_dir / name).exists()]
    if damaged:
        warnings.warn(
            f"ignoring the incomplete training state {damaged} in {out_dir} (files missing); "
            "starting from step 0",
            stacklevel=2,
        )
    return None


def _discard_unfinished_save(out_dir: Path) -> None:
    """Delete what a crashed save leaves: the uncommitted `state.tmp/`, and `state.old/` once
    `state/` is complete. Never deletes the newest complete state."""
    shutil.rmtree(out_dir / STATE_TMP, ignore_errors=True)
    if _is_complete(out_dir / STATE):
        shutil.rmtree(out_dir / STATE_OLD, ignore_errors=True)


def _discard_states(out_dir: Path) -> None:
    """Delete every saved state (--no-resume): a later resume must not find the discarded run."""
    for name in (STATE_TMP, STATE_OLD, STATE):
        shutil.rmtree(out_dir / name, ignore_errors=True)


def _write_state_files(state_dir: Path, params, optimizer: AdamW, step, rng_state, log) -> None:
    """Write params, optimizer moments and counters into the new directory `state_dir` and fsync
    them (state.json last)."""
    state_dir.mkdir()
    save_file(
        {k: np.ascontiguousarray(v) for k, v in params.items()}, state_dir / "params.safetensors"
    )
    save_file(
        {k: np.ascontiguousarray(v) for k, v in optimizer.state_tensors().items()},
        state_dir / "optimizer.safetensors",
    )
    (state_dir / "state.json").write_text(json.dumps({"step": step, "rng": rng_state, "log": log}))
    for name in STATE_FILES:
        _fsync(state_dir / name)
    _fsync(state_dir)


def _save_state(out_dir: Path, params, optimizer: AdamW, step: int, rng_state, log) -> None:
    """Save the training state so that a crash at any moment, however often repeated, leaves a
    complete state to resume from: the new one or the one before.

    1. delete what a crashed save left (`_discard_unfinished_save`);
    2. write and fsync `state.tmp/`;
    3. rename `state/` to `state.old/`;
    4. rename `state.tmp/` to `state/` (the commit) and fsync the run directory;
    5. delete `state.old/`.
    A resume reads `state/`, else `state.old/` (`_newest_state`). `state.old/` is deleted only
    while a complete `state/` exists: deleting it in any other moment lost the run. A state with
    NaN or infinite values is refused: the one on disk stays."""
    tensors = {**params, **optimizer.state_tensors()}
    broken = sorted(name for name, value in tensors.items() if not np.isfinite(value).all())
    if broken:
        raise TrainingDivergedError(
            f"training diverged: at step {step} {broken[:3]} hold NaN or infinite values, so "
            f"nothing was saved and the last saved state in {out_dir} stays; lower --lr or raise "
            "--warmup-steps and run again to resume from it"
        )
    state, old, tmp = out_dir / STATE, out_dir / STATE_OLD, out_dir / STATE_TMP
    _discard_unfinished_save(out_dir)
    _write_state_files(tmp, params, optimizer, step, rng_state, log)
    if _is_complete(state):
        os.replace(state, old)
    else:
        shutil.rmtree(state, ignore_errors=True)  # damaged outside minieagle: nothing to keep
    os.replace(tmp, state)
    _fsync(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _check_state_matches(state_dir: Path, saved: dict, expected: dict) -> None:
    """Refuse a saved state whose tensors differ from the model's by name or shape (the run of
    another preset, target or head), naming them, instead of a NumPy broadcast error."""
    problems = [
        f"{name!r} has shape {tuple(saved[name].shape)} there, {tuple(value.shape)} here"
        for name, value in expected.items()
        if name in saved and saved[name].shape != value.shape
    ]
    problems += [f"{name!r} is missing" for name in expected if name not in saved]
    problems += [f"{name!r} is not in this model" for name in saved if name not in expected]
    if problems:
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise InvalidInputError(
            f"{state_dir} holds the training state of another model ({'; '.join(problems[:3])}"
            f"{more}): it belongs to the earlier run in {state_dir.parent}, whose settings its "
            f"*_config.json records; resume with those settings, pass another --out-dir, "
            f"{START_OVER}"
        )


def _load_state(state_dir: Path, params, optimizer: AdamW):
    """Restore params and optimizer moments (in place) from `state_dir`, after checking every
    saved tensor against the model; returns (step, rng_state, log)."""
    try:
        saved = load_file(state_dir / "params.safetensors")
        moments = load_file(state_dir / "optimizer.safetensors")
        info = json.loads((state_dir / "state.json").read_text())
    except (OSError, SafetensorError, ValueError) as error:
        raise InvalidInputError(
            f"the training state in {state_dir} is corrupt ({error}); pass another --out-dir, "
            f"{START_OVER}"
        ) from error
    _check_state_matches(state_dir, {**saved, **moments}, {**params, **optimizer.state_tensors()})
    for name in params:
        params[name][...] = saved[name]
    optimizer.load_state_tensors(moments, info["step"])
    return info["step"], info["rng"], info["log"]


def _require_finite(loss: float, grad_norm: float, step: int, lr: float, max_lr: float) -> None:
    """Stop a diverged run before its update can reach a save: the message names the step, the
    loss, the learning rate and the fix; the last saved state stays on disk."""
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return
    raise TrainingDivergedError(
        f"training diverged at step {step}: the loss is {loss} and the gradient norm {grad_norm} "
        f"at learning rate {lr:.3g} (--lr {max_lr:g}); lower --lr or raise --warmup-steps and "
        "run again: it resumes from the last saved state, if any (--no-resume starts over)"
    )


# ---------------------------------------------------------------------------- the loop


def train(cfg: TrainConfig, *, resume: bool = True, progress: bool = True) -> dict:
    """Train a target model from `cfg`; returns the final log (losses, throughput, paths).

    The run directory is checked writable and locked against a second trainer for the whole
    run; a resume continues the saved run if its preset and tokenizer are the same."""
    config = preset(cfg.preset)
    out_dir = Path(cfg.out_dir)
    export_dir = Path(cfg.export_dir or out_dir / "final")
    _prepare_run_dirs(out_dir, export_dir)
    with _exclusive_run(out_dir):
        return _train_model(cfg, config, out_dir, export_dir, resume, progress)


def _tokenizer_for(cfg: TrainConfig, config: LlamaConfig):
    """The tokenizer in `cfg.tokenizer`, or one trained on the corpora, of the preset's size."""
    from minieagle.data import load_text
    from minieagle.tokenizer import Tokenizer

    if cfg.tokenizer:
        tokenizer = Tokenizer.load(cfg.tokenizer)
    else:
        text = "\n\n".join(
            load_text(c, "train")[: cfg.max_train_chars or None] for c in cfg.corpora
        )
        tokenizer = Tokenizer.train(text, config.vocab_size)
    if tokenizer.vocab_size != config.vocab_size:
        raise InvalidInputError(
            f"tokenizer has vocab_size={tokenizer.vocab_size} but preset "
            f"{cfg.preset!r} expects {config.vocab_size}; train a matching tokenizer"
        )
    return tokenizer


def _train_model(cfg, config, out_dir: Path, export_dir: Path, resume: bool, progress: bool):
    """The body of `train`, run while holding the run directory's lock."""
    if cfg.seq_len > config.max_position_embeddings:
        raise InvalidInputError(
            f"seq_len={cfg.seq_len} is more than preset {cfg.preset!r}'s "
            f"max_position_embeddings={config.max_position_embeddings}; lower --seq-len"
        )
    _discard_unfinished_save(out_dir)
    tokenizer = _tokenizer_for(cfg, config)
    identity = {"preset": cfg.preset, "tokenizer_sha256": _tokenizer_key(tokenizer)}
    state_dir = _newest_state(out_dir) if resume else None
    if state_dir is not None:
        fixes = {
            "preset": "pass --preset {recorded} to resume it",
            "tokenizer_sha256": "pass the --tokenizer (or, for a tokenizer trained on the "
            "corpus, the --max-train-chars) it was trained with to resume it",
        }
        _refuse_other_run(out_dir, _read_run_record(out_dir / RUN_FILE), identity, fixes)

    train_streams = [
        token_stream(tokenizer, c, "train", out_dir, cfg.max_train_chars)[0] for c in cfg.corpora
    ]
    val = {c: token_stream(tokenizer, c, "val", out_dir, cfg.max_train_chars) for c in cfg.corpora}
    for corpus, stream in zip(cfg.corpora, train_streams, strict=True):
        _require_stream_length(stream, f"{corpus} train", cfg.seq_len)
        _require_stream_length(val[corpus][0], f"{corpus} val", cfg.seq_len)
    if not resume:
        _discard_states(out_dir)
    (out_dir / RUN_FILE).write_text(json.dumps({**asdict(cfg), **identity}, indent=2))

    params = model.init_params(config, seed=cfg.seed)
    optimizer = AdamW(params, AdamWConfig(lr=cfg.lr, weight_decay=cfg.weight_decay))
    rng = np.random.default_rng(cfg.seed)
    step, log = 0, {"evals": []}
    if state_dir is not None:
        step, rng_state, log = _load_state(state_dir, params, optimizer)
        rng.bit_generator.state = rng_state

    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc="train", unit="step")
    tokens_per_step = cfg.batch_size * cfg.seq_len
    t_start, steps_timed = time.perf_counter(), 0
    while step < cfg.steps:
        inputs, targets = sample_batch(train_streams, cfg.batch_size, cfg.seq_len, rng)
        loss, grads = model.loss_and_grads(params, config, inputs, targets)
        grad_norm = clip_grad_norm(grads, cfg.grad_clip)
        lr = cosine_lr(step, max_lr=cfg.lr, warmup_steps=cfg.warmup_steps, total_steps=cfg.steps)
        _require_finite(loss, grad_norm, step, lr, cfg.lr)
        optimizer.step(params, grads, lr)
        step += 1
        steps_timed += 1
        tok_s = steps_timed * tokens_per_step / (time.perf_counter() - t_start)
        bar.set_postfix(
            loss=f"{loss:.3f}", tok_s=f"{tok_s:.0f}", lr=f"{lr:.1e}", gnorm=f"{grad_norm:.2f}"
        )
        bar.update(1)
        log["train_loss"], log["tokens_per_s"] = loss, tok_s
        if step % cfg.eval_every == 0 or step == cfg.steps:
            record = {"step": step, "train_loss": loss, "tokens_per_s": tok_s}
            for name, (stream, n_bytes) in val.items():
                val_loss = evaluate(
                    params, config, stream, cfg.seq_len, cfg.eval_batches, cfg.batch_size
                )
                record[f"val_loss_{name}"] = val_loss
                record[f"bpb_{name}"] = val_loss * len(stream) / n_bytes / math.log(2)
            log["evals"].append(record)
            bar.write(
                " ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in record.items()
                )
            )
        if step % cfg.save_every == 0 or step == cfg.steps:
            _save_state(out_dir, params, optimizer, step, rng.bit_generator.state, log)
    bar.close()

    save_checkpoint(
        export_dir,
        params,
        config,
        tokenizer,
        dtype=cfg.export_dtype,
        metadata={"train_config": json.dumps(asdict(cfg))},
    )
    log["export_dir"] = str(export_dir)
    (out_dir / "train_log.json").write_text(json.dumps(log, indent=2))
    return log
