"""What several commands share: the shipped checkpoints' paths, flag types whose messages name
the value and an example, the flag groups (sampling, method, device), and the check that a
method flag belongs to the chosen --method."""

from __future__ import annotations

import argparse
import math

from minieagle.errors import InvalidInputError
from minieagle.shipped import (
    DEFAULT_DRAFT_MODEL,
    DEFAULT_EAGLE3_HEAD,
    DEFAULT_HEAD,
    DEFAULT_MEDUSA_HEAD,
    DEFAULT_MODEL,
)

# Which method each method flag belongs to; a flag given to another method is an error, not
# silently ignored. None as the argparse default tells "not given" from "given the default".
METHOD_FLAGS = {
    "gamma": ("--gamma", ("draft-model",)),
    "draft_model": ("--draft-model", ("draft-model",)),
    "head": ("--head", ("eagle1", "eagle2", "eagle3", "medusa")),
    "tree": ("--tree", ("eagle1", "medusa")),
    "depth": ("--depth", ("eagle1", "eagle2", "eagle3", "medusa")),
    "tree_top_k": ("--tree-top-k", ("eagle2", "eagle3")),
    "total_tokens": ("--total-tokens", ("eagle2", "eagle3")),
    "calibration": ("--calibration", ("eagle2", "eagle3")),
    "sampled_tree": ("--sampled-tree", ("eagle2", "eagle3")),
    "expand_threshold": ("--expand-threshold", ("eagle2", "eagle3")),
    "prompt_lookup_num_tokens": ("--prompt-lookup-num-tokens", ("pld",)),
    "max_matching_ngram_size": ("--max-matching-ngram-size", ("pld",)),
}
METHODS = ("vanilla", "draft-model", "eagle1", "eagle2", "eagle3", "pld", "medusa")
DEFAULT_GAMMA = 4
DEFAULT_CHAIN_DEPTH = 5


def check_method_flags(args) -> None:
    """Refuse method flags that the chosen --method would ignore."""
    for name, (flag, methods) in METHOD_FLAGS.items():
        if getattr(args, name, None) is not None and args.method not in methods:
            raise InvalidInputError(
                f"{flag} applies to --method {' or '.join(methods)}, not {args.method}; "
                f"drop {flag} or pass --method {methods[0]}"
            )
    if args.method in ("eagle1", "medusa") and args.depth is not None and args.tree != "chain":
        raise InvalidInputError(
            f"--depth {args.depth} applies to {args.method} only with --tree chain (the default "
            "tree has a fixed shape); add --tree chain or drop --depth"
        )
    if args.method == "medusa" and args.tree == "auto":
        raise InvalidInputError(
            "--tree auto sizes eagle1's chain; medusa takes --tree default or --tree chain"
        )


def integer(minimum: int, example: str, also=()):
    """An argparse type: an integer >= minimum (or one of the words `also`); the message names
    the value and an example."""

    def parse(text: str) -> int | str:
        if text in also:
            return text
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; pass {example}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}; pass {example}")
        return value

    return parse


def on_off(flag: str):
    """An argparse type: "on" (True) or "off" (False)."""

    def parse(text: str) -> bool:
        if text not in ("on", "off"):
            raise argparse.ArgumentTypeError(f"{text!r} is neither on nor off; pass {flag} off")
        return text == "on"

    return parse


def number(example: str, *, positive: bool = False):
    """An argparse type: a finite float (> 0 when positive)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; pass {example}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number; pass {example}")
        if positive and value <= 0:
            raise argparse.ArgumentTypeError(f"{value} is not positive; pass {example}")
        return value

    return parse


def unit_interval(example: str):
    """An argparse type: a number in [0, 1]."""
    parse_number = number(example)

    def parse(text: str) -> float:
        value = parse_number(text)
        if not 0.0 <= value <= 1.0:
            raise argparse.ArgumentTypeError(f"{value} is not in [0, 1]; pass {example}")
        return value

    return parse


def sampling_flags(p):
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="checkpoint directory")
    p.add_argument(
        "--temperature", type=number("0 (greedy) or e.g. 0.7"), default=0.0, help="0 = greedy"
    )
    p.add_argument("--top-k", type=integer(0, "0 (off) or e.g. 50"), default=0, help="0 = off")
    p.add_argument("--top-p", type=number("a probability in (0, 1]"), default=1.0, help="1 = off")
    p.add_argument("--max-new-tokens", type=integer(0, "a count such as 64"), default=64)
    p.add_argument("--seed", type=integer(0, "a seed >= 0 such as 1"), default=0)


def method_flags(p, *, with_method: bool):
    if with_method:
        p.add_argument(
            "--method",
            default="auto",
            choices=["auto", *METHODS],
            help="decoding method (default: auto, the method measured fastest for the model on "
            "this machine at this temperature, minieagle/pretrained/fastest.json; vanilla for "
            "a model measured nowhere; --stats names it)",
        )
        p.add_argument(
            "--tree",
            choices=["default", "chain", "auto"],
            help="eagle1's static tree: the 26-token default, a chain of --depth drafts, or "
            "auto: the chain length sized for this machine (docs/speed.md); medusa: its "
            "22-token default tree or a chain of --depth drafts (default: one per head)",
        )
    p.add_argument(
        "--draft-model",
        dest="draft_model",
        help=f"draft model directory for draft-model (default: {DEFAULT_DRAFT_MODEL.name})",
    )
    p.add_argument(
        "--gamma",
        type=integer(1, "a draft length such as 4"),
        help=f"draft-model: draft tokens per cycle (default {DEFAULT_GAMMA})",
    )
    if with_method:
        p.add_argument(
            "--head",
            help=f"the head of --method: an EAGLE-1 head for eagle1 and eagle2 (same "
            f"weights; default {DEFAULT_HEAD.name}), an EAGLE-3 head for eagle3 (default "
            f"{DEFAULT_EAGLE3_HEAD.name}), Medusa heads for medusa (default "
            f"{DEFAULT_MEDUSA_HEAD.name})",
        )
    else:
        p.add_argument(
            "--head", help=f"EAGLE-1 head for eagle1 and eagle2 (default {DEFAULT_HEAD.name})"
        )
        p.add_argument(
            "--eagle3-head",
            dest="eagle3_head",
            help=f"EAGLE-3 head for eagle3 (default {DEFAULT_EAGLE3_HEAD.name})",
        )
    p.add_argument(
        "--depth",
        type=integer(1, "a depth such as 5"),
        help=f"eagle1 --tree chain: drafts in the chain (default {DEFAULT_CHAIN_DEPTH}); "
        "eagle2/eagle3: expansion steps, so the tree is up to depth + 1 drafts deep "
        "(default 5)",
    )
    p.add_argument(
        "--tree-top-k",
        dest="tree_top_k",
        type=integer(1, "a branching such as 8"),
        help="eagle2/eagle3: candidates expanded per level and children per candidate "
        "(default 8; "
        "at most --total-tokens - 1; --top-k is the sampling filter)",
    )
    p.add_argument(
        "--total-tokens",
        dest="total_tokens",
        type=integer(2, "a tree size such as 26", also=("auto",)),
        help="eagle2/eagle3: tree nodes verified per cycle, the root included, or auto "
        "(the default): depth, top-k and size chosen from this machine's measured costs, "
        "--depth and --tree-top-k constraining the choice (docs/speed.md)",
    )
    p.add_argument(
        "--prompt-lookup-num-tokens",
        dest="prompt_lookup_num_tokens",
        type=integer(1, "a draft length such as 10"),
        help="pld: most tokens copied from the context per cycle (default 10)",
    )
    p.add_argument(
        "--max-matching-ngram-size",
        dest="max_matching_ngram_size",
        type=integer(1, "an n-gram size such as 2"),
        help="pld: longest n-gram of the context's end looked up earlier in it, tried "
        "longest first (default 2)",
    )


def device_flag(p):
    p.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        default="cpu",
        help="where the arrays live: cpu (NumPy) or gpu (CuPy, the same code on a CUDA "
        "device; pip install 'minieagle[gpu]')",
    )


def generation_flags(p):
    """generate and chat: sampling, one method and its flags, the device, --stats."""
    sampling_flags(p)
    method_flags(p, with_method=True)
    device_flag(p)
    p.add_argument(
        "--calibration",
        help="eagle2/eagle3: the scores the dynamic tree ranks by. Default: the maps shipped "
        "beside the head (calibration.json, fitted by `minieagle calibrate`), each used in the "
        "sampling setting where it measured better on the validation split; none: raw "
        "scores; FILE: that map or head file, fitted for this head (docs/calibration.md)",
    )
    p.add_argument(
        "--sampled-tree",
        dest="sampled_tree",
        nargs="?",
        const=True,
        type=on_off("--sampled-tree"),
        help="eagle2/eagle3 at T > 0: draw each node's children without replacement "
        "(lossless; recovers the acceptance a deterministic top-k tree loses at T = 1). "
        "Default: automatic sizing picks the faster tree, fixed sizes draw the sampled tree; "
        "--sampled-tree off keeps the top-k tree",
    )
    p.add_argument(
        "--expand-threshold",
        dest="expand_threshold",
        type=unit_interval("--expand-threshold 0.5"),
        help="eagle2/eagle3: expand a tree candidate only if its value (its path's chance of "
        "acceptance as the scores estimate it) is at least this, so the tree stops growing "
        "where the head is unsure (default 0: expand every candidate, as EAGLE-2). With "
        "--tree-top-k 1, a chain that goes on while the head is sure (docs/speed.md)",
    )
    p.add_argument("--stats", action="store_true", help="print tokens and ms/token to stderr")
