"""τ of the sampled dynamic tree at T = 1 by its shape (depth, top_k) at one node budget,
measured on the VALIDATION prompts.

At T = 1 EAGLE-2/3 draft a sampled tree (`Eagle2Drafter(sampled_tree=True)`): each expanded
node's children drawn without replacement from the draft distribution. Whether its shape should
be the paper's top-k tree's (depth 5, top_k 8 for EAGLE-2) or deeper and narrower is a question
for held-out data that τ is not reported on: this script decodes prompts cut from the corpora's
validation split (`calibration.validation_prompts`, the prompts `minieagle calibrate` judges its
maps on; `benchmarks/default_tau.py` reports on the test split and other packages' text), prompt
i with seed i, every shape with the head's shipped scores (`build_drafter`'s default), the same
26 nodes.

    OPENBLAS_NUM_THREADS=1 python benchmarks/sampled_tree_shape.py \
        --out docs/results/sampled-tree-shape.json

`--speed` measures speed instead: vanilla and each method at each of `--depths` (top_k the
first of `--top-ks`), side by side in one process (`bench_methods.compare_methods`: the methods
interleaved, the order rotating each repeat), at T = 0 and T = 1, on the same validation
prompts; the sampled tree at T = 1 as above.
"""

from __future__ import annotations

import argparse
import time

from default_tau import tau_summary, write_json

from minieagle import inference
from minieagle.bench_methods import compare_methods, format_report
from minieagle.calibration import validation_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter
from minieagle.generate import generate
from minieagle.sampling import SamplingParams
from minieagle.shipped import DEFAULT_MODEL

HEADS = {"eagle2": "small-eagle1", "eagle3": "small-eagle3"}
DEPTHS = (5, 7, 9)
TOP_KS = (2, 3, 4, 8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts-per-kind", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=1,
                        help="windows cut with seeds 0..N-1: N x prompts-per-kind per kind")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--total-tokens", type=int, default=26)
    parser.add_argument("--methods", default="eagle2,eagle3")
    parser.add_argument("--depths", default=",".join(map(str, DEPTHS)))
    parser.add_argument("--top-ks", default=",".join(map(str, TOP_KS)))
    parser.add_argument("--speed", action="store_true",
                        help="speed against vanilla at --depths instead of the tau sweep")
    parser.add_argument("--repeats", type=int, default=3, help="--speed: repeats")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    params, config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    target = (inference.prepare(params, config), config)
    prompts = [(kind, ids) for kind in ("prose", "code") for seed in range(args.seeds)
               for _, ids in validation_prompts(tokenizer, kind, args.prompts_per_kind, seed=seed)]
    depths = [int(d) for d in args.depths.split(",")]
    top_ks = [int(k) for k in args.top_ks.split(",")]
    if args.speed:
        return speed(target, prompts, depths, top_ks[0], args)
    sampling, start, results = SamplingParams(temperature=1.0), time.perf_counter(), {}
    for method in args.methods.split(","):
        results[method] = {}
        for depth in depths:
            for top_k in top_ks:
                runs = []
                for i, (kind, ids) in enumerate(prompts):
                    drafter = build_drafter(method, target=target, head=HEADS[method],
                                            depth=depth, top_k=top_k,
                                            total_tokens=args.total_tokens, sampled_tree=True)
                    result = generate(*target, ids, drafter=drafter, sampling=sampling, seed=i,
                                      max_new_tokens=args.new_tokens, stop_at_eos=False)
                    runs.append((kind, result))
                row = {"depth": depth, "top_k": top_k, **tau_summary(runs)}
                results[method][f"depth {depth}, top_k {top_k}"] = row
                print(f"{method} depth {depth} top_k {top_k}: tau {row['tau']:.2f} "
                      f"(s.e. {row['tau_standard_error']:.2f})", flush=True)
    results["settings"] = {"prompts": len(prompts), "prompt_split": "validation",
                           "prompts_per_kind": args.prompts_per_kind, "seeds": args.seeds,
                           "temperature": 1.0,
                           "new_tokens": args.new_tokens, "total_tokens": args.total_tokens,
                           "seconds": time.perf_counter() - start}  # fmt: skip
    write_json(results, args.out)
    return 0


def speed(target, prompts, depths, top_k, args) -> int:
    """Vanilla and every (method, depth) side by side, T = 0 and T = 1 (`compare_methods`)."""
    def make(method, depth):
        return lambda: build_drafter(method, target=target, head=HEADS[method], depth=depth,
                                     top_k=top_k, total_tokens=args.total_tokens)

    methods = {"vanilla": lambda: None}
    for method in args.methods.split(","):
        for depth in depths:
            methods[f"{method} depth {depth}"] = make(method, depth)
    results = compare_methods(*target, methods, prompts, new_tokens=args.new_tokens,
                              repeats=args.repeats, max_depth=max(depths) + 1)
    print(format_report(results))
    results["settings"] = {"prompts": len(prompts), "prompt_split": "validation",
                           "prompts_per_kind": args.prompts_per_kind, "seeds": args.seeds,
                           "new_tokens": args.new_tokens, "total_tokens": args.total_tokens,
                           "top_k": top_k, "repeats": args.repeats}  # fmt: skip
    write_json(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
