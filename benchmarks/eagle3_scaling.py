"""EAGLE-3's data scaling (paper Figure 1) in miniature: τ against the amount of training data,
for an EAGLE-1 head (drafting through EAGLE-2's dynamic tree) and an EAGLE-3 head.

The data are the shards of `minieagle distill` runs (--features): the bundled corpora's training
splits tiled into windows ("corpus-windows", 2.64M tokens, the unit of the x axis) and the
target's own text sampled at T = 1 ("corpus" prompts), with the target's hidden states recorded
as it wrote them. The pool is cut into --blocks blocks, each holding the same share of every run's
shards (so each block mixes corpus and self-distilled windows in the same proportion), read block
after block, each block in its own fixed random order (`FeaturePool.pass_order`); the point
"k x" is the first k x unit tokens of that order, read once (one pass). So every point's data is a
prefix of the next one's, and training can start on the first blocks while the distill run still
writes the later ones (it waits for a block's shards when it reaches them).

Each head trains once, on the largest point, with a warmup-stable-decay schedule
(`optim.wsd_lr`: the rate is flat until the last --decay-fraction of a run's steps). Up to the
start of a smaller point's decay, that point's own run would be the same run step for step: the
same data order, the same rate, the same noise. So the long run keeps its state there
(`keep_states`) and each smaller point branches off it (`train_eagle.branch_from`) and runs only
its own decay: the points cost 1 + decay-fraction x (1/2 + 1/4 + 1/8) of the largest point's
training instead of 1 + 1/2 + 1/4 + 1/8. The long run is trained point by point (paused after
each branch state), so the smallest points are measured first and a run cut short by the
end of a session leaves every finished point measured; run the same command again to resume.

Each point's heads are benched as soon as they exist (`compare_methods` through the tree of
--depth/--top-k/--total-tokens, on held-out and out-of-domain prompts, T = 0 and T = 1) and the
JSON and the plot are rewritten, so they always show the points finished so far.

    R=~/.cache/minieagle/runs/tiny
    minieagle distill --target $R/targets/small --out-dir $R/corpus --source corpus-windows \
        --shards 100000 --keys 2,6,9,final          # 80 shards (2.64M tokens)
    minieagle distill --target $R/targets/small --out-dir $R/self-T1 --source corpus \
        --shards 560 --keys 2,6,9,final             # 560 shards (18.5M tokens)
    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle3_scaling.py --model $R/targets/small \
        --features $R/corpus $R/self-T1 --planned-shards 80 560 --out $R/scaling \
        --heads eagle3 --json docs/results/eagle3-scaling.json \
        --plot docs/results/eagle3-scaling.png

(`--heads eagle1` in a second process trains the other head on the other core; both write the
same JSON, each its own points.) `--smoke` runs a tiny version on a few shards in seconds.

`--passes N` (N > 1) asks another question, whether seeing the same windows again is worth new
ones: each point trains its own run, N times its one-pass steps over the same data (the first
blocks that hold the point's windows), in --out/HEAD-Kx-Np; give it its own --json and --plot.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from eagle3_ablation import (
    PROMPT_SETS,
    SMOKE,
    apply_smoke,
    bench_prompt_sets,
    budget_flags,
    head_config,
    head_drafter,
    summarise,
)

from minieagle.checkpoint import load_checkpoint
from minieagle.distill import BLOCK, RUN_FILE, complete_shards, shard_dir
from minieagle.errors import InvalidInputError
from minieagle.train_eagle import branch_from, train_eagle_head

HEADS = {"eagle1": "EAGLE-1 head (EAGLE-2 tree)", "eagle3": "EAGLE-3 head"}
POINTS = (1, 2, 4, 8)
UNIT_TOKENS = 2_640_000  # the corpora's training splits: "today's" data of the earlier curve


def point_steps(point: float, args) -> int:
    """Steps of one pass over `point` x the unit tokens, in windows of seq_len + 1."""
    windows = point * args.unit_tokens / (args.seq_len + 1)
    return max(1, round(windows / args.batch_size))


def decay_steps(steps: int, args) -> int:
    return max(1, round(args.decay_fraction * steps))


def _block_ranges(args, b: int) -> list:
    """[(run directory, first shard, stop)] of block b: the same share of every run's planned
    shards."""
    return [
        (directory, b * planned // args.blocks, (b + 1) * planned // args.blocks)
        for directory, planned in zip(args.features, args.planned, strict=True)
    ]


def _shard_windows(directory, index: int) -> int:
    """Windows of a shard: as written, or the run's shard size while it is still to come."""
    meta = shard_dir(directory, index) / "meta.json"
    if meta.is_file():
        return json.loads(meta.read_text())["windows"]
    return json.loads((Path(directory) / RUN_FILE).read_text())["shard_windows"]


def feature_entries(args, windows: int) -> tuple:
    """The feature entries of a run that reads the first `windows` windows of the pool: the
    fewest first blocks that hold them, "|" between blocks."""
    entries, held = [], 0
    for b in range(args.blocks):
        for directory, lo, hi in _block_ranges(args, b):
            if hi > lo:
                entries.append(f"{directory}@{lo}:{hi}")
                held += sum(_shard_windows(directory, i) for i in range(lo, hi))
        entries.append(BLOCK)
        if held >= windows:
            break
    return tuple(entries)


def wait_for_shards(entries, poll_seconds: float = 60.0) -> None:
    """Return once every shard the entries name is written (a distill run may still be
    writing the later blocks), saying what it waits for."""
    while True:
        missing = []
        for entry in entries:
            if entry != BLOCK:
                directory, _, span = entry.partition("@")
                lo, hi = (int(x) for x in span.split(":"))
                missing += [i for i in range(lo, hi) if not shard_dir(directory, i).is_dir()]
        if not missing:
            return
        print(f"waiting for {len(missing)} feature shards (distill is writing them)", flush=True)
        time.sleep(poll_seconds)


def point_label(head: str, point, passes: int = 1) -> str:
    """The run directory's name (and its bench file's) of a head at a point: "eagle3-4x", or
    "eagle3-1x-2p" for two passes."""
    return f"{head}-{point}x" + (f"-{passes}p" if passes > 1 else "")


def head_run(args, head: str, label: str, steps: int, reads: int | None = None, **fields):
    """The training config of one head run in --out/label, reading the blocks it reaches: by
    its last step, or the first `reads` windows of the pool (read again in later passes)."""
    fields.setdefault("lm_head_init", "target" if head == "eagle3" else "random")
    if head == "eagle3":
        fields.setdefault("head_intermediate_size", args.head_intermediate_size)
    if reads is None:
        reads = (fields.get("until") or steps) * args.batch_size  # windows read by its last step
    return head_config(
        args, label, head, steps=steps, data="features", features=feature_entries(args, reads),
        order="pass", decay_steps=decay_steps(steps, args), **fields,
    )  # fmt: skip


def _finished(cfg) -> bool:
    """Whether the run of cfg has finished and exported its head."""
    return (Path(cfg.out_dir) / "train_log.json").is_file() and (
        Path(cfg.export_dir) / "model.safetensors"
    ).is_file()


def _train(cfg, progress: bool) -> dict:
    """Train (or resume, or reuse when finished) the run of cfg; what the JSON records of it."""
    run, export = Path(cfg.out_dir), Path(cfg.export_dir)
    log_path = run / "train_log.json"
    start = time.perf_counter()
    reused = cfg.until == 0 and _finished(cfg)
    if not reused:
        wait_for_shards(cfg.features)
        train_eagle_head(cfg, resume=True, progress=progress)
    if cfg.until:
        return {}
    log = json.loads(log_path.read_text())
    return {
        "head": cfg.head,
        "run_dir": str(run),
        "export_dir": str(export),
        "steps": cfg.steps,
        "decay_steps": cfg.decay_steps,
        "s_per_step": log["s_per_step"],
        "wall_seconds_this_run": time.perf_counter() - start,
        "final_eval": log["evals"][-1],
        "aux_layers": list(cfg.aux_layers) or None,
        "head_intermediate_size": cfg.head_intermediate_size,
    }


def train_points(args, head: str, points, on_point, measured=frozenset()) -> None:
    """Train `head` at every point (ascending), calling on_point(point, record) as each
    finishes: the largest point's run pauses where each smaller point's decay starts, keeps its
    state there, and the smaller point branches off and decays. A smaller point in `measured`
    whose branch is not in --out (the long run restored from a snapshot on another machine) is
    skipped: its result stands in the JSON, and the state it branched from is gone."""
    if args.passes > 1:  # every point its own run over its data, read --passes times
        for point in sorted(points):
            label = point_label(head, point, args.passes)
            one_pass = point_steps(point, args)
            if not (Path(args.out) / label).exists() and point in measured:
                print(f"{label}: measured already (the JSON), its run is not here: skipped")
                continue
            cfg = head_run(args, head, label, args.passes * one_pass,
                           reads=one_pass * args.batch_size)  # fmt: skip
            on_point(point, _train(cfg, progress=not args.smoke))
        return
    largest = max(points)
    total = point_steps(largest, args)
    branch_at = {p: point_steps(p, args) - decay_steps(point_steps(p, args), args)
                 for p in points if p != largest}  # fmt: skip
    main_label = f"{head}-{largest}x"
    for point in sorted(points):
        if point != largest:
            label = f"{head}-{point}x"
            cfg = head_run(args, head, label, point_steps(point, args))
            if not Path(cfg.out_dir).exists() and point in measured:
                print(f"{label}: measured already (the JSON), its run is not here: skipped")
                continue
            if not _finished(cfg):
                paused = head_run(args, head, main_label, total, until=branch_at[point],
                                  keep_states=tuple(branch_at.values()))  # fmt: skip
                _train(paused, progress=not args.smoke)
                branch_from(paused.out_dir, branch_at[point], cfg.out_dir)
        else:
            label = main_label
            cfg = head_run(args, head, label, total, keep_states=tuple(branch_at.values()))
        on_point(point, _train(cfg, progress=not args.smoke))


def _bench(params, config, tokenizer, label: str, factory, record: dict, args) -> dict:
    """`bench_prompt_sets` of one head, reused from --out/label.bench.json when it was measured
    with the same settings for the same trained head."""
    path = Path(args.out) / f"{label}.bench.json"
    names = ("depth", "top_k", "total_tokens", "prompts_per_kind", "prompt_limit", "new_tokens")
    settings = {name: getattr(args, name) for name in (*names, "repeats")}
    settings["final_eval"] = record["final_eval"]
    settings = json.loads(json.dumps(settings))
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["settings"] == settings:
            return saved["bench"]
    bench = bench_prompt_sets(params, config, tokenizer, {label: factory}, args)
    path.write_text(json.dumps({"settings": settings, "bench": bench}, indent=2) + "\n")
    return bench


def _read_results(path: Path) -> dict:
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("design") == "wsd-branches":
            return saved
    return {"design": "wsd-branches", "points": []}


def plot(points: list[dict], path: Path, xlabel: str = "training tokens (one pass)") -> None:
    """τ at T = 0 against training tokens: one line per head, one panel per prompt set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PROMPT_SETS), figsize=(9, 3.6), sharey=True)
    widths = sorted({p.get("head_intermediate_size") or 0 for p in points})
    for ax, set_name in zip(axes, PROMPT_SETS, strict=True):
        for (head, name), width in itertools.product(HEADS.items(), widths):
            mine = sorted((p for p in points if p["head"] == head
                           and (p.get("head_intermediate_size") or 0) == width),
                          key=lambda p: p["tokens"])  # fmt: skip
            if mine:
                label = f"{name}, MLP {width}" if width else name
                ax.plot([p["tokens"] for p in mine], [p["tau"]["T=0"][set_name] for p in mine],
                        marker="o", label=label, linestyle="--" if width else "-")  # fmt: skip
        ax.set_xscale("log", base=2)
        ticks = sorted({(p["point"], p["tokens"]) for p in points})
        names = [k if isinstance(k, str) else f"{k}x" for k, _ in ticks]  # 1x, or a share: 1/8
        ax.set_xticks([t for _, t in ticks], [f"{k}\n{t / 1e6:.1f}M" for k, (_, t) in
                                              zip(names, ticks, strict=True)])  # fmt: skip
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_title(f"{'held-out' if set_name == 'heldout' else 'out-of-domain'} prompts")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("τ (tokens per target forward, T = 0)")
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(points: list[dict]) -> str:
    lines = [
        f"{'head':7} {'point':>5} {'tokens':>10} {'steps':>6} {'T=0 τ held-out':>14} {'ood':>5}"
    ]
    for p in sorted(points, key=lambda p: (p["head"], p["tokens"])):
        tau = p["tau"]["T=0"]
        lines.append(
            f"{p['head']:7} {p['point']:>4}x {p['tokens']:10d} {p['steps']:6d} "
            f"{tau['heldout']:14.2f} {tau['ood']:5.2f}"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", help="run directories (default runs/eagle3-scaling)")
    parser.add_argument("--features", nargs="+", help="minieagle distill runs to train on")
    parser.add_argument(
        "--planned-shards", dest="planned", type=int, nargs="+",
        help="the shards each --features run will hold when finished (default: what each holds "
        "now); the pool is cut into --blocks blocks of as many shards of each run",
    )  # fmt: skip
    parser.add_argument("--blocks", type=int, default=8, help="blocks of the pool (8)")
    parser.add_argument("--heads", default="eagle1,eagle3", help="comma-separated heads to train")
    parser.add_argument(
        "--points", default="1,2,4,8", help="data points, in units of --unit-tokens"
    )
    parser.add_argument("--unit-tokens", type=int, default=UNIT_TOKENS)
    parser.add_argument(
        "--passes", type=int, default=1,
        help="passes over each point's data (1: one long run, the smaller points branched off "
        "it; more: each point its own run, --passes times its one-pass steps)",
    )  # fmt: skip
    parser.add_argument("--decay-fraction", type=float, default=0.1,
                        help="share of each point's steps spent decaying the rate")  # fmt: skip
    parser.add_argument("--json", help="write the results here (default OUT/scaling.json)")
    parser.add_argument("--plot", help="write the plot here (default OUT/scaling.png)")
    parser.add_argument("--plot-only", action="store_true",
                        help="redraw --plot from the points in --json, train nothing")  # fmt: skip
    parser.add_argument("--with", dest="also", nargs="+", default=[], metavar="JSON",
                        help="--plot-only: draw the points of these result files too (e.g. "
                        "the heads of the target's width beside a wider head's)")  # fmt: skip
    parser.add_argument(
        "--head-intermediate-size", type=int, default=0,
        help="EAGLE-3 heads' MLP width (0: the target's; a wider head asks whether capacity, not "
        "data, holds τ back; give it its own --out, --json and --plot)",
    )  # fmt: skip
    budget_flags(parser)
    parser.set_defaults(repeats=1)  # τ, the measure here, is deterministic at T = 0
    args = parser.parse_args(argv)
    if args.plot_only:
        results = _read_results(Path(args.json or Path(args.out or ".") / "scaling.json"))
        points = []
        for other in [results, *(_read_results(Path(path)) for path in args.also)]:
            width = other.get("config", {}).get("head_intermediate_size") or 0
            points += [{"head_intermediate_size": width, **p} for p in other["points"]]
        plot(points, Path(args.plot or Path(args.out or ".") / "scaling.png"))
        return results
    apply_smoke(args, "runs/eagle3-scaling-smoke", "runs/eagle3-scaling")
    if args.smoke:
        args.unit_tokens = SMOKE["seq_len"] * 2 * 4  # 4 batches of the smoke's 2 windows
        args.blocks = 2
    if not args.features:
        raise InvalidInputError("--features is required: the minieagle distill runs to train on")
    heads = [h.strip() for h in args.heads.split(",")]
    for head in heads:
        if head not in HEADS:
            raise InvalidInputError(f"--heads names {head!r}; pass some of {sorted(HEADS)}")
    points = sorted({float(p) if "." in p else int(p) for p in args.points.split(",")})
    if args.passes < 1:
        raise InvalidInputError(f"--passes {args.passes} must be at least 1")
    if not 0 < args.decay_fraction < 1:
        raise InvalidInputError(f"--decay-fraction {args.decay_fraction} must lie in (0, 1)")
    if args.planned is None:
        args.planned = [len(complete_shards(d)) for d in args.features]
    if len(args.planned) != len(args.features) or min(args.planned) < args.blocks:
        raise InvalidInputError(
            f"--planned-shards {args.planned}: give one count per --features run, each at least "
            f"--blocks {args.blocks}"
        )
    windows = sum(
        n * json.loads((Path(d) / RUN_FILE).read_text())["shard_windows"]
        for d, n in zip(args.features, args.planned, strict=True)
    )  # fmt: skip
    needed = max(points) * args.unit_tokens / (args.seq_len + 1)
    if needed > windows:
        raise InvalidInputError(
            f"the point {max(points)}x needs {needed:.0f} windows; the feature runs will hold "
            f"{windows}: distill more shards or pass smaller --points"
        )
    out = Path(args.out)
    json_path = Path(args.json or out / "scaling.json")
    plot_path = Path(args.plot or out / "scaling.png")
    params, config, tokenizer = load_checkpoint(args.model)

    shared = ("model", "features", "planned", "blocks", "unit_tokens", "passes",
              "decay_fraction", "batch_size", "seq_len", "lr", "warmup_steps", "ttt_steps",
              "head_intermediate_size", "seed", "depth", "top_k", "total_tokens",
              "prompts_per_kind", "new_tokens", "repeats", "smoke")  # fmt: skip
    settings = json.loads(json.dumps({name: getattr(args, name) for name in shared}))

    def on_point(point, record: dict) -> None:
        results = _read_results(json_path)  # another head's process may have written since
        mine = (record["head"], point, args.passes)
        recorded = [
            p for p in results["points"] if (p["head"], p["point"], p.get("passes", 1)) == mine
        ]
        if (
            recorded
            and results.get("config") == settings
            and recorded[0]["final_eval"] == json.loads(json.dumps(record["final_eval"]))
        ):
            return  # a reused head, benched with these settings: its record (and wall time) stands
        label = point_label(*mine)
        method, factory = head_drafter(params, config, record, args)
        bench = _bench(params, config, tokenizer, label, factory, record, args)
        results["points"] = [p for p in results["points"] if p not in recorded]
        steps = record["steps"]
        by_kind = {  # τ per kind of prompt: prose and code, held-out and out of domain
            setting: {
                f"{set_name}/{kind}": entry[label]["tau"]
                for set_name in bench for kind, entry in bench[set_name][setting].items()
                if kind != "all"
            }
            for setting in bench[PROMPT_SETS[0]]
        }  # fmt: skip
        results["points"].append({
            "point": point, "passes": args.passes,
            "tokens": steps // args.passes * args.batch_size * (args.seq_len + 1),
            "steps": steps, "method": method, **record, **summarise(bench, label),
            "tau_by_kind": by_kind,
        })  # fmt: skip
        results["config"] = settings
        results["plot"] = str(plot_path)
        plot(results["points"], plot_path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2) + "\n")
        print(format_table(results["points"]), flush=True)

    for head in heads:
        measured = {p["point"] for p in _read_results(json_path)["points"]
                    if p["head"] == head and p.get("passes", 1) == args.passes}  # fmt: skip
        train_points(args, head, points, on_point, measured)
    return _read_results(json_path)


if __name__ == "__main__":
    try:
        main()
    except InvalidInputError as error:
        sys.exit(f"error: {error}")
