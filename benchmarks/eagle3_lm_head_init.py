"""Does the EAGLE-3 head learn faster when its LM head starts as the target's? One experiment
beside the data-scaling run (`eagle3_scaling_corpus.py`).

For each chosen point of a finished scaling run (its JSON: the data cap, steps and recipe of each
EAGLE-3 head), train the same EAGLE-3 head again with `lm_head_init="target"` (the draft LM
head starts as the target's rows for the draft vocabulary and its final norm as the target's;
the official code starts both at random) and bench it on the same prompt sets, tree and token
counts as the scaling run. Writes {point: {"random": τ, "target": τ, "eagle1": τ}} per prompt set
and temperature, the first and last taken from the scaling JSON.

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle3_lm_head_init.py --points 1/8 1/4 \\
        --scaling docs/results/eagle3-scaling-corpus.json --out runs/lminit \\
        --json docs/results/eagle3-lm-head-init.json

Each point is a `train_eagle_head` run in --out (resumable; reused when finished).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eagle3_ablation import bench_prompt_sets, head_drafter, train_or_reuse

from minieagle.checkpoint import load_checkpoint
from minieagle.train_eagle import EagleTrainConfig


def _point_config(scaling: dict, point: dict, out: Path) -> EagleTrainConfig:
    c = scaling["config"]
    run = out / f"eagle3-data{point['fraction_label'].replace('/', 'of')}"
    return EagleTrainConfig(
        target=c["model"], out_dir=str(run), export_dir=str(run / "final"), head="eagle3",
        ttt_steps=c["ttt_steps"], steps=point["steps"], batch_size=c["batch_size"],
        seq_len=c["seq_len"], lr=c["lr"], warmup_steps=c["warmup_steps"], seed=c["seed"],
        eval_every=point["steps"], max_train_chars=point["max_train_chars"],
        lm_head_init="target",
    )  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scaling", default="docs/results/eagle3-scaling-corpus.json")
    parser.add_argument("--points", nargs="+", default=["1/8", "1/4"], help="e.g. 1/8 1/4")
    parser.add_argument("--out", default="runs/lminit")
    parser.add_argument("--json", default="docs/results/eagle3-lm-head-init.json")
    args = parser.parse_args(argv)
    scaling = json.loads(Path(args.scaling).read_text())
    c = scaling["config"]
    bench_args = argparse.Namespace(
        model=c["model"], depth=c["depth"], top_k=c["top_k"], total_tokens=c["total_tokens"],
        prompts_per_kind=c["prompts_per_kind"], prompt_limit=None, new_tokens=c["new_tokens"],
        repeats=c["repeats"],
    )  # fmt: skip
    params, config, tokenizer = load_checkpoint(c["model"])
    results = {"scaling": args.scaling, "points": {}}
    for label in args.points:
        found = {p["head"]: p for p in scaling["points"] if p["fraction_label"] == label}
        if "eagle3" not in found:
            raise SystemExit(f"{args.scaling} has no EAGLE-3 point {label!r}")
        cfg = _point_config(scaling, found["eagle3"], Path(args.out))
        record = {**train_or_reuse(cfg, progress=True), "head": "eagle3"}
        record.setdefault("export_dir", cfg.export_dir)
        _, factory = head_drafter(params, config, record, bench_args)
        bench = bench_prompt_sets(params, config, tokenizer, {"target-init": factory}, bench_args)
        results["points"][label] = {
            prompts: {
                setting: {
                    "eagle1": found["eagle1"]["tau"][setting][prompts],
                    "random": found["eagle3"]["tau"][setting][prompts],
                    "target": bench[prompts][setting]["all"]["target-init"]["tau"],
                }
                for setting in bench[prompts]
            }
            for prompts in bench
        }
        print(label, json.dumps(results["points"][label]), file=sys.stderr)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
