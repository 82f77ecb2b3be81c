"""How much of the target's answers an EAGLE-3 head's draft vocabulary can draft at all.

An EAGLE-3 head drafts from its reduced vocabulary (`eagle3.DraftVocab`): where the target's
next token lies outside it, no draft there can be accepted at T = 0, whatever the head learned.
This reads held-out sets made by `minieagle distill --split ...` and reports, over the positions
inside the target's answers (`chat.answer_label_mask`, as the heads are scored; every position
of a corpus run), the share of the target's argmax tokens (recorded as `target-top` by
distill; the window's own next token where a shard has none, which at T = 0 is the same)
inside each head's draft vocabulary: the ceiling on its top-1 and on a greedy chain's
acceptance.

`--grow SIZE` adds, for each head, the vocabulary `minieagle train eagle3 --init-from HEAD
--draft-vocab-size SIZE` would give it on the training data `--counts-from` (the same
`eagle3.grow_draft_vocab` over the same token counts: every token of those runs' windows), so
a larger vocabulary's gain is measured before a head is trained with it.

    S=~/.cache/minieagle/runs/smollm2 M=~/.cache/minieagle/models/smollm2-135m-instruct
    python benchmarks/draft_vocab_coverage.py --model $M \\
        --head shipped=minieagle/pretrained/smollm2-eagle3 --grow 10240,12288 \\
        --counts-from $S/req-T0 $S/req-T1@0:40 $S/chat3-T0@0:54 \\
        --data $S/heldout-val-T0 $S/heldout-ood-T0 $S/heldout-req-T0 \\
        --out docs/results/draft-vocab-coverage-smollm2.json

Means pool the positions of a set; the ± is the standard error over its windows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from chat_acceptance import mean_and_error

from minieagle.chat import answer_label_mask, answer_spans, assistant_cue, load_chat_template
from minieagle.checkpoint import load_checkpoint
from minieagle.distill import CHAT_SOURCES, open_pool, open_shards, run_record
from minieagle.errors import InvalidInputError
from minieagle.feature_cache import TARGET_TOP
from minieagle.heads import eagle3
from minieagle.heads.eagle3_io import load_eagle3_head


def answer_argmax(data_dir: Path, model_dir: str, tokenizer) -> list:
    """Per window of a held-out set: the target's argmax tokens at its answer positions (every
    position for a run of corpus windows), an int64 array each, from the recorded TARGET_TOP,
    else the window's next tokens."""
    shards = open_shards([str(data_dir)])
    if not shards:
        raise InvalidInputError(f"{data_dir} has no complete shard yet; wait for the distill run")
    cue = None
    if run_record(str(data_dir)).get("source") in CHAT_SOURCES:
        cue = assistant_cue(tokenizer, load_chat_template(model_dir, tokenizer, None))
    tokens = []
    for cache in shards:
        windows = np.asarray(cache.windows[:], dtype=np.int64)  # [B, W]
        if cue is None:
            mask = np.ones((len(windows), windows.shape[1] - 1), dtype=bool)
        else:
            mask = answer_label_mask(*answer_spans(windows, cue), windows.shape[1])  # [B, W-1]
        top = cache.stats.get(TARGET_TOP)
        guess = windows[:, 1:] if top is None else np.asarray(top[:], dtype=np.int64)[:, :-1]
        tokens += [row[m] for row, m in zip(guess, mask, strict=True)]
    return tokens


def coverage(vocab: eagle3.DraftVocab, tokens: list) -> tuple[float, float]:
    """(share of the tokens inside vocab, its standard error over windows)."""
    t2d = np.asarray(vocab.t2d)
    inside = np.asarray([t2d[t].sum() for t in tokens], dtype=np.float64)
    counts = np.asarray([len(t) for t in tokens], dtype=np.float64)
    return mean_and_error(inside, counts)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the target's checkpoint directory")
    p.add_argument("--head", action="append", required=True, metavar="LABEL=DIR",
                   help="an EAGLE-3 head (repeatable)")  # fmt: skip
    p.add_argument("--data", nargs="+", required=True, help="held-out distill run directories")
    p.add_argument("--grow", default="", help="SIZE,SIZE,...: each head's vocabulary grown to "
                   "these sizes from the --counts-from data (as --init-from with "
                   "--draft-vocab-size would)")  # fmt: skip
    p.add_argument("--counts-from", nargs="+", default=[], metavar="RUN[@A:B]",
                   help="training feature runs whose tokens rank the added ids")
    p.add_argument("--out", type=Path, help="JSON report")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.grow.split(",") if s.strip()]
    except ValueError:
        raise InvalidInputError(f"--grow {args.grow!r} is not a list of sizes; pass e.g. "
                                "10240,12288") from None  # fmt: skip
    if sizes and not args.counts_from:
        raise InvalidInputError("--grow needs --counts-from: the training runs whose token "
                                "counts choose the added ids")  # fmt: skip
    _, config, tokenizer = load_checkpoint(args.model)
    counts = open_pool(args.counts_from).token_counts(config.vocab_size) if sizes else None
    vocabs = {}
    for entry in args.head:
        label, sep, directory = entry.partition("=")
        if not sep:
            raise InvalidInputError(f"--head {entry!r} is not LABEL=DIR; pass e.g. "
                                    "shipped=minieagle/pretrained/smollm2-eagle3")  # fmt: skip
        _, _, vocab = load_eagle3_head(directory, target_config=config, target_dir=args.model)
        vocabs[label] = vocab
        for size in sizes:
            vocabs[f"{label}+{size}"] = eagle3.grow_draft_vocab(vocab, counts, size)
    report = {"model": args.model, "heads": dict(h.partition("=")[::2] for h in args.head),
              "grow": sizes, "counts_from": args.counts_from,
              "sizes": {label: int(v.size) for label, v in vocabs.items()}, "sets": {}}  # fmt: skip
    for data in args.data:
        tokens = answer_argmax(Path(data), args.model, tokenizer)
        name = Path(data).name
        row = {label: coverage(v, tokens) for label, v in vocabs.items()}
        report["sets"][name] = {"positions": int(sum(len(t) for t in tokens)), "covered": row}
        print(f"{name}: " + "  ".join(f"{label} {m:.4f} ± {e:.4f}"
                                      for label, (m, e) in row.items()))  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
