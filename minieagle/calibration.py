"""Calibrating the draft's confidence into an acceptance probability for EAGLE-2's tree.

EAGLE-2 (Li et al. 2024b, §3) ranks candidates by their value V = Π q along the path, on the
claim that the draft's confidence q is about the chance the target accepts the token. How true
that is depends on the sampling setting: at T = 1 a top-k child x is accepted with probability
p(x), the target's own probability, so a head that matches the target sits on the diagonal; at
T = 0 a child is accepted iff it is the target's argmax, which a flat but agreeing target
grants far more often than q says (docs/eagle2.md, "Calibration"). A *calibration* c is the
measured map from confidence to acceptance, one per sampling setting; the tree then ranks by
Σ log c(q) along the path (`Eagle2Drafter(..., calibration=)`).

Fitting (`fit_calibration`): isotonic regression of the recorded (confidence, accepted) pairs,
i.e. the non-decreasing function of q closest to the 0/1 outcomes in weighted least squares,
computed by pool-adjacent-violators. The data are first joined by a weak prior: pseudo-records
(g, g) on a grid g = 0, 0.05, ..., 1 (EAGLE-2's own assumption, acceptance = q), so that where
the data are thin the map stays near the uncalibrated score. Each pooled block becomes one knot
(its mean confidence, its acceptance rate); c is the piecewise-linear interpolation of the knots,
constant beyond the first and last. Values are clipped to [epsilon, 1]:

- c <= 1, so log c <= 0 and a child never outscores its parent: the reranked top set stays a
  connected tree (the argument of `dynamic_tree.rerank`; ties go to the shallower node there).
- c >= epsilon > 0, so log c is finite: a finite sample never proves a token impossible, and a
  -inf score would erase the ranking below it.
- c non-decreasing, so the top-k children by q are the top-k by c(q): the expansion, which takes
  each node's top-k tokens, drafts the candidates the calibrated ranking wants.

**Temperature scaling** (`TemperatureScores`, Guo et al. 2017's name for it). A map of q alone
cannot see the rest of a node's distribution, and at T = 0 acceptance depends on it: only the
target's argmax is accepted, so among siblings of equal q the head's first choice is accepted
far more often than a lower-ranked one (with the EAGLE-1 head shipped 2026-12-02, q in
[0.05, 0.1): rank 0 accepted 54 % of the time, rank 1 12 %, rank 2 and beyond 4 %). Scoring a
top-k child x by log softmax(logits / t)[x] = log q(x) / t − log Σ_y q(y)^(1/t), with t < 1,
rewards the clear favourite of a flat distribution and pushes its siblings down. t is fitted
per setting on training prompts by the τ each t of a small grid reaches (`minieagle.calibrate`);
it applies to top-k trees only (a sampled tree's draws are scored before they are drawn).

Calibration changes only which tree is drafted, never how it is verified, so the decoding stays
lossless (docs/calibration.md).

Calibrations are fitted on TRAINING prompts only (`training_prompts`: windows of the corpora's
train split), never on the held-out test-split prompts the benchmarks report on, and saved as a
small JSON (`save_calibration`, `load_calibration`) naming the sampling setting (`setting_name`)
and the head (a fingerprint string the caller passes, e.g. `checkpoint.target_fingerprint` of
the head's directory).

A head ships its maps beside it (`HEAD_FILE`, a `HeadCalibration`: one map per sampling
setting, each marked used where it beat raw scores on VALIDATION prompts,
`validation_prompts`), written by `minieagle calibrate --head DIR` (`minieagle.calibrate`,
which decodes and so sits above `generate`; this module only fits and stores maps).
`shipped_calibration(DIR)` reads them for the head's current weights only.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minieagle.errors import InvalidInputError

FORMAT = "minieagle-calibration"
VERSION = 1  # an isotonic map ("knots")
TEMPERATURE_VERSION = 2  # temperature scores ("temperature"); readers of 2 read both
DEFAULT_EPSILON = 1e-3
DEFAULT_PRIOR_WEIGHT = 1.0  # pseudo-records per prior point: 21 in all, against thousands
PRIOR_POINTS = np.linspace(0.0, 1.0, 21)  # [21] confidences where acceptance = q is assumed


@dataclass(frozen=True, eq=False)  # knots are arrays: compare them with np.array_equal
class Calibration:
    """A monotone map from draft confidence q to acceptance probability, for one sampling
    setting. confidence: float64 [K] knots, strictly increasing in [0, 1]; acceptance: float64
    [K], non-decreasing in (0, 1]. setting: `setting_name` of the sampling it was fitted for;
    records: how many (confidence, accepted) pairs it was fitted on; head: a fingerprint of the
    draft head the records came from ("" if unknown). Call it on q; `log_acceptance` on log q."""

    confidence: np.ndarray
    acceptance: np.ndarray
    setting: str
    records: int = 0
    head: str = ""

    def __post_init__(self) -> None:
        x = _frozen_vector("confidence", self.confidence)
        y = _frozen_vector("acceptance", self.acceptance)
        if len(x) != len(y) or len(x) == 0:
            raise InvalidInputError(
                f"a calibration needs as many acceptance values ({len(y)}) as confidence knots "
                f"({len(x)}), at least one; fit one with fit_calibration(records, setting=...)"
            )
        if x[0] < 0 or x[-1] > 1 or (np.diff(x) <= 0).any():
            raise InvalidInputError(
                f"confidence knots {x.tolist()} must increase strictly within [0, 1]; fit the "
                "calibration with fit_calibration"
            )
        if (np.diff(y) < 0).any():
            i = int(np.flatnonzero(np.diff(y) < 0)[0])
            raise InvalidInputError(
                f"acceptance falls from {y[i]} to {y[i + 1]} between confidence {x[i]} and "
                f"{x[i + 1]}; a calibration must be non-decreasing (a more confident draft is "
                "never ranked below a less confident sibling), fit it with fit_calibration"
            )
        if y[0] <= 0 or y[-1] > 1:
            raise InvalidInputError(
                f"acceptance values span [{y[0]}, {y[-1]}], outside (0, 1]: above 1 a child "
                "could outscore its parent and disconnect the reranked tree, 0 gives log 0 = "
                "-inf; clip them to [epsilon, 1] (fit_calibration does)"
            )
        if not isinstance(self.setting, str) or not self.setting:
            raise InvalidInputError(
                f"setting={self.setting!r} must name the sampling setting, e.g. 'T=0' "
                "(setting_name(sampling))"
            )
        if isinstance(self.records, bool) or not isinstance(self.records, int | np.integer):
            raise InvalidInputError(f"records={self.records!r} must be a count of records")
        object.__setattr__(self, "confidence", x)
        object.__setattr__(self, "acceptance", y)

    def __call__(self, confidence) -> np.ndarray:
        """c(q): float64, the shape of `confidence`, in [acceptance[0], acceptance[-1]]."""
        return np.interp(np.asarray(confidence, dtype=np.float64), self.confidence, self.acceptance)

    def log_acceptance(self, log_confidence) -> np.ndarray:
        """log c(exp(log q)): the calibrated score term, finite and <= 0."""
        return np.log(self(np.exp(np.asarray(log_confidence, dtype=np.float64))))


@dataclass(frozen=True)
class TemperatureScores:
    """Temperature-scaled scores for a top-k tree: the child x of a node whose head logits are
    l scores log softmax(l / temperature)[x] (module docstring). setting: the sampling setting
    it was fitted for (a top-k tree's: "T=0" or "T=1"); head: the head's fingerprint;
    training_tau: {temperature: τ on the training prompts} of the grid it was chosen from."""

    temperature: float
    setting: str
    head: str = ""
    training_tau: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        t = self.temperature
        if (
            isinstance(t, bool)
            or not isinstance(t, int | float | np.floating)
            or not (np.isfinite(t) and t > 0)
        ):
            raise InvalidInputError(
                f"temperature={t!r} must be a finite number > 0 (below 1 sharpens the head's "
                "distribution), e.g. 0.5"
            )
        if not isinstance(self.setting, str) or not self.setting:
            raise InvalidInputError(f"setting={self.setting!r} must name the sampling setting, "
                                    "e.g. 'T=0' (setting_name(sampling))")  # fmt: skip
        if self.setting.endswith(",sampled"):
            raise InvalidInputError(
                f"setting={self.setting!r}: temperature scores rank a top-k tree's children; a "
                "sampled tree's draws are scored before they are drawn (use an isotonic map)"
            )
        object.__setattr__(self, "temperature", float(t))

    def log_acceptance_of_logits(self, logits, tokens) -> np.ndarray:
        """The score terms [F, k] of the children `tokens` [F, k] of F nodes whose head logits
        are `logits` [F, V] (-inf outside an EAGLE-3 head's draft vocabulary): finite, <= 0."""
        x = np.asarray(logits, dtype=np.float64) / self.temperature  # [F, V]
        top = x.max(axis=-1, keepdims=True)  # [F, 1]
        log_sum = np.log(np.exp(x - top).sum(axis=-1, keepdims=True))  # [F, 1]
        return np.take_along_axis(x, np.asarray(tokens), axis=-1) - top - log_sum


def _frozen_vector(name: str, values) -> np.ndarray:
    try:
        x = np.array(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"{name} knots must be numbers ({e})") from e
    if not np.isfinite(x).all():
        raise InvalidInputError(f"{name} knots {x.tolist()} hold NaN or inf; refit the calibration")
    x.setflags(write=False)  # a fitted map is not edited in place (its checks ran once)
    return x


def _pool_adjacent_violators(y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted isotonic regression of y [n] in its given order: the non-decreasing sequence
    minimising Σ w (fit - y)^2. Returns (block means [B], block sizes [B]): the fit is each
    mean repeated over its block. Adjacent blocks are pooled while the earlier mean is >= the
    later one, so the block means increase strictly."""
    sums, weights, sizes = [], [], []  # per block: Σ w y, Σ w, points
    for yi, wi in zip(y.tolist(), w.tolist(), strict=True):
        sums.append(wi * yi)
        weights.append(wi)
        sizes.append(1)
        while len(sums) > 1 and sums[-2] * weights[-1] >= sums[-1] * weights[-2]:
            last_sum, last_weight, last_size = sums.pop(), weights.pop(), sizes.pop()
            sums[-1] += last_sum
            weights[-1] += last_weight
            sizes[-1] += last_size
    return np.asarray(sums) / np.asarray(weights), np.asarray(sizes)


def fit_calibration(
    records,
    *,
    setting: str,
    head: str = "",
    prior_weight: float = DEFAULT_PRIOR_WEIGHT,
    epsilon: float = DEFAULT_EPSILON,
) -> Calibration:
    """The isotonic calibration of `records`, (confidence, accepted) pairs such as
    `Eagle2Drafter.calibration_records` (one per verified node whose parent was accepted).

    setting: the sampling setting the records were made under (`setting_name`); head: a
    fingerprint of the head. prior_weight: weight of each of the 21 diagonal pseudo-records (0:
    none); epsilon: the least acceptance a knot may claim, in (0, 1). See the module docstring.
    """
    if not 0 < epsilon < 1:
        raise InvalidInputError(f"epsilon={epsilon} is outside (0, 1); pass a small value, 1e-3")
    if not prior_weight >= 0:  # also refuses NaN
        raise InvalidInputError(f"prior_weight={prior_weight} is negative; pass 0 or e.g. 1.0")
    data = np.asarray([(float(q), float(a)) for q, a in records], dtype=np.float64)
    data = data.reshape(-1, 2)  # [R, (confidence, accepted)]
    if len(data) == 0:
        raise InvalidInputError(
            "no records to fit; decode some training prompts with an Eagle2Drafter first and "
            "pass its calibration_records"
        )
    bad = ~((data[:, 0] >= 0) & (data[:, 0] <= 1) & np.isin(data[:, 1], (0.0, 1.0)))
    if bad.any():
        q, a = data[np.flatnonzero(bad)[0]]
        raise InvalidInputError(
            f"record (confidence={q}, accepted={a}) is not a probability in [0, 1] with a "
            "0/1 outcome; pass (q, bool) pairs as calibration_records holds them"
        )
    x = np.concatenate([data[:, 0], PRIOR_POINTS])  # [R + 21]
    y = np.concatenate([data[:, 1], PRIOR_POINTS])  # the prior: acceptance = confidence
    w = np.concatenate([np.ones(len(data)), np.full(len(PRIOR_POINTS), float(prior_weight))])
    keep = w > 0
    x, y, w = x[keep], y[keep], w[keep]
    # Equal confidences form one point: knots must not repeat a confidence.
    unique_x, which = np.unique(x, return_inverse=True)  # sorted [U]
    point_w = np.bincount(which, weights=w)  # [U]
    point_y = np.bincount(which, weights=w * y) / point_w
    means, sizes = _pool_adjacent_violators(point_y, point_w)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # [B]
    knot_x = np.add.reduceat(point_w * unique_x, starts) / np.add.reduceat(point_w, starts)
    # Rounding can let two block means of confidence touch; they are one knot then.
    knot_x, first = np.unique(knot_x, return_index=True)
    return Calibration(
        knot_x, np.clip(means[first], epsilon, 1.0), setting, records=len(data), head=head
    )


def _map_json(calibration: Calibration) -> dict:
    """A map's records and knots as JSON-ready data (the files of one map and of a head)."""
    return {
        "records": int(calibration.records),
        "knots": {
            "confidence": calibration.confidence.tolist(),
            "acceptance": calibration.acceptance.tolist(),
        },
    }


def _any_map_json(calibration) -> dict:
    """An isotonic map's records and knots, or temperature scores' temperature."""
    if isinstance(calibration, TemperatureScores):
        return {
            "kind": "temperature",
            "temperature": calibration.temperature,
            "training_tau": {str(t): tau for t, tau in calibration.training_tau.items()},
        }
    return _map_json(calibration)


def _any_map_from_json(entry: dict, setting: str, head: str):
    """The inverse of `_any_map_json`."""
    if entry.get("kind") == "temperature":
        tau = {float(t): float(v) for t, v in entry.get("training_tau", {}).items()}
        return TemperatureScores(entry["temperature"], setting, head, tau)
    knots = entry["knots"]
    return Calibration(knots["confidence"], knots["acceptance"], setting, entry["records"], head)


def save_calibration(calibration: Calibration | TemperatureScores, path) -> Path:
    """Write `calibration` as a small JSON file at `path`; returns the path."""
    path = Path(path)
    scaled = isinstance(calibration, TemperatureScores)
    document = {
        "format": FORMAT,
        "version": TEMPERATURE_VERSION if scaled else VERSION,
        "setting": calibration.setting,
        "head": calibration.head,
        **_any_map_json(calibration),
    }
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def load_calibration(
    path, *, setting: str | None = None, head: str | None = None
) -> Calibration | TemperatureScores:
    """Read a file written by `save_calibration`. setting / head, when given, must be the ones
    it was fitted for (a calibration of another setting or head ranks candidates wrongly)."""
    from minieagle.checkpoint import read_config_json

    path = Path(path)
    d = read_config_json(path, fix_missing="fit one: python benchmarks/eagle2_calibration.py")
    if d.get("format") != FORMAT or d.get("version") not in (VERSION, TEMPERATURE_VERSION):
        raise InvalidInputError(
            f"{path} is not a {FORMAT} version {VERSION} or {TEMPERATURE_VERSION} file (format="
            f"{d.get('format')!r}, version={d.get('version')!r}); write it with save_calibration"
        )
    try:
        calibration = _any_map_from_json(d, d["setting"], d["head"])
    except (KeyError, TypeError) as e:
        raise InvalidInputError(f"{path} lacks {e}; write it with save_calibration") from e
    except InvalidInputError as e:
        raise InvalidInputError(f"{path}: {e}") from e
    for name, want in (("setting", setting), ("head", head)):
        got = getattr(calibration, name)
        if want is not None and got != want:
            raise InvalidInputError(
                f"{path} was fitted for {name} {got!r}, not {want!r}; load or fit the "
                f"calibration for {want!r}"
            )
    return calibration


# A chat request's passage, in tokens: as long as the SmolLM2 heads' training requests
# (`minieagle distill --source chat --prompt-tokens 48`, benchmarks/heads_at_scale.sh).
CHAT_PASSAGE_TOKENS = 48


def training_prompts(
    tokenizer, corpus: str, count: int, length: int = 32, seed: int = 0, *, chat_template=None
) -> list[tuple[str, list[int]]]:
    """(corpus, ids): `count` prompts of `length` tokens (<bos> first) cut from random places
    of `corpus`'s TRAIN split ("prose" or "code"), each window starting at a line start, from
    distinct documents chosen with `seed`. Never the test split that `bench.heldout_prompts`
    reports on: a calibration fitted on the prompts it is judged on would flatter itself.

    chat_template: for an instruct target (`tuning_template`): each window (of `length`
    tokens, no <bos>) becomes the passage of a user request (one of `distill.CHAT_REQUESTS`,
    drawn with `seed`) rendered with the template, which ends with the cue for the answer: the
    kind of prompt such a target is used with and its heads trained on."""
    return _window_prompts(tokenizer, corpus, "train", count, length, seed, chat_template)


def validation_prompts(
    tokenizer, corpus: str, count: int, length: int = 32, seed: int = 0, *, chat_template=None
) -> list[tuple[str, list[int]]]:
    """As `training_prompts`, from the VALIDATION split: the prompts on which a fitted map is
    judged before it becomes a head's default (`minieagle calibrate`), neither the prompts it
    was fitted on nor the test-split prompts τ is reported on."""
    return _window_prompts(tokenizer, corpus, "val", count, length, seed, chat_template)


def tuning_template(tokenizer) -> str | None:
    """The chat template that a target's tuning prompts (calibration, tree sizing) are rendered
    with: the tokenizer's own (an instruct model such as SmolLM2 is used through it), or None
    for a target without one (the small target: plain text windows)."""
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) and template.strip() else None


def tuning_prompts(tokenizer, split: str, count: int, seeds=(0, 1)) -> list[tuple[str, list]]:
    """`count` prose then `count` code prompts of `split` ("train": fitting and sizing; "val":
    judging), drawn with `seeds` (prose, code): windows of 32 tokens, or for a target with a
    chat template (`tuning_template`) requests about passages of CHAT_PASSAGE_TOKENS tokens."""
    template = tuning_template(tokenizer)
    length = 32 if template is None else CHAT_PASSAGE_TOKENS
    make = {"train": training_prompts, "val": validation_prompts}[split]
    return [
        prompt
        for corpus, seed in zip(("prose", "code"), seeds, strict=True)
        for prompt in make(tokenizer, corpus, count, length, seed, chat_template=template)
    ]


def _window_prompts(tokenizer, corpus, split, count, length, seed, chat_template=None):
    from minieagle.data import load_split

    for name, value, least in (("count", count, 1), ("length", length, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidInputError(f"{name}={value!r} must be an integer >= {least}, e.g. 16")
    span = 8 * length  # characters: comfortably more than `length` tokens
    documents = [d for d in load_split(corpus, split) if len(d.text) >= 2 * span]
    if count > len(documents):
        raise InvalidInputError(
            f"count={count} exceeds the {len(documents)} {corpus} {split} documents of at "
            f"least {2 * span} characters; pass count <= {len(documents)} or a smaller length"
        )
    rng = np.random.default_rng(seed)
    prompts = []
    for index in rng.choice(len(documents), size=count, replace=False):
        text = documents[index].text
        start = int(rng.integers(0, len(text) - 2 * span))
        line = text.find("\n", start, start + span)  # start at the next line, if one is near
        start = line + 1 if line >= 0 else start
        # a request's passage has no <bos>: the template writes what the model wants
        ids = tokenizer.encode(text[start : start + span], add_bos=chat_template is None)
        prompts.append((corpus, ids[:length]))
    if chat_template is None:
        return prompts
    return [(kind, _chat_request(tokenizer, chat_template, ids, rng)) for kind, ids in prompts]


def _chat_request(tokenizer, template: str, passage_ids, rng) -> list[int]:
    """A user request (one of `distill.CHAT_REQUESTS`, drawn with rng) about the passage
    `passage_ids`, rendered with `template` up to the cue for the answer."""
    from minieagle.chat import encode_chat
    from minieagle.distill import CHAT_REQUESTS

    request = CHAT_REQUESTS[int(rng.integers(len(CHAT_REQUESTS)))]
    content = request.format(passage=tokenizer.decode([int(t) for t in passage_ids]).strip())
    return encode_chat(tokenizer, template, [{"role": "user", "content": content}])


# ---------------------------------------------------------------------------- a head's maps

HEAD_FORMAT = "minieagle-head-calibration"
HEAD_VERSION = 2  # 2: a setting may hold temperature scores; version 1 files still load
HEAD_FILE = "calibration.json"  # beside the head's config.json and model.safetensors


@dataclass(frozen=True)
class HeadCalibration:
    """The calibration maps shipped beside a head (`HEAD_FILE`): one `Calibration` or
    `TemperatureScores` per sampling setting (maps), and per setting whether it is used by
    default (use: True where it beat raw scores on the validation split, `minieagle.calibrate`),
    with the numbers that decided it (validation) and how it was made (provenance: the
    command, prompts, tree sizes). head: the head's fingerprint (`checkpoint.target_fingerprint`
    of its directory), so the maps never apply to another head. A drafter calls `for_setting`
    when decoding begins."""

    head: str
    maps: dict
    use: dict
    validation: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for setting, calibration in self.maps.items():
            if (
                not isinstance(calibration, Calibration | TemperatureScores)
                or calibration.setting != setting
            ):
                raise InvalidInputError(
                    f"maps[{setting!r}] must be a Calibration or TemperatureScores fitted for "
                    f"{setting!r}; build the maps with minieagle calibrate or "
                    "fit_calibration(records, setting=...)"
                )
        if set(self.use) != set(self.maps) or not all(
            isinstance(v, bool) for v in self.use.values()
        ):
            raise InvalidInputError(
                f"use={self.use!r} must say True or False for each of the maps' settings "
                f"{sorted(self.maps)}"
            )

    @property
    def setting(self) -> str:
        """The settings whose map is used, for messages (`Eagle2Drafter` reads `for_setting`)."""
        return ",".join(s for s in self.maps if self.use[s]) or "none used"

    def for_setting(self, setting: str) -> Calibration | TemperatureScores | None:
        """The map to rank by when decoding under `setting` (`setting_name`): the one fitted
        for it where it measured better on validation, else None (raw scores)."""
        return self.maps[setting] if self.use.get(setting) else None


def save_head_calibration(head_calibration: HeadCalibration, path) -> Path:
    """Write `head_calibration` as JSON at `path` (a head's `HEAD_FILE`); returns the path."""
    path = Path(path)
    scaled = any(isinstance(m, TemperatureScores) for m in head_calibration.maps.values())
    document = {
        "format": HEAD_FORMAT,
        "version": HEAD_VERSION if scaled else 1,  # isotonic maps only: the version 1 layout
        "head": head_calibration.head,
        "provenance": head_calibration.provenance,
        "settings": {
            setting: {
                "use": head_calibration.use[setting],
                "validation": head_calibration.validation.get(setting, {}),
                **_any_map_json(calibration),
            }
            for setting, calibration in head_calibration.maps.items()
        },
    }
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return path


def load_head_calibration(path, *, head: str | None = None) -> HeadCalibration:
    """Read a file written by `save_head_calibration`; head, when given, must be the
    fingerprint it was fitted for (refit with `minieagle calibrate --head DIR` otherwise)."""
    from minieagle.checkpoint import read_config_json

    path = Path(path)
    d = read_config_json(path, fix_missing="fit one: minieagle calibrate --head DIR")
    if d.get("format") != HEAD_FORMAT or d.get("version") not in (1, HEAD_VERSION):
        raise InvalidInputError(
            f"{path} is not a {HEAD_FORMAT} version 1 or {HEAD_VERSION} file (format="
            f"{d.get('format')!r}, version={d.get('version')!r}); write it with "
            "minieagle calibrate --head DIR"
        )
    try:
        maps, use, validation = {}, {}, {}
        for setting, entry in d["settings"].items():
            maps[setting] = _any_map_from_json(entry, setting, d["head"])
            use[setting], validation[setting] = entry["use"], entry.get("validation", {})
        loaded = HeadCalibration(d["head"], maps, use, validation, d.get("provenance", {}))
    except (KeyError, TypeError, AttributeError) as e:
        raise InvalidInputError(f"{path} lacks {e}; write it with minieagle calibrate") from e
    except InvalidInputError as e:
        raise InvalidInputError(f"{path}: {e}") from e
    if head is not None and loaded.head != head:
        raise InvalidInputError(
            f"{path} was fitted for head {loaded.head!r}, not {head!r}; refit it for this head: "
            "minieagle calibrate --head DIR"
        )
    return loaded


def shipped_calibration(head_dir) -> HeadCalibration | None:
    """The maps shipped beside the head in `head_dir` (`HEAD_FILE`), or None when it has none.
    A file fitted for other weights (the head was retrained or replaced) is not used: a
    warning names it and the command that refits it."""
    from minieagle.checkpoint import target_fingerprint

    path = Path(head_dir) / HEAD_FILE
    if not path.is_file():
        return None
    fingerprint = target_fingerprint(head_dir)
    loaded = load_head_calibration(path)
    if loaded.head != fingerprint:
        warnings.warn(
            f"{path} was fitted for head {loaded.head}, but the head's weights are "
            f"{fingerprint}: its maps are not used (raw scores); refit them with "
            f"minieagle calibrate --head {head_dir}",
            stacklevel=2,
        )
        return None
    return loaded


def load_any_calibration(path, *, head: str | None = None):
    """A `--calibration FILE`: a single map (`save_calibration`) or a head's maps
    (`save_head_calibration`), told apart by their format; head as in both loaders."""
    from minieagle.checkpoint import read_config_json

    d = read_config_json(Path(path), fix_missing="fit one: minieagle calibrate --head DIR")
    if d.get("format") == HEAD_FORMAT:
        return load_head_calibration(path, head=head)
    return load_calibration(path, head=head)
