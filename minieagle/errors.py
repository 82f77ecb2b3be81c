"""The errors minieagle explains, and the exit codes of the `minieagle` command.

Every check in the package raises one of these with a message that names the bad value, what was
expected and the fix. Each also derives from the built-in exception a caller would expect
(`ValueError`, `FileNotFoundError`, `FloatingPointError`), so `except ValueError` keeps working.
The command line prints `error: <message>` and exits with `EXIT_ERROR`; anything else that
escapes is a bug in minieagle, printed with its traceback, exit `EXIT_BUG`.

Exit codes of `minieagle` (docs/cli.md):
  0    success
  1    a bug in minieagle (a traceback is printed; please report it)
  2    an error minieagle explains: bad flag or input, a missing, unreadable or corrupt file,
       a directory that cannot be written, training that diverged, not enough memory
       (argparse's own usage errors exit 2 as well)
  130  interrupted (Ctrl-C); training resumes from its last save
  141  stdout's reader went away (`minieagle ... | head`): the output stops quietly, as for a
       program that SIGPIPE ends (128 + 13)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BUG = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class MinieagleError(Exception):
    """An error whose message says what is wrong and how to fix it."""


class InvalidInputError(MinieagleError, ValueError):
    """A bad argument, flag or value, or a file whose content is not what it should be."""


class MissingFileError(MinieagleError, FileNotFoundError):
    """A file or directory that should exist does not."""


class TrainingDivergedError(MinieagleError, FloatingPointError):
    """The training loss became NaN or infinite."""
