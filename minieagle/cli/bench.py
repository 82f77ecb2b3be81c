"""`minieagle bench`: the model's speed (matmul peak, decoding, training, MFU) and the decoding
methods side by side (tau, speedup)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from minieagle.cli.flags import DEFAULT_MODEL, device_flag, integer, method_flags
from minieagle.cli.methods import drafter_factory, head_dir, load_target
from minieagle.errors import InvalidInputError


def _check_output_file(path) -> None:
    """Refuse an --out whose directory is missing or read-only before anything is measured."""
    if path is None:
        return
    parent = Path(path).absolute().parent
    if not parent.is_dir():
        raise InvalidInputError(
            f"--out {path}: the directory {parent} does not exist; create it first "
            f"(mkdir -p {parent}) or pass another path"
        )
    if Path(path).is_dir():
        raise InvalidInputError(
            f"--out {path} is a directory; pass a file path such as {path}/bench.json"
        )
    if not os.access(parent, os.W_OK):
        raise InvalidInputError(f"--out {path}: {parent} is not writable; pass another path")


def cmd_bench(args) -> int:
    _check_output_file(args.out)
    if args.device != "cpu" and args.suite != "methods":
        raise InvalidInputError(
            f"--suite {args.suite} measures the NumPy model (matmul peak, training) and has no "
            f"--device {args.device} lane; pass --suite methods, or use "
            "benchmarks/real_model_cost.py --device gpu for decoding and the cost curve"
        )
    if args.suite in ("model", "all"):
        from minieagle.bench import run_bench

        run_bench(args)
    if args.suite in ("methods", "all"):
        from minieagle.bench import prompt_set
        from minieagle.bench_methods import compare_methods, format_report
        from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS

        target, config, tokenizer = load_target(args.model, args.device)
        methods = {}
        # Today's fixed sizes beside the automatic ones (docs/speed.md): the EAGLE-1 26-node
        # tree, chains of 3 and 5 and the chain sized for this machine; EAGLE-2 and EAGLE-3
        # sized automatically (--depth / --tree-top-k / --total-tokens constrain or fix them)
        # and at each method's fixed default tree of 26 tokens, top_k 8 (EAGLE2_DEFAULTS: depth
        # 5; EAGLE3_DEFAULTS: depth 7, the paper's deeper tree).
        given = (args.depth, args.tree_top_k, args.total_tokens)

        def sizes(defaults: dict) -> tuple:
            return defaults["depth"], defaults["top_k"], defaults["total_tokens"]

        variants = [
            ("vanilla", "vanilla", "default", (None, None, None)),
            ("draft-model", "draft-model", "default", (None, None, None)),
            ("eagle1-tree", "eagle1", "default", (None, None, None)),
            ("eagle1-chain3", "eagle1", "chain", (3, None, None)),
            ("eagle1-chain5", "eagle1", "chain", (5, None, None)),
            ("eagle1-chain-auto", "eagle1", "auto", (None, None, None)),
            ("eagle2", "eagle2", "default", given),
            ("eagle2-26", "eagle2", "default", sizes(EAGLE2_DEFAULTS)),
            ("eagle3", "eagle3", "default", given),
            ("eagle3-26", "eagle3", "default", sizes(EAGLE3_DEFAULTS)),
            ("pld", "pld", "default", (None, None, None)),
            ("medusa", "medusa", "default", (None, None, None)),
        ]
        for label, method, tree, (depth, top_k, total) in variants:
            args.method, args.tree, args.depth = method, tree, depth
            args.tree_top_k, args.total_tokens = top_k, total
            if method.startswith(("eagle", "medusa")) and not head_dir(args).is_dir():
                print(f"[bench: no head at {head_dir(args)}; {label} skipped]", file=sys.stderr)
                continue
            methods[label] = drafter_factory(args, config, target, tokenizer)
        prompts = prompt_set(tokenizer, args.prompts, per_kind=args.prompts_per_corpus)
        results = compare_methods(
            target, config, methods, prompts, new_tokens=args.new_tokens, repeats=args.repeats,
            max_depth=7,  # n-alpha for n = 0 .. 6
        )  # fmt: skip
        print(format_report(results))
        results["sizing"] = _sizings(methods)
        results["dynamic_tree"] = _tree_choices(methods)
        if args.out:
            out = Path(args.out)
            out = out.with_name(out.stem + "-methods" + out.suffix)
            out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _sizings(methods: dict) -> dict:
    """{label: {setting: the automatic sizes (`minieagle.sizing.Sizing`) it decoded with}} for
    the methods sized automatically (their sizes are cached, so this measures nothing)."""
    from dataclasses import asdict

    from minieagle.bench_methods import SETTINGS

    chosen = {}
    for label, make in methods.items():
        drafter = make()
        sizer = getattr(drafter, "sizer", None)
        if sizer is not None:
            chosen[label] = {name: asdict(sizer(sampling)) for name, sampling in SETTINGS.items()}
    return chosen


def _tree_choices(methods: dict) -> dict:
    """{label: {setting: the dynamic tree's sizes, tree and map (`Eagle2Drafter.decide`)}}
    for the EAGLE-2/3 methods (sizes are cached by now, so this measures nothing)."""
    from minieagle.bench_methods import SETTINGS

    chosen = {}
    for label, make in methods.items():
        if hasattr(make(), "decide"):
            chosen[label] = {name: make().decide(sampling) for name, sampling in SETTINGS.items()}
    return chosen


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="measure speed: the model (decoding ms/token, training "
        "tokens/s, MFU) and decoding methods side by side (tau, speedup)",
    )
    p.add_argument("--suite", choices=["model", "methods", "all"], default="model")
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    method_flags(p, with_method=False)
    device_flag(p)
    p.add_argument(
        "--prompts-per-corpus",
        dest="prompts_per_corpus",
        type=integer(1, "a count such as 3"),
        default=3,
    )
    p.add_argument(
        "--prompts",
        choices=["heldout", "ood", "both", "edit"],
        default="heldout",
        help="held-out windows of the corpora, out-of-domain prompts (other packages' docs "
        "and code), or both; or edit: 'edit this code' prompts whose answer repeats them",
    )
    p.add_argument("--repeats", type=integer(1, "a count such as 5"), default=5)
    p.add_argument("--new-tokens", type=integer(1, "a count such as 64"), default=64)
    p.add_argument("--out", help="write the results as JSON here")
    p.set_defaults(func=cmd_bench)
