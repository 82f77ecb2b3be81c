"""Every method's speedup over vanilla on two machines, side by side: a figure from two results
files of `minieagle bench --suite methods` (the same rows, each file's speedups against its own
vanilla measured in the same run). Nothing is measured here.

    python benchmarks/plot_devices.py \\
        --run "2-core CPU, NumPy"=docs/results/bench-defaults-methods.json \\
        --run "H200, CuPy"=docs/results/gpu/gpu-bench-methods.json \\
        --out docs/results/gpu/methods-cpu-vs-gpu.png

One panel per setting (T = 0, T = 1); a bar per method and run at the median over all prompts,
its line the [min..max] over the repeats; the fastest row of each run is marked (what
`--method auto` picks where its whole range is above 1: benchmarks/fastest_methods.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SETTINGS = ("T=0", "T=1")
LABELS = {  # row -> the method as a reader knows it
    "draft-model": "draft model",
    "eagle1-tree": "EAGLE-1 tree",
    "eagle1-chain3": "EAGLE-1 chain:3",
    "eagle1-chain5": "EAGLE-1 chain:5",
    "eagle1-chain-auto": "EAGLE-1 --tree auto",
    "eagle2": "EAGLE-2 (sized)",
    "eagle2-26": "EAGLE-2, 26 nodes",
    "eagle3": "EAGLE-3 (sized)",
    "eagle3-26": "EAGLE-3, 26 nodes",
    "pld": "prompt lookup",
    "medusa": "Medusa",
}


def read_runs(specs: list[str]) -> dict[str, dict]:
    """LABEL=FILE specs -> {label: {setting: {row: (median, min, max)}}}, rows in LABELS order;
    a row missing from a file is left out of that run."""
    runs = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--run {spec!r}: expected LABEL=FILE")
        results = json.loads(Path(path).read_text())
        runs[label] = {}
        for setting in SETTINGS:
            rows = results[setting]["all"]
            runs[label][setting] = {
                row: (rows[row]["speedup"]["median"], rows[row]["speedup"]["min"],
                      rows[row]["speedup"]["max"])
                for row in LABELS if row in rows
            }  # fmt: skip
    return runs


def plot(runs: dict[str, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in LABELS if any(row in r[s] for r in runs.values() for s in SETTINGS)]
    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(13, 5.2), sharey=True)
    width = 0.8 / len(runs)
    for ax, setting in zip(axes, SETTINGS, strict=True):
        for i, (label, run) in enumerate(runs.items()):
            values = run[setting]
            xs = [j + (i - (len(runs) - 1) / 2) * width for j, row in enumerate(rows)
                  if row in values]  # fmt: skip
            present = [row for row in rows if row in values]
            medians = [values[row][0] for row in present]
            low = [values[row][0] - values[row][1] for row in present]
            high = [values[row][2] - values[row][0] for row in present]
            bars = ax.bar(xs, medians, width, yerr=[low, high], capsize=2, label=label)
            best = max(range(len(present)), key=lambda j: medians[j])
            ax.annotate("fastest", (xs[best], values[present[best]][2]), ha="center",
                        va="bottom", fontsize=8, color=bars[best].get_facecolor(),
                        xytext=(0, 3), textcoords="offset points")  # fmt: skip
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(rows)), [LABELS[row] for row in rows], rotation=55, ha="right")
        ax.set_title(f"{setting}: speedup over each machine's own vanilla decoding")
    axes[0].set_ylabel("tokens/s ÷ vanilla's (median, [min..max] over repeats)")
    axes[0].legend(fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, metavar="LABEL=FILE",
                        help="a methods results file and its legend label; give two or more")
    parser.add_argument("--out", required=True, help="the PNG to write")  # fmt: skip
    args = parser.parse_args(argv)
    runs = read_runs(args.run)
    plot(runs, Path(args.out))
    for label, run in runs.items():
        for setting in SETTINGS:
            best = max(run[setting], key=lambda row: run[setting][row][0])
            print(f"{label} {setting}: fastest {best} {run[setting][best][0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
