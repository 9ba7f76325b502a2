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
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import anyio

__all__ = ["await_future", "loop_waker"]


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
