"""The checkpoints shipped inside the package (`minieagle/pretrained/`), and which head a target
gets by default.

A shipped head is addressed by its directory's name (`--head smollm2-eagle3`), wherever the
package is installed; any other value is a directory path. Without --head, a method gets the
shipped head of its kind trained for the target: each head's config.json records its kind
(`minieagle_head`), its target's shapes (vocab_size, hidden_size), the target's directory
(`minieagle_target`) and the target's weights fingerprint (`minieagle_target_fingerprint`).
Among the heads whose shapes fit the target, the one whose fingerprint matches wins, then the
one whose recorded target directory has the target's directory name (a fresh import of the same
model can differ in bytes); with none fitting, the small target's head (whose checks then
explain the mismatch). A head in `ALTERNATIVES` is shipped to be named, never chosen by default:
`small-eagle3-wide` (an MLP four times the target's width) drafts with more τ than
`small-eagle3` but costs more per draft, and measured slower on the reference CPU
(docs/eagle3.md, "A wider head").

`fastest_method` says what `--method auto` (the CLI's default) decodes a target with: the method
measured fastest for it on the reference machine (`pretrained/fastest.json`).
"""

from __future__ import annotations

import json
from pathlib import Path

from minieagle.errors import InvalidInputError, MissingFileError

PRETRAINED = Path(__file__).parent / "pretrained"
DEFAULT_MODEL = PRETRAINED / "small"
DEFAULT_DRAFT_MODEL = PRETRAINED / "small-draft"
DEFAULT_HEAD = PRETRAINED / "small-eagle1"
DEFAULT_EAGLE3_HEAD = PRETRAINED / "small-eagle3"
DEFAULT_MEDUSA_HEAD = PRETRAINED / "small-medusa"

HEAD_KIND = {"eagle1": "eagle1", "eagle2": "eagle1", "eagle3": "eagle3", "medusa": "medusa"}
ALTERNATIVES = frozenset({"small-eagle3-wide"})  # named with --head only
SMALL_HEADS = {"eagle1": DEFAULT_HEAD, "eagle3": DEFAULT_EAGLE3_HEAD, "medusa": DEFAULT_MEDUSA_HEAD}


def _config(directory: Path) -> dict:
    """A shipped checkpoint's config.json ({} when it has none or it does not parse)."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def shipped_heads(kind: str | None = None) -> list[Path]:
    """The shipped head directories (of `kind`: "eagle1", "eagle3" or "medusa"), by name."""
    heads = []
    for directory in sorted(PRETRAINED.iterdir()):
        recorded = _config(directory).get("minieagle_head") if directory.is_dir() else None
        if recorded is not None and kind in (None, recorded):
            heads.append(directory)
    return heads


def resolve_head(given: str, flag: str = "--head") -> Path:
    """The head directory `given` names: a path (anything with a "/", or an existing
    directory; the loader explains a missing one), else the shipped head of that name
    (`shipped_heads`); MissingFileError listing the shipped names for an unknown name."""
    path = Path(given).expanduser()
    if path.is_dir() or "/" in given or given in ("", ".", ".."):
        return path
    if (PRETRAINED / given).is_dir():
        return PRETRAINED / given
    names = ", ".join(head.name for head in shipped_heads())
    raise MissingFileError(
        f"{flag} {given!r} is neither a directory nor the name of a shipped head; pass a head "
        f"directory or one of: {names}"
    )


def default_head(method: str, model_dir) -> Path:
    """The shipped head `method` ("eagle1", "eagle2", "eagle3", "medusa") uses for the target
    checkpoint `model_dir` when no head is given (see the module docstring)."""
    kind = HEAD_KIND[method]
    target = _config(Path(model_dir))
    fits = [
        head
        for head in shipped_heads(kind)
        if head.name not in ALTERNATIVES
        and all(_config(head).get(k) == target.get(k) for k in ("vocab_size", "hidden_size"))
    ]
    if len(fits) > 1:
        from minieagle.checkpoint import target_fingerprint

        fingerprint = target_fingerprint(model_dir)
        same = [h for h in fits if _config(h).get("minieagle_target_fingerprint") == fingerprint]
        fits = same or fits
    if len(fits) > 1:
        name = Path(model_dir).resolve().name
        same = [h for h in fits if Path(_config(h).get("minieagle_target", "")).name == name]
        fits = same or fits
    return fits[0] if fits else SMALL_HEADS[kind]


# ---------------------------------------------------------------------------- --method auto

FASTEST_FILE = PRETRAINED / "fastest.json"  # the method measured fastest per shipped target
FASTEST_FORMAT = "minieagle-fastest-methods"


def fastest_method(model_dir, greedy: bool, device: str = "cpu") -> dict:
    """What `--method auto` decodes `model_dir` with: the entry of FASTEST_FILE for this target,
    device and setting ("T=0" when greedy, else "T>0", measured at T = 1): {"method", "flags"
    (the CLI flags it was measured with, e.g. {"tree": "chain"}), "speedup", "range", "source",
    "device", ...}. The entry whose name is the directory's name and whose weights file has the
    recorded size is taken as it is (hashing SmolLM2's 540 MB would add most of a second to every
    command); otherwise the weights' fingerprint finds it (a copy elsewhere), and failing that
    the name. An entry without "device" was measured on the CPU. A target measured on the CPU but
    not on `device` gets its CPU entry, with a "note" saying so (the fastest method differs
    between them: on a GPU verification is nearly free). A target measured nowhere gets
    {"method": "vanilla", "why": ...}. A method is recorded only where its whole [min..max]
    speedup over vanilla, measured side by side, was above 1."""
    data = read_fastest_file()
    setting = "T=0" if greedy else "T>0"
    entries = _target_entries(model_dir, [e for e in data["targets"] if setting in e])
    by_device = {}
    for entry in entries:  # the first of each device, as the file lists them
        by_device.setdefault(entry.get("device", "cpu"), entry)
    if device in by_device:
        found = by_device[device]
        return {"target": found["name"], "setting": setting, "device": device, **found[setting]}
    if "cpu" in by_device:
        found = by_device["cpu"]
        return {"target": found["name"], "setting": setting, "device": "cpu", **found[setting],
                "note": f"measured on the CPU: {FASTEST_FILE.name} has no {device} "
                f"measurement of {found['name']}"}  # fmt: skip
    name = Path(model_dir).resolve().name
    return {"method": "vanilla", "setting": setting,
            "why": f"no measurement of {name} in {FASTEST_FILE.name}"}  # fmt: skip


def read_fastest_file() -> dict:
    """FASTEST_FILE, checked to be one."""
    from minieagle.checkpoint import read_config_json

    data = read_config_json(FASTEST_FILE, fix_missing="reinstall minieagle")
    if data.get("format") != FASTEST_FORMAT or not isinstance(data.get("targets"), list):
        raise InvalidInputError(
            f"{FASTEST_FILE} is not a {FASTEST_FORMAT} file; reinstall minieagle"
        )
    return data


def _target_entries(model_dir, entries: list) -> list:
    """The entries of `entries` (any device) for the target in `model_dir`: by name and weights'
    size, then by fingerprint (hashed at most once), then by name (`fastest_method`)."""
    from minieagle.checkpoint import WEIGHTS_FILE, target_fingerprint

    weights = Path(model_dir) / WEIGHTS_FILE  # a missing target: its loader explains
    size = weights.stat().st_size if weights.is_file() else None
    name = Path(model_dir).resolve().name
    same_name = [entry for entry in entries if entry.get("name") == name]
    found = [entry for entry in same_name if entry.get("weights_bytes") == size]
    if not found and size is not None:
        fingerprint = target_fingerprint(model_dir)
        found = [entry for entry in entries if entry.get("fingerprint") == fingerprint]
    return found or same_name
