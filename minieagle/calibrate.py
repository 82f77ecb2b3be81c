"""Fitting a head's calibration maps and deciding, on the validation split, where they are used.

`minieagle calibrate --head DIR` runs `calibrate_head` and writes DIR/calibration.json
(`calibration.HEAD_FILE`), which `build_drafter` and the CLI then load by default
(docs/calibration.md, "Shipped maps"). For each sampling setting the dynamic tree decodes
with by default, T = 0 (top-k tree), T = 1 (top-k tree) and T = 1 with the sampled tree:

1. Fit: decode TRAINING prompts (`calibration.tuning_prompts`: windows of the corpora's
   train split, or for a target with a chat template requests about them rendered with it)
   with the raw drafter at the method's default sizes (or the tree `sizes` gives), keep its
   (confidence, accepted) records, fit the isotonic map (`calibration.fit_calibration`). For
   a top-k tree (T = 0, T = 1) also decode them with temperature-scaled scores
   (`calibration.TemperatureScores`) at each temperature of `TEMPERATURES` and keep the one
   of the highest τ (ties: the higher temperature, the nearer raw scores).
2. Decide: decode VALIDATION prompts (the same, from the val split; never the test split τ is
   reported on) with the raw drafter and with each candidate, same prompts and seeds. A
   candidate helps where its pooled τ is higher than raw's and more prompts gain than lose (a
   tie in either says it does not help); of those that help, the one of the highest τ is used
   by default; where none helps, the isotonic map is kept, unused.

The file records the head's fingerprint (a map never applies to other weights), the target's,
the validation τ of raw scores and of every candidate per setting with their per-prompt values,
and the command.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from minieagle.calibration import (
    CHAT_PASSAGE_TOKENS,
    HeadCalibration,
    TemperatureScores,
    fit_calibration,
    tuning_prompts,
    tuning_template,
)
from minieagle.checkpoint import target_fingerprint
from minieagle.errors import InvalidInputError
from minieagle.generate import emitted_per_forward, generate
from minieagle.sampling import SamplingParams, setting_name

# (sampling, sampled_tree) of the settings a head's maps cover: the CLI's T = 0 and T = 1.
SETTINGS = (
    (SamplingParams(), False),
    (SamplingParams(temperature=1.0), False),
    (SamplingParams(temperature=1.0), True),
)
# The temperatures a top-k tree's scores are fitted over (docs/calibration.md: on the shipped
# tiny heads τ on training prompts peaked between 0.25 and 0.5 at T = 0; 1 is raw scores).
TEMPERATURES = (0.25, 0.35, 0.5, 0.7)


def record_calibration(
    params, config, make_drafter, prompts, sampling: SamplingParams, *, new_tokens: int, seed=0
) -> list[tuple[float, bool]]:
    """The calibration records of decoding each prompt ((kind, ids) pairs) with a fresh
    drafter from `make_drafter()` (an `Eagle2Drafter`), prompt i with seed `seed + i`."""
    records = []
    for i, (_, ids) in enumerate(prompts):
        drafter = make_drafter()
        generate(
            params,
            config,
            ids,
            drafter=drafter,
            max_new_tokens=new_tokens,
            sampling=sampling,
            seed=seed + i,
            stop_at_eos=False,
        )
        records += drafter.calibration_records
    return records


def validation_tau(params, config, make_drafter, prompts, sampling, *, new_tokens: int) -> dict:
    """{"tau": pooled τ (emitted tokens / target forwards), "tau_per_prompt": [...]} of
    decoding each prompt with a fresh drafter, prompt i with seed i."""
    results = [
        generate(
            params,
            config,
            ids,
            drafter=make_drafter(),
            max_new_tokens=new_tokens,
            sampling=sampling,
            seed=i,
            stop_at_eos=False,
        )  # fmt: skip
        for i, (_, ids) in enumerate(prompts)
    ]
    return {"tau": emitted_per_forward(results), "tau_per_prompt": [r.tau for r in results]}


def calibrate_head(
    target,
    config,
    tokenizer,
    head_dir,
    method: str,
    *,
    target_dir,
    fit_prompts: int = 12,
    val_prompts: int = 8,
    fit_tokens: int = 64,
    val_tokens: int = 48,
    temperatures=TEMPERATURES,
    sizes=None,
    command: str = "",
    log=None,
) -> HeadCalibration:
    """Fit and judge the maps of the head in `head_dir` for `method` ("eagle2": an EAGLE-1
    head; "eagle3") on `target` (prepared or params, its `config`, `tokenizer`), at the
    method's default tree sizes (`drafters.eagle2.EAGLE2_DEFAULTS` / `EAGLE3_DEFAULTS`), or
    the tree decoding will use: `sizes` {"depth", "top_k", "total_tokens"}, any of them
    replacing the default's (a map ranks the nodes a tree of that size drafts).
    fit_prompts / val_prompts: per corpus (prose, code), of the train / val split; fit_tokens,
    val_tokens: new tokens per prompt. temperatures: the grid a top-k tree's temperature scores
    are fitted over (empty: the isotonic maps only). log: a callable receiving one line per
    step."""
    from minieagle.drafters import load_draft_head
    from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS, Eagle2Drafter

    if method not in ("eagle2", "eagle3"):
        raise InvalidInputError(f"method={method!r}: only eagle2 and eagle3 rank by calibrated "
                                "scores; pass eagle2 (an EAGLE-1 head) or eagle3")  # fmt: skip
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    head = load_draft_head(method, head_dir, (target, config), target_dir=target_dir)
    defaults = EAGLE2_DEFAULTS if method == "eagle2" else EAGLE3_DEFAULTS
    unknown = set(sizes or {}) - set(defaults)
    if unknown:
        raise InvalidInputError(f"sizes={sizes!r}: {sorted(unknown)} are not tree sizes; pass "
                                f"only {sorted(defaults)}")  # fmt: skip
    sizes = {**defaults, **{k: v for k, v in (sizes or {}).items() if v is not None}}
    fingerprint = target_fingerprint(head_dir)
    train = tuning_prompts(tokenizer, "train", fit_prompts)
    val = tuning_prompts(tokenizer, "val", val_prompts)
    chat = tuning_template(tokenizer) is not None

    def drafter(sampled: bool, calibration=None):
        return lambda: Eagle2Drafter(target, config, *head, **sizes, sampled_tree=sampled,
                                     calibration=calibration)  # fmt: skip

    maps, use, validation = {}, {}, {}
    for sampling, sampled in SETTINGS:
        setting = setting_name(sampling, sampled_tree=sampled)
        start = time.perf_counter()
        records = record_calibration(target, config, drafter(sampled), train, sampling,
                                     new_tokens=fit_tokens)  # fmt: skip
        candidates = {"isotonic": fit_calibration(records, setting=setting, head=fingerprint)}
        if not sampled and temperatures:  # temperature scores rank a top-k tree's children
            training_tau = {
                t: validation_tau(target, config, drafter(False, TemperatureScores(t, setting)),
                                  train, sampling, new_tokens=fit_tokens)["tau"]
                for t in temperatures
            }  # fmt: skip
            best = max(temperatures, key=lambda t: (training_tau[t], t))
            candidates["temperature"] = TemperatureScores(best, setting, fingerprint, training_tau)
        raw = validation_tau(target, config, drafter(sampled), val, sampling,
                             new_tokens=val_tokens)  # fmt: skip
        judged = {}
        for name, candidate in candidates.items():
            mine = validation_tau(target, config, drafter(sampled, candidate), val, sampling,
                                  new_tokens=val_tokens)  # fmt: skip
            ours, theirs = (np.asarray(x["tau_per_prompt"]) for x in (mine, raw))
            above, below = int((ours > theirs).sum()), int((ours < theirs).sum())
            judged[name] = {
                "tau": mine["tau"],
                "prompts_above_raw": above,
                "prompts_below_raw": below,
                "helps": bool(mine["tau"] > raw["tau"] and above > below),
                "tau_per_prompt": mine["tau_per_prompt"],
            }
        helping = [name for name in judged if judged[name]["helps"]]
        chosen = max(helping, key=lambda name: judged[name]["tau"]) if helping else "isotonic"
        maps[setting], use[setting] = candidates[chosen], bool(helping)
        validation[setting] = {
            "tau_raw": raw["tau"],
            "tau_calibrated": judged[chosen]["tau"],
            "prompts_above_raw": judged[chosen]["prompts_above_raw"],
            "prompts_below_raw": judged[chosen]["prompts_below_raw"],
            "tau_per_prompt_raw": raw["tau_per_prompt"],
            "tau_per_prompt_calibrated": judged[chosen]["tau_per_prompt"],
            "kind": chosen,
            "candidates": {
                name: {k: v for k, v in j.items() if k != "tau_per_prompt"}
                for name, j in judged.items()
            },  # fmt: skip
        }
        tried = ", ".join(
            f"{name} {j['tau']:.2f}"
            + (
                f" (t = {candidates[name].temperature})" if name == "temperature" else ""
            )  # fmt: skip
            for name, j in judged.items()
        )
        log(
            f"[calibrate {setting}: {len(records)} records; validation tau raw {raw['tau']:.2f}, "
            f"{tried} -> {chosen + ' used' if use[setting] else 'none used'} "
            f"({time.perf_counter() - start:.0f} s)]"
        )
    provenance = {
        "command": command,
        "method": method,
        "target_fingerprint": target_fingerprint(target_dir),
        "tree": dict(sizes),
        "prompts": (f"chat requests about passages of {CHAT_PASSAGE_TOKENS} tokens, rendered "
                    "with the target's chat template" if chat else "text windows of 32 tokens"),
        "fit": {"split": "train", "prompts_per_corpus": fit_prompts, "new_tokens": fit_tokens,
                "seeds": "prose 0, code 1; prompt i decodes with seed i"},
        "validation": {"split": "val", "prompts_per_corpus": val_prompts,
                       "new_tokens": val_tokens, "seeds": "prose 0, code 1; prompt i with "
                       "seed i", "rule": "of the candidates whose tau is above the raw and "
                       "on more prompts gain than lose, the one of the highest tau is used"},
        "temperatures": list(temperatures),
    }  # fmt: skip
    return HeadCalibration(fingerprint, maps, use, validation, provenance)
