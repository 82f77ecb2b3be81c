"""τ of the default dynamic tree against EAGLE-1's static tree, at one node budget, on many prompts.

The Done-when of issue 20 item 4: default-scored EAGLE-2 at 26 nodes above EAGLE-1's static tree
at T = 0, and at T = 1 at least 0.8 of its own T = 0 τ. `minieagle bench --suite methods`
measures it among every method with speed; this script measures τ alone (no timing, so the
machine's load does not matter) on more prompts: held-out and out-of-domain (`--prompts both`),
prompt i decoded with seed i. The dynamic trees are built by `build_drafter` with its defaults
(the head's shipped scores, the sampled tree at T > 0) at each method's fixed default sizes (26
nodes, top-k 8; depth 5 for EAGLE-2, `EAGLE2_DEFAULTS`; depth 7 for EAGLE-3, the paper's deeper
tree, `EAGLE3_DEFAULTS`, and EAGLE-3 at depth 5 too, EAGLE-2's tree), beside the same with raw
scores and the top-k tree (`calibration=None, sampled_tree=False`), the paper's EAGLE-2.

    OPENBLAS_NUM_THREADS=1 python benchmarks/default_tau.py --out docs/results/default-tau.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from minieagle import inference
from minieagle.bench import prompt_set
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter
from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS
from minieagle.generate import emitted_per_forward, generate
from minieagle.sampling import SamplingParams
from minieagle.shipped import DEFAULT_MODEL

SETTINGS = {"T=0": SamplingParams(), "T=1": SamplingParams(temperature=1.0)}
SIZES = {"eagle2": EAGLE2_DEFAULTS, "eagle3": EAGLE3_DEFAULTS}  # fixed: no sizing measured


def methods(target) -> dict:
    e2, e3 = SIZES["eagle2"], SIZES["eagle3"]
    return {
        "eagle1 static tree (26)": lambda: build_drafter("eagle1", target=target,
                                                         head="small-eagle1"),
        "eagle2 default": lambda: build_drafter("eagle2", target=target, head="small-eagle1",
                                                **e2),
        "eagle2 raw top-k": lambda: build_drafter("eagle2", target=target, head="small-eagle1",
                                                  calibration=None, sampled_tree=False, **e2),
        "eagle3 default": lambda: build_drafter("eagle3", target=target, head="small-eagle3",
                                                **e3),
        "eagle3 default, depth 5": lambda: build_drafter("eagle3", target=target,
                                                         head="small-eagle3", **e2),
        "eagle3 raw top-k": lambda: build_drafter("eagle3", target=target, head="small-eagle3",
                                                  calibration=None, sampled_tree=False, **e3),
    }  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts-per-kind", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    params, config, tokenizer = load_checkpoint(DEFAULT_MODEL)
    target = (inference.prepare(params, config), config)
    prompts = prompt_set(tokenizer, "both", per_kind=args.prompts_per_kind)
    start, results = time.perf_counter(), {}
    for label, sampling in SETTINGS.items():
        results[label] = {}
        for name, make in methods(target).items():
            runs = []
            for i, (kind, ids) in enumerate(prompts):
                drafter = make()  # built once per prompt: the loaded head's maps are read here
                result = generate(*target, ids, drafter=drafter, max_new_tokens=args.new_tokens,
                                  sampling=sampling, seed=i, stop_at_eos=False)  # fmt: skip
                runs.append((kind, result))
            results[label][name] = tau_summary(runs)
            print(f"{label} {name:24s} tau {results[label][name]['tau']:.2f}", flush=True)
    for name in results["T=0"]:
        ratio = results["T=1"][name]["tau"] / results["T=0"][name]["tau"]
        print(f"{name:24s} tau T=1 / T=0 = {ratio:.2f}")
    results["settings"] = {"prompts": len(prompts), "prompt_set": "both",
                           "prompts_per_kind": args.prompts_per_kind,
                           "new_tokens": args.new_tokens, "sizes": SIZES,
                           "seconds": time.perf_counter() - start}  # fmt: skip
    write_json(results, args.out)
    return 0


def tau_summary(runs) -> dict:
    """τ of decodings `runs` [(prompt kind, GenerationResult)]: pooled over all of them and by
    kind (emitted tokens / target forwards), per prompt, and the standard error of the
    per-prompt mean."""
    per_prompt = [r.tau for _, r in runs]
    return {
        "tau": emitted_per_forward([r for _, r in runs]),
        "by_kind": {
            kind: emitted_per_forward([r for k, r in runs if k == kind])
            for kind in sorted({k for k, _ in runs})
        },  # fmt: skip
        "tau_per_prompt": per_prompt,
        "tau_standard_error": float(np.std(per_prompt, ddof=1) / np.sqrt(len(runs))),
    }


def write_json(results: dict, path) -> None:
    """`results` as indented JSON in `path` (nothing when path is None)."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    raise SystemExit(main())
