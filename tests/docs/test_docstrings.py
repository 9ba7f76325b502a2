"""Every public name says what it does: the API reference is built from these docstrings.

The names are enumerated when the test runs, from the ``__all__`` of every public face
(``docs/_ext/pdc_faces.py`` lists the faces; the docs site is built from the same
list), so a name added to a face is checked without editing this test:

- every class and function of a face has a docstring of its own, every constant a
  ``#:`` comment (where it is defined or in the face);
- every public method and property of those classes has a docstring, its own or the
  one it overrides;
- every public ``async`` function and method says what cancellation does to it (its
  docstring mentions cancellation).

There is no list of allowed gaps: every name of every face must pass.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import pdc_faces  # noqa: E402


def _available(face: str) -> bool:
    try:
        importlib.import_module(face)
    except ImportError:
        return False
    return True


FACES = [face for face in pdc_faces.FACES if _available(face)]


def _is_async(function: object) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def _own_members(cls: type) -> Iterator[tuple[str, str, object, str | None]]:
    """(name, kind, function, docstring) of each public method and property of ``cls``
    that pdc defines (on the class or a pdc base), with inherited docstrings."""
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        owner = next((base for base in cls.__mro__ if name in vars(base)), None)
        if owner is None or not owner.__module__.startswith(pdc_faces.PACKAGES):
            continue
        raw = vars(owner)[name]
        if isinstance(raw, property):
            doc = next(
                (
                    vars(base)[name].__doc__
                    for base in cls.__mro__
                    if isinstance(vars(base).get(name), property) and vars(base)[name].__doc__
                ),
                None,
            )
            yield name, "property", raw.fget, doc
            continue
        function = getattr(raw, "__func__", raw)
        if inspect.isfunction(function):
            yield name, "method", function, inspect.getdoc(getattr(cls, name))


def gaps() -> dict[str, str]:
    """``{name: what is missing}`` for every public name and member, as the docs show
    them (each documented at its home face)."""
    found: dict[str, str] = {}
    for face in FACES:
        for entry in pdc_faces.entries(face):
            if entry.home != face:
                continue
            doc = pdc_faces.docstring(entry)
            if not doc or not doc.strip():
                found[entry.qualified] = "no docstring"
                continue
            if entry.kind == "function" and _is_async(entry.obj) and "cancel" not in doc.lower():
                found[entry.qualified] = "async, but says nothing of cancellation"
            if entry.kind != "class":
                continue
            for name, _kind, function, member_doc in _own_members(entry.obj):  # type: ignore[arg-type]
                qualified = f"{entry.qualified}.{name}"
                if not member_doc or not member_doc.strip():
                    found[qualified] = "no docstring"
                elif _is_async(function) and "cancel" not in member_doc.lower():
                    found[qualified] = "async, but says nothing of cancellation"
    return found


def test_the_faces_are_enumerated() -> None:
    assert "pdc_core" in FACES
    assert "pdc_core.backend" in FACES
    names = [entry.qualified for face in FACES for entry in pdc_faces.entries(face)]
    assert len(names) > 200  # every face's __all__, not a sample
    assert "pdc_core.open_nursery" in names


def test_every_public_name_has_a_docstring() -> None:
    found = gaps()
    assert not found, "public names without the docstring they need:\n" + "\n".join(
        f"  {name}: {why}" for name, why in sorted(found.items())
    )


@pytest.mark.parametrize("face", FACES)
def test_module_docstring(face: str) -> None:
    doc = inspect.getdoc(importlib.import_module(face))
    assert doc, f"{face} needs a module docstring: its page opens with it"
    assert len(doc.split()) >= 8, f"{face}'s module docstring says too little: {doc!r}"
