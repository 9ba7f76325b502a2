"""The largest classes of pdc's sources: lines spanned and methods, largest first.

Reads the source of ``src/`` and every ``plugins/*/src`` (nothing is imported)::

    python .ci/class_sizes.py            # the 20 largest classes
    python .ci/class_sizes.py --top 50

A class spans the lines from its first decorator to its last line; its methods are the
functions defined directly in its body (nested classes are listed on their own).
``tests/project/test_class_sizes.py`` holds the rule this reports on: no class spans
more than :data:`LIMIT` lines unless :data:`ALLOWED` lists it with the issue that
splits it, and a listed class that has shrunk under the limit must leave the list.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The most lines a class may span (issue 43: "no class over ~500 lines").
LIMIT = 500

#: Classes allowed over :data:`LIMIT` for now (``module:QualName``), each with the issue
#: that splits it: none since issue 43. The list only shrinks: the test fails when a
#: class listed here is no longer over the limit (or no longer there), so that the entry
#: is removed with the split.
ALLOWED: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class ClassSize:
    """One class of the sources."""

    #: ``module:QualName``, e.g. ``pdc_core._actors._mailbox:Mailbox``.
    name: str
    #: The file, relative to the repository root.
    path: str
    #: Lines spanned, from the first decorator to the last line.
    lines: int
    #: Functions defined directly in the class body.
    methods: int


def source_roots(root: Path = ROOT) -> list[Path]:
    """``src/`` and every plugin's ``src/``."""
    return [root / "src", *sorted((root / "plugins").glob("*/src"))]


def _module(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _classes(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.ClassDef]]:
    """Every class under ``node``, nested ones (in classes, functions, blocks) included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            qualname = f"{prefix}{child.name}"
            yield qualname, child
            yield from _classes(child, f"{qualname}.")
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _classes(child, f"{prefix}{child.name}.<locals>.")
        else:
            yield from _classes(child, prefix)


def class_sizes(root: Path = ROOT) -> list[ClassSize]:
    """Every class of the sources, largest (most lines) first."""
    sizes = []
    for src in source_roots(root):
        for path in sorted(src.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            module = _module(path, src)
            for qualname, node in _classes(tree, ""):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                methods = sum(
                    isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body
                )
                sizes.append(
                    ClassSize(
                        f"{module}:{qualname}",
                        path.relative_to(root).as_posix(),
                        node.end_lineno - first + 1,
                        methods,
                    )
                )
    sizes.sort(key=lambda size: (-size.lines, size.name))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20, help="how many classes to list")
    top = parser.parse_args().top
    print(f"| lines | methods | class (over {LIMIT}: * allowed, ! not allowed) | file |")
    print("|------:|--------:|-------|------|")
    for size in class_sizes()[:top]:
        mark = ""
        if size.lines > LIMIT:
            mark = " *" if size.name in ALLOWED else " !"
        print(f"| {size.lines} | {size.methods} | `{size.name}`{mark} | {size.path} |")


if __name__ == "__main__":
    main()
