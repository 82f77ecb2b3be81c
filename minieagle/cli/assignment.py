"""`minieagle assignment`: list the course assignments, make a student folder, grade a
submission, check the graders (docs/assignments.md)."""

from __future__ import annotations

import json
from pathlib import Path

from minieagle.errors import InvalidInputError


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
            print(f"wrote {folder}: README.md (the handout), submission/, test_public.py")
            return 0
        report = grader.grade(args.name, args.folder)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        raise InvalidInputError(str(error)) from error
    print(report.text())
    if args.json:
        Path(args.json).write_text(json.dumps(report.results, indent=1), encoding="utf-8")
    return 0


def add_parser(sub) -> None:
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
