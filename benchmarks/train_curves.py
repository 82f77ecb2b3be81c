"""Training curves of draft heads: the evaluations a run logged, against its steps.

    python benchmarks/train_curves.py \\
        --log 3.3M=docs/results/smollm2-eagle3-train-log.json \\
        --log continued=docs/results/smollm2-eagle3-continued-train-log.json \\
        --log wider=docs/results/smollm2-eagle3-wide-train-log.json \\
        --concat --decay-steps 320 --out docs/results/smollm2-eagle3-train-curves.png

A log is a `train_log.json`, or a run directory (`minieagle train ... --out-dir RUN`): its
`train_log.json` once it has finished, else the log its last saved state holds
(`RUN/state/state.json`), so a run can be watched while it trains. `--metric` picks the
evaluations' keys by shell pattern (default `val_top1_0_*`: an EAGLE-3 head's first draft's
greedy agreement with the target on each validation set; `val_top1_*` for an EAGLE-1 head), one
line per key. `--concat` lays the logs end to end, for runs that each continued the one
before; `--decay-steps N` shades each run's last N steps, where a warmup-stable-decay rate
decays (`N1,N2,...`: one count for each log, in order, for runs of other lengths). The table
printed lists every value drawn.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
from pathlib import Path

from minieagle.errors import InvalidInputError


def read_log(path: Path) -> dict:
    """The log of a run: a train_log.json file, or a run directory's (finished, or its last
    saved state's while it trains)."""
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / "train_log.json", path / "state" / "state.json"):
            if candidate.is_file():
                record = json.loads(candidate.read_text())
                return record["log"] if candidate.name == "state.json" else record
        raise InvalidInputError(
            f"{path} holds no train_log.json and no saved state (state/state.json); pass a run "
            "directory of `minieagle train` or its train_log.json"
        )
    if not path.is_file():
        raise InvalidInputError(f"{path} does not exist; pass a train_log.json or a run directory")
    return json.loads(path.read_text())


def series(logs: dict, patterns: list[str], concat: bool) -> dict:
    """{key: {label: ([x], [y])}} for every evaluation key matching a pattern, x the step (plus
    the steps of the logs before it with concat)."""
    out, offset = {}, 0
    for label, log in logs.items():
        evals = log.get("evals", [])
        for record in evals:
            for key, value in record.items():
                if key == "step" or not any(fnmatch.fnmatch(key, p) for p in patterns):
                    continue
                xs, ys = out.setdefault(key, {}).setdefault(label, ([], []))
                xs.append(record["step"] + offset)
                ys.append(value)
        if concat and evals:
            offset += evals[-1]["step"]
    if not out:
        raise InvalidInputError(
            f"no logged evaluation matches {patterns}; the keys are e.g. "
            f"{sorted(next((r for log in logs.values() for r in log.get('evals', [])), {}))[:6]}"
        )
    return out


def decay_counts(text: str, logs: int) -> list[int]:
    """`--decay-steps`: one count for every log, or one for each log in order."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 0 or len(counts) not in (1, logs):
        raise InvalidInputError(
            f"--decay-steps {text!r}: expected one step count >= 0, or {logs} of them separated "
            "by commas (one for each --log, in order), e.g. --decay-steps 320 or 690,474"
        )
    return counts * logs if len(counts) == 1 else counts


def plot(curves: dict, logs: dict, path: Path, *, concat: bool, decay_steps: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    offset = 0
    for (label, log), decay in zip(logs.items(), decay_steps, strict=True):
        evals = log.get("evals", [])
        if not evals:
            continue
        last = evals[-1]["step"]
        start = offset if concat else 0
        if decay:
            ax.axvspan(start + last - decay, start + last, color="grey", alpha=0.12, lw=0)
        if concat:
            ax.axvline(start, color="grey", lw=0.6, ls=":")
            ax.text(start, 1.0, f" {label}", transform=ax.get_xaxis_transform(), va="top",
                    fontsize=8)  # fmt: skip
            offset += last
    for k, (key, by_log) in enumerate(sorted(curves.items())):
        for i, (label, (xs, ys)) in enumerate(by_log.items()):
            name = key if concat else f"{label}: {key}"
            ax.plot(xs, ys, marker="o", ms=3, color=colours[k % len(colours)],
                    ls="-" if concat else styles[i % len(styles)],
                    label=name if (not concat or i == 0) else None)  # fmt: skip
    ax.set_xlabel("training step" + (" (the runs end to end)" if concat else ""))
    ax.set_ylabel("logged value")
    if any(decay_steps):
        counts = ("" if len(set(decay_steps)) > 1 else f"{decay_steps[0]} ")
        ax.set_title(f"shaded: each run's last {counts}steps, as its rate decays", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", action="append", required=True, metavar="LABEL=PATH",
                   help="a train_log.json or a run directory; repeat for more")  # fmt: skip
    p.add_argument("--metric", action="append", metavar="PATTERN",
                   help="evaluation keys to draw, shell patterns (val_top1_0_*)")  # fmt: skip
    p.add_argument("--concat", action="store_true", help="lay the logs end to end")
    p.add_argument("--decay-steps", default="0", metavar="N[,N...]",
                   help="shade each run's last N steps (its rate's decay); one N for "
                        "every log, or one for each log in order")  # fmt: skip
    p.add_argument("--out", type=Path, help="PNG to draw (else only the table)")
    args = p.parse_args(argv)
    logs = {}
    for item in args.log:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise InvalidInputError(f"--log {item!r}: expected LABEL=PATH, e.g. wide=runs/eagle3")
        if label in logs:
            raise InvalidInputError(f"--log label {label!r} is given twice; name each log once")
        logs[label] = read_log(Path(path))
    decay_steps = decay_counts(args.decay_steps, len(logs))
    curves = series(logs, args.metric or ["val_top1_0_*"], args.concat)
    for key, by_log in sorted(curves.items()):
        print(key)
        for label, (xs, ys) in by_log.items():
            points = zip(xs, ys, strict=True)
            print(f"  {label:>12}: " + "  ".join(f"{x}:{y:.3f}" for x, y in points))
    if args.out:
        plot(curves, logs, args.out, concat=args.concat, decay_steps=decay_steps)
        print(f"plot written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
