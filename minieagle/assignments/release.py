"""`minieagle assignment release`: the student edition that a student installs.

It is a pip-installable folder: pyproject.toml, a README with the install, work and submit steps,
the package as `edition.package_copy` writes it (each released handout with its Points table,
hidden tests included, written here where the hidden tests are known) and the notebooks, every
region of the released assignments stubbed. nbgrader's `release` step is the model; see
docs/assignments.md.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from minieagle.assignments import grader, solutions
from minieagle.assignments.edition import REPOSITORY, package_copy

_README = """# minieagle: student edition

This folder is the minieagle library as handed out for the course. The parts you write are
stubbed: each raises `NotImplementedError("<assignment>: this part is yours to write")`.
Assignments in this edition: {names}.

## Install (once)

```bash
python -m venv .venv && . .venv/bin/activate     # any Python >= 3.10
pip install -e . pytest                           # from this folder
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
    `package_copy`; each released handout gains its Points table, hidden tests included) and the
    notebooks, each region of `names` stubbed. Returns `out`."""
    names, out = tuple(names), Path(out)
    if out.exists():
        raise FileExistsError(
            f"{out} already exists; pass a new folder, so that no earlier release is mixed in"
        )
    handouts = {name: grader.handout_text(name) for name in names}  # their Points: all tests
    package = package_copy(out, names)
    for name, handout in handouts.items():
        (package / "assignments" / name / "handout.md").write_text(handout, encoding="utf-8")
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
