"""`minieagle distill`: the target writes its own training data, many sequences at once, its
features recorded as it writes (minieagle/distill.py, docs/distill.md)."""

from __future__ import annotations

import json

from minieagle.cli.flags import DEFAULT_MODEL, integer, number


def cmd_distill(args) -> int:
    from minieagle.distill import DistillConfig, run_distill

    keys = tuple(int(k) if k.strip().isdigit() else k.strip() for k in args.keys.split(","))
    cfg = DistillConfig(
        target=args.target,
        out_dir=args.out_dir,
        source=args.source,
        shards=args.shards,
        shard_windows=args.shard_windows,
        window_tokens=args.window_tokens,
        prompt_tokens=args.prompt_tokens,
        temperature=args.temperature,
        keys=keys,
        batch_size=args.batch_size,
        seed=args.seed,
        chat_template=args.template or "",
        split=args.split,
        request_batch=args.request_batch,
    )
    summary = run_distill(cfg, progress=not args.quiet, worker=args.worker)
    print(json.dumps(summary, indent=2))
    return 0


def _worker(text: str) -> tuple[int, int]:
    import argparse

    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected K/N with 0 <= K < N, e.g. 0/2 and 1/2 for two processes"
        )
    return int(k), int(n)


def add_parser(sub) -> None:
    from minieagle.data import REQUEST_FILES
    from minieagle.distill import SOURCES, SPLITS

    p = sub.add_parser(
        "distill",
        help="self-distillation: the target writes training data for a head, features recorded",
    )
    p.add_argument("--target", default=str(DEFAULT_MODEL), help="target checkpoint directory")
    p.add_argument(
        "--out-dir",
        dest="out_dir",
        required=True,
        help="the run directory: shards and distill.json (resumed and extended)",
    )
    p.add_argument(
        "--source",
        choices=SOURCES,
        default="corpus",
        help="corpus: continue training-split windows; chat: answer requests about "
        "passages, rendered with the chat template; requests: answer general requests "
        "that name no passage (data/requests.jsonl); corpus-windows: record the training "
        "splits' own windows (no sampling)",
    )
    p.add_argument(
        "--split",
        choices=SPLITS,
        default="train",
        help="where the prompts' passages come from: the corpora's train (the heads' data), "
        "val or test split, or ood (other packages' docs and code): the last three make "
        "held-out sets (train)",
    )
    p.add_argument(
        "--request-batch",
        dest="request_batch",
        type=int,
        choices=tuple(REQUEST_FILES),
        default=1,
        help="requests: which file of general requests, "
        + ", ".join(f"{n} (data/{path.name})" for n, path in REQUEST_FILES.items())
        + ", 1,000 each (1)",
    )
    p.add_argument(
        "--shards",
        type=integer(1, "a count such as 8"),
        default=8,
        help="shards to write (more extend an earlier run)",
    )
    p.add_argument(
        "--shard-windows",
        dest="shard_windows",
        default=256,
        type=integer(1, "a count such as 256"),
        help="sequences per shard (256)",
    )
    p.add_argument(
        "--window-tokens",
        dest="window_tokens",
        default=129,
        type=integer(2, "a length such as 129"),
        help="tokens per sequence, prompt included: the heads' seq_len + 1 (129)",
    )
    p.add_argument(
        "--prompt-tokens",
        dest="prompt_tokens",
        default=16,
        type=integer(1, "a count such as 16"),
        help="corpus tokens per prompt (chat: per request's passage) (16)",
    )
    p.add_argument(
        "--temperature",
        type=number("a temperature such as 1.0"),
        default=1.0,
        help="sampling temperature of the continuations, 0 = greedy (1.0)",
    )
    p.add_argument(
        "--keys",
        default="final",
        help="hidden states to record: 'final' (EAGLE-1) and layer indices "
        "(EAGLE-3's fused layers), comma-separated, e.g. 2,6,9,final",
    )
    p.add_argument(
        "--batch-size",
        dest="batch_size",
        default=64,
        type=integer(1, "a count such as 64"),
        help="sequences decoded at once (64)",
    )
    p.add_argument("--seed", type=integer(0, "a seed such as 0"), default=0)
    p.add_argument("--template", help="--source chat: a chat template file (default the target's)")
    p.add_argument(
        "--worker",
        type=_worker,
        default=(0, 1),
        metavar="K/N",
        help="write only shards i with i %% N == K: N processes (one per core) share the run (0/1)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_distill)
