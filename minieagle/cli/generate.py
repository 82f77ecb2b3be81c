"""`minieagle generate` (continue a prompt) and `minieagle chat` (talk through the model's chat
template), each with one --method."""

from __future__ import annotations

import sys

from minieagle.cli.flags import check_method_flags, generation_flags
from minieagle.cli.methods import (
    describe_auto_method,
    drafter_factory,
    load_target,
    resolve_auto_method,
    sampling_params,
)
from minieagle.errors import InvalidInputError


def cmd_generate(args) -> int:
    from minieagle.generate import generate

    chosen = resolve_auto_method(args)
    check_method_flags(args)
    target, config, tokenizer = load_target(args.model, args.device)
    drafter = drafter_factory(args, config, target, tokenizer)()
    prompt_ids = tokenizer.encode(args.prompt, add_bos=True)
    result = generate(
        target,
        config,
        prompt_ids,
        drafter=drafter,
        max_new_tokens=args.max_new_tokens,
        sampling=sampling_params(args),
        seed=args.seed,
        verification=args.verification,
    )
    print(args.prompt + tokenizer.decode(result.tokens))
    if args.stats:
        print(
            f"\n[{args.method}: {len(result.tokens)} tokens, {result.ms_per_token:.2f} ms/token, "
            f"tau {result.tau:.2f} tokens per target forward, stop: {result.stop_reason}]",
            file=sys.stderr,
        )
        print_drafter_lines(drafter, chosen)
    return 0


def print_drafter_lines(drafter, chosen: dict | None) -> None:
    """--stats: the method --method auto chose (`chosen`, None when one was named) and how the
    drafter drafted (the tree sizing chose; the dynamic tree's options)."""
    if chosen is not None:
        print(f"[{describe_auto_method(chosen)}]", file=sys.stderr)
    if getattr(drafter, "sizing", None) is not None:
        cut = ""
        if getattr(drafter, "expand_threshold", 0) > 0:  # the sizer predicts whole trees
            cut = (f"; sized for trees grown in full: --expand-threshold "
                   f"{drafter.expand_threshold:g} may draft fewer nodes than it expected, and "
                   "its expected tau and speedup do not count the cut")  # fmt: skip
        print(f"[{drafter.sizing.describe()}{cut}]", file=sys.stderr)
    if hasattr(drafter, "active_calibration"):  # the dynamic tree's options as decoded
        print(f"[{tree_options_line(drafter)}]", file=sys.stderr)


def tree_options_line(drafter) -> str:
    """How a dynamic-tree drafter decoded: its tree and its scores (and the map's setting)."""
    tree = "sampled tree" if drafter.tree_sampled else "top-k tree"
    from minieagle.calibration import TemperatureScores

    used = drafter.active_calibration
    if used is None:
        scores = "raw scores"
    elif isinstance(used, TemperatureScores):
        scores = f"temperature scores, t = {used.temperature:g} ({used.setting})"
    else:
        scores = f"calibrated scores ({used.setting} map)"
    threshold = drafter.expand_threshold
    cut = f", expanded from value {threshold:g}" if threshold > 0 else ""
    return f"dynamic tree: {tree}, {scores}{cut}"


def cmd_chat(args) -> int:
    """A conversation: each user turn (one --prompt, or stdin lines) answered with --method,
    the reply streamed to stdout as its tokens are accepted."""
    from minieagle.chat import load_chat_template
    from minieagle.conversation import Chat

    chosen = resolve_auto_method(args)
    check_method_flags(args)
    if args.prompt is None and (sys.stdin is None or sys.stdin.closed):
        raise InvalidInputError(
            "stdin is closed, so there is no user turn to answer; pipe the turns in, one per "
            "line, or pass one with --prompt TEXT"
        )
    target, config, tokenizer = load_target(args.model, args.device)
    template = load_chat_template(args.model, tokenizer, args.template)
    chat = Chat(
        target,
        config,
        tokenizer,
        template,
        system=args.system,
        make_drafter=drafter_factory(args, config, target, tokenizer),
        sampling=sampling_params(args),
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
            print_drafter_lines(chat.last_drafter, chosen)
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt with the target model")
    p.add_argument("prompt")
    generation_flags(p)
    p.add_argument(
        "--verification",
        choices=["block", "token"],
        default="block",
        help="how drafts are judged: block (default: every drafted path judged as one block, "
        "leaves first; on a chain never fewer tokens accepted than token by token, on the "
        "tiny target's heads' trees more, measured) or token (every draft token by token from the "
        "root); both lossless (docs/lossless.md)",
    )
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
