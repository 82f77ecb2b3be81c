"""The grading child: runs an assignment's tests against a submission and reports raw outcomes.

`isolation.run_tests` starts this module in a fresh interpreter (`python -I -S`, an explicit
`sys.path` holding only a student edition of the package with the submission in place and the
dependencies) and writes a JSON spec to its standard input. Before anything of the submission is
imported, `main`:

1. reads the spec (the tests folder, the submission's files, the key that signs each record, the
   file descriptor of the result pipe) and closes standard input;
2. installs an audit hook (PEP 578) that refuses, from then on, to open a file outside the
   grading copy, the work folder and the Python installation (never the instructor's copy), and
   refuses to the submission's code introspection and escape routes: frames, `gc`, `exec` and
   `compile`, `ctypes`, processes, signals to others, tracing, new audit hooks, reading the tests;
3. takes a snapshot of the modules the tests rely on (numpy, minieagle's own, pytest's runner);
4. runs pytest with a recorder plugin that times each test, checks the snapshot after it, and
   writes one signed JSON line per event to the result pipe; then leaves with `os._exit`, so no
   `atexit` handler runs.

The points, the verdicts and the report are decided by the grading process (`isolation.py`), from
the records it can verify; this process only says what happened. docs/assignments.md has the
threat model: what this defends and what it does not.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import sys
import types

import pytest  # before the submission, like everything this module uses

_READ_ONLY_DEVICES = ("/dev/null", "/dev/urandom", "/proc/cpuinfo", "/proc/meminfo")
# refused to the submission's own call (the library does them legitimately: dataclasses exec,
# imports compile, warnings and tracebacks read frames)
_NOT_BY_SUBMISSION = ("exec", "compile", "sys._getframe", "object.__getattr__")
# refused while the submission is anywhere on the stack (no test needs them)
_NOT_UNDER_SUBMISSION = (
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg", "signal.pthread_kill",
    "socket.connect", "socket.bind", "_thread.start_new_thread", "ctypes.dlopen",
    "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof", "ctypes.string_at",
)  # fmt: skip
# path operations: allowed in the work folder only (listing: where reading is allowed)
_CHANGES = (
    "os.symlink", "os.link", "os.rename", "os.remove", "os.rmdir", "os.chmod", "os.chown",
    "os.truncate", "os.mkdir", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move",
)  # fmt: skip
_LISTINGS = ("os.listdir", "os.scandir")
_WATCHED = frozenset(("open", *_NOT_BY_SUBMISSION, *_NOT_UNDER_SUBMISSION, *_CHANGES, *_LISTINGS))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Refused(PermissionError):
    """An operation the grading sandbox does not allow (see the module docstring)."""


def _under(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _paths(args) -> list[str]:
    """The file paths among an audit event's arguments, absolute (file descriptors left out)."""
    return [
        os.path.abspath(os.fsdecode(a))
        for a in args
        if isinstance(a, (str, bytes)) or hasattr(a, "__fspath__")
    ]


def _policy(spec: dict):
    """The audit hook for `spec`: a function (event, args) that raises Refused."""
    copy, work, tests = spec["copy"], spec["work"], spec["tests"]
    python = list(spec["python_paths"])
    denied_names = ("minieagle", "__editable__", "_minieagle")
    submission = frozenset(spec["submission_files"])
    inside = [False]  # the hook's own sys._getframe call must not recurse into it

    def from_submission(anywhere: bool) -> bool:
        """Whether the submission's code made this call: directly (the caller's frame is the
        submission's) or, with `anywhere`, from any depth (the submission is on the stack)."""
        frame = sys._getframe(3)  # 0: here, 1: check, 2: hook, 3: the caller
        while frame is not None:
            if frame.f_code.co_filename in submission:
                return True
            if not anywhere:
                return False
            frame = frame.f_back
        return False

    def readable(path: str) -> bool:
        if _under(path, [copy, work, tests]) or path in _READ_ONLY_DEVICES:
            return True
        for root in python:
            if _under(path, [root]):  # not minieagle's install, its .pth or their __pycache__
                parts = path[len(root) :].lstrip(os.sep).split(os.sep)
                return not any(p.startswith(denied_names) or p.endswith(".pth") for p in parts)
        return False

    def read(path: str) -> None:
        if not readable(path):
            raise Refused(f"reading {path} is not allowed while grading")
        if _under(path, [tests]) and from_submission(anywhere=True):
            raise Refused("a submission may not read the grader's tests")

    def write(path: str) -> None:
        if not (_under(path, [work]) or path == "/dev/null"):
            raise Refused(f"changing {path} is not allowed while grading (only under {work})")

    def check(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int):
                if path > 2:
                    raise Refused(f"opening file descriptor {path} is not allowed here")
                return
            path = os.path.abspath(os.fsdecode(path))
            if any(c in (mode or "") for c in "wax+") or (flags or 0) & _WRITE_FLAGS:
                write(path)
            read(path)
        elif event in _LISTINGS:
            for path in _paths(args[:1]) or [os.getcwd()]:
                read(path)
        elif event in _CHANGES:
            for path in _paths(args):
                write(path)
        elif event in _NOT_UNDER_SUBMISSION:
            if from_submission(anywhere=True):
                raise Refused(f"{event} is not allowed in a submission")
        elif from_submission(anywhere=False):
            raise Refused(f"{event} is not allowed in a submission")

    def hook(event: str, args: tuple) -> None:
        if inside[0] or (event not in _WATCHED and not event.startswith("ctypes.")):
            return
        inside[0] = True
        try:
            check("ctypes.dlopen" if event.startswith("ctypes.") else event, args)
        finally:
            inside[0] = False

    return hook


def _watched_modules() -> list[str]:
    """The modules whose attributes a submission must not replace: what the tests check with."""
    prefixes = ("numpy", "minieagle", "pytest", "_pytest.python", "_pytest.runner", "pluggy")
    return sorted(
        name
        for name in sys.modules
        if name in ("builtins", "math", "operator", "functools")
        or any(name == p or name.startswith(p + ".") for p in prefixes)
    )


def _snapshot(names, exclude) -> dict:
    """{(module, attribute[, class attribute]): id of the value} for `names` minus `exclude`."""
    ids = {}
    for name in names:
        module = sys.modules.get(name)
        if module is None or name in exclude:
            continue
        for attribute, value in list(vars(module).items()):
            if attribute.startswith("__") or isinstance(value, types.ModuleType):
                continue  # a package gains its submodules as they are imported
            ids[name, attribute] = id(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for inner, member in list(vars(value).items()):
                    if not inner.startswith("__"):
                        ids[name, attribute, inner] = id(member)
    return ids


def _changed(before: dict, exclude) -> list[str]:
    now = _snapshot({key[0] for key in before}, exclude)
    return sorted(".".join(key) for key, value in before.items() if now.get(key) != value)


class _Recorder:
    """The pytest plugin of the grading child: times each test, checks the module snapshot after
    it, and writes signed records. It is registered before the submission is imported."""

    def __init__(self, spec: dict, write):
        self.write, self.seconds = write, int(spec["test_seconds"])
        self.exclude = frozenset(spec["submission_modules"])
        self.files = frozenset(spec["submission_files"])
        self.before = _snapshot(_watched_modules(), self.exclude)
        self.tampered: list[str] = []

    def _check(self) -> None:
        if not self.tampered:
            self.tampered = _changed(self.before, self.exclude) + [
                name
                for name in _defined_in_submission(self.files)
                if name.rsplit(".", 1)[0] not in self.exclude
            ]

    def pytest_configure(self, config):
        config.addinivalue_line("markers", "points(n): what the test is worth (default 1)")

    def pytest_collectreport(self, report):
        if report.failed:
            message = _longrepr(report)
            self.write({"kind": "collect_error", "where": report.nodeid, "message": message})

    def pytest_collection_finish(self, session):
        # modules imported during collection join the snapshot (the submission imported them too)
        self._check()
        self.before.update(_snapshot(_watched_modules(), self.exclude | set(self.before)))
        self.write({"kind": "collected", "tests": [item.nodeid for item in session.items]})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Runs the test instead of pytest's own protocol (so no other plugin reports it)."""
        self.write({"kind": "start", "test": item.nodeid})

        def expired(signum, frame):
            raise TimeoutError(f"ran over {self.seconds} s: an endless loop, or far too much work?")

        signal.signal(signal.SIGALRM, expired)
        signal.alarm(self.seconds)
        try:
            outcome = _run(item, nextitem)
        finally:
            signal.alarm(0)
        self._check()
        if self.tampered:
            outcome = (False, "the submission replaced what the tests check with: "
                       f"{', '.join(self.tampered[:5])}; graded 0")  # fmt: skip
        self.write({"kind": "outcome", "test": item.nodeid, "passed": outcome[0],
                    "message": outcome[1]})  # fmt: skip
        return True  # the default protocol does not run the test again


class _Blocker:
    """A finder that refuses the submission's modules: see `_import_independent_modules`."""

    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.names:
            raise ImportError(f"{fullname} is the submission's")
        return None


def _import_independent_modules(names, submission_modules) -> None:
    """Import pytest, numpy and the minieagle modules `names` (those the tests use) that do not
    import the submission, before the submission: they enter the snapshot untouched, so a
    submission that replaces one of their functions (a checker, `numpy.allclose`) is caught."""
    import numpy  # noqa: F401
    from _pytest import python, runner  # noqa: F401

    blocker = _Blocker(submission_modules)
    sys.meta_path.insert(0, blocker)
    try:
        for name in names:
            before = set(sys.modules)
            try:
                __import__(name)
            except ImportError:  # it needs the submission
                for partial in set(sys.modules) - before:
                    del sys.modules[partial]
    finally:
        sys.meta_path.remove(blocker)


def _imported_names(module) -> set[str]:
    """The names a module's source binds with `from ... import`: what it may hold from another."""
    import ast

    try:
        with open(module.__file__, encoding="utf-8") as file:
            tree = ast.parse(file.read())
    except (OSError, TypeError, SyntaxError, AttributeError):
        return set()
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def _defined_in_submission(submission_files) -> list[str]:
    """Attributes of the watched modules that hold a function of the submission although their
    source does not import it: a replaced checker or decode loop."""
    found = []
    for name in _watched_modules():
        module = sys.modules[name]
        imported = None
        for attribute, value in list(vars(module).items()):
            code = getattr(getattr(value, "__func__", value), "__code__", None)
            if code is None or code.co_filename not in submission_files:
                continue
            imported = _imported_names(module) if imported is None else imported
            if attribute not in imported:
                found.append(f"{name}.{attribute}")
    return found


def _run(item, nextitem) -> tuple[bool, str]:
    """Run `item` (setup, call, teardown) as pytest would: (passed, the first line of why not)."""
    from _pytest.runner import call_and_report

    passed, message = True, ""
    for when in ("setup", "call", "teardown"):  # the call only after a setup that passed
        if when == "call" and not passed:
            continue
        extra = {"nextitem": nextitem} if when == "teardown" else {}
        report = call_and_report(item, when, log=False, **extra)
        if passed and (report.failed or report.skipped):
            passed, message = False, _reason(report) if report.failed else "skipped"
    return passed, message


def _reason(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    # "AssertionError: the message\nassert ..." -> "the message"; keep other exception names
    text = text.split("\nassert ")[0].strip()
    if text.startswith("AssertionError: "):
        text = text[len("AssertionError: ") :]
    return text


def _longrepr(report) -> str:
    return str(report.longrepr)[-4000:]


def main() -> None:
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    key = bytes.fromhex(spec.pop("key"))
    pipe = spec["result_fd"]
    sequence = [0]

    def write(record: dict) -> None:
        record["seq"] = sequence[0]
        sequence[0] += 1
        body = json.dumps(record, sort_keys=True)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        os.write(pipe, (json.dumps({"body": body, "mac": mac}) + "\n").encode())

    sys.addaudithook(_policy(spec))
    _import_independent_modules(spec["preload"], spec["submission_modules"])
    recorder = _Recorder(spec, write)
    write({"kind": "ready"})
    args = ["-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:doctest",
            "-c", os.path.join(spec["tests"], "pytest.ini"), spec["tests"]]  # fmt: skip
    code = pytest.main(args, plugins=[recorder])
    write({"kind": "done", "exit": int(code)})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
