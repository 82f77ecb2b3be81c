"""EAGLE-1's input ablation (paper Fig. 4 in miniature): what the draft head reads.

Three heads trained with the same command and step count, differing only in `--inputs`:
token-only, feature-only, and feature + shifted token (EAGLE-1). Each drafts a chain of depth 5
for the shipped target on held-out prose and code prompts, side by side with vanilla decoding.

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle1_ablation.py \\
        --heads token=runs/ablate-token/final feature=runs/ablate-feature/final \\
                token+feature=runs/ablate-both/final --out ablation.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minieagle.bench import heldout_prompts
from minieagle.bench_methods import compare_methods, format_report
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL
from minieagle.drafters import build_drafter
from minieagle.heads.eagle1 import load_head


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--heads", nargs="+", required=True, help="LABEL=DIR pairs")
    parser.add_argument("--depth", type=int, default=5, help="chain depth")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-corpus", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    params, config, tokenizer = load_checkpoint(args.model)
    methods = {"vanilla": lambda: None}
    for pair in args.heads:
        label, _, directory = pair.partition("=")
        head = load_head(directory)

        def factory(head=head):
            return build_drafter(
                "eagle1", target=(params, config), head=head, tree=f"chain:{args.depth}"
            )

        methods[f"eagle1[{label}]"] = factory
    prompts = heldout_prompts(tokenizer, per_corpus=args.prompts_per_corpus)
    results = compare_methods(
        params,
        config,
        methods,
        prompts,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        max_depth=args.depth,
    )
    print(format_report(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
