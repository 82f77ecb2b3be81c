"""The `minieagle` command: demo, generate, train, bench."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PRETRAINED = Path(__file__).parent / "pretrained"
DEFAULT_MODEL = PRETRAINED / "small"

DEMO_PROMPTS = (
    ("prose", "The interpreter reads"),
    ("code", "def read_config(path):\n"),
)


def _load(model_dir: str | Path):
    from minieagle.checkpoint import load_checkpoint

    params, config, tokenizer = load_checkpoint(model_dir)
    if tokenizer is None:
        raise SystemExit(f"error: {model_dir} has no tokenizer.json; it cannot encode a prompt")
    return params, config, tokenizer


def _sampling(args):
    from minieagle.sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def cmd_generate(args) -> int:
    from minieagle.generate import generate

    params, config, tokenizer = _load(args.model)
    prompt_ids = tokenizer.encode(args.prompt, add_bos=True)
    result = generate(
        params,
        config,
        prompt_ids,
        max_new_tokens=args.max_new_tokens,
        sampling=_sampling(args),
        seed=args.seed,
    )
    print(args.prompt + tokenizer.decode(result.tokens))
    if args.stats:
        print(
            f"\n[{len(result.tokens)} tokens, {result.ms_per_token:.2f} ms/token, "
            f"stop: {result.stop_reason}]",
            file=sys.stderr,
        )
    return 0


def cmd_demo(args) -> int:
    from minieagle.generate import generate
    from minieagle.sampling import SamplingParams

    params, config, tokenizer = _load(args.model)
    n_params = sum(int(p.size) for p in params.values())
    print(
        f"minieagle demo: target {args.model} ({config.num_hidden_layers} layers, width "
        f"{config.hidden_size}, {n_params / 1e6:.2f}M parameters, vocab {config.vocab_size})\n"
    )
    for kind, prompt in DEMO_PROMPTS:
        for sampling in (SamplingParams(), SamplingParams(temperature=0.8, top_p=0.95)):
            ids = tokenizer.encode(prompt, add_bos=True)
            result = generate(
                params,
                config,
                ids,
                max_new_tokens=args.max_new_tokens,
                sampling=sampling,
                seed=args.seed,
            )
            mode = "greedy" if sampling.greedy else f"T={sampling.temperature} top_p=0.95"
            print(
                f"--- {kind}, {mode}: {len(result.tokens)} tokens, "
                f"{result.ms_per_token:.2f} ms/token"
            )
            print(prompt + tokenizer.decode(result.tokens))
            print()
    return 0


def cmd_train(args) -> int:
    from minieagle.train import TrainConfig, train

    fields = {
        k: getattr(args, k)
        for k in (
            "preset",
            "out_dir",
            "tokenizer",
            "steps",
            "batch_size",
            "seq_len",
            "lr",
            "warmup_steps",
            "eval_every",
            "eval_batches",
            "save_every",
            "seed",
            "export_dir",
            "export_dtype",
            "max_train_chars",
        )
        if getattr(args, k) is not None
    }
    log = train(TrainConfig(**fields), resume=not args.no_resume, progress=not args.quiet)
    print(json.dumps(log["evals"][-1] if log["evals"] else {}, indent=2))
    print(f"model written to {log['export_dir']}")
    return 0


def cmd_bench(args) -> int:
    from minieagle.bench import run_bench

    run_bench(args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minieagle", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def sampling_flags(p):
        p.add_argument("--model", default=str(DEFAULT_MODEL), help="checkpoint directory")
        p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
        p.add_argument("--top-k", type=int, default=0, help="0 = off")
        p.add_argument("--top-p", type=float, default=1.0, help="1 = off")
        p.add_argument("--max-new-tokens", type=int, default=64)
        p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("generate", help="continue a prompt with the target model")
    p.add_argument("prompt")
    sampling_flags(p)
    p.add_argument("--stats", action="store_true", help="print tokens and ms/token to stderr")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("demo", help="generate from the shipped model on a prose and a code prompt")
    sampling_flags(p)
    p.set_defaults(func=cmd_demo, max_new_tokens=48)

    p = sub.add_parser("train", help="train a model (see docs/training.md)")
    p.add_argument("what", choices=["target", "draft-model"],
                   help="a language model: the target, or the small draft model of classic "
                   "speculative decoding (same training, another preset)")
    p.add_argument("--preset", help="nano | tiny | small")
    p.add_argument("--out-dir", dest="out_dir", help="run directory (state for resume)")
    p.add_argument("--tokenizer", help="tokenizer.json to use (default: train one)")
    for name, kind in (
        ("steps", int),
        ("batch-size", int),
        ("seq-len", int),
        ("lr", float),
        ("warmup-steps", int),
        ("eval-every", int),
        ("eval-batches", int),
        ("save-every", int),
        ("seed", int),
        ("max-train-chars", int),
    ):
        p.add_argument(f"--{name}", dest=name.replace("-", "_"), type=kind)
    p.add_argument("--export-dir", dest="export_dir", help="final HF-layout model directory")
    p.add_argument("--export-dtype", dest="export_dtype", choices=["float32", "float16"])
    p.add_argument("--no-resume", action="store_true", help="start over even if state exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("bench", help="measure decoding ms/token, training tokens/s and MFU")
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--out", help="write the results as JSON here")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
