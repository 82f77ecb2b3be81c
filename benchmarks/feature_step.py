"""One training step of an EAGLE-3 head on recorded features, as `minieagle train --data
features` runs it, made two ways side by side: through the target's whole LM head, and
through its draft rows only with the argmax and logsumexp the shards record
(`feature_cache.TARGET_STATS`, since 2026-12-04).

    OPENBLAS_NUM_THREADS=1 python benchmarks/feature_step.py \\
        --out docs/results/feature-step-smollm2.json

A step is what the training loop does with a batch from a `FeaturePool`: the batch made from
the recorded hidden states (`Eagle3Recipe.batch_from_hidden`: fused features, and the target's
logits at every position: [B, L, d] x [d, V] for the whole head, [d, N] for the draft rows), the
training-time-test loss and its gradients, gradient clipping and the AdamW update. The head is
the shipped `smollm2-eagle3` (default) on SmolLM2-135M-Instruct; the features are seeded random
arrays of the recorded shapes (float16-rounded, the final ones scaled by the final norm), and
the statistics are computed from them, so both ways compute the same loss (checked: the losses
are reported). The two ways alternate, repeat after repeat, in one process: both see the same
machine. Every figure is a median with its spread [min..max].

tokens/s = B L / (seconds per step). MFU = the matmul FLOPs the step needs / seconds / the
core's measured float32 matmul peak (`minieagle.bench.measure_matmul_peak`): the head's
forward and backward (`head_flops`) and the target's logits on the draft ids (2 B L d N); the
whole head's extra 2 B L d (V - N) is not needed, so the same count serves both ways and a
faster step is a higher MFU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from minieagle import layers, model
from minieagle.bench import machine_info, measure_matmul_peak
from minieagle.checkpoint import load_checkpoint
from minieagle.heads import eagle3
from minieagle.optim import AdamW, AdamWConfig, clip_grad_norm
from minieagle.train_eagle import Eagle3Recipe, EagleTrainConfig

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MINIEAGLE_CACHE", Path.home() / ".cache" / "minieagle"))


def head_flops(cfg: eagle3.Eagle3Config, *, batch: int, seq_len: int, ttt_steps: int) -> int:
    """Matmul FLOPs of one EAGLE-3 training step (forward + backward) on [batch, seq_len],
    and the target's logits on the draft ids: fc [d, kd] forward and weight gradient once;
    per TTT step the layer (q, k, v read 2d; forward and both gradients), the trained draft
    LM head [N, d] and the diagonal attention over T causal keys and s diagonal ones."""
    layer = cfg.layer
    d, inter = layer.hidden_size, layer.intermediate_size
    H, Hkv, hd = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim
    N = cfg.draft_vocab_size
    per_token = 4 * cfg.num_features * d * d + 2 * N * d  # fc, and the target's draft logits
    qkvo = 2 * d * H * hd + 2 * 2 * d * Hkv * hd + H * hd * d
    for s in range(ttt_steps):
        per_token += 6 * (qkvo + 3 * d * inter) + 6 * N * d + 12 * H * hd * (seq_len + s)
    return per_token * batch * seq_len


def spread(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(CACHE / "models" / "smollm2-135m-instruct"))
    parser.add_argument("--head", default=str(ROOT / "minieagle" / "pretrained" / "smollm2-eagle3"))
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--ttt-steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="write the result here (JSON)")
    args = parser.parse_args(argv)
    params, config, _ = load_checkpoint(args.model, dtype=np.float32)
    cfg = EagleTrainConfig(
        target=args.model, head="eagle3", out_dir="unused", init_from=args.head,
        seq_len=args.seq_len, batch_size=args.batch_size, ttt_steps=args.ttt_steps,
    )  # fmt: skip
    recipe = Eagle3Recipe(cfg, params, config, [])
    head = recipe.init_head(0)
    optimizer = AdamW(head, AdamWConfig(lr=1e-4, weight_decay=0.0))
    rng = np.random.default_rng(0)
    B, W, d = args.batch_size, args.seq_len + 1, config.hidden_size
    windows = rng.integers(3, config.vocab_size, (B, W))
    hidden = {
        key: rng.standard_normal((B, W, d), dtype=np.float32).astype(np.float16).astype(np.float32)
        for key in recipe.feature_keys
    }  # as FeaturePool.batch returns them: float16 on disk, float32 in the batch
    for key in recipe.head_cfg.aux_layers:
        hidden[key] *= 3.0  # residual streams
    hidden["final"] *= params["model.norm.weight"]  # after the final norm
    whole = hidden["final"] @ model.lm_head_weight(params).T  # [B, W, V]
    stats = (np.argmax(whole, axis=-1), layers.logsumexp(whole))
    del whole

    def step(with_stats: bool) -> float:
        batch = recipe.batch_from_hidden(windows, hidden, stats if with_stats else None)
        loss, _, grads = recipe.loss(head, batch, rng)
        clip_grad_norm(grads, 0.5)
        optimizer.step(head, grads, lr=0.0)  # lr 0: every repeat trains the same head
        return loss

    ways = {"whole LM head": False, "draft rows + recorded stats": True}
    seconds = {name: [] for name in ways}
    losses = {name: step(flag) for name, flag in ways.items()}  # warm-up, and the losses
    peaks = [measure_matmul_peak()]
    for r in range(args.repeats):
        for name, flag in list(ways.items())[:: 1 if r % 2 == 0 else -1]:
            start = time.perf_counter()
            step(flag)
            seconds[name].append(time.perf_counter() - start)
        done = ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items())
        print(f"repeat {r + 1}/{args.repeats}: {done}", file=sys.stderr)
    peaks.append(measure_matmul_peak())
    peak_flops = max(p["peak_gflops"] for p in peaks) * 1e9
    flops = head_flops(recipe.head_cfg, batch=B, seq_len=args.seq_len, ttt_steps=args.ttt_steps)
    result = {
        "model": args.model, "head": args.head, "batch_size": B, "seq_len": args.seq_len,
        "ttt_steps": args.ttt_steps, "repeats": args.repeats,
        "draft_vocab_size": recipe.head_cfg.draft_vocab_size, "vocab_size": config.vocab_size,
        "head_intermediate_size": recipe.head_cfg.layer.intermediate_size,
        "flops_per_step": flops, "matmul_peak_flops": peaks, "machine": machine_info(),
        "threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "losses": losses, "ways": {},
    }  # fmt: skip
    for name, values in seconds.items():
        result["ways"][name] = {
            "seconds": spread(values),
            "tokens_per_s": spread([B * args.seq_len / v for v in values]),
            "mfu": spread([flops / v / peak_flops for v in values]),
        }
    t = {name: way["seconds"]["median"] for name, way in result["ways"].items()}
    names = list(ways)
    result["speedup"] = spread([a / b for a, b in zip(seconds[names[0]], seconds[names[1]],
                                                      strict=True)])  # fmt: skip
    for name in names:
        way = result["ways"][name]
        low, high = way["seconds"]["min"], way["seconds"]["max"]
        print(f"{name}: {t[name]:.2f} s/step [{low:.2f}..{high:.2f}], "
              f"{way['tokens_per_s']['median']:.0f} tokens/s, MFU {way['mfu']['median']:.1%}, "
              f"loss {losses[name]:.6f}")  # fmt: skip
    print(f"speedup {result['speedup']['median']:.2f}x "
          f"[{result['speedup']['min']:.2f}..{result['speedup']['max']:.2f}]")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
