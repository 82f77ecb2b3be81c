"""τ against the dynamic tree's depth at one node budget: an EAGLE-3 head and an EAGLE-1 head
(drafting through EAGLE-2's tree) of the same training budget, greedy, on the held-out and the
out-of-domain prompts.

The EAGLE-3 paper keeps EAGLE-2's node budget but raises the tree's depth from 6 to 8 levels
(docs/eagle3.md, "Inference"): a head whose deep drafts are accepted more often (what the
training-time test is for) gains from levels that EAGLE-1's head rarely reaches. This measures
that choice here: for each depth (expansion steps; draft levels = depth + 1), both heads draft
through `build_drafter(..., depth, top_k, total_tokens)` with raw scores (no calibration; or,
with `--scores shipped`, the T = 0 scores `minieagle calibrate` wrote beside each head, its
calibration.json), every prompt decoded once (τ at T = 0 is deterministic), and each output is
checked equal to vanilla's.

    OPENBLAS_NUM_THREADS=1 python benchmarks/tree_depth.py \\
        --model ~/.cache/minieagle/runs/tiny/targets/small \\
        --eagle3 ~/.cache/minieagle/runs/tiny/scaling/eagle3-4x/final \\
        --eagle1 ~/.cache/minieagle/runs/tiny/scaling/eagle1-4x/final \\
        --depths 5,6,7,8 --json docs/results/tree-depth-4x.json

Reported per depth and head: τ (tokens emitted per target forward) per prompt set and per kind,
the ratio EAGLE-3 / EAGLE-2 per set and kind, and the mean nodes verified per cycle.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from eagle3_ablation import PROMPT_SETS

from minieagle.bench import prompt_set
from minieagle.calibration import shipped_calibration
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter
from minieagle.errors import InvalidInputError
from minieagle.generate import emitted_per_forward, generate
from minieagle.heads.eagle1 import load_head
from minieagle.heads.eagle3_io import load_eagle3_head
from minieagle.sampling import SamplingParams

HEADS = {"eagle3": "eagle3", "eagle1": "eagle2"}  # head kind -> the method it drafts as


def parse_depths(text: str) -> list[int]:
    try:
        depths = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        depths = []
    if not depths or min(depths) < 1:
        raise InvalidInputError(
            f"--depths {text!r}: expected positive integers separated by commas, e.g. 5,6,7,8"
        )
    return depths


def measure(params, config, prompts, factory, new_tokens: int, reference: list) -> dict:
    """τ per kind and over all prompts, mean tree size, and whether every output equals
    `reference` (vanilla's tokens, one list per prompt)."""
    results, by_kind = [], {}
    for (kind, ids), expected in zip(prompts, reference, strict=True):
        result = generate(params, config, ids, drafter=factory(), max_new_tokens=new_tokens,
                          sampling=SamplingParams(), seed=0, stop_at_eos=False)  # fmt: skip
        if result.tokens != expected:
            raise AssertionError(f"a greedy output differs from vanilla's ({kind} prompt)")
        results.append(result)
        by_kind.setdefault(kind, []).append(result)
    sizes = [n for r in results for n in r.tree_sizes]
    return {
        "tau": emitted_per_forward(results),
        "tau_by_kind": {kind: emitted_per_forward(rs) for kind, rs in sorted(by_kind.items())},
        "mean_tree_size": float(np.mean(sizes)) if sizes else 0.0,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the target both heads were trained for")
    parser.add_argument("--eagle3", required=True, help="an EAGLE-3 head's directory")
    parser.add_argument("--eagle1", required=True, help="an EAGLE-1 head's directory")
    parser.add_argument("--depths", default="5,6,7,8", help="expansion steps, comma-separated")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--total-tokens", type=int, default=26, help="nodes verified (root too)")
    parser.add_argument("--prompts-per-kind", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--scores", choices=("raw", "shipped"), default="raw",
        help="raw: the paper's scores; shipped: each head's calibration.json (minieagle calibrate)",
    )  # fmt: skip
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    depths = parse_depths(args.depths)
    params, config, tokenizer = load_checkpoint(args.model)
    heads = {
        "eagle3": load_eagle3_head(args.eagle3, target_dir=args.model),
        "eagle1": load_head(args.eagle1, target_dir=args.model),
    }
    scores = {kind: None for kind in heads}  # raw
    if args.scores == "shipped":
        for kind, directory in (("eagle3", args.eagle3), ("eagle1", args.eagle1)):
            scores[kind] = shipped_calibration(directory)
            if scores[kind] is None:
                raise InvalidInputError(
                    f"--scores shipped: {directory} has no calibration.json for its weights; "
                    f"write one with minieagle calibrate --head {directory}"
                )
    sets = {name: prompt_set(tokenizer, name, per_kind=args.prompts_per_kind)
            for name in PROMPT_SETS}  # fmt: skip
    vanilla = {
        name: [generate(params, config, ids, max_new_tokens=args.new_tokens,
                        sampling=SamplingParams(), seed=0, stop_at_eos=False).tokens
               for _, ids in prompts]
        for name, prompts in sets.items()
    }  # fmt: skip
    rows = []
    for depth in depths:
        row = {"depth": depth, "levels": depth + 1}
        for kind, method in HEADS.items():

            def factory(method=method, head=heads[kind], depth=depth, scored=scores[kind]):
                return build_drafter(method, target=(params, config), head=head, depth=depth,
                                     top_k=args.top_k, total_tokens=args.total_tokens,
                                     calibration=scored)  # fmt: skip

            row[kind] = {name: measure(params, config, sets[name], factory, args.new_tokens,
                                       vanilla[name])
                         for name in PROMPT_SETS}  # fmt: skip
        row["ratio"] = {
            name: {
                "all": row["eagle3"][name]["tau"] / row["eagle1"][name]["tau"],
                **{k: row["eagle3"][name]["tau_by_kind"][k] / v
                   for k, v in row["eagle1"][name]["tau_by_kind"].items()},
            }
            for name in PROMPT_SETS
        }  # fmt: skip
        rows.append(row)
        print(
            f"depth {depth} ({depth + 1} levels): EAGLE-3 "
            + " / ".join(f"{row['eagle3'][n]['tau']:.2f}" for n in PROMPT_SETS)
            + "  EAGLE-2 "
            + " / ".join(f"{row['eagle1'][n]['tau']:.2f}" for n in PROMPT_SETS)
            + "  ratio "
            + " / ".join(f"{row['ratio'][n]['all']:.2f}" for n in PROMPT_SETS)
            + "  (held-out / ood)",
            flush=True,
        )
    results = {
        "config": {k: getattr(args, k) for k in ("model", "eagle3", "eagle1", "top_k",
                                                  "total_tokens", "prompts_per_kind",
                                                  "new_tokens", "scores")},
        "depths": rows,
    }  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.json}")
    return results


if __name__ == "__main__":
    try:
        main()
    except InvalidInputError as error:
        sys.exit(f"error: {error}")
