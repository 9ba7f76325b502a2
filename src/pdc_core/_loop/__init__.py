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
import math
import numbers
import operator
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ._asyncio import AsyncioKit
from ._asyncio import woken_value as _asyncio_woken_value
from ._cancel import raise_cancelled
from ._common import (
    TIMED_OUT,
    TURN_CHECK_EVERY,
    IncarnationScope,
    Kit,
    TaskHost,
    Waiter,
    fail,
    wake,
)
from ._trio import TrioKit, TrioWaiter
from ._trio import woken_value as _trio_woken_value

__all__ = [
    "TIMED_OUT",
    "TURN_CHECK_EVERY",
    "IncarnationScope",
    "Kit",
    "TaskHost",
    "Waiter",
    "check_count",
    "check_duration",
    "check_timeout",
    "current_kit",
    "current_library",
    "current_loop",
    "loop_getter",
    "full_checkpoint",
    "current_sleep",
    "seconds_or_inf",
    "fail",
    "strict_int",
    "thread_count",
    "wake",
    "woken_value",
]

#: The trio kit of each thread running trio (a thread runs one trio loop at a time).
_trio_kits = threading.local()
_asyncio_kits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncioKit] = (
    weakref.WeakKeyDictionary()
)


def _idle_loop_worker(thread: threading.Thread) -> bool:
    """Whether ``thread`` is an idle thread of an event loop's worker cache
    (``to_thread.run_sync``), which outlives the calls that used it by design. trio's
    carries its cache name only while idle (a job renames it); AnyIO's on asyncio keeps
    its name and is idle while it is in its pool's deque of idle workers (for 10 s)."""
    if thread.name.startswith("Trio thread"):
        return True
    idle = getattr(thread, "idle_workers", None)
    return thread.name.startswith("AnyIO worker thread") and idle is not None and thread in idle


def thread_count() -> int:
    """Live threads, less the event loops' idle worker threads
    (:func:`_idle_loop_worker`): the count that must come back after work that started
    threads (``pdc check``, :func:`pdc_core.testing.settle_threads`). A worker thread
    still running a call counts: it is work left behind."""
    return sum(not _idle_loop_worker(thread) for thread in threading.enumerate())


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
    """Return the event-loop operations of the running loop (asyncio or trio): one
    kit per asyncio loop, one per thread running trio."""
    loop = asyncio._get_running_loop()
    if loop is not None:
        kit = _asyncio_kits.get(loop)
        if kit is None:
            kit = _asyncio_kits[loop] = AsyncioKit(loop)
        return kit
    if current_library() == "trio":
        trio_kit: TrioKit | None = getattr(_trio_kits, "kit", None)
        if trio_kit is None:
            trio_kit = _trio_kits.kit = TrioKit()
        return trio_kit
    raise AssertionError("unreachable")  # pragma: no cover


def loop_getter() -> Callable[[], object]:
    """The cheapest call that returns :func:`current_loop`'s value while the loop
    running now runs (one C call under asyncio, trio's token getter under trio), for a
    hot path that checks it is still on its loop. Under another loop the call returns
    something else (asyncio: ``None``) or raises :class:`RuntimeError` (trio's, outside
    trio). Raises :class:`RuntimeError` outside of both, as :func:`current_loop` does."""
    if asyncio._get_running_loop() is not None:
        return asyncio._get_running_loop
    current_loop()  # trio is running, or this raises
    getter: Callable[[], object] = sys.modules["trio"].lowlevel.current_trio_token
    return getter


def current_loop() -> object:
    """An object that identifies the running event loop, cheaply (tens of ns).

    The asyncio loop itself, or trio's token of the running ``trio.run``: two
    consecutive ``trio.run`` calls in one thread are two loops (they share a kit).
    Raises :class:`RuntimeError` outside of both.
    """
    loop = asyncio._get_running_loop()
    if loop is not None:
        return loop
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            token: object = trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
        else:
            return token
    raise RuntimeError("pdc runs under asyncio or trio (anyio.run), and neither is running here")


async def full_checkpoint(kit: Kit) -> None:
    """trio's checkpoint, for the async calls of pdc's API that are not per-message paths
    (starting, opening, stopping, draining, launching, activating): raise the task's
    pending cancellation, and let the other tasks run, on every path.

    Looks again after the yield: a deadline that passed while the others ran (asyncio
    runs the due timer then) is raised here too, not at the caller's next wait.
    """
    if kit.cancel_called():
        await raise_cancelled()
    await kit.checkpoint()
    if kit.cancel_called():
        await raise_cancelled()


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


# -- timeout and count arguments, checked in one place -------------------------------------
#
# A NaN deadline in a timer heap breaks every later timeout of the loop (asyncio) or the
# loop itself (trio), so every timeout of the public API comes through here first.


def _seconds(value: object, name: str) -> float:
    # numbers.Real takes NumPy's scalars (numpy.float32(0.5), numpy.int64(2)) as well.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds or None, not {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond any float (10**400): no bound, as inf
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]
    if math.isnan(seconds):
        raise ValueError(f"{name} is NaN; give a number of seconds, or None for no timeout")
    return seconds


def check_timeout(value: float | None, name: str = "timeout") -> float | None:
    """A wait's timeout: ``None`` or ``inf`` for none (returns ``None``), a number of
    seconds otherwise (a float; NumPy scalars are numbers), zero or negative meaning
    "now". NaN is a ``ValueError`` naming ``name``; anything but a number (a bool
    included) is a ``TypeError``."""
    if value.__class__ is float and value == value:  # the common case, without calls
        return None if value == math.inf else value
    if value is None:
        return None
    seconds = _seconds(value, name)
    return None if seconds == math.inf else seconds


def check_duration(value: float | None, name: str) -> float | None:
    """A bound set once (``shutdown_timeout``, ``stop_timeout``, ``launch_timeout``):
    ``None`` or ``inf`` for none (returns ``None``), else a positive number of seconds;
    zero, negative and NaN are a ``ValueError`` naming ``name``."""
    if value is None:
        return None
    seconds = _seconds(value, name)
    if seconds <= 0:
        raise ValueError(f"{name} must be > 0 seconds (or None for no bound), not {value!r}")
    return None if seconds == math.inf else seconds


def seconds_or_inf(seconds: float | None) -> float:
    """A checked timeout or bound (what :func:`check_timeout` or :func:`check_duration`
    returned) as seconds to add to a clock: ``None``, no bound, is ``inf``. So a bound
    given as ``10**400`` (no float holds it) is never added to a clock as an int."""
    return math.inf if seconds is None else seconds


def strict_int(value: object, name: str, expected: str = "an int") -> int:
    """``value`` as an ``int``, by the one integer rule of pdc's API (counts, indices,
    coordinates, priorities): an ``int`` or anything with ``__index__`` (NumPy's
    integers); never a bool, a float (not even ``2.0``) or a string. Anything else is a
    :class:`TypeError` saying that ``name`` must be ``expected``."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")


def check_count(value: object, name: str, minimum: int = 1) -> int:
    """A count argument (a capacity, a window, a batch size): an int by
    :func:`strict_int`'s rule, at least ``minimum``; a :class:`ValueError` naming
    ``name`` below it."""
    count = strict_int(value, name)
    if count < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return count
