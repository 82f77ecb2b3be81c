"""Import a student's files in place of minieagle's own modules.

`install(folder)` puts a finder first on `sys.meta_path`: for every `folder/<path>.py` it makes
`import minieagle.<path as dotted name>` load that file instead of the library's. Everything else,
including the library modules that import the replaced one, comes from the installed minieagle, so a
student's verifier is the one `generate` calls.

It must run before the replaced modules are first imported (a test folder's conftest.py does it);
if one was imported already, `install` refuses rather than test the library's code by mistake.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

PACKAGE = "minieagle"


def module_name(relative: str | Path) -> str:
    """'drafters/eagle1.py' -> 'minieagle.drafters.eagle1'."""
    parts = Path(relative).with_suffix("").parts
    return ".".join((PACKAGE, *parts))


class _SubmissionFinder(importlib.abc.MetaPathFinder):
    def __init__(self, files: dict[str, Path]):
        self.files = files

    def find_spec(self, fullname, path=None, target=None):
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


def install(folder: str | Path) -> dict[str, Path]:
    """Make every `folder/**/*.py` stand in for the minieagle module of the same relative path.

    Returns {module name: file}. Raises RuntimeError if a module to replace is already imported.
    """
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"submission folder {folder} does not exist; pass the folder of .py files"
        )
    files = {
        module_name(file.relative_to(folder)): file
        for file in sorted(folder.rglob("*.py"))
        if "__pycache__" not in file.parts
    }
    early = sorted(name for name in files if name in sys.modules)
    if early:
        raise RuntimeError(
            f"{', '.join(early)} imported before the submission overlay was installed; "
            "install it first (in conftest.py, before anything imports minieagle's modules)"
        )
    sys.meta_path.insert(0, _SubmissionFinder(files))
    return files
