"""EAGLE-3's data scaling on the corpora alone (the first curve, kept for the record; the current
experiment, on the corpora and the target's own text, is `eagle3_scaling.py`): τ against the
amount of training data, for an EAGLE-1 head and an EAGLE-3 head.

For each fraction 1/8, 1/4, 1/2, 1 of the training data (a prefix of each corpus's train split,
`max_train_chars` = ceil(fraction x the larger split's characters), so the smaller corpus gets a
slightly larger share), both heads are trained, each as a `train_eagle_head` run in
--out/HEAD-dataAofB, with one budget per point: the same batch, window length, learning rate,
warmup and seed, and the same number of passes over that point's data (--epochs):

    steps = max(1, round(epochs x training tokens / (batch size x seq_len)))

Equal passes, not equal steps: the paper scales the data at a fixed training recipe, so a point
with twice the data also trains twice as long. At equal steps the 1/8 point would see each of its
tokens eight times as often as the full point, and the curve would measure repetition as much as
data. (Windows are drawn at random, so a "pass" is the expected coverage, not a shuffled epoch.)

The two heads of a fraction are then benched with `compare_methods`, side by side with vanilla,
through the same dynamic tree (default EAGLE-2's sizes: depth 5 expansion steps, top_k 8, 26 nodes
verified, root included), on held-out prompts and, separately, out-of-domain prompts. The plot shows
τ at T = 0 against the training tokens, one line per head, one panel per prompt set;
`compare_methods` always measures T = 1 as well, which the JSON keeps. Recorded per point: the
character cap, the training tokens (the data set's size) and tokens seen (steps x batch x seq_len),
steps, passes, the training time (s/step of the last uninterrupted stretch x steps) and this run's
wall time, τ and n-α per setting and prompt set, and the head's last validation metrics. At full
size every cap exceeds the validation splits, so every point is validated on the same text.

Resumable per point: a killed run resumes its training; a finished head whose settings match is
reused, and so is a fraction's benchmark (--out/dataAofB.bench.json) when the bench settings and
the heads match.

Full size (one core of the 2-core development machine, another training run on the other:
0.8-0.9 s/step for the EAGLE-1 head, 2.1-2.3 s/step for the EAGLE-3 head; the whole data is 2.64M
tokens, so 2576 steps per pass at fraction 1 and 1.875 x that, 4830 steps per head, over the four
fractions: about 1.1 h for the EAGLE-1 heads and 3 h for the EAGLE-3 heads, plus about 10 minutes
of benchmarks):

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle3_scaling_corpus.py --out runs/eagle3-scaling \\
        --json docs/results/eagle3-scaling-corpus.json \\
        --plot docs/results/eagle3-scaling-corpus.png

(the defaults: --epochs 1 --data-chars 0 (the whole train split) --batch-size 8 --seq-len 128
--lr 1e-2 --warmup-steps 50 --ttt-steps 7 --depth 5 --top-k 8 --total-tokens 26
--prompts-per-kind 3 --new-tokens 64 --repeats 1). `--smoke` runs a tiny version in seconds
(fractions of 16,000 characters per corpus, 0.01 passes: 1 to 3 steps of 2 windows of 16 tokens,
a tree of depth 2, top_k 2 and 6 nodes, one held-out and one out-of-domain prompt, 8 new tokens);
it overrides those flags and defaults --out to runs/eagle3-scaling-smoke.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from fractions import Fraction
from pathlib import Path

from eagle3_ablation import (
    SMOKE,
    apply_smoke,
    bench_prompt_sets,
    budget_flags,
    head_config,
    head_drafter,
    summarise,
    train_or_reuse,
)

from minieagle.checkpoint import load_checkpoint
from minieagle.data import load_text
from minieagle.errors import InvalidInputError
from minieagle.train import token_stream
from minieagle.train_eagle import EagleTrainConfig

FRACTIONS = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 2), Fraction(1))
HEADS = {"eagle1": "EAGLE-1 head (EAGLE-2 tree)", "eagle3": "EAGLE-3 head"}
CORPORA = EagleTrainConfig().corpora
SMOKE_EPOCHS = 0.01


def data_chars(corpora) -> int:
    """The characters of the largest train split: fraction 1 caps nothing."""
    return max(len(load_text(corpus, "train")) for corpus in corpora)


def training_tokens(tokenizer, run_dir: Path, max_chars: int) -> int:
    """Tokens of the training streams a run with this cap reads (cached in its run directory,
    where the trainer finds them)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return sum(len(token_stream(tokenizer, c, "train", run_dir, max_chars)[0]) for c in CORPORA)


def _bench_fraction(params, config, tokenizer, records: dict, label: str, args) -> dict:
    """`bench_prompt_sets` of one fraction's heads side by side ({method label: training
    record}), reused from --out/label.bench.json when it was measured with the same settings for
    the same trained heads."""
    path = Path(args.out) / f"{label}.bench.json"
    names = ("depth", "top_k", "total_tokens", "prompts_per_kind", "prompt_limit", "new_tokens")
    settings = {name: getattr(args, name) for name in (*names, "repeats")}
    settings["final_evals"] = {name: record["final_eval"] for name, record in records.items()}
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["settings"] == json.loads(json.dumps(settings)):
            return saved["bench"]
    methods = {
        name: head_drafter(params, config, record, args)[1] for name, record in records.items()
    }
    bench = bench_prompt_sets(params, config, tokenizer, methods, args)
    path.write_text(json.dumps({"settings": settings, "bench": bench}, indent=2) + "\n")
    return bench


def plot(points: list[dict], path: Path) -> None:
    """τ at T = 0 against training tokens, drawn as the current experiment draws its points
    (`eagle3_scaling.plot`), each point named by its share of the corpora."""
    from eagle3_scaling import plot as plot_points

    points = [{**p, "tokens": p["train_tokens"], "point": p["fraction_label"]} for p in points]
    plot_points(points, path, xlabel="training tokens (share of the corpora)")


def format_table(points: list[dict]) -> str:
    lines = [
        f"{'head':7} {'data':>5} {'tokens':>9} {'steps':>6} {'passes':>6} {'train s':>8} "
        f"{'T=0 τ held-out':>14} {'ood':>5}"
    ]
    for p in points:
        tau = p["tau"]["T=0"]
        lines.append(
            f"{p['head']:7} {p['fraction_label']:>5} {p['train_tokens']:9d} {p['steps']:6d} "
            f"{p['passes']:6.2f} {p['train_seconds']:8.1f} {tau['heldout']:14.2f} "
            f"{tau['ood']:5.2f}"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", help="run directories (default runs/eagle3-scaling)")
    parser.add_argument("--json", help="write the results here (default OUT/scaling.json)")
    parser.add_argument("--plot", help="write the plot here (default OUT/scaling.png)")
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over each point's data")
    parser.add_argument(
        "--data-chars", type=int, default=0,
        help="characters per corpus at fraction 1 (0 = the whole train split)",
    )  # fmt: skip
    budget_flags(parser)
    parser.set_defaults(repeats=1)  # τ, the measure here, is deterministic at T = 0
    args = parser.parse_args(argv)
    apply_smoke(args, "runs/eagle3-scaling-smoke", "runs/eagle3-scaling")
    if args.smoke:
        args.data_chars, args.epochs = SMOKE["max_train_chars"], SMOKE_EPOCHS
    if not (math.isfinite(args.epochs) and args.epochs > 0):
        raise InvalidInputError(f"--epochs {args.epochs} must be positive, e.g. 1")
    out = Path(args.out)
    json_path = Path(args.json or out / "scaling.json")
    plot_path = Path(args.plot or out / "scaling.png")

    params, config, tokenizer = load_checkpoint(args.model)
    full_chars = args.data_chars or data_chars(CORPORA)
    points = []
    for fraction in FRACTIONS:
        chars = math.ceil(fraction * full_chars)
        data = f"data{fraction.numerator}of{fraction.denominator}"
        records, tokens = {}, {}
        for head in HEADS:
            label = f"{head}-{data}"
            tokens[head] = training_tokens(tokenizer, out / label, chars)
            steps = max(1, round(args.epochs * tokens[head] / (args.batch_size * args.seq_len)))
            cfg = head_config(args, label, head, steps=steps, max_train_chars=chars)
            records[label] = train_or_reuse(cfg, progress=not args.smoke)
        bench = _bench_fraction(params, config, tokenizer, records, data, args)
        for head, (label, record) in zip(HEADS, records.items(), strict=True):
            seen = record["steps"] * args.batch_size * args.seq_len
            points.append(
                {
                    "head": head,
                    "fraction": float(fraction),
                    "fraction_label": f"{fraction.numerator}/{fraction.denominator}",
                    "max_train_chars": chars,
                    "train_tokens": tokens[head],
                    "tokens_seen": seen,
                    "passes": seen / tokens[head],
                    **record,
                    **summarise(bench, label),
                }
            )
    plot(points, plot_path)
    shared = ("model", "epochs", "data_chars", "batch_size", "seq_len", "lr", "warmup_steps")
    shared += ("ttt_steps", "seed", "depth", "top_k", "total_tokens", "prompts_per_kind")
    shared += ("new_tokens", "repeats", "smoke")
    results = {
        "config": {name: getattr(args, name) for name in shared} | {"full_chars": full_chars},
        "points": points,
        "plot": str(plot_path),
    }
    print(format_table(points))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {json_path}, plot to {plot_path}")
    return results


if __name__ == "__main__":
    try:
        main()
    except InvalidInputError as error:
        sys.exit(f"error: {error}")
