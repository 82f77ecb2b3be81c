"""The cost of verifying N tokens on the fast path, with `inference.layout` and `inference.linear`
as they are and as they were before (every weight a contiguous [in, out]; a large one applied to
2-3 rows one row at a time and to 5-15 rows padded to a multiple of 4), alternated in one process.

    OPENBLAS_NUM_THREADS=1 python benchmarks/small_products.py \\
        --out docs/results/small-products-smollm2.json

A chain of N tokens after a cached chat prompt, through the prepared target with lazy logits
and one LM-head row read (verification reads the rows of the accepted path only); each N's
median over the repeats, relative to N = 1 under the same rules. --model DIR measures another
checkpoint (default: SmolLM2 from the cache).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle import tree as trees
from minieagle.bench import machine_info
from minieagle.checkpoint import load_checkpoint
from minieagle.kvcache import KVCache

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 26, 32, 64)
PROMPT = "Explain what this Python code does, then continue it:\n\ndef read_config(path):\n"


def before_layout(weight):
    """`inference.layout` before the blocks: every weight transposed to a contiguous [in, out]."""
    return np.ascontiguousarray(weight.T)


def before_linear(x, weight):
    """`inference.linear` before the blocks, on an [in, out] weight."""
    rows = x.shape[0]
    large = weight.shape[0] * weight.shape[1] > inference.SMALL_WEIGHT
    if large and 1 < rows <= 3:
        return np.stack([x[i] @ weight for i in range(rows)])
    if large and 3 < rows < 16 and rows % 4:
        padding = np.zeros((4 - rows % 4, x.shape[1]), dtype=x.dtype)
        return (np.concatenate([x, padding]) @ weight)[:rows]
    if rows < 8 or large:
        return x @ weight
    return (weight.T @ x.T).T


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    layout, linear = inference.layout, inference.linear
    inference.layout = before_layout
    try:
        targets = {"before": inference.prepare(params, config)}
    finally:
        inference.layout = layout
    targets["after"] = inference.prepare(params, config)
    rules = {"before": before_linear, "after": linear}
    prompt = tokenizer.encode(PROMPT, add_bos=True)
    caches = {}
    for name, target in targets.items():
        inference.linear = rules[name]
        caches[name] = KVCache.for_model(config, params, capacity=len(prompt) + max(SIZES))
        target.forward(np.asarray(prompt), cache=caches[name])
    inference.linear = linear
    cached = len(prompt)
    times = {(name, n): [] for name in rules for n in SIZES}
    try:
        for _ in range(args.repeats):
            for name, target in targets.items():
                inference.linear, cache = rules[name], caches[name]
                for n in SIZES:
                    chain = trees.Tree.chain(prompt[-1], [int(t) for t in np.resize(prompt, n - 1)])
                    positions = trees.position_ids(chain, cached)
                    mask = trees.attention_mask(chain, cached)
                    start = time.perf_counter()
                    ids = np.asarray(chain.tokens)
                    logits, _ = target.forward(ids, position_ids=positions, attention_mask=mask,
                                               cache=cache, lazy_logits=True)  # fmt: skip
                    logits[0]
                    times[name, n].append(1e3 * (time.perf_counter() - start))
                    cache.crop(cached)
    finally:
        inference.linear = linear
    results = {"model": args.model, "machine": machine_info(), "repeats": args.repeats}
    for name in rules:
        one = statistics.median(times[name, 1])
        results[name] = {
            "ms_one": one,
            "relative_to_one": {str(n): statistics.median(times[name, n]) / one for n in SIZES},
        }
        ratios = " ".join(f"{n}: {results[name]['relative_to_one'][str(n)]:.2f}" for n in SIZES)
        print(f"{name:6} N = 1: {one:.1f} ms; N / 1: {ratios}")
    after_over_before = {
        str(n): statistics.median(times["after", n]) / statistics.median(times["before", n])
        for n in SIZES
    }
    results["after_over_before"] = after_over_before
    print("after / before, ms: " + " ".join(f"{n}: {r:.2f}" for n, r in after_over_before.items()))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
