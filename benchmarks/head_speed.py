"""EAGLE-3 heads side by side: τ and speed of each head's drafter against vanilla, one process.

A head that drafts better but costs more per draft (a wider MLP, `minieagle train eagle3
--head-intermediate-size`) is worth shipping only if the tokens it adds outweigh its drafting
time; τ alone (`benchmarks/tree_depth.py`) cannot say. This decodes the bench's prompts with
vanilla and, for each head given, its default tree (the EAGLE-3 defaults: 8 levels, top_k 8,
26 nodes, the scores shipped beside the head) and a fixed chain of `--chain` drafts, all
interleaved in one process with the order rotating each repeat (`bench_methods.compare_methods`),
at T = 0 and T = 1; at T = 0 each output is compared with vanilla's (`differs_from_vanilla`).

    OPENBLAS_NUM_THREADS=1 python benchmarks/head_speed.py \\
        --eagle3 shipped=small-eagle3 \\
        wide=~/.cache/minieagle/runs/tiny/scaling-wide/eagle3-8x/final \\
        --out docs/results/head-speed.json

Each `--eagle3` is LABEL=DIR (or a shipped head's name, or a directory: its label is then its
name). Reported per setting and prompt kind: τ, α by depth, speedup median [min..max] over
the repeats, and the draft / verify costs `compare_methods` records.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minieagle import inference
from minieagle.bench import prompt_set
from minieagle.bench_methods import compare_methods, format_report
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter
from minieagle.errors import InvalidInputError
from minieagle.shipped import DEFAULT_MODEL


def parse_heads(items: list[str]) -> dict[str, str]:
    """LABEL=DIR items (or bare DIRs / shipped names) -> {label: head}."""
    heads = {}
    for item in items:
        label, sep, head = item.partition("=")
        if not sep:
            label, head = Path(item.rstrip("/")).name, item
        if not label or not head:
            raise InvalidInputError(
                f"--eagle3 {item!r}: expected LABEL=DIR, e.g. wide=runs/w/final"
            )
        if label in heads:
            raise InvalidInputError(f"--eagle3: the label {label!r} is given twice; name each "
                                    "head with LABEL=DIR")  # fmt: skip
        heads[label] = str(Path(head).expanduser()) if sep or Path(head).exists() else head
    return heads


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="the heads' target")
    parser.add_argument("--eagle3", nargs="+", required=True, metavar="LABEL=DIR",
                        help="EAGLE-3 heads to compare (directories or shipped names)")
    parser.add_argument("--chain", type=int, default=3, help="drafts in the fixed chain (0: none)")
    parser.add_argument("--prompts", choices=("heldout", "ood", "both"), default="both")
    parser.add_argument("--prompts-per-kind", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.chain < 0:
        raise InvalidInputError(f"--chain {args.chain}: expected 0 or more drafts, e.g. 3")
    heads = parse_heads(args.eagle3)
    params, config, tokenizer = load_checkpoint(args.model)
    target = (inference.prepare(params, config), config)
    prompts = prompt_set(tokenizer, args.prompts, per_kind=args.prompts_per_kind)

    def make(head, **sizes):
        return lambda: build_drafter("eagle3", target=target, head=head, **sizes)

    methods = {"vanilla": lambda: None}
    for label, head in heads.items():
        methods[f"{label} tree"] = make(head)
        if args.chain:
            methods[f"{label} chain:{args.chain}"] = make(
                head, depth=args.chain - 1, top_k=1, total_tokens=args.chain + 1)
    results = compare_methods(*target, methods, prompts, new_tokens=args.new_tokens,
                              repeats=args.repeats, max_depth=8)  # fmt: skip
    print(format_report(results))
    results["settings"] = {"model": args.model, "heads": heads, "chain": args.chain,
                           "prompts": args.prompts, "prompts_per_kind": args.prompts_per_kind,
                           "new_tokens": args.new_tokens, "repeats": args.repeats}  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
