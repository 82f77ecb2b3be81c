"""Publish the notebooks as HTML: execute each one in a fresh kernel, then export it.

Usage (from anywhere):

    python notebooks/render.py [--fast] [--out docs/notebooks] [--timeout S] [names...]

`names` are notebook stems (`01_tiny_llama`), file names or paths to py:percent files; none means
every `notebooks/NN_*.py`. Each notebook runs in full mode (`--fast` sets `MINIEAGLE_FAST=1`, as
the test suite does) with nbclient, in a fresh kernel of the running interpreter (the kernel
manager of `tests/test_notebooks.py`, so both run notebooks the same way), in its own directory,
with this source tree first on `PYTHONPATH`, the inline matplotlib backend (figures become PNGs
in the page) and `OPENBLAS_NUM_THREADS=1` unless the environment sets it.

Writes `OUT/<stem>.html` (nbconvert's lab template, CSS and images inline, no script tags: the
page needs no network; MathJax is linked only for a notebook whose markdown has TeX math),
`OUT/index.json` (title, run date, mode and run time of each page) and `OUT/index.html` listing
them. A notebook whose cell fails gets no page; the command goes on with the others, then names
each failed notebook and cell on stderr and exits with 1.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import html
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "docs" / "notebooks"
DEFAULT_TIMEOUT_S = 3600  # per cell; a full-mode cell of notebook 06 takes minutes
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

# nbconvert's lab template without its script tags: require.js (unused: no JavaScript outputs),
# Mermaid (no diagrams) and MathJax unless the notebook's markdown has TeX math.
TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}
{%- if resources.needs_mathjax -%}{{ super() }}{%- endif -%}
{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
TEX_MATH = re.compile(r"\$[^$\n]+\$|\\\(|\\\[")
CODE_SPAN = re.compile(r"`[^`\n]*`")


class NotebookFailed(Exception):
    """A notebook that did not run to the end; the message names it and the cell."""


def notebook_paths(names) -> list[Path]:
    """The notebooks to render: every `notebooks/NN_*.py` when `names` is empty, else each name
    as a stem or file name in notebooks/, or a path to a .py file."""
    if not names:
        return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
    paths = []
    for name in names:
        candidates = [Path(name), NOTEBOOK_DIR / name, NOTEBOOK_DIR / f"{name}.py"]
        found = next((p for p in candidates if p.suffix == ".py" and p.is_file()), None)
        if found is None:
            known = ", ".join(p.stem for p in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py")))
            raise ValueError(
                f"no notebook {name!r}; pass a stem from notebooks/ ({known}) or a path to a "
                "py:percent .py file"
            )
        paths.append(found.resolve())
    return paths


def kernel_env(fast: bool) -> dict[str, str]:
    """The environment of the notebook's kernel: this one, plus the settings the notebooks
    expect (the tree first on the import path, inline figures, one BLAS thread by default)."""
    env = dict(os.environ)
    if fast:
        env["MINIEAGLE_FAST"] = "1"
    else:
        env.pop("MINIEAGLE_FAST", None)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    # tqdm.auto, imported by minieagle, warns in every kernel without ipywidgets that it falls
    # back to text bars: a note about the rendering machine, not about the notebook.
    warnings = [env.get("PYTHONWARNINGS"), "ignore:IProgress not found"]
    env["PYTHONWARNINGS"] = ",".join(filter(None, warnings))
    env["MPLBACKEND"] = INLINE_BACKEND
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@functools.cache
def _kernel_manager_factory():
    """tests/test_notebooks.py's `_kernel_manager` (the `python3` kernel of this interpreter),
    loaded from that file so that the tests and the published pages start kernels one way."""
    spec = importlib.util.spec_from_file_location(
        "_minieagle_notebook_tests", ROOT / "tests" / "test_notebooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # ImportError, or pytest's Skipped from importorskip
        raise ImportError(
            f"cannot load the notebook kernel manager from tests/test_notebooks.py ({error!r}); "
            'install the development extras: pip install -e ".[dev]"'
        ) from error
    return module._kernel_manager


def _failed_cell(notebook) -> str:
    """'cell i (code cell k), which starts ...' for the first cell with an error output."""
    code_cells = 0
    for i, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        code_cells += 1
        if any(out.get("output_type") == "error" for out in cell.get("outputs", [])):
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            return f"cell {i} (code cell {code_cells}), which starts {first!r},"
    return "a cell"


def execute(path: Path, fast: bool, timeout_s: float):
    """Run the py:percent notebook at `path` top to bottom in a fresh kernel, in its own
    directory. Returns (the notebook with its outputs, seconds); raises NotebookFailed."""
    import jupytext
    import nbclient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    notebook = jupytext.read(path)
    client = nbclient.NotebookClient(
        notebook,
        km=_kernel_manager_factory()(),
        timeout=int(timeout_s),
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.monotonic()
    try:
        # cleanup_kc: shut the kernel down after the run; a client given a kernel manager keeps
        # it alive by default, and a full render would hold every notebook's kernel at once.
        client.execute(env=kernel_env(fast), cleanup_kc=True)
    except CellExecutionError as error:
        raise NotebookFailed(
            f"{path.stem}: {_failed_cell(notebook)} raised {error.ename}: {error.evalue}"
        ) from error
    except (CellTimeoutError, DeadKernelError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise NotebookFailed(
            f"{path.stem}: {type(error).__name__} ({first_line}); a cell ran past --timeout "
            f"{timeout_s:g} s or the kernel died"
        ) from error
    return notebook, time.monotonic() - start


def title_of(notebook, default: str) -> str:
    """The first markdown heading of the notebook, else `default`."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return default


def needs_mathjax(notebook) -> bool:
    """True when some markdown cell has TeX math outside code spans."""
    return any(
        TEX_MATH.search(CODE_SPAN.sub("", cell.source))
        for cell in notebook.cells
        if cell.cell_type == "markdown"
    )


def to_html(notebook, path: Path, title: str) -> str:
    """The executed notebook as one self-contained HTML page."""
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        template_file="minieagle.html.j2",
        extra_loaders=[jinja2.DictLoader({"minieagle.html.j2": TEMPLATE})],
        embed_images=True,
    )
    notebook.metadata["title"] = title
    resources = {
        "metadata": {"name": path.stem, "path": str(path.parent)},
        "needs_mathjax": needs_mathjax(notebook),
    }
    page, _ = exporter.from_notebook_node(notebook, resources=resources)
    return page


def _write_text(path: Path, text: str) -> None:
    """Write atomically: a reader never sees half a page."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def write_index(out: Path, manifest: dict) -> None:
    """index.html: one row per page in `manifest` whose HTML exists, by stem."""
    rows = []
    for stem, entry in sorted(manifest.items()):
        if not (out / f"{stem}.html").is_file():
            continue
        rows.append(
            "<tr>"
            f'<td><a href="{html.escape(stem)}.html">{html.escape(entry["title"])}</a></td>'
            f"<td>{html.escape(entry['date'])}</td><td>{html.escape(entry['mode'])}</td>"
            f"<td>{entry['seconds']:.1f} s</td></tr>"
        )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>minieagle notebooks</title>
<style>
body {{ font-family: sans-serif; max-width: 60em; margin: 2em auto; }}
table {{ border-collapse: collapse; }}
td, th {{ border-bottom: 1px solid #ccc; padding: 0.3em 1em; text-align: left; }}
</style>
</head>
<body>
<h1>minieagle notebooks</h1>
<p>Each page is a notebook of <code>notebooks/</code> executed top to bottom by
<code>python notebooks/render.py</code>. Mode <em>full</em> runs every loop at its full size;
<em>fast</em> is the shortened run the test suite uses (<code>MINIEAGLE_FAST=1</code>).</p>
<table>
<tr><th>notebook</th><th>run date (UTC)</th><th>mode</th><th>run time</th></tr>
{chr(10).join(rows)}
</table>
</body>
</html>
"""
    _write_text(out / "index.html", page)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python notebooks/render.py",
        description="Execute notebooks and write them as HTML pages with an index.",
    )
    parser.add_argument("names", nargs="*", help="notebook stems or paths (default: all)")
    parser.add_argument("--fast", action="store_true", help="MINIEAGLE_FAST=1: short loops")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds allowed per cell"
    )
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout {args.timeout:g} must be positive, e.g. {DEFAULT_TIMEOUT_S}")
    try:
        paths = notebook_paths(args.names)
    except ValueError as error:
        parser.error(str(error))

    from tqdm import tqdm

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "index.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    mode = "fast" if args.fast else "full"
    failures = []
    progress = tqdm(paths, desc="render", unit="notebook", file=sys.stderr)
    for path in progress:
        progress.set_postfix_str(path.stem)
        try:
            notebook, seconds = execute(path, args.fast, args.timeout)
        except NotebookFailed as failure:
            failures.append(str(failure))
            progress.write(f"render: {failure}", file=sys.stderr)
            continue
        title = title_of(notebook, path.stem)
        _write_text(out / f"{path.stem}.html", to_html(notebook, path, title))
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
        manifest[path.stem] = {"title": title, "date": date, "mode": mode, "seconds": seconds}
        _write_text(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        progress.write(f"render: {path.stem} ({mode}) ran in {seconds:.1f} s -> {out}")
    write_index(out, manifest)
    if failures:
        print(f"render: {len(failures)} of {len(paths)} notebook(s) failed:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
