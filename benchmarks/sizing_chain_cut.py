"""Does a long chain's verdict tell how a shorter chain fares? The check behind the tree sizing.

`minieagle.sizing` reads every shorter chain (and smaller tree) from the verdicts of one deep
calibration tree: node j's chance of ending on the accepted path is taken to be the same whether
the chain goes on below it or not. Token by token that is plain; judged as a block (`generate`'s
default), where a later draft can rescue an earlier one, it holds in expectation on chains
(docs/lossless.md §6; checked exactly by
`tests/test_lossless.py::test_block_verification_judges_a_chains_first_drafts_as_if_it_ended_there`).
This measures it on a shipped head: the sizing's own prompts (`calibration.tuning_prompts`,
train split), sampled chains of `--short` and `--long` drafts through the dynamic-tree drafter
(top_k 1, the sampled tree: what the sizing measures at T > 0), both verifications, and prints
P(accepted >= j) per cycle for j up to the short chain's length (each prompt's last cycle left
out: `max_new_tokens` may cut it).

    OPENBLAS_NUM_THREADS=1 python benchmarks/sizing_chain_cut.py \
        --out docs/results/sizing-chain-cut.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from minieagle import inference
from minieagle.calibration import tuning_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter, load_draft_head
from minieagle.generate import generate
from minieagle.sampling import SamplingParams
from minieagle.shipped import DEFAULT_MODEL, resolve_head


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", default="small-eagle1", help="an EAGLE-1 head (EAGLE-2 tree)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--prompts-per-kind", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--short", type=int, default=3, help="drafts of the short chain")
    parser.add_argument("--long", type=int, default=8, help="drafts of the long chain")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    params, config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    target = inference.prepare(params, config)
    head = load_draft_head("eagle2", resolve_head(args.head), (target, config))
    sampling = SamplingParams(temperature=args.temperature)
    prompts = tuning_prompts(tokenizer, "train", args.prompts_per_kind, seeds=(0, 0))
    rows = {}
    for verification in ("block", "token"):
        for drafts in (args.short, args.long):
            accepted = []
            for seed in range(args.seeds):
                for i, (_, ids) in enumerate(prompts):
                    drafter = build_drafter(
                        "eagle2", target=(target, config), head=head, depth=drafts - 1, top_k=1,
                        total_tokens=drafts + 1, calibration=None, sampled_tree=True,
                    )  # fmt: skip
                    result = generate(target, config, ids, drafter=drafter,
                                      max_new_tokens=args.new_tokens, sampling=sampling,
                                      seed=100 * seed + i, stop_at_eos=False,
                                      verification=verification)  # fmt: skip
                    accepted += result.accepted_per_cycle[:-1]
            counts = np.asarray(accepted)
            at_least = [float(np.mean(counts >= j)) for j in range(1, args.short + 1)]
            rows[f"{verification}, chain of {drafts}"] = {
                "cycles": len(counts),
                "p_accepted_at_least": at_least,
                "standard_errors": [float(np.sqrt(p * (1 - p) / len(counts))) for p in at_least],
                "mean_accepted": float(counts.mean()),
            }
            shown = " ".join(f"{p:.3f}" for p in at_least)
            print(f"{verification:5s} chain of {drafts}: {len(counts)} cycles, "
                  f"P(accepted >= 1..{args.short}) {shown}", flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"command": vars(args), "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
