"""`minieagle bench --suite methods`: decoding methods side by side on held-out prompts.

For each sampling setting (T = 0 and T = 1), every method decodes every prompt, repeated; the
methods run interleaved (the order rotates each repeat) so that machine noise hits them alike.
Reported per method and prompt kind (prose, code):
- tau: tokens emitted per target forward, bonus included (vanilla = 1.00);
- alpha[n]: acceptance rate at draft depth n+1 given all earlier drafts were accepted;
- speedup: mean tokens/s of the method / mean tokens/s of vanilla, one ratio per repeat over the
  same prompts, median and [min, max] over repeats;
- efficiency: speedup / tau;
- the bound: tau / (verification cost + drafting cost), both per cycle in vanilla steps and
  measured in the same run: the cost curve forward(N) / forward(1) at each cycle's tree size N
  (one fast-path forward over N tokens, timed after the methods ran), and the drafter's time
  per cycle / vanilla's time per token; of_bound = speedup / bound (1.0: the loop's own work
  costs nothing);
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
from minieagle.sizing import measure_verify_ms

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
    generate_options: dict[str, dict] | None = None,
) -> dict:
    """methods: name -> factory returning a fresh drafter (or None for vanilla); "vanilla" must
    be one of them. prompts: list of (kind, ids). generate_options: name -> further keyword
    arguments of `generate` for that method (e.g. {"verification": "token"}), so two ways of
    decoding with the same drafter run side by side. Returns nested results (see module doc)."""
    if "vanilla" not in methods:
        raise InvalidInputError("methods must include 'vanilla', the baseline of every speedup")
    names = list(methods)
    options = {name: (generate_options or {}).get(name, {}) for name in names}
    all_runs = {}
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
                **options[name],
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
                        **options[name],
                    )
                    runs[name].append((repeat, kind, index, result))
        all_runs[label] = runs
    sizes = {n for runs in all_runs.values() for rows in runs.values() for *_, r in rows
             for n in r.tree_sizes}  # fmt: skip
    verify_ms = measure_verify_ms(params, config, prompts[0][1], sorted(sizes | {1}))
    return {
        label: _summarise(runs, names, repeats, max_depth, SETTINGS[label].greedy, verify_ms)
        for label, runs in all_runs.items()
    }


def _summarise(runs, names, repeats, max_depth, greedy, verify_ms) -> dict:
    kinds = sorted({kind for _, kind, _, _ in runs["vanilla"]}) + ["all"]
    summary = {}
    for kind in kinds:

        def pick(name, kind=kind):
            return [r for r in runs[name] if kind == "all" or r[1] == kind]

        def tok_s(rows, repeat):
            chosen = [res for rep, _, _, res in rows if rep == repeat]
            return sum(len(r.tokens) for r in chosen) / sum(r.decode_seconds for r in chosen)

        base = pick("vanilla")
        vanilla_ms = (
            1e3 * sum(r.decode_seconds for *_, r in base) / sum(len(r.tokens) for *_, r in base)
        )
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
                **_bound(results, tau, statistics.median(speedups), verify_ms, vanilla_ms),
            }
            if greedy:
                reference = {(rep, i): res.tokens for rep, _, i, res in base}
                differ = [res.tokens != reference[(rep, i)] for rep, _, i, res in rows]
                entry["differs_from_vanilla"] = sum(differ) / len(differ)
            summary[kind][name] = entry
    return summary


def _bound(results, tau: float, speedup: float, verify_ms: dict, vanilla_ms: float) -> dict:
    """The speedup the costs allow (module docstring) and how much of it was reached."""
    sizes = [n for r in results for n in r.tree_sizes]
    verify = statistics.mean(verify_ms[n] / verify_ms[1] for n in sizes)  # vanilla steps
    draft = 1e3 * sum(r.draft_seconds for r in results) / len(sizes) / vanilla_ms
    bound = tau / (verify + draft)
    return {
        "mean_tree_size": statistics.mean(sizes),
        "verify_cost": verify,
        "draft_cost": draft,
        "bound": bound,
        "of_bound": speedup / bound,
    }


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
        f"{'effic.':>6} {'N':>5} {'verify':>6} {'draft':>6} {'bound':>6} {'of b.':>5}  "
        "alpha by depth"
    ]
    for label, by_kind in results.items():
        for kind, by_method in by_kind.items():
            for name, e in by_method.items():
                s = e["speedup"]
                alpha = " ".join("  -  " if a is None else f"{a:.2f}" for a in e["alpha"])
                lines.append(
                    f"{label:7} {kind:7} {name:22} {e['tau']:5.2f} "
                    f"{s['median']:6.2f}x [{s['min']:.2f}..{s['max']:.2f}]".ljust(61)
                    + f" {e['efficiency']:6.2f} {e['mean_tree_size']:5.1f} {e['verify_cost']:6.2f}"
                    f" {e['draft_cost']:6.2f} {e['bound']:6.2f} {e['of_bound']:5.2f}"
                    f"  {alpha if name != 'vanilla' else ''}"
                )
    return "\n".join(lines)
