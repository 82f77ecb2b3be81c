"""`minieagle assignment`: list the course assignments, release the student edition, make a
student folder, grade a submission, check the graders (docs/assignments.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from minieagle.errors import EXIT_ERROR, InvalidInputError


def cmd_assignment(args) -> int:
    """`minieagle assignment list | release --out DIR [--assignments A,B] | make NAME FOLDER |
    grade NAME FOLDER | check [NAME]`."""
    from minieagle.assignments import grader, release

    if args.action == "list":
        for name in grader.NAMES:
            print(f"{name:<14} {grader.get(name).title}")
        return 0
    if args.action == "release":  # instructors: the student edition, to hand out
        if not args.out:
            raise InvalidInputError(
                "`minieagle assignment release` needs --out DIR, the new folder of the student "
                "edition, e.g. `minieagle assignment release --out course-edition`"
            )
        names = _names(args.assignments, grader.NAMES)
        try:
            out = release.release(args.out, names)
        except FileExistsError as error:
            raise InvalidInputError(str(error)) from error
        print(f"wrote the student edition of {', '.join(names)} to {out}; students install it "
              f"with `pip install -e {out} pytest` (see {out / 'README.md'})")  # fmt: skip
        return 0
    if args.action == "check":  # instructors: reference, stub and planted bugs, as a table
        names = grader.NAMES if args.name in (None, "all") else (args.name,)
        try:
            for name in names:
                print(grader.check_table(name, grader.check(name)))
        except ValueError as error:
            raise InvalidInputError(str(error)) from error
        return 0
    if args.name is None or args.folder is None:
        raise InvalidInputError(
            f"`minieagle assignment {args.action}` needs NAME and FOLDER, e.g. "
            f"`minieagle assignment {args.action} verifier hw-verifier`"
        )
    try:
        if args.action == "make":
            folder = grader.make(args.name, args.folder)
            print(f"wrote {folder}: README.md (the handout), ANSWERS.md, submission/, "
                  "test_public.py")  # fmt: skip
            return 0
        report = grader.grade(args.name, args.folder)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        raise InvalidInputError(str(error)) from error
    print(report.text())
    if args.json:
        Path(args.json).write_text(json.dumps(report.results, indent=1), encoding="utf-8")
    if report.problem:  # the submission did not import, exited, crashed or ran over a limit
        print(f"error: grading stopped early: {report.problem}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def _names(text: str | None, known: tuple[str, ...]) -> tuple[str, ...]:
    """'verifier,eagle2_tree' (or None or 'all': every assignment) -> the names, checked."""
    if text in (None, "all"):
        return known
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise InvalidInputError(
            f"--assignments {text!r} names no assignment {', '.join(unknown)}; choose from "
            f"{', '.join(known)} (comma-separated) or all"
        )
    return names


def add_parser(sub) -> None:
    p = sub.add_parser(
        "assignment",
        help="course assignments: list them, release the student edition, make a student "
        "folder, grade a submission (docs/assignments.md)",
    )
    p.add_argument("action", choices=["list", "release", "make", "grade", "check"])
    p.add_argument(
        "name", nargs="?", help="the assignment (see `minieagle assignment list`; check: all)"
    )
    p.add_argument("folder", nargs="?", help="make: the new student folder; grade: a submission")
    p.add_argument("--json", help="grade: also write the per-test results to this JSON file")
    p.add_argument("--out", help="release: the new folder of the student edition")
    p.add_argument(
        "--assignments",
        help="release: the assignments handed out, comma-separated (default: all); their "
        "regions are stubbed in the edition",
    )
    p.set_defaults(func=cmd_assignment)
