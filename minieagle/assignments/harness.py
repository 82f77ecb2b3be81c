"""The submission's process: imports a submission in a sandbox and runs its functions on request.

The tests do not run here. `runner.py` runs them in a trusted process that never imports the
submission, with each graded function replaced by a forwarder; this process is where the
forwarded calls land. `runner.py` starts it in a fresh interpreter (`python -I -S`, an explicit
`sys.path` holding only a student edition of the package with the submission in place and the
dependencies) and writes a JSON spec to its standard input. Before anything of the submission is
imported, `main`:

1. reads the spec (the grading copy, the work folder, the submission's files and modules, the
   file descriptor replies go to);
2. installs an audit hook (PEP 578) that refuses, from then on, to open a file outside the
   grading copy, the work folder and the Python installation (never the instructor's copy or the
   tests; links followed first), to change a file outside the work folder, to load code from the
   work folder or an extension module from outside the installation, and refuses to the
   submission's code (its files, and any code not from a file of the copy or the installation)
   introspection and escape routes: frames, `gc`, `exec`, `compile` and `marshal`, `ctypes`,
   processes, signals to others, tracing, new audit hooks;
3. imports the library modules the tests use and takes a snapshot of them; then disables
   starting threads and installing signal handlers, and stops reading bytecode;
4. imports the submission's modules and says whether that worked (the exception if not);
5. serves the test process's requests (`remote.py`): call a graded function with these
   arguments, read or call something of an object it returned; and at the end of each test,
   checks the snapshot and forgets every object handed out.

Nothing here decides a verdict: it only computes values, which cross as plain data or handles
(`remote.py`), and the test process checks them. The sandbox is a defence in depth: it keeps the
instructor's copy, the reference and the hidden tests out of reach and stops the submission from
hiding its work (threads, frames), but a submission that escaped it would still only control
the values its functions return. docs/assignments.md has the threat model.
"""

from __future__ import annotations

import _imp
import _signal
import _thread
import ast
import importlib
import importlib.util
import json
import os
import signal
import stat
import sys
import threading
import types

from minieagle.assignments import remote

_READ_ONLY_DEVICES = ("/dev/null", "/dev/urandom", "/proc/cpuinfo", "/proc/meminfo")
# refused to the submission's own call (the library does them legitimately: dataclasses exec,
# imports compile)
_NOT_BY_SUBMISSION = ("exec", "compile", "object.__getattr__")
# refused while the submission is anywhere on the stack (no test needs them)
_NOT_UNDER_SUBMISSION = (
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg", "signal.pthread_kill",
    "socket.connect", "socket.bind", "ctypes.dlopen", "sys._current_frames", "code.__new__",
    "marshal.loads", "marshal.load",
)  # fmt: skip
# a frame leads (f_back, f_locals) to the recorder's and the signer's: while the submission is on
# the stack no code gets one, except these modules, which read only their caller's module name
_FRAME_ATTRIBUTES = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
_FRAME_READERS = ("collections", "typing", "typing_extensions", "enum")
# extension modules that run code outside this interpreter's audit hook, or test CPython itself
_REFUSED_EXTENSIONS = ("_xxsubinterpreters", "_xxinterpchannels", "_test", "xx")
# path operations: allowed in the work folder only (listing: where reading is allowed)
_CHANGES = (
    "os.symlink", "os.link", "os.rename", "os.remove", "os.rmdir", "os.chmod", "os.chown",
    "os.truncate", "os.mkdir", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move",
)  # fmt: skip
_LISTINGS = ("os.listdir", "os.scandir")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# what the library and the channel run on here (a changed attribute fails the tests after it)
_WATCHED_PREFIXES = ("numpy", "minieagle", "json")
_WATCHED_MODULES = ("builtins", "math", "operator", "functools", "os", "posixpath", "select")


class Refused(PermissionError):
    """An operation the grading sandbox does not allow (see the module docstring)."""


def _policy(spec: dict):
    """The audit hook for `spec`: a closure (event, args) that raises Refused."""
    # captured now: a submission that replaces them later changes nothing here
    getframe, fspath, getcwd = sys._getframe, os.fspath, os.getcwd
    encoding = sys.getfilesystemencoding()
    isinstance_, any_, hasattr_, len_, refused = isinstance, any, hasattr, len, Refused
    str_, bytes_, int_ = str, bytes, int
    lstat, readlink, is_link = os.lstat, os.readlink, stat.S_ISLNK
    watched = frozenset(
        ("open", "import", "sys._getframe", *_NOT_BY_SUBMISSION, *_NOT_UNDER_SUBMISSION,
         *_CHANGES, *_LISTINGS)
    )  # fmt: skip
    not_by, not_under, changes, listings = (
        frozenset(_NOT_BY_SUBMISSION), frozenset(_NOT_UNDER_SUBMISSION), frozenset(_CHANGES),
        frozenset(_LISTINGS),
    )  # fmt: skip
    devices, write_flags = frozenset(_READ_ONLY_DEVICES), _WRITE_FLAGS
    copy, work = spec["copy"], spec["work"]
    python, linked = tuple(spec["python_paths"]), frozenset(spec["linked_data"])
    frame_attributes, refused_extensions = _FRAME_ATTRIBUTES, _REFUSED_EXTENSIONS
    frame_readers = frozenset(
        found.origin for found in map(importlib.util.find_spec, _FRAME_READERS) if found is not None
    )
    denied_names = ("minieagle", "__editable__", "_minieagle")
    submission = frozenset(spec["submission_files"])
    inside = [False]  # the hook's own getframe call must not recurse into it
    known: dict = {}  # file name -> whether its code is the submission's (see untrusted)
    bottom = getframe(1)  # main's: the stack below it is the interpreter's start (python -c)

    def absolute(path) -> str:
        """The absolute, lexically normalised path (os.path.abspath, from C functions only)."""
        path = fspath(path)
        if isinstance_(path, bytes_):
            path = path.decode(encoding, "surrogateescape")
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        parts = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def resolved(path) -> str:
        """The absolute path with every symbolic link followed (os.path.realpath, from C
        functions only): a link cannot lead a checked path out of the allowed roots."""
        parts, done, links = absolute(path).split("/"), "", 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                done = done.rsplit("/", 1)[0]
                continue
            candidate = done + "/" + part
            try:
                mode = lstat(candidate).st_mode
            except OSError:  # not there (yet): nothing to follow
                done = candidate
                continue
            if not is_link(mode):
                done = candidate
                continue
            links += 1
            if links > 40:
                raise refused(f"{path} has more than 40 symbolic links in a row")
            target = readlink(candidate)
            if target.startswith("/"):
                done = ""
            parts[:0] = target.split("/")
        return done or "/"

    def under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def caller_file(depth: int = 3) -> str:
        return getframe(depth).f_code.co_filename  # 0: here, 1: check, 2: hook, 3: the caller

    def untrusted(filename: str) -> bool:
        """Code of the submission: its files, and any code not from a file of the grading copy,
        or the Python installation (made from a string by `typing`, `timeit` or a
        `.pth`, say, for the submission). Remembered per file name."""
        verdict = known.get(filename)
        if verdict is None:
            if filename in submission or not filename.startswith(("/", "<frozen ")):
                verdict = True
            elif filename.startswith("<frozen "):
                verdict = False
            else:
                path = resolved(filename)
                verdict = not (under(path, copy) or in_python(path))
            known[filename] = verdict
        return verdict

    def from_submission(anywhere: bool, depth: int = 3) -> bool:
        """Whether the submission's code made this call: directly (the caller's frame is the
        submission's) or, with `anywhere`, from any depth (the submission is on the stack).
        `depth`: the caller's frame, counted from here (3 from `check`)."""
        frame = getframe(depth)
        while frame is not None and frame is not bottom:
            if untrusted(frame.f_code.co_filename):
                return True
            if not anywhere:
                return False
            frame = frame.f_back
        return False

    def in_python(path: str) -> bool:
        for root in python:
            if under(path, root):  # not minieagle's install, its .pth or their __pycache__
                parts = path[len_(root) :].lstrip("/").split("/")
                return not any_(p.startswith(denied_names) for p in parts)
        return False

    def readable(path: str) -> bool:
        if under(path, copy) or under(path, work) or path in devices:
            return True
        return path in linked or in_python(path)

    def read(path: str) -> None:
        if not readable(path) or path.endswith(".pth"):  # a .pth runs its lines (site.py)
            raise refused(f"reading {path} is not allowed while grading")
        if under(path, work) and (
            caller_file(4).startswith("<frozen ")  # importlib or zipimport loading code
            or (from_submission(True, 4) and not from_submission(False, 4))
        ):  # code written there by the submission would run as nobody's (see from_submission)
            raise refused(f"loading {path}, a file written while grading, is not allowed")

    def load_extension(name: str, path: str) -> None:
        """Refused: an extension module from outside the Python installation (C code runs
        unchecked) or one of `refused_extensions`."""
        if not in_python(path) or name.rsplit(".", 1)[-1].startswith(refused_extensions):
            raise refused(f"loading the extension module {name} ({path}) is not allowed here")

    def compiled(filename) -> None:
        """Refused: compiling a file of the work folder ('<string>' names none)."""
        if not isinstance_(filename, (str_, bytes_)):
            return
        path = resolved(filename)
        try:
            lstat(path)
        except OSError:
            return
        if under(path, work):
            raise refused(f"compiling {filename}, a file written while grading, is not allowed")

    def write(path: str) -> None:
        if not (under(path, work) or path == "/dev/null"):
            raise refused(f"changing {path} is not allowed while grading (only under {work})")

    def paths(args) -> list:
        return [
            resolved(a) for a in args if isinstance_(a, (str_, bytes_)) or hasattr_(a, "__fspath__")
        ]

    def check(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance_(path, int_):
                if path > 2:
                    raise refused(f"opening file descriptor {path} is not allowed here")
                return
            path = resolved(path)
            if any_(c in (mode or "") for c in "wax+") or (flags or 0) & write_flags:
                write(path)
            read(path)
        elif event in listings:
            for path in paths(args[:1]) or [getcwd()]:
                read(path)
        elif event in changes:
            for path in paths(args):
                write(path)
        elif event == "import":
            name, filename = args[0], args[1]
            if filename is not None:
                load_extension(str_(name), resolved(filename))
        elif event in not_under:
            if from_submission(anywhere=True):
                raise refused(f"{event} is not allowed in a submission")
        elif event == "sys._getframe" or (
            event == "object.__getattr__" and args[1] in frame_attributes
        ):
            caller = caller_file()
            if from_submission(anywhere=True) and caller not in frame_readers:
                raise refused(f"{event} is not allowed while a submission runs ({caller})")
        elif event == "compile" and len_(args) > 1:
            if from_submission(anywhere=False):
                raise refused("compile is not allowed in a submission")
            compiled(args[1])
        elif event in not_by and from_submission(anywhere=False):
            raise refused(f"{event} is not allowed in a submission")

    def hook(event: str, args: tuple) -> None:
        if inside[0] or (event not in watched and not event.startswith("ctypes.")):
            return
        inside[0] = True
        try:
            check("ctypes.dlopen" if event.startswith("ctypes.") else event, args)
        finally:
            inside[0] = False

    return hook


def _checker(exclude, files):
    """check() -> the watched attributes that changed since the snapshot, or now hold a function
    of the submission their module does not import (a replaced checker, decode loop, signer);
    take() adds the modules imported since. Closures over builtins taken now."""
    modules, vars_, id_, isinstance_, getattr_ = sys.modules, vars, id, isinstance, getattr
    sorted_, list_, set_, type_ = sorted, list, set, type
    ModuleType, CodeType, compile_, open_ = types.ModuleType, types.CodeType, compile, open
    only_ast, ImportFrom, AST = ast.PyCF_ONLY_AST, ast.ImportFrom, ast.AST
    prefixes, names_alone = _WATCHED_PREFIXES, frozenset(_WATCHED_MODULES)
    exclude, files = frozenset(exclude), frozenset(files)
    before: dict = {}
    imported_by: dict = {}

    def watched() -> list:
        return sorted_(
            name
            for name in list_(modules)
            if name not in exclude and (name in names_alone or name.startswith(prefixes))
        )

    def snapshot(names) -> dict:
        ids = {}
        for name in names:
            module = modules.get(name)
            if module is None:
                continue
            for attribute, value in list_(vars_(module).items()):
                if attribute.startswith("__") or isinstance_(value, ModuleType):
                    continue  # a package gains its submodules as they are imported
                ids[name, attribute] = id_(value)
                if isinstance_(value, type_) and getattr_(value, "__module__", None) == name:
                    for inner, member in list_(vars_(value).items()):
                        if not inner.startswith("__"):
                            ids[name, attribute, inner] = id_(member)
        return ids

    def imported_names(module) -> set:
        """The names a module's source binds with `from ... import` (its own walk of the AST)."""
        try:
            with open_(module.__file__, encoding="utf-8") as file:
                nodes = [compile_(file.read(), module.__file__, "exec", only_ast)]
        except (OSError, TypeError, SyntaxError, AttributeError, ValueError):
            return set_()
        names = set_()
        while nodes:
            node = nodes.pop()
            if isinstance_(node, ImportFrom):
                names.update(alias.asname or alias.name for alias in node.names)
            for field in node._fields:
                value = getattr_(node, field, None)
                if isinstance_(value, AST):
                    nodes.append(value)
                elif isinstance_(value, list_):
                    nodes.extend(v for v in value if isinstance_(v, AST))
        return names

    def held_from_submission() -> list:
        found = []
        for name in watched():
            module = modules[name]
            for attribute, value in list_(vars_(module).items()):
                code = getattr_(getattr_(value, "__func__", value), "__code__", None)
                if not isinstance_(code, CodeType) or code.co_filename not in files:
                    continue
                if name not in imported_by:
                    imported_by[name] = imported_names(module)
                if attribute not in imported_by[name]:
                    found.append(f"{name}.{attribute}")
        return found

    def take() -> None:
        now = snapshot(watched())
        for key, value in now.items():
            before.setdefault(key, value)

    def check() -> list:
        now = snapshot({key[0] for key in before})
        changed = [".".join(key) for key, value in before.items() if now.get(key) != value]
        return sorted_(set_(changed + held_from_submission()))

    return take, check


class _Blocker:
    """A finder that refuses the submission's modules: see `_import_independent_modules`."""

    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.names:
            raise ImportError(f"{fullname} is the submission's")
        return None


def _import_independent_modules(names, submission_modules) -> None:
    """Import numpy and the minieagle modules `names` (those the tests use) that do not import
    the submission, before the submission: they enter the snapshot untouched, so a submission
    that replaces one of their functions (a checker, `numpy.allclose`) is caught."""
    import numpy  # noqa: F401

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


def _refuse_threads() -> None:
    """No thread can start from here on (one could patch what the tests check between two
    tamper checks, and put it back): the start functions of `_thread` and `threading` refuse, and
    nothing keeps the originals. `_imp.create_builtin` is removed once every built-in module is
    imported, so no fresh `_thread` can be made (`importlib.reload` keeps the same module)."""
    for name in sys.builtin_module_names:
        __import__(name)

    def start_new_thread(*args, **kwargs):
        raise Refused("starting a thread is not allowed while grading; compute in the caller")

    _thread.start_new_thread = _thread.start_new = start_new_thread
    threading._start_new_thread = start_new_thread
    del _imp.create_builtin


def _refuse_signal_handlers() -> None:
    """No signal handler can be installed from here on (a handler is given the frame that was
    running, and the frames lead to the recorder): the recorder keeps the function it took."""

    def refused_signal(*args, **kwargs):
        raise Refused("installing a signal handler is not allowed while grading")

    signal.signal = _signal.signal = refused_signal


def _read_spec(fd: int) -> dict:
    """The spec: 8 bytes of length, then JSON, read from `fd` with nothing read past it (the
    requests follow on the same descriptor)."""
    data = b""
    while len(data) < 8:
        chunk = os.read(fd, 8 - len(data))
        if not chunk:
            raise SystemExit("no spec on standard input")
        data += chunk
    length, data = int.from_bytes(data, "big"), b""
    while len(data) < length:
        chunk = os.read(fd, length - len(data))
        if not chunk:
            raise SystemExit("the spec on standard input was cut short")
        data += chunk
    return json.loads(data)


def _server(spec: dict, check):
    """The connection that serves the test process: calls of the graded functions (by module
    and qualified name, in the submission's modules only) and, at each test's end ("reset"), the
    snapshot check."""
    modules = frozenset(spec["submission_modules"])
    getattr_, import_module = getattr, importlib.import_module

    def call(target, args, kwargs):
        module_name, qualname = target
        if module_name not in modules:
            raise remote.ProtocolError(f"{module_name} is not a module of the submission")
        found = import_module(module_name)
        for part in qualname.split("."):
            try:
                found = getattr_(found, part)
            except AttributeError:
                raise AttributeError(
                    f"the submission's {module_name} has no {qualname}; keep the functions' "
                    "names and signatures as the handout gives them"
                ) from None
        return found(*args, **kwargs)

    connection = remote.Connection(0, spec["reply_fd"], serve_call=call)
    connection.on_reset = check
    return connection


def main() -> None:
    spec = _read_spec(0)
    sys.stdin = None  # fd 0 carries the requests; nothing else reads it
    sys.addaudithook(_policy(spec))
    _import_independent_modules(spec["preload"], spec["submission_modules"])
    _refuse_threads()
    take, check = _checker(spec["submission_modules"], spec["submission_files"])
    take()  # nothing of the submission imported yet
    _refuse_signal_handlers()
    # no bytecode is read from here on: every module is compiled from its source, whose file the
    # audit hook checks, so `marshal` is refused while the submission runs (a code object
    # unmarshalled from its bytes could claim any file name)
    sys.pycache_prefix = os.path.join(spec["work"], ".no-bytecode")
    flush, leave = sys.stdout.flush, os._exit
    connection = _server(spec, check)
    try:
        for name in spec["submission_modules"]:
            importlib.import_module(name)
    except BaseException as error:  # noqa: BLE001 - whatever stops the import is reported
        connection.send({"kind": "import_error", "message": f"{type(error).__name__}: {error}"})
        flush()
        leave(0)
    tampered = check()
    take()  # modules the submission imported join the snapshot
    connection.send({"kind": "ready", "message": ", ".join(tampered)})
    try:
        while True:
            message = connection.receive()
            if message.get("kind") != "request":
                break
            connection.serve(message)
    except remote.Stopped:  # the test process closed the channel: grading is over
        pass
    flush()
    leave(0)


if __name__ == "__main__":
    main()
