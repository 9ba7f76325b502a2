"""Event-loop primitives: the running loop's *kit*, one module per event loop.

Everything that waits in pdc (mailboxes, actors, persistent-kernel sessions) waits
through a :class:`Kit`: a factory of one-shot :class:`Waiter` cells, a timer that
resolves waiters at a deadline, the loop's clock and its cheapest checkpoint. Under
asyncio a waiter is an ``asyncio.Future``; under trio it parks the task with
``trio.lowlevel.wait_task_rescheduled`` (see :mod:`._asyncio` and :mod:`._trio`).
They cost a fraction of anyio's streams and cancel scopes, which matters on a path
that is a few microseconds long, and they integrate with anyio cancellation.

The running library is detected from the loops' own APIs (no ``sniffio``), and trio is
imported only when it is the one running.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ._asyncio import AsyncioKit
from ._asyncio import woken_value as _asyncio_woken_value
from ._common import TIMED_OUT, Kit, Waiter, fail, wake
from ._trio import TrioKit, TrioWaiter
from ._trio import woken_value as _trio_woken_value

__all__ = [
    "TIMED_OUT",
    "Kit",
    "Waiter",
    "current_kit",
    "current_library",
    "current_sleep",
    "fail",
    "wake",
    "woken_value",
]

_trio_kit: TrioKit | None = None
_asyncio_kits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncioKit] = (
    weakref.WeakKeyDictionary()
)


def _running_trio() -> bool:
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def current_library() -> Literal["asyncio", "trio"]:
    """The async library running in this thread: ``"asyncio"`` or ``"trio"``.

    Raises :class:`RuntimeError` outside of both, naming what pdc runs under.
    """
    if asyncio._get_running_loop() is not None:
        return "asyncio"
    if _running_trio():
        return "trio"
    raise RuntimeError("pdc runs under asyncio or trio (anyio.run), and neither is running here")


def current_kit() -> Kit:
    """Return the event-loop operations of the running loop (asyncio or trio)."""
    global _trio_kit
    loop = asyncio._get_running_loop()
    if loop is not None:
        kit = _asyncio_kits.get(loop)
        if kit is None:
            kit = _asyncio_kits[loop] = AsyncioKit(loop)
        return kit
    if current_library() == "trio":
        if _trio_kit is None:
            _trio_kit = TrioKit()
        return _trio_kit
    raise AssertionError("unreachable")  # pragma: no cover


def current_sleep() -> Callable[[float], Awaitable[None]]:
    """The running library's own ``sleep`` (cheaper per call than ``anyio.sleep``)."""
    if current_library() == "asyncio":
        return asyncio.sleep
    import trio

    return trio.sleep


def woken_value(waiter: Waiter) -> Any:
    """The value ``waiter`` was resolved with, or None if it has none (yet)."""
    if isinstance(waiter, asyncio.Future):
        return _asyncio_woken_value(waiter)
    assert isinstance(waiter, TrioWaiter)
    return _trio_woken_value(waiter)
