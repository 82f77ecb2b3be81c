"""Self-distillation throughput: the batched sampler (`distill.decode_batch`, B sequences side by
side, features recorded) against one-at-a-time decoding (`generate`, the fast path, one prompt
after another: how `train_eagle.generated_stream` wrote the target's text before), in one
process, alternating, on the same prompts.

Both sample at T = 1 and write the same number of new tokens per prompt; tokens/s counts the
sampled tokens only (the prompts are not generated). Reported per target: the median over
--repeats of each side's tokens/s, the spread [min..max], and the ratio of the medians.

    OPENBLAS_NUM_THREADS=1 python benchmarks/distill_throughput.py \\
        --json docs/results/distill-throughput.json
    OPENBLAS_NUM_THREADS=1 python benchmarks/distill_throughput.py \\
        --model ~/.cache/minieagle/models/smollm2-135m-instruct --batch-size 32 \\
        --new-tokens 64 --serial-prompts 2 --json docs/results/distill-throughput-smollm2.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle.checkpoint import load_checkpoint
from minieagle.distill import decode_batch
from minieagle.generate import generate
from minieagle.sampling import SamplingParams

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained" / "small"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--batch-size", type=int, default=64, help="sequences side by side")
    parser.add_argument("--serial-prompts", type=int, default=8, help="prompts decoded alone")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=112)
    parser.add_argument("--keys", default="final", help="hidden states the batched side records")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    keys = tuple(int(k) if k.isdigit() else k for k in args.keys.split(","))
    params, config, _ = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, config.vocab_size, args.prompt_tokens).tolist()
               for _ in range(args.batch_size)]  # fmt: skip
    window = args.prompt_tokens + args.new_tokens

    def serial() -> float:
        start = time.perf_counter()
        written = 0
        for i, prompt in enumerate(prompts[: args.serial_prompts]):
            result = generate(target, config, prompt, max_new_tokens=args.new_tokens,
                              sampling=SamplingParams(temperature=1.0), seed=i,
                              stop_at_eos=False)  # fmt: skip
            written += len(result.tokens)
        return written / (time.perf_counter() - start)

    def batched() -> float:
        start = time.perf_counter()
        _, _, sampled = decode_batch(target, prompts, window, keys, 1.0, rng)
        return sampled / (time.perf_counter() - start)

    serial(), batched()  # warm-up
    runs = {"one at a time": [], "batched": []}
    for _ in range(args.repeats):
        runs["one at a time"].append(serial())
        runs["batched"].append(batched())
    summary = {
        name: {"median_tokens_per_s": statistics.median(v), "min": min(v), "max": max(v)}
        for name, v in runs.items()
    }
    ratio = summary["batched"]["median_tokens_per_s"] / summary["one at a time"][
        "median_tokens_per_s"]  # fmt: skip
    results = {
        "model": args.model,
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "machine": platform.processor() or platform.machine(),
        "tokens_per_s": summary,
        "runs": runs,
        "ratio_batched_over_one_at_a_time": ratio,
    }
    for name, s in summary.items():
        print(f"{name:14} {s['median_tokens_per_s']:9.1f} tokens/s "
              f"[{s['min']:.1f}..{s['max']:.1f}]")  # fmt: skip
    print(f"ratio {ratio:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
