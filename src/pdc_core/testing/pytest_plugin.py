"""A pytest plugin that runs every ``async def`` test under asyncio **and** trio.

Enable it from a ``conftest.py``::

    pytest_plugins = ["pdc_core.testing.pytest_plugin"]

It builds on anyio's own pytest plugin (shipped with anyio): each coroutine test is
marked ``anyio`` and parametrized over the ``anyio_backend`` fixture. Under trio the
test is skipped, with the reason, when trio is not installed.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import pytest

__all__ = [
    "ASYNC_BACKENDS",
    "anyio_backend",
    "pytest_pycollect_makeitem",
]

ASYNC_BACKENDS = ("asyncio", "trio")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Mark coroutine tests ``anyio`` before anyio's own plugin looks at them."""
    if not (
        isinstance(collector, pytest.Module | pytest.Class) and collector.istestfunction(obj, name)
    ):
        return
    inner = obj.hypothesis.inner_test if hasattr(obj, "hypothesis") else obj
    if inspect.iscoroutinefunction(inner):
        own_markers = getattr(obj, "pytestmark", ())
        if not any(marker.name == "anyio" for marker in own_markers):
            pytest.mark.anyio(obj)


@pytest.fixture(params=ASYNC_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """The async library a test runs under: asyncio, then trio."""
    if request.param == "trio" and importlib.util.find_spec("trio") is None:
        pytest.skip("trio is not installed (pip install 'pdc-core[trio]')")
    return request.param
