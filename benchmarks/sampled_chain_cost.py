"""A sampled chain's cost through the dynamic-tree drafter against EAGLE-1's drafter.

Both draft the same sampled chain of `--drafts` tokens with the same EAGLE-1 head on the tiny
target (EAGLE-1: `--tree chain:D`; the dynamic tree: depth D, top_k 1, D + 1 nodes, raw scores,
the sampled tree), so they emit the same tokens for the same seeds and differ only in what
drafting costs. The two decode the same prompts alternately, `--repeats` times, in one process;
reported: the median ratio of the dynamic drafter's decoding time to EAGLE-1's, with
[min..max], and whether every run's tokens agreed.

    OPENBLAS_NUM_THREADS=1 python benchmarks/sampled_chain_cost.py

Run it at two commits (one from a worktree) to compare a change (docs/speed.md, "Sampled chains
drawn lean").
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from minieagle import inference
from minieagle.checkpoint import load_checkpoint
from minieagle.costs import spread
from minieagle.drafters import build_drafter
from minieagle.generate import generate
from minieagle.sampling import SamplingParams
from minieagle.shipped import DEFAULT_MODEL


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--head", default="small-eagle1", help="an EAGLE-1 head (dir or name)")
    parser.add_argument("--drafts", type=int, default=3, help="the chain's length D")
    parser.add_argument("--prompts", type=int, default=4, help="random-token prompts")
    parser.add_argument("--prompt-tokens", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--out", help="write the result here (JSON)")
    args = parser.parse_args(argv)
    params, config, _ = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, config.vocab_size, args.prompt_tokens).tolist()
               for _ in range(args.prompts)]  # fmt: skip
    sampling = SamplingParams(temperature=args.temperature)
    D = args.drafts
    pair = (target, config)
    eagle1 = build_drafter("eagle1", target=pair, head=args.head, tree=f"chain:{D}")
    dynamic = build_drafter("eagle2", target=pair, head=args.head, depth=D, top_k=1,
                            total_tokens=D + 1, sampled_tree=True, calibration=None)  # fmt: skip
    drafters = {"eagle1": eagle1, "dynamic": dynamic}

    def decode(name: str) -> tuple[float, list]:
        start = time.perf_counter()
        tokens = [generate(target, config, p, drafter=drafters[name], sampling=sampling,
                           max_new_tokens=args.new_tokens, seed=i).tokens
                  for i, p in enumerate(prompts)]  # fmt: skip
        return time.perf_counter() - start, tokens

    decode("eagle1"), decode("dynamic")  # warm-up
    ratios, same = [], True
    for _ in range(args.repeats):
        (first, a), (second, b) = decode("eagle1"), decode("dynamic")
        ratios.append(second / first)
        same &= a == b
    result = {
        "model": args.model, "head": args.head, "drafts": D, "temperature": args.temperature,
        "prompts": args.prompts, "new_tokens": args.new_tokens, "repeats": args.repeats,
        "dynamic_over_eagle1": spread(ratios),
        "same_tokens": same,
    }  # fmt: skip
    r = result["dynamic_over_eagle1"]
    print(f"sampled chain of {D}: the dynamic-tree drafter takes {r['median']:.3f}x EAGLE-1's "
          f"time [{r['min']:.3f}..{r['max']:.3f}] over {args.repeats} alternations; "
          f"same tokens: {same}")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
