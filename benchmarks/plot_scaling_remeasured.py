"""The scaling curve re-measured on more prompts: τ against training tokens for the scaling
experiment's heads, from `benchmarks/tree_depth.py` files named `tree-depth-<k>x-<n>.json` (the
heads of point k, n prompts per kind), one line per head and tree depth, one panel per prompt set.

    python benchmarks/plot_scaling_remeasured.py docs/results/tree-depth-*x-24.json \\
        --plot docs/results/eagle3-scaling-24.png

`--wide FILES` (`tree-depth-<k>x-wide-<n>.json`: a wider EAGLE-3 head's points, its files' EAGLE-1
column another point's head) adds that head's EAGLE-3 curve (green squares) beside the others:

    python benchmarks/plot_scaling_remeasured.py docs/results/tree-depth-?x-24.json \\
        --wide docs/results/tree-depth-?x-wide-24.json \\
        --plot docs/results/eagle3-scaling-wide-24.png

The x axis is k x `eagle3_scaling.UNIT_TOKENS` (2.64M); nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from eagle3_scaling import UNIT_TOKENS

from minieagle.errors import InvalidInputError

NAME = re.compile(r"tree-depth-(\d+)x-(?:wide-)?(\d+)\.json$")
SETS = {"heldout": "held-out prompts", "ood": "out-of-domain prompts"}
HEADS = {"eagle3": "EAGLE-3 head", "eagle1": "EAGLE-1 head, EAGLE-2 tree"}


def read_points(paths) -> dict:
    """{point k: the file's rows}, refusing a file whose name does not say its point."""
    points = {}
    for path in paths:
        match = NAME.search(str(path))
        if match is None:
            raise InvalidInputError(
                f"{path}: expected a name tree-depth-<k>x-<n>.json (the heads of point k, n "
                "prompts per kind), as benchmarks/tree_depth.py --json was given"
            )
        points[int(match.group(1))] = json.loads(Path(path).read_text())["depths"]
    if not points:
        raise InvalidInputError("no files given; pass docs/results/tree-depth-*x-24.json")
    return dict(sorted(points.items()))


def plot(points: dict, out: Path, wide: dict | None = None,
         wide_label: str = "EAGLE-3 head, 4x wider MLP") -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depths = sorted({row["depth"] for rows in points.values() for row in rows})
    fig, axes = plt.subplots(1, len(SETS), figsize=(9.5, 3.8), sharey=True)
    tokens = [k * UNIT_TOKENS for k in points]
    for ax, (set_name, title) in zip(axes, SETS.items(), strict=True):
        for color, (head, label) in zip(("C1", "C0"), HEADS.items(), strict=True):
            for style, depth in zip(("-", "--", ":"), depths, strict=False):
                taus = [next(r for r in rows if r["depth"] == depth)[head][set_name]["tau"]
                        for rows in points.values()]  # fmt: skip
                ax.plot(tokens, taus, style, color=color, marker="o",
                        label=f"{label}, {depth + 1} levels")  # fmt: skip
        for style, depth in zip(("-", "--", ":"), depths, strict=False):
            if not wide:
                break
            taus = [next(r for r in rows if r["depth"] == depth)["eagle3"][set_name]["tau"]
                    for rows in wide.values()]  # fmt: skip
            ax.plot([k * UNIT_TOKENS for k in wide], taus, style, color="C2", marker="s",
                    label=f"{wide_label}, {depth + 1} levels")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(tokens, [f"{k}x\n{k * UNIT_TOKENS / 1e6:.1f}M" for k in points])
        ax.minorticks_off()
        ax.set_xlabel("training tokens (one pass)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("τ at T = 0 (26 nodes)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", help="tree-depth-<k>x-<n>.json files")
    parser.add_argument("--plot", required=True, help="the PNG to write")
    parser.add_argument("--wide", nargs="+", default=[],
                        help="tree-depth-<k>x-wide-<n>.json files: a wider EAGLE-3 head's points, "
                        "drawn beside (its EAGLE-3 column only)")  # fmt: skip
    args = parser.parse_args(argv)
    points = read_points(args.files)
    plot(points, Path(args.plot), read_points(args.wide) if args.wide else None)
    for k, rows in points.items():
        for row in rows:
            print(f"{k}x, {row['levels']} levels: EAGLE-3 / EAGLE-2 "
                  f"{row['ratio']['heldout']['all']:.2f} held-out, "
                  f"{row['ratio']['ood']['all']:.2f} ood")  # fmt: skip
    return points


if __name__ == "__main__":
    try:
        main()
    except InvalidInputError as error:
        sys.exit(f"error: {error}")
