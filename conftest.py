"""Root conftest: every ``async def`` test in the repository runs under asyncio and trio."""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import pytest

from pdc_core.testing.pytest_plugin import ASYNC_BACKENDS

# pdc's own suite runs every ``async def`` test under asyncio and trio through anyio's
# pytest plugin: the hook below marks each un-marked coroutine test ``anyio``, and the
# ``anyio_backend`` fixture names both backends. The fixture is module-scoped, as
# anyio's own, so async fixtures of module scope work as well.


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Mark coroutine tests ``anyio`` before anyio's own plugin looks at them."""
    if not (
        isinstance(collector, pytest.Module | pytest.Class) and collector.istestfunction(obj, name)
    ):
        return
    inner = obj.hypothesis.inner_test if hasattr(obj, "hypothesis") else obj
    if inspect.iscoroutinefunction(inner) and not any(
        marker.name == "anyio" for marker in getattr(obj, "pytestmark", ())
    ):
        pytest.mark.anyio(obj)


@pytest.fixture(scope="module", params=ASYNC_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """The async library a test runs under: asyncio, then trio."""
    if request.param == "trio" and importlib.util.find_spec("trio") is None:
        pytest.skip("trio is not installed (pip install 'pdc-core[trio]')")
    return request.param
