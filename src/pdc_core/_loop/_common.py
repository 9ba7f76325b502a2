"""What every event loop's kit shares: the waiter and kit protocols and the timer heap."""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Final, Protocol

__all__ = [
    "TIMED_OUT",
    "TURN_CHECK_EVERY",
    "TURN_SECONDS",
    "IncarnationScope",
    "Kit",
    "TaskHost",
    "Timer",
    "Turns",
    "Waiter",
    "fail",
    "wake",
]

#: Value a waiter resolves to when its timeout expires.
TIMED_OUT: Final = object()
#: A task whose operations complete without waiting yields once its turn, this many
#: seconds of them, is over (see :class:`Turns`).
TURN_SECONDS: Final = 0.001
#: Such operations read the clock once every this many, counted per event loop.
TURN_CHECK_EVERY: Final = 64

_monotonic = time.monotonic


class Waiter(Protocol):
    """A one-shot cell a task waits on: the subset of ``asyncio.Future`` pdc uses.

    Under asyncio a waiter *is* an ``asyncio.Future``; under trio it is a small object
    with the same methods that parks the task with
    ``trio.lowlevel.wait_task_rescheduled``. ``await waiter`` returns the value or
    raises the error; a waiter may be resolved before anyone awaits it. A waiter whose
    task was cancelled, or whose timeout expired, is ``done()``.
    """

    def done(self) -> bool:
        """Whether the waiter was resolved (or its task cancelled, or it timed out)."""
        ...

    def set_result(self, value: Any, /) -> None:
        """Resolve it with ``value`` (use :func:`wake`, which checks :meth:`done`)."""
        ...

    def set_exception(self, error: BaseException, /) -> None:
        """Resolve it with ``error`` (use :func:`fail`, which checks :meth:`done`)."""
        ...

    def exception(self) -> BaseException | None:
        """The error it was resolved with, or ``None``."""
        ...

    def __await__(self) -> Generator[Any, None, Any]: ...


def wake(waiter: Waiter, value: Any = None) -> bool:
    """Resolve ``waiter`` with ``value``; False if it was already done (or abandoned)."""
    if waiter.done():
        return False
    waiter.set_result(value)
    return True


def fail(waiter: Waiter, error: BaseException) -> bool:
    """Resolve ``waiter`` with ``error``; False if it was already done (or abandoned)."""
    if waiter.done():
        return False
    waiter.set_exception(error)
    # Mark it retrieved: if the waiting task is cancelled before it resumes, the error
    # must not be logged as "never retrieved". Awaiting the waiter still raises it.
    waiter.exception()
    return True


class Turns:
    """Fair turns for operations that complete without waiting (a ``tell`` or a
    mailbox ``send``/``receive`` that finds room or a message), whatever objects they
    touch.

    Such an operation does not yield to the scheduler by itself, so a task doing
    nothing else would starve every other task of its event loop and never see a
    cancellation. Each one adds one to :attr:`ops`, which counts them for the whole
    event loop; every :data:`TURN_CHECK_EVERY`-th calls :meth:`turn_is_over`, which
    reads the clock and says whether :data:`TURN_SECONDS` have passed since a turn
    last ended this way; if so the caller yields (``await kit.checkpoint()``).

    The guarantee: a task that runs such operations without waiting yields within
    :data:`TURN_SECONDS` (plus :data:`TURN_CHECK_EVERY` operations) of starting to,
    however it spreads them over mailboxes and actors, because while it runs every
    counted operation of the loop is its own. The cost: the clock once per
    :data:`TURN_CHECK_EVERY` operations, and at most one extra yield per
    :data:`TURN_SECONDS` for the whole loop (a task that has just been scheduled may
    be the one asked to yield). The count is the loop's rather than the task's
    because a task-keyed count would cost a lookup per operation, and the turn is
    time rather than a count because a count that makes a task yield every few
    operations makes every message to another idle actor a wake-up of its own.
    """

    def __init__(self) -> None:
        #: Operations that completed without waiting, on this event loop.
        self.ops = 0
        self._turn_ends = 0.0

    def turn_is_over(self) -> bool:
        """Whether the running task must yield now (ends the turn if so)."""
        now = _monotonic()
        if now < self._turn_ends:
            return False
        self._turn_ends = now + TURN_SECONDS
        return True


class Kit(Protocol):
    """The few event-loop operations the mailbox and actors need, per event loop.

    ``waiter()`` makes a :class:`Waiter`. ``arm(waiter, timeout)`` makes it resolve to
    ``TIMED_OUT`` after ``timeout`` seconds unless resolved before (it is then
    awaited as usual; nothing needs undoing if it is resolved first).
    ``woken(waiter)`` says whether a waiter that ended with an exception had been
    resolved with a value first (so the wake-up can be passed on). ``ops`` and
    ``turn_is_over()`` are the loop's fair turns: an operation that completes without
    waiting adds one to ``ops`` and, every ``TURN_CHECK_EVERY``-th, yields
    (``await kit.checkpoint()``) if ``turn_is_over()``.
    """

    name: str
    waiter: Callable[[], Waiter]
    ops: int

    def turn_is_over(self) -> bool:
        """Whether the running task must yield now (see ``ops``); ends the turn if so."""
        ...

    def arm(self, waiter: Waiter, timeout: float) -> None:
        """Resolve ``waiter`` to :data:`TIMED_OUT` after ``timeout`` seconds unless it
        is resolved before."""
        ...

    def woken(self, waiter: Waiter) -> bool:
        """Whether ``waiter``, which ended with an exception (its task cancelled), had
        been resolved with a value first, so the wake-up can be passed on."""
        ...

    def now(self) -> float:
        """The event loop's clock, in seconds."""
        ...

    def current_task(self) -> object:
        """The running task, as the event loop knows it."""
        ...

    def cancel_called(self) -> bool:
        """Whether the running task is in a cancel scope that has been cancelled (not
        shielded from it): its next checkpoint raises the cancellation. Cheap enough
        for every message."""
        ...

    async def checkpoint(self) -> None:
        """Let the other tasks run (a yield); unlike :func:`full_checkpoint` it need not
        raise a pending cancellation first (the cheap per-message yield)."""
        ...

    def task_host(self, on_cancel: Callable[[], None]) -> TaskHost:
        """A new :class:`TaskHost` that calls ``on_cancel()`` when it must cancel its
        tasks."""
        ...

    def spawn_system_task(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run ``fn()`` in a task of the event loop's own, outside every nursery: it is
        cancelled when the run ends (``asyncio.run``'s end, trio's main task). It must
        not raise (trio turns that into ``TrioInternalError``): catch and keep errors."""
        ...

    def cancel_scope(self) -> IncarnationScope:
        """A new :class:`IncarnationScope`, not yet entered."""
        ...


class IncarnationScope(Protocol):
    """The cancel scope around one incarnation of an actor (entered with ``with``).

    ``cancel()`` ends what runs inside, respecting anyio shields; ``cancelled_caught``
    says whether it did. ``engage()`` must be called before the task runs code that
    may wait inside an anyio cancel scope of its own (user code, anything shielded):
    under asyncio the anyio scope is only entered then, since entering one costs about
    as much as the rest of an actor's start. Until it is engaged the task runs pdc's
    own waits only, which neither shield nor swallow cancellation, so it is cancelled
    directly. ``engage()`` raises the cancellation at once if the scope was cancelled
    meanwhile. Under trio it is a trio ``CancelScope`` from the start.
    """

    @property
    def cancelled_caught(self) -> bool:
        """Whether the scope ended what ran inside because it was cancelled."""
        ...

    def cancel(self) -> None:
        """End what runs inside (anyio shields hold)."""
        ...

    def engage(self) -> None:
        """Enter the anyio scope now, before code that may wait in a scope of its own;
        raises the cancellation at once if the scope was cancelled meanwhile."""
        ...

    def __enter__(self) -> IncarnationScope: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...


class TaskHost(Protocol):
    """Where an actor nursery runs its actors' tasks: an async context manager that is
    entered by one task (the nursery's keeper) and spawns tasks for others.

    ``spawn(fn, *args, name=...)`` starts ``fn(*args)`` as a new task at once (it runs
    at the loop's next turn); ``fn`` must handle its own errors (one that escapes is
    raised when the host is left, never lost). Leaving the host waits for every task
    it spawned. If that wait is cancelled, or the host is left by an exception, it
    calls ``on_cancel()`` (which must cancel those tasks, through their cancel scopes
    so that anyio's shields hold) and waits for them, shielded, before going on.
    """

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str) -> None:
        """Start ``fn(*args)`` as a new task named ``name`` (at the loop's next turn)."""
        ...

    async def __aenter__(self) -> TaskHost: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...


class Timer:
    """Timeouts for many waiters from one timer per event loop.

    Creating and cancelling a timer per wait costs more than a whole round trip (an
    asyncio ``TimerHandle`` is about 2 us, a trio ``CancelScope`` with a deadline
    6-15 us). Instead, timed waits register in one heap; a single loop timer (asyncio)
    or system task (trio) sleeps until the earliest deadline and expires what is due.
    Entries of waiters resolved early are skipped lazily and compacted in bulk, so the
    heap stays proportional to the waits in progress.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        self._wake_at = math.inf
        self._compact_at = 1024

    def add(self, deadline: float, waiter: Any) -> None:
        heap = self._heap
        if len(heap) >= self._compact_at:
            # Drop the entries of waiters already resolved; doing it only when the heap
            # has doubled since the last time keeps the cost O(1) per wait.
            heap[:] = [entry for entry in heap if not entry[2].done()]
            heapq.heapify(heap)
            self._compact_at = max(1024, 2 * len(heap))
        heapq.heappush(heap, (deadline, next(self._seq), waiter))
        if deadline < self._wake_at:
            self._wake_at = deadline
            self._rearm(deadline)

    def _expire_due(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done():
                self._expire(waiter)
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        self._wake_at = heap[0][0] if heap else math.inf

    def _expire(self, waiter: Any) -> None:
        raise NotImplementedError

    def _rearm(self, deadline: float) -> None:
        raise NotImplementedError
