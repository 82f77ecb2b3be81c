"""Self-distillation against one-at-a-time decoding with the whole CPU on each side.

`distill_throughput.py` compares the two on one core (one BLAS thread, one process). A machine
has more cores, and either side may use them: one-at-a-time decoding through more BLAS threads
or as independent processes each decoding its own prompts one after another, the batched sampler
the same ways (the runs in `heads_at_scale.sh` are two worker processes). This script measures
every such layout, side by side in rounds that alternate their order, and compares the best of
each side (median tokens/s over the rounds):

- ``serial-1t``: one process, 1 BLAS thread (the one-core figure);
- ``serial-{N}t``: one process, N BLAS threads;
- ``serial-{N}p``: N processes at 1 thread each, decoding at the same time;
- ``batched-1t``, ``batched-{N}t``, ``batched-{N}p``: the same for `distill.decode_batch`.

Each process loads the target, then waits; the timing starts when every process of a layout is
told to go and ends when the last reports, so loading is not counted. Both sides sample at T = 1
and count the sampled tokens only; the batched side records the hidden states `--keys` (those of
SmolLM2's chat runs by default), as a distillation run does. Prompts are seeded random token ids,
different in each process.

    python benchmarks/distill_cores.py --model ~/.cache/minieagle/models/smollm2-135m-instruct \\
        --json docs/results/distill-cores-smollm2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "minieagle" / "pretrained" / "small"


def layouts(cores: int) -> dict:
    """name -> (side, processes, BLAS threads per process)."""
    out = {}
    for side in ("serial", "batched"):
        out[f"{side}-1t"] = (side, 1, 1)
        if cores > 1:
            out[f"{side}-{cores}t"] = (side, 1, cores)
            out[f"{side}-{cores}p"] = (side, cores, 1)
    return out


def worker(args) -> None:
    """One process of a layout: load, say "ready", then for each "go" line decode and answer
    {"tokens": n, "seconds": s} as one JSON line; stop at end of input."""
    import numpy as np

    from minieagle import inference
    from minieagle.checkpoint import load_checkpoint
    from minieagle.distill import decode_batch
    from minieagle.generate import generate
    from minieagle.sampling import SamplingParams

    params, config, _ = load_checkpoint(args.model, dtype=np.float32)
    target = inference.prepare(params, config)
    rng = np.random.default_rng(1000 + args.worker_index)
    count = args.batch_size if args.worker_side == "batched" else args.serial_prompts
    prompts = [rng.integers(3, config.vocab_size, args.prompt_tokens).tolist()
               for _ in range(count)]  # fmt: skip
    keys = tuple(int(k) if k.isdigit() else k for k in args.keys.split(","))
    print("ready", flush=True)
    for round_, _ in enumerate(sys.stdin):
        start = time.perf_counter()
        if args.worker_side == "batched":
            window = args.prompt_tokens + args.new_tokens
            _, _, tokens = decode_batch(target, prompts, window, keys, 1.0, rng)
        else:
            tokens = 0
            for i, prompt in enumerate(prompts):
                result = generate(target, config, prompt, max_new_tokens=args.new_tokens,
                                  sampling=SamplingParams(temperature=1.0),
                                  seed=1000 * round_ + i, stop_at_eos=False)  # fmt: skip
                tokens += len(result.tokens)
        seconds = time.perf_counter() - start
        print(json.dumps({"tokens": int(tokens), "seconds": seconds}), flush=True)


def run_layout(args, side: str, processes: int, threads: int) -> dict:
    """Start the layout's processes, wait until all have loaded, time one decode by all."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))  # fmt: skip
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    common = [sys.executable, __file__, "--model", args.model, "--worker-side", side,
              "--batch-size", str(args.batch_size), "--serial-prompts", str(args.serial_prompts),
              "--prompt-tokens", str(args.prompt_tokens), "--new-tokens", str(args.new_tokens),
              "--keys", args.keys]  # fmt: skip
    procs = [subprocess.Popen(common + ["--worker-index", str(i)], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for i in range(processes)]  # fmt: skip
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a {side} worker failed to start (said {line!r})")
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        answers = []
        for p in procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"a {side} worker stopped before answering (exit "
                                   f"{p.wait()}); its error is above")  # fmt: skip
            answers.append(json.loads(line))
        wall = time.perf_counter() - start
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()
    tokens = sum(a["tokens"] for a in answers)
    return {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall,
            "per_process_s": [a["seconds"] for a in answers]}  # fmt: skip


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count() or 1,
        help="processes or threads of the multi-core layouts (default: all)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="windows side by side")
    parser.add_argument("--serial-prompts", type=int, default=2,
                        help="prompts each one-at-a-time process decodes")  # fmt: skip
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--keys", default="2,15,27,final", help="hidden states recorded")
    parser.add_argument("--repeats", type=int, default=2, help="rounds over every layout")
    parser.add_argument("--layouts", help="comma-separated subset of the layouts (default: all)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker-side", choices=("serial", "batched"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_side:
        worker(args)
        return {}
    if args.cores < 1:
        parser.error(f"--cores {args.cores}: expected at least 1")
    table = layouts(args.cores)
    if args.layouts:
        unknown = sorted(set(args.layouts.split(",")) - set(table))
        if unknown:
            parser.error(f"--layouts: unknown {', '.join(unknown)}; choose from "
                         f"{', '.join(table)}")  # fmt: skip
        table = {k: v for k, v in table.items() if k in args.layouts.split(",")}
    runs: dict = {name: [] for name in table}
    for round_ in range(args.repeats):
        order = list(table) if round_ % 2 == 0 else list(table)[::-1]
        for name in order:
            run = run_layout(args, *table[name])
            runs[name].append(run)
            print(f"round {round_}: {name:12} {run['tokens_per_s']:8.1f} tokens/s "
                  f"({run['tokens']} tokens in {run['seconds']:.1f} s)", flush=True)  # fmt: skip
    summary = {}
    for name, rs in runs.items():
        values = [r["tokens_per_s"] for r in rs]
        summary[name] = {"median": statistics.median(values), "min": min(values),
                         "max": max(values)}  # fmt: skip
    best = {}
    for side in ("serial", "batched"):
        names = [n for n in summary if n.startswith(side)]
        if names:
            best[side] = max(names, key=lambda n: summary[n]["median"])
    results = {
        "command": "python benchmarks/distill_cores.py "
        + " ".join(sys.argv[1:] if argv is None else argv),  # fmt: skip
        "model": args.model,
        "settings": {
            k: v for k, v in vars(args).items() if k not in ("json", "worker_side", "worker_index")
        },  # fmt: skip
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0],
        },  # fmt: skip
        "tokens_per_s": summary,
        "runs": runs,
        "best": best,
    }
    print()
    for name, s in summary.items():
        print(f"{name:12} {s['median']:8.1f} tokens/s [{s['min']:.1f}..{s['max']:.1f}]")
    if "serial-1t" in summary and "batched-1t" in summary:
        results["ratio_one_core"] = summary["batched-1t"]["median"] / summary["serial-1t"]["median"]
        print(f"one core: batched-1t / serial-1t = {results['ratio_one_core']:.2f}x")
    if len(best) == 2:
        ratio = summary[best["batched"]]["median"] / summary[best["serial"]]["median"]
        results["ratio_best"] = ratio
        print(f"whole CPU: {best['batched']} / {best['serial']} = {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
