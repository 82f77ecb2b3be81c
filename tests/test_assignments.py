"""The course assignments: stubs made from the library's solution regions, and their autograder.

For every assignment: the reference solution scores full marks, the untouched stub scores zero,
each planted bug scores partial marks with a report that names the mistake, and a student folder
made by `make` holds no solution text and passes its public tests only once filled in.
Each grading runs the assignment's tests in a fresh interpreter, so these tests take a while.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from minieagle.assignments import edition, grader, overlay, release, solutions
from minieagle.cli import main

ASSIGNMENTS = [name for name in grader.NAMES if (grader.HERE / name / "__init__.py").exists()]
LIBRARY = grader.LIBRARY
NOTEBOOKS = edition.REPOSITORY / "notebooks"


def test_every_assignment_is_present():
    assert ASSIGNMENTS == list(grader.NAMES), (
        f"assignments without a folder: {sorted(set(grader.NAMES) - set(ASSIGNMENTS))}"
    )


# ---------------------------------------------------------------------------- markers


def test_markers_are_balanced_and_named_in_every_library_file():
    names = set()
    for file in sorted(LIBRARY.rglob("*.py")):
        for region in solutions.regions(file.read_text(encoding="utf-8"), str(file)):
            names.add(region.name)
            assert region.name in grader.NAMES, (
                f"{file}: region for unknown assignment {region.name}"
            )
    assert names == set(ASSIGNMENTS), (
        f"assignments with no solution region: {set(ASSIGNMENTS) - names}"
    )


@pytest.mark.parametrize(
    "source, error",
    [
        ("    ### BEGIN SOLUTION verifier\n    x = 1\n", "never closed"),
        ("    ### END SOLUTION\n", "no region open"),
        ("    ### BEGIN SOLUTION\n    ### END SOLUTION\n", "without an assignment name"),
        (
            "### BEGIN SOLUTION a\n### BEGIN SOLUTION b\n### END SOLUTION\n### END SOLUTION\n",
            "inside the region",
        ),
    ],
)
def test_bad_markers_are_refused(source, error):
    with pytest.raises(solutions.MarkerError, match=error):
        solutions.regions(source)


def test_stub_replaces_only_its_own_regions_and_keeps_indentation():
    source = (
        "def f(x):\n"
        "    ### BEGIN SOLUTION one\n"
        "    return x + 1\n"
        "    ### END SOLUTION\n"
        "\n"
        "def g(x):\n"
        "    ### BEGIN SOLUTION two\n"
        "    return x * 2\n"
        "    ### END SOLUTION\n"
    )
    stubbed = solutions.stub(source, "one")
    assert "x + 1" not in stubbed and "return x * 2" in stubbed
    assert "BEGIN SOLUTION" not in stubbed and "END SOLUTION" not in stubbed
    namespace: dict = {}
    exec(compile(stubbed, "<stub>", "exec"), namespace)
    assert namespace["g"](3) == 6
    with pytest.raises(NotImplementedError, match="one"):
        namespace["f"](3)
    assert solutions.solution_text(source, "one") == ["return x + 1"]


# ---------------------------------------------------------------------------- the overlay


def test_overlay_refuses_a_module_imported_already(tmp_path):
    (tmp_path / "verify.py").write_text("")
    import minieagle.verify  # noqa: F401 (imported on purpose)

    with pytest.raises(RuntimeError, match="imported before the submission overlay"):
        overlay.install(tmp_path)


def test_overlay_loads_the_submitted_file(tmp_path):
    """In a fresh interpreter, `import minieagle.verify` gets the submitted file."""
    (tmp_path / "verify.py").write_text("SUBMITTED = True\n")
    code = (
        "from minieagle.assignments.overlay import install\n"
        f"install({str(tmp_path)!r})\n"
        "import minieagle.verify, minieagle.tree\n"
        "assert minieagle.verify.SUBMITTED\n"
        "assert not hasattr(minieagle.tree, 'SUBMITTED')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- grading


@functools.cache
def _reports() -> dict[tuple[str, str], grader.Report]:
    """Every grading these tests look at, run two at a time (each is its own interpreter):
    {(assignment, "reference" | "stub" | bug name): report}."""
    jobs = {}
    for name in ASSIGNMENTS:
        assignment = grader.get(name)
        jobs[name, "reference"] = assignment.reference_sources()
        jobs[name, "stub"] = assignment.stub_sources()
        for bug in assignment.planted_bugs:
            jobs[name, bug.name] = assignment.bug_sources(bug)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(grader.grade_sources, key[0], src) for key, src in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_reference_scores_full_marks_and_stub_scores_zero(name):
    reference = _reports()[name, "reference"]
    assert reference.total > 0 and reference.score == reference.total, reference.text()
    stub = _reports()[name, "stub"]
    assert stub.total == reference.total and stub.score == 0, stub.text()


PLANTED = [(name, bug) for name in ASSIGNMENTS for bug in grader.get(name).planted_bugs]


@pytest.mark.parametrize("name, bug", PLANTED, ids=[f"{n}: {b.name}" for n, b in PLANTED])
def test_planted_bug_scores_partial_marks_and_is_named(name, bug):
    report = _reports()[name, bug.name]
    assert 0 < report.score < report.total, report.text()
    messages = " | ".join(r["message"] for r in report.failures()).lower()
    assert bug.hint.lower() in messages, f"no message mentions {bug.hint!r}:\n{report.text()}"


def test_a_report_reads_well():
    """The report names the score, each test, and why each failed test failed."""
    report = grader.Report(
        "verifier",
        [
            {"test": "test_a", "doc": "checks a", "points": 2, "passed": True, "message": ""},
            {"test": "test_b", "doc": "checks b", "points": 3, "passed": False, "message": "why"},
        ],
    )
    text = report.text()
    assert (report.score, report.total) == (2, 5)
    assert text.startswith("verifier: 2 / 5 points")
    assert "FAIL  test_b  0/3  checks b" in text and "test_b: why" in text


def test_each_assignment_plants_at_least_two_bugs():
    for name in ASSIGNMENTS:
        assert len(grader.get(name).planted_bugs) >= 2, f"{name} plants fewer than two bugs"


def test_planting_a_bug_that_does_not_match_is_an_error():
    assignment = grader.get("verifier")
    bug = grader.PlantedBug("nothing", "verify.py", "no such line\n", "x", "x")
    with pytest.raises(ValueError, match="occurs 0 times"):
        assignment.bug_sources(bug)


def test_grading_a_submission_without_its_files_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="lacks verify.py"):
        grader.grade("verifier", tmp_path)


def test_unknown_assignment_is_an_error():
    with pytest.raises(ValueError, match="no assignment called 'verfier'"):
        grader.get("verfier")


# ---------------------------------------------------------------------------- student folders


def _public_tests(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q"], cwd=folder, capture_output=True, text=True
    )


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_student_folder_has_no_solution_and_passes_only_once_filled_in(name, tmp_path):
    assignment = grader.get(name)
    folder = grader.make(name, tmp_path / name)
    text = "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file())
    for file in assignment.files:
        source = (LIBRARY / file).read_text(encoding="utf-8")
        outside = solutions.stub(source, name)  # what is public anyway: the rest of the file
        for line in solutions.solution_text(source, name):
            if len(line) >= 12 and line not in outside:
                assert line not in text, f"solution line of {file} in the student folder: {line!r}"
    assert not _instructor_lines(text), "instructor material was copied"
    answers = (folder / "ANSWERS.md").read_text(encoding="utf-8")
    handout = (assignment.folder / "handout.md").read_text(encoding="utf-8")
    questions = handout.split("## Written questions")[1]
    count = len(re.findall(r"^\d+\. ", questions, flags=re.M))
    assert count >= 3 and answers.count("Your answer:") == count, answers
    readme = (folder / "README.md").read_text(encoding="utf-8")
    total = sum(t["points"] for t in grader.isolation.expected_tests(grader.test_sources(name)))
    for section in ("## Points", "## Install, work, check and submit", "## References"):
        assert section in readme, f"{name}'s handout lacks {section}"
    assert f"{total} points in all" in readme and "arXiv:" in readme
    outside = re.findall(r"\]\(|docs/|notebooks/|https?://", readme)
    assert not outside, f"{name}'s handout points outside the student's folder: {outside}"

    untouched = _public_tests(folder)
    assert untouched.returncode == 1, untouched.stdout[-2000:]  # 1: tests ran and failed
    for file, source in assignment.reference_sources().items():
        (folder / "submission" / file).write_text(source, encoding="utf-8")
    filled = _public_tests(folder)
    assert filled.returncode == 0, filled.stdout[-2000:]


def test_make_refuses_an_existing_folder(tmp_path):
    with pytest.raises(FileExistsError, match="already exists"):
        grader.make("verifier", tmp_path)


def test_cli_makes_and_grades(tmp_path, capsys):
    folder = tmp_path / "hw"
    assert main(["assignment", "make", "verifier", str(folder)]) == 0
    shutil.copy(LIBRARY / "verify.py", folder / "submission" / "verify.py")
    assert main(["assignment", "grade", "verifier", str(folder)]) == 0
    score = re.search(r"verifier: (\d+) / (\d+) points", capsys.readouterr().out)
    assert score and score[1] == score[2], "the reference, handed in through the CLI, lost points"
    assert main(["assignment", "list"]) == 0
    assert "verifier" in capsys.readouterr().out


def test_check_table_shows_each_graded_variant():
    """`minieagle assignment check`'s table: one row per variant, the bug's message shown."""
    reports = _reports()
    name = "verifier"
    graded = [("reference", reports[name, "reference"]), ("stub", reports[name, "stub"])]
    graded += [(f"bug: {b.name}", reports[name, b.name]) for b in grader.get(name).planted_bugs]
    table = grader.check_table(name, graded).splitlines()
    assert len(table) == 2 + len(graded)
    score = re.search(r"\| reference \| (\d+) / (\d+) \|", table[2])
    assert score and score[1] == score[2], table[2]
    never = next(row for row in table if "never accepts" in row)
    assert "accepts nothing" in never.lower()


def test_cli_check_refuses_an_unknown_assignment(capsys):
    assert main(["assignment", "check", "nope"]) == 2
    assert "no assignment called 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the student edition


def _instructor_lines(text: str) -> list[str]:
    """Distinctive lines of the instructor-only files (hidden tests, answers, planted bugs,
    notebook answers) that occur in `text`: what no student edition may hold."""
    sources = [*LIBRARY.rglob("*.py"), *NOTEBOOKS.glob("*.py")]
    public = "\n".join(
        p.read_text(encoding="utf-8")
        for p in sources
        if p.is_relative_to(NOTEBOOKS)
        or not edition.instructor_only(p.relative_to(LIBRARY).as_posix())
    )
    found = []
    for path in LIBRARY.rglob("*"):
        if path.is_file() and edition.instructor_only(path.relative_to(LIBRARY).as_posix()):
            for line in path.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if len(line) >= 40 and line not in public and line in text:
                    found.append(f"{path.name}: {line}")
    return found


@pytest.fixture(scope="module")
def student_edition(tmp_path_factory) -> Path:
    return release.release(tmp_path_factory.mktemp("release") / "edition", ASSIGNMENTS)


_TEXT = (".py", ".md", ".toml", ".txt")


@functools.cache
def _distinctive_solution_lines(names: tuple[str, ...]) -> set[tuple[str, str]]:
    """{(file name, line)}: the lines inside `names`' regions, in the library and the notebooks,
    that the public code does not also hold (a line such as `node = child` is no leak)."""
    paths = [*LIBRARY.rglob("*.py"), *NOTEBOOKS.glob("*.py")]
    sources = {p: p.read_text(encoding="utf-8") for p in paths}
    public = "\n".join(solutions.edition(source, names) for source in sources.values())
    return {
        (path.name, line)
        for path, source in sources.items()
        for name in names
        for line in solutions.solution_text(source, name)
        if len(line) >= 12 and line not in public
    }


def test_student_edition_holds_no_solution_line_hidden_test_or_answer(student_edition):
    """Every line inside a released region (and not elsewhere in the public code) is absent, and
    so is every distinctive line of the hidden tests, answers, planted bugs and notebook answers."""
    files = [p for p in student_edition.rglob("*") if p.is_file()]
    assert not any("instructor" in p.parts or "notebook_answers" in p.parts for p in files)
    text = "\n".join(p.read_text(encoding="utf-8") for p in files if p.suffix in _TEXT)
    leaked = _instructor_lines(text)
    assert not leaked, f"instructor material in the student edition: {leaked[:3]}"
    lines = _distinctive_solution_lines(tuple(ASSIGNMENTS))
    assert len(lines) > 200, f"only {len(lines)} solution lines were looked for"
    found = sorted((name, line) for name, line in lines if line in text)
    assert not found, f"solution lines in the student edition: {found[:3]}"


def test_student_edition_stubs_the_notebooks_solving_cells(student_edition):
    notebook = student_edition / "notebooks" / "02_speculative_sampling.py"
    notebook = notebook.read_text(encoding="utf-8")
    assert 'raise NotImplementedError("verifier: this part is yours to write")' in notebook
    kept, solved = "def verify_by_hand(" in notebook, "r = np.maximum(p - q, 0.0)" in notebook
    assert kept and not solved, "notebook 02's by-hand verifier must be a stub in the edition"


def test_student_edition_runs_as_a_library_with_the_parts_stubbed(student_edition):
    """Imported from the edition: the stubs raise, the assignments list, and their specs hold no
    planted bugs or hidden tests."""
    code = (
        "import numpy as np\n"
        "from minieagle.assignments import grader\n"
        "from minieagle.verify import acceptance_probability\n"
        "assert grader.LIBRARY.parent.name == 'edition', grader.LIBRARY\n"
        "assert all(grader.get(n).planted_bugs == () for n in grader.NAMES)\n"
        "assert set(grader.test_sources('verifier')) == {'test_public.py'}\n"
        "try:\n"
        "    acceptance_probability(np.ones(2) / 2, None, 0)\n"
        "except NotImplementedError as error:\n"
        "    print(error)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=student_edition, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(student_edition)},
    )  # fmt: skip
    assert run.returncode == 0 and "yours to write" in run.stdout, run.stderr[-2000:]


def test_release_refuses_an_existing_folder(tmp_path):
    with pytest.raises(FileExistsError, match="already exists"):
        release.release(tmp_path, ["verifier"])


def test_the_grading_copy_holds_the_submission_and_no_reference_of_its_regions(tmp_path):
    submitted = "SUBMITTED = True\n"
    package = edition.package_copy(tmp_path, ["verifier"], replace={"verify.py": submitted},
                                   link_data=True)  # fmt: skip
    assert (package / "verify.py").read_text() == submitted
    text = "\n".join(p.read_text(encoding="utf-8") for p in package.rglob("*.py"))
    lines = [
        line for file, line in _distinctive_solution_lines(("verifier",)) if file == "verify.py"
    ]
    assert lines and not [line for line in lines if line in text]
    assert not (package / "assignments" / "verifier" / "instructor").exists()
    with pytest.raises(FileNotFoundError, match="not a file of the package"):
        edition.package_copy(tmp_path / "b", ["verifier"], replace={"nope.py": ""})


def test_cli_releases_a_student_edition(tmp_path, capsys):
    out = tmp_path / "edition"
    assert main(["assignment", "release", "--out", str(out), "--assignments", "verifier"]) == 0
    assert "verifier" in (out / "README.md").read_text(encoding="utf-8")
    assert "raise NotImplementedError" in (out / "minieagle" / "verify.py").read_text()
    assert "raise NotImplementedError" not in (out / "minieagle" / "tree.py").read_text()
    assert (
        main(["assignment", "release", "--out", str(tmp_path / "x"), "--assignments", "nope"]) == 2
    )
    assert "choose from" in capsys.readouterr().err


def _parse_in_threads(parses, source: str, rounds: int = 80) -> int:
    """SystemErrors raised by `parse(source)` from three threads at once (thread i calls
    `parses[i % len(parses)]`), while a fourth makes garbage whose finalizers let the threads
    switch in the middle of a parse, switching as often as the interpreter can."""
    import threading

    errors = []

    class Finalized:
        def __del__(self):
            pass

    def work(parse):
        for _ in range(rounds):
            try:
                parse(source)
            except SystemError:
                errors.append(1)

    def churn():
        for _ in range(40_000):
            garbage = [Finalized() for _ in range(10)]
            garbage.append(garbage)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [
            threading.Thread(target=work, args=(parses[i % len(parses)],)) for i in range(3)
        ]
        threads.append(threading.Thread(target=churn))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return len(errors)


def test_gradings_in_threads_parse_the_tests_one_at_a_time():
    """The tests grade two submissions at a time in threads; CPython 3.11's `ast.parse` is not
    safe in two threads at once (a shared recursion counter: "AST constructor recursion depth
    mismatch", seen in CI), so every parse the grader makes (the submission's syntax check, the
    tests' imports, the graded functions of the library) goes through one lock. Without it the
    same stress fails on 3.11, and so does locking only some of the parses (checked below where
    the interpreter has the bug: CI failed so on 2026-12-04)."""
    import ast

    from minieagle.assignments import isolation, runner

    source = (grader.HERE / "verifier" / "instructor" / "test_hidden.py").read_text() * 3
    grader_parses = [
        lambda s: isolation._modules_used({"t": s}),
        lambda s: runner.graded_functions({"t.py": s}, "verifier"),
        lambda s: isolation.syntax_problem({"t.py": s}),
    ]
    assert _parse_in_threads(grader_parses, source) == 0
    if sys.version_info < (3, 12):  # the stress does reach the bug
        assert _parse_in_threads([ast.parse], source) > 0
        assert _parse_in_threads([runner.parse, ast.parse], source) > 0
