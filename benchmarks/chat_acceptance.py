"""EAGLE heads' acceptance on held-out chat answers the target wrote itself, no decoding needed.

τ on a handful of chat requests (`benchmarks/smollm2_methods.py`) is what a user sees, but six
requests of 64 tokens are a few hundred drafts: too few to tell two heads apart by a few
percent or to draw a trend through. This reads a held-out set made by `minieagle distill
--split val|test|ood` (the same kind of data the heads train on: requests about passages,
answered by the target; the passages from the corpora's validation or test splits or from
other packages' docs and code) and, for each head, unrolls it over every window as training
does (`eagle3._ttt_forward`: step 0 reads the target's fused features, step s its own output
s steps along the teacher-forced chain), scoring only positions inside the target's answers,
up to and with its end-of-turn token:

- top1_s: the draft's argmax is the target's (over the full vocabulary). At T = 0 step 0's
  top1 at a position is whether a chain of one draft drafted there is accepted (the head reads
  the same true features), so `1 + top1_0` is that chain's τ, averaged over all positions
  where decoding visits only the cycles' roots;
- accept_s: sum_v min(p_v, q_v), the chance that a draft sampled from the head is accepted by
  speculative sampling (the T = 1 chain's acceptance);
- covered: the share of the target's argmax tokens inside the head's draft vocabulary, the
  ceiling on top1;
- covered_mass: the target's probability inside the draft vocabulary (at temperature 1), the
  ceiling on accept: a draft vocabulary's price when the target samples.

Each figure is a mean over answer positions with its standard error over windows (the windows
are independent; a window's positions are not); consecutive heads are also compared on the
same positions (`paired_difference`), and the per-window sums are kept in the JSON for that.
The target's logits come from the recorded final features through its LM head, once per batch
for all heads.

    S=~/.cache/minieagle/runs/smollm2 M=~/.cache/minieagle/models/smollm2-135m-instruct
    OPENBLAS_NUM_THREADS=1 python benchmarks/chat_acceptance.py --model $M \\
        --head 3.3M=git:92cc63d:minieagle/pretrained/smollm2-eagle3 \\
        --head wide=minieagle/pretrained/smollm2-eagle3 \\
        --data $S/heldout-val-T0 $S/heldout-ood-T0 --out docs/results/chat-acceptance.json

An EAGLE-1 head (its config.json says which) is unrolled as its chains draft: step 0 reads
the token x_{t+1} and the target's feature f_t, step s its own guess of the feature before
(`eagle1_unrolled`, through `eagle1.head_forward` and its KV cache), so beside an EAGLE-3 head
it answers the EAGLE-3 paper's question on the same positions: does training-time test keep
the later drafts better? Its coverage is 1: it drafts from the whole vocabulary.

A head is LABEL=DIR, or LABEL=git:COMMIT:PATH for a head as a commit shipped it (read with
`git show` into a temporary directory). `--tokens LABEL=N` records how many training tokens a
head saw, and `--plot` draws top1_0 / accept_0 against them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from minieagle import layers, model
from minieagle.chat import answer_label_mask, answer_spans, assistant_cue, load_chat_template
from minieagle.checkpoint import load_checkpoint
from minieagle.distill import RUN_FILE, open_shards
from minieagle.errors import InvalidInputError
from minieagle.heads import eagle1, eagle3
from minieagle.heads.eagle3_io import load_eagle3_head

HEAD_FILES = ("config.json", "model.safetensors")


def head_directory(spec: str, scratch: Path) -> Path:
    """DIR as given, or git:COMMIT:PATH written out of git into `scratch`."""
    if not spec.startswith("git:"):
        return Path(spec).expanduser()
    _, commit, path = spec.split(":", 2)
    out = scratch / f"{commit}-{path.replace('/', '_')}"
    out.mkdir(parents=True, exist_ok=True)
    for name in HEAD_FILES:
        done = subprocess.run(["git", "show", f"{commit}:{path}/{name}"], capture_output=True,
                              check=False)  # fmt: skip
        if done.returncode != 0:
            raise InvalidInputError(
                f"{spec}: git show {commit}:{path}/{name} failed ({done.stderr.decode().strip()}); "
                "pass a commit and a head directory that it holds"
            )
        (out / name).write_bytes(done.stdout)
    return out


def score_batch(step_logits, vocab, target_top, target_on_draft, mask) -> list[dict]:
    """Per step s: per window, (sum of top1, sum of accept, positions) over rows t with
    mask[t + s] (row t at step s drafts the token the target's row t + s predicts). vocab: an
    EAGLE-3 head's draft vocabulary, or None for logits over the target's whole vocabulary."""
    out = []
    for s, logits in enumerate(step_logits):
        T = logits.shape[1] - s
        weights = mask[:, s:].astype(np.float64)
        draft_top = np.argmax(logits[:, :T], axis=-1)
        if vocab is not None:
            draft_top = eagle3.draft_to_target(draft_top, vocab)
        agree = (draft_top == target_top[:, s:]).astype(np.float64)
        q = layers.softmax(logits[:, :T].astype(np.float64))
        overlap = np.minimum(q, target_on_draft[:, s:]).sum(axis=-1)
        out.append(
            {
                "top1": (agree * weights).sum(axis=1),
                "accept": (overlap * weights).sum(axis=1),
                "n": weights.sum(axis=1),
            }
        )
    return out


def mean_and_error(sums: np.ndarray, counts: np.ndarray) -> tuple[float, float]:
    """Pooled mean over positions and its standard error over windows (ratio estimator)."""
    keep = counts > 0
    sums, counts = sums[keep], counts[keep]
    mean = sums.sum() / counts.sum()
    k = len(counts)
    if k < 2:
        return float(mean), float("nan")
    resid = (sums - mean * counts) / counts.mean()
    return float(mean), float(np.sqrt((resid**2).sum() / (k * (k - 1))))


def load_any_head(directory: Path, config) -> tuple:
    """(kind, head, cfg, vocab) of the head in directory: "eagle3" with its draft vocabulary,
    or "eagle1" (it drafts through the target's LM head: vocab None)."""
    kind = json.loads((directory / "config.json").read_text()).get("minieagle_head", "eagle3")
    if kind == "eagle1":
        head, cfg = eagle1.load_head(directory)
        return "eagle1", head, cfg, None
    if kind != "eagle3":
        raise InvalidInputError(f"{directory} holds a {kind} head; pass an EAGLE-1 or EAGLE-3 head")
    return ("eagle3", *load_eagle3_head(directory, target_config=config))


def chain_mask(T: int, step: int) -> np.ndarray:
    """bool [T, (step + 1) T]: what row t of unrolled step `step` sees among the keys of steps
    0 .. step laid end to end: step 0's rows <= t (the true prefix up to the chain's root t)
    and, of each later step, row t alone (its own chain's earlier drafts)."""
    index = np.arange(T)
    blocks = [index[None, :] <= index[:, None]]
    blocks += [index[None, :] == index[:, None]] * step
    return np.concatenate(blocks, axis=1)


def eagle1_unrolled(head, cfg, target_params, windows, features, steps: int) -> list:
    """An EAGLE-1 head's logits [B, T, V] per step along a chain rooted at every row, tokens
    teacher-forced, as drafting a chain sees them once its drafts are accepted: step 0 reads
    x_{t+1} and the target's f_t; step s reads x_{t+1+s} and its own step s - 1 output at row t
    (its guess of f_{t+s}), at position t + s, attending to the true prefix up to t and to its
    chain's steps (`chain_mask`), through `eagle1.head_forward` and a KV cache that keeps each
    step's keys. windows int [B, T + 1], features [B, T, d] (f_0 .. f_{T-1})."""
    B, T = features.shape[0], windows.shape[1] - 1
    chain = np.concatenate([windows, np.zeros((B, steps - 1), windows.dtype)], axis=1)
    cache = eagle1.new_head_cache(cfg, head, capacity=steps * T, batch=B)
    out, index = [], np.arange(T)
    for s in range(steps):
        features, logits, _ = eagle1.head_forward(
            head, cfg, target_params, chain[:, 1 + s : 1 + s + T], features,
            position_ids=index + s, attention_mask=chain_mask(T, s), cache=cache,
        )  # fmt: skip
        out.append(logits)
    return out


def head_step_logits(kind, head, cfg, target_params, windows, hidden, steps: int) -> list:
    """The head's logits [B, T, V'] per step over windows [B, T + 1]: an EAGLE-3 head unrolled
    `steps` steps as training does (`eagle3._ttt_forward`), an EAGLE-1 head as its chains
    draft (`eagle1_unrolled`)."""
    if kind == "eagle1":
        return eagle1_unrolled(head, cfg, target_params, windows, hidden["final"][:, :-1], steps)
    fused = eagle3.fuse_features(hidden, cfg.aux_layers)[:, :-1]
    step_logits, _ = eagle3._ttt_forward(head, cfg, target_params, windows, fused, steps=steps)
    return step_logits


def evaluate(target_params, heads: dict, data_dir: Path, spans, *, steps: int,
             batch_size: int, max_windows: int = 0) -> dict:  # fmt: skip
    """{label: {"top1": [(mean, se)] per step, "accept": ..., "covered": (mean, se),
    "covered_mass": (mean, se), "positions": n, "windows": k}} for every head (label: (kind,
    head, cfg, vocab), `load_any_head`) on one held-out set; spans(windows) -> (start, stop)
    per window: the tokens scored (`answer_spans`)."""
    shards = open_shards([str(data_dir)])
    if not shards:
        raise InvalidInputError(f"{data_dir} has no complete shard yet; wait for the distill run")
    lm_head = model.lm_head_weight(target_params)  # [V, d]
    per_head = {label: [{"top1": [], "accept": [], "n": []} for _ in range(steps)]
                for label in heads}  # fmt: skip
    covered = {label: ([], []) for label in heads}
    mass = {label: [] for label in heads}  # per window: the target's mass on the draft vocabulary
    seen = 0
    for cache in shards:
        for first in range(0, len(cache), batch_size):
            if max_windows and seen >= max_windows:
                break
            rows = np.arange(first, min(first + batch_size, len(cache)))
            if max_windows:
                rows = rows[: max_windows - seen]
            seen += len(rows)
            windows = np.asarray(cache.windows[rows], dtype=np.int64)  # [B, W]
            hidden = {key: np.asarray(cache.hidden[key][rows], dtype=np.float32)
                      for key in cache.keys}  # fmt: skip
            mask = answer_label_mask(*spans(windows), windows.shape[1])  # [B, W - 1]
            target_logits = hidden["final"][:, 1:] @ lm_head.T  # [B, T, V]
            target_top = target_logits.argmax(axis=-1)
            target_probs = layers.softmax(target_logits.astype(np.float64))
            del target_logits
            for label, (kind, head, cfg, vocab) in heads.items():
                step_logits = head_step_logits(kind, head, cfg, target_params, windows, hidden,
                                               steps)  # fmt: skip
                on_draft = target_probs if vocab is None else np.take(target_probs, vocab.ids,
                                                                      axis=-1)  # fmt: skip
                for s, scores in enumerate(score_batch(step_logits, vocab, target_top,
                                                       on_draft, mask)):  # fmt: skip
                    for name in ("top1", "accept", "n"):
                        per_head[label][s][name].append(scores[name])
                if vocab is None:  # the whole vocabulary: every token can be drafted
                    inside = np.ones(target_top.shape)
                else:
                    inside = np.take(vocab.t2d, target_top).astype(np.float64)
                covered[label][0].append((inside * mask).sum(axis=1))
                mass[label].append((on_draft.sum(axis=-1) * mask).sum(axis=1))
                covered[label][1].append(mask.sum(axis=1).astype(np.float64))
    results = {}
    for label, per_step in per_head.items():
        record = {"top1": [], "accept": [], "per_window": {"n": [], "top1": [], "accept": []}}
        for scores in per_step:
            n = np.concatenate(scores["n"])
            record["per_window"]["n"].append(n.tolist())
            for name in ("top1", "accept"):
                sums = np.concatenate(scores[name])
                record[name].append(mean_and_error(sums, n))
                record["per_window"][name].append(sums.tolist())
        counts = np.concatenate(covered[label][1])
        record["covered"] = mean_and_error(np.concatenate(covered[label][0]), counts)
        record["covered_mass"] = mean_and_error(np.concatenate(mass[label]), counts)
        record["positions"] = int(counts.sum())
        record["windows"] = int((counts > 0).sum())
        results[label] = record
    return results


def paired_difference(a: dict, b: dict, metric: str, step: int = 0) -> tuple[float, float]:
    """Head a's figure minus head b's on the same positions, with its standard error over
    windows: much tighter than either figure's own error bar, since the windows' difficulty
    cancels. a, b: `evaluate` records of one set."""
    n = np.asarray(a["per_window"]["n"][step])
    diff = np.asarray(a["per_window"][metric][step]) - np.asarray(b["per_window"][metric][step])
    return mean_and_error(diff, n)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = report["tokens"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    panels = [("top1", 0.0, "T = 0 answers: top-1, the acceptance of a chain of one draft"),
              ("accept", 1.0, "T = 1 answers: Σ min(p, q), the same at T = 1")]  # fmt: skip
    for ax, (metric, temperature, title) in zip(axes, panels, strict=True):
        named = False  # each head's label once per panel
        goals = [(float(g.partition("=")[0]), g.partition("=")[2])  # greedy goals only
                 for g in (report.get("goals") or () if temperature == 0 else ())]  # fmt: skip
        for name, sets in report["sets"].items():
            if report["provenance"][name]["temperature"] != temperature:
                continue
            labels = [lb for lb in sets if lb in tokens]
            line = [lb for lb in labels if lb in (report.get("line") or labels)]
            x = [tokens[lb] for lb in line]
            y = [sets[lb][metric][0][0] for lb in line]
            e = [sets[lb][metric][0][1] for lb in line]
            drawn = ax.errorbar(x, y, yerr=e, marker="o", capsize=3, label=name)
            top = max((value for value, _ in goals), default=None)
            if report.get("extrapolate") and len(x) >= 2 and top and y[-1] > y[-2]:
                slope = (y[-1] - y[-2]) / np.log10(x[-1] / x[-2])  # per decade, last step
                reach = x[-1] * 10 ** ((top - y[-1]) / slope)
                ax.plot([x[-1], reach], [y[-1], top], linestyle=":",
                        color=drawn[0].get_color())  # fmt: skip
                ax.annotate(f"{reach:.2g}", (reach, top), textcoords="offset points",
                            xytext=(-10, -12), fontsize=7, color=drawn[0].get_color())  # fmt: skip
            for lb in labels:
                xi, (yi, ei) = tokens[lb], sets[lb][metric][0]
                if lb not in line:  # another kind of head: a point of its own, not on the line
                    ax.errorbar([xi], [yi], yerr=[ei], marker="*", markersize=10, capsize=3,
                                color=drawn[0].get_color(), linestyle="none")  # fmt: skip
                if not named:
                    ax.annotate(lb, (xi, yi), textcoords="offset points", xytext=(5, -10),
                                fontsize=7)  # fmt: skip
            named = True
        for value, text in goals:
            ax.axhline(value, color="grey", linestyle="--", linewidth=1)
            ax.annotate(text, (0.02, value), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=7,
                        color="grey")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("training tokens the head saw")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel with no set of its temperature: none
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("first draft's acceptance (answer positions)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_steps(report: dict, path: Path) -> None:
    """Each head's acceptance by steps ahead, one panel per held-out set (top-1 at T = 0,
    Σ min(p, q) at T = 1), with error bars: where a head's later drafts fall off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["sets"])
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.6), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, name in zip(axes[0], names, strict=True):
        greedy = report["provenance"][name]["temperature"] == 0
        metric = "top1" if greedy else "accept"
        for label, record in report["sets"][name].items():
            values = record[metric]
            steps = range(1, len(values) + 1)
            ax.errorbar(steps, [m for m, _ in values], yerr=[e for _, e in values], marker="o",
                        capsize=3, label=label)  # fmt: skip
        ax.set_title(f"{name}: {'top-1' if greedy else 'Σ min(p, q)'}", fontsize=9)
        ax.set_xlabel("draft step along the chain")
        ax.set_xticks(list(steps))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("acceptance (answer positions)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="the target's checkpoint directory")
    p.add_argument("--head", action="append", metavar="LABEL=DIR",
                   help="an EAGLE-3 or EAGLE-1 head (DIR or git:COMMIT:PATH); repeat for "
                   "more")  # fmt: skip
    p.add_argument("--data", nargs="+", help="held-out distill run directories")
    p.add_argument("--tokens", action="append", default=[], metavar="LABEL=N",
                   help="training tokens a head saw (for the plot)")  # fmt: skip
    p.add_argument("--steps", type=int, default=3, help="TTT steps unrolled (3)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-windows", type=int, default=0, help="per set; 0 = all")
    p.add_argument("--out", type=Path, help="JSON report")
    p.add_argument("--plot", type=Path, help="PNG: step 0 against --tokens")
    p.add_argument("--plot-steps", type=Path, metavar="PNG",
                   help="PNG: each head's acceptance by draft step, a panel per set")  # fmt: skip
    p.add_argument("--line", help="LABEL,LABEL,...: the heads of one kind the plot joins by a "
                   "line (default all); the others are points of their own")  # fmt: skip
    p.add_argument("--extrapolate", action="store_true",
                   help="extend each line's last step (its slope per decade of tokens) to the "
                   "highest --goal, dotted")  # fmt: skip
    p.add_argument("--goal", action="append", default=[], metavar="Y=TEXT",
                   help="a dashed level on the T = 0 panel, e.g. '0.8=1.3x needs'")  # fmt: skip
    p.add_argument("--replot", type=Path, metavar="JSON",
                   help="only draw --plot from a report written before")  # fmt: skip
    args = p.parse_args(argv)
    line = args.line.split(",") if args.line else None
    if args.replot:
        report = json.loads(args.replot.read_text())
        changes = {"line": line or report.get("line"), "goals": args.goal,
                   "extrapolate": args.extrapolate}  # fmt: skip
        if args.plot:
            plot({**report, **changes}, args.plot)
        if args.plot_steps:
            plot_steps(report, args.plot_steps)
        return 0
    if not (args.model and args.head and args.data):
        p.error("--model, --head and --data are required (or --replot JSON --plot PNG)")

    params, config, tokenizer = load_checkpoint(args.model)
    cue = assistant_cue(tokenizer, load_chat_template(args.model, tokenizer))
    scratch = Path(tempfile.mkdtemp(prefix="chat-acceptance-"))
    heads, specs = {}, {}
    for item in args.head:
        label, sep, spec = item.partition("=")
        if not sep:
            raise InvalidInputError(f"--head {item!r}: expected LABEL=DIR, e.g. wide=DIR")
        heads[label] = load_any_head(head_directory(spec, scratch), config)
        specs[label] = spec
    tokens = {}
    for item in args.tokens:
        label, _, n = item.partition("=")
        tokens[label] = float(n)
    report = {"model": args.model, "heads": specs, "tokens": tokens, "line": line,
              "goals": args.goal, "extrapolate": args.extrapolate, "steps": args.steps,
              "sets": {}, "provenance": {}}  # fmt: skip
    for data in args.data:
        directory = Path(data).expanduser()
        started = time.perf_counter()
        results = evaluate(params, heads, directory, lambda w: answer_spans(w, cue),
                           steps=args.steps, batch_size=args.batch_size,
                           max_windows=args.max_windows)  # fmt: skip
        record = json.loads((directory / RUN_FILE).read_text())
        name = directory.name
        report["sets"][name] = results
        kept = ("split", "temperature", "seed", "prompt_source")
        report["provenance"][name] = {k: record.get(k) for k in kept}
        print(f"{name} (split {record.get('split', 'train')}, T = {record['temperature']:g}, "
              f"{time.perf_counter() - started:.0f} s)")  # fmt: skip
        for label, r in results.items():
            top1 = " ".join(f"{m:.3f}±{e:.3f}" for m, e in r["top1"])
            accept = " ".join(f"{m:.3f}±{e:.3f}" for m, e in r["accept"])
            print(f"  {label:>10}: top1 {top1} | accept {accept} | covered "
                  f"{r['covered'][0]:.3f}, mass {r['covered_mass'][0]:.3f} | {r['positions']} "
                  f"positions, "
                  f"{r['windows']} windows")  # fmt: skip
        labels = list(results)
        for before, after in zip(labels, labels[1:], strict=False):
            for metric in ("top1", "accept"):
                gains = [paired_difference(results[after], results[before], metric, step)
                         for step in range(args.steps)]  # fmt: skip
                print(f"  {after} - {before}, {metric} by step: "
                      + "  ".join(f"{m:+.3f}±{e:.3f}" for m, e in gains))  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"results written to {args.out}")
    if args.plot:
        plot(report, args.plot)
        print(f"plot written to {args.plot}")
    if args.plot_steps:
        plot_steps(report, args.plot_steps)
        print(f"plot written to {args.plot_steps}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
