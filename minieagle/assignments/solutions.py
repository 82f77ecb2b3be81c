"""Solution regions in the library's source, and the student stubs made from them.

A region is marked in a reference file like this (nbgrader's markers, plus the assignment's name):

    def residual(p, q, token):
        ### BEGIN SOLUTION verifier
        r = ...
        return r / r.sum()
        ### END SOLUTION

`stub(source, "verifier")` replaces each region of that assignment with a `# YOUR CODE HERE` line
and `raise NotImplementedError(...)` at the region's indentation, and drops the marker lines of
every other assignment's regions (their code stays). `reference(source)` drops all marker lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION(?: (?P<name>[a-z0-9_]+))?\s*$")
_END = re.compile(r"^\s*### END SOLUTION\s*$")


class MarkerError(ValueError):
    """Unbalanced, nested or unnamed solution markers."""


@dataclass(frozen=True)
class Region:
    """Lines begin..end (0-based, the marker lines included) of one assignment's solution."""

    name: str
    indent: str
    begin: int
    end: int


def regions(source: str, where: str = "<source>") -> list[Region]:
    """Every solution region of `source`, checked: named, balanced, not nested."""
    found, open_region = [], None
    for number, line in enumerate(source.splitlines()):
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if open_region is not None:
                raise MarkerError(
                    f"{where}:{number + 1}: BEGIN SOLUTION inside the region opened at line "
                    f"{open_region[2] + 1}; close that one with ### END SOLUTION first"
                )
            if not begin["name"]:
                raise MarkerError(
                    f"{where}:{number + 1}: BEGIN SOLUTION without an assignment name; write "
                    "'### BEGIN SOLUTION verifier' (the assignment it belongs to)"
                )
            open_region = (begin["name"], begin["indent"], number)
        elif end:
            if open_region is None:
                raise MarkerError(f"{where}:{number + 1}: END SOLUTION with no region open")
            found.append(Region(*open_region, number))
            open_region = None
    if open_region is not None:
        raise MarkerError(
            f"{where}:{open_region[2] + 1}: region '{open_region[0]}' is never closed; "
            "add ### END SOLUTION"
        )
    return found


def stub(source: str, name: str, where: str = "<source>", *, keep_markers: bool = False) -> str:
    """`source` with assignment `name`'s regions replaced by a NotImplementedError stub.

    The marker lines of other assignments' regions are dropped (their code stays). With
    `keep_markers`, the stubbed regions keep their own marker lines around the stub, so the result
    can be stubbed again: that is the library of a student edition (see `release.py`)."""
    return edition(source, (name,), where, keep_markers=keep_markers)


def edition(source: str, names, where: str = "<source>", *, keep_markers: bool = False) -> str:
    """`source` with the regions of every assignment in `names` stubbed (see `stub`)."""
    lines = source.splitlines()
    ours = {r.begin: r for r in regions(source, where) if r.name in names}
    out, skip_to = [], -1
    for number, line in enumerate(lines):
        if number <= skip_to:
            continue
        if number in ours:
            region = ours[number]
            if keep_markers:
                out.append(line)
            out.append(f"{region.indent}# YOUR CODE HERE ({region.name}: see README.md)")
            out.append(
                f'{region.indent}raise NotImplementedError("{region.name}: this part is yours to '
                'write")'
            )
            if keep_markers:
                out.append(lines[region.end])
            skip_to = region.end
        elif not (_BEGIN.match(line) or _END.match(line)):
            out.append(line)
    return "\n".join(out) + "\n"


def reference(source: str, where: str = "<source>") -> str:
    """`source` without its marker lines: the reference solution, as a student would hand it in."""
    regions(source, where)  # check the markers
    kept = [line for line in source.splitlines() if not (_BEGIN.match(line) or _END.match(line))]
    return "\n".join(kept) + "\n"


def solution_text(source: str, name: str, where: str = "<source>") -> list[str]:
    """The stripped lines inside `name`'s regions: what a student folder must not hold."""
    lines = source.splitlines()
    return [
        lines[i].strip()
        for r in regions(source, where)
        if r.name == name
        for i in range(r.begin + 1, r.end)
        if lines[i].strip()
    ]
