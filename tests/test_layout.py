"""The layout holds: no import cycle inside pdc_core, and extenders use public faces only.

The import graph is built from the source: every ``import`` and ``from ... import`` of
a pdc_core module, at any depth (function-level ones included), except those under
``if TYPE_CHECKING:``. Importing a package runs its ``__init__``, so an import of
``pdc_core.a.b`` is an edge to ``pdc_core.a`` and to ``pdc_core.a.b``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pdc_core

SRC = Path(pdc_core.__file__).parent
ROOT = Path(__file__).parent.parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute names of the modules ``module`` imports, outside TYPE_CHECKING blocks."""
    found: list[str] = []
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(target)
            for alias in node.names:  # `from pkg import submodule`
                found.append(f"{target}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for target in _imports(tree, name, path.name == "__init__.py"):
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                # A module's own ancestors are already being imported when it runs:
                # importing pdc_core.x.y runs pdc_core and pdc_core.x first.
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    graph[name].add(prefix)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = _graph()
    assert "pdc_core._plugins" in graph["pdc_core._buffer"]
    assert "pdc_core._cli._bench" in graph["pdc_core._cli._main"]  # imported inside a function


def test_no_import_cycles_inside_pdc_core() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_nursery_knows_no_kind_of_actor() -> None:
    graph = _graph()
    assert not {name for name in graph["pdc_core._actors._nursery"]} - {
        "pdc_core._actors",
        "pdc_core._actors._mailbox",
        "pdc_core._actors._refs",
        "pdc_core._exceptions",
    }


def _extender_files() -> list[Path]:
    files = sorted((ROOT / "plugins").rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))
    return [path for path in files if ".venv" not in path.parts and "build" not in path.parts]


@pytest.mark.parametrize("path", _extender_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_and_examples_import_only_public_faces(path: Path) -> None:
    tree = ast.parse(path.read_text())
    private = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "pdc_core" and any(
                part.startswith("_") and not part.startswith("__") for part in parts
            ):
                private.append(f"line {node.lineno}: {name}")
    assert private == []
