"""No import cycle among perf4sight's modules: read statically, every module's imports at
module level (`if TYPE_CHECKING:` blocks included: a cycle there is one a reader follows; an
import inside a function runs later and is left out) form a graph without a cycle."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    modules = {}
    for path in (SOURCE / "perf4sight").rglob("*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: not those in a function body."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    found += _module_level(children)
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The perf4sight modules `name` imports: `from a.b import c` names a.b.c when that is a
    module, else a.b; a relative import is resolved against `name`'s package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _module_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_graph_is_read_from_the_source():
    graph = import_graph()
    assert "perf4sight.fit.calibration" in graph["perf4sight.fit.store"]
    assert "perf4sight.architecture" in graph["perf4sight.fit.dataset"]
    assert "perf4sight.architecture.ir" in graph["perf4sight.architecture.family"]


def test_no_module_of_perf4sight_imports_itself_back():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as exc:
        pytest.fail("import cycle: " + " -> ".join(exc.args[1]))
