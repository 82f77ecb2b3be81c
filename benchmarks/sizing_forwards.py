"""Where does the tree sizing's cost model miss short chains? Each part of a cycle, timed.

`minieagle.sizing` predicts a cycle's wall time as verify(N) + loop + row · τ̂ + rows + draft(k, d),
with verify(N) a cost curve timed back to back after a short context and then scaled by one
factor: the median ratio of the calibration runs' own forwards (8- and 26-node trees) to the
curve. On the tiny target in a fast machine state it over-predicted short chains' cycles and
sized away a `chain:3` that measured 1.11-1.18x (docs/speed.md). This script times, on the
sizing's own prompts (train split), for chains of 1..D drafts and the 26-node tree of the
calibration runs:

- the curve verify(N) (lazy logits, as the sizing times it) at every N used;
- each cycle's parts in real decoding (`sizing._timed_cycles`: the forward, the propose, the
  loop's own work, the LM-head products the verdict ran), medians per chain length;
- a vanilla step, timed between the decodings as the sizing does;
- the speed of decoding with each chain against vanilla, interleaved (median ms per token).

It reports each part against what the sizing would take for it (the scaled curve, for the
forward), so the part that errs shows. Run it on a quiet machine (nothing else running):

    OPENBLAS_NUM_THREADS=1 python benchmarks/sizing_forwards.py --head small-eagle3 \
        --out docs/results/sizing-forwards.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from minieagle import inference, sizing
from minieagle.calibration import tuning_prompts
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import load_draft_head
from minieagle.generate import generate
from minieagle.sampling import SamplingParams
from minieagle.shipped import DEFAULT_MODEL, resolve_head


def _median(values) -> float:
    return float(statistics.median(values)) if values else float("nan")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--head", default="small-eagle3", help="an EAGLE-3 head (its name or dir)")
    parser.add_argument("--chains", default="1,2,3,4,5,7", help="drafts per chain")
    parser.add_argument("--cycles", type=int, default=24, help="timed cycles per chain")
    parser.add_argument("--speed-tokens", type=int, default=48, help="tokens per speed run")
    parser.add_argument("--repeats", type=int, default=3, help="speed runs per prompt")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    params, config, tokenizer = load_checkpoint(args.model)
    target = inference.prepare(params, config)
    head, head_cfg, vocab = load_draft_head("eagle3", resolve_head(args.head), (target, config))
    sampling = SamplingParams(temperature=0.0)
    prompts = tuning_prompts(tokenizer, "train", sizing.SIZING_PROMPTS, seeds=(0, 0))
    half = len(prompts) // 2
    prompts = [p for pair in zip(prompts[:half], prompts[half:], strict=True) for p in pair]
    chains = [int(c) for c in args.chains.split(",")]

    from minieagle.drafters.eagle2 import Eagle2Drafter

    def chain_maker(drafts: int):  # the chain a sizing of (top_k 1, depth D, D + 1 nodes) builds
        return lambda: Eagle2Drafter(target, config, head, head_cfg, vocab, depth=drafts,
                                     top_k=1, total_tokens=drafts + 1)  # fmt: skip

    shapes = {f"chain of {d}": chain_maker(d) for d in chains}
    shapes["tree of 26 (top_k 8, depth 7)"] = sizing.tree_drafter(
        target, config, head, head_cfg, vocab, 8, sizing.MAX_DEPTH, False
    )
    parts, all_forwards, vanilla = {}, [], []
    for name, make in shapes.items():
        proposes, loops, forwards, steps, products, _ = sizing._timed_cycles(
            target, config, prompts, sampling, make, new_tokens=64, cycles=args.cycles,
            prompts_used=len(prompts),
        )  # fmt: skip
        vanilla += steps
        all_forwards += forwards
        sizes = sorted({n for _, n in forwards})
        parts[name] = {
            "propose_ms": _median(proposes),
            "loop_ms": _median([ms for ms, _ in loops]),  # less the LM-head rows:
            "rows_product_ms": _median([ms for _, ms in products]),  # timed apart
            "kept": _median([kept for _, kept in loops]),
            "forward_ms_by_nodes": {
                n: _median([ms for ms, m in forwards if m == n]) for n in sizes
            },
            "cycles": len(proposes),
        }
    sizes = sorted({n for _, n in all_forwards} | {1})
    curve = sizing.measure_verify_ms(target, config, prompts[0][1], sizes, repeats=5,
                                     lazy_logits=True)  # fmt: skip
    step_ms = _median(vanilla)
    # the sizing's scale: from the calibration trees' forwards (max_depth + 1 and 26 nodes)
    calibrated = {sizing.MAX_DEPTH + 1, sizing.CALIBRATION_NODES}
    scale = _median([ms / curve[n] for ms, n in all_forwards if n in calibrated])
    by_nodes = {}
    for n in sizes:
        seen = [ms for ms, m in all_forwards if m == n]
        by_nodes[n] = {
            "curve_ms": curve[n],
            "scaled_curve_ms": curve[n] * scale,
            "in_decoding_ms": _median(seen),
            "in_decoding_over_curve": _median(seen) / curve[n] if seen else float("nan"),
            "forwards": len(seen),
        }

    # speed: each chain against vanilla, interleaved per prompt and repeat
    speed: dict[str, list[float]] = {"vanilla": [], **{f"chain of {d}": [] for d in chains}}
    taus: dict[str, list[float]] = {f"chain of {d}": [] for d in chains}
    for repeat in range(args.repeats):
        for i, (_, ids) in enumerate(prompts):
            order = list(speed)
            order = order[repeat % len(order) :] + order[: repeat % len(order)]
            for name in order:
                drafter = None if name == "vanilla" else shapes[name]()
                result = generate(target, config, ids, drafter=drafter, sampling=sampling,
                                  max_new_tokens=args.speed_tokens, seed=i,
                                  stop_at_eos=False)  # fmt: skip
                speed[name].append(1e3 * result.decode_seconds / max(1, len(result.tokens)))
                if drafter is not None:
                    taus[name].append(len(result.tokens) / max(1, result.target_forwards))
    vanilla_ms = np.array(speed["vanilla"])
    chains_out = {}
    for d in chains:
        name = f"chain of {d}"
        ratios = vanilla_ms / np.array(speed[name])
        p = parts[name]
        tau = float(np.mean(taus[name]))
        n = d + 1
        forward_seen = p["forward_ms_by_nodes"].get(n, float("nan"))
        cycle_parts = forward_seen + p["propose_ms"] + p["loop_ms"]
        modelled = curve[n] * scale + p["propose_ms"] + p["loop_ms"]
        chains_out[name] = {
            "tau": tau,
            "ms_per_token": _median(speed[name]),
            "speedup_median": float(np.median(ratios)),
            "speedup_min": float(ratios.min()),
            "speedup_max": float(ratios.max()),
            "cycle_ms_from_parts": cycle_parts,
            "speedup_from_parts": tau * step_ms / cycle_parts,
            "speedup_with_scaled_curve": tau * step_ms / modelled,
            **p,
        }
    results = {
        "model": args.model,
        "head": str(args.head),
        "step_ms": step_ms,
        "vanilla_ms_per_token": _median(speed["vanilla"]),
        "scale": scale,
        "by_nodes": by_nodes,
        "chains": chains_out,
        "tree": parts["tree of 26 (top_k 8, depth 7)"],
    }
    print(f"vanilla step {step_ms:.3f} ms (speed runs {results['vanilla_ms_per_token']:.3f}); "
          f"the sizing's scale {scale:.2f}")  # fmt: skip
    print("nodes  curve  scaled  in decoding  ratio")
    for n, row in by_nodes.items():
        print(f"{n:5d}  {row['curve_ms']:.3f}  {row['scaled_curve_ms']:.3f}  "
              f"{row['in_decoding_ms']:.3f}  {row['in_decoding_over_curve']:.2f}")  # fmt: skip
    print("chain  tau   measured            from parts  with scaled curve  fwd/propose/loop ms")
    for name, row in chains_out.items():
        fwd = row["forward_ms_by_nodes"].get(int(name.split()[-1]) + 1, float("nan"))
        print(f"{name:11} {row['tau']:.2f}  {row['speedup_median']:.2f}x "
              f"[{row['speedup_min']:.2f}..{row['speedup_max']:.2f}]  "
              f"{row['speedup_from_parts']:.2f}x  {row['speedup_with_scaled_curve']:.2f}x  "
              f"{fwd:.3f}/{row['propose_ms']:.3f}/{row['loop_ms']:.3f}")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
