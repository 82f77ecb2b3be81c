"""Every decoding method on the real SmolLM2-135M-Instruct, in one run: vanilla ms/token, the cost
of verifying N = 1 .. 64 tokens relative to one, and τ, n-α and speedup of the EAGLE methods on
chat prompts at T = 0 and T = 1, with the fraction of greedy outputs that differ from vanilla's.

    OPENBLAS_NUM_THREADS=1 python benchmarks/smollm2_methods.py \
        --out docs/results/smollm2-methods.json

The prompts are chat requests rendered with the model's own template: "heldout-chat" asks about
passages of the corpora's test splits (the heads trained on requests about the train splits),
"ood-chat" about passages from other packages' docs and code (minieagle/data/ood_prompts.jsonl)
plus two questions that name no passage. Beside the fixed trees (26 nodes, raw scores; `eagle3-60`:
the EAGLE-3 paper's 60 nodes, 8 levels, top_k 10), the
`*-cli` rows are the drafters `minieagle generate --method M --head H` builds with its defaults
(`cli.methods.drafter_factory`: the tree sized for this machine, the head's shipped scores),
and `pld` is prompt lookup. The heads default to the shipped
minieagle/pretrained/smollm2-eagle1 and smollm2-eagle3 (docs/real_models.md says how they were
trained). SmolLM2 has no smaller sibling sharing its tokenizer, so there is no draft-model row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle.bench import format_cost_curve, machine_info, measure_cost_curve
from minieagle.bench_methods import compare_methods, format_report
from minieagle.chat import encode_chat, load_chat_template
from minieagle.checkpoint import load_checkpoint
from minieagle.cli import PRETRAINED
from minieagle.data import ood_records
from minieagle.drafters import build_drafter
from minieagle.heads.eagle1 import load_head
from minieagle.heads.eagle3_io import load_eagle3_head
from minieagle.train_eagle import CHAT_REQUESTS

QUESTIONS = (
    "Write a Python function that tells whether a string is a palindrome, with a short docstring.",
    "What are three good habits for keeping a small software project easy to maintain?",
)


def chat_requests(passage_chars: int = 400) -> list[tuple[str, str]]:
    """(kind, user request): one about a test-split passage of each corpus ("heldout-chat"),
    one about an out-of-domain prose and code passage and the two QUESTIONS ("ood-chat")."""
    from minieagle.data import load_split

    def request(corpus: str, text: str) -> str:
        return CHAT_REQUESTS[corpus].format(passage=text[:passage_chars].strip())

    requests = []
    for corpus in ("prose", "code"):
        document = next(d for d in load_split(corpus, "test") if len(d.text) >= passage_chars)
        requests.append(("heldout-chat", request(corpus, document.text)))
    for kind in ("prose", "code"):
        record = next(r for r in ood_records() if r["kind"] == kind)
        requests.append(("ood-chat", request(kind, record["text"])))
    return requests + [("ood-chat", question) for question in QUESTIONS]


def chat_prompts(tokenizer, template: str) -> list[tuple[str, list]]:
    """(kind, ids): the `chat_requests` rendered with the model's chat template."""
    return [
        (kind, encode_chat(tokenizer, template, [{"role": "user", "content": text}]))
        for kind, text in chat_requests()
    ]


def cli_drafter(model: str, method: str, head: str, extra: list, target, tokenizer):
    """A maker of the drafter `minieagle generate --model MODEL --method METHOD --head HEAD
    [extra]` decodes with: the CLI's own parser and factory, so its defaults are the CLI's."""
    from minieagle.cli import build_parser
    from minieagle.cli.methods import drafter_factory

    argv = ["generate", "-", "--model", model, "--method", method, "--head", head, *extra]
    return drafter_factory(build_parser().parse_args(argv), target[1], target[0], tokenizer)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--eagle1-head", default=str(PRETRAINED / "smollm2-eagle1"))
    parser.add_argument("--eagle3-head", default=str(PRETRAINED / "smollm2-eagle3"))
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--methods", help="comma-separated subset of the rows (vanilla kept)")
    parser.add_argument(
        "--no-cost-curve",
        action="store_true",
        help="skip the cost curve (τ and outputs only, e.g. beside other work)",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    template = load_chat_template(args.model, tokenizer)
    prompts = chat_prompts(tokenizer, template)
    params = inference.prepare(params, config)  # once: every generate and head shares it
    target = (params, config)
    methods = {"vanilla": lambda: None}
    if Path(args.eagle1_head, "model.safetensors").is_file():
        eagle1 = load_head(args.eagle1_head, target_dir=args.model)
        methods["eagle1-tree"] = lambda: build_drafter("eagle1", target=target, head=eagle1)
        methods["eagle1-chain3"] = lambda: build_drafter(
            "eagle1", target=target, head=eagle1, tree="chain:3"
        )
        methods["eagle2"] = lambda: build_drafter("eagle2", target=target, head=eagle1)
    if Path(args.eagle3_head, "model.safetensors").is_file():
        eagle3 = load_eagle3_head(args.eagle3_head, target_config=config, target_dir=args.model)
        methods["eagle3"] = lambda: build_drafter("eagle3", target=target, head=eagle3)
        methods["eagle3-60"] = lambda: build_drafter(  # the EAGLE-3 paper's tree
            "eagle3", target=target, head=eagle3, total_tokens=60, depth=7, top_k=10
        )
        for drafts in (1, 3):  # the chains a CPU can afford (docs/real_models.md)
            methods[f"eagle3-chain{drafts}"] = lambda drafts=drafts: build_drafter(
                "eagle3", target=target, head=eagle3, total_tokens=drafts + 1, depth=drafts,
                top_k=1,
            )  # fmt: skip
    cli_heads = (("eagle1", args.eagle1_head, ["--tree", "auto"]), ("eagle2", args.eagle1_head, []),
                 ("eagle3", args.eagle3_head, []))  # fmt: skip
    for method, head, extra in cli_heads:
        if Path(head, "model.safetensors").is_file():
            methods[f"{method}-cli"] = cli_drafter(args.model, method, head, extra, target,
                                                   tokenizer)  # fmt: skip
    methods["pld"] = lambda: build_drafter("pld", target=target)
    if args.methods:
        wanted = {"vanilla", *args.methods.split(",")}
        unknown = wanted - set(methods)
        if unknown:
            parser.error(f"--methods: no row {sorted(unknown)}; rows: {', '.join(methods)}")
        methods = {name: make for name, make in methods.items() if name in wanted}
    cost = {} if args.no_cost_curve else measure_cost_curve(
        params, config, [ids for _, ids in prompts[:2]], new_tokens=32, repeats=args.repeats
    )  # fmt: skip
    results = {
        "model": args.model,
        "heads": {"eagle1": args.eagle1_head, "eagle3": args.eagle3_head},
        "prompts": [{"kind": kind, "tokens": len(ids)} for kind, ids in prompts],
        "machine": machine_info(),
        **cost,
    }
    if cost:
        print(format_cost_curve(results))
    results["methods"] = compare_methods(
        params, config, methods, prompts, new_tokens=args.new_tokens, repeats=args.repeats,
        max_depth=7,
    )  # fmt: skip
    print(format_report(results["methods"]))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
