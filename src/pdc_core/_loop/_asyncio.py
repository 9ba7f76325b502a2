"""The asyncio kit: waiters are plain ``asyncio.Future`` objects of the running loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from ._common import TIMED_OUT, Timer, Waiter

__all__ = [
    "AsyncioKit",
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


class AsyncioKit:
    """Waiters are plain ``asyncio.Future`` objects of one loop, awaited directly."""

    name = "asyncio"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.waiter: Callable[[], Waiter] = loop.create_future
        self.now: Callable[[], float] = loop.time
        self._loop = loop
        self._timer = AsyncioTimer(loop)

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


def woken_value(waiter: asyncio.Future[Any]) -> Any:
    """The value ``waiter`` was resolved with, or None if it has none (yet)."""
    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
        return waiter.result()
    return None
