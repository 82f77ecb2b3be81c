"""Training an EAGLE draft head (EAGLE-1 or EAGLE-3) against a frozen target: windows of the
bundled corpora (and text the target writes itself), the target run on the fly, the loop,
validation, checkpoints and resume. Read top to bottom, as `train.py`: data -> batches -> step ->
evaluate -> save.

The loop is the same for both heads; what differs is a *recipe* (`Eagle1Recipe`,
`Eagle3Recipe`): what the target must provide for a window, the loss, the metrics and the export.
- EAGLE-1 (paper §3.2): each window of L + 1 tokens gives L positions; the head reads the shifted
  token x_{t+1} and the target's feature f_t and is trained to predict f_{t+1} (SmoothL1) and,
  through the target's LM head, the target's distribution at t + 1 (soft cross-entropy).
- EAGLE-3 (paper §3): the head reads the fused inputs of three target layers and x_{t+1}, and is
  trained by training-time test: `ttt_steps` unrolled steps on its own outputs, soft
  cross-entropy against the target's distribution over a reduced draft vocabulary, no feature
  loss (`minieagle.heads.eagle3.ttt_loss`). The draft vocabulary is the most frequent training
  tokens (`draft_vocab_size`, or the fewest covering `draft_vocab_coverage` of them).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from minieagle import model
from minieagle.backend import array_module, ones, to_device, to_host
from minieagle.checkpoint import load_checkpoint, target_fingerprint
from minieagle.distill import BLOCK, open_pool, run_directory, run_record, tensor_fingerprint
from minieagle.errors import InvalidInputError
from minieagle.feature_cache import FeatureCache, FeaturePool, tile_windows
from minieagle.heads import eagle3
from minieagle.heads.eagle1 import (
    INPUTS,
    Eagle1Config,
    eagle1_loss,
    eagle1_metrics,
    head_param_shapes,
    init_head,
    load_head,
    save_head,
)
from minieagle.heads.eagle3_io import load_eagle3_head, save_eagle3_head
from minieagle.heads.medusa import MedusaRecipe
from minieagle.host_memory import keep_freed_memory
from minieagle.optim import AdamW, AdamWConfig, clip_grad_norm, cosine_lr, wsd_lr
from minieagle.train import (
    STATE,
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
BRANCH_FILE = "branched_from.json"  # `branch_from`: the run and step a run started from
DATA_SOURCES = ("corpus", "generated", "corpus+generated", "features")
ORDERS = ("random", "pass")
LOSS_MASKS = ("all", "answers")
HEADS = ("eagle1", "eagle3", "medusa")
LM_HEAD_INITS = ("random", "target")


@dataclass
class EagleTrainConfig:
    """Everything one head-training run needs; saved in out_dir as `eagle_train_config.json`."""

    target: str = DEFAULT_TARGET  # the target's checkpoint directory (with tokenizer.json)
    out_dir: str = "runs/eagle1"
    head: str = "eagle1"  # or "eagle3"
    inputs: str = "token+feature"  # eagle1: or the ablations "token", "feature"
    fc_bias: bool = True  # eagle1
    ttt_steps: int = 7  # eagle3: unrolled training-time-test steps (the official code's 7)
    step_weight: float = 0.8  # eagle3: loss weight of step s is step_weight ** s
    aux_layers: tuple[int, ...] = ()  # eagle3: 3 fused layers or 1 (e.g. (L,)); () = (2, L//2, L-3)
    draft_vocab_size: int = 0  # eagle3: 0 = the fewest tokens covering draft_vocab_coverage
    draft_vocab_coverage: float = 0.99  # eagle3: share of training tokens the vocabulary covers
    # eagle3: the width of the head's MLP; 0 = the target's intermediate_size (the papers' head).
    # A wider MLP is the one way to give the one-layer head more capacity that SGLang and vLLM
    # still load (they read intermediate_size from the head's config.json)
    head_intermediate_size: int = 0
    # eagle3: how the draft LM head and final norm start: "random" (as the official code) or
    # "target": the target's LM-head rows of the draft vocabulary and its final norm
    lm_head_init: str = "random"
    # a trained head's directory (as `save_head` / `save_eagle3_head` write it) whose weights start
    # the run instead of fresh ones, e.g. a shipped head continued on new data; an EAGLE-3 head
    # also keeps its draft vocabulary. "" = a fresh head.
    init_from: str = ""
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
    # ... or, with chat_prompts, answering a chat request (the target's chat template) built
    # from a corpus passage of prompt_tokens tokens: self-distillation for an instruct model
    chat_prompts: bool = False
    # compute the target's features of fixed windows once, float16 on disk (feature_cache.py),
    # instead of a target forward per batch: for real targets, whose forward dominates
    cache_features: bool = False
    max_windows: int = 0  # with cache_features: keep this many windows (0 = all)
    # data="features": the runs of `minieagle distill` (corpus windows and the target's own
    # text, its hidden states recorded as it wrote them) whose shards the head trains on; no
    # target forward per step. max_windows > 0 keeps the first max_windows windows of them.
    features: tuple[str, ...] = ()
    # held-out distill runs (`minieagle distill --split val|test|ood`) scored at every evaluation
    # beside the corpora: eval_batches x batch_size fixed windows of each, only the target's
    # answers scored in a chat run (`chat.answer_spans`); keys val_<metric>_<directory name>
    val_features: tuple[str, ...] = ()
    order: str = "random"  # "random" windows per batch, or "pass": each window once per pass
    # which rows of a chat run's windows the loss counts (data="features"): "all", or "answers",
    # the rows whose guessed token lies in the target's answer (`chat.answer_label_mask`), as
    # the official EAGLE code masks all but the assistant's turns; other runs' windows count whole
    loss_mask: str = "all"
    decay_steps: int = 0  # 0: cosine schedule; > 0: warmup-stable-decay, decaying over these
    keep_states: tuple[int, ...] = ()  # steps whose training state is kept in out_dir/kept/
    until: int = 0  # > 0: stop at this step, saved and resumable, without exporting (a pause)
    medusa_heads: int = 4  # medusa: K heads, head k guessing x_{t+k+1} (step_weight: λ decay)
    medusa_own_lm_head: bool = True  # medusa: a trained LM head per head (the paper's), or shared

    def __post_init__(self) -> None:
        self.corpora = tuple(self.corpora)
        self.aux_layers = tuple(self.aux_layers)
        if self.aux_layers:  # their count and order now; the target's depth when it is loaded
            self.aux_layers = eagle3._check_aux_layers(self.aux_layers, None)
        _check_shared_fields(self)
        if self.head not in HEADS:
            raise InvalidInputError(f"head={self.head!r} is not one of {HEADS}; pass 'eagle3'")
        if self.medusa_heads < 1:
            raise InvalidInputError(f"medusa_heads={self.medusa_heads} must be >= 1, e.g. 4")
        if self.ttt_steps < 1:
            raise InvalidInputError(f"ttt_steps={self.ttt_steps} must be >= 1, e.g. 7")
        if not (math.isfinite(self.step_weight) and 0 < self.step_weight <= 1):
            raise InvalidInputError(f"step_weight={self.step_weight} must be in (0, 1], e.g. 0.8")
        if self.draft_vocab_size < 0:
            raise InvalidInputError(
                f"draft_vocab_size={self.draft_vocab_size} must be >= 0 (0 = by coverage)"
            )
        width = self.head_intermediate_size
        if width < 0 or (width and self.head != "eagle3"):
            raise InvalidInputError(
                f"head_intermediate_size={self.head_intermediate_size} with head={self.head!r}: it "
                "sets the MLP width of an EAGLE-3 head (0 = the target's); pass 0 or train eagle3"
            )
        if not 0 < self.draft_vocab_coverage <= 1:
            raise InvalidInputError(
                f"draft_vocab_coverage={self.draft_vocab_coverage} must be in (0, 1], e.g. 0.99"
            )
        if self.inputs not in INPUTS:
            raise InvalidInputError(f"inputs={self.inputs!r} is not one of {INPUTS}")
        if self.lm_head_init not in LM_HEAD_INITS:
            raise InvalidInputError(
                f"lm_head_init={self.lm_head_init!r} is not one of {LM_HEAD_INITS}"
            )
        if self.init_from and self.head == "medusa":
            raise InvalidInputError(
                f"init_from={self.init_from!r}: only EAGLE heads can start from a trained head; "
                "leave it empty for medusa"
            )
        if self.init_from and self.lm_head_init != "random":
            raise InvalidInputError(
                f"lm_head_init={self.lm_head_init!r} and init_from={self.init_from!r} both say how "
                "the LM head starts; the head in init_from brings its own: drop lm_head_init"
            )
        if self.head == "eagle1" and self.lm_head_init != "random":
            raise InvalidInputError(
                f"lm_head_init={self.lm_head_init!r} is for EAGLE-3 heads; an EAGLE-1 head already "
                "uses the target's LM head: leave it 'random'"
            )
        for name, example in (("noise", "0.1"), ("p_weight", "0.1")):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidInputError(
                    f"{name}={value} is negative or not finite; pass a value such as {example}"
                )
        if self.data not in DATA_SOURCES:
            raise InvalidInputError(f"data={self.data!r} is not one of {DATA_SOURCES}")
        if self.data != "corpus" and self.generated_tokens < 2 * (self.seq_len + 1):
            raise InvalidInputError(
                f"generated_tokens={self.generated_tokens} is too few for windows of "
                f"{self.seq_len + 1}; pass at least {2 * (self.seq_len + 1)}"
            )
        if self.chat_prompts and self.data == "corpus":
            raise InvalidInputError(
                "chat_prompts shapes the generated data, and data='corpus' generates none; pass "
                "--data generated or corpus+generated with --chat-prompts"
            )
        self.features = tuple(str(f) for f in self.features)
        self.val_features = tuple(str(f) for f in self.val_features)
        if self.val_features and self.head == "medusa":
            raise InvalidInputError(
                f"val_features={list(self.val_features)} scores EAGLE heads (their loss masks); "
                "leave it empty for medusa"
            )
        names = [_val_set_name(entry) for entry in self.val_features]
        for entry, name in zip(self.val_features, names, strict=True):
            if names.count(name) > 1 or name in self.corpora:
                raise InvalidInputError(
                    f"val_features entry {entry!r}: its name {name!r} is taken (by another entry "
                    f"or a corpus of {list(self.corpora)}); the metrics are keyed by directory "
                    "name, so give each held-out run its own"
                )
            if run_directory(entry).resolve() in {
                run_directory(f).resolve() for f in self.features if f != BLOCK
            }:
                raise InvalidInputError(
                    f"val_features entry {entry!r} is also in features: a head scored on what it "
                    "trains on is not held out; distill a held-out run with --split val"
                )
        self.keep_states = tuple(int(k) for k in self.keep_states)
        if (self.data == "features") != bool(self.features):
            raise InvalidInputError(
                f"data={self.data!r} with features={list(self.features)}: pass --data features "
                "together with the distillation runs to read (--features DIR ...)"
            )
        if self.order not in ORDERS:
            raise InvalidInputError(f"order={self.order!r} is not one of {ORDERS}")
        if self.loss_mask not in LOSS_MASKS:
            raise InvalidInputError(
                f"loss_mask={self.loss_mask!r} is not one of {LOSS_MASKS}; pass 'all' or 'answers'"
            )
        if self.loss_mask == "answers" and (self.data != "features" or self.head == "medusa"):
            raise InvalidInputError(
                f"loss_mask='answers' masks the answers of chat distillation runs for an EAGLE "
                f"head (data='features'); data={self.data!r}, head={self.head!r} has none: pass "
                "loss_mask='all'"
            )
        if not 0 <= self.decay_steps <= self.steps:
            raise InvalidInputError(
                f"decay_steps={self.decay_steps} must lie in [0, steps={self.steps}] (0 = cosine)"
            )
        if self.max_windows < 0 or (
            self.max_windows and not (self.cache_features or self.data == "features")
        ):
            raise InvalidInputError(
                f"max_windows={self.max_windows} applies to recorded features only; pass "
                "--cache-features or --data features with it (0 keeps every window)"
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


GENERATION_CHECKPOINT_EVERY = 64  # continuations between saves of a partial generation


CHAT_REQUESTS = {  # with chat_prompts: a user request per corpus, {passage} filled in
    "prose": "Explain the following passage in your own words:\n\n{passage}",
    "code": "Explain what this Python code does, then continue it:\n\n```python\n{passage}\n```",
}


def chat_prompt(tokenizer, template: str, corpus: str, passage_ids) -> list[int]:
    """A ChatML-style request about a corpus passage, rendered by the target's template and
    ending with the cue for the assistant's answer."""
    from minieagle.chat import encode_chat

    request = CHAT_REQUESTS.get(corpus, CHAT_REQUESTS["prose"])
    text = request.format(passage=tokenizer.decode([int(t) for t in passage_ids]).strip())
    return encode_chat(tokenizer, template, [{"role": "user", "content": text}])


def generated_stream(
    target_params,
    target_config,
    prompt_streams,
    cfg: EagleTrainConfig,
    cache_path: Path | None,
    progress: bool = False,
    chat=None,
) -> np.ndarray:
    """Training text written by the target itself (EAGLE paper §4.3.3, "target-generated data";
    EAGLE-3 regenerates all its data this way): continuations of random corpus prompts, sampled
    at `generate_temperature`, concatenated (each prompt included) into one stream int32 [N].

    Cached at `cache_path` (written atomically), so a resumed run reads the same text. Writing
    it is resumable too: every GENERATION_CHECKPOINT_EVERY continuations the text so far and the
    state of the prompt sampler go to `<cache_path>.partial.npz` (atomically), and a restarted
    run continues from there, so a kill costs at most that many continuations and the finished
    text is the same as an uninterrupted run's.

    chat: (tokenizer, template, corpus names of prompt_streams), for cfg.chat_prompts: each
    prompt is then a chat request about the passage (`chat_prompt`) and the continuation the
    model's answer, which stops at its end of turn; text is the request and the answer."""
    from minieagle.chat import end_of_turn_ids
    from minieagle.generate import generate
    from minieagle.sampling import SamplingParams

    if cache_path is not None and cache_path.exists():
        cached = _read_token_cache(cache_path, target_config.vocab_size)
        if cached is not None:
            return cached
    rng = np.random.default_rng(cfg.seed + 1)
    sampling = SamplingParams(temperature=cfg.generate_temperature)
    length = cfg.seq_len + 1 - cfg.prompt_tokens  # one window per continuation
    partial = None if cache_path is None else cache_path.with_name(cache_path.name + ".partial.npz")
    pieces = _read_partial_generation(partial, rng, target_config.vocab_size)
    total = sum(len(piece) for piece in pieces)
    bar = tqdm(total=cfg.generated_tokens, initial=total, disable=not progress,
               desc="target writes", unit="tok")  # fmt: skip
    while total < cfg.generated_tokens:
        which = rng.integers(len(prompt_streams))
        stream = prompt_streams[which]
        start = rng.integers(0, len(stream) - cfg.prompt_tokens)
        prompt = stream[start : start + cfg.prompt_tokens].tolist()
        new_tokens, stop = length, {}
        if chat is not None:
            tokenizer, template, corpora = chat
            prompt = chat_prompt(tokenizer, template, corpora[which], prompt)
            new_tokens = max(16, cfg.seq_len + 1 - len(prompt))  # an answer fills the window
            stop["stop_token_ids"] = end_of_turn_ids(
                tokenizer, template, target_config.eos_token_id
            )
        result = generate(
            target_params,
            target_config,
            prompt,
            max_new_tokens=new_tokens,
            sampling=sampling,
            seed=int(rng.integers(2**31)),
            stop_at_eos=chat is not None,
            **stop,
        )
        piece = np.asarray(prompt + result.tokens, dtype=np.int32)
        pieces.append(piece)
        total += len(piece)
        bar.update(len(piece))
        if partial is not None and len(pieces) % GENERATION_CHECKPOINT_EVERY == 0:
            _write_partial_generation(partial, pieces, rng)
    bar.close()
    ids = np.concatenate(pieces)
    if cache_path is not None:
        _write_token_cache(cache_path, ids)
        if partial.exists():
            partial.unlink()
    return ids


def _write_partial_generation(path: Path, pieces: list, rng: np.random.Generator) -> None:
    """The continuations so far and the prompt sampler's state, through a renamed temp file."""
    tmp = path.with_name(path.name + ".tmp.npz")
    lengths = np.asarray([len(piece) for piece in pieces], dtype=np.int64)
    state = np.frombuffer(json.dumps(rng.bit_generator.state).encode(), dtype=np.uint8)
    with open(tmp, "wb") as handle:
        np.savez(handle, ids=np.concatenate(pieces), lengths=lengths, rng=state)
    tmp.replace(path)


def _read_partial_generation(path: Path | None, rng: np.random.Generator, vocab_size: int):
    """The continuations a killed run saved (restoring `rng` to where it stopped), or [] when
    there are none; an unreadable partial file is named in a warning and ignored."""
    if path is None or not path.exists():
        return []
    try:
        with np.load(path, allow_pickle=False) as saved:
            ids, lengths = saved["ids"], saved["lengths"]
            state = json.loads(saved["rng"].tobytes().decode())
        if ids.min() < 0 or ids.max() >= vocab_size or lengths.sum() != len(ids):
            raise ValueError("ids out of range or lengths that do not add up")
        rng.bit_generator.state = state
    except (OSError, ValueError, KeyError, EOFError) as error:
        warnings.warn(f"partial generation {path} is unreadable ({error}); starting over",
                      stacklevel=3)  # fmt: skip
        return []
    return np.split(ids.astype(np.int32), np.cumsum(lengths)[:-1])


def _validation_windows(stream: np.ndarray, seq_len: int, count: int) -> np.ndarray:
    """Fixed, evenly spaced windows int [count, seq_len + 1] of a validation stream (of at least
    seq_len + 2 tokens: `_require_stream_length`)."""
    starts = np.linspace(0, len(stream) - seq_len - 2, count).astype(np.int64)
    return np.stack([stream[s : s + seq_len + 1] for s in starts]).astype(np.int64)


def _all_positions(features):
    """bool [B, L] of True on the module and device of features [B, L, ...]: the loss mask of
    plain text, where every position is a target."""
    return ones(features.shape[:2], like=features, dtype=array_module(features).bool)


def _mean_records(records: list[dict]) -> dict:
    return {key: float(np.mean([r[key] for r in records])) for key in records[0]}


def _val_set_name(entry: str) -> str:
    """The name a held-out distill run's metrics carry: its directory's."""
    return run_directory(entry).name


def _require_same_target(field: str, entry: str, record: dict, fingerprint: str) -> None:
    """Refuse a distill run (its distill.json `record`) whose features another target's weights
    wrote (`distill.tensor_fingerprint`): a head trained or scored on them learns another
    model."""
    recorded = record.get("target_fingerprint")
    if recorded is not None and recorded != fingerprint:
        raise InvalidInputError(
            f"{field} entry {entry!r} holds the features of another target (weights fingerprint "
            f"{recorded}, this target's {fingerprint}); distill a run with this --target"
        )


def _answer_cue(cfg: EagleTrainConfig, record: dict, tokenizer):
    """The assistant cue (`chat.assistant_cue`) of a chat distillation run (its distill.json
    `record`; sources "chat" and "requests"), rendered with the template it was made with; None
    for any other run."""
    from minieagle.chat import assistant_cue, load_chat_template
    from minieagle.distill import CHAT_SOURCES

    if record.get("source") not in CHAT_SOURCES:
        return None
    template = load_chat_template(cfg.target, tokenizer, record.get("chat_template") or None)
    return assistant_cue(tokenizer, template)


def _answer_masks(pool: FeaturePool, indices, windows: np.ndarray, cues: dict) -> np.ndarray:
    """bool [B, L] (`loss_mask="answers"`): for each window of `indices`, the rows whose guessed
    token lies in the target's answer if its shard belongs to a chat run, else every row. cues:
    {run directory: its cue or None} (`_answer_cue`)."""
    from minieagle.chat import answer_label_mask, answer_spans

    W = windows.shape[1]
    masks = np.ones((len(windows), W - 1), dtype=bool)
    for i, cache in enumerate(pool.caches_of(indices)):
        cue = cues[cache.directory.parent.resolve()]
        if cue is not None:
            masks[i] = answer_label_mask(*answer_spans(windows[i : i + 1], cue), W)[0]
    return masks


def _held_out_batches(cfg: EagleTrainConfig, recipe, tokenizer, fingerprint: str) -> dict:
    """{name: [(windows, hidden, mask, stats)]} for each run in cfg.val_features: eval_batches x
    batch_size windows evenly spaced through it (fixed for the whole run), as recorded (made
    into batches at each evaluation, one at a time: a real target's logits of one batch take
    hundreds of MB), each batch with its loss mask: the rows whose guessed token is in the
    target's answer (`chat.answer_label_mask`) for a chat run, every row for a corpus run."""
    from minieagle.chat import answer_label_mask, answer_spans

    sets = {}
    for entry in cfg.val_features:
        pool = open_pool([entry])
        record = run_record(entry)
        _require_same_target("val_features", entry, record, fingerprint)
        if pool.window_tokens != cfg.seq_len + 1:
            raise InvalidInputError(
                f"val_features entry {entry!r} holds windows of {pool.window_tokens} tokens, "
                f"not seq_len + 1 = {cfg.seq_len + 1}; distill it with --window-tokens "
                f"{cfg.seq_len + 1}"
            )
        if not set(recipe.feature_keys) <= set(pool.keys):
            raise InvalidInputError(
                f"val_features entry {entry!r} records {list(pool.keys)}, but the {cfg.head} head "
                f"needs {list(recipe.feature_keys)}; distill it with --keys "
                f"{','.join(map(str, recipe.feature_keys))}"
            )
        cue = _answer_cue(cfg, record, tokenizer)
        count = min(len(pool), cfg.eval_batches * cfg.batch_size)
        indices = np.linspace(0, len(pool) - 1, count).round().astype(np.int64)
        batches = []
        for chunk in np.array_split(indices, min(cfg.eval_batches, count)):
            windows, hidden = pool.batch(chunk)
            if cue is not None:
                mask = answer_label_mask(*answer_spans(windows, cue), windows.shape[1])
            else:
                mask = np.ones((len(windows), windows.shape[1] - 1), dtype=bool)
            stats = pool.target_stats(chunk) if recipe.reads_target_stats else None
            batches.append((windows, hidden, mask, stats))
        sets[_val_set_name(entry)] = batches
    return sets


class Eagle1Recipe:
    """What training an EAGLE-1 head needs from the loop: the target's final-norm features of a
    window, SmoothL1 + p_weight * soft-CE (with input-feature noise), and its metrics."""

    name = "eagle1"

    def __init__(self, cfg: EagleTrainConfig, target_params, target_config, train_streams):
        self.cfg, self.target_params, self.target_config = cfg, target_params, target_config
        self.head_cfg = Eagle1Config.from_target(
            target_config, inputs=cfg.inputs, fc_bias=cfg.fc_bias
        )

    identity_fixes = {
        "inputs": "pass --inputs {recorded} to resume it",
        "fc_bias": "pass fc_bias={recorded} to resume it",
    }

    def init_head(self, seed: int) -> dict:
        """A fresh head, or the head saved in `init_from` (the same shape as this run's)."""
        if not self.cfg.init_from:
            return init_head(self.head_cfg, seed=seed)
        head, saved_cfg = load_head(self.cfg.init_from, target_dir=self.cfg.target)
        _check_same_shapes(self.cfg.init_from, head, head_param_shapes(self.head_cfg))
        if (saved_cfg.inputs, saved_cfg.fc_bias) != (self.head_cfg.inputs, self.head_cfg.fc_bias):
            raise InvalidInputError(
                f"the head in {self.cfg.init_from} reads inputs={saved_cfg.inputs!r} with "
                f"fc_bias={saved_cfg.fc_bias}, this run inputs={self.head_cfg.inputs!r} with "
                f"fc_bias={self.head_cfg.fc_bias}; pass --inputs {saved_cfg.inputs}"
            )
        return _as_run_arrays(head, init_head(self.head_cfg, seed=seed))

    feature_keys = ("final",)  # the target's hidden states a batch is made of

    def target_batch(self, windows: np.ndarray):
        """What the head trains on for windows int [B, L + 1]: `target_pairs`."""
        return target_pairs(self.target_params, self.target_config, windows)

    reads_target_stats = False  # its loss reads the whole vocabulary anyway (the target's head)

    def batch_from_hidden(self, windows: np.ndarray, hidden: dict, stats=None):
        """The same batch from hidden states already computed (a `FeatureCache`); stats are
        not read."""
        features = hidden["final"]  # [B, L + 1, d]
        return windows[:, 1:], features[:, :-1], features[:, 1:]

    def loss(self, head, batch, rng, mask=None) -> tuple[float, dict, dict]:
        """(loss, {name: float} for the progress bar, grads); mask bool [B, L]: the rows that
        count (None: every row)."""
        tokens, features, next_features = batch
        mask = _all_positions(features) if mask is None else to_device(mask, features)
        loss, parts, grads = eagle1_loss(
            head, self.head_cfg, self.target_params, tokens, features, next_features, mask,
            p_weight=self.cfg.p_weight, noise=self.cfg.noise, rng=rng,
        )  # fmt: skip
        return loss, {"top1": parts["top1"]}, grads

    def metrics(self, head, batches: list, masks=None) -> dict:
        """Mean of `eagle1_metrics` (loss, smooth_l1, soft_ce, top1, accept) over batches, each
        over the rows of its mask in masks (bool [B, L] per batch; None: every row)."""
        records = []
        for i, (tokens, features, next_features) in enumerate(batches):
            mask = _all_positions(features) if masks is None else to_device(masks[i], features)
            records.append(
                eagle1_metrics(
                    head,
                    self.head_cfg,
                    self.target_params,
                    tokens,
                    features,
                    next_features,
                    mask,
                    p_weight=self.cfg.p_weight,
                )  # fmt: skip
            )
        return _mean_records(records)

    def export(self, directory: Path, head: dict) -> None:
        save_head(
            directory, head, self.head_cfg, target_dir=self.cfg.target, dtype=self.cfg.export_dtype
        )


def draft_vocab_size_for(counts: np.ndarray, coverage: float) -> int:
    """The fewest most-frequent tokens whose counts cover `coverage` of all training tokens."""
    ranked = np.sort(np.asarray(counts, dtype=np.float64))[::-1]  # most frequent first
    covered = np.cumsum(ranked) / max(ranked.sum(), 1.0)
    return int(min(np.searchsorted(covered, coverage - 1e-12) + 1, len(ranked)))


def _token_counts(train_streams, vocab_size: int) -> np.ndarray:
    """int64 [V]: how often each token id occurs in the training data (a `FeaturePool`'s first
    block of recorded windows, or token streams), from which a draft vocabulary is chosen."""
    if isinstance(train_streams, FeaturePool):
        return train_streams.token_counts(vocab_size)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for stream in train_streams:
        counts += np.bincount(stream, minlength=vocab_size)[:vocab_size]
    return counts


class Eagle3Recipe:
    """What training an EAGLE-3 head needs from the loop: the target's fused features and
    logits of a window, the training-time-test loss, per-step metrics. The draft vocabulary
    comes from the training streams' token counts, so a resumed run rebuilds the same one.
    With one aux layer (e.g. aux_layers=(L,), the top feature) it trains the paper's ablation
    head "no feature loss + TTT" without fusion (Table 2)."""

    name = "eagle3"
    identity_fixes = {
        "aux_layers": "pass the same aux layers ({recorded}) to resume it",
        "draft_vocab_size": "pass --draft-vocab-size {recorded} to resume it",
        "draft_vocab_coverage": "pass the same coverage ({recorded}) to resume it",
        "head_intermediate_size": "pass --head-intermediate-size {recorded} to resume it",
    }

    def __init__(self, cfg: EagleTrainConfig, target_params, target_config, train_streams):
        self.cfg, self.target_params, self.target_config = cfg, target_params, target_config
        self.start = None
        self._draft_rows = None  # the target LM head's rows of the draft ids (batch_from_hidden)
        V = target_config.vocab_size
        if cfg.init_from:  # a trained head: its weights, its draft vocabulary, its aux layers
            self.start, self.head_cfg, self.vocab = load_eagle3_head(
                cfg.init_from, target_config=target_config, target_dir=cfg.target
            )
            if cfg.aux_layers and tuple(cfg.aux_layers) != tuple(self.head_cfg.aux_layers):
                raise InvalidInputError(
                    f"aux_layers={cfg.aux_layers} differs from the head in {cfg.init_from} "
                    f"({self.head_cfg.aux_layers}); drop aux_layers (the head brings its own)"
                )
            size = self.head_cfg.draft_vocab_size
            if cfg.draft_vocab_size and cfg.draft_vocab_size != size:
                if cfg.draft_vocab_size < size:
                    raise InvalidInputError(
                        f"draft_vocab_size={cfg.draft_vocab_size} is smaller than the head's in "
                        f"{cfg.init_from} ({size}); a trained head's draft vocabulary can only "
                        f"grow: drop it or pass at least {size}"
                    )
                self.start, self.head_cfg, self.vocab = eagle3.widen_vocab(  # + the data's tokens
                    self.start, self.head_cfg, self.vocab, _token_counts(train_streams, V),
                    cfg.draft_vocab_size, model.lm_head_weight(target_params),
                )  # fmt: skip
            width = self.head_cfg.layer.intermediate_size
            if cfg.head_intermediate_size and cfg.head_intermediate_size != width:
                if cfg.head_intermediate_size < width:
                    raise InvalidInputError(
                        f"head_intermediate_size={cfg.head_intermediate_size} is narrower than "
                        f"the head in {cfg.init_from} ({width}); a trained head can be "
                        f"continued at its width or wider: drop it or pass at least {width}"
                    )
                self.start, self.head_cfg = eagle3.widen_mlp(  # the same function, more units
                    self.start, self.head_cfg, cfg.head_intermediate_size, seed=cfg.seed
                )
            return
        counts = _token_counts(train_streams, V)
        size = cfg.draft_vocab_size or draft_vocab_size_for(counts, cfg.draft_vocab_coverage)
        if size > V:
            raise InvalidInputError(
                f"draft_vocab_size={size} is larger than the target's vocabulary ({V}); pass "
                f"at most {V} (or 0 to size it by coverage)"
            )
        self.vocab = eagle3.draft_vocab_from_counts(counts, size)
        self.head_cfg = eagle3.Eagle3Config.from_target(
            target_config,
            aux_layers=cfg.aux_layers or None,
            draft_vocab_size=size,
            intermediate_size=cfg.head_intermediate_size or None,
        )

    def init_head(self, seed: int) -> dict:
        """A fresh head; with lm_head_init="target" its LM head starts as the target's rows for
        the draft vocabulary (draft id i -> target id vocab.ids[i]) and its final norm as the
        target's, so the draft begins by reading its last hidden state as the target reads its
        own (EAGLE-1 borrows the target's head outright; the official EAGLE-3 code starts both at
        random). With `init_from`, the head saved there."""
        head = eagle3.init_head(self.head_cfg, seed=seed)
        if self.start is not None:
            shapes = eagle3.head_param_shapes(self.head_cfg)
            _check_same_shapes(self.cfg.init_from, self.start, shapes)
            return _as_run_arrays(self.start, head)
        if self.cfg.lm_head_init == "target":
            rows = to_host(self.vocab.ids)
            xp = array_module(head["lm_head.weight"])
            head["lm_head.weight"] = xp.asarray(model.lm_head_weight(self.target_params)[rows],
                                                copy=True)  # fmt: skip
            head["norm.weight"] = xp.asarray(self.target_params["model.norm.weight"], copy=True)
        return head

    def target_batch(self, windows: np.ndarray):
        """(windows [B, L + 1], fused features [B, L, k d] at positions 0 .. L-1, target
        logits [B, L, V] at positions 1 .. L): the inputs of `eagle3.ttt_loss`."""
        aux = self.head_cfg.aux_layers
        logits, hidden, _ = model.forward(
            self.target_params, self.target_config, windows, output_hidden=aux
        )
        fused = eagle3.fuse_features(hidden, aux)[:, :-1]  # [B, L, 3d]
        return windows, fused, logits[:, 1:]

    @property
    def feature_keys(self) -> tuple:
        return (*self.head_cfg.aux_layers, "final")

    reads_target_stats = True  # shards' TARGET_STATS spare the whole LM head (DraftTargets)

    def batch_from_hidden(self, windows: np.ndarray, hidden: dict, stats=None):
        """The same batch from hidden states already computed (a `FeatureCache`): the logits
        are the final features through the target's LM head, as `model.forward` makes them.
        stats: the shards' (TARGET_TOP, TARGET_LSE) [B, L + 1] (`FeaturePool.target_stats`;
        rows of -1 where a shard has none): with them the batch holds `eagle3.DraftTargets`,
        the final features through the LM head's draft rows only (rows without them: through
        the whole head, then reduced)."""
        final = hidden["final"][:, 1:]  # [B, L, d]
        fused = eagle3.fuse_features(hidden, self.head_cfg.aux_layers)[:, :-1]
        weight = model.lm_head_weight(self.target_params)  # [V, d]
        if stats is None:
            return windows, fused, final @ weight.T  # [B, L, V]
        if self._draft_rows is None:
            self._draft_rows = weight[self.vocab.ids]  # [N, d], the draft ids' rows
        top, lse = (to_device(np.asarray(x)[:, 1:], final) for x in stats)  # [B, L]
        targets = eagle3.DraftTargets(final @ self._draft_rows.T, top, lse)
        missing = np.flatnonzero(to_host(top[:, 0]) < 0)  # windows whose shard has none
        if missing.size:
            whole = eagle3.draft_targets(final[missing] @ weight.T, self.vocab)
            targets.top[missing], targets.lse[missing] = whole.top, whole.lse
        return windows, fused, targets

    def _ttt(self, head, batch, mask=None, grads: bool = True):
        windows, fused, target_logits = batch
        if mask is None:
            mask = _all_positions(fused)  # plain text: every position is a target
        else:
            mask = to_device(mask, fused)
        return eagle3.ttt_loss(
            head, self.head_cfg, self.target_params, self.vocab, windows, fused, target_logits,
            mask, steps=self.cfg.ttt_steps, step_weight=self.cfg.step_weight, grads=grads,
        )  # fmt: skip

    def loss(self, head, batch, rng, mask=None) -> tuple[float, dict, dict]:
        loss, parts, grads = self._ttt(head, batch, mask)
        return loss, {"top1": parts["top1"][0], "top1_last": parts["top1"][-1]}, grads

    def metrics(self, head, batches: list, masks=None) -> dict:
        """loss, and per TTT step s: top1_s (greedy acceptance of a draft s steps ahead along
        the teacher-forced chain) and accept_s (sum_v min(p, q)), over the rows of each batch's
        mask in masks (None: every row)."""
        records = []
        for i, batch in enumerate(batches):
            mask = None if masks is None else masks[i]
            loss, parts, _ = self._ttt(head, batch, mask, grads=False)  # scored, not trained
            record = {"loss": loss}
            for s, (top1, accept) in enumerate(zip(parts["top1"], parts["accept"], strict=True)):
                record[f"top1_{s}"], record[f"accept_{s}"] = top1, accept
            records.append(record)
        return _mean_records(records)

    def export(self, directory: Path, head: dict) -> None:
        save_eagle3_head(
            directory, head, self.head_cfg, self.vocab, target_dir=self.cfg.target,
            dtype=self.cfg.export_dtype,
        )  # fmt: skip


def _check_same_shapes(directory, head: dict, shapes: dict) -> None:
    """Refuse a saved head whose tensors are not those of this run's head."""
    got = {name: tuple(value.shape) for name, value in head.items()}
    if got != {name: tuple(shape) for name, shape in shapes.items()}:
        raise InvalidInputError(
            f"the head in {directory} has tensors {got}, this run's head {dict(shapes)}; "
            "start from a head trained for this target with the same settings"
        )


def _as_run_arrays(saved: dict, fresh: dict) -> dict:
    """The saved head's values as this run's arrays: float32, on the fresh head's array
    module (NumPy or CuPy)."""
    return {
        name: array_module(fresh[name]).asarray(saved[name], dtype=fresh[name].dtype)
        for name in fresh
    }


RECIPES = {"eagle1": Eagle1Recipe, "eagle3": Eagle3Recipe, "medusa": MedusaRecipe}


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
    fingerprint = target_fingerprint(target)
    record = {**asdict(cfg), "target": str(target), "target_fingerprint": fingerprint}
    return json.loads(json.dumps(record))  # tuples as lists, as a resumed run reads them back


def _refuse_other_head(out_dir: Path, record: dict, recipe) -> None:
    """Refuse to resume the run in `out_dir` if its head differs from the one `record`
    describes: other target weights, another kind of head, or other settings that shape it
    (`recipe.identity_fixes`)."""
    recorded = _read_run_record(out_dir / RUN_FILE)
    _refuse_other_target(out_dir, recorded, Path(record["target"]), record["target_fingerprint"])
    fixes = {"head": "train the {recorded} head there, or pass another --out-dir",
             "loss_mask": "pass --loss-mask {recorded} to resume it"}  # fmt: skip
    fixes.update(recipe.identity_fixes)
    recorded.setdefault("head", "eagle1")  # run files from before EAGLE-3 trained EAGLE-1 heads
    identity = {key: record[key] for key in fixes}
    _refuse_other_run(out_dir, recorded, identity, fixes)


def train_eagle_head(cfg: EagleTrainConfig, *, resume: bool = True, progress: bool = True) -> dict:
    """Train the head `cfg.head` ("eagle1" or "eagle3") for the target in `cfg.target`; returns
    the final log.

    The run directory is checked writable and locked against a second trainer for the whole
    run; a resume continues the saved run if its target weights and head settings are the same."""
    out_dir = Path(cfg.out_dir)
    export_dir = Path(cfg.export_dir or out_dir / "final")
    _prepare_run_dirs(out_dir, export_dir)
    with _exclusive_run(out_dir):
        return _train_head(cfg, out_dir, export_dir, resume, progress)


def train_eagle1(cfg: EagleTrainConfig, *, resume: bool = True, progress: bool = True) -> dict:
    """`train_eagle_head` for an EAGLE-1 head (cfg.head must be "eagle1")."""
    if cfg.head != "eagle1":
        raise InvalidInputError(f"train_eagle1 got head={cfg.head!r}; call train_eagle_head")
    return train_eagle_head(cfg, resume=resume, progress=progress)


def _train_head(cfg: EagleTrainConfig, out_dir: Path, export_dir: Path, resume, progress) -> dict:
    """The body of `train_eagle_head`, run while holding the run directory's lock."""
    keep_freed_memory()  # no page faults for the step's large arrays (minieagle/host_memory.py)
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

    train_streams = [
        token_stream(tokenizer, c, "train", out_dir, cfg.max_train_chars)[0] for c in cfg.corpora
    ]
    val_streams = {
        c: token_stream(tokenizer, c, "val", out_dir, cfg.max_train_chars)[0] for c in cfg.corpora
    }
    for corpus, stream in zip(cfg.corpora, train_streams, strict=True):
        _require_stream_length(stream, f"{corpus} train", cfg.seq_len)
        _require_stream_length(val_streams[corpus], f"{corpus} val", cfg.seq_len)
    pool = None
    weights = None  # the fingerprint distill records of the target's weights
    if cfg.features or cfg.val_features:
        weights = tensor_fingerprint(target_params)
    if cfg.data == "features":  # recorded shards; validation stays on the corpora
        pool = open_pool(cfg.features, cfg.max_windows)
        for entry in cfg.features:
            if entry != BLOCK:
                _require_same_target("features", entry, run_record(entry), weights)
        if pool.window_tokens != cfg.seq_len + 1:
            raise InvalidInputError(
                f"the feature shards hold windows of {pool.window_tokens} tokens, not seq_len + "
                f"1 = {cfg.seq_len + 1}; pass --seq-len {pool.window_tokens - 1}"
            )
        train_streams = pool
    elif cfg.data != "corpus":  # validation stays on the corpora: what the drafter will meet
        chat = None
        name = f"generated-{cfg.generated_tokens}-T{cfg.generate_temperature}-s{cfg.seed}.npy"
        if cfg.chat_prompts:
            from minieagle.chat import load_chat_template

            chat = (tokenizer, load_chat_template(cfg.target, tokenizer), cfg.corpora)
            name = "chat-" + name
        generated = generated_stream(
            target_params, target_config, train_streams, cfg, out_dir / name, progress, chat
        )
        _require_stream_length(generated, "generated", cfg.seq_len)
        train_streams = [generated] if cfg.data == "generated" else [*train_streams, generated]
    recipe = RECIPES[cfg.head](cfg, target_params, target_config, train_streams)
    if pool is not None and not set(recipe.feature_keys) <= set(pool.keys):
        raise InvalidInputError(
            f"the feature shards record {list(pool.keys)}, but the {cfg.head} head needs "
            f"{list(recipe.feature_keys)}; distill with --keys "
            f"{','.join(map(str, recipe.feature_keys))}"
        )
    if state_dir is not None:
        _refuse_other_head(out_dir, record, recipe)
    val_batches = {}  # the target runs once over the fixed validation windows
    for corpus, stream in val_streams.items():
        windows = _validation_windows(stream, cfg.seq_len, cfg.eval_batches * cfg.batch_size)
        val_batches[corpus] = [
            recipe.target_batch(chunk) for chunk in np.array_split(windows, cfg.eval_batches)
        ]
    held_out = _held_out_batches(cfg, recipe, tokenizer, weights) if cfg.val_features else {}
    cues = None  # loss_mask="answers": each training run's assistant cue (None: not a chat run)
    if cfg.loss_mask == "answers":
        cues = {run_directory(entry).resolve(): _answer_cue(cfg, run_record(entry), tokenizer)
                for entry in cfg.features if entry != BLOCK}  # fmt: skip
    if not resume:
        _discard_states(out_dir)
    if (out_dir / BRANCH_FILE).is_file():  # the run it branched from, kept in its record
        record["branched_from"] = json.loads((out_dir / BRANCH_FILE).read_text())
    (out_dir / RUN_FILE).write_text(json.dumps(record, indent=2))

    cache = None
    if cfg.cache_features:  # fixed windows, their target features computed once (on disk)
        windows, sources = tile_windows(
            train_streams, cfg.seq_len, np.random.default_rng(cfg.seed + 2), cfg.max_windows
        )
        cache = FeatureCache.build(
            out_dir / "features", target_params, target_config, windows, sources,
            recipe.feature_keys, fingerprint=record["target_fingerprint"], progress=progress,
        )  # fmt: skip
    head = recipe.init_head(cfg.seed)
    optimizer = AdamW(head, AdamWConfig(lr=cfg.lr, weight_decay=cfg.weight_decay))
    rng = np.random.default_rng(cfg.seed)  # draws the batches and the feature noise
    step, log = 0, {"evals": []}
    if state_dir is not None:
        step, rng_state, log = _load_state(state_dir, head, optimizer)
        rng.bit_generator.state = rng_state

    def run_eval(record: dict) -> None:
        for corpus, batches in val_batches.items():
            for key, value in recipe.metrics(head, batches).items():
                record[f"val_{key}_{corpus}"] = value
        for name, recorded in held_out.items():  # each batch's mean, then their mean
            records = [recipe.metrics(head, [recipe.batch_from_hidden(windows, hidden, stats)],
                                      [mask])
                       for windows, hidden, mask, stats in recorded]  # fmt: skip
            for key, value in _mean_records(records).items():
                record[f"val_{key}_{name}"] = value
        log["evals"].append(record)
        bar.write(
            " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()
            )
        )

    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc=cfg.head, unit="step")
    if step == 0:
        run_eval({"step": 0})
    t_start, steps_timed = time.perf_counter(), 0
    orders = {}  # with order="pass": the pool's window order of each pass in use
    stop = min(cfg.until, cfg.steps) if cfg.until else cfg.steps
    while step < stop:
        mask = None  # every row of the batch counts
        if pool is not None:
            if cfg.order == "pass":
                indices = _pass_indices(pool, step, cfg.batch_size, cfg.seed, orders)
            else:
                indices = pool.sample(cfg.batch_size, rng)
            stats = pool.target_stats(indices) if recipe.reads_target_stats else None
            windows, hidden = pool.batch(indices)
            batch = recipe.batch_from_hidden(windows, hidden, stats)
            if cues is not None:  # loss_mask="answers"
                mask = _answer_masks(pool, indices, windows, cues)
        elif cache is None:
            inputs, targets = sample_batch(train_streams, cfg.batch_size, cfg.seq_len, rng)
            windows = np.concatenate([inputs, targets[:, -1:]], axis=1)  # [B, L + 1]
            batch = recipe.target_batch(windows)
        else:
            batch = recipe.batch_from_hidden(*cache.batch(cache.sample(cfg.batch_size, rng)))
        loss, parts, grads = recipe.loss(head, batch, rng, mask)
        grad_norm = clip_grad_norm(grads, cfg.grad_clip)
        if cfg.decay_steps:
            lr = wsd_lr(step, max_lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                        total_steps=cfg.steps, decay_steps=cfg.decay_steps)  # fmt: skip
        else:
            lr = cosine_lr(step, max_lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                           total_steps=cfg.steps)  # fmt: skip
        _require_finite(loss, grad_norm, step, lr, cfg.lr)
        optimizer.step(head, grads, lr)
        step += 1
        steps_timed += 1
        s_per_step = (time.perf_counter() - t_start) / steps_timed
        shown = {name: f"{value:.3f}" for name, value in parts.items()}
        bar.set_postfix(loss=f"{loss:.3f}", **shown, lr=f"{lr:.1e}", gnorm=f"{grad_norm:.2f}")
        bar.update(1)
        trained = {"train_loss": loss, **{f"train_{k}": v for k, v in parts.items()}}
        log.update(**trained, s_per_step=s_per_step)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            run_eval({"step": step, **trained})
        if step % cfg.save_every == 0 or step in (cfg.steps, stop) or step in cfg.keep_states:
            _save_state(out_dir, head, optimizer, step, rng.bit_generator.state, log)
            if step in cfg.keep_states:
                _keep_state(out_dir, step)
    bar.close()
    if step < cfg.steps:  # paused at cfg.until: the saved state resumes it
        return log

    recipe.export(export_dir, head)
    log["export_dir"] = str(export_dir)
    (out_dir / "train_log.json").write_text(json.dumps(log, indent=2))
    return log


def _pass_indices(pool: FeaturePool, step: int, batch_size: int, seed: int, orders: dict):
    """The pool windows of batch `step` when every pass reads each window once: entries
    [step B, (step + 1) B) of the passes laid end to end, pass p in the order
    `pool.pass_order(seed + p)` (kept in `orders`, the passes in use only)."""
    positions = step * batch_size + np.arange(batch_size)
    passes, within = positions // len(pool), positions % len(pool)
    for p in set(passes.tolist()) - set(orders):
        orders[p] = pool.pass_order(seed + p)
    for p in set(orders) - set(passes.tolist()):
        del orders[p]
    return np.asarray([orders[p][w] for p, w in zip(passes.tolist(), within, strict=True)])


def kept_state(out_dir, step: int) -> Path:
    """Where a run keeps its training state of step `step` (`keep_states`)."""
    return Path(out_dir) / "kept" / f"step-{step}"


def _keep_state(out_dir: Path, step: int) -> None:
    """Copy the state just saved (out_dir/state) to `kept_state(out_dir, step)`, atomically."""
    import shutil

    target = kept_state(out_dir, step)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(out_dir / STATE, tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def branch_from(parent_dir, step: int, out_dir) -> None:
    """Start the run in `out_dir` from the state the run in `parent_dir` kept at `step`: with
    the same data order and a warmup-stable-decay schedule that has not begun its decay by then,
    that state is exactly where `out_dir`'s own run would stand at `step` (`optim.wsd_lr`)."""
    import shutil

    source = kept_state(parent_dir, step)
    if not (source / "state.json").is_file():
        raise InvalidInputError(
            f"{parent_dir} kept no state at step {step} ({source} is missing); train it with "
            f"keep_states including {step}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / STATE).exists():
        return  # already branched (and perhaps trained further): resume it
    tmp = out_dir / (STATE + ".branch")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    record = json.loads((Path(parent_dir) / RUN_FILE).read_text())
    (out_dir / RUN_FILE).write_text(json.dumps(record, indent=2))
    branched = {"run": str(Path(parent_dir).resolve()), "step": step}
    (out_dir / BRANCH_FILE).write_text(json.dumps(branched, indent=2))
    tmp.rename(out_dir / STATE)  # last: a branch is made once its state is in place


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


def load_or_train_eagle3_head(
    head_dir, target_dir, *, steps: int, max_train_chars: int = 0, dtype=np.float64
):
    """The EAGLE-3 head in `head_dir` if it holds one, else a small stand-in trained now for
    `steps` steps in a temporary directory (weaker than a real head; the notebooks use it so that
    they run before, or without, the shipped head). Returns (head, Eagle3Config, DraftVocab)."""
    import tempfile

    from minieagle.heads.eagle3_io import load_eagle3_head

    if (Path(head_dir) / "model.safetensors").is_file():
        return load_eagle3_head(head_dir, dtype=dtype, target_dir=target_dir)
    print(f"no EAGLE-3 head in {head_dir}: training a stand-in for {steps} steps")
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = EagleTrainConfig(
            target=str(target_dir), out_dir=run_dir, head="eagle3", steps=steps, batch_size=4,
            seq_len=64, lr=1e-2, warmup_steps=5, eval_every=steps, eval_batches=1,
            save_every=steps, max_train_chars=max_train_chars, export_dir=f"{run_dir}/head",
        )  # fmt: skip
        train_eagle_head(cfg, progress=False)
        return load_eagle3_head(f"{run_dir}/head", dtype=dtype, target_dir=target_dir)
