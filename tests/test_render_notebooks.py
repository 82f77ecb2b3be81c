"""`python notebooks/render.py` executes notebooks and publishes them as self-contained HTML.

Each test runs the command as a user does, in a subprocess, on a tiny notebook written to
tmp_path, in --fast mode: a page holds the cells' printed output and figures as embedded PNGs,
and a failing cell makes the command exit non-zero, naming the notebook and the cell.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jupytext")
pytest.importorskip("nbclient")
pytest.importorskip("nbconvert")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
RENDER = ROOT / "notebooks" / "render.py"

TINY = """# %% [markdown]
# # A tiny notebook

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt

import minieagle

assert os.environ["MINIEAGLE_FAST"] == "1"
assert os.environ["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
assert Path.cwd() == Path({cwd!r})  # the notebook's own directory
assert minieagle.__file__.startswith({root!r}), minieagle.__file__
print("printed by cell one:", 6 * 7)

# %%
plt.plot([0, 1, 2], [2, 0, 1])
plt.xlabel("x")
plt.ylabel("y")
plt.title("three points")
plt.show()
"""

BROKEN = """# %%
value = 1

# %%
assert value == 2, "value is not two"
"""


def render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RENDER), *args], capture_output=True, text=True, timeout=300
    )


def test_a_page_holds_the_printed_output_and_an_embedded_figure(tmp_path: Path) -> None:
    notebook = tmp_path / "tiny.py"
    notebook.write_text(TINY.format(root=str(ROOT), cwd=str(tmp_path.resolve())))
    out = tmp_path / "out"
    done = render("--fast", "--out", str(out), str(notebook))
    assert done.returncode == 0, done.stderr
    page = (out / "tiny.html").read_text()
    assert "printed by cell one: 42" in page
    assert re.search(r'<img[^>]*src="data:image/png;base64,', page), "no embedded PNG figure"
    assert "<script" not in page  # self-contained: no CDN scripts (require.js, MathJax, Mermaid)
    assert "<title>A tiny notebook</title>" in page
    manifest = json.loads((out / "index.json").read_text())
    assert manifest["tiny"]["mode"] == "fast" and manifest["tiny"]["seconds"] > 0
    index = (out / "index.html").read_text()
    assert 'href="tiny.html"' in index and "<td>fast</td>" in index


def test_a_failing_cell_exits_nonzero_naming_the_notebook_and_cell(tmp_path: Path) -> None:
    """The negative control: the error is reported, not published."""
    notebook = tmp_path / "broken.py"
    notebook.write_text(BROKEN)
    out = tmp_path / "out"
    done = render("--fast", "--out", str(out), str(notebook))
    assert done.returncode == 1
    assert "broken: cell 2 (code cell 2)" in done.stderr, done.stderr
    assert "AssertionError: value is not two" in done.stderr
    assert not (out / "broken.html").exists()


def test_an_unknown_notebook_name_is_a_usage_error(tmp_path: Path) -> None:
    done = render("--fast", "--out", str(tmp_path), "no_such_notebook")
    assert done.returncode == 2
    assert "no notebook 'no_such_notebook'" in done.stderr
    assert "01_tiny_llama" in done.stderr  # the error lists the names that exist
