"""`minieagle train`: a target or draft model, or an EAGLE-1 / EAGLE-3 / Medusa head."""

from __future__ import annotations

import json

from minieagle.cli.flags import integer, number
from minieagle.errors import InvalidInputError

_MODEL_FIELDS = (  # what training a language model reads (`train.TrainConfig`)
    "preset", "out_dir", "tokenizer", "steps", "batch_size", "seq_len", "lr", "warmup_steps",
    "eval_every", "eval_batches", "save_every", "seed", "export_dir", "export_dtype",
    "max_train_chars",
)  # fmt: skip
_EVERY_RUN = ("command", "what", "func", "no_resume", "quiet")


def cmd_train(args) -> int:
    if args.what in ("eagle1", "eagle3", "medusa"):
        return _train_eagle_head(args)
    given = [name for name, value in vars(args).items()
             if value is not None and name not in _MODEL_FIELDS + _EVERY_RUN]  # fmt: skip
    if given:  # a flag only a head's training reads
        flag = "--" + given[0].replace("_", "-")
        raise InvalidInputError(
            f"{flag} applies to training a head (`train eagle1`, `eagle3` or `medusa`), not "
            f"`train {args.what}`; drop it"
        )
    from minieagle.train import TrainConfig, train

    fields = {k: getattr(args, k) for k in _MODEL_FIELDS if getattr(args, k) is not None}
    log = train(TrainConfig(**fields), resume=not args.no_resume, progress=not args.quiet)
    print(json.dumps(log["evals"][-1] if log["evals"] else {}, indent=2))
    print(f"model written to {log['export_dir']}")
    return 0


_HEAD_FLAGS = {  # flag -> the head it shapes
    "inputs": "eagle1",
    "noise": "eagle1",
    "ttt_steps": "eagle3",
    "draft_vocab_size": "eagle3",
    "head_intermediate_size": "eagle3",
    "aux_layers": "eagle3",
    "lm_head_init": "eagle3",
    "medusa_heads": "medusa",
    "medusa_lm_head": "medusa",
}


def _train_eagle_head(args) -> int:
    from minieagle.train_eagle import EagleTrainConfig, branch_from, train_eagle_head

    for flag in ("preset", "tokenizer"):
        if getattr(args, flag) is not None:
            raise InvalidInputError(
                f"--{flag} does not apply to {args.what}: the head takes the shape and tokenizer "
                "of --target"
            )
    for name, head in _HEAD_FLAGS.items():
        if getattr(args, name) is not None and args.what != head:
            flag = "--" + name.replace("_", "-")
            raise InvalidInputError(f"{flag} applies to `train {head}`, not `train {args.what}`")
    names = ("target", "inputs", "noise", "out_dir", "steps", "batch_size", "seq_len", "lr")
    names += ("warmup_steps", "eval_every", "eval_batches", "save_every", "seed")
    names += ("export_dir", "export_dtype", "max_train_chars", "data", "generated_tokens")
    names += ("ttt_steps", "draft_vocab_size", "aux_layers", "lm_head_init")
    names += ("head_intermediate_size",)
    names += ("chat_prompts", "prompt_tokens", "cache_features", "max_windows", "medusa_heads")
    names += ("features", "val_features", "order", "decay_steps", "until", "init_from")
    names += ("keep_states", "loss_mask")
    fields = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.medusa_lm_head is not None:
        fields["medusa_own_lm_head"] = args.medusa_lm_head == "own"
    if args.what in ("eagle3", "medusa"):
        fields.setdefault("out_dir", f"runs/{args.what}")
    cfg = EagleTrainConfig(head=args.what, **fields)
    if args.branch_from is not None:
        if args.no_resume:
            raise InvalidInputError(
                "--branch-from starts from a kept state and --no-resume discards every state; "
                "drop one of them"
            )
        parent, _, step = args.branch_from.rpartition("@")
        if not parent or not step.isdigit():
            raise InvalidInputError(
                f"--branch-from {args.branch_from!r}: expected RUN@STEP, e.g. runs/long@2240"
            )
        branch_from(parent, int(step), cfg.out_dir)
    log = train_eagle_head(cfg, resume=not args.no_resume, progress=not args.quiet)
    print(json.dumps(log["evals"][-1] if log["evals"] else {}, indent=2))
    kind = {"eagle1": "EAGLE-1 head", "eagle3": "EAGLE-3 head", "medusa": "Medusa heads"}
    if "export_dir" not in log:  # paused at --until: saved, not exported
        print(f"{kind[args.what]} paused at step {args.until}, saved in {cfg.out_dir}; run again "
              "with a later --until, or without it, to go on")  # fmt: skip
        return 0
    print(f"{kind[args.what]} written to {log['export_dir']}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model (see docs/training.md)")
    p.add_argument(
        "what",
        choices=["target", "draft-model", "eagle1", "eagle3", "medusa"],
        help="a language model: the target, or the small draft model of classic "
        "speculative decoding (same training, another preset); or eagle1 / eagle3: an EAGLE "
        "draft head for the frozen --target; or medusa: Medusa-1 heads for it",
    )
    p.add_argument(
        "--medusa-heads",
        dest="medusa_heads",
        type=integer(1, "a head count such as 4"),
        help="medusa: K heads, head k guessing the token k + 1 steps ahead (4)",
    )
    p.add_argument(
        "--medusa-lm-head",
        dest="medusa_lm_head",
        choices=("own", "shared"),
        help="medusa: own (default, the paper's): each head trains its own LM head, initialised "
        "from the target's; shared: all read the target's, frozen (16x fewer parameters)",
    )
    p.add_argument("--target", help="eagle1/eagle3: target checkpoint (default: the shipped small)")
    p.add_argument(
        "--inputs",
        choices=["token+feature", "token", "feature"],
        help="eagle1: what the head reads (default token+feature; the others are ablations)",
    )
    p.add_argument(
        "--data",
        choices=["corpus", "generated", "corpus+generated", "features"],
        help="eagle1/eagle3: train on the corpora (default), on continuations the target "
        "writes, on both, or on the recorded shards of `minieagle distill` runs (--features)",
    )
    p.add_argument(
        "--features",
        nargs="+",
        metavar="DIR",
        help="--data features: the distill runs to train on (corpus windows and the target's "
        "own text; their window length must be --seq-len + 1)",
    )
    p.add_argument(
        "--val-features",
        dest="val_features",
        nargs="+",
        metavar="DIR",
        help="eagle1/eagle3: held-out distill runs (distill --split val|test|ood) scored at every "
        "evaluation beside the corpora, answers only for a chat run (eval-batches x batch-size "
        "windows of each)",
    )
    p.add_argument(
        "--order",
        choices=["random", "pass"],
        help="--data features: random windows per batch (default), or pass: every window once "
        "per pass, in a fixed order",
    )
    p.add_argument(
        "--loss-mask",
        dest="loss_mask",
        choices=["all", "answers"],
        help="--data features: the rows of a chat run's windows the loss counts: all (default), "
        "or answers: the target's answers only, as the official EAGLE code trains",
    )
    p.add_argument(
        "--decay-steps",
        dest="decay_steps",
        type=integer(0, "a step count such as 500, or 0 for the cosine schedule"),
        help="warmup-stable-decay: hold the rate, then decay it over the last N steps (0: cosine)",
    )
    p.add_argument(
        "--until",
        type=integer(0, "a step count"),
        help="stop at this step, saved and resumable, without exporting (0: run to the end)",
    )
    p.add_argument(
        "--keep-states",
        dest="keep_states",
        nargs="+",
        type=integer(1, "a step count such as 2240"),
        metavar="STEP",
        help="eagle1/eagle3: keep the training state at these steps in OUT_DIR/kept/, for "
        "--branch-from",
    )
    p.add_argument(
        "--branch-from",
        dest="branch_from",
        metavar="RUN@STEP",
        help="eagle1/eagle3: start from the state RUN kept at STEP (--keep-states): with the same "
        "data and seed, and a warmup-stable-decay schedule not decaying by STEP, it is exactly "
        "where this run would stand there (e.g. another --decay-steps, or fewer --steps)",
    )
    p.add_argument(
        "--generated-tokens",
        dest="generated_tokens",
        type=integer(1, "a count such as 200000"),
        help="--data generated: how many tokens the target writes first (200000)",
    )
    p.add_argument(
        "--chat-prompts",
        dest="chat_prompts",
        action="store_const",
        const=True,
        help="--data generated: the target answers chat requests about corpus passages, "
        "rendered with its chat template (self-distillation for an instruct model)",
    )
    p.add_argument(
        "--prompt-tokens",
        dest="prompt_tokens",
        type=integer(1, "a count such as 16"),
        help="--data generated: corpus tokens in each prompt the target continues or answers (16)",
    )
    p.add_argument(
        "--cache-features",
        dest="cache_features",
        action="store_const",
        const=True,
        help="eagle1/eagle3: compute the target's features of fixed windows once, float16 on "
        "disk in OUT_DIR/features (resumable), instead of a target forward per batch",
    )
    p.add_argument(
        "--max-windows",
        dest="max_windows",
        type=integer(0, "a count such as 2000, or 0 for all"),
        help="--cache-features or --data features: keep this many training windows (0 = all)",
    )
    p.add_argument(
        "--ttt-steps",
        dest="ttt_steps",
        type=integer(1, "a step count such as 7"),
        help="eagle3: unrolled training-time-test steps (7)",
    )
    p.add_argument(
        "--draft-vocab-size",
        dest="draft_vocab_size",
        type=integer(0, "a size such as 1024, or 0 to cover 99%% of the training tokens"),
        help="eagle3: draft vocabulary size (0 = the fewest frequent tokens covering 99%% of "
        "the training tokens; the target's vocabulary size = no reduction); with --init-from, "
        "a size above the head's adds the data's most frequent other tokens",
    )
    p.add_argument(
        "--head-intermediate-size",
        dest="head_intermediate_size",
        type=integer(0, "a width such as 1536, or 0 for the target's"),
        help="eagle3: the width of the head's MLP (0 = the target's intermediate_size, the "
        "papers' head; wider heads still load in SGLang and vLLM)",
    )
    p.add_argument(
        "--lm-head-init",
        dest="lm_head_init",
        choices=("random", "target"),
        help="eagle3: how the draft LM head and final norm start: random (the official code) "
        "or target (the target's rows for the draft vocabulary and its final norm)",
    )
    p.add_argument(
        "--init-from",
        dest="init_from",
        metavar="HEAD_DIR",
        help="eagle1/eagle3: start from this trained head's weights (an EAGLE-3 head keeps its "
        "draft vocabulary and aux layers), e.g. a shipped head continued on new data",
    )
    p.add_argument(
        "--aux-layers",
        dest="aux_layers",
        type=integer(0, "a layer index"),
        nargs="+",
        metavar="LAYER",
        help="eagle3: the target layers whose inputs are fused: three, LOW MID HIGH (default 2, "
        "L//2, L-3), or one, e.g. L (the top feature: the stream after the last layer; the "
        "paper's ablation without fusion)",
    )
    p.add_argument(
        "--noise",
        type=number("a half-width such as 0.1"),
        help="eagle1: half-width of the U(-a, a) feature noise (0.1)",
    )
    p.add_argument("--preset", help="nano | tiny | small")
    p.add_argument("--out-dir", dest="out_dir", help="run directory (state for resume)")
    p.add_argument("--tokenizer", help="tokenizer.json to use (default: train one)")
    for name, kind in (
        ("steps", integer(1, "a step count such as 1000")),
        ("batch-size", integer(1, "a batch size such as 8")),
        ("seq-len", integer(1, "a window length such as 256")),
        ("lr", number("a learning rate such as 3e-3", positive=True)),
        ("warmup-steps", integer(0, "a step count such as 100")),
        ("eval-every", integer(1, "a step count such as 250")),
        ("eval-batches", integer(1, "a count such as 8")),
        ("save-every", integer(1, "a step count such as 100")),
        ("seed", integer(0, "a seed >= 0 such as 1")),
        ("max-train-chars", integer(0, "0 (the whole split) or a character count")),
    ):
        p.add_argument(f"--{name}", dest=name.replace("-", "_"), type=kind)
    p.add_argument("--export-dir", dest="export_dir", help="final HF-layout model directory")
    p.add_argument("--export-dtype", dest="export_dtype", choices=["float32", "float16"])
    p.add_argument("--no-resume", action="store_true", help="start over even if state exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)
