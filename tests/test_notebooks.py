"""Every notebook runs top to bottom without a cell error.

Notebooks are jupytext py:percent sources in `notebooks/`; here each is converted in memory and
executed with nbclient in a fresh kernel of *this* interpreter, with `MINIEAGLE_FAST=1` (the
notebooks shrink their loops) and the non-interactive matplotlib backend. The notebooks assert
their own claims (cached == uncached, tree == paths, backward == finite differences), so a wrong
claim fails here as a cell error.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402 (after the skips)
from jupyter_client.manager import AsyncKernelManager  # noqa: E402
from nbclient.exceptions import (  # noqa: E402
    CellExecutionError,
    CellTimeoutError,
    DeadKernelError,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))  # not render.py
DEFAULT_TIMEOUT_S = 300  # whole notebook, kernel start included
TIMEOUT_S = {"01_tiny_llama": 120}  # 1-2 s of cells on 2 busy cores, plus kernel start


def _kernel_manager() -> AsyncKernelManager:
    """A manager for the `python3` kernel of the running interpreter.

    With no kernel directories, jupyter_client falls back to ipykernel's native spec, which
    launches `sys.executable`; an installed `python3` spec could name another Python.
    """
    specs = KernelSpecManager(kernel_dirs=[])
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=specs)


def run_notebook(path: Path, timeout_s: float) -> None:
    """Execute the py:percent notebook at `path` in its own directory; raise on any cell error
    (CellExecutionError) or when the whole run takes longer than `timeout_s` (TimeoutError)."""
    notebook = jupytext.read(path)
    client = nbclient.NotebookClient(
        notebook,
        km=_kernel_manager(),
        timeout=math.ceil(timeout_s),  # per cell; the wait_for below bounds the whole notebook
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )

    async def _execute() -> None:
        await asyncio.wait_for(client.async_execute(), timeout_s)

    start = time.monotonic()
    try:
        asyncio.run(_execute())
    except (TimeoutError, CellTimeoutError, DeadKernelError) as error:
        # Running out of time surfaces as any of these, depending on where it strikes.
        if time.monotonic() - start < timeout_s:
            raise
        raise TimeoutError(
            f"{path.name} ran past its budget of {timeout_s} s; shrink its loops in "
            f"MINIEAGLE_FAST mode or raise TIMEOUT_S[{path.stem!r}]"
        ) from error


@pytest.fixture
def notebook_env(monkeypatch):
    """FAST mode, no display, and this source tree first on the kernel's import path.

    OpenBLAS gets one thread unless told otherwise: our matrices are small, and on two busy cores
    its spinning threads made notebook 01 take 25-30 s instead of 1-2 s.
    """
    monkeypatch.setenv("MINIEAGLE_FAST", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), path])))


def test_notebooks_are_found():
    assert NOTEBOOKS, f"no notebooks/*.py found under {NOTEBOOK_DIR}"


REAL_MODEL_NOTEBOOKS = {"06_real_llm"}  # need SmolLM2 (downloaded into the cache on first use)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, notebook_env) -> None:
    if path.stem in REAL_MODEL_NOTEBOOKS and os.environ.get("MINIEAGLE_OFFLINE") == "1":
        pytest.skip("MINIEAGLE_OFFLINE=1: this notebook needs SmolLM2, which is not fetched")
    run_notebook(path, TIMEOUT_S.get(path.stem, DEFAULT_TIMEOUT_S))


def test_runner_reports_a_failing_cell(tmp_path: Path, notebook_env) -> None:
    """The harness must fail on an error in a later cell, not only on a kernel crash."""
    broken = tmp_path / "broken.py"
    broken.write_text("# %%\nimport os\nvalue = os.environ['MINIEAGLE_FAST']\n\n# %%\nassert 0\n")
    with pytest.raises(CellExecutionError, match="AssertionError"):
        run_notebook(broken, 60)


def test_runner_uses_this_interpreter_and_source_tree(tmp_path: Path, notebook_env) -> None:
    fine = tmp_path / "fine.py"
    fine.write_text(
        "# %%\nimport os\nimport sys\n\nimport minieagle\n\n"
        "assert os.environ['MINIEAGLE_FAST'] == '1'\n"
        "assert os.environ['MPLBACKEND'] == 'Agg'\n"
        f"assert sys.executable == {sys.executable!r}, sys.executable\n"
        f"assert minieagle.__file__.startswith({str(ROOT)!r}), minieagle.__file__\n"
    )
    run_notebook(fine, 60)


def test_runner_enforces_the_notebook_budget(tmp_path: Path, notebook_env) -> None:
    """Cells that are each quick but together too slow still fail."""
    slow = tmp_path / "slow.py"
    slow.write_text("# %%\nimport time\n\ntime.sleep(1)\n" + "\n# %%\ntime.sleep(1)\n" * 3)
    with pytest.raises(TimeoutError, match="budget of 2 s"):
        run_notebook(slow, 2)
