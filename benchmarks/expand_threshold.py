"""Which `--expand-threshold` pays for a chain drafter, measured on the validation split.

    OPENBLAS_NUM_THREADS=1 python benchmarks/expand_threshold.py \\
        --out docs/results/expand-threshold-smollm2.json

A chain (top_k 1) of up to `--drafts` drafts, grown while the last draft's value (the product of
the head's q along the chain, or its calibrated estimate) reaches the threshold t, drafts k(t)
drafts in a cycle: the first always, draft j + 1 when draft j's value is at least t. At T = 0
the accepted prefix of a chain does not depend on where it was cut, so one decoding with the
longest chain tells, cycle by cycle, what every threshold would have emitted: 1 + min(accepted,
k(t)). What a cycle costs is measured too, in the same process: each chain of k = 1 ..
`--drafts` drafts decodes the same prompts, and its ms per target forward is the cost of a
cycle that drafts k; vanilla's ms per token is the unit. The predicted speedup of t is then
(tokens over all cycles) / (their summed costs) against vanilla, and the best t is printed.

The prompts are the validation split's chat requests (`calibration.tuning_prompts(tokenizer,
"val", N)`: N about prose passages, N about code), which neither the heads' training (train
split) nor `benchmarks/smollm2_cli.py` (test split and out-of-domain requests) reads. The
decoding uses the head's shipped scores where the CLI would (`drafters.tree_options`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle.bench import machine_info
from minieagle.calibration import tuning_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter
from minieagle.generate import generate

THRESHOLDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def drafts_kept(values: list[float], threshold: float) -> int:
    """Drafts a chain grown under `threshold` holds, given the values of the longest chain's
    drafts in order: the first always, the next while the last one's value reaches it."""
    k = 1
    while k < len(values) and values[k - 1] >= threshold:
        k += 1
    return k


def predicted(cycles, cost_ms: dict[int, float], threshold: float) -> tuple[float, float]:
    """(tau, ms per token) of `threshold` over `cycles` [(values, accepted)] at the measured
    cost of a cycle of k drafts."""
    tokens = spent = 0.0
    for values, accepted in cycles:
        k = drafts_kept(values, threshold)
        tokens += 1 + min(accepted, k)
        spent += cost_ms[k]
    return tokens / len(cycles), spent / tokens


class _Recorder:
    """Wraps a chain drafter: the values of each cycle's drafts, in chain order."""

    def __init__(self, inner):
        self.inner, self.values = inner, []
        self.feature_keys = inner.feature_keys

    def begin(self, *args):
        self.inner.begin(*args)

    def propose(self, root, rng, max_nodes):
        tree = self.inner.propose(root, rng, max_nodes)
        pool, selected = self.inner.pool, self.inner.selected
        self.values.append([] if pool is None else np.exp(pool.scores[selected]).tolist())
        return tree

    def accept(self, *args):
        self.inner.accept(*args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--head", default="smollm2-eagle3", help="an EAGLE-3 head (dir or name)")
    parser.add_argument("--method", default="eagle3", choices=["eagle2", "eagle3"])
    parser.add_argument("--drafts", type=int, default=4, help="the longest chain's drafts")
    parser.add_argument("--prompts", type=int, default=4, help="per corpus (prose, code)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="of each cost measurement")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    prompts = [ids for _, ids in tuning_prompts(tokenizer, "val", args.prompts)]

    def chain(k: int, recorder=False):
        depth = max(k - 1, 1)  # a chain of k drafts: k - 1 expansion steps
        drafter = build_drafter(args.method, target=(target, config), head=args.head,
                                depth=depth, top_k=1, total_tokens=k + 1)  # fmt: skip
        return _Recorder(drafter) if recorder else drafter

    # 1. the longest chain: each cycle's draft values and accepted count
    cycles = []
    for ids in prompts:
        recorder = chain(args.drafts, recorder=True)
        result = generate(target, config, ids, drafter=recorder, max_new_tokens=args.new_tokens)
        # the last cycle may be cut by max_new_tokens or the end of the answer: left out
        pairs = list(zip(recorder.values, result.accepted_per_cycle, strict=True))
        cycles += pairs[:-1]
    # 2. what a cycle of k drafts costs, and vanilla's token, alternated in one process
    ms = {k: [] for k in range(0, args.drafts + 1)}  # k = 0: vanilla, ms per token
    for repeat in range(args.repeats):
        for k in (range(args.drafts + 1) if repeat % 2 == 0 else reversed(range(args.drafts + 1))):
            for ids in prompts:
                result = generate(target, config, ids, drafter=chain(k) if k else None,
                                  max_new_tokens=args.new_tokens)  # fmt: skip
                ms[k].append(1e3 * result.decode_seconds / result.target_forwards)
    cost = {k: statistics.median(v) for k, v in ms.items()}
    vanilla = cost.pop(0)
    rows = {}
    for t in THRESHOLDS:
        tau, per_token = predicted(cycles, cost, t)
        rows[str(t)] = {"tau": tau, "ms_per_token": per_token, "speedup": vanilla / per_token}
    best = max(rows, key=lambda t: rows[t]["speedup"])
    fixed = {}
    for k in range(1, args.drafts + 1):
        tau = sum(1 + min(a, k) for _, a in cycles) / len(cycles)
        fixed[str(k)] = {"tau": tau, "cycle_ms": cost[k], "speedup": vanilla * tau / cost[k]}
    print(f"{len(cycles)} cycles over {len(prompts)} validation requests; vanilla "
          f"{vanilla:.1f} ms/token; a cycle of k drafts: "
          + ", ".join(f"{k}: {cost[k]:.1f} ms" for k in cost))  # fmt: skip
    for k, row in fixed.items():
        print(f"  fixed chain of {k}: tau {row['tau']:.2f}, predicted {row['speedup']:.3f}x")
    for t, row in rows.items():
        mark = "  <- best" if t == best else ""
        print(f"  threshold {t}: tau {row['tau']:.2f}, predicted {row['speedup']:.3f}x{mark}")
    results = {
        "model": args.model, "head": args.head, "method": args.method, "drafts": args.drafts,
        "prompts": len(prompts), "new_tokens": args.new_tokens, "repeats": args.repeats,
        "cycles": len(cycles), "vanilla_ms_per_token": vanilla,
        "cycle_ms": {str(k): v for k, v in cost.items()}, "fixed_chains": fixed,
        "thresholds": rows, "best_threshold": float(best), "machine": machine_info(),
    }  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
