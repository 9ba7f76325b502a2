"""A toy kind of actor, correct, and mutants of its handle with one rule broken each.

:class:`ToyTarget` starts a :class:`ToyRunner`: a task that serves a heap of requests
(priority, then FIFO) with the handle kit's echo. Its :class:`ToyRef` implements
delivery only, so ActorRef's rules apply. Each mutant is a ``ToyTarget`` whose handle
breaks one rule the way a kind that rewrote the rules for itself could (the drifts
pdc-ray's copy had among them); ``caught_by`` names the kit's checks that must fail.
"""

# ruff: noqa: ASYNC109
# ``timeout`` parameters are the ActorRef API.

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import anyio

from pdc_core import ActorState, ActorStatistics, ActorStopped, MessageTimeout
from pdc_core.lowlevel import (
    DEFAULT_PRIORITY,
    TIMED_OUT,
    ActorRef,
    ActorRunner,
    StartOptions,
    check_priority,
    check_timeout,
    current_task,
    runner_for,
)
from pdc_core.testing import Echo


def _own_priority(item: Any) -> Any:
    """The mutants' copy of the default: the item's own priority, else 128."""
    return getattr(item, "priority", DEFAULT_PRIORITY)


class _Slot:
    """Where one request's reply lands."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class ToyRef(ActorRef[Any, Any]):
    """A correct handle: delivery only."""

    def __init__(self, runner: ToyRunner) -> None:
        self._runner = runner

    @property
    def actor_id(self) -> str:
        return self._runner.name

    @property
    def state(self) -> ActorState:
        return self._runner.state

    def _admit(self) -> None:
        runner = self._runner
        if runner.closed:
            raise ActorStopped(f"actor {self.actor_id!r} is not running", actor_id=self.actor_id)
        if runner.is_member is not None and not runner.is_member(current_task()):
            raise ActorStopped(f"actor {self.actor_id!r} is draining", actor_id=self.actor_id)

    async def _deliver(self, message: Any, priority: int) -> None:
        self._admit()
        self._runner.push(message, priority, None)

    async def _request(self, message: Any, priority: int, timeout: float | None) -> Any:
        self._admit()
        slot = _Slot()
        runner = self._runner
        runner.push(message, priority, slot)
        try:
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                await slot.done.wait()
        finally:
            self._forget(slot)
        if not slot.done.is_set():
            return TIMED_OUT
        if slot.error is not None:
            raise slot.error
        return slot.value

    def _forget(self, slot: _Slot) -> None:
        """The request ended: untrack it (the runner skips it if not yet handled)."""
        self._runner.tracked.discard(slot)

    async def pause(self) -> None:
        pass

    async def resume(self) -> None:
        pass

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        self._runner.request_stop(drain)
        await self._runner.finished.wait()

    async def wait(self) -> None:
        await self._runner.finished.wait()

    def statistics(self) -> ActorStatistics:
        runner = self._runner
        return ActorStatistics(self.actor_id, runner.state, runner.handled, 0, 0, 0, None)


class ToyRunner(ActorRunner):
    """Serves the heap with the echo named ``key``, one request at a time."""

    names = itertools.count(1)

    def __init__(self, target: ToyTarget) -> None:
        self.name = f"toy-{next(self.names)}"
        self.key = target.key
        self.heap: list[tuple[int, int, Any, _Slot | None]] = []
        self.seq = itertools.count()
        self.tracked: set[_Slot] = set()
        self.doorbell = anyio.Event()
        self.finished = anyio.Event()
        self.state = ActorState.STARTING
        self.closed = False
        self.stopping: bool | None = None  # None: running; else whether to drain
        self.busy = False
        self.handled = 0
        self.is_member: Callable[[object], bool] | None = None
        self.on_idle: Callable[[], None] | None = None
        self._ref = target.ref_type(self)

    @property
    def ref(self) -> ToyRef:
        return self._ref

    def push(self, message: Any, priority: int, slot: _Slot | None) -> None:
        if slot is not None:
            self.tracked.add(slot)
        heapq.heappush(self.heap, (-priority, next(self.seq), message, slot))
        self.doorbell.set()

    def request_stop(self, drain: bool) -> None:
        self.closed = True
        self.state = ActorState.STOPPING
        if self.stopping is None or (self.stopping and not drain):
            self.stopping = drain
        if not drain:
            self._fail_queued(ActorStopped(f"actor {self.name!r} stopped", actor_id=self.name))
        self.doorbell.set()

    def _fail_queued(self, error: ActorStopped) -> None:
        heap, self.heap = self.heap, []
        for *_, slot in heap:
            if slot is not None:
                slot.fail(error)

    async def run(self, started: Callable[[], None]) -> None:
        self.state = ActorState.RUNNING
        started()
        echo = Echo.named(self.key)
        while True:
            while not self.heap:
                if self.stopping is not None:
                    return
                if self.on_idle is not None:
                    self.on_idle()
                self.doorbell = anyio.Event()
                await self.doorbell.wait()
            _, _, message, slot = heapq.heappop(self.heap)
            if slot is not None and slot not in self.tracked:
                continue  # its caller gave up: skipped
            self.busy = True
            reply = await echo.handle_async(message.value)
            self.busy = False
            self.handled += 1
            if slot is not None and not slot.done.is_set():
                slot.value = reply
                slot.done.set()

    def finalize(self, error: BaseException | None) -> None:
        self.closed = True
        self.state = ActorState.STOPPED
        self._fail_queued(ActorStopped(f"actor {self.name!r} stopped", actor_id=self.name))
        for slot in list(self.tracked):
            slot.fail(ActorStopped(f"actor {self.name!r} stopped", actor_id=self.name))
        self.finished.set()

    def begin_drain(self, on_idle: Callable[[], None], is_member: Callable[[object], bool]) -> None:
        self.is_member = is_member
        self.on_idle = on_idle
        self.doorbell.set()

    @property
    def idle(self) -> bool:
        return self.finished.is_set() or (not self.heap and not self.busy)


class ToyTarget:
    """Start a toy actor running the echo named ``key``."""

    #: The bug planted (the correct toy has none).
    bug: ClassVar[str] = ""
    #: The kit's checks that must fail.
    caught_by: ClassVar[frozenset[str]] = frozenset()
    ref_type: ClassVar[type[ToyRef]] = ToyRef

    def __init__(self, key: str) -> None:
        self.key = key


@runner_for.register(ToyTarget)
def _toy_runner(target: ToyTarget, /, args: tuple[Any, ...], options: StartOptions) -> ToyRunner:
    return ToyRunner(target)


# -- the mutants: a handle that rewrites one rule, and gets it wrong ------------------------


class _IgnoresMessagePriority(ToyRef):
    async def tell(self, message: Any, *, priority: int | None = None) -> None:
        await self._deliver(
            message, check_priority(DEFAULT_PRIORITY if priority is None else priority)
        )


class _ClampsPriority(ToyRef):
    async def tell(self, message: Any, *, priority: int | None = None) -> None:
        if priority is None:
            priority = _own_priority(message)
        await self._deliver(message, min(255, max(0, int(priority))))


class _RefusesNegativeTimeouts(ToyRef):  # pdc-ray's old drift
    async def ask(
        self, message: Any, *, priority: int | None = None, timeout: float | None = None
    ) -> Any:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
        return await super().ask(message, priority=priority, timeout=timeout)


class _RefusesNumpyPriorities(ToyRef):  # pdc-ray's old drift
    async def ask(
        self, message: Any, *, priority: int | None = None, timeout: float | None = None
    ) -> Any:
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise TypeError(f"priority must be an int in 0..255, got {priority!r}")
        return await super().ask(message, priority=priority, timeout=timeout)


class _StoppedBeforeCancelled(ToyRef):
    """No entry check, no cancellation first: a cancelled caller of a stopped actor
    gets ActorStopped."""

    async def ask(
        self, message: Any, *, priority: int | None = None, timeout: float | None = None
    ) -> Any:
        timeout = check_timeout(timeout)
        prio = check_priority(_own_priority(message) if priority is None else priority)
        result = await self._request(message, prio, timeout)
        if result is TIMED_OUT:
            raise MessageTimeout(f"actor {self.actor_id!r} did not reply within {timeout:g} s")
        return result


class _KeepsAbandonedRequests(ToyRef):
    def _forget(self, slot: _Slot) -> None:
        if slot.done.is_set():
            self._runner.tracked.discard(slot)  # forgets answered requests only


class _EmptyBatchesContactTheActor(ToyRef):
    def _batch(self, messages: Iterable[Any]) -> Sequence[Any]:
        self._admit()  # even for an empty batch: a stopped actor raises
        return super()._batch(messages)


class _AsksInHandlingOrder(ToyRef):
    async def _request_many(
        self, messages: Sequence[Any], priority: int | list[int], timeout: float | None
    ) -> Any:
        priorities = [priority] * len(messages) if isinstance(priority, int) else priority
        replies: list[Any] = []
        async with anyio.create_task_group() as tg:
            for message, one in zip(messages, priorities, strict=True):

                async def ask(m: Any = message, p: int = one) -> None:
                    replies.append(await self._request(m, p, timeout))  # as they come

                tg.start_soon(ask)
        return replies


class _RefusesNurseryMembers(ToyRef):
    def _admit(self) -> None:
        runner = self._runner
        if runner.closed or runner.is_member is not None:  # nobody gets in once draining
            raise ActorStopped(f"actor {self.actor_id!r} is draining", actor_id=self.actor_id)


def _mutant(name: str, ref_type: type[ToyRef], bug: str, *caught_by: str) -> type[ToyTarget]:
    return type(
        name, (ToyTarget,), {"ref_type": ref_type, "bug": bug, "caught_by": frozenset(caught_by)}
    )


MUTANTS: list[type[ToyTarget]] = [
    _mutant(
        "IgnoresMessagePriority",
        _IgnoresMessagePriority,
        "tell ignores the message's own priority",
        "test_priority_order_and_default_from_the_message",
    ),
    _mutant(
        "ClampsPriority",
        _ClampsPriority,
        "tell clamps an out-of-range priority instead of refusing it",
        "test_priority_out_of_range_or_not_an_int_is_refused",
    ),
    _mutant(
        "RefusesNegativeTimeouts",
        _RefusesNegativeTimeouts,
        "ask refuses a negative timeout instead of treating it as now",
        "test_zero_and_negative_timeouts_mean_now",
    ),
    _mutant(
        "RefusesNumpyPriorities",
        _RefusesNumpyPriorities,
        "ask refuses numpy integer priorities",
        "test_numpy_integer_priorities_are_priorities",
    ),
    _mutant(
        "StoppedBeforeCancelled",
        _StoppedBeforeCancelled,
        "ask raises ActorStopped to a cancelled caller of a stopped actor",
        "test_stop_while_asking_fails_the_request_with_actor_stopped",
    ),
    _mutant(
        "KeepsAbandonedRequests",
        _KeepsAbandonedRequests,
        "a cancelled ask stays tracked",
        "test_a_cancelled_ask_leaves_nothing_behind",
    ),
    _mutant(
        "EmptyBatchesContactTheActor",
        _EmptyBatchesContactTheActor,
        "an empty batch on a stopped actor raises ActorStopped",
        "test_empty_batches_send_nothing_and_return_at_once",
    ),
    _mutant(
        "AsksInHandlingOrder",
        _AsksInHandlingOrder,
        "ask_many returns replies in the order they were handled",
        "test_ask_many_and_ask_stream_keep_the_order_of_the_messages",
    ),
    _mutant(
        "RefusesNurseryMembers",
        _RefusesNurseryMembers,
        "a draining actor refuses the nursery's own actors",
        "test_a_draining_nursery_admits_its_own_actors",
    ),
]


class _TellsWhenCancelled(ToyRef):
    """tell without the entry check: a caller in a cancelled scope still sends."""

    async def tell(self, message: Any, *, priority: int | None = None) -> None:
        if priority is None:
            priority = _own_priority(message)
        await self._deliver(message, check_priority(priority))


MUTANTS.append(
    _mutant(
        "TellsWhenCancelled",
        _TellsWhenCancelled,
        "tell completes (and sends) in an already-cancelled scope",
        "test_an_already_cancelled_caller_sends_nothing",
    )
)
