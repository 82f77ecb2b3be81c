"""The test process: runs an assignment's tests against a submission it never imports.

`isolation.run_tests` starts this module in a fresh interpreter (`python -I -S`) whose `sys.path`
holds the student edition of the package (the assignment's regions stubbed, no submission) and
the dependencies, and writes a JSON spec to its standard input. `main` then:

1. replaces each graded function (a function or method holding one of the assignment's solution
   regions; `graded_functions`) with a forwarder: calling it calls the function of the same name
   in the submission's process (`harness.py`), with the arguments and the result as plain data
   or handles (`remote.py`). Every other line of the library that runs here is the library's, and
   a graded function that were somehow not forwarded would raise NotImplementedError: the
   reference is not in this process;
2. starts the submission's process and waits (within the import limit) until it has imported
   the submission; an import that fails, exits or loops ends the grading with its cause;
3. runs pytest on the public and hidden tests, here, with a recorder that runs each test itself
   and writes one line per event (collected, test started, test outcome) to the grading
   process, each signed with a key the submission's process never sees.

**The verdict of every test is decided here**, by the tests' own code and pytest, in a process no
code of the submission runs in: the submission's process only answers calls. Each test has a
time limit on the submission's share of the work; a submission that runs over it, exits,
crashes or breaks the channel is stopped, that test fails with the cause, and the next test
starts a fresh submission process. At each test's end the submission's process checks its
snapshot (a submission that patched the library there fails the test) and both sides forget
the objects they handed out.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
from _pytest.runner import call_and_report

from minieagle.assignments import remote, solutions

_CHILD_BOOT = (
    "import sys; sys.path[:0] = sys.argv[1:2]; sys.path += sys.argv[2:]; "
    "from minieagle.assignments import harness; harness.main()"
)


# CPython 3.11 keeps the counter its AST constructor checks recursion with per interpreter, not
# per thread: two threads parsing at once (the grader runs two gradings at a time in threads) can
# fail with "SystemError: AST constructor recursion depth mismatch", and the thread that fails
# need not be the one that parsed without care. So every parse the grader makes goes through
# `parse`, one at a time (CI failed twice on 2026-12-04 while one parse was left outside).
PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, one thread at a time in this interpreter (see PARSE_LOCK)."""
    with PARSE_LOCK:
        return ast.parse(source)


def graded_functions(sources: dict[str, str], name: str) -> list[tuple[str, str]]:
    """[(module, qualified name)] of every function of `sources` ({package-relative file: the
    library's source}) that holds a solution region of assignment `name`."""
    found = []

    def visit(node, module: str, prefix: str, lines: set) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, module, prefix + child.name + ".", lines)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if any(child.lineno <= line <= child.end_lineno for line in lines):
                    found.append((module, prefix + child.name))

    for file, source in sources.items():
        lines = {r.begin + 1 for r in solutions.regions(source, file) if r.name == name}
        module = "minieagle." + file.removesuffix(".py").replace("/", ".")
        visit(parse(source), module, "", lines)
    return found


def _forwarder(*args, _grading_target=None, _grading_call=None, **kwargs):
    return _grading_call(_grading_target, args, kwargs)


def install_forwarders(functions, call) -> None:
    """Make each (module, qualified name) of `functions` call `call((module, qualname), args,
    kwargs)` instead of its body. A module-level function keeps its identity (its code is
    replaced), so `from module import name` elsewhere forwards too; a method is replaced on
    its class."""
    for module_name, qualname in functions:
        owner = __import__(module_name, fromlist=["_"])
        *path, attribute = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = vars(owner)[attribute]
        target = (module_name, qualname)
        if isinstance(owner, types.ModuleType) and not original.__code__.co_freevars:
            original.__code__ = _forwarder.__code__
            original.__defaults__ = None
            original.__kwdefaults__ = {"_grading_target": target, "_grading_call": call}
        else:

            def forward(*args, _target=target, **kwargs):
                return call(_target, args, kwargs)

            forward.__name__, forward.__qualname__ = original.__name__, original.__qualname__
            forward.__doc__ = original.__doc__
            setattr(owner, attribute, forward)


class Submission:
    """The submission's process as the tests see it: `call` forwards one graded call; the
    process is started again for the next test after it was stopped."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.process: subprocess.Popen | None = None
        self.connection: remote.Connection | None = None
        self.phase = "import"
        self.tampered = ""
        trusted = tuple(spec["test_modules"])
        self.trusted = lambda module: module.startswith("minieagle") or module in trusted

    # ------------------------------------------------------------------ the process

    def start(self) -> str | None:
        """Start the process and wait until it imported the submission: None, or why not."""
        child, seconds = self.spec["child"], self.spec["collect_seconds"]
        read_end, write_end = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", _CHILD_BOOT, child["copy"],
             *self.spec["python_paths"]],
            stdin=subprocess.PIPE, stdout=sys.stdout.fileno(), stderr=subprocess.STDOUT,
            cwd=child["work"], env=self.spec["child_env"], pass_fds=(write_end,),
            start_new_session=True,
        )  # fmt: skip
        os.close(write_end)
        data = json.dumps({**child, "reply_fd": write_end}).encode()
        stdin = self.process.stdin.fileno()
        try:
            os.write(stdin, len(data).to_bytes(8, "big") + data)
        except BrokenPipeError:
            pass
        self.connection = remote.Connection(read_end, stdin, export=self._exportable)
        self.connection.on_stop = self._stopped
        self.connection.deadline = time.monotonic() + seconds
        self.phase = "import"
        try:
            message = self.connection.receive()
        except remote.Stopped as stop:
            self.connection = None
            return str(stop)
        kind = message.get("kind")
        if kind == "ready":
            self.tampered = str(message.get("message") or "")
            return None
        self.kill()
        self.connection = None
        if kind == "import_error":
            return "the submission could not be imported: " + str(message.get("message"))[:500]
        return "the submission's process answered something that is not the grader's protocol"

    def kill(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        if self.connection is not None and self.connection.read_fd >= 0:
            os.close(self.connection.read_fd)
            self.connection.read_fd = -1
        try:
            self.process.stdin.close()
        except OSError:
            pass

    def _stopped(self, why: str) -> str:
        """The connection's on_stop: kill the process and say why it stopped."""
        code = None
        if why == "eof":
            try:
                code = self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        seconds = self.spec["collect_seconds" if self.phase == "import" else "test_seconds"]
        if why == "timeout" and self.phase == "import":
            return (f"importing the submission took over {seconds} s: a loop at import? "
                    "Nothing was graded")  # fmt: skip
        if why == "timeout":
            return f"ran over {seconds} s and was stopped: an endless loop, or far too much work?"
        where = "while importing the submission" if self.phase == "import" else "during this test"
        if why == "eof":
            return (
                f"the submission's process ended {where} with exit code {code} (sys.exit or "
                f"os._exit in the submission, or a crash){_last_error(self.spec['log'])}"
            )
        return (
            f"the submission's process wrote to the grader's channel {where} something that is "
            "not a reply (something in the submission wrote to it); it was stopped"
        )

    def _exportable(self, value) -> bool:
        """What the tests' side hands to the submission as a handle: minieagle's and the tests'
        own objects and functions, lists, dicts, sets and numpy generators; nothing else (a
        module's globals, a builtin, a frame)."""
        if isinstance(value, list | dict | set | np.random.Generator):
            return True
        if isinstance(value, types.MethodType):
            return self._exportable(value.__self__) and self._exportable(value.__func__)
        if isinstance(value, types.FunctionType | type):
            return self.trusted(value.__module__)
        return self.trusted(type(value).__module__)

    # ------------------------------------------------------------------ the tests

    def call(self, target, args, kwargs):
        """Forward one call of a graded function."""
        if self.connection is None:
            raise remote.Stopped(self.why_not_running)
        return self.connection.request("function", tuple(target), args, tuple(kwargs.items()))

    def begin_collection(self) -> None:
        """The tests' modules may call a graded function as they are imported: the import
        limit holds for that."""
        if self.connection is not None:
            self.connection.deadline = time.monotonic() + self.spec["collect_seconds"]

    def begin_test(self) -> str | None:
        """Start a fresh process if the last one was stopped; None, or why no test can run."""
        self.why_not_running = "the submission's process could not be started"
        if self.connection is None:
            problem = self.start()
            if problem:
                self.why_not_running = problem
                return problem
        self.phase = "test"
        self.connection.deadline = time.monotonic() + self.spec["test_seconds"]
        if self.tampered:
            return (f"the submission replaced what the library runs on: {self.tampered}; "
                    "graded 0")  # fmt: skip
        return None

    def end_test(self) -> str | None:
        """Check the snapshot and forget the objects handed out: None, or why the test fails
        (the process was stopped during it, or the library was patched)."""
        connection = self.connection
        if connection is None:
            return None
        if connection.stopped is not None:
            self.connection = None
            return connection.stopped
        connection.deadline = time.monotonic() + self.spec["collect_seconds"]
        try:
            changed = connection.request("reset")
        except remote.Stopped:
            self.connection = None
            return connection.stopped
        connection.reset()
        if changed:
            self.tampered = ", ".join(changed[:5])
            return (f"the submission replaced what the library runs on: {self.tampered}; "
                    "graded 0")  # fmt: skip
        return None


def _last_error(log: str) -> str:
    """'; it printed last: <the last line naming an exception>' of the log file `log`."""
    try:
        with open(log, encoding="utf-8", errors="replace") as file:
            text = file.read()[-20000:]
    except OSError:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.search(r"\w+(Error|Exit|Exception)\b", line)]
    line = named[-1] if named else ""
    return f"; it printed last: {line[:300]}" if line else ""


def _signer(key: bytes, fd: int):
    """write(record): one line `{"body": JSON, "mac": HMAC-SHA256 of the body}` on `fd`,
    numbered in order (`seq`). The key is this process's: the submission's never sees it."""
    count = [0]

    def write(record: dict) -> None:
        record["seq"] = count[0]
        count[0] += 1
        body = json.dumps(record)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        os.write(fd, (json.dumps({"body": body, "mac": mac}) + "\n").encode())

    return write


def _reason(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    # "AssertionError: the message\nassert ..." -> "the message"; keep other exception names
    text = text.split("\nassert ")[0].strip()
    if text.startswith("AssertionError: "):
        text = text[len("AssertionError: ") :]
    return text.removeprefix("minieagle.assignments.remote.")


def _run(item, nextitem) -> tuple[bool, str]:
    """(passed, the first line of why not): setup, call (after a setup that passed) and
    teardown, as pytest runs them."""
    passed, message = True, ""
    for when in ("setup", "call", "teardown"):
        if when == "call" and not passed:
            continue
        extra = {"nextitem": nextitem} if when == "teardown" else {}
        report = call_and_report(item, when, log=False, **extra)
        if passed and (report.failed or report.skipped):
            passed, message = False, _reason(report) if report.failed else "skipped"
            if report.failed:  # the instructor's log (a student reads only the message)
                print(f"{item.nodeid} ({when}):\n{report.longrepr}\n", flush=True)
    return passed, message


class Recorder:
    """The pytest plugin of the test process: registers the points marker, reports collection
    errors, runs each test under its limit and writes the records."""

    def __init__(self, submission: Submission, write, test_seconds: int):
        self.submission, self.write, self.seconds = submission, write, test_seconds

    def pytest_configure(self, config):
        config.addinivalue_line("markers", "points(n): what the test is worth (default 1)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session):
        self.submission.begin_collection()

    def pytest_collectreport(self, report):
        if report.failed:
            self.write({"kind": "collect_error", "where": report.nodeid,
                        "message": str(report.longrepr)[-4000:]})  # fmt: skip

    def pytest_collection_finish(self, session):
        self.write({"kind": "collected", "tests": [item.nodeid for item in session.items]})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Runs the test instead of pytest's own protocol (so no other plugin reports it)."""
        problem = self.submission.begin_test()
        self.write({"kind": "start", "test": item.nodeid})
        if problem:
            passed, message = False, problem
        else:

            def expired(signum, frame):  # the tests' own share of the work
                raise TimeoutError(f"ran over {self.seconds} s: far too much work?")

            signal.signal(signal.SIGALRM, expired)
            signal.alarm(self.seconds + 10)
            try:
                passed, message = _run(item, nextitem)
            finally:
                signal.alarm(0)
            stopped = self.submission.end_test()
            if stopped:
                passed, message = False, stopped
        self.write({"kind": "outcome", "test": item.nodeid, "passed": bool(passed),
                    "message": str(message)})  # fmt: skip
        return True  # the default protocol does not run the test again


def main() -> None:
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    write = _signer(bytes.fromhex(spec.pop("key")), spec["result_fd"])
    submission = Submission(spec)
    install_forwarders([tuple(f) for f in spec["functions"]], submission.call)
    write({"kind": "ready"})
    problem = submission.start()
    if problem:
        write({"kind": "problem", "message": problem})
        write({"kind": "done", "exit": 0})
        sys.stdout.flush()
        os._exit(0)
    tests = spec["tests"]
    args = ["-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:doctest",
            "-c", os.path.join(tests, "pytest.ini"), tests]  # fmt: skip
    code = pytest.main(args, plugins=[Recorder(submission, write, spec["test_seconds"])])
    submission.kill()
    write({"kind": "done", "exit": int(code)})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
