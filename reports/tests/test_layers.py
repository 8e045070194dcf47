"""Data flows one way: results → claims (facts, decisions, words) → sections and the matrix → the
document → the report's command line; tools/ use reports/, never the other way. Each module of
reports/ imports only from the layers below it (or its own)."""

from __future__ import annotations

import ast
import pathlib

import pytest

REPORTS = pathlib.Path(__file__).resolve().parents[1]
# a module (or package) of reports/ -> the modules of reports/ it may import
BELOW = {
    "__init__": set(),
    "numbers": {"decision"},
    "decision": set(),
    "integrity": set(),
    "results": {"integrity"},
    "yardsticks": {"results"},
    "fusion_switches": {"results"},
    "claims": {"claims", "results", "numbers", "decision", "fusion_switches"},
    "document": {"claims"},
    "matrix": {"claims", "document", "results"},
    "runline": {"numbers", "results"},
    "sections": {"sections", "claims", "numbers", "results", "fusion_switches"},
    "report": {"claims", "document", "matrix", "results", "runline", "sections", "fusion_switches"},
}


def imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "reports":  # from reports import claims, numbers
                found |= {f"reports.{a.name}" for a in node.names}
            else:
                found.add(node.module)
    return found


def layer(path: pathlib.Path) -> str:
    return path.relative_to(REPORTS).parts[0].removesuffix(".py")


@pytest.mark.parametrize("path", sorted(p for p in REPORTS.rglob("*.py") if "tests" not in p.parts), ids=str)
def test_a_module_imports_only_from_below(path):
    own = layer(path)
    for name in imports(path):
        assert not name.startswith("tools"), f"{path.name} imports {name}: reports/ never imports tools/"
        if name.startswith("reports."):
            used = name.split(".")[1]
            assert used in BELOW[own] or used == own, f"reports/{path.relative_to(REPORTS)} imports {name}"


def test_no_test_of_the_report_imports_tools():
    for path in (REPORTS / "tests").glob("*.py"):
        assert not any(n.startswith("tools") for n in imports(path)), path.name
