"""A plugin's names loaded on first use are written once for Python: in its ``_LAZY``
table, by the module each lives in, from which ``__all__`` and the loading are derived.

Type checkers cannot run the table, so the package names them once more, imported
under ``if TYPE_CHECKING:`` (``from ._backend import MetalBackend as MetalBackend``,
the explicit re-export ``__all__`` cannot give when it is computed). These tests hold
the two alike, and check that each name lives where the table says and is loaded
only on first use.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
#: The plugins whose package loads names on first use.
LAZY_PLUGINS = ["pdc_cuda", "pdc_metal", "pdc_ray"]


def _package_dir(package: str) -> Path:
    return ROOT / "plugins" / package / "src" / package


def _type_checking_imports(package: str) -> dict[str, set[str]]:
    """``{".module": {names}}`` of the package's ``if TYPE_CHECKING:`` imports."""
    tree = ast.parse((_package_dir(package) / "__init__.py").read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                home = "." * statement.level + (statement.module or "")
                for alias in statement.names:
                    # an explicit re-export: __all__ is computed, type checkers cannot read it
                    assert alias.asname == alias.name, ast.unparse(statement)
                    found.setdefault(home, set()).add(alias.name)
    return found


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("package", LAZY_PLUGINS)
def test_the_type_checkers_imports_are_the_lazy_table(package: str) -> None:
    module = importlib.import_module(package)
    table = {home: set(names) for home, names in module._LAZY.items()}
    assert _type_checking_imports(package) == table


@pytest.mark.parametrize("package", LAZY_PLUGINS)
def test_each_lazy_name_is_defined_in_its_module_and_exported(package: str) -> None:
    module = importlib.import_module(package)
    missing = [
        f"{home}.{name}"
        for home, names in module._LAZY.items()
        for name in names
        if name not in _top_level_names(_package_dir(package) / f"{home.lstrip('.')}.py")
    ]
    assert missing == []
    lazy = {name for names in module._LAZY.values() for name in names}
    assert lazy <= set(module.__all__)
    assert module.__all__ == sorted(module.__all__)


@pytest.mark.parametrize("package", LAZY_PLUGINS)
def test_only_the_lazy_names_wait_for_their_first_use(package: str) -> None:
    # A fresh interpreter: other tests may have loaded the names in this one.
    script = (
        "import json, sys\n"
        f"import {package} as package\n"
        "lazy = {n for names in package._LAZY.values() for n in names}\n"
        "print(json.dumps({\n"
        "    'loaded_at_import': sorted(lazy & set(vars(package))),\n"
        "    'eager_unbound': sorted(set(package.__all__) - lazy - set(vars(package))),\n"
        "}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == {"loaded_at_import": [], "eager_unbound": []}
