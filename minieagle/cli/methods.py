"""What --method builds, for every command that decodes (generate, chat, demo, bench): the
target loaded onto its device, the sampling setting, the head directory, and a factory of fresh
drafters, validated before the first prompt."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from minieagle.cli.flags import (
    DEFAULT_CHAIN_DEPTH,
    DEFAULT_DRAFT_MODEL,
    DEFAULT_GAMMA,
)
from minieagle.errors import InvalidInputError


def load_target(model_dir: str | Path, device: str = "cpu"):
    """(target, config, tokenizer) of a checkpoint: target the `inference.prepare` view of its
    parameters (prepared once per command; `.params` holds the HF dict) on `device` ("cpu" or
    "gpu")."""
    from minieagle import inference
    from minieagle.backend import device_module, put
    from minieagle.checkpoint import load_checkpoint

    xp = device_module(device)  # fails before the weights are read when CuPy is missing
    if sys.stderr.isatty():  # a person waits: say what takes these seconds
        print(f"[loading {model_dir}]", file=sys.stderr, flush=True)
    params, config, tokenizer = load_checkpoint(model_dir)
    if tokenizer is None:
        raise InvalidInputError(
            f"{model_dir} has no tokenizer.json, so a prompt cannot be encoded; copy the "
            "tokenizer.json the model was trained with into that directory"
        )
    return inference.prepare(put(params, xp), config), config, tokenizer


def sampling_params(args):
    from minieagle.sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def resolve_auto_method(args) -> dict | None:
    """--method auto: set args.method, and the flags it was measured with, to the method
    measured fastest for args.model in this sampling setting (`shipped.fastest_method`).
    Returns that record (None when a method was named). Method flags need a named method:
    they would otherwise apply to whichever method the measurements chose."""
    from minieagle.cli.flags import METHOD_FLAGS
    from minieagle.shipped import fastest_method

    if args.method != "auto":
        return None
    for name, (flag, methods) in METHOD_FLAGS.items():
        if getattr(args, name, None) is not None:
            raise InvalidInputError(
                f"{flag} applies to --method {' or '.join(methods)}; the default, --method "
                f"auto, picks the method measured fastest for the model, so pass --method "
                f"{methods[0]} with {flag}, or drop {flag}"
            )
    chosen = fastest_method(args.model, greedy=sampling_params(args).greedy,
                            device=getattr(args, "device", "cpu"))  # fmt: skip
    args.method = chosen["method"]
    for name, value in chosen.get("flags", {}).items():
        setattr(args, name, value)
    return chosen


def describe_auto_method(chosen: dict) -> str:
    """The --stats line for the method --method auto chose."""
    if "speedup" not in chosen:
        return f"--method auto: {chosen['method']} ({chosen['why']})"
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in chosen.get("flags", {}).items())
    low, high = chosen["range"]
    where = " on a GPU" if chosen.get("device") == "gpu" else ""
    return (
        f"--method auto: {chosen['method']}{' ' + flags if flags else ''}, measured fastest for "
        f"{chosen['target']}{where} at {chosen['setting']}: {chosen['speedup']:.2f}x vanilla's "
        f"tokens/s [{low:.2f}..{high:.2f}] ({chosen['source']})"
        + (f"; {chosen['note']}" if "note" in chosen else "")
    )


def head_dir(args) -> Path:
    """The head directory for args.method: --head (generate), or in bench and demo, which run
    every method, --head for the EAGLE-1 head and --eagle3-head for the EAGLE-3 head. A value
    is a directory or a shipped head's name; none given, the shipped head trained for
    args.model (`minieagle.shipped.default_head`)."""
    from minieagle.shipped import default_head, resolve_head

    flag = "--head"
    if args.method == "eagle3" and hasattr(args, "eagle3_head"):
        chosen, flag = args.eagle3_head, "--eagle3-head"
    elif args.method == "medusa" and hasattr(args, "eagle3_head"):  # bench and demo
        chosen, flag = getattr(args, "medusa_head", None), "--medusa-head"
    else:
        chosen = args.head
    if chosen:
        return resolve_head(chosen, flag)
    return default_head(args.method, args.model)


def _sizer(args, target, config, head, tokenizer, calibration=None, sampled_tree=None):
    """sampling -> `minieagle.sizing.Sizing` for args.method's head on this machine
    (`sizing.make_sizer`: measured once, then cached). --depth and --tree-top-k, when given,
    constrain the search; calibration and sampled_tree are the drafter's (`tree_options`)."""
    from minieagle import sizing
    from minieagle.checkpoint import target_fingerprint

    dynamic = args.method in ("eagle2", "eagle3")
    fixed = dict(depth=args.depth, top_k=args.tree_top_k) if dynamic else {}
    try:
        sizing.check_fixed_sizes(**fixed)  # before anything is measured
    except InvalidInputError as error:
        raise InvalidInputError(in_flag_words(str(error))) from None
    identity = f"{target_fingerprint(args.model)}|{target_fingerprint(head_dir(args))}"
    return sizing.make_sizer(
        target, config, head, tokenizer, identity=identity, chain_only=not dynamic,
        sampled_tree=sampled_tree, calibration=calibration, **fixed,
    )  # fmt: skip


def drafter_factory(args, config, target, tokenizer=None):
    """A function returning a fresh drafter for args.method (None for vanilla); target is the
    target's prepared view (`_load`; EAGLE heads read its embedding and LM head). Validates
    everything first, and warns when a head or draft model records another target than
    args.model. tokenizer: for automatic sizing (--total-tokens auto, --tree auto). The
    dynamic tree's defaults (calibration, sampled tree) are `build_drafter`'s, decided by
    `drafters.tree_options` from --calibration (none given: "auto") and --sampled-tree."""
    from minieagle import inference
    from minieagle.backend import array_module, put
    from minieagle.checkpoint import check_trained_for, load_checkpoint
    from minieagle.drafters import build_drafter, load_draft_head, tree_options

    target = inference.prepare(target, config)
    params = target.params
    xp = array_module(params["model.embed_tokens.weight"])  # heads go where the target is
    draft_model = head = None
    depth = getattr(args, "depth", None)
    chain_depth = DEFAULT_CHAIN_DEPTH if depth is None else depth
    tree = {"chain": f"chain:{chain_depth}", "auto": "auto"}.get(getattr(args, "tree", None))
    tree = tree or "default"
    if args.method in ("eagle1", "eagle2", "eagle3", "medusa"):
        head = load_draft_head(args.method, head_dir(args), (target, config), target_dir=args.model)
    if args.method == "medusa" and tree.startswith("chain:") and depth is None:
        tree = f"chain:{head[1].num_heads}"  # one level per head
    if args.method == "draft-model":
        draft_dir = args.draft_model or DEFAULT_DRAFT_MODEL
        draft_params, draft_config, _ = load_checkpoint(draft_dir, with_tokenizer=False)
        check_trained_for(draft_dir, args.model, kind="draft model")
        draft_model = (put(draft_params, xp), draft_config)
    method = args.method
    gamma = DEFAULT_GAMMA if getattr(args, "gamma", None) is None else args.gamma
    target = (target, config)
    kwargs = dict(draft_model=draft_model, gamma=gamma, target=target, head=head, tree=tree)
    if method == "pld":
        for name in ("prompt_lookup_num_tokens", "max_matching_ngram_size"):
            kwargs[name] = getattr(args, name, None)
    calibration = sampled_tree = None
    if method in ("eagle2", "eagle3"):
        given = getattr(args, "calibration", None)
        try:
            calibration, sampled_tree = tree_options(
                "auto" if given is None else given,
                getattr(args, "sampled_tree", None),
                head_dir(args),
            )
        except InvalidInputError as error:  # a bad file (a corrupt shipped map names itself)
            raise InvalidInputError(
                str(error) if given is None else f"--calibration {given}: {error}"
            ) from None
        kwargs.update(calibration=calibration, sampled_tree=sampled_tree)
        threshold = getattr(args, "expand_threshold", None)
        kwargs["expand_threshold"] = 0.0 if threshold is None else threshold
    auto = method in ("eagle2", "eagle3") and args.total_tokens in (None, "auto")
    if auto or (method == "eagle1" and tree == "auto"):
        if tokenizer is None:
            raise InvalidInputError("automatic sizing needs the target's tokenizer")
        kwargs["sizer"] = _sizer(args, target[0], config, head, tokenizer, calibration,
                                 sampled_tree)  # fmt: skip
    if method in ("eagle2", "eagle3"):
        total = None if auto else args.total_tokens
        kwargs.update(depth=depth, top_k=args.tree_top_k, total_tokens=total)
    try:
        build_drafter(method, **kwargs)  # validate now
    except InvalidInputError as error:
        raise InvalidInputError(in_flag_words(str(error))) from None
    return lambda: build_drafter(method, **kwargs)


# The drafters' parameters as the flags that set them, for messages (`in_flag_words`).
_FLAG_WORDS = (
    (re.compile(r"\btop_k=(\S)"), r"--tree-top-k \1"),
    (re.compile(r"\btop_k\b"), "--tree-top-k"),
    (re.compile(r"\btotal_tokens=(\S)"), r"--total-tokens \1"),
    (re.compile(r"\btotal_tokens\b"), "--total-tokens"),
    (re.compile(r"\bdepth=(\S)"), r"--depth \1"),
    (re.compile(r"\bdepth <="), "--depth <="),
    (re.compile(r"'chain:(\d+)'"), r"--depth \1"),
    (re.compile(r"\bgamma=(\S)"), r"--gamma \1"),
)


def in_flag_words(message: str) -> str:
    """A drafter's message with its parameters named as the flags that set them: "top_k=9
    exceeds total_tokens - 1" becomes "--tree-top-k 9 exceeds --total-tokens - 1"."""
    for pattern, flag in _FLAG_WORDS:
        message = pattern.sub(flag, message)
    return message
