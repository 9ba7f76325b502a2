"""The public faces of pdc and where each public name is documented.

Used by the Sphinx extension beside it (``pdc_api``: one API section per face, built
from the face's ``__all__`` at build time, so a name added to ``__all__`` gets its
entry without editing the docs) and by ``tests/docs/test_docstrings.py`` (every
public name has a docstring). It imports no Sphinx, so the test suite runs without
the ``docs`` extra.

A name exported by several faces (``ActorRef`` is in :mod:`pdc_core` and
:mod:`pdc_core.lowlevel`) is documented once, at its *home*: the face its
``__module__`` names when that is a face exporting it, else the first face in
:data:`FACES` that exports it. The other faces link to it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

#: Every public face, in the order the API reference shows them.
FACES: tuple[str, ...] = (
    "pdc_core",
    "pdc_core.backend",
    "pdc_core.lowlevel",
    "pdc_core.cuda",
    "pdc_core.testing",
    "pdc_core.telemetry",
    "pdc_cpu",
    "pdc_cuda",
    "pdc_cuda.graphs",
    "pdc_cuda.testing",
    "pdc_metal",
    "pdc_ray",
    "pdc_ray.testing",
    # PyDotCompute's import paths (docs/migrating-from-pydotcompute.md): pdc's own
    # objects under the seeds' module names, documented at their home face, and the
    # thin layers defined on those paths
    "pdc_core.core",
    "pdc_core.core.accelerator",
    "pdc_core.core.memory_pool",
    "pdc_core.core.orchestrator",
    "pdc_core.decorators",
    "pdc_core.decorators.kernel",
    "pdc_core.decorators.ring_kernel",
    "pdc_core.decorators.validators",
    "pdc_core.ring_kernels",
    "pdc_core.ring_kernels.lifecycle",
    "pdc_core.ring_kernels.message",
    "pdc_core.ring_kernels.queue",
    "pdc_core.ring_kernels.telemetry",
    "pdc_core.backends",
    "pdc_core.backends.base",
    "pdc_core.backends.cpu",
    "pdc_core.exceptions",
    "pdc_core.compilation",
    "pdc_core.compilation.compiler",
    "pdc_core.compilation.cache",
)

#: The distributions whose modules count as pdc's own (for inherited members).
PACKAGES = ("pdc_core", "pdc_cpu", "pdc_cuda", "pdc_metal", "pdc_ray")


@dataclass(frozen=True)
class Entry:
    """One name of one face."""

    face: str
    name: str
    obj: object
    kind: str  # "class", "function", "callable", "data" or "module"
    home: str  # the face that documents it

    @property
    def qualified(self) -> str:
        return f"{self.face}.{self.name}"

    @property
    def target(self) -> str:
        """The documented name of the object (at its home)."""
        return self.home if self.kind == "module" else f"{self.home}.{self.name}"


def kind_of(obj: object) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "function"
    if callable(obj) and _own_type(obj):
        return "callable"
    return "data"


def _own_type(obj: object) -> bool:
    return type(obj).__module__.split(".")[0] in PACKAGES


def public_names(face: str) -> list[str]:
    return list(importlib.import_module(face).__all__)


def sections(face: str) -> list[tuple[str, list[str]]]:
    """The face's ``__all__`` split at its comments (``# the contract``), in order.

    Names before the first comment form a section titled ``""``.
    """
    module = importlib.import_module(face)
    names = list(module.__all__)
    source = _source(module)
    found: list[tuple[str, list[str]]] = [("", [])]
    if source is not None:
        start = source.find("__all__ = [")
        end = source.find("]", start)
        if start >= 0:
            for raw in source[start:end].splitlines()[1:]:
                line = raw.strip()
                if line.startswith("#"):
                    found.append((line.lstrip("# ").strip(), []))
                else:
                    for part in line.split(","):
                        part = part.strip().strip("\"'")
                        if part in names:
                            found[-1][1].append(part)
    listed = {name for _, group in found for name in group}
    found[0][1].extend(name for name in names if name not in listed)
    return [(title, group) for title, group in found if group]


def entries(face: str) -> list[Entry]:
    module = importlib.import_module(face)
    return [
        Entry(face, name, obj, kind_of(obj), home_of(face, name, obj))
        for name in module.__all__
        for obj in [getattr(module, name)]
    ]


def home_of(face: str, name: str, obj: object) -> str:
    if inspect.ismodule(obj) and obj.__name__ in FACES:
        return obj.__name__
    declared = getattr(obj, "__module__", None) if kind_of(obj) in ("class", "function") else None
    if isinstance(declared, str) and declared in FACES and _exports(declared, name, obj):
        return declared
    for candidate in FACES:
        if _exports(candidate, name, obj):
            return candidate
    return face


def _exports(face: str, name: str, obj: object) -> bool:
    module = importlib.import_module(face)
    return name in module.__all__ and getattr(module, name, None) is obj


def _source(module: ModuleType) -> str | None:
    try:
        return Path(inspect.getfile(module)).read_text(encoding="utf-8")
    except (TypeError, OSError):
        return None


@cache
def _attribute_docs(path: Path) -> dict[str, str]:
    """``#:`` comments just above each module-level assignment of a file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    docs: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        else:
            continue
        comment: list[str] = []
        index = node.lineno - 2
        while index >= 0 and lines[index].lstrip().startswith("#:"):
            comment.insert(0, lines[index].lstrip()[2:].strip())
            index -= 1
        if comment:
            for target in targets:
                docs.setdefault(target, "\n".join(comment))
    return docs


def _package_files(module: ModuleType) -> Iterator[Path]:
    """The module's own file first, then every module of its top-level package."""
    own = _source_path(module)
    if own is not None:
        yield own
    top = importlib.import_module(module.__name__.split(".")[0])
    for root in getattr(top, "__path__", []):
        yield from sorted(Path(root).rglob("*.py"))


def _source_path(module: ModuleType) -> Path | None:
    try:
        return Path(inspect.getfile(module))
    except TypeError:
        return None


def attribute_doc(face: str, name: str) -> str | None:
    """The ``#:`` comment documenting ``name``: in the face's module, else in its package."""
    module = importlib.import_module(face)
    for path in _package_files(module):
        doc = _attribute_docs(path).get(name)
        if doc:
            return doc
    return None


def docstring(entry: Entry) -> str | None:
    """The text that documents an entry, or ``None`` when it has none."""
    obj = entry.obj
    if entry.kind == "module":
        return inspect.getdoc(obj)
    if entry.kind == "class":
        return obj.__dict__.get("__doc__")  # type: ignore[attr-defined]
    if entry.kind == "function":
        return obj.__doc__
    comment = attribute_doc(entry.home, entry.name)
    if comment:
        return comment
    if _own_type(obj):
        return type(obj).__doc__
    return None
