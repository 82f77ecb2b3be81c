"""`.ci/run`: the README's test command, run as a newcomer runs it (an empty cache), failing
whenever pytest does. Checked with stand-ins for pip and pytest, which record what they got."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/bin/sh
if [ "$2" = "pytest" ]; then
    echo "cache=$MINIEAGLE_CACHE" > "$RECORD"
    [ -d "$MINIEAGLE_CACHE" ] && [ -z "$(ls -A "$MINIEAGLE_CACHE")" ] && echo empty >> "$RECORD"
    touch "$MINIEAGLE_CACHE/downloaded"
    exit "$PYTEST_EXIT"
fi
"""


@pytest.mark.parametrize("pytest_exit", [0, 1, 5])
def test_ci_runs_the_tests_in_a_new_empty_cache_and_fails_with_them(tmp_path, pytest_exit):
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    record = tmp_path / "record"
    env = dict(
        os.environ,
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        MINIEAGLE_CACHE=str(tmp_path / "warm"),  # a user's cache: CI must not use it
        RECORD=str(record),
        PYTEST_EXIT=str(pytest_exit),
    )
    done = subprocess.run([str(REPO / ".ci" / "run")], env=env, capture_output=True, text=True)
    assert done.returncode == pytest_exit  # 5, no tests collected, fails CI too
    lines = record.read_text().splitlines()
    cache = Path(lines[0].removeprefix("cache="))
    assert cache != tmp_path / "warm" and lines[1:] == ["empty"]
    assert not cache.exists()  # removed afterwards, downloads and all


def test_the_readme_says_how_ci_runs_the_tests():
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "`.ci/run` runs exactly the second command" in readme
    assert "as a newcomer runs it: with `MINIEAGLE_CACHE` pointed at a new, empty folder" in readme


def test_ci_runs_pytest_with_the_readmes_options():
    """The README's test command and `.ci/run` pass pytest the same options (`.ci/run` adds only
    -q), so that CI times and runs what a newcomer runs."""
    import re

    readme = (REPO / "README.md").read_text()
    command = re.search(r'pip install -e "\.\[dev\]" && python -m pytest(.*)\n', readme)
    assert command, "the README's test command is not where this test looks for it"
    ci = re.search(r"^python -m pytest(.*?)(#|$)", (REPO / ".ci" / "run").read_text(), re.M)
    assert ci, ".ci/run runs no `python -m pytest`"
    assert ci.group(1).split() == [*command.group(1).split(), "-q"]
