"""Awaiting a Ray ``ObjectRef`` under asyncio and under trio.

``await object_ref`` works under asyncio only. :func:`await_ref` works under both: it
asks Ray for the ref's ``concurrent.futures.Future`` and registers a done callback
that re-enters the waiting event loop thread-safely (``call_soon_threadsafe`` or a
trio token's ``run_sync_soon``) to set an :class:`anyio.Event`. No thread per call,
and no blocking ``ray.get`` on the event loop. A waiter that is cancelled marks its
callback abandoned, so the callback does nothing once it fires (the loop may be gone
by then); a loop that closed meanwhile is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import anyio

__all__ = ["LoopInbox", "await_future", "loop_inbox", "loop_waker"]


def loop_waker() -> Callable[[Callable[[], object]], object]:
    """Return a thread-safe "run this soon in the current event loop" function."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:  # not inside trio.run
            pass
        else:
            run_sync_soon: Callable[[Callable[[], object]], object] = token.run_sync_soon
            return run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


async def await_future(future: Future[Any]) -> Any:
    """Wait for ``future`` (completed by another thread) without blocking the loop;
    return its result or raise its exception."""
    if not future.done():
        wake = loop_waker()
        event = anyio.Event()
        abandoned = False

        def done(_: Future[Any]) -> None:
            if abandoned:
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed, or trio's run ended
                wake(event.set)

        future.add_done_callback(done)
        try:
            await event.wait()
        except BaseException:
            abandoned = True
            raise
    return future.result()


class LoopInbox:
    """Hands callables to one event loop from any thread, waking the loop once per
    burst: callables put while a wake-up is pending run in that same wake-up, in the
    order they were put (a mesh's replies arriving together cost the loop one turn).
    Make it inside the loop (see :func:`loop_inbox`); a loop that has closed is ignored.
    """

    __slots__ = ("_items", "_lock", "_scheduled", "_wake")

    def __init__(self) -> None:
        self._wake = loop_waker()
        self._items: deque[Callable[[], object]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` soon in the loop (from any thread)."""
        with self._lock:
            self._items.append(fn)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed, or trio's run ended
            self._wake(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for fn in items:
            fn()


_asyncio_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox] = (
    weakref.WeakKeyDictionary()
)
_trio_inbox: Any = None


def loop_inbox() -> LoopInbox:
    """The :class:`LoopInbox` of the running event loop (one per loop)."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:  # not inside trio.run
            pass
        else:
            global _trio_inbox
            if _trio_inbox is None:
                _trio_inbox = trio.lowlevel.RunVar("pdc_ray_inbox")
            try:
                inbox: LoopInbox = _trio_inbox.get()
            except LookupError:
                inbox = LoopInbox()
                _trio_inbox.set(inbox)
            return inbox
    loop = asyncio.get_running_loop()
    found = _asyncio_inboxes.get(loop)
    if found is None:
        found = _asyncio_inboxes[loop] = LoopInbox()
    return found
