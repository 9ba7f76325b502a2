"""The asyncio kit: waiters are plain ``asyncio.Future`` objects of the running loop."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, cast

import anyio

from ._cancel import asyncio_cancel_called
from ._common import TIMED_OUT, Timer, Turns, Waiter

__all__ = [
    "AsyncioIncarnationScope",
    "AsyncioKit",
    "AsyncioTaskHost",
    "AsyncioTimer",
    "woken_value",
]


class AsyncioTimer(Timer):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None

    def _expire(self, waiter: asyncio.Future[Any]) -> None:
        waiter.set_result(TIMED_OUT)

    def _rearm(self, deadline: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(deadline, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._expire_due(self._loop.time())
        if self._heap:
            self._handle = self._loop.call_at(self._wake_at, self._fire)


class AsyncioTaskHost:
    """A :class:`~._common.TaskHost` of plain ``loop.create_task`` tasks.

    An anyio task group spends some 12 us per task (a ``TaskHandle``, a cancel scope
    and an event each); a plain task costs a fifth of that. anyio does not know these
    tasks, so the host does what its task group would: leaving it waits for them all,
    and a cancelled wait (the nursery's scope, or an enclosing one, was cancelled) has
    ``on_cancel()`` cancel them through their own anyio cancel scopes, which keeps the
    shields inside them intact, before waiting for them shielded. An exception that
    escapes one of them is re-raised when the host is left.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, on_cancel: Callable[[], None]) -> None:
        self._loop = loop
        self._on_cancel = on_cancel
        self._tasks: set[asyncio.Task[Any]] = set()
        self._emptied: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        # One callback and one context for every task (not a copy of each per task).
        self._on_done = self._finished
        self._context = contextvars.Context()

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str) -> None:
        task = self._loop.create_task(fn(*args), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_done, context=self._context)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and self._error is None:
            self._error = task.exception()
        emptied = self._emptied
        if not self._tasks and emptied is not None and not emptied.done():
            emptied.set_result(None)

    async def _wait(self) -> None:
        while self._tasks:
            self._emptied = self._loop.create_future()
            await self._emptied

    async def __aenter__(self) -> AsyncioTaskHost:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is not None:
            await self._cancel_and_wait()
            return False
        try:
            await self._wait()
        except BaseException:
            await self._cancel_and_wait()
            raise
        if self._error is not None:
            raise self._error
        return False

    async def _cancel_and_wait(self) -> None:
        self._on_cancel()
        with anyio.CancelScope(shield=True):
            await self._wait()


class AsyncioIncarnationScope:
    """An :class:`~._common.IncarnationScope` whose anyio ``CancelScope`` is entered
    only when :meth:`engage`-d; until then :meth:`cancel` cancels the task directly
    (``Task.cancel``), and leaving the scope takes that cancellation back."""

    __slots__ = ("_cancelled", "_scope", "_task", "cancelled_caught")

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self.cancelled_caught = False

    def __enter__(self) -> AsyncioIncarnationScope:
        task = self._task = asyncio.current_task()
        if self._cancelled and task is not None:
            task.cancel()  # cancelled before it was entered: at the task's next wait
        return self

    def engage(self) -> None:
        if self._scope is not None:
            return
        if self._cancelled:
            # Task.cancel() has been called and will strike at the next wait, which
            # might be inside a shield of the code about to run: strike here instead.
            raise asyncio.CancelledError
        scope = self._scope = anyio.CancelScope()
        scope.__enter__()

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        if self._scope is not None:
            self._scope.cancel()
        elif self._task is not None:
            self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        scope = self._scope
        if scope is not None:
            swallowed = bool(scope.__exit__(exc_type, exc, tb))
            self.cancelled_caught = scope.cancelled_caught
            return swallowed
        if (
            self._cancelled
            and isinstance(exc, asyncio.CancelledError)
            and self._task is not None
            and self._task.uncancel() == 0  # no cancellation but ours
        ):
            self.cancelled_caught = True
            return True
        return False


class AsyncioKit(Turns):
    """Waiters are plain ``asyncio.Future`` objects of one loop, awaited directly."""

    name = "asyncio"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.waiter: Callable[[], Waiter] = loop.create_future
        self.now: Callable[[], float] = loop.time
        self._loop = loop
        self._timer = AsyncioTimer(loop)
        self._system_tasks: set[asyncio.Task[None]] = set()
        #: Whether the running task is in a cancelled anyio scope (see ._cancel).
        self.cancel_called: Callable[[], bool] = asyncio_cancel_called(loop)

    def arm(self, waiter: Waiter, timeout: float) -> None:
        if waiter.done():
            return
        if timeout <= 0:
            waiter.set_result(TIMED_OUT)
        else:
            self._timer.add(self._loop.time() + timeout, waiter)

    @staticmethod
    def woken(waiter: Waiter) -> bool:
        fut = cast("asyncio.Future[Any]", waiter)
        return (
            fut.done()
            and not fut.cancelled()
            and fut.exception() is None
            and fut.result() is not TIMED_OUT
        )

    @staticmethod
    def current_task() -> object:
        return asyncio.current_task()

    @staticmethod
    async def checkpoint() -> None:
        await asyncio.sleep(0)

    def task_host(self, on_cancel: Callable[[], None]) -> AsyncioTaskHost:
        return AsyncioTaskHost(self._loop, on_cancel)

    def spawn_system_task(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        task = self._loop.create_task(fn(), name=name)
        self._system_tasks.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self._system_tasks.discard)

    @staticmethod
    def cancel_scope() -> AsyncioIncarnationScope:
        return AsyncioIncarnationScope()


def woken_value(waiter: asyncio.Future[Any]) -> Any:
    """The value ``waiter`` was resolved with, or None if it has none (yet)."""
    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
        return waiter.result()
    return None
