"""EAGLE-3's ablation (paper Table 2) in miniature: EAGLE-2 -> no feature loss + TTT (top feature
only) -> + fusion (EAGLE-3).

Three heads for one target, trained with ONE budget (the same steps, batch, window length,
learning rate, warmup, data and seed):

  eagle2      an EAGLE-1 head (feature regression + token loss, `head="eagle1"`), drafted through
              EAGLE-2's dynamic tree;
  eagle3-top  an EAGLE-3 head without fusion: no feature loss, training-time test, and it reads
              only the top feature, aux_layers = (L,): the residual stream after the target's last
              layer, before its final norm (fc is [d, d]);
  eagle3      the EAGLE-3 head: the same, fusing the inputs of layers (2, L//2, L-3).

The two EAGLE-3 heads share the EAGLE-3 recipe: `--ttt-steps` unrolled steps and a draft
vocabulary covering 99% of the training tokens; the EAGLE-1 head predicts over the whole vocabulary.

All three draft through the SAME dynamic tree (`Eagle2Drafter`), by default EAGLE-2's sizes:
depth 5 expansion steps (6 draft levels), top_k 8, 26 nodes verified (root included). They are
benched side by side with vanilla decoding (`compare_methods`) at T = 0 and T = 1, on held-out
prompts (the corpora's test splits) and, separately, out-of-domain ones (`data/ood_prompts.jsonl`),
reporting per head: τ (`emitted_per_forward`: tokens per target forward, bonus included), n-α for
n = 0 .. depth (acceptance at draft depth n + 1 given all earlier drafts were accepted, pooled
over the cycles of the tree; the paper measures n-α with a chain), the speedup, and the training
time (s/step of the last uninterrupted stretch x steps, from the run's train log).

Each head is a `train_eagle_head` run in --out/LABEL (state saved every 100 steps): a killed
script resumes it, and a finished head whose settings match is reused without training. Settings
that differ from the recorded run are refused (pass the same flags, or another --out).

Full size (measured on one core of the 2-core development machine while another training run
used the other: 0.8-0.9 s/step for the EAGLE-1 head, 2.1-2.3 s/step for each EAGLE-3 head, so
about 1.8 h of training, then about 10 minutes of benchmarks):

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle3_ablation.py --out runs/eagle3-ablation \\
        --json docs/results/eagle3-ablation.json

(the defaults: --steps 1200 --batch-size 8 --seq-len 128 --lr 1e-2 --warmup-steps 50
--ttt-steps 7 --depth 5 --top-k 8 --total-tokens 26 --prompts-per-kind 3 --new-tokens 64
--repeats 3). `--smoke` runs a tiny version in seconds (2 steps of 2 windows of 16 tokens, 16,000
characters of each corpus, a tree of depth 2, top_k 2 and 6 nodes, one held-out and one
out-of-domain prompt, 8 new tokens, 1 repeat); it overrides those flags and defaults --out to
runs/eagle3-ablation-smoke.

`benchmarks/eagle3_scaling.py` reuses `train_or_reuse`, `bench_prompt_sets` and `head_drafter`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

from minieagle.bench import prompt_set
from minieagle.bench_methods import compare_methods, format_report
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_MODEL
from minieagle.drafters import build_drafter
from minieagle.errors import InvalidInputError
from minieagle.heads.eagle1 import load_head
from minieagle.heads.eagle3_io import load_eagle3_head
from minieagle.train_eagle import RUN_FILE, EagleTrainConfig, train_eagle_head

SMOKE = dict(
    steps=2, batch_size=2, seq_len=16, ttt_steps=2, warmup_steps=1, eval_batches=1,
    max_train_chars=16_000, depth=2, top_k=2, total_tokens=6, prompts_per_kind=1, prompt_limit=1,
    new_tokens=8, repeats=1,
)  # fmt: skip
PROMPT_SETS = ("heldout", "ood")


def budget_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every head of one experiment shares: its training budget, the tree and the
    benchmark."""
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="the target's directory")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128, help="head positions per window")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--ttt-steps", type=int, default=7, help="EAGLE-3 heads' unrolled steps")
    parser.add_argument("--eval-batches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--depth", type=int, default=5, help="tree expansion steps (all heads)")
    parser.add_argument("--top-k", type=int, default=8, help="tree branching (all heads)")
    parser.add_argument("--total-tokens", type=int, default=26, help="nodes verified, root incl.")
    parser.add_argument("--prompts-per-kind", type=int, default=3, help="per corpus / OOD kind")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="a tiny run for the tests")
    parser.set_defaults(prompt_limit=None)


def apply_smoke(args: argparse.Namespace, smoke_out: str, out: str) -> None:
    """--smoke: the tiny settings of `SMOKE`; --out defaults to `smoke_out` then, else `out`."""
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    if args.out is None:
        args.out = smoke_out if args.smoke else out


def head_config(args, label: str, head: str, **fields) -> EagleTrainConfig:
    """The training run of one head in --out/label, with the experiment's shared budget; fields:
    what differs (aux_layers, steps, max_train_chars, ...)."""
    run = Path(args.out) / label
    steps = fields.pop("steps")
    shared = dict(
        target=str(args.model), out_dir=str(run), export_dir=str(run / "final"), head=head,
        steps=steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
        warmup_steps=min(args.warmup_steps, steps), ttt_steps=args.ttt_steps, eval_every=steps,
        eval_batches=args.eval_batches, save_every=min(100, steps), seed=args.seed,
    )  # fmt: skip
    return EagleTrainConfig(**{**shared, **fields})


def _recorded_differences(cfg: EagleTrainConfig) -> dict:
    """{field: (recorded, wanted)} where the run already in cfg.out_dir was started with other
    settings ({} when there is no run yet)."""
    path = Path(cfg.out_dir) / RUN_FILE
    if not path.is_file():
        return {}
    recorded = json.loads(path.read_text())
    wanted = json.loads(json.dumps(asdict(cfg)))  # tuples as lists, as the run file holds them
    wanted["target"] = str(Path(cfg.target).resolve())
    # a field added since the run was recorded had its default then
    defaults = json.loads(json.dumps({f.name: f.default for f in fields(EagleTrainConfig)}))
    recorded = {**{k: v for k, v in defaults.items() if k not in recorded}, **recorded}
    return {k: (recorded.get(k), v) for k, v in wanted.items() if recorded.get(k) != v}


def train_or_reuse(cfg: EagleTrainConfig, *, progress: bool) -> dict:
    """Train the head of `cfg` (resuming a killed run), or reuse it if its run finished with the
    same settings. Returns what the experiment records of the training."""
    run = Path(cfg.out_dir)
    differences = _recorded_differences(cfg)
    if differences:
        shown = ", ".join(f"{k}={old!r} (now {new!r})" for k, (old, new) in differences.items())
        raise InvalidInputError(
            f"{run} holds a head trained with {shown}; pass the same flags to reuse or resume it, "
            "or another --out for new heads"
        )
    log_path, export = run / "train_log.json", Path(cfg.export_dir)
    reused = log_path.is_file() and (export / "model.safetensors").is_file()
    start = time.perf_counter()
    if not reused:
        train_eagle_head(cfg, resume=True, progress=progress)
    log = json.loads(log_path.read_text())
    return {
        "head": cfg.head,
        "aux_layers": list(cfg.aux_layers) or None,
        "run_dir": str(run),
        "export_dir": str(export),
        "reused": reused,
        "steps": cfg.steps,
        "s_per_step": log["s_per_step"],
        "train_seconds": log["s_per_step"] * cfg.steps,
        "wall_seconds_this_run": time.perf_counter() - start,
        "final_eval": log["evals"][-1],
    }


def head_drafter(params, config, record: dict, args):
    """(method name, drafter factory) for a trained head: an EAGLE-1 head drafts as "eagle2",
    an EAGLE-3 head as "eagle3", both through the tree of --depth, --top-k, --total-tokens."""
    if record["head"] == "eagle1":
        method, head = "eagle2", load_head(record["export_dir"], target_dir=args.model)
    else:
        method, head = "eagle3", load_eagle3_head(record["export_dir"], target_dir=args.model)

    def factory():
        return build_drafter(
            method, target=(params, config), head=head, depth=args.depth, top_k=args.top_k,
            total_tokens=args.total_tokens,
        )  # fmt: skip

    return method, factory


def bench_prompt_sets(params, config, tokenizer, methods: dict, args) -> dict:
    """{"heldout": ..., "ood": ...}: `compare_methods` (vanilla + `methods`, T = 0 and T = 1)
    on each prompt set separately, so that each set's τ is pooled over its own prompts."""
    results = {}
    for name in PROMPT_SETS:
        prompts = prompt_set(tokenizer, name, per_kind=args.prompts_per_kind)
        prompts = prompts[: args.prompt_limit]
        results[name] = compare_methods(
            params, config, {"vanilla": lambda: None, **methods}, prompts,
            new_tokens=args.new_tokens, repeats=args.repeats, max_depth=args.depth + 1,
        )  # fmt: skip
    return results


def summarise(bench: dict, label: str) -> dict:
    """{"tau"|"alpha"|"speedup": {setting: {prompt set: value}}} of one method, over all of a
    set's prompts."""
    out = {"tau": {}, "alpha": {}, "speedup": {}}
    for set_name, by_setting in bench.items():
        for setting, by_kind in by_setting.items():
            entry = by_kind["all"][label]
            out["tau"].setdefault(setting, {})[set_name] = entry["tau"]
            out["alpha"].setdefault(setting, {})[set_name] = entry["alpha"]
            out["speedup"].setdefault(setting, {})[set_name] = entry["speedup"]["median"]
    return out


def _format_alpha(alpha: list) -> str:
    return " ".join("  - " if a is None else f"{a:.2f}" for a in alpha)


def format_table(summary: dict) -> str:
    """One row per head: training time, τ per setting and prompt set, n-α on held-out at T=0."""
    lines = [
        f"{'head':11} {'train s':>8}  {'T=0 τ held-out':>14} {'ood':>5}  {'T=1 τ held-out':>14} "
        f"{'ood':>5}  n-α (T=0, held-out)"
    ]
    for label, s in summary.items():
        tau = s["tau"]
        lines.append(
            f"{label:11} {s['train_seconds']:8.1f}  {tau['T=0']['heldout']:14.2f} "
            f"{tau['T=0']['ood']:5.2f}  {tau['T=1']['heldout']:14.2f} {tau['T=1']['ood']:5.2f}  "
            + _format_alpha(s["alpha"]["T=0"]["heldout"])
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", help="run directories (default runs/eagle3-ablation)")
    parser.add_argument("--json", help="write the results here (default OUT/ablation.json)")
    parser.add_argument("--steps", type=int, default=1200, help="training steps of every head")
    parser.add_argument(
        "--max-train-chars", type=int, default=0, help="a prefix of each corpus (0 = all)"
    )
    budget_flags(parser)
    args = parser.parse_args(argv)
    apply_smoke(args, "runs/eagle3-ablation-smoke", "runs/eagle3-ablation")
    json_path = Path(args.json or Path(args.out) / "ablation.json")

    params, config, tokenizer = load_checkpoint(args.model)
    top = (config.num_hidden_layers,)  # the stream after the last layer, before the final norm
    variants = {
        "eagle2": ("eagle1", ()),
        "eagle3-top": ("eagle3", top),
        "eagle3": ("eagle3", ()),  # () = the default fusion (2, L//2, L-3)
    }
    heads, methods = {}, {}
    for label, (head, aux_layers) in variants.items():
        cfg = head_config(
            args, label, head, aux_layers=aux_layers, steps=args.steps,
            max_train_chars=args.max_train_chars,
        )  # fmt: skip
        heads[label] = train_or_reuse(cfg, progress=not args.smoke)
        _, methods[label] = head_drafter(params, config, heads[label], args)
    bench = bench_prompt_sets(params, config, tokenizer, methods, args)
    summary = {
        label: {"train_seconds": record["train_seconds"], **summarise(bench, label)}
        for label, record in heads.items()
    }
    shared = ("model", "steps", "batch_size", "seq_len", "lr", "warmup_steps", "ttt_steps")
    shared += ("max_train_chars", "seed", "depth", "top_k", "total_tokens", "prompts_per_kind")
    shared += ("new_tokens", "repeats", "smoke")
    results = {
        "config": {name: getattr(args, name) for name in shared},
        "heads": heads,
        "summary": summary,
        "bench": bench,
    }
    for name in PROMPT_SETS:
        print(f"\n{name} prompts\n{format_report(bench[name])}")
    print(f"\n{format_table(summary)}")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {json_path}")
    return results


if __name__ == "__main__":
    try:
        main()
    except InvalidInputError as error:
        sys.exit(f"error: {error}")
