"""Training the target model: token streams from the bundled corpora, the loop, validation,
checkpoints and resume. Read top to bottom: data -> batches -> step -> evaluate -> save.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from tqdm.auto import tqdm

from minieagle import model
from minieagle.checkpoint import save_checkpoint
from minieagle.config import LlamaConfig, preset
from minieagle.errors import InvalidInputError, TrainingDivergedError
from minieagle.optim import AdamW, AdamWConfig, clip_grad_norm, cosine_lr


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
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches", "save_every"):
            if getattr(self, name) <= 0:
                raise InvalidInputError(f"{name}={getattr(self, name)} must be a positive integer")
        self.corpora = tuple(self.corpora)


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
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(Path(tmp) / "tokenizer.json")
        return hashlib.sha256((Path(tmp) / "tokenizer.json").read_bytes()).hexdigest()[:12]


def token_stream(
    tokenizer, corpus: str, split: str, cache_dir: Path | None, max_chars: int = 0
) -> tuple[np.ndarray, int]:
    """(ids, n_bytes) of a corpus split, cached on disk keyed by the tokenizer's content."""
    from minieagle.data import load_split

    documents = load_split(corpus, split)
    key = _tokenizer_key(tokenizer)
    path = cache_dir / f"tokens-{corpus}-{split}-{key}-{max_chars}.npy" if cache_dir else None
    if path is not None and path.exists():
        ids = np.load(path)
    else:
        ids = encode_documents(tokenizer, documents, max_chars)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(str(path) + ".tmp.npy", ids)
            os.replace(str(path) + ".tmp.npy", path)
    text_bytes = sum(len(d.text.encode("utf-8")) for d in documents)
    if max_chars:
        text_bytes = min(text_bytes, len("".join(d.text for d in documents)[:max_chars].encode()))
    return ids, text_bytes


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


def _save_state(out_dir: Path, params, optimizer: AdamW, step: int, rng_state, log) -> None:
    """Write params + optimizer + counters into out_dir/state atomically (tmp dir, then swap)."""
    final, tmp = out_dir / "state", out_dir / "state.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: np.ascontiguousarray(v) for k, v in params.items()}, tmp / "params.safetensors")
    save_file(
        {k: np.ascontiguousarray(v) for k, v in optimizer.state_tensors().items()},
        tmp / "optimizer.safetensors",
    )
    (tmp / "state.json").write_text(json.dumps({"step": step, "rng": rng_state, "log": log}))
    old = out_dir / "state.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _load_state(out_dir: Path, params, optimizer: AdamW):
    state_dir = out_dir / "state"
    if not state_dir.exists() and (out_dir / "state.old").exists():
        state_dir = out_dir / "state.old"  # a crash between the two renames
    saved = load_file(state_dir / "params.safetensors")
    for name in params:
        params[name][...] = saved[name]
    info = json.loads((state_dir / "state.json").read_text())
    optimizer.load_state_tensors(load_file(state_dir / "optimizer.safetensors"), info["step"])
    return info["step"], info["rng"], info["log"]


# ---------------------------------------------------------------------------- the loop


def train(cfg: TrainConfig, *, resume: bool = True, progress: bool = True) -> dict:
    """Train a target model from `cfg`; returns the final log (losses, throughput, paths)."""
    from minieagle.data import load_text
    from minieagle.tokenizer import Tokenizer

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = preset(cfg.preset)
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
    (out_dir / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))

    train_streams = [
        token_stream(tokenizer, c, "train", out_dir, cfg.max_train_chars)[0] for c in cfg.corpora
    ]
    val = {c: token_stream(tokenizer, c, "val", out_dir, cfg.max_train_chars) for c in cfg.corpora}

    params = model.init_params(config, seed=cfg.seed)
    optimizer = AdamW(params, AdamWConfig(lr=cfg.lr, weight_decay=cfg.weight_decay))
    rng = np.random.default_rng(cfg.seed)
    step, log = 0, {"evals": []}
    if resume and ((out_dir / "state").exists() or (out_dir / "state.old").exists()):
        step, rng_state, log = _load_state(out_dir, params, optimizer)
        rng.bit_generator.state = rng_state

    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc="train", unit="step")
    tokens_per_step = cfg.batch_size * cfg.seq_len
    t_start, steps_timed = time.perf_counter(), 0
    while step < cfg.steps:
        inputs, targets = sample_batch(train_streams, cfg.batch_size, cfg.seq_len, rng)
        loss, grads = model.loss_and_grads(params, config, inputs, targets)
        if not math.isfinite(loss):
            raise TrainingDivergedError(
                f"loss became {loss} at step {step}; lower --lr "
                f"(now {cfg.lr}) or raise --warmup-steps"
            )
        grad_norm = clip_grad_norm(grads, cfg.grad_clip)
        lr = cosine_lr(step, max_lr=cfg.lr, warmup_steps=cfg.warmup_steps, total_steps=cfg.steps)
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

    export_dir = Path(cfg.export_dir or out_dir / "final")
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
