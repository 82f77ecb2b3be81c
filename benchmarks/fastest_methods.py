"""Write minieagle/pretrained/fastest.json, what `--method auto` (the CLI's default) decodes each
shipped target with, from the side-by-side speed measurements committed under docs/results/.

    python benchmarks/fastest_methods.py \\
        --entry small minieagle/pretrained/small docs/results/bench-defaults-methods.json \\
        --entry smollm2-135m-instruct ~/.cache/minieagle/models/smollm2-135m-instruct \\
                docs/results/smollm2-cli.json \\
        --gpu-entry small minieagle/pretrained/small docs/results/gpu/gpu-bench-methods.json \\
        --out minieagle/pretrained/fastest.json

Each entry: the target's name (its directory's name), its directory (for its weights'
fingerprint and size) and a results file, either `minieagle bench --suite methods --out` 's
methods file (speedups over all prompts, [min..max] over repeats) or benchmarks/smollm2_cli.py's
(over requests and repeats). The rule, per setting (T = 0; T > 0, measured at T = 1): of the
methods whose whole [min..max] speedup over vanilla's tokens/s is above 1, the one of the
highest median; none such: vanilla. Each results row becomes the CLI flags it was measured with
(ROWS). A --gpu-entry is the same from a GPU's methods file; `--method auto --device gpu` reads
it (the fastest method differs: on a GPU verifying many tokens costs about what one does).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# results row -> (--method, the flags it was measured with, as argparse names)
ROWS = {
    "draft-model": ("draft-model", {}),
    "eagle1-tree": ("eagle1", {}),
    "eagle1-chain3": ("eagle1", {"tree": "chain", "depth": 3}),
    "eagle1-chain5": ("eagle1", {"tree": "chain", "depth": 5}),
    "eagle1-chain-auto": ("eagle1", {"tree": "auto"}),
    "eagle1-auto": ("eagle1", {"tree": "auto"}),
    "eagle2": ("eagle2", {}),
    "eagle2-26": ("eagle2", {"total_tokens": 26}),
    "eagle3": ("eagle3", {}),
    "eagle3-26": ("eagle3", {"total_tokens": 26}),
    # fixed chains of the EAGLE-3 head (benchmarks/smollm2_cli.py's rows of the same names)
    "eagle3-chain1": ("eagle3", {"total_tokens": 2, "depth": 1, "tree_top_k": 1}),
    "eagle3-chain2": ("eagle3", {"total_tokens": 3, "depth": 2, "tree_top_k": 1}),
    "pld": ("pld", {}),
    "medusa": ("medusa", {}),
}
SETTINGS = {"T=0": "T=0", "T>0": "T=1"}  # setting -> the results' key it is measured at


def speedups(results: dict, key: str) -> dict[str, tuple[float, float, float, float]]:
    """row -> (median, min, max, tau) at results[key], from either kind of results file."""
    rows = results[key]
    if "all" in rows:  # minieagle bench --suite methods: per prompt kind, then "all"
        rows = rows["all"]
        return {name: (r["speedup"]["median"], r["speedup"]["min"], r["speedup"]["max"],
                       r["tau"]) for name, r in rows.items()}  # fmt: skip
    return {name: (r["speedup_median"], r["speedup_min"], r["speedup_max"], r["tau"])
            for name, r in rows.items()}  # fmt: skip


def choose(rows: dict, source: str, setting: str) -> dict:
    """The setting's record: the fastest method whose whole range is above vanilla (module
    docstring), or vanilla with the reason."""
    known = {name: v for name, v in rows.items() if name in ROWS}
    above = {name: v for name, v in known.items() if v[1] > 1.0}
    if not above:
        best = max(known, key=lambda name: known[name][0])
        median, low, high, _ = known[best]
        return {"method": "vanilla", "why": f"no method's whole speedup range was above 1 at "
                f"{setting} (the best median: {best} {median:.2f}x [{low:.2f}..{high:.2f}], "
                f"{source})", "source": source}  # fmt: skip
    best = max(above, key=lambda name: above[name][0])
    median, low, high, tau = above[best]
    method, flags = ROWS[best]
    return {"method": method, "flags": flags, "speedup": round(median, 3),
            "range": [round(low, 3), round(high, 3)], "tau": round(tau, 3), "row": best,
            "source": source}  # fmt: skip


def build(entries, gpu_entries=()) -> dict:
    """The fastest.json object for entries [(name, model_dir, results_file)] measured on the CPU
    and gpu_entries measured on a GPU (`minieagle bench --suite methods --device gpu`)."""
    from minieagle.checkpoint import WEIGHTS_FILE, target_fingerprint
    from minieagle.shipped import FASTEST_FORMAT

    targets = []
    tagged = [(entry, "cpu") for entry in entries] + [(entry, "gpu") for entry in gpu_entries]
    for (name, model_dir, results_file), device in tagged:
        results = json.loads(Path(results_file).read_text())
        source = Path(results_file).as_posix()
        if "docs/results/" in source:
            source = "docs/results/" + source.split("docs/results/", 1)[1]
        weights = Path(model_dir) / WEIGHTS_FILE
        entry = {"name": name, "device": device, "fingerprint": target_fingerprint(model_dir),
                 "weights_bytes": weights.stat().st_size}  # fmt: skip
        for setting, key in SETTINGS.items():
            entry[setting] = choose(speedups(results, key), source, setting)
        targets.append(entry)
    return {
        "format": FASTEST_FORMAT,
        "note": "written by benchmarks/fastest_methods.py; read by --method auto "
        "(minieagle.shipped.fastest_method)",
        "targets": targets,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entry", nargs=3, action="append", required=True,
                        metavar=("NAME", "MODEL_DIR", "RESULTS"))  # fmt: skip
    parser.add_argument("--gpu-entry", nargs=3, action="append", default=[],
                        metavar=("NAME", "MODEL_DIR", "RESULTS"),
                        help="the same, measured on a GPU (what --method auto picks with "
                        "--device gpu)")  # fmt: skip
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    data = build(args.entry, args.gpu_entry)
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    for entry in data["targets"]:
        for setting in SETTINGS:
            record = entry[setting]
            print(f"{entry['name']} ({entry['device']}) {setting}: {record['method']} "
                  f"{record.get('flags', '')} "
                  f"{record.get('speedup', record.get('why'))}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
