"""The batched sampler's tokens/s at several batch sizes: `distill.decode_batch` over the same
prompts in batches of B, each B alternating with the others in one process, so the machine's
drift falls on all alike. Counts the sampled tokens only (as `distill_throughput.py`).

    OPENBLAS_NUM_THREADS=1 python benchmarks/distill_batch_size.py \\
        --model ~/.cache/minieagle/models/smollm2-135m-instruct --sizes 32,64,128 \\
        --json docs/results/distill-batch-size-smollm2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle.checkpoint import load_checkpoint
from minieagle.distill import decode_batch

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained" / "small"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--sizes", default="32,64,128", help="batch sizes, comma-separated")
    parser.add_argument("--windows", type=int, default=128, help="windows decoded per size")
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--keys", default="2,15,27,final", help="hidden states recorded")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    sizes = [int(b) for b in args.sizes.split(",")]
    if any(b < 1 or args.windows % b for b in sizes):
        parser.error(f"--sizes {args.sizes}: each must divide --windows {args.windows}")
    keys = tuple(int(k) if k.isdigit() else k for k in args.keys.split(","))
    params, config, _ = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, config.vocab_size, args.prompt_tokens).tolist()
               for _ in range(args.windows)]  # fmt: skip
    window = args.prompt_tokens + args.new_tokens
    decode_batch(target, prompts[:4], args.prompt_tokens + 8, keys, 1.0, rng)  # warm-up

    def rate(b: int) -> float:
        start, sampled = time.perf_counter(), 0
        for i in range(0, args.windows, b):
            batch = prompts[i : i + b]
            sampled += decode_batch(target, batch, window, keys, 1.0, np.random.default_rng(i))[2]
        return sampled / (time.perf_counter() - start)

    runs = {b: [] for b in sizes}
    for _ in range(args.repeats):
        for b in sizes:
            runs[b].append(rate(b))
            print(f"B = {b:4}: {runs[b][-1]:7.1f} tokens/s", flush=True)
    first = statistics.median(runs[sizes[0]])
    results = {
        "model": args.model,
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "machine": platform.processor() or platform.machine(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
        "load_average": os.getloadavg(),
        "runs_tokens_per_s": {str(b): v for b, v in runs.items()},
        "median_tokens_per_s": {str(b): statistics.median(v) for b, v in runs.items()},
        "ratio_to_first": {str(b): statistics.median(v) / first for b, v in runs.items()},
    }
    for b in sizes:
        print(f"B = {b:4}: median {results['median_tokens_per_s'][str(b)]:7.1f} tokens/s, "
              f"{results['ratio_to_first'][str(b)]:.3f}x B = {sizes[0]}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
