"""The fusebench package imports in one direction: no module imports, at module level or inside a
function, one that imports it back (directly or through others). Read from the source files with
ast, so an import deferred into a function to hide a circle counts like any other."""

from __future__ import annotations

import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "fusebench"


def module_names(package: pathlib.Path) -> dict[str, pathlib.Path | None]:
    """Every module of the package: its .py files, and the compiled extensions that the CMake file
    beside it builds (nanobind_add_module), which have no source to read here."""
    names: dict[str, pathlib.Path | None] = {}
    for path in sorted(package.glob("*.py")):
        names["fusebench" if path.stem == "__init__" else f"fusebench.{path.stem}"] = path
    cmake = package.parent / "CMakeLists.txt"
    for extension in re.findall(r"nanobind_add_module\((\w+)", cmake.read_text() if cmake.exists() else ""):
        names[f"fusebench.{extension}"] = None
    return names


def imports_of(path: pathlib.Path, modules: set[str]) -> list[tuple[str, int]]:
    """(module, line) for every import of a fusebench module in the file, at any depth. `from X
    import name` is an import of X.name where that is a module, else of X itself."""
    package = "fusebench"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            if source not in modules:
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.append((sub if sub in modules else source, node.lineno))
    return found


def import_graph(package: pathlib.Path = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {imported module: the line of its first import}."""
    files = module_names(package)
    graph = {}
    for name, path in files.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(path, set(files)) if path else []:
            edges.setdefault(target, line)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every elementary cycle, each once, starting at its smallest module name."""
    found = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, {})):
            if nxt == start:
                found.append([*path])
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, [*cycle[1:], cycle[0]])]
    return "; ".join(steps)


def test_the_graph_is_read_from_the_package():
    graph = import_graph()
    # the anchors the graph must see, or it reads nothing: __init__ re-exports the toolkit and judge
    assert "fusebench._toolkit" in graph["fusebench"], graph["fusebench"]
    assert graph["fusebench._toolkit"]["fusebench._core"], graph["fusebench._toolkit"]
    assert "fusebench._judge" in graph["fusebench"], graph["fusebench"]
    assert "fusebench._judge" in graph["fusebench._explain"], graph["fusebench._explain"]


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s) in python/fusebench:\n" + "\n".join(
        describe(c, graph) for c in found
    )


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    package = tmp_path / "fusebench"
    package.mkdir()
    (package / "__init__.py").write_text("from ._a import f\n")
    (package / "_a.py").write_text("def f():\n    from . import g\n    return g\n")
    (package / "_b.py").write_text("import fusebench._a\n")
    graph = import_graph(package)
    assert graph == {
        "fusebench": {"fusebench._a": 1},
        "fusebench._a": {"fusebench": 2},
        "fusebench._b": {"fusebench._a": 1},
    }
    assert cycles(graph) == [["fusebench", "fusebench._a"]]
