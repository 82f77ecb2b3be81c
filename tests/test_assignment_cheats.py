"""Negative controls for the autograder: cheating submissions must score nothing.

Each cheat below is the untouched stub of the verifier assignment plus code that tries to score
without writing the verifier: by loading the reference (from the instructor's file, by exec of its
source, around the import machinery, through the grader's own `reference_sources`), by forging the
result (a score file rewritten at exit, a pytest hook that turns failures into passes, a patched
scoring module, the checkers or numpy patched, records written to the grader's channel), by reading
the hidden tests and answers, or by ending or hanging the grading process. The grader runs every
submission in a sandboxed process of its own (minieagle/assignments/isolation.py), so each must
score 0 of 25, and a submission that stops the grading must get a report that says why.
docs/assignments.md has the threat model.
"""

# ruff: noqa: E501 (the cheats are source text, written as a student would)

from __future__ import annotations

import functools
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from minieagle.assignments import grader, isolation
from minieagle.cli import main

NAME = "verifier"
LIBRARY = str(grader.LIBRARY)
REFERENCE = os.path.join(LIBRARY, "verify.py")
BIND = "\nacceptance_probability, residual, verify = ref.acceptance_probability, ref.residual, ref.verify\n"

CHEATS = {
    "importlib from the reference file": f"""
import importlib.util, sys
_spec = importlib.util.spec_from_file_location("_reference_verify", {REFERENCE!r})
ref = sys.modules["_reference_verify"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)
"""
    + BIND,
    "exec of the reference source": f"""
import sys, types
ref = sys.modules["ref"] = types.ModuleType("ref")
exec(open({REFERENCE!r}).read(), ref.__dict__)
"""
    + BIND,
    "around the import overlay (sys.meta_path, sys.modules, sys.path)": f"""
import sys
for _finder in list(sys.meta_path):
    if type(_finder).__name__ != "PathFinder" and "Frozen" not in type(_finder).__name__ and "Builtin" not in type(_finder).__name__:
        sys.meta_path.remove(_finder)
for _name in [n for n in sys.modules if n.startswith("minieagle")]:
    _saved = sys.modules.pop(_name)
sys.path.insert(0, {os.path.dirname(LIBRARY)!r})
import importlib
ref = importlib.import_module("minieagle.verify")
"""
    + BIND,
    "editable-install finder": """
import glob, importlib, site, sys
for _path in list(sys.path):
    for _finder in glob.glob(_path + "/__editable__*minieagle*finder.py"):
        sys.path.insert(0, _path)
        importlib.import_module(_finder.rsplit("/", 1)[1][:-3]).install()
for _name in [n for n in sys.modules if n.startswith("minieagle")]:
    sys.modules.pop(_name)
ref = importlib.import_module("minieagle.verify")
"""
    + BIND,
    "the grader's reference_sources()": """
import sys, types
from minieagle.assignments import grader as _grader
ref = sys.modules["ref"] = types.ModuleType("ref")
exec(_grader.get("verifier").reference_sources()["verify.py"], ref.__dict__)
"""
    + BIND,
    "score file rewritten at exit (atexit)": """
import atexit, json, os
def _forge():
    records = [{"test": "x", "id": "x", "points": 25, "passed": True, "message": "", "doc": ""}]
    for path in [os.environ.get("MINIEAGLE_SCORE_FILE"), "scores.json", "../scores.json"]:
        if path:
            with open(path, "w") as file:
                json.dump(records, file)
atexit.register(_forge)
""",
    "pytest hook that turns failures into passes": """
import gc, os, pytest

class _Pass:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        outcome.get_result().outcome = "passed"

for _where in (".", "..", "../tests"):
    try:
        with open(os.path.join(_where, "conftest.py"), "w") as _file:
            _file.write("import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    o = yield\\n    o.get_result().outcome = 'passed'\\n")
    except OSError:
        pass
for _object in gc.get_objects():
    if type(_object).__name__ == "Config" and hasattr(_object, "pluginmanager"):
        _object.pluginmanager.register(_Pass(), "cheat")
""",
    "the scoring plugin and the grading child patched": """
import minieagle.assignments.scoring as _scoring
import minieagle.assignments.harness as _harness
_scoring.pytest_sessionfinish = lambda session, exitstatus: None
_harness._run = lambda item, nextitem: (True, "")
_harness._reason = lambda report: ""
""",
    "the checkers and numpy patched": """
import numpy
import minieagle.testing as _testing
numpy.isclose = lambda *a, **k: True
numpy.allclose = lambda *a, **k: True
_testing.assert_lossless = lambda *a, **k: None
_testing.assert_lossless_multi_cycle = lambda *a, **k: None
_testing.exact_distribution = lambda *a, **k: {0: 1.0}
""",
    "the sandbox's own helpers patched, then the reference loaded": f"""
import builtins, importlib.util, os, sys
import minieagle.assignments.harness as _harness
_harness._policy = lambda spec: (lambda event, args: None)
_harness.Refused = type("NoRefusal", (Exception,), {{}})
os.path.abspath = lambda path: {LIBRARY!r} + "/assignments/x.py"
os.fsdecode = lambda path: path
_real_any = builtins.any
builtins.any = lambda items: False
_spec = importlib.util.spec_from_file_location("_reference_verify", {REFERENCE!r})
ref = sys.modules["_reference_verify"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)
builtins.any = _real_any
"""
    + BIND,
    "the signing key stolen (hmac, hashlib, json, os.write patched)": """
import hashlib, hmac, json, os
_stolen = []
_real_new, _real_write, _real_dumps = hmac.new, os.write, json.dumps
hmac.new = lambda key, msg=None, digestmod=None: (_stolen.append(key), _real_new(key, msg, digestmod))[1]
hashlib.sha256 = lambda data=b"": (_stolen.append(data), hashlib.new("sha256", data))[1]
json.dumps = lambda obj, **kw: _real_dumps(obj, **kw).replace('"passed": false', '"passed": true')
os.write = lambda fd, data: _real_write(fd, data.replace(b'\\"passed\\": false', b'\\"passed\\": true'))
""",
    "the tamper detector patched too": """
import numpy
import minieagle.testing as _testing
import minieagle.assignments.harness as _harness
_harness._checker = lambda exclude, files: (lambda: None, lambda: [])
_harness._run = lambda item, nextitem: (True, "")
_harness._make_runner = lambda: (lambda item, nextitem: (True, ""))
numpy.isclose = lambda *a, **k: True
numpy.allclose = lambda *a, **k: True
_testing.assert_lossless = lambda *a, **k: None
_testing.assert_lossless_multi_cycle = lambda *a, **k: None
""",
    "tests relabelled (pytest's node ids swapped)": """
import _pytest.nodes as _nodes
_real = _nodes.Node.nodeid
_swap = {"test_greedy_chain_follows_the_argmax": "test_lossless_deterministic_chain"}
def _relabelled(self):
    node_id = _real.fget(self)
    for old, new in _swap.items():
        node_id = node_id.replace(old, new)
    return node_id
_nodes.Node.nodeid = property(_relabelled)
""",
    "records forged on the grader's channel": """
import json, os
for _fd in range(3, 64):
    for _n, _kind in enumerate(("ready", "collected", "done")):
        try:
            os.write(_fd, (json.dumps({"body": json.dumps({"kind": _kind, "seq": _n, "tests": []}), "mac": "0" * 64}) + "\\n").encode())
        except OSError:
            pass
os._exit(0)
""",
    "frames walked to the grader's key": """
import sys
_frame = sys._getframe()
while _frame is not None:
    _frame.f_locals.get("key")
    _frame = _frame.f_back
""",
    "a subprocess that grades for it": """
import subprocess, sys
subprocess.run([sys.executable, "-c", "print('hello')"])
""",
    "hidden tests and answers read from disk": f"""
import glob, os
_found = []
for _pattern in ("../tests/test_hidden.py", "../**/test_hidden.py", {LIBRARY + "/assignments/verifier/instructor/*"!r}):
    for _path in glob.glob(_pattern, recursive=True):
        try:
            _found.append(open(_path).read())
        except OSError:
            pass
if _found:
    raise RuntimeError("LEAKED " + " ".join(_found))
""",
    "the grader's tests deleted": """
import os, shutil
for _path in ("../tests/test_hidden.py", "../tests/test_public.py"):
    try:
        os.remove(_path)
    except OSError:
        pass
shutil.rmtree("../tests", ignore_errors=True)
""",
    "a background thread that forges the result later": """
import json, os, threading, time
def _later():
    time.sleep(0.5)
    for _fd in range(3, 64):
        try:
            os.write(_fd, b'{"body": "{}", "mac": ""}\\n')
        except OSError:
            pass
threading.Thread(target=_later, daemon=True).start()
""",
    "os._exit(0) at import": "\nimport os\nos._exit(0)\n",
    "sys.exit(0) at import": "\nimport sys\nsys.exit(0)\n",
}


def _stub() -> str:
    return grader.get(NAME).stub_sources()["verify.py"]


@functools.cache
def _reports() -> dict[str, grader.Report]:
    """Every cheat graded, two at a time (each is its own sandboxed process)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            cheat: pool.submit(grader.grade_sources, NAME, {"verify.py": _stub() + code})
            for cheat, code in CHEATS.items()
        }
        return {cheat: future.result() for cheat, future in futures.items()}


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_a_cheat_scores_nothing(cheat):
    report = _reports()[cheat]
    assert report.total > 0 and report.score == 0, f"{cheat}:\n{report.text()}"


def _take_over(file: str, how: str) -> str:
    """Code that replaces every name of the module with the reference's, read from `file` of the
    instructor's library by `how` ('importlib' or 'exec')."""
    load = (
        f"_spec = importlib.util.spec_from_file_location('_ref', {os.path.join(LIBRARY, file)!r})\n"
        "_ref = sys.modules['_ref'] = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_ref)\n"
        if how == "importlib"
        else "_ref = sys.modules['_ref'] = types.ModuleType('_ref')\n"
        f"exec(open({os.path.join(LIBRARY, file)!r}).read(), _ref.__dict__)\n"
    )
    keep = "{k: v for k, v in vars(_ref).items() if not k.startswith('__')}"
    return "\nimport importlib.util, sys, types\n" + load + f"globals().update({keep})\n"


@pytest.mark.parametrize("how", ["importlib", "exec"])
def test_the_reference_routes_score_nothing_on_another_assignment_too(how):
    """eagle2_tree (two files, 34 points): the reference loaded into both submitted files."""
    assignment = grader.get("eagle2_tree")
    stubs = assignment.stub_sources()
    report = grader.grade_sources(
        "eagle2_tree", {file: stubs[file] + _take_over(file, how) for file in assignment.files}
    )
    assert report.total > 0 and report.score == 0, report.text()


@pytest.mark.parametrize(
    "cheat",
    ["importlib from the reference file", "exec of the reference source",
     "the grader's reference_sources()"],
)  # fmt: skip
def test_the_reference_routes_are_real_outside_the_sandbox(cheat, tmp_path):
    """The negative controls can fail: run as a plain module in the instructor's environment,
    each of these cheats does get a working verifier from the reference."""
    (tmp_path / "cheat.py").write_text(_stub() + CHEATS[cheat], encoding="utf-8")
    code = (
        "import numpy as np, cheat\n"
        "print(cheat.acceptance_probability(np.array([0.5, 0.5]), np.array([0.25, 0.75]), 1))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == str(0.5 / 0.75), run.stderr[-2000:]


def test_no_cheat_leaks_the_hidden_tests_or_the_answers():
    folder = grader.get(NAME).folder
    secret = [
        line.strip()
        for file in ("test_hidden.py", "answers.md")
        for line in (folder / "instructor" / file).read_text(encoding="utf-8").splitlines()
        if len(line.strip()) > 30 and line.strip() not in (folder / "test_public.py").read_text()
    ]
    for cheat, report in _reports().items():
        text = report.text()  # what the student reads (the log is the instructor's)
        assert "LEAKED" not in text, f"{cheat} read the hidden material"
        leaked = [line for line in secret if line in text]
        assert not leaked, f"{cheat}: the report shows hidden lines: {leaked[:3]}"


@pytest.mark.parametrize(
    "cheat, cause",
    [
        ("os._exit(0) at import", "exit code 0"),
        ("sys.exit(0) at import", "SystemExit"),
        ("records forged on the grader's channel", "not signed"),
    ],
)
def test_a_submission_that_stops_the_grading_gets_the_reason(cheat, cause):
    report = _reports()[cheat]
    assert report.problem and cause in report.problem, report.text()
    assert report.text().splitlines()[2].startswith("Grading stopped early"), report.text()


def test_a_syntax_error_is_reported_with_its_line_and_grade_exits_2(tmp_path, capsys):
    source = _stub().replace("def verify(", "def verify(:\n    pass\ndef _old(", 1)
    report = grader.grade_sources(NAME, {"verify.py": source})
    line = source.splitlines().index("def verify(:") + 1
    assert report.score == 0 and report.problem, report.text()
    assert f"submission/verify.py, line {line}" in report.problem, report.problem
    (tmp_path / "verify.py").write_text(source, encoding="utf-8")
    assert main(["assignment", "grade", NAME, str(tmp_path)]) == 2
    assert f"line {line}" in capsys.readouterr().err


def test_a_loop_at_import_is_stopped_by_the_collection_limit(monkeypatch):
    monkeypatch.setattr(isolation, "COLLECT_SECONDS", 20)
    report = grader.grade_sources(NAME, {"verify.py": _stub() + "\nwhile True:\n    pass\n"})
    assert report.score == 0 and "took over 20 s" in (report.problem or ""), report.text()


def test_a_loop_in_a_test_with_its_alarm_ignored_is_stopped_by_the_grader(monkeypatch):
    """The child times each test with SIGALRM; a submission that ignores the signal and loops is
    stopped by the grading process, which names the test."""
    monkeypatch.setenv("MINIEAGLE_TEST_SECONDS", "1")
    monkeypatch.setattr(isolation, "_MARGIN_SECONDS", 2)
    loop = (
        "\n    import signal\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "    while True:\n        pass\n"
    )
    source = _stub().replace('    """min(1, p(x) / q(x)); q = None means', loop + '    """', 1)
    report = grader.grade_sources(NAME, {"verify.py": source})
    assert report.score == 0 and "ran over its time limit" in (report.problem or ""), report.text()
    stopped = [r for r in report.results if "ran over 1 s" in r["message"]]
    assert len(stopped) == 1, report.text()
