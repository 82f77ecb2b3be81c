"""The `minieagle` command: demo, generate, chat, train, distill, bench, calibrate, import,
export, assignment.

One module per command (`minieagle.cli.generate` holds generate and chat, `export_import` both
directions); `flags` holds what several commands share (default paths, flag types and groups),
`methods` what --method builds. This module assembles the parser and runs a command, turning
every error minieagle explains into one `error: ...` line (docs/cli.md, exit codes in
`minieagle.errors`).
"""

from __future__ import annotations

import argparse
import os
import sys

from minieagle.cli.flags import check_method_flags
from minieagle.errors import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, MinieagleError
from minieagle.shipped import (  # the shipped checkpoints, which tests and notebooks use
    DEFAULT_DRAFT_MODEL,
    DEFAULT_EAGLE3_HEAD,
    DEFAULT_HEAD,
    DEFAULT_MEDUSA_HEAD,
    DEFAULT_MODEL,
    PRETRAINED,
)

__all__ = [
    "DEFAULT_DRAFT_MODEL",
    "DEFAULT_EAGLE3_HEAD",
    "DEFAULT_HEAD",
    "DEFAULT_MEDUSA_HEAD",
    "DEFAULT_MODEL",
    "PRETRAINED",
    "build_parser",
    "check_method_flags",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    """The `minieagle` parser: one subparser per command, added by the command's module."""
    from minieagle.cli import (
        assignment,
        bench,
        calibrate,
        demo,
        distill,
        export_import,
        generate,
        train,
    )

    parser = argparse.ArgumentParser(
        prog="minieagle",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 success; 2 an error minieagle explains (bad input, missing or "
        "unreadable file, diverged training, out of memory); 1 a bug (please report the "
        "traceback); 130 interrupted; 141 stdout's reader went away (| head)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    generate.add_parsers(sub)  # generate, chat
    demo.add_parser(sub)
    train.add_parser(sub)
    distill.add_parser(sub)
    bench.add_parser(sub)
    calibrate.add_parser(sub)
    export_import.add_parsers(sub)  # export, import
    assignment.add_parser(sub)
    return parser


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of what is still
    buffered cannot fail again (the recipe of Python's `signal` documentation, "Note on
    SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (a test captures it)
        pass


def main(argv=None) -> int:
    """Run the command; returns its exit code (see `minieagle.errors`). Errors minieagle
    explains print one line, `error: ...`; only a bug prints a traceback."""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exit:  # argparse: --help (0) or a usage error, already printed (2)
            code = exit.code
        else:
            code = args.func(args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's last flush
        return code
    except BrokenPipeError:  # stdout's reader went away: `minieagle ... | head`
        _discard_stdout()
        return EXIT_BROKEN_PIPE
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
