"""Fitting a head's calibration maps and deciding, on the validation split, where they are used.

`minieagle calibrate --head DIR` runs `calibrate_head` and writes DIR/calibration.json
(`calibration.HEAD_FILE`), which `build_drafter` and the CLI then load by default
(docs/calibration.md, "Shipped maps"). For each sampling setting the dynamic tree decodes
with by default, T = 0 (top-k tree), T = 1 (top-k tree) and T = 1 with the sampled tree:

1. Fit: decode TRAINING prompts (`calibration.training_prompts`, windows of the corpora's
   train split) with the raw drafter at the method's default sizes, keep its
   (confidence, accepted) records, fit the isotonic map (`calibration.fit_calibration`).
2. Decide: decode VALIDATION prompts (`calibration.validation_prompts`, the val split; never
   the test split τ is reported on) with the raw and the calibrated drafter, same prompts
   and seeds; the map is used by default where its pooled τ is higher and more prompts gain
   than lose (a tie in either says the map does not help).

The file records the head's fingerprint (a map never applies to other weights), the target's,
the validation τ of both drafters per setting with their per-prompt values, and the command.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from minieagle.calibration import (
    HeadCalibration,
    fit_calibration,
    training_prompts,
    validation_prompts,
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
    command: str = "",
    log=None,
) -> HeadCalibration:
    """Fit and judge the maps of the head in `head_dir` for `method` ("eagle2": an EAGLE-1
    head; "eagle3") on `target` (prepared or params, its `config`, `tokenizer`), at the
    method's default tree sizes (`drafters.eagle2.EAGLE2_DEFAULTS` / `EAGLE3_DEFAULTS`).
    fit_prompts / val_prompts: per corpus (prose, code), of the train / val split; fit_tokens,
    val_tokens: new tokens per prompt. log: a callable receiving one line per step."""
    from minieagle.drafters import load_draft_head
    from minieagle.drafters.eagle2 import EAGLE2_DEFAULTS, EAGLE3_DEFAULTS, Eagle2Drafter

    if method not in ("eagle2", "eagle3"):
        raise InvalidInputError(f"method={method!r}: only eagle2 and eagle3 rank by calibrated "
                                "scores; pass eagle2 (an EAGLE-1 head) or eagle3")  # fmt: skip
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    head = load_draft_head(method, head_dir, (target, config), target_dir=target_dir)
    sizes = EAGLE2_DEFAULTS if method == "eagle2" else EAGLE3_DEFAULTS
    fingerprint = target_fingerprint(head_dir)
    train = training_prompts(tokenizer, "prose", fit_prompts, seed=0)
    train += training_prompts(tokenizer, "code", fit_prompts, seed=1)
    val = validation_prompts(tokenizer, "prose", val_prompts, seed=0)
    val += validation_prompts(tokenizer, "code", val_prompts, seed=1)

    def drafter(sampled: bool, calibration=None):
        return lambda: Eagle2Drafter(target, config, *head, **sizes, sampled_tree=sampled,
                                     calibration=calibration)  # fmt: skip

    maps, use, validation = {}, {}, {}
    for sampling, sampled in SETTINGS:
        setting = setting_name(sampling, sampled_tree=sampled)
        start = time.perf_counter()
        records = record_calibration(target, config, drafter(sampled), train, sampling,
                                     new_tokens=fit_tokens)  # fmt: skip
        fitted = fit_calibration(records, setting=setting, head=fingerprint)
        raw = validation_tau(target, config, drafter(sampled), val, sampling,
                             new_tokens=val_tokens)  # fmt: skip
        calibrated = validation_tau(target, config, drafter(sampled, fitted), val, sampling,
                                    new_tokens=val_tokens)  # fmt: skip
        mine, theirs = (np.asarray(x["tau_per_prompt"]) for x in (calibrated, raw))
        above, below = int((mine > theirs).sum()), int((mine < theirs).sum())
        maps[setting], use[setting] = fitted, bool(calibrated["tau"] > raw["tau"] and above > below)
        validation[setting] = {
            "tau_raw": raw["tau"],
            "tau_calibrated": calibrated["tau"],
            "prompts_above_raw": above,
            "prompts_below_raw": below,
            "tau_per_prompt_raw": raw["tau_per_prompt"],
            "tau_per_prompt_calibrated": calibrated["tau_per_prompt"],
        }
        log(
            f"[calibrate {setting}: {len(records)} records, {len(fitted.confidence)} knots; "
            f"validation tau raw {raw['tau']:.2f}, calibrated {calibrated['tau']:.2f} -> "
            f"{'used' if use[setting] else 'not used'} ({time.perf_counter() - start:.0f} s)]"
        )
    provenance = {
        "command": command,
        "method": method,
        "target_fingerprint": target_fingerprint(target_dir),
        "tree": dict(sizes),
        "fit": {"split": "train", "prompts_per_corpus": fit_prompts, "new_tokens": fit_tokens,
                "seeds": "prose 0, code 1; prompt i decodes with seed i"},
        "validation": {"split": "val", "prompts_per_corpus": val_prompts,
                       "new_tokens": val_tokens, "seeds": "prose 0, code 1; prompt i with "
                       "seed i", "rule": "used where the calibrated tau is above the raw "
                       "and more prompts gain than lose"},
    }  # fmt: skip
    return HeadCalibration(fingerprint, maps, use, validation, provenance)
