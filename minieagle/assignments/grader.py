"""Make a student folder for an assignment, and grade a submission against the hidden tests.

Each assignment is a folder next to this file, `minieagle/assignments/<name>/`, holding:

    __init__.py      TITLE, FILES (library files with its solution regions), PLANTED_BUGS
    handout.md       what to build, in which order, and the written questions
    test_public.py   tests the student gets
    instructor/      what only the instructor's copy holds (no wheel, no student edition):
      test_hidden.py   tests only the grader runs
      answers.md       worked answers to the written questions
      planted_bugs.py  PLANTED_BUGS, deliberate mistakes that `check` grades

A student folder (`make`) holds README.md (the handout), ANSWERS.md (a template for the written
questions), `submission/` (the assignment's files with its regions stubbed), `test_public.py`, and
a conftest.py that makes `import minieagle.<module>` load the files in `submission/`. `grade` runs
the public and hidden tests in a process of their own, each graded function forwarded to the
submission in a sandboxed one (`isolation.py`); the result is a `Report` with a score per test.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from minieagle.assignments import isolation, solutions

HERE = Path(__file__).resolve().parent
LIBRARY = HERE.parent
NAMES = ("decoder_layer", "verifier", "draft_model", "eagle1_head", "eagle2_tree", "eagle3_ttt")

_CONFTEST = '''"""Makes `import minieagle.<module>` load the files in submission/."""

from pathlib import Path

from minieagle.assignments.overlay import install

install(Path(__file__).parent / "submission")
pytest_plugins = ["minieagle.assignments.scoring"]
'''
_PYTEST_INI = "[pytest]\naddopts = -q -p no:cacheprovider\n"


@dataclass(frozen=True)
class PlantedBug:
    """A deliberate mistake, made by replacing `old` with `new` once in the reference `file`.

    `hint`: words the grader's report must contain for this bug (what a student would be told)."""

    name: str
    file: str
    old: str
    new: str
    hint: str


@dataclass(frozen=True)
class Assignment:
    name: str
    title: str
    files: tuple[str, ...]
    planted_bugs: tuple[PlantedBug, ...]

    @property
    def folder(self) -> Path:
        return HERE / self.name

    def reference_sources(self) -> dict[str, str]:
        """{file: the library's file with its markers removed}: the solution, ready to grade."""
        return {f: solutions.reference(_read(f), f) for f in self.files}

    def stub_sources(self) -> dict[str, str]:
        """{file: the library's file with this assignment's regions stubbed}."""
        return {f: solutions.stub(_read(f), self.name, f) for f in self.files}

    def bug_sources(self, bug: PlantedBug) -> dict[str, str]:
        """The reference with `bug` planted."""
        sources = self.reference_sources()
        text = sources[bug.file]
        if text.count(bug.old) != 1:
            raise ValueError(
                f"planted bug {bug.name!r}: {bug.old!r} occurs {text.count(bug.old)} times in "
                f"{bug.file}; it must occur exactly once (widen it with surrounding code)"
            )
        sources[bug.file] = text.replace(bug.old, bug.new)
        return sources


def _read(file: str) -> str:
    return (LIBRARY / file).read_text(encoding="utf-8")


def get(name: str) -> Assignment:
    """The assignment called `name` (one of NAMES)."""
    if name not in NAMES:
        raise ValueError(
            f"no assignment called {name!r}; choose one of {', '.join(NAMES)} "
            "(`minieagle assignment list`)"
        )
    spec = importlib.import_module(f"minieagle.assignments.{name}")
    bugs = ()
    if (HERE / name / "instructor" / "planted_bugs.py").exists():  # the instructor's copy only
        planted = importlib.import_module(f"minieagle.assignments.{name}.instructor.planted_bugs")
        bugs = planted.PLANTED_BUGS
    return Assignment(name, spec.TITLE, tuple(spec.FILES), tuple(bugs))


def _write_sources(folder: Path, sources: dict[str, str]) -> None:
    for file, text in sources.items():
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def make(name: str, out: str | Path) -> Path:
    """Write the student folder for assignment `name` into `out` (which must not exist yet)."""
    assignment = get(name)
    out = Path(out)
    if out.exists():
        raise FileExistsError(
            f"{out} already exists; pass a new folder so nothing a student wrote is overwritten"
        )
    out.mkdir(parents=True)
    _write_sources(out / "submission", assignment.stub_sources())
    handout = handout_text(name)
    files = "\n".join(
        f"- `submission/{f}` (the library's `minieagle/{f}`)" for f in assignment.files
    )
    (out / "README.md").write_text(
        f"{handout.rstrip()}\n\n## Your files\n\n{files}\n\n"
        + _STEPS.format(name=name, folder=out.name),
        encoding="utf-8",
    )
    (out / "ANSWERS.md").write_text(answers_template(assignment.title, handout), encoding="utf-8")
    shutil.copy(assignment.folder / "test_public.py", out / "test_public.py")
    (out / "conftest.py").write_text(_CONFTEST, encoding="utf-8")
    (out / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    return out


_STEPS = """## Install, work, check and submit

1. Install the course's student edition of minieagle once (in its folder:
   `pip install -e . pytest`; its README says more). This folder was made by
   `minieagle assignment make {name} {folder}`.
2. Write your code in `submission/` only. Each `raise NotImplementedError` marks a part to write;
   keep the files' names and the functions' signatures.
3. `python -m pytest` in this folder runs the public tests against your files (they import your
   files in place of minieagle's own).
4. `minieagle assignment grade {name} .` grades your files as the grader does, on the tests you
   have; the instructor's grader runs the hidden tests too (see Points).
5. Answer the written questions in `ANSWERS.md`.
6. Hand in `submission/` and `ANSWERS.md`, for example `zip -r {name}.zip submission ANSWERS.md`,
   as your course says. Only the files listed under "Your files" are graded.
"""


def handout_text(name: str) -> str:
    """The handout of assignment `name` with its Points section: every test, its points and what
    it checks. A student edition's handout has the section already (written by `release`, where
    the hidden tests are known); elsewhere it is made from the tests this copy holds."""
    handout = (get(name).folder / "handout.md").read_text(encoding="utf-8").rstrip() + "\n"
    if "\n## Points\n" in handout:
        return handout
    return f"{handout}\n{points_table(name)}"


def points_table(name: str) -> str:
    """'## Points' and a table of every test of `name` (public and hidden): points, test, what
    it checks, and whether the student has it."""
    tests = isolation.expected_tests(test_sources(name))
    rows = [
        f"| {t['points']} | `{t['test']}` | {t['doc'].replace('|', '/')} | "
        f"{'public' if t['id'].startswith('test_public.py') else 'hidden'} |"
        for t in tests
    ]
    total = sum(t["points"] for t in tests)
    public = sum(t["points"] for t in tests if t["id"].startswith("test_public.py"))
    return (
        f"## Points\n\n{total} points in all; the public tests (in `test_public.py`) carry "
        f"{public}, the hidden tests the rest. A test scores all its points or none.\n\n"
        "| points | test | what it checks | |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )


def answers_template(title: str, handout: str) -> str:
    """ANSWERS.md for a student folder: each numbered written question of the handout, with room
    for the answer."""
    section = handout.split("## Written questions", 1)[-1].split("\n## ", 1)[0]
    questions = re.findall(r"^(\d+)\. (.+?)(?=^\d+\. |\Z)", section, flags=re.M | re.S)
    parts = [f"# Written answers: {title}\n", "Name:\n"]
    for number, text in questions:
        quoted = "\n".join(f"> {line.strip()}" for line in text.strip().splitlines())
        parts.append(f"## Question {number}\n\n{quoted}\n\nYour answer:\n")
    return "\n".join(parts)


@dataclass
class Report:
    """The graded tests of one submission."""

    assignment: str
    results: list[dict] = field(default_factory=list)
    log: str = ""
    problem: str | None = None  # why grading stopped early (import failed, exit, time limit)

    @property
    def score(self) -> int:
        return sum(r["points"] for r in self.results if r["passed"])

    @property
    def total(self) -> int:
        return sum(r["points"] for r in self.results)

    def failures(self) -> list[dict]:
        return [r for r in self.results if not r["passed"]]

    def text(self) -> str:
        """A readable report: one line per test, then why each failed test failed."""
        lines = [f"{self.assignment}: {self.score} / {self.total} points", ""]
        if self.problem:
            lines += [f"Grading stopped early: {self.problem}", ""]
        width = max((len(r["test"]) for r in self.results), default=10)
        for r in self.results:
            got = r["points"] if r["passed"] else 0
            mark = "pass" if r["passed"] else "FAIL"
            lines.append(f"  {mark}  {r['test']:<{width}}  {got}/{r['points']}  {r['doc']}")
        failed = self.failures()
        if failed:
            lines += ["", "What went wrong:"]
            for r in failed:
                lines.append(f"  {r['test']}: {r['message']}")
        return "\n".join(lines)


def test_sources(name: str) -> dict[str, str]:
    """{test file name: source} of assignment `name`: the public tests, and the hidden tests where
    this copy has them (the instructor's; a student edition grades the public tests only)."""
    folder = get(name).folder
    paths = [folder / "test_public.py", folder / "instructor" / "test_hidden.py"]
    return {path.name: path.read_text(encoding="utf-8") for path in paths if path.exists()}


def grade_sources(name: str, sources: dict[str, str]) -> Report:
    """Grade {file: source} (the assignment's files, package-relative) on all its tests, the
    submission in a sandboxed process of its own (see isolation.py); the points are decided
    here."""
    assignment = get(name)
    missing = sorted(set(assignment.files) - set(sources))
    if missing:
        raise FileNotFoundError(
            f"the submission lacks {', '.join(missing)}; hand in every file of the assignment "
            f"({', '.join(assignment.files)})"
        )
    tests = test_sources(name)
    expected = isolation.expected_tests(tests)
    order = [test["id"] for test in expected]
    outcome = isolation.run_tests(name, {f: sources[f] for f in assignment.files}, tests, order)
    results = []
    for test in expected:
        passed, message = outcome.results.get(
            test["id"],
            (
                False,
                "not run: grading stopped early (see its reason at the top)"
                if outcome.problem
                else "not run: the grader got no result for it",
            ),  # fmt: skip
        )
        results.append({**test, "passed": passed, "message": message})
    return Report(name, results, outcome.log, outcome.problem)


def grade(name: str, folder: str | Path) -> Report:
    """Grade the student folder `folder`: its `submission/`, or the folder itself if none. Only
    the assignment's files are read (the handout's "Your files"), as text, and none through a
    symbolic link: a link handed in could point at the instructor's copy."""
    folder = Path(folder)
    root = folder / "submission" if (folder / "submission").is_dir() else folder
    assignment = get(name)
    sources = {}
    for file in assignment.files:
        path = root / file
        if path.is_symlink() or (path.exists() and not _inside(path, folder)):
            raise ValueError(
                f"{path} is a symbolic link (to {os.path.realpath(path)}) or lies behind one; "
                "hand in the file itself (zip -r copies files, not links)"
            )
        if path.exists():
            sources[file] = path.read_text(encoding="utf-8")
    return grade_sources(name, sources)


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path`, below `folder`, is reached without following a symbolic link."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    return os.path.realpath(path) == os.path.join(os.path.realpath(folder), relative)


def check(name: str) -> list[tuple[str, Report]]:
    """Grade the reference, the untouched stub and every planted bug of assignment `name`:
    [(what was graded, its report)]. The instructor's check that an assignment grades well."""
    assignment = get(name)
    if not (assignment.folder / "instructor" / "test_hidden.py").exists():
        raise ValueError(
            f"{name} has no instructor/ folder here (a student edition or a wheel): `check` "
            "grades the reference and the planted bugs, so run it in a clone of the repository"
        )
    graded = [
        ("reference", grade_sources(name, assignment.reference_sources())),
        ("stub", grade_sources(name, assignment.stub_sources())),
    ]
    for bug in assignment.planted_bugs:
        graded.append((f"bug: {bug.name}", grade_sources(name, assignment.bug_sources(bug))))
    return graded


def check_table(name: str, graded: list[tuple[str, Report]]) -> str:
    """A Markdown table of `check`'s results: score, and the first failure message that names
    each planted bug (or the first failure) - what a student would read."""
    hints = {f"bug: {b.name}": b.hint.lower() for b in get(name).planted_bugs}
    rows = ["| assignment | graded | score | what the report says (first matching failure) |"]
    rows.append("|---|---|---|---|")
    for what, report in graded:
        failures = report.failures()
        hint = hints.get(what)
        named = [f for f in failures if hint and hint in f["message"].lower()]
        shown = (named or failures or [{"test": "", "message": ""}])[0]
        message = shown["message"].replace("|", "\\|").replace("\n", " ")
        at = message.lower().find(hint) if named else 0  # show the words that name the bug
        if at > 100:
            message = "..." + message[at - 90 :]
        if len(message) > 200:
            message = message[:197] + "..."
        text = f"`{shown['test']}`: {message}" if shown["test"] and what != "stub" else ""
        if what == "stub" and failures:
            text = "every test: " + failures[0]["message"].split("\n")[0]
        rows.append(f"| `{name}` | {what} | {report.score} / {report.total} | {text} |")
    return "\n".join(rows)
