"""The student edition: the library with the released assignments' regions stubbed, and no
instructor material. Also the grading copy that a submission is graded in.

One source, two editions (nbgrader's `release` step, docs/assignments.md):

- the **instructor's copy** is the repository: every region holds its solution, and each
  assignment folder has an `instructor/` folder with its hidden tests (`test_hidden.py`), worked
  answers (`answers.md`) and planted bugs (`planted_bugs.py`), beside `notebook_answers/`; the
  wheel leaves them out too (pyproject.toml), so only a clone of the repository holds them;
- the **student edition** (`release(out, names)`) is a pip-installable folder: the package with
  every region of the released assignments replaced by its stub (the marker lines stay around the
  stub, so `minieagle assignment make` works in it), the notebooks with their solving cells
  stubbed the same way, and none of the instructor material above.

`package_copy` writes the package alone; the grader uses it to build, for each submission, a
student edition of one assignment with the submitted files in place (see `isolation.py`).
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


_README = """# minieagle: student edition

This folder is the minieagle library as handed out for the course. The parts you write are
stubbed: each raises `NotImplementedError("<assignment>: this part is yours to write")`.
Assignments in this edition: {names}.

## Install (once)

```bash
python -m venv .venv && . .venv/bin/activate     # any Python >= 3.10
pip install -e ".[dev]"                           # from this folder
```

## Work on an assignment

```bash
minieagle assignment list                          # the assignments and their titles
minieagle assignment make verifier hw-verifier     # your folder: README.md (the handout),
cd hw-verifier                                     #   submission/, test_public.py, ANSWERS.md
python -m pytest                                   # the public tests, against submission/
minieagle assignment grade verifier .              # a score per public test, as the grader gives it
```

Write your code in `submission/` only, and your answers to the written questions in `ANSWERS.md`.
The handout (`README.md` in your folder) says what each function must do and how each part is
graded. The instructor's grader runs the public tests and more.

## Submit

Hand in your assignment folder's `submission/` and `ANSWERS.md` (for example as a zip of the
folder), as your course says. The grader takes only the files listed under "Your files" in the
handout: nothing else you hand in is run.

## Notebooks

`notebooks/` holds the course notebooks (jupytext `.py` files; `pip install -e ".[notebooks]"`,
then `jupytext --to ipynb notebooks/*.py`). Cells that rebuild a released assignment by hand are
exercises here too; they raise `NotImplementedError` until you write them.
"""


def release(out: str | Path, names: Iterable[str]) -> Path:
    """Write the student edition of assignments `names` into the new folder `out`.

    It holds pyproject.toml, a README with the install, work and submit steps, the package (see
    `package_copy`) and the notebooks, each region of `names` stubbed. Returns `out`."""
    names, out = tuple(names), Path(out)
    if out.exists():
        raise FileExistsError(
            f"{out} already exists; pass a new folder, so that no earlier release is mixed in"
        )
    package_copy(out, names)
    shutil.copyfile(REPOSITORY / "pyproject.toml", out / "pyproject.toml")
    (out / "README.md").write_text(_README.format(names=", ".join(names)), encoding="utf-8")
    notebooks = REPOSITORY / "notebooks"
    if notebooks.is_dir():
        (out / "notebooks").mkdir()
        for path in sorted(notebooks.glob("*.py")):
            source = path.read_text(encoding="utf-8")
            (out / "notebooks" / path.name).write_text(
                solutions.edition(source, names, f"notebooks/{path.name}"), encoding="utf-8"
            )
    return out
