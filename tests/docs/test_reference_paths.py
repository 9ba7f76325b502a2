"""The reference documents each rule at its public name, never in a private module.

A reader of the API reference sees the docstrings of public modules and of the names
they export (and their public methods). None of those may send the reader to a
private module (``See pdc_core._actors._mesh``): the reference has no page for it.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator

import pytest

PRIVATE = re.compile(r"\b(?:pdc_core|pdc_cpu|pdc_cuda|pdc_metal|pdc_ray)(?:\.\w+)*\._[a-z]\w*")
FACES = [
    "pdc_core",
    "pdc_core.backend",
    "pdc_core.lowlevel",
    "pdc_core.testing",
    "pdc_core.telemetry",
    "pdc_core.cuda",
    "pdc_cpu",
    "pdc_metal",
    "pdc_ray",
    "pdc_ray.testing",
    "pdc_cuda",
    "pdc_cuda.testing",
]


def _docstrings(obj: object) -> Iterator[tuple[str, str | None]]:
    if not isinstance(obj, type):
        yield "", getattr(obj, "__doc__", None)
        return
    yield "", obj.__dict__.get("__doc__")
    for name, member in vars(obj).items():
        if name.startswith("_") and name != "__init__":
            continue
        function = member.fget if isinstance(member, property) else member
        function = getattr(function, "__func__", function)
        if isinstance(function, types.FunctionType):
            yield f".{name}", function.__doc__


@pytest.mark.parametrize("face", FACES)
def test_public_docstrings_point_at_no_private_module(face: str) -> None:
    module = pytest.importorskip(face)
    found = [f"{face} (module): {m}" for m in PRIVATE.findall(module.__doc__ or "")]
    for name in module.__all__:
        obj = getattr(module, name)
        if not isinstance(obj, type | types.FunctionType):
            continue
        for member, doc in _docstrings(obj):
            found += [f"{face}.{name}{member}: {m}" for m in PRIVATE.findall(doc or "")]
    assert found == []


def test_the_pattern_finds_a_private_pointer() -> None:
    assert PRIVATE.findall("See :mod:`pdc_core._actors._mesh` for the rules") == [
        "pdc_core._actors._mesh"
    ]
    assert PRIVATE.findall("see :class:`pdc_core.backend.RingMemory`") == []


def test_signatures_name_type_aliases_instead_of_numpys_private_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference shows ``request_dtype: DTypeLike``, not NumPy's private protocols
    (the site's build, with warnings as errors, refuses any that remain)."""
    pytest.importorskip(
        "sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'"
    )
    from pathlib import Path

    from sphinx.util import inspect as sphinx_inspect

    import pdc_core

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "docs" / "_ext"))
    import pdc_api

    for function in (pdc_core.persistent_kernel, pdc_core.PersistentKernelSession.request):
        signature = sphinx_inspect.stringify_signature(
            sphinx_inspect.signature(function), unqualified_typehints=True
        )
        shown, _ = pdc_api._name_aliases(None, "function", "", function, {}, signature, None)
        assert shown is not None
        assert "_typing" not in shown
        assert "DTypeLike" in shown or "RecordLike" in shown


def test_a_class_split_into_private_mixins_documents_their_members(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pdc_ray.RemoteRunner``'s methods live in private mixins (its caller's and
    keeper's sides), which have no page: the reference documents them on the class,
    down to its first public base; a class whose next base is public gets no change."""
    pytest.importorskip(
        "sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'"
    )
    from pathlib import Path

    import pdc_ray

    import pdc_core

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "docs" / "_ext"))
    import pdc_api

    assert pdc_api._mixins_end(pdc_ray.RemoteRunner) == "ActorRunner"
    rst = pdc_api._entry_rst(
        next(e for e in pdc_api.pdc_faces.entries("pdc_ray") if e.name == "RemoteRunner")
    )
    assert "   :inherited-members: ActorRunner" in rst
    assert pdc_api._mixins_end(pdc_ray.RemoteKernelRunner) is None  # RemoteRunner is public
    # ActorNursery's lifecycle is a private base of its own: documented on the class too
    assert pdc_api._mixins_end(pdc_core.ActorNursery) == "object"
