"""τ of EAGLE heads on many held-out chat requests, with 95 % intervals: the measurement behind
issue 20's "SmolLM2, held-out chat prompts, T = 0: EAGLE-3 τ ≥ 3.0".

`benchmarks/smollm2_methods.py` measures every method with its speed on six requests, too few
to tell two heads a few hundredths apart or to say where τ stands. This script measures τ alone
(emitted tokens per target forward: no timing, so it may run beside training) on three kinds of
request, each a chat turn rendered with the model's template, none seen in training:

- "heldout-chat": two of the ten requests the heads' training answers were written for
  (`train_eagle.CHAT_REQUESTS`, among `distill.CHAT_REQUESTS`), about passages of the corpora's
  test splits (the heads trained on the train splits);
- "ood-chat": the same requests about passages from other packages' docs and code
  (minieagle/data/ood_prompts.jsonl, 24 prose and 24 code);
- "questions": `QUESTIONS` below, requests of other kinds that name no passage (writing code,
  explaining, advising, listing), written for this measurement.

Each head drafts through `build_drafter`'s dynamic tree at fixed sizes (`--trees`, by default
the 26-node tree of depth 7 and the EAGLE-3 paper's 60 nodes, top-k 10), ranked by the scores
shipped beside the head (its calibration.json, where it says they measured better; `--scores
raw`: raw scores), at each temperature of `--temperatures` (T > 0: the sampled tree). Prompt i
decodes with seed i (`--seed-offset K`: seed K + i, a second draw of every sampled decoding),
until end of turn or `--new-tokens`. At T = 0 every output is checked equal
to vanilla's (a difference stops the run). τ is pooled (all emitted tokens over all forwards),
per kind and over all prompts; its 95 % interval is a bootstrap over the prompts (resampled
within each kind, 2,000 times). Every head's row after the first's is also compared with the
first head's row at the same tree, prompt by prompt (`against_first`: the difference in τ with
a paired bootstrap interval, a paired sign-flip test's p-value, and on how many prompts each is
higher). Each row also counts its cycles by how many drafts the verifier accepted (`accepted`,
per prompt) and pools them into `accepted_at_least` (d: the share of cycles that accepted at
least d drafts): where in the tree two heads part.

    OPENBLAS_NUM_THREADS=1 python benchmarks/chat_tau.py \\
        --eagle3 shipped=minieagle/pretrained/smollm2-eagle3 --eagle3 new=DIR \\
        --out docs/results/smollm2-chat-tau.json --plot docs/results/smollm2-chat-tau.png

`--eagle1 LABEL=DIR` adds EAGLE-1 heads drafting through the same trees (EAGLE-2), for the
EAGLE-3 / EAGLE-2 ratio on the same prompts.

`--baseline FILE:LABEL` takes head LABEL's rows from an earlier run's JSON instead of decoding
them again (a head's decoding of prompt i with seed i is the same on every run, at T = 0 and
T = 1 alike), and compares every new head with them, prompt by prompt: the earlier run must
hold the same prompts, new-token limit, scores, seed offset and, at each temperature measured now,
the trees.

    OPENBLAS_NUM_THREADS=1 python benchmarks/chat_tau.py --eagle3 new=DIR \\
        --baseline docs/results/smollm2-chat-tau.json:shipped --out new.json

`--pair FIRST.json:LABEL SECOND.json:LABEL` decodes nothing: it pairs two earlier runs' rows of
the same prompts (head LABEL of each file, at every tree and temperature both hold), request by
request, and prints and writes (`--out`) each difference with its paired interval, over all and
per kind, and each file's scores setting (two runs with different `--scores` compare what each
decoded with). A side may pool several draws, `A.json+B.json:LABEL`, runs with different
`--seed-offset`s: each prompt's τ is then its draws' emitted tokens over their forwards. At
T = 1 one draw per prompt is noisy: the SmolLM2 head shipped 2026-12-03 read 2.61 at 60 nodes
on seeds 0-35 and 2.35 on seeds 1000-1035 (docs/real_models.md, "A second draw at T = 1"), so
T = 1 comparisons pool two draws or more.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from minieagle import inference
from minieagle.calibration import shipped_calibration
from minieagle.chat import encode_chat, end_of_turn_ids, load_chat_template
from minieagle.checkpoint import load_checkpoint
from minieagle.drafters import build_drafter, load_draft_head
from minieagle.errors import InvalidInputError
from minieagle.generate import generate
from minieagle.sampling import SamplingParams
from minieagle.train_eagle import CHAT_REQUESTS

KINDS = ("heldout-chat", "ood-chat", "questions")
QUESTIONS = (  # requests of other kinds than the training's, naming no passage
    "Write a Python function that tells whether a string is a palindrome, with a short docstring.",
    "What are three good habits for keeping a small software project easy to maintain?",
    "Explain the difference between a list and a tuple in Python, with an example of each.",
    "Write a short email asking a colleague to review my pull request by Friday.",
    "How does a hash table find a key quickly? Explain it to a beginner.",
    "Give me a simple recipe for a vegetable soup.",
    "Write a Python function that counts how often each word appears in a text.",
    "What is the difference between weather and climate?",
    "Summarise the main causes of the French Revolution in a few sentences.",
    "Write a unit test in Python for a function add(a, b) that returns the sum of two numbers.",
    "Why is the sky blue? Answer in two or three sentences.",
    "Suggest five names for a coffee shop near a university.",
    "Explain what recursion is and give a Python example that computes a factorial.",
    "What should I pack for a three-day hiking trip?",
    "Describe how to make a cup of tea, step by step.",
    "Write a SQL query that lists the ten customers with the highest total order value.",
)
PAPER_TREE = (60, 7, 10)  # the EAGLE-3 paper's tree: 60 nodes, 8 levels (7 expansions), top-k 10


def requests(per_kind: int, passage_chars: int = 400) -> list[tuple[str, str]]:
    """(kind, user request): `per_kind` of each of KINDS. The passage requests alternate prose
    and code, each passage the first `passage_chars` characters of its own document (the test
    splits' documents of at least that length, spread evenly over them; the out-of-domain
    records in file order)."""
    from minieagle.data import load_split, ood_records

    if not 1 <= per_kind <= len(QUESTIONS):
        raise InvalidInputError(
            f"--per-kind {per_kind}: expected 1 to {len(QUESTIONS)} (the questions written for "
            "this measurement)"
        )

    def request(corpus: str, text: str) -> str:
        return CHAT_REQUESTS[corpus].format(passage=text[:passage_chars].strip())

    corpora = ("prose", "code")
    counts = {c: (per_kind + (i == 0)) // 2 for i, c in enumerate(corpora)}  # prose first
    out = []
    for corpus in corpora:
        documents = [d for d in load_split(corpus, "test") if len(d.text) >= passage_chars]
        if len(documents) < counts[corpus]:
            raise InvalidInputError(
                f"--per-kind {per_kind}: the {corpus} test split has {len(documents)} documents "
                f"of {passage_chars}+ characters; ask for at most {2 * len(documents)}"
            )
        picks = np.linspace(0, len(documents) - 1, counts[corpus]).round().astype(int)
        out += [("heldout-chat", request(corpus, documents[i].text)) for i in picks]
    for corpus in corpora:
        records = [r for r in ood_records() if r["kind"] == corpus][: counts[corpus]]
        out += [("ood-chat", request(corpus, r["text"])) for r in records]
    return out + [("questions", q) for q in QUESTIONS[:per_kind]]


def pooled_tau(emitted, forwards) -> float:
    """τ of several decodings: all their emitted tokens over all their target forwards."""
    return float(np.sum(emitted) / np.sum(forwards))


def bootstrap_interval(emitted, forwards, kinds, *, resamples: int = 2000, seed: int = 0):
    """(low, high): the 2.5 and 97.5 percentiles of the pooled τ over `resamples` draws of the
    prompts with replacement, each kind resampled within itself (its share of the prompts
    kept)."""
    emitted, forwards = np.asarray(emitted, float), np.asarray(forwards, float)
    kinds = np.asarray(kinds)
    rng = np.random.default_rng(seed)
    draws = np.concatenate(
        [rng.choice(np.flatnonzero(kinds == k), size=(resamples, int(np.sum(kinds == k))))
         for k in dict.fromkeys(kinds.tolist())],
        axis=1,
    )  # fmt: skip
    taus = emitted[draws].sum(axis=1) / forwards[draws].sum(axis=1)
    low, high = np.percentile(taus, [2.5, 97.5])
    return float(low), float(high)


def paired_difference(first: list[dict], second: list[dict], *, resamples: int = 4000,
                      seed: int = 0) -> dict:  # fmt: skip
    """The pooled τ of `second` minus that of `first`, two rows' records of the same prompts in
    the same order, with the 2.5 and 97.5 percentiles of that difference over `resamples` draws
    of the prompts (each draw the same prompts for both rows: paired), the prompts where each
    is higher, and `p_sign_flip`: the two-sided p-value of a paired randomisation test, the
    share of `resamples` relabellings (each prompt's two records swapped with probability 1/2,
    as they could be if the rows did not differ) whose difference is at least as far from zero
    as the one observed. The bootstrap asks how far the difference could move with other
    prompts; the sign flips ask how often rows that do not differ would part this much on these
    prompts, which at T = 1 (each record one draw of a sampled decoding) is the question a ship
    decision asks (docs/real_models.md, "A second draw at T = 1")."""
    if [r["kind"] for r in first] != [r["kind"] for r in second]:
        raise InvalidInputError("paired rows must hold the same prompts in the same order")
    e1, f1, e2, f2 = (np.array([r[key] for r in rows], float)
                      for rows in (first, second) for key in ("emitted", "forwards"))  # fmt: skip
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(first), size=(resamples, len(first)))
    diffs = e2[draws].sum(1) / f2[draws].sum(1) - e1[draws].sum(1) / f1[draws].sum(1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    observed = pooled_tau(e2, f2) - pooled_tau(e1, f1)
    swap = rng.random((resamples, len(first))) < 0.5  # [R, P] prompts whose records trade rows
    flipped = (np.where(swap, e1, e2).sum(1) / np.where(swap, f1, f2).sum(1)
               - np.where(swap, e2, e1).sum(1) / np.where(swap, f2, f1).sum(1))  # fmt: skip
    p = float(np.mean(np.abs(flipped) >= abs(observed) - 1e-12))
    return {"difference": observed, "low": float(low), "high": float(high),
            "p_sign_flip": p, "second_higher": int(np.sum(e2 / f2 > e1 / f1)),
            "first_higher": int(np.sum(e2 / f2 < e1 / f1))}  # fmt: skip


def summed_counts(histograms) -> np.ndarray:
    """The element-wise sum of count lists of any lengths (cycles counted by drafts accepted)."""
    histograms = list(histograms)
    counts = np.zeros(max(len(h) for h in histograms), dtype=np.int64)
    for h in histograms:
        counts[: len(h)] += h
    return counts


def accepted_at_least(records: list[dict]) -> list[float]:
    """[share of all the records' cycles that accepted at least d drafts, for d = 1, 2, ...]
    from each record's `accepted` (cycles counted by drafts accepted)."""
    counts = summed_counts(r["accepted"] for r in records)
    return (counts[::-1].cumsum()[::-1][1:] / counts.sum()).tolist()


def summarise(records: list[dict]) -> dict:
    """τ with its interval, over all prompts and per kind, from per-prompt records {kind,
    emitted, forwards, accepted}; and over all, `accepted_at_least`."""

    def over(rows):
        e, f = [r["emitted"] for r in rows], [r["forwards"] for r in rows]
        low, high = bootstrap_interval(e, f, [r["kind"] for r in rows])
        return {"tau": pooled_tau(e, f), "low": low, "high": high, "prompts": len(rows)}

    kinds = list(dict.fromkeys(r["kind"] for r in records))
    counted = all("accepted" in r for r in records)  # (runs before 2026-12-05 did not count)
    return {
        "all": {**over(records), **({"accepted_at_least": accepted_at_least(records)}
                                    if counted else {})},  # fmt: skip
        **{k: over([r for r in records if r["kind"] == k]) for k in kinds},
    }


def parse_trees(text: str) -> list[tuple[int, int, int]]:
    """ "26:7:8,60:7:10" -> [(total_tokens, depth, top_k), ...]."""
    trees = []
    for part in text.split(","):
        try:
            n, d, k = (int(x) for x in part.split(":"))
        except ValueError:
            raise InvalidInputError(
                f"--trees {text!r}: expected comma-separated NODES:DEPTH:TOP_K, e.g. 26:7:8,60:7:10"
            ) from None
        if n < 2 or d < 1 or k < 1:
            raise InvalidInputError(
                f"--trees {text!r}: {part!r} needs NODES >= 2, DEPTH, TOP_K >= 1"
            )
        trees.append((n, d, k))
    return trees


def parse_heads(values, method: str) -> list[tuple[str, str, Path]]:
    """["LABEL=DIR", ...] -> [(label, method, dir)], each directory checked to hold a head."""
    heads = []
    for value in values or []:
        label, sep, path = value.partition("=")
        if not sep or not label or not Path(path, "model.safetensors").is_file():
            raise InvalidInputError(
                f"--{method} {value!r}: expected LABEL=DIR with DIR a trained {method} head "
                "(its model.safetensors)"
            )
        heads.append((label, method, Path(path)))
    return heads


def rows_for(heads, trees, target, scores: str) -> dict:
    """{row label: drafter factory}: every head at every tree size, the head loaded once."""
    rows = {}
    for label, method, path in heads:
        head = load_draft_head(method, path, target)
        calibration = shipped_calibration(path) if scores == "shipped" else None
        drafts_with = "eagle3" if method == "eagle3" else "eagle2"
        for n, d, k in trees:
            rows[f"{label} {drafts_with} {n}:{d}:{k}"] = (
                lambda head=head, calibration=calibration, n=n, d=d, k=k, m=drafts_with:
                build_drafter(m, target=target, head=head, total_tokens=n, depth=d, top_k=k,
                              calibration=calibration)
            )  # fmt: skip
    return rows


def measure(target, prompts, rows: dict, temperature: float, new_tokens: int, stops,
            vanilla_tokens=None, progress=None, seed_offset: int = 0) -> dict:  # fmt: skip
    """{row: [record per prompt]}: each row's decoding of every prompt (prompt i with seed
    seed_offset + i), each record {kind, emitted, forwards, accepted: cycles per accepted count};
    at T = 0 each output checked equal to `vanilla_tokens[i]` (AssertionError naming the row
    and prompt where one differs). stops: the end-of-turn token ids."""
    sampling = SamplingParams(temperature=temperature)
    out = {}
    for name, make in rows.items():
        out[name] = []
        for i, (kind, ids) in enumerate(prompts):
            result = generate(*target, ids, drafter=make(), max_new_tokens=new_tokens,
                              sampling=sampling, seed=seed_offset + i,
                              stop_token_ids=stops)  # fmt: skip
            if vanilla_tokens is not None and result.tokens != vanilla_tokens[i]:
                raise AssertionError(f"{name}: the greedy output of prompt {i} ({kind}) differs "
                                     "from vanilla's")  # fmt: skip
            out[name].append({"kind": kind, "emitted": len(result.tokens),
                              "forwards": result.target_forwards,
                              "accepted": np.bincount(result.accepted_per_cycle).tolist()})
            if progress is not None:
                progress.update(1)
                progress.set_postfix_str(f"T={temperature:g} {name}")
    return out


def plot(results: dict, path) -> None:
    """One panel per temperature: τ of each row per kind and over all, with its interval; and
    below it, where the rows counted them, the share of cycles accepting at least d drafts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    settings = [s for s in results if s.startswith("T=")]
    depths = any("accepted_at_least" in row["tau"]["all"]
                 for s in settings for row in results[s].values())  # fmt: skip
    fig, axes = plt.subplots(1 + depths, len(settings), figsize=(6.5 * len(settings),
                             4.2 + 3.4 * depths), squeeze=False)  # fmt: skip
    for ax, setting in zip(axes[-1] if depths else [], settings, strict=True):
        for j, (name, row) in enumerate(results[setting].items()):
            shares = row["tau"]["all"].get("accepted_at_least")
            if shares:
                ax.plot(np.arange(1, len(shares) + 1), shares, marker="o", color=f"C{j}",
                        label=name)  # fmt: skip
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("d (drafts accepted in a cycle)")
        ax.set_ylabel("share of cycles accepting >= d")
        ax.set_title(f"{setting}: how deep the accepted path reaches")
        ax.grid(alpha=0.3)
    for ax, setting in zip(axes[0], settings, strict=True):
        rows = results[setting]
        groups = ["all", *[k for k in KINDS if any(k in r["tau"] for r in rows.values())]]
        width = 0.8 / len(rows)
        for j, (name, row) in enumerate(rows.items()):
            x = np.arange(len(groups)) + (j - (len(rows) - 1) / 2) * width
            tau = np.array([row["tau"][g]["tau"] for g in groups])
            err = np.array([[t - row["tau"][g]["low"], row["tau"][g]["high"] - t]
                            for g, t in zip(groups, tau, strict=True)]).T  # fmt: skip
            ax.bar(x, tau, width, yerr=err, capsize=3, label=name)
        if setting == "T=0":
            ax.axhline(3.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(np.arange(len(groups)), groups)
        ax.set_ylabel("τ (tokens per target forward)")
        ax.set_title(f"{setting}: τ with 95 % bootstrap intervals over prompts")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.07 * ((len(labels) + 3) // 4), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def baseline_rows(spec: str, results: dict, temperatures) -> tuple[str, dict]:
    """(label, {"T=t": {row: record}}) of `--baseline FILE:LABEL`, checked to be comparable with
    `results` (this run's settings and prompts, before any decoding)."""
    path, _, label = spec.rpartition(":")
    if not path or not label or not Path(path).is_file():
        raise InvalidInputError(
            f"--baseline {spec!r}: expected FILE:LABEL, FILE an earlier chat_tau JSON"
        )
    earlier = json.loads(Path(path).read_text())
    for key in ("prompts", "new_tokens", "scores", "seed_offset"):
        if earlier.get(key, 0 if key == "seed_offset" else None) != results[key]:
            raise InvalidInputError(
                f"--baseline {spec!r}: its {key} differ from this run's; pass the settings it "
                f"was measured with ({key} = {str(earlier.get(key))[:80]})"
            )
    rows = {}
    for t in temperatures:
        setting = f"T={t:g}"
        names = [f"{label} {m} {n}:{d}:{k}" for n, d, k in results["trees"]
                 for m in ("eagle3", "eagle2")]  # fmt: skip
        found = {n: earlier[setting][n] for n in names if n in earlier.get(setting, {})}
        if len(found) != len(results["trees"]):
            raise InvalidInputError(
                f"--baseline {spec!r}: {setting} lacks head {label!r} at some of the trees "
                f"{results['trees']} (it holds {sorted(earlier.get(setting, {}))})"
            )
        rows[setting] = {n: {"tau": r["tau"], "per_prompt": r["per_prompt"], "from": path}
                         for n, r in found.items()}  # fmt: skip
    return label, rows


def pair_runs(first_spec: str, second_spec: str) -> dict:
    """`--pair`: {"T=t": {tree: paired_difference of the second side's head over the first's}}
    for every temperature and tree both sides hold for their heads. A side is FILE:LABEL or
    FILE+FILE+...:LABEL, runs of the same prompts with different `--seed-offset`s (draws of
    the same sampled decodings): each prompt's draws are pooled (their emitted tokens over
    their target forwards) before the prompts are paired."""
    sides = [_pair_side(spec) for spec in (first_spec, second_spec)]
    (runs_a, la), (runs_b, lb) = sides
    (pa, a), rest = runs_a[0], [*runs_a[1:], *runs_b]
    for key in ("prompts", "new_tokens"):
        for pb, b in rest:
            if a.get(key) != b.get(key):
                raise InvalidInputError(f"--pair: {pa} and {pb} differ in {key}; they cannot be "
                                        "paired")  # fmt: skip
    out = {"first": first_spec, "second": second_spec,
           "scores": {first_spec: [r.get("scores") for _, r in runs_a],
                      second_spec: [r.get("scores") for _, r in runs_b]},
           "seed_offsets": {first_spec: [r.get("seed_offset", 0) for _, r in runs_a],
                            second_spec: [r.get("seed_offset", 0) for _, r in runs_b]}}  # fmt: skip
    for setting in [k for k in a if k.startswith("T=")]:
        for tree in dict.fromkeys(name.split(" ")[-1] for name in a[setting]):
            first, second = _pooled_rows(runs_a, la, setting, tree), _pooled_rows(runs_b, lb,
                                                                                setting, tree)
            if first is None or second is None:
                continue
            by_kind = {kind: paired_difference([r for r in first[1] if r["kind"] == kind],
                                               [r for r in second[1] if r["kind"] == kind])
                       for kind in dict.fromkeys(r["kind"] for r in first[1])}  # fmt: skip
            out.setdefault(setting, {})[tree] = {
                "first": first[0], "second": second[0],
                **paired_difference(first[1], second[1]), "by_kind": by_kind,
            }  # fmt: skip
    if not any(k.startswith("T=") for k in out):
        raise InvalidInputError(f"--pair: no temperature and tree holds both {la!r} and {lb!r}")
    return out


def _pair_side(spec: str) -> tuple[list[tuple[str, dict]], str]:
    """([(file, its results)], label) of one side of `--pair`, its files' seed offsets checked
    to differ (one draw twice would count it twice)."""
    paths, _, label = spec.rpartition(":")
    paths = paths.split("+") if paths else []
    if not label or not paths or not all(Path(path).is_file() for path in paths):
        raise InvalidInputError(f"--pair {spec!r}: expected FILE:LABEL or FILE+FILE...:LABEL, "
                                "each FILE a chat_tau JSON")  # fmt: skip
    runs = [(path, json.loads(Path(path).read_text())) for path in paths]
    offsets = [r.get("seed_offset", 0) for _, r in runs]
    if len(set(offsets)) != len(offsets):
        raise InvalidInputError(f"--pair {spec!r}: its files' seed offsets {offsets} repeat; pool "
                                "only different draws (chat_tau --seed-offset)")  # fmt: skip
    return runs, label


def _pooled_rows(runs, label: str, setting: str, tree: str):
    """(summary, per-prompt records) of head `label` at `tree` and `setting`, each prompt's
    draws over `runs` pooled; the one run's own summary when there is one run; None when a
    run lacks the row."""
    rows = []
    for _, results in runs:
        row = next((r for n, r in results.get(setting, {}).items()
                    if n.split(" ")[0] == label and n.split(" ")[-1] == tree), None)  # fmt: skip
        if row is None:
            return None
        rows.append(row)
    if len(rows) == 1:
        return rows[0]["tau"]["all"], rows[0]["per_prompt"]
    pooled = []
    for draws in zip(*(row["per_prompt"] for row in rows), strict=True):
        record = {"kind": draws[0]["kind"], "emitted": sum(d["emitted"] for d in draws),
                  "forwards": sum(d["forwards"] for d in draws)}  # fmt: skip
        if all("accepted" in d for d in draws):
            record["accepted"] = summed_counts(d["accepted"] for d in draws).tolist()
        pooled.append(record)
    return summarise(pooled)["all"], pooled


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: SmolLM2 from the cache)")
    parser.add_argument("--template", help="a chat template file (default: the model's own)")
    parser.add_argument("--eagle3", action="append", metavar="LABEL=DIR", help="an EAGLE-3 head")
    parser.add_argument(
        "--eagle1",
        action="append",
        metavar="LABEL=DIR",
        help="an EAGLE-1 head, drafting through the same trees (EAGLE-2)",
    )
    parser.add_argument("--trees", default="26:7:8,60:7:10", help="NODES:DEPTH:TOP_K,...")
    parser.add_argument("--scores", choices=("shipped", "raw"), default="shipped")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--per-kind", type=int, default=12, help="requests of each kind")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="prompt i decodes with seed K + i (default 0)")  # fmt: skip
    parser.add_argument("--baseline", metavar="FILE:LABEL",
                        help="head LABEL's rows from an earlier run's JSON, not decoded again, "
                        "every new head compared with them")  # fmt: skip
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--plot", help="write the figure (PNG) here")
    parser.add_argument("--pair", nargs=2, metavar="FILE:LABEL",
                        help="pair two earlier runs' rows, decoding nothing")  # fmt: skip
    args = parser.parse_args(argv)
    if args.pair:
        paired = pair_runs(*args.pair)
        for setting in [k for k in paired if k.startswith("T=")]:
            for tree, p in paired[setting].items():
                print(f"{setting} {tree}: {p['second']['tau']:.3f} - {p['first']['tau']:.3f} = "
                      f"{p['difference']:+.3f} [{p['low']:+.3f}..{p['high']:+.3f}], sign-flip p "
                      f"{p['p_sign_flip']:.3f}, higher on {p['second_higher']}, lower on "
                      f"{p['first_higher']}")  # fmt: skip
                for kind, k in p["by_kind"].items():
                    print(f"    {kind}: {k['difference']:+.3f} [{k['low']:+.3f}..{k['high']:+.3f}]")
                for which in ("first", "second"):
                    if "accepted_at_least" in p[which]:
                        print(f"    {which}: cycles accepting >= 1, 2, ... drafts: "
                              + " ".join(f"{x:.2f}" for x in p[which]["accepted_at_least"]))
        if args.out:
            Path(args.out).write_text(json.dumps(paired, indent=1) + "\n")
        return paired
    try:
        temperatures = [float(t) for t in args.temperatures.split(",")]
    except ValueError:
        raise InvalidInputError(
            f"--temperatures {args.temperatures!r}: expected comma-separated numbers, e.g. 0,1"
        ) from None
    trees = parse_trees(args.trees)
    heads = parse_heads(args.eagle3, "eagle3") + parse_heads(args.eagle1, "eagle1")
    if not heads:
        raise InvalidInputError("no head to measure: pass --eagle3 LABEL=DIR (or --eagle1)")
    if args.model is None:
        from minieagle.importers.smollm2 import ensure_smollm2

        args.model = str(ensure_smollm2())
    params, config, tokenizer = load_checkpoint(args.model, dtype=np.float32)
    template = load_chat_template(args.model, tokenizer, args.template)
    prompts = [(kind, encode_chat(tokenizer, template, [{"role": "user", "content": text}]))
               for kind, text in requests(args.per_kind)]  # fmt: skip
    stops = sorted(end_of_turn_ids(tokenizer, template, config.eos_token_id))
    target = (inference.prepare(params, config), config)
    rows = rows_for(heads, trees, target, args.scores)

    from tqdm.auto import tqdm

    start = time.perf_counter()
    results = {"model": args.model, "heads": {label: str(p) for label, _, p in heads},
               "trees": trees, "scores": args.scores, "new_tokens": args.new_tokens,
               "seed_offset": args.seed_offset,
               "prompts": [{"kind": k, "prompt_tokens": len(ids)} for k, ids in prompts],
               "questions": list(QUESTIONS[: args.per_kind])}  # fmt: skip
    baseline = None
    if args.baseline:
        baseline = baseline_rows(args.baseline, results, temperatures)
        if baseline[0] in results["heads"]:
            raise InvalidInputError(
                f"--baseline {args.baseline!r}: a head of this run is labelled "
                f"{baseline[0]!r} too; label it otherwise"
            )
        results["baseline"] = args.baseline
    total = len(prompts) * (len(rows) * len(temperatures) + (0.0 in temperatures))
    with tqdm(total=total, desc="decodes", unit="decode") as bar:
        vanilla = None
        if 0.0 in temperatures:
            vanilla = _vanilla(target, prompts, args.new_tokens, stops, bar)
        for t in temperatures:
            per_row = measure(target, prompts, rows, t, args.new_tokens, stops,
                              vanilla if t == 0 else None, bar, args.seed_offset)  # fmt: skip
            results[f"T={t:g}"] = {
                **(baseline[1][f"T={t:g}"] if baseline else {}),
                **{name: {"tau": summarise(recs), "per_prompt": recs}
                   for name, recs in per_row.items()},
            }  # fmt: skip
    # every other head's row against the first's (the baseline's) at the same tree
    first = baseline[0] if baseline else heads[0][0]
    for setting in [k for k in results if k.startswith("T=")]:
        rows_here = results[setting]
        for name, row in rows_here.items():
            label, tree = name.split(" ")[0], name.split(" ")[-1]
            base = next((n for n in rows_here if n.startswith(f"{first} ") and n.endswith(tree)),
                        None)  # fmt: skip
            if label != first and base is not None:
                row["against_first"] = {"row": base, **paired_difference(
                    rows_here[base]["per_prompt"], row["per_prompt"])}  # fmt: skip
    results["stop_token_ids"] = stops
    # checked at T = 0 (a difference stops the run); null when the run decoded no T = 0
    results["greedy_outputs_equal_to_vanilla"] = True if vanilla is not None else None
    results["seconds"] = round(time.perf_counter() - start, 1)
    for setting in [k for k in results if k.startswith("T=")]:
        for name, row in results[setting].items():
            a = row["tau"]["all"]
            kinds = "  ".join(f"{k} {v['tau']:.2f}" for k, v in row["tau"].items() if k != "all")
            interval = f"[{a['low']:.2f}..{a['high']:.2f}]"
            print(f"{setting} {name:32s} tau {a['tau']:.2f} {interval}  {kinds}")
            if "accepted_at_least" in a:
                print("    cycles accepting >= 1, 2, ... drafts: "
                      + " ".join(f"{x:.2f}" for x in a["accepted_at_least"]))  # fmt: skip
            if "against_first" in row:
                p = row["against_first"]
                print(f"    minus {p['row']}: {p['difference']:+.3f} [{p['low']:+.3f}.."
                      f"{p['high']:+.3f}], sign-flip p {p['p_sign_flip']:.3f}, higher on "
                      f"{p['second_higher']} prompts, lower on {p['first_higher']}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot)
    return results


def _vanilla(target, prompts, new_tokens: int, stops, bar) -> list[list[int]]:
    """Each prompt's greedy decoding without a drafter: the reference every T = 0 output is
    checked against."""
    out = []
    for i, (_, ids) in enumerate(prompts):
        result = generate(*target, ids, max_new_tokens=new_tokens, seed=i, stop_token_ids=stops)
        out.append(result.tokens)
        bar.update(1)
        bar.set_postfix_str("vanilla")
    return out


if __name__ == "__main__":
    main()
