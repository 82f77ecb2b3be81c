"""Grade a submission in processes of its own, and read what happened.

Three processes take part; the verdicts are decided where no code of the submission runs:

- the **grading process** (this module) checks the submission's syntax without running it (a
  syntax error is reported with its file and line), builds two copies of the package in a
  temporary folder — the student edition of this one assignment (its regions stubbed; cached
  per assignment) and the **grading copy**, the same with the submitted files in place — and
  starts the test process. It collects the tests itself, in the instructor's environment
  (`expected_tests`), so the list of tests, their order and their points never come from a
  process that grades; it reads the test process's records, signed with a key only the two of
  them hold, under its own time limits, and decides each test's points;
- the **test process** (`runner.py`, `python -I -S` on the student edition, which holds no
  reference) runs the public and hidden tests with pytest, with every graded function replaced
  by a forwarder to the submission's process: the tests' assertions, oracles and pytest itself
  run there, and never import the submission;
- the **submission's process** (`harness.py`, `python -I -S` on the grading copy, sandboxed by an
  audit hook, in its own work folder, with a minimal environment) imports the submission and
  answers the forwarded calls; its values cross as plain data or handles (`remote.py`), never
  pickled. It never sees the tests.

A submission that loops, exits or crashes during a test fails that test with the cause, and the
next test gets a fresh submission process; one that fails to import, exits or loops at import
ends the grading with a report that says so.
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import select
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from minieagle.assignments import edition, overlay, runner

COLLECT_SECONDS = 120  # importing the submission (and, in the grading process, collecting)
TEST_SECONDS = 60  # each test (MINIEAGLE_TEST_SECONDS overrides)
_MARGIN_SECONDS = 30  # the test process times each test itself; this is the backstop past it
_PYTEST_INI = "[pytest]\n"
# no third-party pytest plugins (they load slowly, and the tests need none); one BLAS thread
_QUIET_PYTEST = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "OPENBLAS_NUM_THREADS": "1"}
_BOOT = (
    "import sys; sys.path[:0] = sys.argv[1:2]; sys.path += sys.argv[2:]; "
    "from minieagle.assignments import runner; runner.main()"
)


@dataclass
class Outcome:
    """What the test process reported, verified: {test id: (passed, message)}, and the problem
    that stopped grading early, if any (a sentence for the student)."""

    results: dict[str, tuple[bool, str]] = field(default_factory=dict)
    problem: str | None = None
    log: str = ""


def syntax_problem(sources: dict[str, str]) -> str | None:
    """The first syntax error of the submitted {file: source}, with its file and line, or None."""
    for file, source in sources.items():
        try:
            with runner.PARSE_LOCK:  # compiling parses too (one at a time: runner.parse)
                compile(source, f"submission/{file}", "exec", dont_inherit=True)
        except SyntaxError as error:
            line = (error.text or "").strip()
            return (
                f"submission/{file}, line {error.lineno}: {error.msg}"
                + (f": {line}" if line else "")
                + "; fix it (python -m py_compile shows it too), then grade again"
            )
    return None


def _python_paths() -> list[str]:
    """The site-packages folders the dependencies come from (added by hand)."""
    paths = list(site.getsitepackages())
    user = site.getusersitepackages()
    if site.ENABLE_USER_SITE and os.path.isdir(user):
        paths.append(user)
    return [p for p in dict.fromkeys(paths) if os.path.isdir(p)]


def _modules_used(tests: dict[str, str]) -> list[str]:
    """The minieagle modules the tests import (and minieagle.testing), in a stable order."""
    names = {"minieagle.testing", "minieagle.gradcheck"}
    for source in tests.values():
        tree = runner.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minieagle"):
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.startswith("minieagle"))
    return sorted(names)


def _write_tests(folder: Path, tests: dict[str, str]) -> None:
    folder.mkdir()
    for file, source in tests.items():
        (folder / file).write_text(source, encoding="utf-8")
    (folder / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")


@functools.cache
def _collected(tests: tuple[tuple[str, str], ...]) -> tuple[dict, ...]:
    with tempfile.TemporaryDirectory(prefix="collect-") as tmp:
        folder = Path(tmp) / "tests"
        _write_tests(folder, dict(tests))
        scores = Path(tmp) / "expected.json"
        env = dict(os.environ, MINIEAGLE_SCORE_FILE=str(scores), **_QUIET_PYTEST)
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "-p", "no:randomly", "-p", "minieagle.assignments.scoring",
             "-c", str(folder / "pytest.ini"), str(folder)],  # fmt: skip
            cwd=tmp, env=env, capture_output=True, text=True, timeout=COLLECT_SECONDS,
        )  # fmt: skip
        if run.returncode != 0 or not scores.exists():
            raise RuntimeError(
                "collecting the assignment's own tests failed (with the instructor's library); "
                f"fix the tests first. pytest said:\n{(run.stdout + run.stderr)[-3000:]}"
            )
        return tuple(json.loads(scores.read_text(encoding="utf-8")))


def expected_tests(tests: dict[str, str]) -> list[dict]:
    """The tests of `tests` ({file name: source}) as collected here, with the instructor's library:
    [{id, test, doc, points}], the list the points are decided from."""
    return [dict(record) for record in _collected(tuple(sorted(tests.items())))]


_editions: dict[str, Path] = {}
_editions_lock = threading.Lock()


def _student_edition(name: str) -> Path:
    """A folder holding the package as the student edition of `name` (its regions stubbed, no
    instructor material), made once per assignment and process (it does not depend on the
    submission); removed when the process exits."""
    with _editions_lock:
        folder = _editions.get(name)
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix=f"edition-{name}-")).resolve()
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            edition.package_copy(folder, [name], link_data=True)
            _editions[name] = folder
        return folder


def _grading_copy(name: str, dest: Path, sources: dict[str, str]) -> None:
    """The student edition of `name` with the submitted files in place, at `dest`."""
    package = _student_edition(name) / "minieagle"
    unknown = sorted(f for f in sources if not (package / f).is_file())
    if unknown:
        raise FileNotFoundError(
            f"{', '.join(unknown)} is not a file of the package; a submission replaces "
            "library files only (see `minieagle assignment list`)"
        )
    shutil.copytree(package, dest / "minieagle", symlinks=True)
    for file, source in sources.items():
        (dest / "minieagle" / file).write_text(source, encoding="utf-8")


@functools.cache
def _graded_functions(name: str, files: tuple[str, ...]) -> list[tuple[str, str]]:
    library = edition.LIBRARY
    sources = {f: (library / f).read_text(encoding="utf-8") for f in files}
    return runner.graded_functions(sources, name)


def run_tests(
    name: str, sources: dict[str, str], tests: dict[str, str], order: list[str]
) -> Outcome:
    """Run `tests` ({file name: source}) against the submission `sources` ({package-relative
    file: source}) of assignment `name`, the tests in a process of their own and the submission
    in a sandboxed one; see the module docstring. `order`: the test ids as `expected_tests`
    collected them; the tests must run in it."""
    problem = syntax_problem(sources)
    if problem:
        return Outcome(problem=problem)
    test_seconds = int(os.environ.get("MINIEAGLE_TEST_SECONDS", TEST_SECONDS))
    with tempfile.TemporaryDirectory(prefix=f"grade-{name}-") as tmp:
        tmp = Path(tmp).resolve()
        copy, work, folder = tmp / "copy", tmp / "work", tmp / "tests"
        _grading_copy(name, copy, sources)
        work.mkdir()
        _write_tests(folder, tests)
        key = secrets.token_bytes(32)
        read_end, write_end = os.pipe()
        stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
        linked = [str(path) for path in copy.rglob("*") if path.is_symlink()]  # link_data
        child = {
            "copy": str(copy),
            "work": str(work),
            # the submission's process follows links before it checks a path: the roots are real too
            "python_paths": sorted({os.path.realpath(p) for p in stdlib | set(_python_paths())}),
            "linked_data": sorted({os.path.realpath(p) for p in linked}),
            "submission_files": [str(copy / "minieagle" / f) for f in sources],
            "submission_modules": [overlay.module_name(f) for f in sources],
            "preload": _modules_used(tests),
        }
        child_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(work),
            "TMPDIR": str(work),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",  # what it printed is in the log even if it is stopped
        }
        spec = {
            "key": key.hex(),
            "result_fd": write_end,
            "tests": str(folder),
            "test_modules": [Path(file).stem for file in tests],
            "functions": _graded_functions(name, tuple(sources)),
            "child": child,
            "child_env": child_env,
            "python_paths": _python_paths(),
            "log": str(tmp / "log.txt"),
            "test_seconds": test_seconds,
            "collect_seconds": COLLECT_SECONDS,
        }
        env = {**child_env, "HOME": str(tmp), "TMPDIR": str(tmp), **_QUIET_PYTEST}
        with open(tmp / "log.txt", "w+", encoding="utf-8", errors="replace") as log:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", "-c", _BOOT, str(_student_edition(name)),
                 *_python_paths()],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env,
                pass_fds=(write_end,), start_new_session=True,
            )  # fmt: skip
            os.close(write_end)
            try:
                process.stdin.write(json.dumps(spec).encode())
                process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                outcome = _read(process, read_end, key, test_seconds, order)
            finally:
                os.close(read_end)
                _stop(process)
            log.seek(0)
            outcome.log = log.read()[-20000:]
    if outcome.problem and outcome.problem.startswith("the test process ended"):
        outcome.problem += _last_error(outcome.log)
    return outcome


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def _read(process, fd: int, key: bytes, test_seconds: int, order: list[str]) -> Outcome:
    """Read and verify the test process's records until it is done, dies, or runs over a limit.
    Tests must start in `order` (some may be missing: a module that did not import) and each
    outcome must be the started test's."""
    outcome, buffer, expect_seq, position = Outcome(), b"", 0, 0
    phase, current = "import", None  # import -> tests
    between = COLLECT_SECONDS + _MARGIN_SECONDS  # starting (again) the submission's process
    deadline = time.monotonic() + between
    collect_errors: list[str] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            if phase == "import":
                outcome.problem = (
                    f"importing the submission and collecting the tests took over "
                    f"{COLLECT_SECONDS} s: a loop at import? Nothing was graded"
                )
            else:
                outcome.results[current] = (False, f"ran over {test_seconds} s and was stopped")
                outcome.problem = (
                    f"{current} ran over its time limit; the tests after it did not run"
                )
            return outcome
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:  # the test process closed the pipe: it ended
            code = process.wait()
            if collect_errors:
                outcome.problem = "the tests could not be collected: " + collect_errors[0]
            elif outcome.problem is None:
                outcome.problem = (
                    f"the test process ended during {current or 'the start'} with exit code "
                    f"{code}; the tests after it did not run"
                )
            return outcome
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            record = _verified(line, key, expect_seq)
            if record is None:
                outcome.problem = (
                    "the test process sent a record that was not signed in order: something "
                    "wrote to the grader's channel; graded 0 from there"
                )
                return outcome
            expect_seq += 1
            kind = record["kind"]
            if kind == "problem":
                outcome.problem = str(record["message"])
            elif kind == "collect_error":
                collect_errors.append(_import_error(record["message"]))
            elif kind == "collected":
                phase = "tests"
                deadline = time.monotonic() + between
                if collect_errors:
                    outcome.problem = "the tests could not be collected: " + collect_errors[0]
            elif kind == "start":
                current = record["test"]
                if current not in order[position:]:
                    outcome.problem = (
                        f"the test process started {current!r} out of the tests' order; "
                        "graded 0 from there"
                    )
                    return outcome
                position = order.index(current, position) + 1
                deadline = time.monotonic() + test_seconds + _MARGIN_SECONDS
            elif kind == "outcome":
                if record["test"] != current:
                    outcome.problem = (
                        f"the test process reported {record['test']!r} while {current!r} "
                        "ran; graded 0 from there"
                    )
                    return outcome
                outcome.results[current] = (bool(record["passed"]), str(record["message"]))
                deadline = time.monotonic() + between
            elif kind == "done":
                if record["exit"] not in (0, 1) and outcome.problem is None:  # 0, 1: tests ran
                    outcome.problem = (
                        "the test run stopped early (an error outside any test; pytest's exit "
                        f"status {record['exit']})"
                    )
                return outcome


def _last_error(log: str) -> str:
    """'; it printed last: <the last line naming an exception>' (or the last line) of `log`."""
    lines = [line.strip() for line in log.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.search(r"\w+(Error|Exit|Exception)\b", line)]
    line = (named or lines or [""])[-1].removeprefix("INTERNALERROR> ")
    return f"; it printed last: {line[:300]}" if line else ""


def _verified(line: bytes, key: bytes, seq: int) -> dict | None:
    try:
        wrapper = json.loads(line)
        body, mac = wrapper["body"], wrapper["mac"]
        want = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        record = json.loads(body)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not hmac.compare_digest(mac, want) or record.get("seq") != seq:
        return None
    return record


def _import_error(longrepr: str) -> str:
    """The last line that names an exception in a collection error, e.g. 'ValueError: ...'."""
    lines = [line.strip() for line in longrepr.splitlines() if line.strip()]
    errors = [line.lstrip("E ").strip() for line in lines if line.startswith("E ")]
    return (errors[-1] if errors else (lines[-1] if lines else longrepr))[:500]
