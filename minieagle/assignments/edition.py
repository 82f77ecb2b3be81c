"""The package as a student edition: the released assignments' regions stubbed, and no
instructor material. The grading copy a submission is graded in is one, too.

One source, two editions (nbgrader's `release` step, docs/assignments.md):

- the **instructor's copy** is the repository: every region holds its solution, and each
  assignment folder has an `instructor/` folder with its hidden tests (`test_hidden.py`), worked
  answers (`answers.md`) and planted bugs (`planted_bugs.py`), beside `notebook_answers/`; the
  wheel leaves them out too (pyproject.toml), so only a clone of the repository holds them;
- the **student edition** (`release(out, names)`) is a pip-installable folder: the package with
  every region of the released assignments replaced by its stub (the marker lines stay around the
  stub, so `minieagle assignment make` works in it), the notebooks with their solving cells
  stubbed the same way, and none of the instructor material above.

`package_copy` writes the package; `release.py` adds what a student installs around it, and the
grader builds with it, for each submission, a student edition of one assignment with the
submitted files in place (see `isolation.py`).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from minieagle.assignments import solutions

LIBRARY = Path(__file__).resolve().parent.parent
REPOSITORY = LIBRARY.parent

# package-relative paths (fnmatch patterns) that only the instructor's copy holds
INSTRUCTOR_ONLY = (
    "assignments/*/instructor/*",
    "assignments/notebook_answers/*",
)
_SKIPPED = ("__pycache__", "*.pyc", "*.egg-info")


def instructor_only(relative: str) -> bool:
    """Whether the package-relative path `relative` (such as
    'assignments/verifier/instructor/answers.md') is instructor material, left out of every
    student edition and grading copy."""
    return any(fnmatch.fnmatch(relative, pattern) for pattern in INSTRUCTOR_ONLY)


def _files(root: Path) -> Iterable[tuple[Path, str]]:
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        relative = "/".join(parts)
        if path.is_file() and not any(fnmatch.fnmatch(p, skip) for p in parts for skip in _SKIPPED):
            yield path, relative


def package_copy(
    dest: str | Path,
    names: Iterable[str],
    *,
    replace: dict[str, str] | None = None,
    link_data: bool = False,
) -> Path:
    """Write the minieagle package to `dest/minieagle` as a student edition of `names`.

    Every region of an assignment in `names` is stubbed (markers kept around the stub); other
    regions keep their code (markers dropped). `replace` maps package-relative files to the
    source written instead (a submission). `link_data` symlinks each non-Python file instead of
    copying it (the grading copy: data files hold no solution and are large)."""
    names, replace = tuple(names), dict(replace or {})
    package = Path(dest) / "minieagle"
    for path, relative in _files(LIBRARY):
        if instructor_only(relative):
            continue
        target = package / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative in replace:
            target.write_text(replace.pop(relative), encoding="utf-8")
        elif path.suffix == ".py":
            source = path.read_text(encoding="utf-8")
            target.write_text(
                solutions.edition(source, names, f"minieagle/{relative}", keep_markers=True),
                encoding="utf-8",
            )
        elif link_data:
            os.symlink(path, target)
        else:
            shutil.copyfile(path, target)
    if replace:
        raise FileNotFoundError(
            f"{', '.join(sorted(replace))} is not a file of the package; a submission replaces "
            "library files only (see `minieagle assignment list`)"
        )
    return package
