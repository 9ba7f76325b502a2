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
fails the test at teardown. The nursery (the runtime) is held open by a task of its
own: an actor that crashes cancels that task, never the task in which anyio's runner
runs the test and its fixtures (which would end the runner: under trio, the teardown
then waited forever). The test body is not cancelled by a crash; an ``ask`` of the
crashed actor raises :class:`~pdc_core.ActorCrashed` at once.

The plugin is registered through the ``pytest11`` entry point of ``pdc-core[testing]``,
so installing pdc is enough::

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
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.abc
import pytest

from pdc_core import ActorNursery, RingKernelRuntime, Telemetry, open_nursery

__all__ = ["ASYNC_BACKENDS", "actor_nursery", "ring_kernel_runtime"]

#: The async libraries pdc supports (and its own test suite runs every async test under).
ASYNC_BACKENDS = ("asyncio", "trio")


T = TypeVar("T")


@asynccontextmanager
async def _held_by_own_task(
    open_cm: Callable[[], AbstractAsyncContextManager[T]],
) -> AsyncIterator[T]:
    """Enter ``open_cm()`` in a task of its own, yield what it gives, exit it there.

    An actor nursery cancels its host task when an actor crashes. Entered in the
    fixture itself, that host task is the one anyio's pytest runner runs every test
    and fixture in, between two of its steps: the runner then ends (asyncio: the
    teardown fails with ``ClosedResourceError``; trio: the teardown never returns).
    Here the cancellation stays in the holding task; the error it ends with (the
    ``ActorCrashed``) is raised at teardown, in the fixture.
    """
    release = anyio.Event()
    failures: list[Exception] = []

    async def hold(*, task_status: anyio.abc.TaskStatus[T] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            async with open_cm() as value:
                task_status.started(value)
                started = True
                await release.wait()
        except Exception as exc:
            if not started:
                raise  # a failed setup: tg.start() raises it in the fixture
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        value = await tg.start(hold)
        try:
            yield value
        finally:
            release.set()
    if failures:
        raise failures[0]


@pytest.fixture
async def actor_nursery() -> AsyncIterator[ActorNursery]:
    """An actor nursery open around the test; its actors are drained and stopped after."""
    async with _held_by_own_task(open_nursery) as nursery:
        yield nursery


@pytest.fixture
async def ring_kernel_runtime() -> AsyncIterator[RingKernelRuntime[Telemetry]]:
    """A ring-kernel runtime (telemetry on) open around the test; kernels end after it."""
    async with _held_by_own_task(RingKernelRuntime) as runtime:
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
