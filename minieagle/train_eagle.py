"""Training EAGLE-1's draft head against a frozen target: windows of the bundled corpora, the target
run on the fly for its features, the loop, validation (loss, top-1 agreement, acceptance),
checkpoints and resume. Read top to bottom, as `train.py`: data -> batches -> step -> evaluate ->
save.

Each window of L + 1 tokens gives L training positions (paper §3.2): the head reads the shifted
token x_{t+1} and the target's feature f_t and is trained to predict f_{t+1}, and through the LM
head the target's distribution at t + 1.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from minieagle import model
from minieagle.checkpoint import load_checkpoint, target_fingerprint
from minieagle.errors import InvalidInputError
from minieagle.heads.eagle1 import (
    INPUTS,
    Eagle1Config,
    eagle1_loss,
    eagle1_metrics,
    init_head,
    save_head,
)
from minieagle.optim import AdamW, AdamWConfig, clip_grad_norm, cosine_lr
from minieagle.train import (
    _check_shared_fields,
    _discard_states,
    _discard_unfinished_save,
    _exclusive_run,
    _load_state,
    _newest_state,
    _prepare_run_dirs,
    _read_run_record,
    _read_token_cache,
    _refuse_other_run,
    _require_finite,
    _require_stream_length,
    _save_state,
    _write_token_cache,
    sample_batch,
    token_stream,
)

DEFAULT_TARGET = str(Path(__file__).parent / "pretrained" / "small")
RUN_FILE = "eagle_train_config.json"
DATA_SOURCES = ("corpus", "generated")


@dataclass
class EagleTrainConfig:
    """Everything one head-training run needs; saved in out_dir as `eagle_train_config.json`."""

    target: str = DEFAULT_TARGET  # the target's checkpoint directory (with tokenizer.json)
    out_dir: str = "runs/eagle1"
    inputs: str = "token+feature"  # or the ablations "token", "feature"
    fc_bias: bool = True
    corpora: tuple[str, ...] = ("prose", "code")
    steps: int = 2500
    batch_size: int = 8
    seq_len: int = 256  # head positions per window (the window holds seq_len + 1 tokens)
    lr: float = 8e-3  # 300-step sweep on the small target: 2e-3 < 4e-3 < 8e-3 ~ 1.6e-2
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 0.5
    noise: float = 0.1  # half-width of U(-a, a) added to input features
    p_weight: float = 0.1  # weight of the soft cross-entropy against SmoothL1
    eval_every: int = 250
    eval_batches: int = 4
    save_every: int = 100
    seed: int = 0
    export_dir: str = ""  # where the final head goes; "" = out_dir/final
    export_dtype: str = "float32"
    max_train_chars: int = 0  # 0 = the whole train split; else a prefix per corpus (tests)
    data: str = "corpus"  # "corpus" (teacher forcing on the corpora) or "generated" (below)
    generated_tokens: int = 200_000  # with data="generated": tokens the target writes first
    generate_temperature: float = 1.0  # ... sampled at this temperature (0 = greedy)
    prompt_tokens: int = 16  # ... each continuing a prompt of this many corpus tokens

    def __post_init__(self) -> None:
        self.corpora = tuple(self.corpora)
        _check_shared_fields(self)
        if self.inputs not in INPUTS:
            raise InvalidInputError(f"inputs={self.inputs!r} is not one of {INPUTS}")
        for name, example in (("noise", "0.1"), ("p_weight", "0.1")):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidInputError(
                    f"{name}={value} is negative or not finite; pass a value such as {example}"
                )
        if self.data not in DATA_SOURCES:
            raise InvalidInputError(f"data={self.data!r} is not one of {DATA_SOURCES}")
        if self.data == "generated" and self.generated_tokens < 2 * (self.seq_len + 1):
            raise InvalidInputError(
                f"generated_tokens={self.generated_tokens} is too few for windows of "
                f"{self.seq_len + 1}; pass at least {2 * (self.seq_len + 1)}"
            )
        if not (math.isfinite(self.generate_temperature) and self.generate_temperature >= 0):
            raise InvalidInputError(
                f"generate_temperature={self.generate_temperature} must be >= 0 (0 = greedy)"
            )
        if not 1 <= self.prompt_tokens <= self.seq_len:
            raise InvalidInputError(
                f"prompt_tokens={self.prompt_tokens} must be in [1, seq_len={self.seq_len}]: "
                "each window holds a prompt and its continuation"
            )


# ---------------------------------------------------------------------------- data


def target_pairs(target_params, target_config, windows: np.ndarray):
    """The head's training pairs from token windows int [B, L + 1], with the target in float32.

    Returns tokens [B, L] (x_{t+1}), features [B, L, d] (f_t), next_features [B, L, d] (f_{t+1}),
    where f is the target's last hidden state after the final norm (its LM head's input)."""
    _, hidden, _ = model.forward(target_params, target_config, windows, output_hidden=("final",))
    features = hidden["final"]  # [B, L + 1, d]
    return windows[:, 1:], features[:, :-1], features[:, 1:]


def generated_stream(
    target_params,
    target_config,
    prompt_streams,
    cfg: EagleTrainConfig,
    cache_path: Path | None,
    progress: bool = False,
) -> np.ndarray:
    """Training text written by the target itself (EAGLE paper §4.3.3, "target-generated data";
    EAGLE-3 regenerates all its data this way): continuations of random corpus prompts, sampled
    at `generate_temperature`, concatenated (each prompt included) into one stream int32 [N].

    Cached at `cache_path` (written atomically), so a resumed run reads the same text."""
    from minieagle.generate import generate
    from minieagle.sampling import SamplingParams

    if cache_path is not None and cache_path.exists():
        cached = _read_token_cache(cache_path, target_config.vocab_size)
        if cached is not None:
            return cached
    rng = np.random.default_rng(cfg.seed + 1)
    sampling = SamplingParams(temperature=cfg.generate_temperature)
    length = cfg.seq_len + 1 - cfg.prompt_tokens  # one window per continuation
    pieces, total = [], 0
    bar = tqdm(total=cfg.generated_tokens, disable=not progress, desc="target writes", unit="tok")
    while total < cfg.generated_tokens:
        stream = prompt_streams[rng.integers(len(prompt_streams))]
        start = rng.integers(0, len(stream) - cfg.prompt_tokens)
        prompt = stream[start : start + cfg.prompt_tokens].tolist()
        result = generate(
            target_params,
            target_config,
            prompt,
            max_new_tokens=length,
            sampling=sampling,
            seed=int(rng.integers(2**31)),
            stop_at_eos=False,
        )
        piece = np.asarray(prompt + result.tokens, dtype=np.int32)
        pieces.append(piece)
        total += len(piece)
        bar.update(len(piece))
    bar.close()
    ids = np.concatenate(pieces)
    if cache_path is not None:
        _write_token_cache(cache_path, ids)
    return ids


def _validation_windows(stream: np.ndarray, seq_len: int, count: int) -> np.ndarray:
    """Fixed, evenly spaced windows int [count, seq_len + 1] of a validation stream (of at least
    seq_len + 2 tokens: `_require_stream_length`)."""
    starts = np.linspace(0, len(stream) - seq_len - 2, count).astype(np.int64)
    return np.stack([stream[s : s + seq_len + 1] for s in starts]).astype(np.int64)


def evaluate(head, cfg: Eagle1Config, target_params, pairs: list, p_weight: float) -> dict:
    """Mean of `eagle1_metrics` (loss, smooth_l1, soft_ce, top1, accept) over batches of pairs."""
    records = []
    for tokens, features, next_features in pairs:
        mask = np.ones(tokens.shape, dtype=bool)  # plain text: every position is a target
        records.append(
            eagle1_metrics(
                head, cfg, target_params, tokens, features, next_features, mask, p_weight=p_weight
            )
        )
    return {key: float(np.mean([r[key] for r in records])) for key in records[0]}


# ---------------------------------------------------------------------------- the loop


def _refuse_other_target(out_dir: Path, recorded: dict, target: Path, fingerprint: str) -> None:
    """Refuse to resume a head trained for other target weights. The weights decide, not the
    spelling of the path: a trailing slash, a relative path or a copy resumes; a target retrained
    in place does not. Older run files have no fingerprint: their resolved path is compared."""
    if "target_fingerprint" in recorded:
        same = recorded["target_fingerprint"] == fingerprint
    else:
        same = "target" not in recorded or Path(recorded["target"]).resolve() == target
    if not same:
        raise InvalidInputError(
            f"{out_dir} holds a head trained for the target {recorded.get('target')} "
            f"(fingerprint {recorded.get('target_fingerprint', 'not recorded')}), not {target} "
            f"(fingerprint {fingerprint}); pass the original --target to resume it, or another "
            "--out-dir to train a head for this target; --no-resume would start over (discards "
            "progress)"
        )


def _run_record(cfg: EagleTrainConfig) -> dict:
    """What out_dir/eagle_train_config.json records of a run: its settings, with the target's
    resolved path and the fingerprint of its weights."""
    target = Path(cfg.target).resolve()
    return {**asdict(cfg), "target": str(target), "target_fingerprint": target_fingerprint(target)}


def _refuse_other_head(out_dir: Path, record: dict) -> None:
    """Refuse to resume the run in `out_dir` if its head differs from the one `record`
    describes: other target weights, inputs or bias."""
    recorded = _read_run_record(out_dir / RUN_FILE)
    _refuse_other_target(out_dir, recorded, Path(record["target"]), record["target_fingerprint"])
    fixes = {
        "inputs": "pass --inputs {recorded} to resume it",
        "fc_bias": "pass fc_bias={recorded} to resume it",
    }
    identity = {key: record[key] for key in fixes}
    _refuse_other_run(out_dir, recorded, identity, fixes)


def train_eagle1(cfg: EagleTrainConfig, *, resume: bool = True, progress: bool = True) -> dict:
    """Train an EAGLE-1 head for the target in `cfg.target`; returns the final log.

    The run directory is checked writable and locked against a second trainer for the whole
    run; a resume continues the saved run if its target weights, inputs and bias are the same."""
    out_dir = Path(cfg.out_dir)
    export_dir = Path(cfg.export_dir or out_dir / "final")
    _prepare_run_dirs(out_dir, export_dir)
    with _exclusive_run(out_dir):
        return _train_head(cfg, out_dir, export_dir, resume, progress)


def _train_head(cfg: EagleTrainConfig, out_dir: Path, export_dir: Path, resume, progress) -> dict:
    """The body of `train_eagle1`, run while holding the run directory's lock."""
    target_params, target_config, tokenizer = load_checkpoint(cfg.target, dtype=np.float32)
    if tokenizer is None:
        raise InvalidInputError(
            f"{cfg.target} has no tokenizer.json; the head trains on its tokens"
        )
    if cfg.seq_len + 1 > target_config.max_position_embeddings:
        raise InvalidInputError(
            f"seq_len={cfg.seq_len} needs windows of {cfg.seq_len + 1} tokens, more than the "
            f"target's max_position_embeddings={target_config.max_position_embeddings}"
        )
    _discard_unfinished_save(out_dir)
    state_dir = _newest_state(out_dir) if resume else None
    record = _run_record(cfg)
    if state_dir is not None:
        _refuse_other_head(out_dir, record)
    head_cfg = Eagle1Config.from_target(target_config, inputs=cfg.inputs, fc_bias=cfg.fc_bias)

    train_streams = [
        token_stream(tokenizer, c, "train", out_dir, cfg.max_train_chars)[0] for c in cfg.corpora
    ]
    val_streams = {
        c: token_stream(tokenizer, c, "val", out_dir, cfg.max_train_chars)[0] for c in cfg.corpora
    }
    for corpus, stream in zip(cfg.corpora, train_streams, strict=True):
        _require_stream_length(stream, f"{corpus} train", cfg.seq_len)
        _require_stream_length(val_streams[corpus], f"{corpus} val", cfg.seq_len)
    if cfg.data == "generated":  # validation stays on the corpora: what the drafter will meet
        name = f"generated-{cfg.generated_tokens}-T{cfg.generate_temperature}-s{cfg.seed}.npy"
        train_streams = [
            generated_stream(
                target_params, target_config, train_streams, cfg, out_dir / name, progress
            )
        ]
        _require_stream_length(train_streams[0], "generated", cfg.seq_len)
    val_pairs = {}  # the target runs once over the fixed validation windows
    for corpus, stream in val_streams.items():
        windows = _validation_windows(stream, cfg.seq_len, cfg.eval_batches * cfg.batch_size)
        val_pairs[corpus] = [
            target_pairs(target_params, target_config, chunk)
            for chunk in np.array_split(windows, cfg.eval_batches)
        ]
    if not resume:
        _discard_states(out_dir)
    (out_dir / RUN_FILE).write_text(json.dumps(record, indent=2))

    head = init_head(head_cfg, seed=cfg.seed)
    optimizer = AdamW(head, AdamWConfig(lr=cfg.lr, weight_decay=cfg.weight_decay))
    rng = np.random.default_rng(cfg.seed)  # draws the batches and the feature noise
    step, log = 0, {"evals": []}
    if state_dir is not None:
        step, rng_state, log = _load_state(state_dir, head, optimizer)
        rng.bit_generator.state = rng_state

    def run_eval(record: dict) -> None:
        for corpus, pairs in val_pairs.items():
            for key, value in evaluate(head, head_cfg, target_params, pairs, cfg.p_weight).items():
                record[f"val_{key}_{corpus}"] = value
        log["evals"].append(record)
        bar.write(
            " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()
            )
        )

    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc="eagle1", unit="step")
    if step == 0:
        run_eval({"step": 0})
    t_start, steps_timed = time.perf_counter(), 0
    while step < cfg.steps:
        inputs, targets = sample_batch(train_streams, cfg.batch_size, cfg.seq_len, rng)
        windows = np.concatenate([inputs, targets[:, -1:]], axis=1)  # [B, L + 1]
        tokens, features, next_features = target_pairs(target_params, target_config, windows)
        mask = np.ones(tokens.shape, dtype=bool)
        loss, parts, grads = eagle1_loss(
            head,
            head_cfg,
            target_params,
            tokens,
            features,
            next_features,
            mask,
            p_weight=cfg.p_weight,
            noise=cfg.noise,
            rng=rng,
        )
        grad_norm = clip_grad_norm(grads, cfg.grad_clip)
        lr = cosine_lr(step, max_lr=cfg.lr, warmup_steps=cfg.warmup_steps, total_steps=cfg.steps)
        _require_finite(loss, grad_norm, step, lr, cfg.lr)
        optimizer.step(head, grads, lr)
        step += 1
        steps_timed += 1
        s_per_step = (time.perf_counter() - t_start) / steps_timed
        bar.set_postfix(
            loss=f"{loss:.3f}",
            top1=f"{parts['top1']:.3f}",
            lr=f"{lr:.1e}",
            gnorm=f"{grad_norm:.2f}",
        )
        bar.update(1)
        log.update(train_loss=loss, train_top1=parts["top1"], s_per_step=s_per_step)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            run_eval({"step": step, "train_loss": loss, "train_top1": parts["top1"]})
        if step % cfg.save_every == 0 or step == cfg.steps:
            _save_state(out_dir, head, optimizer, step, rng.bit_generator.state, log)
    bar.close()

    save_head(export_dir, head, head_cfg, target_dir=cfg.target, dtype=cfg.export_dtype)
    log["export_dir"] = str(export_dir)
    (out_dir / "train_log.json").write_text(json.dumps(log, indent=2))
    return log


def load_or_train_head(
    head_dir, target_dir, *, steps: int, max_train_chars: int = 0, dtype=np.float64
):
    """The head in `head_dir` if it holds one, else a small stand-in trained now for `steps`
    steps in a temporary directory (weaker than a real head; the notebooks use it so that they
    run before, or without, the shipped head). Returns (head, Eagle1Config)."""
    import tempfile

    from minieagle.heads.eagle1 import load_head

    if (Path(head_dir) / "model.safetensors").is_file():
        return load_head(head_dir, dtype=dtype)
    print(f"no head in {head_dir}: training one for {steps} steps")
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = EagleTrainConfig(
            target=str(target_dir), out_dir=run_dir, steps=steps, batch_size=4, seq_len=64,
            warmup_steps=5, eval_every=steps, eval_batches=1, save_every=steps,
            max_train_chars=max_train_chars, export_dir=f"{run_dir}/head",
        )  # fmt: skip
        train_eagle1(cfg, progress=False)
        return load_head(f"{run_dir}/head", dtype=dtype)
