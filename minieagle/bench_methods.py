"""`minieagle bench --suite methods`: decoding methods side by side on held-out prompts.

For each sampling setting (T = 0 and T = 1), every method decodes every prompt, repeated; the
methods run interleaved (the order rotates each repeat) so that machine noise hits them alike.
Reported per method and prompt kind (prose, code):
- tau: tokens emitted per target forward, bonus included (vanilla = 1.00);
- alpha[n]: acceptance rate at draft depth n+1 given all earlier drafts were accepted;
- speedup: mean tokens/s of the method / mean tokens/s of vanilla, one ratio per repeat over the
  same prompts, median and [min, max] over repeats;
- efficiency: speedup / tau;
- at T = 0, the fraction of prompts whose output differs from vanilla's (float32 near-ties; in
  float64 greedy outputs are equal, which the tests check).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from minieagle.config import LlamaConfig
from minieagle.errors import InvalidInputError
from minieagle.generate import emitted_per_forward, generate
from minieagle.sampling import SamplingParams

SETTINGS = {"T=0": SamplingParams(), "T=1": SamplingParams(temperature=1.0)}


def _spread(values) -> dict:
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare_methods(
    params,
    config: LlamaConfig,
    methods: dict[str, Callable],
    prompts,
    *,
    new_tokens: int = 64,
    repeats: int = 3,
    max_depth: int = 5,
) -> dict:
    """methods: name -> factory returning a fresh drafter (or None for vanilla); "vanilla" must
    be one of them. prompts: list of (kind, ids). Returns nested results (see module doc)."""
    if "vanilla" not in methods:
        raise InvalidInputError("methods must include 'vanilla', the baseline of every speedup")
    names = list(methods)
    results = {}
    for label, sampling in SETTINGS.items():
        runs = {name: [] for name in names}  # (repeat, kind, prompt index, result)
        for name in names:  # warm-up
            generate(
                params,
                config,
                prompts[0][1],
                drafter=methods[name](),
                max_new_tokens=8,
                sampling=sampling,
                seed=0,
                stop_at_eos=False,
            )
        for repeat in range(repeats):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for index, (kind, ids) in enumerate(prompts):
                for name in order:
                    result = generate(
                        params,
                        config,
                        ids,
                        drafter=methods[name](),
                        max_new_tokens=new_tokens,
                        sampling=sampling,
                        seed=1000 * repeat + index,
                        stop_at_eos=False,
                    )
                    runs[name].append((repeat, kind, index, result))
        results[label] = _summarise(runs, names, repeats, max_depth, greedy=sampling.greedy)
    return results


def _summarise(runs, names, repeats, max_depth, greedy) -> dict:
    kinds = sorted({kind for _, kind, _, _ in runs["vanilla"]}) + ["all"]
    summary = {}
    for kind in kinds:

        def pick(name, kind=kind):
            return [r for r in runs[name] if kind == "all" or r[1] == kind]

        def tok_s(rows, repeat):
            chosen = [res for rep, _, _, res in rows if rep == repeat]
            return sum(len(r.tokens) for r in chosen) / sum(r.decode_seconds for r in chosen)

        base = pick("vanilla")
        summary[kind] = {}
        for name in names:
            rows = pick(name)
            results = [r[3] for r in rows]
            tau = emitted_per_forward(results)
            speedups = [tok_s(rows, rep) / tok_s(base, rep) for rep in range(repeats)]
            entry = {
                "tau": tau,
                "alpha": _pooled_alpha(results, max_depth),
                "tokens_per_s": _spread([tok_s(rows, rep) for rep in range(repeats)]),
                "speedup": _spread(speedups),
                "efficiency": statistics.median(speedups) / tau,
            }
            if greedy:
                reference = {(rep, i): res.tokens for rep, _, i, res in base}
                differ = [res.tokens != reference[(rep, i)] for rep, _, i, res in rows]
                entry["differs_from_vanilla"] = sum(differ) / len(differ)
            summary[kind][name] = entry
    return summary


def _pooled_alpha(results, max_depth: int) -> list[float | None]:
    """alpha[n] pooled over all cycles of all runs (counts summed, then divided)."""
    alpha = []
    for depth in range(1, max_depth + 1):
        reached = passed = 0
        for r in results:
            for a, d in zip(r.accepted_per_cycle, r.drafted_depth_per_cycle, strict=True):
                reached += a >= depth - 1 and d >= depth
                passed += a >= depth
        alpha.append(passed / reached if reached else None)
    return alpha


def format_report(results: dict) -> str:
    """A plain-text table: one row per setting, prompt kind and method."""
    lines = [
        f"{'setting':7} {'prompts':7} {'method':22} {'tau':>5} {'speedup [min..max]':>22} "
        f"{'effic.':>6}  alpha by depth"
    ]
    for label, by_kind in results.items():
        for kind, by_method in by_kind.items():
            for name, e in by_method.items():
                s = e["speedup"]
                alpha = " ".join("  -  " if a is None else f"{a:.2f}" for a in e["alpha"])
                lines.append(
                    f"{label:7} {kind:7} {name:22} {e['tau']:5.2f} "
                    f"{s['median']:6.2f}x [{s['min']:.2f}..{s['max']:.2f}]".ljust(61)
                    + f" {e['efficiency']:6.2f}  {alpha if name != 'vanilla' else ''}"
                )
    return "\n".join(lines)
