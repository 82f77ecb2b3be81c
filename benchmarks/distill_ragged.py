"""The batched sampler on prompts of unequal length: `distill.decode_batch` over the general
requests' prompts (`distill --source requests`, whose lengths differ most), with the rows whose
window is full leaving the batch (`drop_finished`, the default) and without (every row decoding
until the shortest prompt's window is full), alternating in one process so the machine's drift
falls on both alike. Counts the sampled tokens only (as `distill_throughput.py`), and checks the
two write the same windows.

    OPENBLAS_NUM_THREADS=1 python benchmarks/distill_ragged.py \\
        --model ~/.cache/minieagle/models/smollm2-135m-instruct \\
        --json docs/results/distill-ragged-smollm2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle.checkpoint import load_checkpoint
from minieagle.distill import DistillConfig, _prompt_source, decode_batch

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained" / "small"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="an instruct target")
    parser.add_argument("--request-batch", type=int, default=2, choices=(1, 2))
    parser.add_argument("--shard", type=int, default=0, help="whose prompts: a shard's index")
    parser.add_argument("--windows", type=int, default=64, help="windows decoded each way")
    parser.add_argument("--window-tokens", type=int, default=257)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--template", default="", help="a chat template file (the target's own)")
    parser.add_argument("--keys", default="2,15,27,final", help="hidden states recorded")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    keys = tuple(int(k) if k.isdigit() else k for k in args.keys.split(","))
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    with tempfile.TemporaryDirectory() as scratch:
        cfg = DistillConfig(target=args.model, out_dir=scratch, source="requests", seed=0,
                            request_batch=args.request_batch, window_tokens=args.window_tokens,
                            shard_windows=args.windows, batch_size=args.windows,
                            chat_template=args.template)  # fmt: skip
        prompts, _ = _prompt_source(cfg, tokenizer, Path(scratch))._request_prompts(args.shard)
    lengths = [len(p) for p in prompts]
    steps = max(lengths) + args.window_tokens - min(lengths)  # each row's positions, no drops
    decode_batch(target, prompts[:2], max(lengths) + 4, keys, 1.0, np.random.default_rng(0))

    def run(drop: bool):
        start = time.perf_counter()
        windows, _, sampled = decode_batch(target, prompts, args.window_tokens, keys,
                                           args.temperature, np.random.default_rng(1),
                                           drop_finished=drop)  # fmt: skip
        return sampled / (time.perf_counter() - start), windows

    runs, written = {"drop": [], "keep": []}, {}
    for _ in range(args.repeats):
        for name in runs:
            rate, written[name] = run(name == "drop")
            runs[name].append(rate)
            print(f"{name}: {rate:7.1f} tokens/s", flush=True)
    median = {name: statistics.median(v) for name, v in runs.items()}
    results = {
        "model": args.model,
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "machine": platform.processor() or platform.machine(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
        "load_average": os.getloadavg(),
        "prompt_lengths": {"min": min(lengths), "median": statistics.median(lengths),
                           "max": max(lengths)},  # fmt: skip
        "positions_wasted_without_drops": 1 - args.window_tokens / steps,
        "runs_tokens_per_s": runs,
        "median_tokens_per_s": median,
        "ratio_drop_to_keep": median["drop"] / median["keep"],
        "windows_equal": bool(np.array_equal(written["drop"], written["keep"])),
    }
    print(f"drop / keep: {results['ratio_drop_to_keep']:.3f}x (medians {median['drop']:.1f} / "
          f"{median['keep']:.1f} tokens/s); windows equal: {results['windows_equal']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
