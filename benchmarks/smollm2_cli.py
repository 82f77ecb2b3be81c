"""SmolLM2-135M-Instruct as a user runs it: `minieagle chat --prompt TEXT --stats` with each
method's defaults, side by side in one run, on held-out chat requests of our own making.

    python benchmarks/smollm2_cli.py --out docs/results/smollm2-cli.json

Every call is its own process, exactly the command a user types (one BLAS thread:
OPENBLAS_NUM_THREADS=1), and prints its `--stats` line: tokens, ms/token (decoding only, the
model's loading not counted) and τ. For each request and repeat the methods run one after
another in a rotated order, so a slow spell of this shared machine falls on every method alike;
a method's speedup is vanilla's ms/token over its own on the same request and repeat, reported as
the median over requests and repeats with [min..max]. τ is pooled: all tokens over all target
forwards. At T = 0 every reply is checked equal to vanilla's.

The requests (`smollm2_methods.chat_requests`): one about a test-split passage of each bundled
corpus, one about an out-of-domain prose and code passage (minieagle/data/ood_prompts.jsonl), and
two questions that name no passage; the heads trained on requests about the train splits. The
EAGLE rows use the heads given (default: the shipped smollm2-eagle1 / smollm2-eagle3), with the
CLI's defaults: the tree sized for this machine (measured once, cached), the head's shipped
scores. `--candidate LABEL=DIR` adds a head to decide on beside the shipped one, in the same
rotation (rows LABEL:eagle3 and LABEL:eagle3-chain1; e.g. `--methods
eagle3,eagle3-chain1,d960:eagle3,d960:eagle3-chain1 --candidate d960=DIR`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from smollm2_methods import chat_requests  # noqa: E402

STATS = re.compile(
    r"\[turn 1, (?P<method>[\w-]+): (?P<tokens>\d+) tokens, (?P<ms>[\d.]+) ms/token, "
    r"tau (?P<tau>[\d.]+) tokens per target forward"
)


def methods(eagle1_head: str, eagle3_head: str) -> dict[str, list[str]]:
    """name -> the flags `minieagle chat` is given for it."""
    return {
        "vanilla": ["--method", "vanilla"],
        "eagle3": ["--method", "eagle3", "--head", eagle3_head],
        "eagle2": ["--method", "eagle2", "--head", eagle1_head],
        "eagle1-auto": ["--method", "eagle1", "--head", eagle1_head, "--tree", "auto"],
        "pld": ["--method", "pld"],
        # fixed chains of the EAGLE-3 head, not sized (run with --methods):
        "eagle3-chain1": ["--method", "eagle3", "--head", eagle3_head, "--total-tokens", "2",
                          "--depth", "1", "--tree-top-k", "1"],  # fmt: skip
        "eagle3-chain2": ["--method", "eagle3", "--head", eagle3_head, "--total-tokens", "3",
                          "--depth", "2", "--tree-top-k", "1"],  # fmt: skip
        # a chain of up to 4 drafts grown while the last one's value reaches 0.4, the threshold
        # benchmarks/expand_threshold.py chose on the validation split:
        "eagle3-cut": ["--method", "eagle3", "--head", eagle3_head, "--total-tokens", "5",
                       "--depth", "3", "--tree-top-k", "1",
                       "--expand-threshold", "0.4"],  # fmt: skip
    }


def candidate_methods(candidates: list[str]) -> dict[str, list[str]]:
    """Rows for EAGLE-3 heads beside the shipped one, each given as LABEL=DIR (`--candidate`):
    LABEL:eagle3 (sized, as `eagle3`) and LABEL:eagle3-chain1 (the fixed chain of one), the
    flags of the rows `methods` names alike but for --head. Their names are none of
    benchmarks/fastest_methods.py's rows, so a candidate never becomes `--method auto`'s choice
    before it is shipped."""
    table = {}
    for given in candidates:
        label, sep, directory = given.partition("=")
        if not sep or not label or not directory or ":" in label:
            raise SystemExit(f"--candidate {given!r}: expected LABEL=DIR, e.g. d960=runs/x/final")
        for row in ("eagle3", "eagle3-chain1"):
            table[f"{label}:{row}"] = methods("unused", directory)[row]
    return table


def run_chat(model: str, request: str, flags: list[str], temperature: float, new_tokens: int,
             seed: int) -> dict:  # fmt: skip
    """One `minieagle chat --prompt REQUEST --stats` process: its reply, tokens, ms/token, τ."""
    command = [sys.executable, "-m", "minieagle", "chat", "--model", model, "--prompt", request,
               "--stats", "--temperature", f"{temperature:g}", "--max-new-tokens",
               str(new_tokens), "--seed", str(seed), *flags]  # fmt: skip
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    match = STATS.search(done.stderr)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    tokens, tau = int(match["tokens"]), float(match["tau"])
    stats = [line for line in done.stderr.splitlines() if line.startswith("[")]
    return {"reply": done.stdout, "tokens": tokens, "ms_per_token": float(match["ms"]),
            "tau": tau, "forwards": tokens / tau if tau else 0.0, "stats": stats}  # fmt: skip


def summarise(runs: dict, names: list[str], greedy: bool) -> dict:
    """Per method: pooled τ, speedup median [min..max] over (request, repeat) pairs, ms/token
    median, and at T = 0 how many replies differ from vanilla's."""
    rows = {}
    for name in names:
        pairs = [(runs[key]["vanilla"], runs[key][name]) for key in runs]
        speedups = [v["ms_per_token"] / m["ms_per_token"] for v, m in pairs]
        tokens = sum(m["tokens"] for _, m in pairs)
        forwards = sum(m["forwards"] for _, m in pairs)
        rows[name] = {
            "tau": tokens / forwards if forwards else None,
            "ms_per_token_median": float(np.median([m["ms_per_token"] for _, m in pairs])),
            "speedup_median": float(np.median(speedups)),
            "speedup_min": float(min(speedups)),
            "speedup_max": float(max(speedups)),
            "tokens": tokens,
            "replies_differing_from_vanilla": (
                sum(m["reply"] != v["reply"] for v, m in pairs) if greedy else None
            ),
            "stats_lines": sorted({line for _, m in pairs for line in m["stats"][1:]}),
        }
    return rows


def format_table(rows: dict, temperature: float) -> str:
    lines = [f"T = {temperature:g}: method, tau, speedup median [min..max], ms/token median"]
    for name, row in rows.items():
        differ = row["replies_differing_from_vanilla"]
        lines.append(
            f"  {name:12} tau {row['tau']:.2f}  {row['speedup_median']:.2f}x "
            f"[{row['speedup_min']:.2f}..{row['speedup_max']:.2f}]  "
            f"{row['ms_per_token_median']:.1f} ms/token"
            + ("" if differ is None else f"  replies differing from vanilla: {differ}")
        )
        lines += [f"      {line}" for line in row["stats_lines"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--eagle1-head", default="smollm2-eagle1")
    parser.add_argument("--eagle3-head", default="smollm2-eagle3")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--methods", help="comma-separated subset of the methods (vanilla kept)")
    parser.add_argument(
        "--candidate", action="append", default=[], metavar="LABEL=DIR",
        help="an EAGLE-3 head to run beside the shipped one (rows LABEL:eagle3 and "
        "LABEL:eagle3-chain1, in the same rotation); repeatable",
    )  # fmt: skip
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
    from minieagle.chat import load_chat_template
    from minieagle.checkpoint import load_checkpoint

    _, _, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    load_chat_template(args.model, tokenizer)  # fails early for a model without a template
    requests = chat_requests()
    table = {**methods(args.eagle1_head, args.eagle3_head), **candidate_methods(args.candidate)}
    if args.methods:
        wanted = {"vanilla", *args.methods.split(",")}
        table = {name: flags for name, flags in table.items() if name in wanted}
    names = list(table)
    results = {"model": args.model, "heads": {"eagle1": args.eagle1_head,
               "eagle3": args.eagle3_head}, "candidates": args.candidate,
               "new_tokens": args.new_tokens,
               "repeats": args.repeats, "requests": [kind for kind, _ in requests],
               "methods": {name: ["minieagle", "chat", "--prompt", "REQUEST", "--stats", *flags]
                           for name, flags in table.items()},
               "started": time.strftime("%Y-%m-%d %H:%M:%S"),
               "load_average": os.getloadavg()[0]}  # fmt: skip
    for temperature in (float(t) for t in args.temperatures.split(",")):
        runs = {}
        for repeat in range(args.repeats):
            for r, (_, request) in enumerate(requests):
                shift = (repeat * len(requests) + r) % len(names)
                order = names[shift:] + names[:shift]
                runs[(r, repeat)] = {
                    name: run_chat(
                        args.model, request, table[name], temperature, args.new_tokens, seed=repeat
                    )  # fmt: skip
                    for name in order
                }
                print(f"T = {temperature:g}, request {r + 1}/{len(requests)}, repeat {repeat + 1}: "
                      + ", ".join(f"{n} {runs[(r, repeat)][n]['ms_per_token']:.1f} ms"
                                  for n in names), flush=True)  # fmt: skip
        rows = summarise(runs, names, greedy=temperature == 0)
        print(format_table(rows, temperature), flush=True)
        results[f"T={temperature:g}"] = rows
    results["load_average_end"] = os.getloadavg()[0]
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
