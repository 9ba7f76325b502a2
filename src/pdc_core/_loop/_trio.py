"""The trio kit: waiters park the task with ``trio.lowlevel.wait_task_rescheduled``.

Nothing here imports trio until a kit is made, which happens only under trio.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Final, cast

from ._common import TIMED_OUT, Timer, Turns, Waiter

__all__ = [
    "TrioIncarnationScope",
    "TrioKit",
    "TrioTaskHost",
    "TrioTimer",
    "TrioWaiter",
    "woken_value",
]

# States of a trio waiter.
_PENDING: Final = 0  # nobody waits yet
_WAITING: Final = 1  # a task is parked on it
_DONE: Final = 2  # resolved by set_result/set_exception
_GONE: Final = 3  # timed out, or abandoned by a cancelled task

# Bound when the trio kit is first created (trio is imported only when it runs).
_trio_reschedule: Any = None
_trio_current_task: Any = None
_trio_wait_rescheduled: Any = None
_trio_abort_succeeded: Any = None
_Value: Any = None
_Error: Any = None


class TrioWaiter:
    """A :class:`Waiter` for trio: parks the task, resumed by ``reschedule``."""

    __slots__ = ("outcome", "state", "task")

    def __init__(self) -> None:
        self.state = _PENDING
        self.outcome: Any = None

    def done(self) -> bool:
        return self.state >= _DONE

    def set_result(self, value: Any, /) -> None:
        state = self.state
        result = _Value(value)
        if state == _WAITING:
            self.state = _DONE
            self.outcome = result
            _trio_reschedule(self.task, result)
        elif state == _PENDING:
            self.state = _DONE
            self.outcome = result
        else:
            raise RuntimeError("waiter is already resolved")

    def set_exception(self, error: BaseException, /) -> None:
        state = self.state
        result = _Error(error)
        if state == _WAITING:
            self.state = _DONE
            self.outcome = result
            _trio_reschedule(self.task, result)
        elif state == _PENDING:
            self.state = _DONE
            self.outcome = result
        else:
            raise RuntimeError("waiter is already resolved")

    def exception(self) -> BaseException | None:
        error = getattr(self.outcome, "error", None)
        return error if isinstance(error, BaseException) else None

    def _abort(self, raise_cancel: Any) -> Any:
        self.state = _GONE
        return _trio_abort_succeeded

    def __await__(self) -> Generator[Any, None, Any]:
        # Not a generator itself: the waiting task's stack is one frame shallower, and
        # every wake-up passes through each frame.
        if self.state == _DONE:
            return _resolved(self.outcome)
        self.task = _trio_current_task()
        self.state = _WAITING
        waiting: Generator[Any, None, Any] = _trio_wait_rescheduled(self._abort).__await__()
        return waiting


def _resolved(result: Any) -> Generator[Any, None, Any]:
    """What awaiting a waiter resolved before anyone awaited it gives: its outcome."""
    return result.unwrap()
    yield  # a generator that never suspends


class TrioTimer(Timer):
    def __init__(self) -> None:
        super().__init__()
        self._scope: Any = None
        self._started = False

    def _expire(self, waiter: TrioWaiter) -> None:
        waiter.set_result(TIMED_OUT)

    def _rearm(self, deadline: float) -> None:
        if self._scope is not None:
            self._scope.deadline = deadline
        elif not self._started:
            import trio

            self._started = True
            trio.lowlevel.spawn_system_task(self._run, name="pdc-mailbox-timer")

    async def _run(self) -> None:
        import trio

        while True:
            self._expire_due(trio.current_time())
            with trio.CancelScope(deadline=self._wake_at) as self._scope:
                await trio.sleep_forever()
            self._scope = None


class TrioTaskHost:
    """A :class:`~._common.TaskHost` that is a trio nursery: trio's own cancellation
    reaches its tasks, so ``on_cancel`` is only called when the host is left by an
    exception (the tasks are cancelled by then anyway)."""

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        import trio

        self._on_cancel = on_cancel
        self._manager = trio.open_nursery()
        self._nursery: Any = None

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str) -> None:
        self._nursery.start_soon(fn, *args, name=name)

    async def __aenter__(self) -> TrioTaskHost:
        self._nursery = await self._manager.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is not None:
            self._on_cancel()
        return bool(await self._manager.__aexit__(exc_type, exc, tb))


class TrioIncarnationScope:
    """An :class:`~._common.IncarnationScope` that is a trio ``CancelScope`` throughout
    (trio has no other way to cancel one task)."""

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        import trio

        self._scope = trio.CancelScope()

    @property
    def cancelled_caught(self) -> bool:
        return bool(self._scope.cancelled_caught)

    def cancel(self) -> None:
        self._scope.cancel()

    def engage(self) -> None:
        pass

    def __enter__(self) -> TrioIncarnationScope:
        self._scope.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return bool(self._scope.__exit__(exc_type, exc, tb))


def _task_flag_reader(run_context: Any) -> Callable[[], bool]:
    """The entry check of the trio kit of this thread: the running task's
    ``effectively_cancelled`` flag, which trio keeps up to date (shields included)
    whenever a scope is cancelled.

    trio's run context is a ``threading.local``, whose attribute read costs ~40 ns (the
    thread's dict found on every read); its ``__dict__`` is that dict, the same object
    for the thread's lifetime, so the kit of this thread (one per thread) holds it and
    subscripts it: 32 vs 74 ns a check (``partial(attrgetter(...))``) on this project's
    VM. Outside a task of this thread's run (no ``"task"``) it asks trio's public
    ``current_task()``, which says what is wrong.
    """
    per_thread: dict[str, Any] = run_context.__dict__
    slowly = TrioKit._cancel_called_slowly

    def cancel_called() -> bool:
        try:
            flag: bool = per_thread["task"]._cancel_status.effectively_cancelled
        except KeyError:
            return slowly()
        return flag

    return cancel_called


class TrioKit(Turns):
    """Waiters park the task with ``trio.lowlevel.wait_task_rescheduled``.

    One per thread that runs trio (its :class:`Turns` are that thread's loop's).
    """

    name = "trio"
    waiter: Callable[[], Waiter] = TrioWaiter

    def __init__(self) -> None:
        super().__init__()
        global _trio_reschedule, _trio_current_task, _trio_wait_rescheduled
        global _trio_abort_succeeded, _Value, _Error
        import outcome
        import trio

        _trio_reschedule = trio.lowlevel.reschedule
        _trio_current_task = trio.lowlevel.current_task
        _trio_wait_rescheduled = trio.lowlevel.wait_task_rescheduled
        _trio_abort_succeeded = trio.lowlevel.Abort.SUCCEEDED
        _Value = outcome.Value
        _Error = outcome.Error
        self._trio = trio
        self._timer_var: Any = trio.lowlevel.RunVar("pdc_mailbox_timer")
        # Whether the running task is in a cancelled scope: trio keeps the task's
        # effectively_cancelled flag up to date, shields included, whenever a scope is
        # cancelled. Read through C calls only where trio's run context is reachable.
        self.cancel_called: Callable[[], bool] = self._cancel_called_slowly
        try:
            from trio._core._run import GLOBAL_RUN_CONTEXT
        except ImportError:  # pragma: no cover - another trio layout: the public way
            pass
        else:
            self.cancel_called = _task_flag_reader(GLOBAL_RUN_CONTEXT)

    def _timer(self) -> TrioTimer:
        try:
            timer: TrioTimer = self._timer_var.get()
        except LookupError:
            timer = TrioTimer()
            self._timer_var.set(timer)
        return timer

    def arm(self, waiter: Waiter, timeout: float) -> None:
        if waiter.done():
            return
        if timeout <= 0:
            waiter.set_result(TIMED_OUT)
        else:
            self._timer().add(self._trio.current_time() + timeout, waiter)

    @staticmethod
    def woken(waiter: Waiter) -> bool:
        trio_waiter = cast(TrioWaiter, waiter)
        return trio_waiter.state == _DONE and trio_waiter.exception() is None

    def now(self) -> float:
        return float(self._trio.current_time())

    @staticmethod
    def current_task() -> object:
        return _trio_current_task()

    @staticmethod
    def _cancel_called_slowly() -> bool:
        return bool(_trio_current_task()._cancel_status.effectively_cancelled)

    async def checkpoint(self) -> None:
        await self._trio.lowlevel.checkpoint()

    @staticmethod
    def task_host(on_cancel: Callable[[], None]) -> TrioTaskHost:
        return TrioTaskHost(on_cancel)

    def spawn_system_task(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._trio.lowlevel.spawn_system_task(fn, name=name)

    @staticmethod
    def cancel_scope() -> TrioIncarnationScope:
        return TrioIncarnationScope()


def woken_value(waiter: TrioWaiter) -> Any:
    """The value ``waiter`` was resolved with, or None if it has none (yet)."""
    if waiter.state == _DONE and waiter.exception() is None:
        return waiter.outcome.value
    return None
