"""One training step of the EAGLE-1 and EAGLE-3 draft heads, timed alone: loss + backward +
gradient clipping + AdamW, on inputs shaped like recorded features (no target forward).

    OPENBLAS_NUM_THREADS=1 python benchmarks/head_train_step.py [--before COMMIT] \
        [--out docs/results/head-train-step.json]

The target is the shipped `minieagle/pretrained/small` (12 layers, d = 128, V = 2048); the heads
are fresh ones of its shape (EAGLE-3: aux layers 2, 6, 9 and a 1,683-token draft vocabulary, as
the shipped head), trained on batch 8 x seq_len 128 windows, ttt_steps 7, float32. Features are
seeded random arrays of the recorded shapes (EAGLE-1: f_t and f_{t+1} [B, T, d] after the final
norm; EAGLE-3: fused [B, T, 3d] and the target's logits [B, T, V] from the final features).

`--before COMMIT` measures that commit's heads beside the working tree's, in one run: each
implementation runs in its own worker process (the commit's `minieagle/` extracted with `git
archive` and put first on its PYTHONPATH), and the timed repeats alternate between the workers,
so both see the same machine load. Every figure is a median with its spread (min, max).

tokens/s = B T / (seconds per step). MFU = achieved matmul FLOP/s / the machine's measured float32
matmul peak (`minieagle.bench.measure_matmul_peak`, before and after the timed rounds, the best
of both; both reported). The FLOPs are the matmuls the loss and its gradients need, counted
analytically (`head_flops`): one multiply-add = 2 FLOPs, the backward of a trained matmul is two
matmuls (input and weight gradients), a frozen one (the target's LM head) or one whose input
gradient is not needed (fc) is one; attention computes every score of its T x T block (nothing
is skipped for causality). The count is a property of the math, the same before and after, so a
faster step is a higher MFU.

On the CPU every figure comes twice: per second of wall-clock time, and per second of the
process's CPU time (`cpu_*`, against the peak per CPU second). On a shared machine the second is
the steadier: other jobs that take the core away stretch the wall clock, not the CPU time (they
still share the caches and the memory bandwidth). The workers call
`host_memory.keep_freed_memory()` as a training run does; `--plain-malloc` leaves glibc's malloc
as it is, to separate the code's share of a speedup from the allocator's.

`--device gpu` runs the same steps on CuPy (`benchmarks/gpu.sh` does, for a few dozen steps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "minieagle" / "pretrained" / "small"
HEADS = ("eagle1", "eagle3")
EAGLE3_AUX_LAYERS = (2, 6, 9)
EAGLE3_DRAFT_VOCAB = 1683


# ---------------------------------------------------------------------------- FLOP counts


def head_flops(head: str, config, *, batch: int, seq_len: int, ttt_steps: int, draft_vocab: int):
    """Matmul FLOPs of one training step (forward + backward) of a head on [batch, seq_len].

    EAGLE-1, per token: fc [d, 2d] (forward and weight gradient: its input is data), the decoder
    layer (q, k, v, o and the MLP: forward and both gradients, 6 N), attention over T keys (4 H hd T
    forward, twice that backward), the frozen LM head [V, d] three times (the target's logits from
    f_{t+1}, the draft's logits, and the logits' gradient into f̂).
    EAGLE-3, per token: fc [d, 3d] once; then per TTT step s the layer (q, k, v read 2d), the
    trained draft LM head [N, d] (6 N d) and the diagonal attention (T causal keys + s diagonal
    ones)."""
    d, inter = config.hidden_size, config.intermediate_size
    H, Hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    V = config.vocab_size
    mlp = 3 * d * inter
    tokens = batch * seq_len
    if head == "eagle1":
        layer = d * H * hd + 2 * d * Hkv * hd + H * hd * d + mlp
        fc = 2 * d * d
        attention = 12 * H * hd * seq_len
        per_token = 4 * fc + 6 * layer + attention + 3 * 2 * V * d
        return per_token * tokens
    layer = 2 * d * H * hd + 2 * 2 * d * Hkv * hd + H * hd * d + mlp
    fc = 3 * d * d
    per_token = 4 * fc
    for s in range(ttt_steps):
        per_token += 6 * layer + 6 * draft_vocab * d + 12 * H * hd * (seq_len + s)
    return per_token * tokens


# ---------------------------------------------------------------------------- one worker


def _setup(head_name: str, args, xp):
    """(step function, the head's parameters) for one head on seeded recorded-feature-like
    inputs, everything on the module `xp`."""
    from minieagle import backend
    from minieagle.checkpoint import load_checkpoint
    from minieagle.optim import AdamW, AdamWConfig, clip_grad_norm

    params, config, _ = load_checkpoint(TARGET, dtype=np.float32, with_tokenizer=False)
    rng = np.random.default_rng(0)
    B, T, d = args.batch, args.seq_len, config.hidden_size
    tokens = rng.integers(3, config.vocab_size, (B, T + 1))
    final = rng.standard_normal((B, T + 1, d), dtype=np.float32)  # RMSNorm output: unit scale
    final *= params["model.norm.weight"]
    put = lambda tree: backend.put(tree, xp)  # noqa: E731
    if head_name == "eagle1":
        from minieagle.heads.eagle1 import Eagle1Config, eagle1_loss, init_head

        cfg = Eagle1Config.from_target(config)
        head = put(init_head(cfg, seed=0))
        data = put((tokens[:, 1:], final[:, :-1], final[:, 1:], np.ones((B, T), dtype=bool)))

        def loss_fn(head, noise_rng):
            return eagle1_loss(head, cfg, target, *data, p_weight=0.1, noise=0.1, rng=noise_rng)
    else:
        from minieagle.heads import eagle3

        cfg = eagle3.Eagle3Config.from_target(
            config, aux_layers=EAGLE3_AUX_LAYERS, draft_vocab_size=EAGLE3_DRAFT_VOCAB
        )
        head = put(eagle3.init_head(cfg, seed=0))
        counts = rng.zipf(1.3, size=200_000) % config.vocab_size  # a skewed token distribution
        vocab = eagle3.draft_vocab_from_counts(
            np.bincount(counts, minlength=config.vocab_size), EAGLE3_DRAFT_VOCAB
        )
        vocab = eagle3.DraftVocab(put(vocab.ids), vocab.target_vocab_size)
        fused = rng.standard_normal((B, T, 3 * d), dtype=np.float32) * 3.0  # residual streams
        logits = final[:, 1:] @ params["model.embed_tokens.weight"].T  # [B, T, V], tied head
        data = put((tokens, fused, logits, np.ones((B, T), dtype=bool)))

        def loss_fn(head, noise_rng):
            return eagle3.ttt_loss(
                head, cfg, target, vocab, *data, steps=args.ttt_steps, step_weight=0.8
            )

    target = put(params)
    optimizer = AdamW(head, AdamWConfig(lr=1e-3, weight_decay=0.01))
    noise_rng = np.random.default_rng(1)

    def train_step():
        loss, _, grads = loss_fn(head, noise_rng)
        clip_grad_norm(grads, 0.5)
        optimizer.step(head, grads, lr=1e-3)
        backend.synchronize(head["fc.weight"])
        return loss

    flops = head_flops(
        head_name, config, batch=B, seq_len=T, ttt_steps=args.ttt_steps,
        draft_vocab=EAGLE3_DRAFT_VOCAB,
    )  # fmt: skip
    return train_step, flops


def worker(args) -> None:
    """Serve timing requests on stdin: a line `HEAD` runs `--steps` training steps of that head
    and answers one JSON line {"seconds": [...], "loss": ...}; the first request per head warms
    up first."""
    import minieagle
    from minieagle.backend import device_module

    try:  # what the training loop does since it exists; a --before commit may predate it
        from minieagle.host_memory import keep_freed_memory
    except ImportError:
        keep_freed_memory = None
    if keep_freed_memory is not None and not args.plain_malloc:
        keep_freed_memory()
    xp = device_module(args.device)
    steps, flops = {}, {}
    print(json.dumps({"ready": str(Path(minieagle.__file__).parent)}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name not in steps:
            steps[name], flops[name] = _setup(name, args, xp)
            for _ in range(args.warmup):
                steps[name]()
        seconds, cpu_seconds, loss = [], [], None
        for _ in range(args.steps):
            start, cpu_start = time.perf_counter(), time.process_time()
            loss = steps[name]()
            seconds.append(time.perf_counter() - start)
            cpu_seconds.append(time.process_time() - cpu_start)
        answer = {"seconds": seconds, "cpu_seconds": cpu_seconds, "loss": float(loss)}
        print(json.dumps({**answer, "flops": flops[name]}), flush=True)


# ---------------------------------------------------------------------------- the driver


class _Worker:
    def __init__(self, label: str, pythonpath: Path, args):
        self.label = label
        env = {
            **os.environ,
            "PYTHONPATH": f"{pythonpath}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        command = [
            sys.executable, __file__, "--worker", "--device", args.device, "--batch",
            str(args.batch), "--seq-len", str(args.seq_len), "--ttt-steps", str(args.ttt_steps),
            "--warmup", str(args.warmup), "--steps", str(args.steps),
        ] + (["--plain-malloc"] if args.plain_malloc else [])  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        self.source = json.loads(self.process.stdout.readline())["ready"]

    def run(self, head: str) -> dict:
        self.process.stdin.write(head + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the {self.label} worker ({self.source}) died running {head}")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def _extract(commit: str, into: Path) -> Path:
    """The package `minieagle/` of `commit` under `into` (git archive: no work tree touched)."""
    archive = subprocess.run(
        ["git", "archive", commit, "minieagle"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _summary(timing: dict, tokens: int, flops: int, peak: dict) -> dict:
    """Seconds per step, tokens/s, GFLOP/s and MFU from wall-clock time, and the same per second
    of this process's CPU time (`cpu_*`: robust to the machine's other jobs taking the core
    away, not to their sharing its caches and memory bandwidth), each MFU against the peak
    measured with the same clock."""
    from minieagle.costs import spread

    out = {}
    for clock, prefix in (("seconds", ""), ("cpu_seconds", "cpu_")):
        if prefix + "peak_gflops" not in peak:  # on a GPU the host's CPU time says little
            continue
        seconds = timing[clock]
        gflops = [flops / s / 1e9 for s in seconds]
        out[prefix + "step_s"] = spread(seconds)
        out[prefix + "tokens_per_s"] = spread([tokens / s for s in seconds])
        out[prefix + "gflops"] = spread(gflops)
        out[prefix + "mfu"] = spread([g / peak[prefix + "peak_gflops"] for g in gflops])
    return out


def _matmul_peak(device: str, best: dict | None) -> dict:
    """The float32 matmul peak of the device (`peak_gflops`; on the CPU also `cpu_peak_gflops`,
    per second of CPU time), the best of this measurement and `best`: the machine's other jobs
    can only lower a measurement."""
    if device == "gpu":
        from minieagle.backend import device_module

        peak = _gpu_matmul_peak(device_module("gpu"))
    else:
        from minieagle.bench import measure_matmul_peak

        peak = measure_matmul_peak(repeats=7)
        peak.pop("by_size")
    if best is None:
        return peak
    return {key: max(value, best[key]) for key, value in peak.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", choices=(*HEADS, "both"), default="both")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--before", default="", help="a commit to measure beside the work tree")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--ttt-steps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per worker and head")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds, alternating")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per round")
    parser.add_argument("--out", default="", help="write the results as JSON here")
    parser.add_argument(
        "--plain-malloc",
        action="store_true",
        help="leave glibc's malloc as it is (no host_memory.keep_freed_memory): the code's own "
        "share of a speedup",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    from minieagle.bench import machine_info

    heads = HEADS if args.head == "both" else (args.head,)
    peak = _matmul_peak(args.device, None)
    with tempfile.TemporaryDirectory() as tmp:
        workers = [_Worker("after", ROOT, args)]
        if args.before:
            workers.insert(0, _Worker("before", _extract(args.before, Path(tmp)), args))
        timings = {(w.label, h): {"seconds": [], "cpu_seconds": []} for w in workers for h in heads}
        flops, losses = {}, {}
        for round_ in range(args.repeats):
            for head in heads:
                for w in workers if round_ % 2 == 0 else workers[::-1]:
                    answer = w.run(head)
                    for clock in ("seconds", "cpu_seconds"):
                        timings[(w.label, head)][clock] += answer[clock]
                    flops[head], losses[(w.label, head)] = answer["flops"], answer["loss"]
                    shown = " ".join(f"{s:.3f}" for s in answer["seconds"])
                    print(f"round {round_}: {head} {w.label}: {shown} s/step", flush=True)
        for w in workers:
            w.close()
    peak = _matmul_peak(args.device, peak)
    tokens = args.batch * args.seq_len
    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    results = {
        "command": (  # the BLAS setting as it was, not as the docstring advises
            (f"OPENBLAS_NUM_THREADS={blas} " if blas is not None else "")
            + "python benchmarks/head_train_step.py "
            + " ".join(sys.argv[1:] if argv is None else argv)
        ),
        "machine": machine_info(),
        "device": args.device,
        "matmul_peak": peak,
        "shape": {"batch": args.batch, "seq_len": args.seq_len, "ttt_steps": args.ttt_steps},
        "before_commit": args.before or None,
        "keep_freed_memory": not args.plain_malloc,
        "heads": {},
    }
    for head in heads:
        entry = {"flops_per_step": flops[head], "flops_per_token": flops[head] / tokens}
        for w in workers:
            summary = _summary(timings[(w.label, head)], tokens, flops[head], peak)
            entry[w.label] = {**summary, "last_loss": losses[(w.label, head)]}
        if args.before:
            before, after = entry["before"], entry["after"]
            entry["speedup"] = before["step_s"]["median"] / after["step_s"]["median"]
            if "cpu_step_s" in after:
                entry["cpu_speedup"] = (
                    before["cpu_step_s"]["median"] / after["cpu_step_s"]["median"]
                )
        results["heads"][head] = entry
    _print(results)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _gpu_matmul_peak(cp, n: int = 8192, repeats: int = 5) -> dict:
    """float32 GFLOP/s of [n, n] @ [n, n] on the GPU: the best of `repeats`."""
    a = cp.random.standard_normal((n, n), dtype=cp.float32)
    b = cp.random.standard_normal((n, n), dtype=cp.float32)
    a @ b
    cp.cuda.get_current_stream().synchronize()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        cp.cuda.get_current_stream().synchronize()
        rates.append(2 * n**3 / (time.perf_counter() - start) / 1e9)
    return {"peak_gflops": max(rates)}


def _print(results: dict) -> None:
    peak = results["matmul_peak"]
    per_cpu = f", {peak['cpu_peak_gflops']:.1f} per CPU second" if "cpu_peak_gflops" in peak else ""
    print(f"float32 matmul peak ({results['device']}): {peak['peak_gflops']:.1f} GFLOP/s{per_cpu}")
    for head, entry in results["heads"].items():
        print(f"{head}: {entry['flops_per_token'] / 1e6:.2f} MFLOP/token")
        for label in ("before", "after"):
            for clock in ("", "cpu_"):
                if clock + "step_s" not in entry.get(label, {}):
                    continue
                e = entry[label]
                s, tps, mfu = e[clock + "step_s"], e[clock + "tokens_per_s"], e[clock + "mfu"]
                print(
                    f"  {label:<6} {clock or 'wall':<4} {s['median']:.3f} s/step "
                    f"[{s['min']:.3f}..{s['max']:.3f}]  {tps['median']:,.0f} tokens/s  "
                    f"MFU {100 * mfu['median']:.1f} % "
                    f"[{100 * mfu['min']:.1f}..{100 * mfu['max']:.1f}]"
                )
        if "speedup" in entry:
            cpu = f", {entry['cpu_speedup']:.2f}x (CPU time)" if "cpu_speedup" in entry else ""
            print(f"  speedup {entry['speedup']:.2f}x (wall){cpu}")


if __name__ == "__main__":
    raise SystemExit(main())
