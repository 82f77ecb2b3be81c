"""The package's layers point down: no module of `minieagle` imports, directly or through
others, a module that imports it back (docs/architecture.md, "Layers").

Imports inside functions count too. A deferred import hides a circle from Python's loader but
not from a reader: the two modules still cannot be understood, tested or replaced one without
the other, and moving the import to the top would break. Imports under `if TYPE_CHECKING:`
count as well, for the same reason. What does not count: a module's implicit dependency on its
own parent package (`minieagle.drafters.eagle1` does not "import" `minieagle.drafters`'s
`__init__` in this graph), because a package's `__init__` building its submodules
(`build_drafter`) is the usual shape of a factory, not a circle a reader trips over.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import minieagle

PACKAGE_DIR = Path(minieagle.__file__).parent


def module_name(path: Path, root: Path = PACKAGE_DIR) -> str:
    """'minieagle.drafters.eagle2' for root/drafters/eagle2.py, 'minieagle.cli' for
    root/cli/__init__.py."""
    parts = ("minieagle", *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in `source` (top level,
    inside functions, relative or absolute). `from a import b` names the module a.b when that
    is a module, else the module a."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..y import z
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """{module: the package modules it imports} for every .py file under root."""
    files = {module_name(f, root): f for f in sorted(root.rglob("*.py"))}
    known = set(files)
    return {
        name: imported_modules(f.read_text(), name, f.name == "__init__.py", known)
        for name, f in files.items()
    }


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a list of modules, first == last) per strongly connected component of more
    than one module, or of one module importing itself; [] when the graph is layered."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(v: str) -> None:  # Tarjan's algorithm; the package is far shallower than the limit
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles inside minieagle (layers must point down):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The checker catches a cycle made of a top-level import and an import inside a function,
    a relative import, and a `from package import module` form."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from minieagle.high import g\n")
    (pkg / "high.py").write_text("from minieagle import low\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("from ..sub.a import x\n")
    graph = import_graph(pkg)
    assert graph["minieagle.high"] == {"minieagle", "minieagle.low"}  # the package's __init__ too
    assert graph["minieagle.low"] == {"minieagle.high"}
    assert graph["minieagle.sub.a"] == {"minieagle.sub", "minieagle.sub.b"}
    assert graph["minieagle.sub.b"] == {"minieagle.sub.a"}
    cycles = sorted(find_cycles(graph))
    assert cycles == [
        ["minieagle.high", "minieagle.low", "minieagle.high"],
        ["minieagle.sub.a", "minieagle.sub.b", "minieagle.sub.a"],
    ]


@pytest.mark.parametrize("edges", [{"a": {"b"}, "b": {"c"}, "c": set()}, {"a": set()}])
def test_a_layered_graph_has_no_cycle(edges):
    assert find_cycles(edges) == []


def test_a_module_importing_itself_is_a_cycle():
    assert find_cycles({"a": {"a"}}) == [["a", "a"]]
