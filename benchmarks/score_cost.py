"""What scoring an EAGLE-3 head on one held-out batch costs, with and without the backward pass.

A training run's evaluations score the head on its validation batches (`--val-features`);
`eagle3.ttt_loss(..., grads=False)` skips the backward pass there. This times the recipe's
loss on the first batch of a held-out distill run both ways, alternating, in one process, and
checks that both give the same loss:

    S=~/.cache/minieagle/runs/smollm2 M=~/.cache/minieagle/models/smollm2-135m-instruct
    OPENBLAS_NUM_THREADS=1 python benchmarks/score_cost.py --model $M \\
        --head $S/start-eagle3-n --data $S/heldout-val-T0

(docs/distill.md, "Held-out sets in the training log".)
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from minieagle.checkpoint import load_checkpoint
from minieagle.costs import spread
from minieagle.distill import run_record
from minieagle.train_eagle import Eagle3Recipe, EagleTrainConfig, _held_out_batches


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the target's directory")
    parser.add_argument("--head", required=True, help="an EAGLE-3 head directory")
    parser.add_argument("--data", required=True, help="a held-out distill run of the target")
    parser.add_argument("--seq-len", type=int, default=256, help="its windows' tokens - 1")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--ttt-steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the result here (JSON)")
    args = parser.parse_args(argv)
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    cfg = EagleTrainConfig(
        target=args.model, head="eagle3", out_dir="unused", init_from=args.head,
        seq_len=args.seq_len, batch_size=args.batch_size, ttt_steps=args.ttt_steps,
        eval_batches=1, val_features=(args.data,),
    )  # fmt: skip
    recipe = Eagle3Recipe(cfg, params, config, [])
    fingerprint = run_record(args.data)["target_fingerprint"]
    [batches] = _held_out_batches(cfg, recipe, tokenizer, fingerprint).values()
    windows, hidden, mask, stats = batches[0]
    batch = recipe.batch_from_hidden(windows, hidden, stats)
    seconds, losses = {"with backward": [], "forward only": []}, {}
    for _ in range(args.repeats):
        for name, grads in (("with backward", True), ("forward only", False)):
            start = time.perf_counter()
            losses[name] = recipe._ttt(recipe.start, batch, mask, grads=grads)[0]
            seconds[name].append(time.perf_counter() - start)
    result = {
        "model": args.model, "head": args.head, "data": args.data,
        "positions": int(windows.shape[0] * args.seq_len), "repeats": args.repeats,
        "seconds": {k: spread(v) for k, v in seconds.items()},
        "same_loss": losses["with backward"] == losses["forward only"],
    }  # fmt: skip
    t = {k: v["median"] for k, v in result["seconds"].items()}
    ratio = t["forward only"] / t["with backward"]
    print(f"one batch of {result['positions']} positions: {t['with backward']:.2f} s with the "
          f"backward pass, {t['forward only']:.2f} s forward only ({ratio:.2f}x); "
          f"same loss: {result['same_loss']}")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
