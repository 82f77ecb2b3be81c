"""`minieagle bench`: the machine's matmul peak, vanilla decoding ms/token, training tokens/s, MFU,
and what one decoder layer costs against a whole target forward.

Machines are shared and noisy, so every number is a median over repeats with its spread (min, max),
and every ratio (MFU, layer / forward) is taken from measurements made side by side in this one
process. Tests never time anything; this module is where speed is measured.

FLOP accounting (one multiply-add = 2 FLOPs; norms, softmax, RoPE, SwiGLU's gating and the
optimizer are O(parameters) or O(d) per token and left out, as in the PaLM MFU convention):
- N = matmul parameters: per layer q, k, v, o and the three MLP matrices, plus the LM head [V, d].
  The embedding is a row lookup, not a matmul, so a tied head counts its matrix once.
- One token's forward: 2 N for the matmuls, plus attention against S visible positions in each of L
  layers: q @ k^T and probs @ v are H * hd * S multiply-adds each, so 4 L H hd S.
- Training a token in a sequence of T: the backward of a matmul is two matmuls of the same size
  (input and weight gradients), so 2 N + 4 N = 6 N. Our attention computes the full T x T scores and
  masks them (nothing is skipped for causality), so its forward is 4 L H hd T per token and its
  backward (dprobs, dv, dq, dk) twice that: 12 L H hd T, which is 12 L T d when H hd = d.
MFU = achieved FLOP/s / the measured float32 matmul peak of this machine (both reported).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from minieagle import layers, model
from minieagle.config import LlamaConfig
from minieagle.costs import measure_verify_cost, spread
from minieagle.data import OOD_FILE, ood_records
from minieagle.errors import InvalidInputError, MissingFileError
from minieagle.generate import generate
from minieagle.kvcache import KVCache
from minieagle.optim import AdamW, clip_grad_norm

LAYER_COST_TARGET = 1 / 12  # DESIGN: one decoder layer costs at most ~1/12 of a target forward


# ---------------------------------------------------------------------------- FLOP counts


def matmul_params(config: LlamaConfig) -> int:
    """N: weights used in matmuls per token (attention and MLP projections, and the LM head)."""
    d, inter = config.hidden_size, config.intermediate_size
    q_width = config.num_attention_heads * config.head_dim
    kv_width = config.num_key_value_heads * config.head_dim
    per_layer = d * q_width + 2 * d * kv_width + q_width * d + 3 * d * inter
    return config.num_hidden_layers * per_layer + config.vocab_size * d


def forward_flops_per_token(config: LlamaConfig, visible: int) -> int:
    """FLOPs of one token's forward when it attends to `visible` positions (itself included)."""
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
    return 2 * matmul_params(config) + attention * visible


def train_flops_per_token(config: LlamaConfig, seq_len: int) -> int:
    """FLOPs of forward + backward per token of a [B, seq_len] batch: 6 N + 12 L H hd T."""
    attention = 12 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
    return 6 * matmul_params(config) + attention * seq_len


# ---------------------------------------------------------------------------- measurements


def machine_info() -> dict:
    """CPU count, load, the thread variables BLAS reads, and the BLAS numpy was built against.

    On a shared machine, OpenBLAS threads that outnumber the idle cores wait on each other:
    OPENBLAS_NUM_THREADS=1 can then be several times faster, so it is reported with the results."""
    info = {"cpu_count": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):  # runnable processes: above cpus_usable, expect noise
        info["load_average_1min"] = round(os.getloadavg()[0], 2)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        info[var] = os.environ.get(var, "unset")
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # the layout of show_config is not a stable API
        info["blas"] = "unknown"
    return info


def measure_matmul_peak(sizes=(512, 1024), repeats: int = 5, flops_per_timing=2e9) -> dict:
    """float32 GFLOP/s of square matmuls [n, n] @ [n, n] (2 n^3 FLOPs each).

    The peak is the best repeat of the best size: the denominator of MFU is what this machine can
    do at its best, so noise from other processes should not lower it. Medians are reported too.
    `cpu_peak_gflops` is the same per second of this process's CPU time, the denominator of an
    MFU timed by CPU time (on a shared machine, where other jobs take the core away)."""
    rng = np.random.default_rng(0)
    by_size, cpu_peak = {}, 0.0
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        out = np.empty((n, n), dtype=np.float32)
        np.matmul(a, b, out=out)  # warm-up: threads started, pages touched
        inner = max(1, int(flops_per_timing // (2 * n**3)))
        rates = []
        for _ in range(repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(inner):
                np.matmul(a, b, out=out)
            rates.append(2 * n**3 * inner / (time.perf_counter() - start) / 1e9)
            cpu_seconds = max(time.process_time() - cpu_start, 1e-9)
            cpu_peak = max(cpu_peak, 2 * n**3 * inner / cpu_seconds / 1e9)
        by_size[n] = {"best_gflops": max(rates), **spread(rates)}
    peak = max(entry["best_gflops"] for entry in by_size.values())
    return {"peak_gflops": peak, "cpu_peak_gflops": cpu_peak, "by_size": by_size}


def heldout_prompts(tokenizer, per_corpus: int = 2, length: int = 32) -> list[tuple[str, list]]:
    """(corpus, ids): the first `length` tokens (<bos> included) of the first `per_corpus`
    documents of each test split. Without a tokenizer, seeded random ids after <bos>."""
    if tokenizer is None:
        rng = np.random.default_rng(0)
        return [("random", [1] + rng.integers(3, 259, length - 1).tolist())] * (2 * per_corpus)
    from minieagle.data import load_split

    prompts = []
    for corpus in ("prose", "code"):
        documents = [d for d in load_split(corpus, "test") if len(d.text) >= 8 * length]
        for document in documents[:per_corpus]:
            ids = tokenizer.encode(document.text[: 8 * length], add_bos=True)[:length]
            prompts.append((corpus, ids))
    return prompts


OOD_KINDS = ("ood-prose", "ood-code")
PROMPT_SETS = ("heldout", "ood", "both")


def ood_prompts(tokenizer, per_kind: int = 2, length: int = 32) -> list[tuple[str, list]]:
    """(kind, ids), kind "ood-prose" or "ood-code": the first `length` tokens (<bos> included) of
    the first `per_kind` passages of each kind in `data/ood_prompts.jsonl`, prose first.

    The passages (24 of each kind) come from numpy, pytest, click and networkx docstrings and
    source, share no 59-character run with either training corpus, and encode to at least 64
    tokens; the file lists the packages in turn, so a small `per_kind` still mixes them. Unlike
    `heldout_prompts` there is no random fallback: a model without a tokenizer cannot read them."""
    if tokenizer is None:
        raise InvalidInputError(
            "the out-of-domain prompts are text, and this model has no tokenizer; "
            "use the 'heldout' prompt set (random ids) or a model with a tokenizer.json"
        )
    records = ood_records()
    prompts = []
    for kind in OOD_KINDS:
        texts = [r["text"] for r in records if f"ood-{r['kind']}" == kind]
        if not 1 <= per_kind <= len(texts):
            raise InvalidInputError(
                f"per_kind={per_kind} is outside [1, {len(texts)}]: {OOD_FILE.name} holds "
                f"{len(texts)} {kind} prompts; pass a count such as 2"
            )
        for text in texts[:per_kind]:
            ids = tokenizer.encode(text, add_bos=True)[:length]
            if len(ids) < length:
                raise InvalidInputError(
                    f"length={length} exceeds the {len(ids)} tokens (<bos> included) of an "
                    f"{kind} prompt; pass a length of at most {len(ids)}, such as 32"
                )
            prompts.append((kind, ids))
    return prompts


_EDIT_FILE = Path(__file__).resolve().parent / "data" / "edit_prompts.jsonl"


@functools.cache
def _edit_texts() -> tuple[str, ...]:
    """The prompt texts of `data/edit_prompts.jsonl`, in file order."""
    if not _EDIT_FILE.is_file():
        raise MissingFileError(
            f"{_EDIT_FILE} is missing; reinstall minieagle or rebuild it with "
            "`python -m minieagle.data.build_edit_prompts`"
        )
    with _EDIT_FILE.open(encoding="utf-8") as lines:
        return tuple(json.loads(line)["text"] for line in lines if line.strip())


def edit_prompts(tokenizer, count: int | None = None) -> list[tuple[str, list]]:
    """("edit", ids): the first `count` (default all, 8) "edit this code" prompts of
    `data/edit_prompts.jsonl`, whole (<bos> included): a held-out stdlib function, a comment
    asking for it back with one parameter renamed, and the renamed first line, so the
    continuation mostly repeats the prompt (PROVENANCE.md, data/build_edit_prompts.py). Not cut
    to a length: the function is what the continuation copies."""
    if tokenizer is None:
        raise InvalidInputError(
            "the edit prompts are text, and this model has no tokenizer; use the 'heldout' "
            "prompt set (random ids) or a model with a tokenizer.json"
        )
    texts = _edit_texts()
    count = len(texts) if count is None else count
    if not 1 <= count <= len(texts):
        raise InvalidInputError(
            f"count={count} is outside [1, {len(texts)}]: {_EDIT_FILE.name} holds {len(texts)} "
            "prompts; pass a count such as 4"
        )
    return [("edit", tokenizer.encode(text, add_bos=True)) for text in texts[:count]]


def prompt_set(tokenizer, name: str, per_kind: int = 2, length: int = 32) -> list[tuple[str, list]]:
    """(kind, ids) of the prompt set `name`: "heldout" (`heldout_prompts`, kinds "prose" and
    "code", `per_kind` per corpus), "ood" (`ood_prompts`, kinds "ood-prose" and "ood-code") or
    "both" (the held-out prompts, then the out-of-domain ones); every one has `length` ids. Or
    "edit" (`edit_prompts`, kind "edit", 2 * `per_kind` whole prompts, `length` ignored)."""
    names = (*PROMPT_SETS, "edit")  # "edit": whole prompts, not windows of `length` tokens
    if name not in names:
        raise InvalidInputError(f"prompt set {name!r} is unknown; pass one of {names}")
    prompts = []
    if name in ("heldout", "both"):
        prompts += heldout_prompts(tokenizer, per_corpus=per_kind, length=length)
    if name in ("ood", "both"):
        prompts += ood_prompts(tokenizer, per_kind=per_kind, length=length)
    if name == "edit":
        prompts += edit_prompts(tokenizer, count=min(2 * per_kind, len(_edit_texts())))
    return prompts


def measure_decode(
    params, config: LlamaConfig, prompts, *, new_tokens: int, repeats: int, fast: bool = True
) -> dict:
    """Greedy vanilla decoding with the KV cache, `new_tokens` per prompt, end-of-text ignored;
    on the fast path (`minieagle.inference`), or the readable `model.forward` with fast=False.

    ms/token is decode time / tokens: each cycle of the loop is one target forward of the last
    token (the root) and emits one token. The prefill covers the prompt but its last token. One
    pass over all prompts warms up first; each repeat is one pass over all prompts."""
    if new_tokens < 1:
        raise InvalidInputError(f"new_tokens={new_tokens} is below 1; pass a count such as 64")

    def one_pass():
        seconds = prefill = forwards = flops = 0
        for ids in prompts:
            result = generate(
                params, config, ids, max_new_tokens=new_tokens, stop_at_eos=False, fast=fast
            )
            decoded = result.target_forwards
            # forward i feeds the root at position len(ids) - 1 + i, which sees len(ids) + i
            flops += sum(forward_flops_per_token(config, len(ids) + i) for i in range(decoded))
            seconds += result.decode_seconds
            prefill += result.prefill_seconds
            forwards += decoded
        return 1e3 * seconds / forwards, 1e3 * prefill / len(prompts), flops / seconds / 1e9

    one_pass()
    runs = [one_pass() for _ in range(repeats)]
    mean_prompt = sum(len(ids) for ids in prompts) / len(prompts)
    return {
        "prompts": len(prompts),
        "mean_prompt_tokens": mean_prompt,
        "new_tokens": new_tokens,
        "ms_per_token": spread([r[0] for r in runs]),
        "prefill_ms": spread([r[1] for r in runs]),
        "gflops": spread([r[2] for r in runs]),
        "flops_per_token_at_prompt": forward_flops_per_token(config, round(mean_prompt)),
    }


COST_SIZES = (1, 2, 4, 8, 16, 32, 64)  # the verification sizes of a cost curve


def measure_cost_curve(
    params, config: LlamaConfig, prompts, *, new_tokens: int, repeats: int, sizes=COST_SIZES
) -> dict:
    """The two numbers that decide which draft trees can pay on this machine: vanilla decoding
    over `prompts` ({"decode": `measure_decode`}) and one verification forward of N tokens
    after the first prompt ({"verify": `measure_verify_cost`}, at least 5 repeats), both on
    the fast path the methods decode with."""
    return {
        "decode": measure_decode(params, config, prompts, new_tokens=new_tokens, repeats=repeats),
        "verify": measure_verify_cost(
            params, config, prompts[0], sizes=sizes, repeats=max(5, repeats), fast=True
        ),
    }


def format_cost_curve(results: dict) -> str:
    """Lines for `measure_cost_curve`'s results: ms/token, then cost(N) / cost(1)."""
    ms = results["decode"]["ms_per_token"]
    lines = [f"vanilla decoding: {ms['median']:.1f} ms/token [{ms['min']:.1f}..{ms['max']:.1f}]"]
    for n, ratio in results["verify"]["relative_to_one"].items():
        lines.append(f"verify N = {n:>2}: {ratio:.2f} x N = 1")
    return "\n".join(lines)


def measure_layer_ratio(
    params, config: LlamaConfig, prompt, *, repeats: int = 7, inner: int = 20
) -> dict:
    """Time of decoder layer 0 vs the whole target forward for one decoded token after `prompt`
    (cached), timed alternately in each repeat. The forward also pays for the embedding, the RoPE
    tables, the final norm and the LM head: the full price a draft step is compared against."""
    cache = KVCache.for_model(config, params, capacity=len(prompt) + 1)
    model.forward(params, config, np.asarray(prompt), cache=cache)
    past = cache.length
    token = np.asarray([prompt[-1]])
    x = params["model.embed_tokens.weight"][token][None]  # [1, 1, d]
    cos, sin = layers.rope_tables(np.asarray([past]), config.head_dim, config.rope_theta, x.dtype)
    mask = model.causal_mask(past, 1)
    prefix = model.layer_prefix(0)

    def whole_forward():
        cache.crop(past)
        model.forward(params, config, token, cache=cache)

    def one_layer():
        cache.crop(past)
        model.decoder_layer_forward(params, prefix, config, x, cos, sin, mask, cache, 0)

    def timed(fn) -> float:
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return 1e3 * (time.perf_counter() - start) / inner

    timed(whole_forward), timed(one_layer)  # warm-up
    forward_ms, layer_ms = [], []
    for _ in range(repeats):
        forward_ms.append(timed(whole_forward))
        layer_ms.append(timed(one_layer))
    ratios = [layer / whole for layer, whole in zip(layer_ms, forward_ms, strict=True)]
    return {
        "forward_ms": spread(forward_ms),
        "layer_ms": spread(layer_ms),
        "layer_over_forward": spread(ratios),
        "target": LAYER_COST_TARGET,
        "meets_target": statistics.median(ratios) <= LAYER_COST_TARGET,
    }


def measure_training(
    params,
    config: LlamaConfig,
    *,
    peak_gflops: float,
    batch_size: int = 16,
    seq_len: int = 256,
    steps: int = 3,
    warmup: int = 1,
) -> dict:
    """Tokens/s and MFU of one training step (loss_and_grads + clip_grad_norm + AdamW) on random
    tokens, float32, on a copy of `params`. seq_len is capped at the model's context."""
    seq_len = min(seq_len, config.max_position_embeddings)
    params = {name: value.astype(np.float32, copy=True) for name, value in params.items()}
    optimizer = AdamW(params)
    rng = np.random.default_rng(0)
    seconds = []
    for step in range(warmup + steps):
        inputs = rng.integers(0, config.vocab_size, (batch_size, seq_len))
        targets = rng.integers(0, config.vocab_size, (batch_size, seq_len))
        start = time.perf_counter()
        _, grads = model.loss_and_grads(params, config, inputs, targets)
        clip_grad_norm(grads, 1.0)
        optimizer.step(params, grads, lr=1e-4)
        if step >= warmup:
            seconds.append(time.perf_counter() - start)
    tokens = batch_size * seq_len
    flops_per_token = train_flops_per_token(config, seq_len)
    gflops = [flops_per_token * tokens / s / 1e9 for s in seconds]
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "step_s": spread(seconds),
        "tokens_per_s": spread([tokens / s for s in seconds]),
        "flops_per_token": flops_per_token,
        "gflops": spread(gflops),
        "mfu": spread([g / peak_gflops for g in gflops]),
    }


# ---------------------------------------------------------------------------- the command


def _peak_rss_mb() -> float | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _row(label: str, stats: dict, unit: str, scale: float = 1.0, digits: int = 2) -> str:
    m, lo, hi = (scale * stats[k] for k in ("median", "min", "max"))
    return f"  {label:<26} {m:>10.{digits}f} {unit:<9} [{lo:.{digits}f} .. {hi:.{digits}f}]"


def _print_report(r: dict) -> None:
    m, peak, dec, lay, tr = r["model"], r["matmul"], r["decode"], r["layer"], r["training"]
    print(
        f"minieagle bench: {m['path']}: {m['layers']} layers, d={m['hidden_size']}, "
        f"{m['params'] / 1e6:.2f}M params ({m['matmul_params'] / 1e6:.2f}M in matmuls)"
    )
    print(f"machine: {json.dumps(r['machine'])}")
    print("  (median [min .. max] over repeats)")
    for n, entry in peak["by_size"].items():
        print(_row(f"matmul {n}x{n} float32", entry, "GFLOP/s", digits=1))
    print(f"  {'matmul peak (best)':<26} {peak['peak_gflops']:>10.1f} GFLOP/s")
    print(
        f"decoding: {dec['prompts']} prompts of ~{dec['mean_prompt_tokens']:.0f} tokens, "
        f"{dec['new_tokens']} new tokens, greedy, KV cache"
    )
    print(_row("ms/token", dec["ms_per_token"], "ms"))
    print(_row("ms/token, readable path", r["decode_readable"]["ms_per_token"], "ms"))
    print(_row("prefill", dec["prefill_ms"], "ms"))
    print(_row("achieved", dec["gflops"], "GFLOP/s", digits=3))
    print(f"  {'FLOPs/token':<26} {dec['flops_per_token_at_prompt'] / 1e6:>10.2f} MFLOP")
    print(f"layer cost (one decoded token, cached; target <= {lay['target']:.4f}):")
    print(_row("whole forward", lay["forward_ms"], "ms", digits=3))
    print(_row("decoder layer 0", lay["layer_ms"], "ms", digits=3))
    print(_row("layer / forward", lay["layer_over_forward"], "", digits=4))
    for key, path in (("verify", "fast path"), ("verify_readable", "readable path")):
        ver = r[key]
        print(
            f"verification forward of N tree tokens after {ver['prompt_tokens']} cached ones "
            f"({path}):"
        )
        for n, stats in ver["ms"].items():
            label = f"N = {n} ({ver['relative_to_one'][n]:.2f}x N = 1)"
            print(_row(label, stats, "ms", digits=3))
    print(f"training: batch {tr['batch_size']} x seq {tr['seq_len']}, random tokens, AdamW")
    print(_row("tokens/s", tr["tokens_per_s"], "tok/s", digits=0))
    print(_row("step", tr["step_s"], "s"))
    print(f"  {'FLOPs/token':<26} {tr['flops_per_token'] / 1e6:>10.2f} MFLOP")
    print(_row("achieved", tr["gflops"], "GFLOP/s"))
    print(_row("MFU", tr["mfu"], "%", scale=100, digits=1))
    if r["peak_rss_mb"] is not None:
        print(f"peak resident memory: {r['peak_rss_mb']:.0f} MB")


def run_bench(args) -> dict:
    """Measure the model at `args.model` (float32): matmul peak, decoding, layer cost, training.
    Prints a table; writes JSON to `args.out` if given. Returns the results."""
    from minieagle.checkpoint import load_checkpoint

    if args.repeats < 1:
        raise InvalidInputError(f"repeats={args.repeats} is below 1; pass a count such as 5")
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    from minieagle import inference

    prepared = inference.prepare(params, config)  # once for every fast-path measurement
    prompts = [ids for _, ids in heldout_prompts(tokenizer)]
    matmul = measure_matmul_peak()
    results = {
        "model": {
            "path": str(args.model),
            "layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size,
            "params": sum(int(p.size) for p in params.values()),
            "matmul_params": matmul_params(config),
        },
        "machine": machine_info(),
        "matmul": matmul,
        "decode": measure_decode(
            prepared, config, prompts, new_tokens=args.new_tokens, repeats=args.repeats
        ),
        "decode_readable": measure_decode(
            params, config, prompts, new_tokens=args.new_tokens, repeats=args.repeats, fast=False
        ),
        "layer": measure_layer_ratio(params, config, prompts[0], repeats=max(5, args.repeats)),
        "verify": measure_verify_cost(
            prepared, config, prompts[0], sizes=COST_SIZES, repeats=max(5, args.repeats), fast=True
        ),
        "verify_readable": measure_verify_cost(
            params, config, prompts[0], sizes=COST_SIZES, repeats=max(5, args.repeats)
        ),
        "training": measure_training(params, config, peak_gflops=matmul["peak_gflops"]),
    }
    results["peak_rss_mb"] = _peak_rss_mb()
    _print_report(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results
