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

`--ratios FILES --ratio-plot PNG` draws what issue 20 asks of the tiny target instead: EAGLE-3 /
EAGLE-2 τ per kind of prompt against training tokens, each method at its paper's tree (EAGLE-3
8 levels, EAGLE-2 6) with the scores shipped beside each head (`tree_depth.py --scores
shipped` files, `tree-depth-<k>x-wide-shipped-<n>.json`), the 1.25 asked and the papers' ≈ 1.4
as lines; `--ratio-shipped FILE` adds the head at the target's width (its 8x point) as hollow
markers:

    python benchmarks/plot_scaling_remeasured.py docs/results/tree-depth-?x-24.json \\
        --ratios docs/results/tree-depth-?x-wide-shipped-24.json \\
        --ratio-shipped docs/results/tree-depth-shipped-24.json \\
        --ratio-plot docs/results/eagle3-ratio-wide-24.png --plot docs/results/eagle3-scaling-24.png

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

NAME = re.compile(r"tree-depth-(\d+)x-(?:wide-)?(?:shipped-)?(\d+)\.json$")
KINDS = {("heldout", "prose"): "held-out prose", ("heldout", "code"): "held-out code",
         ("ood", "ood-prose"): "out-of-domain prose", ("ood", "ood-code"): "out-of-domain code"}
PAPER_TREES = {"eagle3": 7, "eagle1": 5}  # expansion steps: EAGLE-3 8 levels, EAGLE-2 6
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


def kind_ratios(rows) -> dict:
    """{kind label: EAGLE-3 τ at 8 levels / EAGLE-2 τ at 6} from one tree_depth.py file's rows."""
    at = {depth: next((r for r in rows if r["depth"] == depth), None)
          for depth in PAPER_TREES.values()}  # fmt: skip
    if any(row is None for row in at.values()):
        raise InvalidInputError(
            f"a file lacks depth {sorted(PAPER_TREES.values())}: run tree_depth.py --depths 5,7"
        )
    e3, e2 = at[PAPER_TREES["eagle3"]]["eagle3"], at[PAPER_TREES["eagle1"]]["eagle1"]
    return {label: e3[s]["tau_by_kind"][k] / e2[s]["tau_by_kind"][k]
            for (s, k), label in KINDS.items()}  # fmt: skip


def plot_ratios(points: dict, out: Path, shipped: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ratios = {k: kind_ratios(rows) for k, rows in points.items()}
    tokens = [k * UNIT_TOKENS for k in ratios]
    for color, label in zip(("C0", "C1", "C2", "C3"), KINDS.values(), strict=True):
        ax.plot(tokens, [r[label] for r in ratios.values()], "-s", color=color,
                label=f"{label}, 4x wider MLP")  # fmt: skip
        if shipped is not None:
            ax.plot([8 * UNIT_TOKENS], [shipped[label]], "o", mfc="none", color=color, ms=9)
    if shipped is not None:
        ax.plot([], [], "o", mfc="none", color="gray", label="the target's width (8x, shipped)")
    ax.axhline(1.25, color="k", ls="--", lw=1, label="1.25 (issue 20)")
    ax.axhline(1.4, color="gray", ls=":", lw=1, label="≈ 1.4 (EAGLE-3 paper)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(tokens, [f"{k}x\n{k * UNIT_TOKENS / 1e6:.1f}M" for k in ratios])
    ax.minorticks_off()
    ax.set_xlabel("training tokens (one pass)")
    ax.set_ylabel("EAGLE-3 τ / EAGLE-2 τ (T = 0, 26 nodes)")
    ax.set_title("EAGLE-3 (8 levels) over EAGLE-2 (6 levels), shipped scores")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
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
    parser.add_argument("--ratios", nargs="+", default=[],
                        help="tree-depth-<k>x-wide-shipped-<n>.json files for --ratio-plot")
    parser.add_argument("--ratio-shipped", help="the shipped head's --scores shipped file")
    parser.add_argument("--ratio-plot", help="the PNG of EAGLE-3 / EAGLE-2 by kind to write")
    args = parser.parse_args(argv)
    if bool(args.ratios) != bool(args.ratio_plot):
        raise InvalidInputError(
            "--ratios and --ratio-plot go together: pass both, e.g. --ratios "
            "docs/results/tree-depth-?x-wide-shipped-24.json --ratio-plot r.png"
        )
    if args.ratios:
        shipped = None
        if args.ratio_shipped:
            shipped = kind_ratios(json.loads(Path(args.ratio_shipped).read_text())["depths"])
        plot_ratios(read_points(args.ratios), Path(args.ratio_plot), shipped)
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
