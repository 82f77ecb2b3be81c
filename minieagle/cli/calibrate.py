"""`minieagle calibrate`: fit a head's calibration maps and write them beside it
(DIR/calibration.json), used by default where they measured better on the validation split."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from minieagle.calibrate import TEMPERATURES
from minieagle.cli.flags import DEFAULT_MODEL, integer
from minieagle.cli.methods import load_target
from minieagle.errors import InvalidInputError


def cmd_calibrate(args) -> int:
    from minieagle.calibrate import calibrate_head
    from minieagle.calibration import HEAD_FILE, save_head_calibration
    from minieagle.shipped import _config, default_head, resolve_head

    head_dir = (
        resolve_head(args.head) if args.head else default_head(args.method or "eagle2", args.model)
    )
    kind = _config(head_dir).get("minieagle_head")
    method = args.method or {"eagle1": "eagle2", "eagle3": "eagle3"}.get(kind)
    if method is None:
        raise InvalidInputError(
            f"{head_dir} is not an EAGLE-1 or EAGLE-3 head (its config.json records "
            f"minieagle_head={kind!r}); pass an EAGLE head directory or name, e.g. --head "
            "small-eagle1"
        )
    out = Path(args.out) if args.out else head_dir / HEAD_FILE
    if not out.parent.is_dir():
        raise InvalidInputError(f"--out {out}: the directory {out.parent} does not exist")
    target, config, tokenizer = load_target(args.model)
    model = [] if args.model == str(DEFAULT_MODEL) else ["--model", args.model]
    grid = ",".join(f"{t:g}" for t in args.temperatures) or "none"
    sizes = {"depth": args.depth, "top_k": args.tree_top_k, "total_tokens": args.total_tokens}
    tree = []  # the tree flags given, for the command the file records
    for flag, key in (("--depth", "depth"), ("--tree-top-k", "top_k"),
                      ("--total-tokens", "total_tokens")):  # fmt: skip
        if sizes[key] is not None:
            tree += [flag, str(sizes[key])]
    command = shlex.join(
        ["minieagle", "calibrate", "--head", args.head or head_dir.name, *model, "--method",
         method, "--fit-prompts", str(args.fit_prompts), "--val-prompts", str(args.val_prompts),
         "--fit-tokens", str(args.fit_tokens), "--val-tokens", str(args.val_tokens),
         *(["--temperatures", grid] if args.temperatures != TEMPERATURES else []), *tree]
    )  # fmt: skip
    fitted = calibrate_head(
        target,
        config,
        tokenizer,
        head_dir,
        method,
        target_dir=args.model,
        fit_prompts=args.fit_prompts,
        val_prompts=args.val_prompts,
        fit_tokens=args.fit_tokens,
        val_tokens=args.val_tokens,
        temperatures=args.temperatures,
        sizes=sizes,
        command=command,
    )
    save_head_calibration(fitted, out)
    print(out)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit a head's calibration maps (one per sampling setting) on training prompts, "
        "judge them on the validation split, and write them beside the head "
        "(DIR/calibration.json), used by default where they helped",
    )
    p.add_argument(
        "--head",
        help="EAGLE-1 or EAGLE-3 head: a directory or a shipped head's "
        "name (default: the shipped EAGLE-1 head for --model)",
    )
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="the target the head drafts for")
    p.add_argument(
        "--method",
        choices=["eagle2", "eagle3"],
        help="default: eagle2 for an EAGLE-1 head, eagle3 for an EAGLE-3 head",
    )
    p.add_argument("--out", help="where to write the maps (default: HEAD/calibration.json)")
    p.add_argument(
        "--fit-prompts",
        dest="fit_prompts",
        type=integer(1, "a count such as 12"),
        default=12,
        help="training prompts per corpus (prose, code)",
    )
    p.add_argument(
        "--val-prompts",
        dest="val_prompts",
        type=integer(1, "a count such as 8"),
        default=8,
        help="validation prompts per corpus",
    )
    p.add_argument(
        "--fit-tokens", dest="fit_tokens", type=integer(1, "a count such as 64"), default=64
    )
    p.add_argument(
        "--val-tokens", dest="val_tokens", type=integer(1, "a count such as 48"), default=48
    )
    p.add_argument(
        "--temperatures",
        type=temperature_grid,
        default=TEMPERATURES,
        help="the temperatures a top-k tree's scores are fitted over, comma-separated (default "
        f"{','.join(f'{t:g}' for t in TEMPERATURES)}; each one decodes the training prompts "
        "once more per setting); none: the isotonic maps only",
    )
    p.add_argument(
        "--depth",
        type=integer(1, "a depth such as 7"),
        help="the tree the maps are fitted and judged on: expansion steps (default: the "
        "method's, 5 for eagle2, 7 for eagle3)",
    )
    p.add_argument(
        "--tree-top-k",
        dest="tree_top_k",
        type=integer(1, "a branching such as 10"),
        help="the same tree's candidates expanded per level and children each (default 8)",
    )
    p.add_argument(
        "--total-tokens",
        dest="total_tokens",
        type=integer(2, "a tree size such as 60"),
        help="the same tree's nodes verified per cycle, the root included (default 26): fit "
        "the maps on the tree decoding will use, e.g. the EAGLE-3 paper's 60 nodes with "
        "--tree-top-k 10",
    )
    p.set_defaults(func=cmd_calibrate, method=None)


def temperature_grid(text: str) -> tuple:
    """--temperatures: "none", or positive finite numbers separated by commas."""
    import math

    if text.strip().lower() == "none":
        return ()
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(t) and t > 0 for t in values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected temperatures > 0 separated by commas, e.g. 0.35,0.5, or none"
        )
    return values
