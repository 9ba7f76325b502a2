"""pdc's pytest plugin: fixtures that open an actor nursery or a ring-kernel runtime.

Running async tests is anyio's job: anyio ships a pytest plugin that runs every test
marked ``@pytest.mark.anyio`` (and every async fixture such a test uses, of any
scope) under each backend of its ``anyio_backend`` fixture. This plugin adds only
what anyio has no notion of:

- ``actor_nursery``: an :class:`~pdc_core.ActorNursery` open around the test;
- ``ring_kernel_runtime``: a :class:`~pdc_core.RingKernelRuntime` (telemetry on) open
  around the test.

Both are function-scoped async fixtures, so they run in the test's event loop, under
whichever backend the test runs. When the test body ends, the nursery drains and stops
its actors (the runtime terminates its kernels); an actor that crashed during the test
fails the test at teardown. The plugin is registered through the ``pytest11`` entry
point of ``pdc-core[testing]``, so installing pdc is enough::

    import pytest

    pytestmark = pytest.mark.anyio

    async def test_counter(actor_nursery):
        ref = await actor_nursery.start_actor(handler)
        assert await ref.ask(1) == 2

The plugin marks no test, parametrizes nothing and defines no ``anyio_backend``
fixture, so it leaves anyio's plugin and pytest-asyncio (in either mode) to decide
which tests they run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pdc_core import ActorNursery, RingKernelRuntime, Telemetry, open_nursery

__all__ = ["ASYNC_BACKENDS", "actor_nursery", "ring_kernel_runtime"]

#: The async libraries pdc supports (and its own test suite runs every async test under).
ASYNC_BACKENDS = ("asyncio", "trio")


@pytest.fixture
async def actor_nursery() -> AsyncIterator[ActorNursery]:
    """An actor nursery open around the test; its actors are drained and stopped after."""
    async with open_nursery() as nursery:
        yield nursery


@pytest.fixture
async def ring_kernel_runtime() -> AsyncIterator[RingKernelRuntime[Telemetry]]:
    """A ring-kernel runtime (telemetry on) open around the test; kernels end after it."""
    async with RingKernelRuntime() as runtime:
        yield runtime


def _both_backends(request: pytest.FixtureRequest) -> Any:
    """asyncio, then trio (skipped, with the reason, when trio is not installed)."""
    if request.param == "trio" and importlib.util.find_spec("trio") is None:
        pytest.skip("trio is not installed (pip install 'pdc-core[trio]')")
    return request.param


def __getattr__(name: str) -> Any:
    # ``from pdc_core.testing.pytest_plugin import anyio_backend`` (pdc <= 0.2) still
    # gives a module-scoped ``anyio_backend`` over asyncio and trio to the module that
    # imports it. It is built here, on import, and not as a module attribute, so that
    # registering this module as a plugin does not override anyio's own fixture.
    if name == "anyio_backend":
        return pytest.fixture(scope="module", params=ASYNC_BACKENDS, name="anyio_backend")(
            _both_backends
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
