"""τ of drafted chains judged token by token and as one block, side by side, on validation prompts.

`minieagle.block_verify` judges a drafted chain as one block (Sun et al. 2024); `generate`'s
`verification="token"` judges it token by token (`minieagle.verify`). Both are lossless; this
script measures how many more tokens per target forward the block keeps, on the prompts τ is not
reported on (windows of the corpora's validation split, `calibration.validation_prompts`), prompt
i with seed i, at T > 0 (at T = 0 both give the greedy verdict). Chains are what the block
applies to: EAGLE-1's `chain:k` trees and the sampled chains EAGLE-2/3 draft when sized to a
chain (`top_k=1`, the automatic sizing's usual choice at T = 1 on this CPU), and the trees of
the 26-node defaults (EAGLE-1's static tree, EAGLE-2/3's sampled trees at their default depths,
with their shipped scores), where the block judges every path.

    OPENBLAS_NUM_THREADS=1 python benchmarks/block_verification.py \
        --out docs/results/block-verification.json

`--speed` times instead: vanilla and each drafter of `--only` judged both ways, side by side at
T = 0 and T = 1 on the first `--prompts-per-kind` prompts of each kind (`--repeats` repeats,
`bench_methods.compare_methods`): the block reads a target row for every node it weighs, token
by token only along the path it walks.

`--random-trees N` checks instead what the block keeps on N random trees of `--tree-nodes`
nodes over a vocabulary of 30 (each node's children drawn without replacement from a draft law
near the target's, targets from peaked to flat), judged `--samples` times each way on seeded
randomness: on a chain the block never keeps fewer in expectation, on a tree it can.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from default_tau import tau_summary, write_json

from minieagle import inference
from minieagle.bench_methods import compare_methods, format_report
from minieagle.calibration import tuning_prompts, tuning_template, validation_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter
from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS
from minieagle.generate import generate
from minieagle.sampling import SamplingParams
from minieagle.shipped import DEFAULT_MODEL


def drafters(target, e1: str = "small-eagle1", e3: str = "small-eagle3") -> dict:
    """name -> a fresh drafter per prompt: the heads e1 (EAGLE-1) and e3 (EAGLE-3), by name or
    directory (default the shipped tiny heads), with their shipped scores."""

    def chain(method: str, head: str, drafts: int):
        return lambda: build_drafter(method, target=target, head=head, depth=drafts - 1,
                                     top_k=1, total_tokens=drafts + 1, sampled_tree=True)

    return {
        "EAGLE-1 chain:3": lambda: build_drafter("eagle1", target=target, head=e1,
                                                 tree="chain:3"),
        "EAGLE-1 chain:5": lambda: build_drafter("eagle1", target=target, head=e1,
                                                 tree="chain:5"),
        "EAGLE-2 sampled chain of 3": chain("eagle2", e1, 3),
        "EAGLE-2 sampled chain of 5": chain("eagle2", e1, 5),
        "EAGLE-3 sampled chain of 3": chain("eagle3", e3, 3),
        "EAGLE-3 sampled chain of 6": chain("eagle3", e3, 6),
        "EAGLE-1 static tree (26)": lambda: build_drafter("eagle1", target=target,
                                                          head=e1),
        "EAGLE-2 default (26-node sampled tree)": lambda: build_drafter(
            "eagle2", target=target, head=e1, **EAGLE2_DEFAULTS),
        "EAGLE-3 default (26-node sampled tree at depth 7)": lambda: build_drafter(
            "eagle3", target=target, head=e3, **EAGLE3_DEFAULTS),
        "EAGLE-2 60-node sampled tree": lambda: build_drafter(
            "eagle2", target=target, head=e1, **{**EAGLE2_DEFAULTS,
                                                             "total_tokens": 60}),
        "EAGLE-3 60-node sampled tree at depth 7": lambda: build_drafter(
            "eagle3", target=target, head=e3, **{**EAGLE3_DEFAULTS,
                                                             "total_tokens": 60}),
    }  # fmt: skip


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts-per-kind", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=4,
                        help="windows cut with seeds 0..N-1: N x prompts-per-kind per kind")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--temperatures", default="1.0,0.7")
    parser.add_argument("--only", help="comma-separated drafter names (default: all)")
    parser.add_argument("--model", default=str(DEFAULT_MODEL),
                        help="the target (default the shipped small); a model with a chat "
                        "template is prompted with chat requests about validation passages")
    parser.add_argument("--eagle1-head", default="small-eagle1")
    parser.add_argument("--eagle3-head", default="small-eagle3")
    parser.add_argument("--speed", action="store_true", help="time both verifications instead")
    parser.add_argument("--repeats", type=int, default=3, help="--speed: rounds")
    parser.add_argument("--random-trees", type=int, default=0,
                        help="judge this many random trees instead (Monte Carlo)")
    parser.add_argument("--tree-nodes", type=int, default=40, help="--random-trees: nodes")
    parser.add_argument("--samples", type=int, default=4000,
                        help="--random-trees: verdicts per tree and verifier")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.random_trees:
        results = random_trees(args.random_trees, args.tree_nodes, args.samples)
        write_json(results, args.out)
        return results
    params, config, tokenizer = load_checkpoint(args.model)
    target = (inference.prepare(params, config), config)
    if tuning_template(tokenizer) is None:  # text windows of the validation split
        prompts = [(kind, ids) for kind in ("prose", "code") for seed in range(args.seeds)
                   for _, ids in validation_prompts(tokenizer, kind, args.prompts_per_kind,
                                                    seed=seed)]  # fmt: skip
    else:  # chat requests about validation passages, rendered with the model's template
        prompts = [prompt for seed in range(args.seeds) for prompt in tuning_prompts(
            tokenizer, "val", args.prompts_per_kind, seeds=(2 * seed, 2 * seed + 1))]
    chosen = drafters(target, args.eagle1_head, args.eagle3_head)
    if args.only:
        chosen = {name: chosen[name] for name in args.only.split(",")}
    if args.speed:
        results = speed(target, prompts[: args.prompts_per_kind] + prompts[-args.prompts_per_kind:],
                        chosen, args)  # fmt: skip
        write_json(results, args.out)
        return results
    start, results = time.perf_counter(), {}
    for temperature in (float(t) for t in args.temperatures.split(",")):
        sampling, label = SamplingParams(temperature=temperature), f"T={temperature:g}"
        results[label] = {}
        for name, make in chosen.items():
            row = {}
            for verification in ("token", "block"):
                runs = [(kind, generate(*target, ids, drafter=make(), sampling=sampling, seed=i,
                                        max_new_tokens=args.new_tokens, stop_at_eos=False,
                                        verification=verification))
                        for i, (kind, ids) in enumerate(prompts)]  # fmt: skip
                row[verification] = tau_summary(runs)
            row["block / token"] = row["block"]["tau"] / row["token"]["tau"]
            results[label][name] = row
            print(f"{label} {name:40s} tau token {row['token']['tau']:.2f}, block "
                  f"{row['block']['tau']:.2f} ({row['block / token']:.3f}x)", flush=True)
    results["settings"] = {"prompts": len(prompts), "split": "val", "model": args.model,
                           "heads": [args.eagle1_head, args.eagle3_head],
                           "prompts_per_kind": args.prompts_per_kind, "seeds": args.seeds,
                           "new_tokens": args.new_tokens, "seconds": time.perf_counter() - start}
    write_json(results, args.out)
    return results


def speed(target, prompts, chosen: dict, args) -> dict:
    """Vanilla and each drafter judged both ways, side by side at T = 0 and T = 1
    (`bench_methods.compare_methods`: interleaved, the order rotating each repeat)."""
    methods, options = {"vanilla": lambda: None}, {}
    for name, make in chosen.items():
        for verification in ("token", "block"):
            methods[f"{name}, {verification}"] = make
            options[f"{name}, {verification}"] = {"verification": verification}
    results = compare_methods(*target, methods, prompts, new_tokens=args.new_tokens,
                              repeats=args.repeats, max_depth=8, generate_options=options)
    print(format_report(results))
    results["settings"] = {"prompts": len(prompts), "split": "val", "repeats": args.repeats,
                           "new_tokens": args.new_tokens}
    return results


def random_trees(count: int, nodes: int, samples: int, vocab: int = 30) -> dict:
    """Mean drafts accepted per cycle by `verify` and `verify_block` on `count` random trees
    (module docstring), each judged `samples` times on seeded randomness, with the standard
    error of each mean."""
    from minieagle.block_verify import verify_block
    from minieagle.sampling import SeededRandomness
    from minieagle.tree import Tree
    from minieagle.verify import verify

    generator, rows = np.random.default_rng(0), []
    for index in range(count):
        peak = (0.05, 0.2, 1.0)[index % 3]  # Dirichlet concentration: peaked to flat targets
        parents, tokens, proposals = [-1], [0], [None]
        target = [generator.dirichlet(np.full(vocab, peak))]
        left = {}  # node -> the draft law its next child is drawn from (without replacement)
        for node in range(1, nodes):
            parent = int(generator.integers(0, node)) if node > 3 else 0
            if parent not in left:
                law = target[parent] ** 0.7 * generator.dirichlet(np.ones(vocab))
                left[parent] = law / law.sum()
            q = left[parent]
            if q.sum() <= 0:
                continue
            token = int(generator.choice(vocab, p=q))
            rest = q.copy()
            rest[token] = 0.0
            left[parent] = rest / rest.sum() if rest.sum() > 0 else rest
            parents.append(parent)
            tokens.append(token)
            proposals.append(q)
            target.append(0.5 * generator.dirichlet(np.full(vocab, peak)) + 0.5 * target[parent])
        tree = Tree(np.asarray(tokens), np.asarray(parents), tuple(proposals))
        probs = np.asarray(target)  # [N, V]
        row = {"concentration": peak, "nodes": len(tree)}
        for name, judge, offset in (("token", verify, 0), ("block", verify_block, 10**7)):
            kept = [len(judge(tree, probs, SeededRandomness(offset + s)).accepted)
                    for s in range(samples)]  # fmt: skip
            row[name] = {"mean": float(np.mean(kept)),
                         "standard_error": float(np.std(kept, ddof=1) / np.sqrt(samples))}
        row["block - token"] = row["block"]["mean"] - row["token"]["mean"]
        rows.append(row)
        print(f"tree {index}: concentration {peak}, {len(tree)} nodes: token "
              f"{row['token']['mean']:.3f}, block {row['block']['mean']:.3f} "
              f"({row['block - token']:+.3f})", flush=True)
    fewer = sum(r["block - token"] < -3 * np.hypot(r["token"]["standard_error"],
                                                  r["block"]["standard_error"]) for r in rows)
    return {"trees": rows, "block_keeps_fewer_beyond_3_standard_errors": int(fewer),
            "settings": {"count": count, "nodes": nodes, "samples": samples, "vocab": vocab}}


if __name__ == "__main__":
    main()
