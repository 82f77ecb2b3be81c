"""EAGLE-2 with calibrated scores, and why its top-k tree collapses at T = 1.

1. Fit (`minieagle.calibration`): decode TRAINING prompts (`training_prompts`, windows of the
   corpora's train split) with the plain EAGLE-2 drafter, once per sampling setting (T = 0,
   T = 1), and fit an isotonic calibration of its (confidence, accepted) records; likewise for
   the sampled tree at T = 1 ("T=1,sampled"). Each is saved as a small JSON beside the results.
2. Compare at equal node budgets (26 nodes verified, root included; EAGLE-2 depth 5, top_k 8)
   on held-out prompts (the test splits) and, when `minieagle.bench.ood_prompts` exists,
   out-of-domain ones: τ = tokens emitted per target forward, per prompt kind, at T = 0 and
   T = 1, for EAGLE-1's static 26-node tree, EAGLE-2 with raw scores, with calibrated scores,
   with the draft logits divided by 0.5 where the tree scores them (the issue's lead, for
   reference), and at T = 1 the sampled dynamic tree, raw and calibrated. Decoding is
   deterministic given the seeds (prompt i: seed i), so τ needs one repeat and no timing.
3. Reliability: the calibration table of the held-out EAGLE-2 records, by raw confidence q and
   by calibrated c(q), and the count-weighted |acceptance − predicted| of each.
4. Coverage at T = 1: for every verified tree and every node on its accepted path that has
   children, the target mass of those children (Σ p over them) and the chance the verifier
   accepts one of them (1 − Π (1 − a_j) over the siblings tried in order, a_j the verifier's own
   acceptance probability after the earlier rejections; equal to the mass for top-k children,
   which are accepted with p(x)), averaged per depth, for the static sampled tree, EAGLE-2's
   top-k tree and the sampled dynamic tree. The target's distribution at an accepted node is
   read from one uncached forward over the finished sequence.

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle2_calibration.py

About 4 minutes on two busy cores with the defaults (12 + 12 training prompts x 64 tokens;
6 + 6 held-out and 6 + 6 out-of-domain prompts x 48 tokens).

`--method eagle3` runs the same study for EAGLE-3, which drafts through the same dynamic tree:
every dynamic-tree row (and every fit) uses the EAGLE-3 head (`--head`, default
minieagle/pretrained/small-eagle3) at EAGLE-3's default depth 7, while the static-tree row keeps
the EAGLE-1 head (`--static-head`, default minieagle/pretrained/small-eagle1) as the common
reference; the node budget stays 26. Its results go to docs/results/eagle3-calibration.json and
its calibrations to eagle3-calibration-<setting>.json. `--depth` overrides either default.
About 5 minutes with the defaults.

    OPENBLAS_NUM_THREADS=1 python benchmarks/eagle2_calibration.py --method eagle3
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from minieagle import bench, model
from minieagle.calibrate import record_calibration
from minieagle.calibration import (
    TemperatureScores,
    fit_calibration,
    save_calibration,
    training_prompts,
)
from minieagle.checkpoint import load_checkpoint, target_fingerprint
from minieagle.cli import DEFAULT_HEAD, DEFAULT_MODEL
from minieagle.drafters.eagle1 import Eagle1Drafter
from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS, Eagle2Drafter
from minieagle.dynamic_tree import calibration_table
from minieagle.generate import emitted_per_forward, generate
from minieagle.heads.eagle1 import load_head
from minieagle.heads.eagle3_io import load_eagle3_head
from minieagle.sampling import SamplingParams, setting_name, target_distribution
from minieagle.tree import children
from minieagle.verify import acceptance_probability, residual

SETTINGS = {"T=0": SamplingParams(), "T=1": SamplingParams(temperature=1.0)}
# Per method: the drafter's default sizes (26 nodes: EAGLE-1's tree verifies 26 too), the head.
SIZES = {"eagle2": EAGLE2_DEFAULTS, "eagle3": EAGLE3_DEFAULTS}
HEADS = {"eagle2": DEFAULT_HEAD, "eagle3": DEFAULT_HEAD.parent / "small-eagle3"}
TITLES = {"eagle2": "EAGLE-2", "eagle3": "EAGLE-3"}
SHARPEN = 0.5  # the lead: draft logits / 0.5 where the tree scores candidates
SHARPENED = TemperatureScores(SHARPEN, "T=0")  # the same scores at every setting
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


class SharpenedScores(Eagle2Drafter):
    """EAGLE-2 scoring each child by log softmax(logits / 0.5) instead of log q at every
    temperature: the magic number the fitted temperature (`TemperatureScores`) replaces, kept
    for reference."""

    def _log_accept(self, logits, tokens, confidence):
        if tokens is None:
            raise ValueError(
                "sharpened scores rank a top-k tree; the sampled tree has no tokens "
                "to score before it draws them: pass sampled_tree=False"
            )
        return SHARPENED.log_acceptance_of_logits(logits, tokens)


class Recorder:
    """Wraps a drafter and keeps each cycle's tree, kept tokens and next token."""

    def __init__(self, inner):
        self.inner, self.feature_keys = inner, inner.feature_keys
        self.cycles = []  # (tree, kept tokens, next token)

    def begin(self, prompt_ids, features, sampling) -> None:
        self.prompt = list(prompt_ids)
        self.inner.begin(prompt_ids, features, sampling)

    def propose(self, root, rng, max_nodes):
        self.tree = self.inner.propose(root, rng, max_nodes)
        return self.tree

    def accept(self, tokens, features, next_token) -> None:
        self.cycles.append((self.tree, list(tokens), int(next_token)))
        self.inner.accept(tokens, features, next_token)


def coverage(params, config, recorder: Recorder, sampling: SamplingParams) -> list[tuple]:
    """(child depth, target mass of the children, chance one is accepted) for every node with
    children on each cycle's accepted path (see the module docstring, 4)."""
    sequence = list(recorder.prompt)
    for _, kept, next_token in recorder.cycles:
        sequence += [*kept[1:], next_token]
    logits, _, _ = model.forward(params, config, np.asarray(sequence))  # [L, V], row t: after t
    rows, root_position = [], len(recorder.prompt) - 1
    for tree, kept, _ in recorder.cycles:
        kids, node = children(tree), 0
        for depth, token in enumerate([*kept[1:], None]):
            if kids[node]:
                p = target_distribution(logits[root_position + depth], sampling)  # [V]
                tokens = tree.tokens[kids[node]]
                rejected = 1.0  # Π (1 - a_j) over the siblings tried so far
                current = p
                for child in kids[node]:
                    q, x = tree.proposals[child], int(tree.tokens[child])
                    rejected *= 1.0 - acceptance_probability(current, q, x)
                    current = residual(current, q, x)
                rows.append((depth + 1, float(p[tokens].sum()), 1.0 - rejected))
            if token is not None:
                node = next(c for c in kids[node] if tree.tokens[c] == token)
        root_position += len(kept)
    return rows


def _per_depth(rows) -> list[dict]:
    data = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    out = []
    for depth in range(1, int(data[:, 0].max()) + 1 if len(data) else 1):
        at = data[data[:, 0] == depth]
        if len(at):
            out.append(
                {
                    "depth": depth,
                    "nodes": len(at),
                    "target_mass": float(at[:, 1].mean()),
                    "accept_chance": float(at[:, 2].mean()),
                }
            )
    return out


def _reliability(records, calibration) -> dict:
    """The calibration table by raw q and by calibrated c(q), each with its count-weighted
    |acceptance - predicted| (0 = calibrated)."""
    out = {}
    for name, predicted in (
        ("raw", [q for q, _ in records]),
        ("calibrated", calibration([q for q, _ in records]).tolist()),
    ):
        table = calibration_table(list(zip(predicted, [a for _, a in records], strict=True)))
        rows = [
            {"bin": list(b), "count": n, "mean_predicted": m, "acceptance": a}
            for b, n, m, a in table
            if n
        ]
        gap = sum(r["count"] * abs(r["acceptance"] - r["mean_predicted"]) for r in rows)
        out[name] = {"table": rows, "weighted_gap": gap / max(1, len(records))}
    return out


def run(
    params,
    config,
    head,
    fingerprint,
    train,
    prompts,
    *,
    fit_tokens,
    new_tokens,
    sizes=SIZES["eagle2"],
    static_head=None,
    method="eagle2",
) -> dict:
    """Fit the calibrations, then decode every prompt with every method (module docstring).
    head: the dynamic tree's head tuple (EAGLE-1: (head, cfg); EAGLE-3: (head, cfg, vocab));
    static_head: the static tree's EAGLE-1 head (None: `head`); method names the rows."""
    static_head = head if static_head is None else static_head

    def eagle2(cls=Eagle2Drafter, **options):
        return lambda: cls(params, config, *head, **sizes, **options)

    calibrations = {}
    fits = {label: (sampling, False) for label, sampling in SETTINGS.items()}
    fits["T=1,sampled"] = (SETTINGS["T=1"], True)
    for label, (sampling, sampled) in fits.items():
        assert label == setting_name(sampling, sampled_tree=sampled)
        records = record_calibration(
            params, config, eagle2(sampled_tree=sampled), train, sampling, new_tokens=fit_tokens
        )
        calibrations[label] = fit_calibration(records, setting=label, head=fingerprint)

    results = {"tau": {}, "spread": {}, "reliability": {}, "coverage": {}}
    for label, sampling in SETTINGS.items():
        methods = {
            "eagle1 static tree (26)": lambda: Eagle1Drafter(params, config, *static_head),
            f"{method} raw": eagle2(),
            f"{method} calibrated": eagle2(calibration=calibrations[label]),
            # An EAGLE-3 head's -inf logits (outside its draft vocabulary) stay -inf / 0.5.
            f"{method} logits/{SHARPEN}": eagle2(SharpenedScores),
        }
        if not sampling.greedy:  # at T = 0 the sampled tree is the top-k tree
            sampled = calibrations[f"{label},sampled"]
            methods[f"{method} sampled tree"] = eagle2(sampled_tree=True)
            methods[f"{method} sampled tree calibrated"] = eagle2(
                sampled_tree=True, calibration=sampled
            )
        kinds = sorted({kind for kind, _ in prompts}) + ["all"]
        taus, cover, spread = {kind: {} for kind in kinds}, {}, {}
        for name, make in methods.items():
            by_kind, rows, records = {kind: [] for kind in kinds}, [], []
            for i, (kind, ids) in enumerate(prompts):
                recorder = Recorder(make())
                result = generate(
                    params,
                    config,
                    ids,
                    drafter=recorder,
                    max_new_tokens=new_tokens,
                    sampling=sampling,
                    seed=i,
                    stop_at_eos=False,
                )
                by_kind[kind].append(result)
                by_kind["all"].append(result)
                if not sampling.greedy:
                    rows += coverage(params, config, recorder, sampling)
                records += getattr(recorder.inner, "calibration_records", [])
            for kind in kinds:
                taus[kind][name] = emitted_per_forward(by_kind[kind])
            per_prompt = [r.tau for r in by_kind["all"]]
            depths = [d for r in by_kind["all"] for d in r.drafted_depth_per_cycle]
            spread[name] = {
                "tau_per_prompt": per_prompt,
                "tau_per_prompt_sd": float(np.std(per_prompt, ddof=1)),
                "tau_standard_error": float(np.std(per_prompt, ddof=1) / np.sqrt(len(prompts))),
                "mean_tree_depth": float(np.mean(depths)),
            }
            if rows:
                cover[name] = _per_depth(rows)
            if name == f"{method} raw":
                results["reliability"][label] = _reliability(records, calibrations[label])
        static = np.asarray(spread["eagle1 static tree (26)"]["tau_per_prompt"])
        for entry in spread.values():  # paired: the same prompts and seeds
            mine = np.asarray(entry["tau_per_prompt"])
            entry["prompts_above_static"] = int((mine > static).sum())
            entry["prompts_below_static"] = int((mine < static).sum())
        results["tau"][label] = taus
        results["spread"][label] = spread
        if cover:
            results["coverage"][label] = cover
    results["calibrations"] = calibrations
    return results


def format_report(results: dict) -> str:
    s = results["settings"]
    title = TITLES[s.get("method", "eagle2")]
    lines = [
        f"{title} calibration: {s['train_prompts']} training prompts x {s['fit_tokens']} tokens "
        f"per fit; {s['prompts']} evaluation prompts x {s['new_tokens']} tokens; "
        f"{s['total_tokens']} nodes ({title} depth {s['depth']}, top_k {s['top_k']})",
        "",
        "calibrations (records, knots; c(q) at q = 0.05 0.1 0.2 0.3 0.5 0.8):",
    ]
    for label, c in results["calibrations"].items():
        at = " ".join(f"{c['at'][str(q)]:.2f}" for q in (0.05, 0.1, 0.2, 0.3, 0.5, 0.8))
        lines.append(f"  {label:12} {c['records']:6} records {c['knots']:3} knots   {at}")
    for label, taus in results["tau"].items():
        kinds, spread = list(taus), results["spread"][label]
        lines += [
            "",
            f"tau at {label} (s.e.: standard error of the per-prompt mean; depth: mean tree "
            "depth; +/-: prompts above / below the static tree's tau)",
            f"  {'method':32}" + "".join(f"{k:>10}" for k in kinds) + "      s.e.  depth    +/-",
        ]
        for name in taus[kinds[0]]:
            e = spread[name]
            cells = "".join(f"{taus[k][name]:10.2f}" for k in kinds)
            lines.append(
                f"  {name:32}{cells}{e['tau_standard_error']:10.2f}{e['mean_tree_depth']:7.2f}"
                f"  {e['prompts_above_static']:2}/{e['prompts_below_static']:<2}"
            )
    for label, by in results["reliability"].items():
        lines += ["", f"reliability of {title}'s evaluation records at {label}"]
        for name, r in by.items():
            lines.append(
                f"  {name}: count-weighted |acceptance - predicted| = {r['weighted_gap']:.3f}"
            )
            for row in r["table"]:
                lo, hi = row["bin"]
                lines.append(
                    f"    [{lo:.2f}, {hi:.2f}] {row['count']:6}  predicted "
                    f"{row['mean_predicted']:.3f}  accepted {row['acceptance']:.3f}"
                )
    for label, by in results["coverage"].items():
        lines += [
            "",
            f"coverage at {label}: per depth of the children, mean target mass of the children "
            "of the accepted node / mean chance one of them is accepted (nodes)",
        ]
        for name, rows in by.items():
            cells = "  ".join(
                f"d{r['depth']} {r['target_mass']:.2f}/{r['accept_chance']:.2f} ({r['nodes']})"
                for r in rows
            )
            lines.append(f"  {name:32} {cells}")
    return "\n".join(lines)


def _summary(calibration) -> dict:
    return {
        "records": calibration.records,
        "knots": len(calibration.confidence),
        "at": {str(q): float(calibration(q)) for q in (0.05, 0.1, 0.2, 0.3, 0.5, 0.8)},
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="target checkpoint")
    parser.add_argument(
        "--method",
        choices=tuple(SIZES),
        default="eagle2",
        help="whose head drafts the dynamic trees: eagle2 (the EAGLE-1 head) or eagle3",
    )
    parser.add_argument(
        "--head",
        default=None,
        help=f"the dynamic tree's head directory (default: eagle2 {HEADS['eagle2']}, "
        f"eagle3 {HEADS['eagle3']})",
    )
    parser.add_argument(
        "--static-head",
        default=None,
        help=f"the static tree's EAGLE-1 head (default: eagle2 --head, eagle3 {DEFAULT_HEAD})",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=None,
        help="dynamic-tree expansion steps (default: eagle2 5, eagle3 7); 26 nodes either way",
    )
    parser.add_argument("--fit-prompts", type=int, default=12, help="training prompts per corpus")
    parser.add_argument("--fit-tokens", type=int, default=64, help="new tokens per fit prompt")
    parser.add_argument("--prompts-per-kind", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument(
        "--out", default=None, help="results JSON (default docs/results/<method>-calibration.json)"
    )
    parser.add_argument(
        "--calibration-dir",
        default=str(RESULTS),
        help="where the fitted calibrations are written (<method>-calibration-<setting>.json)",
    )
    args = parser.parse_args(argv)
    method = args.method
    sizes = dict(SIZES[method])
    if args.depth is not None:
        sizes["depth"] = args.depth
    for name in ("fit_prompts", "fit_tokens", "prompts_per_kind", "new_tokens", "depth"):
        value = sizes["depth"] if name == "depth" else getattr(args, name)
        if value < 1:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"error: {flag}={value} is below 1; pass e.g. 6")
    if args.head is None:
        args.head = str(HEADS[method])
    if args.static_head is None:
        args.static_head = args.head if method == "eagle2" else str(DEFAULT_HEAD)
    if args.out is None:
        args.out = str(RESULTS / f"{method}-calibration.json")

    params, config, tokenizer = load_checkpoint(args.model)
    if method == "eagle3":
        head = load_eagle3_head(args.head, target_config=config)
    else:
        head = load_head(args.head)
    static_head = head if args.static_head == args.head else load_head(args.static_head)
    train = training_prompts(tokenizer, "prose", args.fit_prompts, seed=0)
    train += training_prompts(tokenizer, "code", args.fit_prompts, seed=1)
    prompts = bench.heldout_prompts(tokenizer, per_corpus=args.prompts_per_kind)
    if hasattr(bench, "ood_prompts"):
        prompts += bench.ood_prompts(tokenizer, per_kind=args.prompts_per_kind)
    results = run(
        params,
        config,
        head,
        target_fingerprint(args.head),
        train,
        prompts,
        fit_tokens=args.fit_tokens,
        new_tokens=args.new_tokens,
        sizes=sizes,
        static_head=static_head,
        method=method,
    )
    calibrations = results.pop("calibrations")
    files = {}
    for label, calibration in calibrations.items():
        name = f"{method}-calibration-" + label.replace("=", "").replace(",", "-") + ".json"
        path = save_calibration(calibration, Path(args.calibration_dir) / name)
        files[label] = os.path.relpath(path)  # relative to where the script ran
    results["calibrations"] = {
        label: {**_summary(c), "file": files[label]} for label, c in calibrations.items()
    }
    results["settings"] = {
        "model": args.model,
        "method": method,
        "head": args.head,
        "head_fingerprint": target_fingerprint(args.head),
        **(
            {}
            if args.static_head == args.head
            else {
                "static_head": args.static_head,
                "static_head_fingerprint": target_fingerprint(args.static_head),
            }
        ),
        **sizes,
        "train_prompts": len(train),
        "fit_tokens": args.fit_tokens,
        "prompts": len(prompts),
        "prompt_kinds": sorted({kind for kind, _ in prompts}),
        "new_tokens": args.new_tokens,
        "seeds": "prompt i decodes with seed i",
        "machine": bench.machine_info(),
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
