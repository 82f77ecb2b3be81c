"""The cost of verifying N tokens on the fast path, with `inference.linear` as it is and as it
was before (a large weight's blocks met 2-64 rows all as block @ x.T, where now 2-6 rows meet
them as x @ block.T), on the same `inference.layout`, alternated in one process.

    OPENBLAS_NUM_THREADS=1 python benchmarks/small_products.py \\
        --out docs/results/small-products-against-blocks-smollm2.json

A chain of N tokens after a cached chat prompt, through the prepared target with lazy logits
given the chain's parents, one LM-head row read (a verdict that rejects the first draft) or
every row (one that accepts the whole chain, whose rows `LazyLogits` computes in one product);
each N's median over the repeats, relative to N = 1 under the same rule. --model DIR measures
another checkpoint (default: SmolLM2 from the cache). The rounds before (docs/speed.md, "Small
products") were measured by this script at the commits that made them.
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

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 26, 32, 64, 128)
LINEAR = inference.linear  # this round's rule (the script swaps inference.linear while it times)
PROMPT = "Explain what this Python code does, then continue it:\n\ndef read_config(path):\n"


def before_linear(x, weight):
    """`inference.linear` before this round, on the same layout."""
    rows = x.shape[0]
    if weight.ndim == 2 or rows == 1 or rows > inference.ROWS_BY_BLOCKS:
        return LINEAR(x, weight)
    nb, c, d_in = weight.shape
    y = weight @ np.ascontiguousarray(x.T)  # [nb, c, in] @ [in, R] -> [nb, c, R]
    return y.reshape(nb * c, rows).T


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    # (rule, every row read): one LM-head row read, as a verdict that rejects the first draft;
    # or every row, as one that accepts the whole chain (LazyLogits computes them in one product)
    series = {"before": (before_linear, False), "after": (LINEAR, False),
              "before, every row": (before_linear, True),
              "after, every row": (LINEAR, True)}  # fmt: skip
    prompt = tokenizer.encode(PROMPT, add_bos=True)
    cache = KVCache.for_model(config, params, capacity=len(prompt) + max(SIZES))
    target.forward(np.asarray(prompt), cache=cache)
    cached = len(prompt)
    times = {(name, n): [] for name in series for n in SIZES}
    try:
        for _ in range(args.repeats):
            for name, (rule, every_row) in series.items():
                inference.linear = rule
                for n in SIZES:
                    chain = trees.Tree.chain(prompt[-1], [int(t) for t in np.resize(prompt, n - 1)])
                    positions = trees.position_ids(chain, cached)
                    mask = trees.attention_mask(chain, cached)
                    start = time.perf_counter()
                    ids = np.asarray(chain.tokens)
                    logits, _ = target.forward(ids, position_ids=positions, attention_mask=mask,
                                               cache=cache, lazy_logits=True,
                                               tree_parents=chain.parents)  # fmt: skip
                    for i in range(n if every_row else 1):
                        logits[i]
                    times[name, n].append(1e3 * (time.perf_counter() - start))
                    cache.crop(cached)
    finally:
        inference.linear = LINEAR
    results = {"model": args.model, "machine": machine_info(), "repeats": args.repeats}
    for name in series:
        one = statistics.median(times[name, 1])
        results[name] = {
            "ms_one": one,
            "relative_to_one": {str(n): statistics.median(times[name, n]) / one for n in SIZES},
        }
        ratios = " ".join(f"{n}: {results[name]['relative_to_one'][str(n)]:.2f}" for n in SIZES)
        print(f"{name:17} N = 1: {one:.1f} ms; N / 1: {ratios}")
    for after, before in (("after", "before"), ("after, every row", "before, every row")):
        ratio = {
            str(n): statistics.median(times[after, n]) / statistics.median(times[before, n])
            for n in SIZES
        }
        results[f"{after} / {before}"] = ratio
        print(f"{after} / {before}, ms: " + " ".join(f"{n}: {r:.2f}" for n, r in ratio.items()))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
