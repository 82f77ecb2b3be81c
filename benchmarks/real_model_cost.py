"""The cost curve of a real model on this machine: vanilla decoding ms/token and the cost of one
verification forward of N = 1, 2, 4, .., 64 tokens relative to N = 1 (float32, the KV cache
holding the prompt). These two numbers decide which draft trees can pay off (docs/benchmarks.md);
for SmolLM2-135M-Instruct (538 MB of float32 weights) the measured curve on this CPU is steeper
than the 2.6M-parameter target's (docs/real_models.md).

    OPENBLAS_NUM_THREADS=1 python benchmarks/real_model_cost.py --out docs/results/smollm2-cost.json

--model DIR measures another checkpoint (default: SmolLM2, fetched and imported into the cache
on first use by `minieagle.importers.smollm2.ensure_smollm2`). The prompts are the two chats of
tests/fixtures/smollm2 (their token ids, so no tokenizer is needed) for SmolLM2, and two held-out
windows of each bundled corpus for any other model (its own tokenizer encodes them).
--device gpu runs the same code on CuPy (benchmarks/gpu.sh measures both lanes side by side).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from minieagle.backend import DEVICES, device_module, put
from minieagle.bench import format_cost_curve, heldout_prompts, machine_info, measure_cost_curve
from minieagle.checkpoint import load_checkpoint

FIXTURE = Path(__file__).parents[1] / "tests" / "fixtures" / "smollm2" / "reference.npz"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    xp = device_module(args.device)
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
        params, config, _ = load_checkpoint(args.model, with_tokenizer=False)
        reference = np.load(FIXTURE)
        chats = ("chat_capital", "chat_multiturn")
        prompts = [reference[f"{name}.input_ids"].tolist() for name in chats]
    else:
        params, config, tokenizer = load_checkpoint(args.model)
        prompts = [ids for _, ids in heldout_prompts(tokenizer, per_corpus=2)]
    params = put(params, xp)
    results = {
        "model": args.model,
        "device": args.device,
        "params": sum(int(p.size) for p in params.values()),
        "machine": machine_info(),
        **measure_cost_curve(
            params, config, prompts, new_tokens=args.new_tokens, repeats=args.repeats
        ),
    }
    print(format_cost_curve(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
