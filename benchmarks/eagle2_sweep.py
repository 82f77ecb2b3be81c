"""EAGLE-2's tree size on this machine: τ and speedup over a (depth, total_tokens) grid, T = 0.

A bigger dynamic tree accepts more tokens per target forward (τ), but on a CPU verifying more
tokens is not free and each expansion step is one more head forward, so the speedup peaks
somewhere. Every grid point is one EAGLE-2 drafter (the shipped EAGLE-1 head, `--top-k` fixed),
run greedily side by side with vanilla decoding on held-out prose and code prompts: the methods
are interleaved and their order rotates each repeat, so machine noise hits them alike. Reported:

- τ: tokens emitted per target forward, bonus included, pooled over every cycle;
- speedup: tokens/s of the method / tokens/s of vanilla over the same prompts in the same repeat,
  median [min..max] over repeats;
- where the median speedup peaks;
- the calibration table (`dynamic_tree.calibration_table`) of the default configuration
  (depth 5, total_tokens 26), pooled over the prompts of the first repeat (greedy runs repeat
  exactly), run once more untimed if the grid leaves it out.

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle2_sweep.py --out eagle2-sweep.json

The default grid (5 depths x 5 sizes, 4 + 4 prompts, 64 tokens, 5 repeats) takes about 3 minutes
on two busy cores (one process, one BLAS thread).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from minieagle.bench import heldout_prompts, machine_info
from minieagle.calibration import shipped_calibration
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import DEFAULT_EAGLE3_HEAD, DEFAULT_HEAD, DEFAULT_MODEL
from minieagle.drafters import build_drafter
from minieagle.drafters.eagle2 import DEFAULT_DEPTH, DEFAULT_TOTAL_TOKENS
from minieagle.dynamic_tree import calibration_table
from minieagle.generate import emitted_per_forward, generate
from minieagle.heads.eagle1 import load_head
from minieagle.heads.eagle3_io import load_eagle3_head


def _spread(values) -> dict:
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _label(depth: int, total: int) -> str:
    return f"eagle2[depth={depth},total={total}]"


def sweep(
    params, config, head, prompts, *, depths, totals, top_k, new_tokens, repeats, method="eagle2",
    calibration=None,
) -> dict:  # fmt: skip
    """The grid for `method` ("eagle2": an EAGLE-1 head; "eagle3": an EAGLE-3 head, the same
    dynamic tree); calibration: the scores every tree ranks by (None: raw, the paper's)."""
    """Greedy vanilla and one EAGLE-2 drafter per (depth, total_tokens), side by side.

    head: (head params, Eagle1Config). prompts: list of (kind, ids). Returns {"vanilla": ...,
    "grid": one entry per point, "calibration": ...} (see the module docstring)."""
    points = [(depth, total) for depth in depths for total in totals]
    default = (DEFAULT_DEPTH, DEFAULT_TOTAL_TOKENS)

    def factory(depth, total):
        return lambda: build_drafter(
            method,
            target=(params, config),
            head=head,
            depth=depth,
            # A tree of `total` nodes keeps total - 1 drafts, and a draft outside the top
            # total - 1 of its siblings has total - 1 better nodes (siblings, ancestors) above
            # it, so it is never kept: the clamp gives the same tree, without the wasted work.
            top_k=min(top_k, total - 1),
            total_tokens=total,
            calibration=calibration,
        )

    methods = {"vanilla": lambda: None, **{_label(*p): factory(*p) for p in points}}
    names = list(methods)
    for name in names:  # warm-up; also builds every drafter once, so bad sizes fail early
        generate(params, config, prompts[0][1], drafter=methods[name](), max_new_tokens=8)
    runs = {name: [] for name in names}  # (repeat, prompt index, GenerationResult)
    records = []  # calibration records of the default configuration
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for index, (_, ids) in enumerate(prompts):
            for name in order:
                drafter = methods[name]()
                result = generate(
                    params,
                    config,
                    ids,
                    drafter=drafter,
                    max_new_tokens=new_tokens,
                    stop_at_eos=False,
                )
                runs[name].append((repeat, index, result))
                if repeat == 0 and name == _label(*default):
                    records += drafter.calibration_records
    if default not in points:
        for _, ids in prompts:
            drafter = factory(*default)()
            generate(
                params, config, ids, drafter=drafter, max_new_tokens=new_tokens, stop_at_eos=False
            )
            records += drafter.calibration_records

    def tokens_per_s(name, repeat):
        chosen = [r for rep, _, r in runs[name] if rep == repeat]
        return sum(len(r.tokens) for r in chosen) / sum(r.decode_seconds for r in chosen)

    vanilla = {(rep, i): r.tokens for rep, i, r in runs["vanilla"]}
    grid = []
    for depth, total in points:
        rows = runs[_label(depth, total)]
        speedups = [
            tokens_per_s(_label(depth, total), rep) / tokens_per_s("vanilla", rep)
            for rep in range(repeats)
        ]
        differ = [r.tokens != vanilla[(rep, i)] for rep, i, r in rows]
        grid.append(
            {
                "depth": depth,
                "total_tokens": total,
                "top_k": top_k,
                "tau": emitted_per_forward([r for _, _, r in rows]),
                "speedup": _spread(speedups),
                "tokens_per_s": _spread(
                    [tokens_per_s(_label(depth, total), rep) for rep in range(repeats)]
                ),
                "differs_from_vanilla": sum(differ) / len(differ),  # float32 near-ties
            }
        )
    best = max(grid, key=lambda e: e["speedup"]["median"])
    table = calibration_table(records)
    return {
        "vanilla": {"tokens_per_s": _spread([tokens_per_s("vanilla", r) for r in range(repeats)])},
        "grid": grid,
        "best": {k: best[k] for k in ("depth", "total_tokens", "tau", "speedup")},
        "calibration": {
            "depth": default[0],
            "total_tokens": default[1],
            "top_k": top_k,
            "records": len(records),
            "table": [
                {
                    "bin": list(b),
                    "count": n,
                    "mean_confidence": q if n else None,
                    "acceptance": a if n else None,
                }
                for b, n, q, a in table
            ],
        },
    }


def format_report(results: dict) -> str:
    """τ and speedup as tables (rows: depth, columns: total_tokens), the peak, and calibration."""
    grid, s = results["grid"], results["settings"]
    depths = sorted({e["depth"] for e in grid})
    totals = sorted({e["total_tokens"] for e in grid})
    cell = {(e["depth"], e["total_tokens"]): e for e in grid}
    header = "depth \\ total" + "".join(f"{t:>19}" for t in totals)
    lines = [
        f"{s.get('method', 'eagle2')} sweep, T = 0, top_k = {s['top_k']}, {s['prompts']} prompts x "
        f"{s['new_tokens']} tokens, {s['repeats']} repeats; vanilla "
        f"{results['vanilla']['tokens_per_s']['median']:.1f} tokens/s",
        "",
        "tau (tokens per target forward)",
        header,
    ]
    lines += [f"{d:<13}" + "".join(f"{cell[d, t]['tau']:>19.2f}" for t in totals) for d in depths]
    lines += ["", "speedup vs vanilla, median [min..max] over repeats", header]
    for d in depths:
        row = [cell[d, t]["speedup"] for t in totals]
        lines.append(
            f"{d:<13}"
            + "".join(f"{x['median']:>6.2f} [{x['min']:.2f}..{x['max']:.2f}]" for x in row)
        )
    differ = max(e["differs_from_vanilla"] for e in grid)
    b = results["best"]
    lines += [
        "",
        f"speed peaks at depth={b['depth']}, total_tokens={b['total_tokens']}: "
        f"{b['speedup']['median']:.2f}x [{b['speedup']['min']:.2f}..{b['speedup']['max']:.2f}], "
        f"tau {b['tau']:.2f}",
    ]
    edges = [
        f"--{name} {value}"
        for name, value, values in (
            ("depths", b["depth"], depths),
            ("totals", b["total_tokens"], totals),
        )
        if len(values) > 1 and value in (values[0], values[-1])
    ]
    if edges:
        lines.append(f"  (on the edge of the grid: {', '.join(edges)}; extend the grid past it)")
    lines += [
        f"greedy outputs differing from vanilla (float32 near-ties): at most {differ:.0%}",
        "",
    ]
    c = results["calibration"]
    lines.append(
        f"calibration, depth={c['depth']}, total_tokens={c['total_tokens']}, top_k={c['top_k']} "
        f"({c['records']} verified nodes whose parent was accepted):"
    )
    lines.append(f"  {'q bin':<14} {'nodes':>6} {'mean q':>7} {'accepted':>9}")
    for row in c["table"]:
        lo, hi = row["bin"]
        q, rate = (
            "-" if row[k] is None else f"{row[k]:.3f}" for k in ("mean_confidence", "acceptance")
        )
        lines.append(f"  [{lo:.2f}, {hi:.2f}]   {row['count']:>6} {q:>7} {rate:>9}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="target checkpoint")
    parser.add_argument(
        "--method",
        choices=["eagle2", "eagle3"],
        default="eagle2",
        help="eagle2 (an EAGLE-1 head) or eagle3 (an EAGLE-3 head): the same dynamic tree",
    )
    parser.add_argument(
        "--head",
        help=f"head directory (default: {DEFAULT_HEAD.name} for eagle2, "
        f"{DEFAULT_EAGLE3_HEAD.name} for eagle3)",
    )
    parser.add_argument(
        "--totals",
        type=int,
        nargs="+",
        default=[8, 16, 26, 40, 60],
        help="total_tokens: nodes verified per cycle, the root included",
    )
    parser.add_argument(
        "--depths",
        type=int,
        nargs="+",
        default=[2, 3, 4, 5, 6],
        help="expansion steps (the tree is up to depth + 1 drafts deep)",
    )
    parser.add_argument("--top-k", type=int, default=8, help="candidates expanded per level")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-corpus", type=int, default=4)
    parser.add_argument(
        "--scores", choices=("raw", "shipped"), default="raw",
        help="raw: the paper's scores; shipped: the head's calibration.json (minieagle calibrate)",
    )  # fmt: skip
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    for name in ("repeats", "new_tokens", "prompts_per_corpus"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"error: {flag}={getattr(args, name)} is below 1; pass e.g. 3")

    params, config, tokenizer = load_checkpoint(args.model)
    if args.method == "eagle3":
        args.head = args.head or str(DEFAULT_EAGLE3_HEAD)
        head = load_eagle3_head(args.head, target_config=config)
    else:
        args.head = args.head or str(DEFAULT_HEAD)
        head = load_head(args.head)
    scores = None
    if args.scores == "shipped":
        scores = shipped_calibration(args.head)
        if scores is None:
            raise SystemExit(
                f"error: --scores shipped: {args.head} has no calibration.json for its weights; "
                f"write one with minieagle calibrate --head {args.head}"
            )
    prompts = heldout_prompts(tokenizer, per_corpus=args.prompts_per_corpus)
    results = sweep(
        params,
        config,
        head,
        prompts,
        depths=args.depths,
        totals=args.totals,
        top_k=args.top_k,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        method=args.method,
        calibration=scores,
    )
    results["settings"] = {
        "method": args.method,
        "scores": args.scores,
        "model": args.model,
        "head": args.head,
        "top_k": args.top_k,
        "prompts": len(prompts),
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "machine": machine_info(),
    }
    print(format_report(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from None
