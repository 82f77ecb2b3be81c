"""Negative controls for the autograder: cheating submissions must score nothing.

Each cheat below is the untouched stub of the verifier assignment plus code that tries to score
without writing the verifier: by loading the reference (from the instructor's file, by exec of its
source, around the import machinery, through the grader's own `reference_sources`), by forging the
result (a score file rewritten at exit, a pytest hook that turns failures into passes, a patched
scoring module, the checkers or numpy patched, records written to the grader's channel), by reading
the hidden tests and answers, or by ending or hanging the grading process; and by escaping the
sandbox's checks: a thread that patches the checkers between two tamper checks, a C extension or
a `.pth` or `sitecustomize.py` written to the work folder, code made from a string (whose frames
are nobody's), frames walked to the recorder's signer, a symbolic link out of the work folder, and
files handed in beside the submission or as links; and pytest's Config reached from module
globals, whose recorder signs a pass for every test. The grader runs the tests in a process of
their own and every submission in a sandboxed one that only answers calls
(minieagle/assignments/isolation.py), so each must score 0, and a submission that stops the
grading must get a report that says why. Where a cheat is blocked by the sandbox or by the split
into processes, a control shows that the same code does work outside it. docs/assignments.md has
the threat model.
"""

# ruff: noqa: E501 (the cheats are source text, written as a student would)

from __future__ import annotations

import base64
import functools
import marshal
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

import pytest

from minieagle.assignments import grader, isolation
from minieagle.cli import main

NAME = "verifier"
LIBRARY = str(grader.LIBRARY)
REFERENCE = os.path.join(LIBRARY, "verify.py")
BIND = "\nacceptance_probability, residual, verify = ref.acceptance_probability, ref.residual, ref.verify\n"

# Signs passes for this test and every later one with the recorder's own `write`, found by walking
# the frames from inside a test (where the tests call the submission), then leaves.
FORGE = """
import inspect, os
def _forge(*args, **kwargs):
    frame = inspect.currentframe()
    while frame is not None and not {"write", "item", "expired"} <= set(frame.f_locals):
        frame = frame.f_back
    if frame is None:
        return None
    write, item = frame.f_locals["write"], frame.f_locals["item"]
    items = item.session.items
    for other in items[items.index(item):]:
        if other is not item:
            write({"kind": "start", "test": other.nodeid})
        write({"kind": "outcome", "test": other.nodeid, "passed": True, "message": ""})
    write({"kind": "done", "exit": 0})
    os._exit(0)
"""
# the forge, defined by code that is not in the submitted file
FORGES = {
    "frames walked to the recorder's signer (inspect.currentframe)": FORGE
    + "\nacceptance_probability = residual = verify = _forge\n",
    "the forge made from a string by a library (timeit), so its frames are nobody's": f"""
import timeit
timeit.Timer("pass", setup={"global _forge" + chr(10) + FORGE!r}, globals=globals()).timeit(1)
acceptance_probability = residual = verify = _forge
""",
    "the forge as a signal handler, given the running frame (SIGPROF)": FORGE.replace(
        "inspect.currentframe()", "args[1]"
    )
    + """
import signal
signal.signal(signal.SIGPROF, _forge)
signal.setitimer(signal.ITIMER_PROF, 0.01, 0.01)
""",
    "the forge in a .pth written to the work folder, run by site.addsitedir": f"""
import builtins, os, site
with open(os.path.join(os.getcwd(), "cheat.pth"), "w") as _file:
    _file.write("import builtins; exec(" + repr({FORGE!r}) + ", vars(builtins))" + chr(10))
site.addsitedir(os.getcwd())
acceptance_probability = residual = verify = builtins._forge
""",
    "the forge in a sitecustomize.py written to the work folder and imported": f"""
import os, sys
with open(os.path.join(os.getcwd(), "sitecustomize.py"), "w") as _file:
    _file.write({FORGE!r})
sys.path.insert(0, os.getcwd())
from sitecustomize import _forge
acceptance_probability = residual = verify = _forge
""",
}


def _bytecode_forge() -> str:
    """The forge as bytecode whose file name is the standard library's os.py, unmarshalled by
    importlib's helper: its frames would look like the library's."""
    namespace: dict = {}
    exec(FORGE, namespace)
    code = namespace["_forge"].__code__.replace(co_filename=os.__file__)
    return f"""
import importlib._bootstrap_external, inspect, os, types
_code = importlib._bootstrap_external._compile_bytecode({marshal.dumps(code)!r})
acceptance_probability = residual = verify = types.FunctionType(_code, globals())
"""


FORGES["the forge as bytecode that claims another file (os.py)"] = _bytecode_forge()

# Every way to start a thread, each tried; a started thread keeps the checkers patched while the
# tests run and puts them back now and then (the tamper check looks between two tests).
THREAD_STARTS = {
    "threading.Thread": "threading.Thread(target=_flip, daemon=True).start()",
    "_thread.start_new_thread": "_thread.start_new_thread(_flip, ())",
    "threading._start_new_thread": "threading._start_new_thread(_flip, ())",
    "concurrent.futures": "concurrent.futures.ThreadPoolExecutor(1).submit(_flip)",
    "importlib.reload(_thread)": "importlib.reload(_thread).start_new_thread(_flip, ())",
    "a fresh _thread (_imp.create_builtin)": "_imp.create_builtin(importlib.machinery.ModuleSpec('_thread', None)).start_new_thread(_flip, ())",
}
THREADS = (
    """
import _imp, _thread, concurrent.futures, importlib, importlib.machinery, threading, time
import numpy
import minieagle.testing as _testing
_real = (numpy.isclose, numpy.allclose, _testing.assert_lossless)
_seen = []
def _flip():
    for _ in range(300):
        numpy.isclose = numpy.allclose = lambda *a, **k: True
        _testing.assert_lossless = lambda *a, **k: None
        time.sleep(0.002)
        numpy.isclose, numpy.allclose, _testing.assert_lossless = _real
        time.sleep(0.0001)
"""
    + "".join(
        f"try:\n    {start}\n    _seen.append('THREAD STARTED: {how}')\n"
        f"except Exception as _error:\n    _seen.append('THREAD REFUSED: {how}: ' + str(_error))\n"
        for how, start in THREAD_STARTS.items()
    )
    + """
print(*_seen, sep="\\n")
def verify(*args, **kwargs):  # what happened, in every test's message
    raise RuntimeError(" | ".join(_seen))
acceptance_probability = residual = verify
"""
)

# A symbolic link out of the work folder whose target is checked from a deeper folder: '../' * n
# from there stays inside, from the link's own folder it reaches /.
SYMLINK = (
    f"""
import importlib.util, os, sys
_work = os.getcwd()
_deep = os.path.join(_work, "a", "b", "c", "d")
os.makedirs(_deep)
os.chdir(_deep)
os.symlink("/".join([".."] * _work.count("/")), os.path.join(_work, "root"))
os.chdir(_work)
_spec = importlib.util.spec_from_file_location("_reference_verify", os.path.join(_work, "root") + {REFERENCE!r})
ref = sys.modules["_reference_verify"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)
"""
    + BIND
)

# A C extension: caller_frame() is the calling Python frame, got in C (PyEval_GetFrame), where no
# audit hook sees it; the forge then walks the frames from it.
EXTENSION_C = r"""
#include <Python.h>
static PyObject *caller_frame(PyObject *self, PyObject *unused) {
    PyObject *frame = (PyObject *)PyEval_GetFrame();
    if (frame == NULL) Py_RETURN_NONE;
    Py_INCREF(frame);
    return frame;
}
static PyMethodDef methods[] = {{"caller_frame", caller_frame, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast_verify", NULL, -1, methods};
PyMODINIT_FUNC PyInit__fast_verify(void) { return PyModule_Create(&module); }
"""
EXTENSION_CHEAT = "a C extension written to the work folder and loaded"

# pytest's Config is in module globals, its plugin manager holds the plugin that records the
# outcomes, and that plugin's closure holds its signer: a forger registered there signs a pass for
# every test. It worked while the tests ran in the submission's process (the test below shows it
# does where they do); they no longer do, so there is nothing to find.
CONFIG_ROUTE = "pytest's Config from module globals, the recorder's signer from its closure"
CONFIG_FORGE = """
import os, sys

def _find_config():
    for _finder in sys.meta_path:  # the assertion-rewriting hook
        if hasattr(_finder, "config"):
            return _finder.config
    _util = sys.modules.get("_pytest.assertion.util")
    if getattr(_util, "_config", None) is not None:
        return _util._config
    _debugging = sys.modules.get("_pytest.debugging")
    return getattr(getattr(_debugging, "pytestPDB", None), "_config", None)

_config = _find_config()
if _config is not None:
    import pytest
    _recorder = next(p for p in _config.pluginmanager.get_plugins() if getattr(p, "__name__", "") == "grading_recorder")
    _write = next(c.cell_contents for c in _recorder.pytest_runtest_protocol.__closure__ if getattr(c.cell_contents, "__name__", "") == "write")

    class _Forger:
        @pytest.hookimpl(tryfirst=True)
        def pytest_runtestloop(self, session):
            for item in session.items:
                _write({"kind": "start", "test": item.nodeid})
                _write({"kind": "outcome", "test": item.nodeid, "passed": True, "message": ""})
            _write({"kind": "done", "exit": 0})
            os._exit(0)

    _config.pluginmanager.register(_Forger(), "forger")
"""

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
    **FORGES,
    CONFIG_ROUTE: CONFIG_FORGE,
    "every way to start a thread that patches the checkers between two checks": THREADS,
    "a symbolic link out of the work folder, to the instructor's copy": SYMLINK,
    "os._exit(0) at import": "\nimport os\nos._exit(0)\n",
    "sys.exit(0) at import": "\nimport sys\nsys.exit(0)\n",
}


def _stub() -> str:
    return grader.get(NAME).stub_sources()["verify.py"]


@functools.cache
def _extension() -> bytes | None:
    """The compiled C extension (EXTENSION_C), or None where no C compiler or Python.h is here."""
    include = sysconfig.get_paths()["include"]
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None or not os.path.exists(os.path.join(include, "Python.h")):
        return None
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cheat-extension-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    source, built = os.path.join(folder, "fast.c"), os.path.join(folder, "_fast_verify.so")
    with open(source, "w", encoding="utf-8") as file:
        file.write(EXTENSION_C)
    run = subprocess.run([compiler, "-shared", "-fPIC", f"-I{include}", source, "-o", built],
                         capture_output=True, text=True)  # fmt: skip
    data = open(built, "rb").read() if run.returncode == 0 else None
    shutil.rmtree(folder, ignore_errors=True)
    return data


def _extension_cheat() -> str | None:
    """Writes the extension's bytes to the folder it runs in, loads it, and forges from the frame
    it returns."""
    data = _extension()
    if data is None:
        return None
    return f"""
import base64, importlib.machinery, importlib.util, os
_path = os.path.join(os.getcwd(), "_fast_verify" + importlib.machinery.EXTENSION_SUFFIXES[0])
with open(_path, "wb") as _file:
    _file.write(base64.b64decode({base64.b64encode(data).decode()!r}))
_spec = importlib.util.spec_from_file_location("_fast_verify", _path)
_fast = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fast)
""" + FORGES["frames walked to the recorder's signer (inspect.currentframe)"].replace(
        "inspect.currentframe()", "_fast.caller_frame()"
    )


def _needs_extension() -> str:
    code = _extension_cheat()
    if code is None:
        pytest.skip("no C compiler or Python.h here to build the extension cheat")
    return code


@functools.cache
def _reports() -> dict[str, grader.Report]:
    """Every cheat graded, two at a time (each is its own sandboxed process)."""
    cheats = dict(CHEATS)
    if _extension_cheat() is not None:
        cheats[EXTENSION_CHEAT] = _extension_cheat()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            cheat: pool.submit(grader.grade_sources, NAME, {"verify.py": _stub() + code})
            for cheat, code in cheats.items()
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


def _works_outside(source: str, folder) -> None:
    """`source`, run as a plain module in `folder` (its working folder) in the instructor's
    environment, has a working verifier."""
    (folder / "cheat.py").write_text(source, encoding="utf-8")
    code = (
        "import numpy as np, cheat\n"
        "print(cheat.acceptance_probability(np.array([0.5, 0.5]), np.array([0.25, 0.75]), 1))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == str(0.5 / 0.75), run.stderr[-2000:]


@pytest.mark.parametrize(
    "cheat",
    ["importlib from the reference file", "exec of the reference source",
     "the grader's reference_sources()",
     "a symbolic link out of the work folder, to the instructor's copy"],
)  # fmt: skip
def test_the_reference_routes_are_real_outside_the_sandbox(cheat, tmp_path):
    """The negative controls can fail: run as a plain module in the instructor's environment,
    each of these cheats does get a working verifier from the reference."""
    _works_outside(_stub() + CHEATS[cheat], tmp_path)


# The plugin of the design before: the submission was imported into the process that ran the tests,
# and this recorder (a module object in no sys.modules, its signer in its closure) wrote the verdicts.
_RECORDER_IN_THE_SAME_PROCESS = """
import json, sys, types, pytest
from _pytest.runner import runtestprotocol

def _recorder(write):
    def pytest_runtest_protocol(item, nextitem):
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        write({"kind": "outcome", "test": item.nodeid, "passed": all(r.passed for r in reports)})
        return True
    plugin = types.ModuleType("grading_recorder")
    plugin.pytest_runtest_protocol = pytest_runtest_protocol
    return plugin

def write(record):
    print("RECORD", json.dumps(record), flush=True)

pytest.main(["-q", "-p", "no:cacheprovider", "test_cheat.py"], plugins=[_recorder(write)])
"""


@pytest.mark.parametrize("cheat", [False, True], ids=["the stub", "the stub and the forge"])
def test_the_config_route_forges_every_verdict_where_the_submission_runs_beside_the_tests(
    cheat, tmp_path
):
    """The negative control of CONFIG_ROUTE: where the tests run in the submission's process and
    a plugin there records the verdicts (the grader's design before), the forge turns the stub's
    failures into passes: every verdict the submission's process reports can be forged. The
    grader now decides them in a process the submission never runs in (it scores 0 above)."""
    (tmp_path / "cheat.py").write_text(_stub() + (CONFIG_FORGE if cheat else ""), encoding="utf-8")
    (tmp_path / "test_cheat.py").write_text(
        "import numpy as np\nfrom cheat import acceptance_probability\n"
        "def test_deterministic():\n"
        "    assert acceptance_probability(np.array([0.5, 0.5]), None, 0) == 0.5\n"
        "def test_sampled():\n"
        "    assert acceptance_probability(np.array([0.5, 0.5]), np.array([0.25, 0.75]), 1) > 0.6\n",
        encoding="utf-8",
    )
    run = subprocess.run([sys.executable, "-c", _RECORDER_IN_THE_SAME_PROCESS], cwd=tmp_path,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # fmt: skip
    records = [line for line in run.stdout.splitlines() if line.startswith("RECORD")]
    outcomes = [line for line in records if '"kind": "outcome"' in line]
    passed = [line for line in outcomes if '"passed": true' in line]
    assert len(outcomes) == 2, run.stdout + run.stderr[-2000:]
    assert len(passed) == (2 if cheat else 0), run.stdout + run.stderr[-2000:]


def test_the_config_route_finds_no_config_where_the_submission_runs_now():
    """In the submission's process there is no pytest to find: the forge defines nothing and the
    stub fails every test (it imports; grading does not stop)."""
    report = _reports()[CONFIG_ROUTE]
    assert report.problem is None and report.score == 0, report.text()
    assert all("NotImplementedError" in r["message"] for r in report.results), report.text()


def test_the_extension_cheat_scores_nothing(tmp_path):
    """The sandbox refuses to load an extension module from outside the Python installation (its
    C code would run past the audit hook)."""
    _needs_extension()
    report = _reports()[EXTENSION_CHEAT]
    assert report.total > 0 and report.score == 0, report.text()
    assert "loading the extension module _fast_verify" in (report.problem or ""), report.text()


@pytest.mark.parametrize("cheat", [*FORGES, EXTENSION_CHEAT])
def test_the_forges_are_real_where_frames_can_be_walked(cheat, tmp_path):
    """Each forge, run as a plain module from inside a function shaped like the recorder's
    protocol hook (locals `write`, `item`, `expired`), signs a pass for every test: what it would
    do in a sandbox that let it walk frames."""
    code = _needs_extension() if cheat == EXTENSION_CHEAT else CHEATS[cheat]
    (tmp_path / "cheat.py").write_text(_stub() + code, encoding="utf-8")
    code = (
        "import types, cheat\n"
        "item = types.SimpleNamespace(nodeid='a')\n"
        "item.session = types.SimpleNamespace(items=[item, types.SimpleNamespace(nodeid='b')])\n"
        "def pytest_runtest_protocol(item, write=print, expired=None):\n"
        "    try:\n"
        "        cheat.verify()\n"
        "    except (TypeError, NotImplementedError):  # the stub's: the signal handler forges\n"
        "        for _ in range(10**8):\n"
        "            pass\n"
        "pytest_runtest_protocol(item)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    forged = [line for line in run.stdout.splitlines() if "'passed': True" in line]
    assert len(forged) == 2 and "'kind': 'done'" in run.stdout, run.stdout + run.stderr[-2000:]


def test_every_thread_start_is_refused_and_each_starts_outside_the_sandbox(tmp_path):
    report = _reports()["every way to start a thread that patches the checkers between two checks"]
    assert report.total > 0 and report.score == 0, report.text()
    told = report.results[0]["message"]
    assert told.count("THREAD REFUSED") == len(THREAD_STARTS), report.text()
    assert "THREAD STARTED" not in told, report.text()
    (tmp_path / "cheat.py").write_text(_stub() + THREADS, encoding="utf-8")
    code = (  # the threads flip the checkers on and off: watch until one is seen flipped
        "import time, numpy, cheat\nseen = False\nfor _ in range(4000):\n"
        "    seen = seen or numpy.allclose(0, 1)\n    if seen: break\n    time.sleep(0.0002)\n"
        "print('PATCHED:', seen)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    started = [line for line in run.stdout.splitlines() if line.startswith("THREAD STARTED")]
    assert len(started) == len(THREAD_STARTS) and "PATCHED: True" in run.stdout, run.stdout


def _student_folder(tmp_path):
    """A student folder as handed in: submission/verify.py (the stub, importing a helper) and,
    beside it, the helper, a `.pth`, a sitecustomize.py and a usercustomize.py that each load the
    reference, and the extension where it can be built."""
    submission = tmp_path / "handed-in" / "submission"
    submission.mkdir(parents=True)
    load = CHEATS["importlib from the reference file"]
    for helper in ("_helper.py", "sitecustomize.py", "usercustomize.py"):
        (submission / helper).write_text(load, encoding="utf-8")
    (submission / "cheat.pth").write_text("import _helper\n", encoding="utf-8")
    imports = "\nfrom _helper import acceptance_probability, residual, verify\n"
    if _extension() is not None:
        (submission / "_fast_verify.so").write_bytes(_extension())
    (submission / "verify.py").write_text(_stub() + imports, encoding="utf-8")
    return submission


def test_files_handed_in_beside_the_submission_are_not_graded(tmp_path):
    """Only the assignment's files (the handout's "Your files") reach the grading copy: a helper
    module, a .pth, sitecustomize.py, usercustomize.py or an extension beside them is not there,
    so the import fails. Outside the sandbox, the same folder imports the reference."""
    submission = _student_folder(tmp_path)
    report = grader.grade(NAME, submission.parent)
    assert report.total > 0 and report.score == 0, report.text()
    assert "_helper" in (report.problem or ""), report.text()
    code = (
        "import sys, numpy as np\nsys.path.insert(0, 'submission')\nimport verify\n"
        "print(verify.acceptance_probability(np.array([0.5, 0.5]), np.array([0.25, 0.75]), 1))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=submission.parent, capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == str(0.5 / 0.75), run.stderr[-2000:]


def test_a_submitted_file_that_is_a_symbolic_link_is_refused(tmp_path, capsys):
    """A link handed in as verify.py (to the instructor's copy, or to the answers, which a syntax
    error would quote) is refused before anything is read; read through, it is the reference."""
    folder = tmp_path / "handed-in"
    (folder / "submission").mkdir(parents=True)
    (folder / "submission" / "verify.py").symlink_to(REFERENCE)
    assert "def verify(" in (folder / "submission" / "verify.py").read_text()  # the control
    with pytest.raises(ValueError, match="symbolic link"):
        grader.grade(NAME, folder)
    assert main(["assignment", "grade", NAME, str(folder)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    (folder / "submission" / "verify.py").unlink()
    (folder / "submission").rmdir()
    (folder / "submission").symlink_to(os.path.dirname(REFERENCE), target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link"):  # submission/ itself a link
        grader.grade(NAME, folder)


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
        ("records forged on the grader's channel", "not a reply"),
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


def test_a_loop_in_a_test_with_its_alarm_blocked_is_stopped_and_the_rest_still_graded(monkeypatch):
    """The test process times the submission's share of each test; a submission that blocks
    SIGALRM and loops in acceptance_probability is stopped in each test that calls it (that test
    fails, naming the limit), and every other test still runs against a fresh process."""
    monkeypatch.setenv("MINIEAGLE_TEST_SECONDS", "1")
    loop = (
        "\n    import signal\n    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "    while True:\n        pass\n"
    )
    source = _stub().replace('    """min(1, p(x) / q(x)); q = None means', loop + '    """', 1)
    report = grader.grade_sources(NAME, {"verify.py": source})
    assert report.score == 0 and report.problem is None, report.text()
    stopped = [r for r in report.results if "ran over 1 s and was stopped" in r["message"]]
    graded = [r for r in report.results if "NotImplementedError" in r["message"]]
    assert stopped and graded and len(stopped) + len(graded) == len(report.results), report.text()
    assert report.results[-1] in graded, report.text()  # the tests after the loops ran
