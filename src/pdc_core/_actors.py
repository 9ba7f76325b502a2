"""Actors, actor handles and actor nurseries.

An *actor* processes the messages sent to it one at a time, in priority order, and
replies to requests. It runs as one task inside an :class:`ActorNursery`::

    async with pdc_core.open_nursery() as nursery:
        ref = await nursery.start_actor(Doubler)
        assert await ref.ask(21) == 42

Guarantees:

* **Start is a handshake.** :meth:`ActorNursery.start_actor` returns once the actor
  has run its ``on_start`` and is receiving. If it fails to start, ``start_actor``
  raises :class:`~pdc_core.ActorCrashed` and nothing is left running.
* **An actor lives no longer than its nursery.** When the ``async with`` body ends,
  every actor still running is stopped after it has handled the messages already in
  its mailbox (optionally bounded by ``shutdown_timeout``); when the body raises or
  the nursery is cancelled, actors are cancelled.
* **Crashes are never silent and never hang.** An exception escaping an actor's
  handler cancels the other actors and the body, and the nursery raises
  :class:`~pdc_core.ActorCrashed` carrying the actor id and the original exception
  (as ``cause`` and ``__cause__``). With a :class:`RestartPolicy` the actor is
  restarted instead (fresh instance, same mailbox and handle) until it crashes more
  than ``max_restarts`` times within ``within`` seconds.
* **No request is left hanging.** Every ``ask`` completes with the reply, its
  timeout (:class:`~pdc_core.MessageTimeout`, a :class:`TimeoutError`), or an error:
  :class:`~pdc_core.ActorStopped` when the actor stops before replying,
  :class:`~pdc_core.ActorCrashed` when handling it (or the actor) crashed,
  :class:`~pdc_core.MessageDropped` when a ``"drop_oldest"`` mailbox evicted it. A
  request whose caller was cancelled or timed out before the actor got to it is
  skipped, not handled.
* **Cancellation leaves nothing behind.** Actors use no thread and no task per
  message; a cancelled ``ask`` or ``tell`` leaves no waiter or timer behind, and
  stopping an actor fails every request still queued.

Handles are :class:`ActorRef` objects: an abstract interface (``tell``, ``ask``,
``tell_many``, ``ask_many``, ``ask_stream``, ``pause``, ``resume``, ``stop``,
``wait``, ``statistics``) with one implementation per kind of actor. Mailbox actors
(this module) are one kind; ring kernels and persistent device kernels are others.
They all plug into the nursery through :class:`ActorRunner`, the internal extension
point documented there.
"""

# Timeouts are parameters, not cancel scopes, on purpose: a deadline scope costs more than
# a whole round trip (see the mailbox module docstring), and the seed API takes them.
# ruff: noqa: ASYNC109

from __future__ import annotations

import enum
import inspect
import itertools
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast

import anyio
import anyio.abc

from ._exceptions import (
    ActorCrashed,
    ActorStopped,
    DuplicateActorError,
    LifecycleError,
    MailboxClosed,
    MessageDropped,
    MessageTimeout,
)
from ._mailbox import (
    _EMPTY,
    _TIMED_OUT,
    DEFAULT_CAPACITY,
    DEFAULT_PRIORITY,
    Backpressure,
    Control,
    Kit,
    Mailbox,
    MailboxStatistics,
    check_priority,
    current_kit,
    fail,
    wake,
    woken_value,
)
from ._persistent import PersistentKernel

__all__ = [
    "Actor",
    "ActorNursery",
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "RestartPolicy",
    "open_nursery",
]

M = TypeVar("M")
R = TypeVar("R")

#: Yield to the scheduler once every this many messages handled without waiting.
_CHECKPOINT_EVERY: Final = 64


class ActorState(enum.Enum):
    """Lifecycle of an actor, as reported by :attr:`ActorRef.state`."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Supervise an actor by restarting it when it crashes.

    The actor is restarted after ``backoff`` seconds, doubling (``backoff_factor``) with
    each restart counted in the window, up to ``max_backoff``. When it would be the
    ``max_restarts + 1``-th restart within ``within`` seconds, the crash is escalated:
    the nursery raises :class:`~pdc_core.ActorCrashed` as if there were no policy.
    The request being handled when the actor crashed fails with
    :class:`~pdc_core.ActorCrashed`; the ones still queued are handled by the new
    incarnation.
    """

    max_restarts: int = 3
    within: float = 60.0
    backoff: float = 0.01
    backoff_factor: float = 2.0
    max_backoff: float = 1.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.within <= 0:
            raise ValueError(f"within must be > 0 seconds, got {self.within}")
        if self.backoff < 0 or self.max_backoff < 0 or self.backoff_factor < 1:
            raise ValueError("backoff and max_backoff must be >= 0, backoff_factor >= 1")

    def delay(self, restarts: int) -> float:
        """Seconds to wait before the ``restarts``-th restart of the current window."""
        exponent = max(0, restarts - 1)
        return float(min(self.max_backoff, self.backoff * self.backoff_factor**exponent))


@dataclass(frozen=True, slots=True)
class ActorStatistics:
    """A snapshot of an actor's counters."""

    actor_id: str
    state: ActorState
    #: Messages whose handler returned (tells and asks).
    handled: int
    #: Exceptions raised by the handler (each one a crash).
    errors: int
    #: Times the actor was restarted by its :class:`RestartPolicy`.
    restarts: int
    #: Requests skipped because their caller had given up (cancelled or timed out).
    skipped: int
    #: The mailbox's counters, where the actor has a mailbox.
    mailbox: MailboxStatistics | None


# --------------------------------------------------------------------------------------
# Handles
# --------------------------------------------------------------------------------------


class ActorRef(ABC, Generic[M, R]):
    """A handle to an actor: the only way to talk to it.

    ``M`` is the type of message the actor accepts and ``R`` the type of its replies.
    Every implementation guarantees that ``ask`` completes (reply, timeout or error)
    and never hangs after the actor has stopped. ``priority=None`` means the message's
    own ``priority`` attribute when it has one, else 128.
    """

    __slots__ = ()

    @property
    @abstractmethod
    def actor_id(self) -> str:
        """The id of the actor, unique among the live actors of its nursery."""

    @property
    @abstractmethod
    def state(self) -> ActorState:
        """The actor's lifecycle state."""

    @property
    def alive(self) -> bool:
        """Whether the actor accepts messages (it has not stopped or crashed)."""
        return self.state not in (ActorState.STOPPING, ActorState.STOPPED, ActorState.CRASHED)

    @abstractmethod
    async def tell(self, message: M, *, priority: int | None = None) -> None:
        """Send ``message`` without waiting for a reply (fire and forget).

        Waits only for mailbox room under the ``"block"`` policy. Raises
        :class:`~pdc_core.ActorStopped` if the actor is not running.
        """

    @abstractmethod
    async def ask(
        self, message: M, *, priority: int | None = None, timeout: float | None = None
    ) -> R:
        """Send ``message`` and return the actor's reply to it.

        Raises :class:`~pdc_core.MessageTimeout` (a :class:`TimeoutError`) after
        ``timeout`` seconds, :class:`~pdc_core.ActorStopped` if the actor stops first,
        :class:`~pdc_core.ActorCrashed` if handling the message crashed the actor.
        """

    async def tell_many(self, messages: Iterable[M], *, priority: int | None = None) -> None:
        """Send every message of ``messages``, in order, without waiting for replies."""
        for message in messages:
            await self.tell(message, priority=priority)

    async def ask_many(
        self, messages: Iterable[M], *, priority: int | None = None, timeout: float | None = None
    ) -> list[R]:
        """Send every message and return the replies, in the order of ``messages``.

        ``timeout`` bounds the whole batch. If any request fails, this raises that
        request's error.
        """
        deadline = None if timeout is None else anyio.current_time() + timeout
        replies: list[R] = []
        for message in messages:
            remaining = None if deadline is None else max(0.0, deadline - anyio.current_time())
            replies.append(await self.ask(message, priority=priority, timeout=remaining))
        return replies

    async def ask_stream(
        self,
        messages: Iterable[M] | AsyncIterable[M],
        *,
        window: int = 256,
        priority: int | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[R]:
        """Yield the replies to ``messages`` in order, with up to ``window`` in flight.

        ``messages`` may be an async iterable. ``timeout`` bounds each window.
        """
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        chunk: list[M] = []
        if isinstance(messages, AsyncIterable):
            async for message in messages:
                chunk.append(message)
                if len(chunk) >= window:
                    for reply in await self.ask_many(chunk, priority=priority, timeout=timeout):
                        yield reply
                    chunk = []
        else:
            for message in messages:
                chunk.append(message)
                if len(chunk) >= window:
                    for reply in await self.ask_many(chunk, priority=priority, timeout=timeout):
                        yield reply
                    chunk = []
        if chunk:
            for reply in await self.ask_many(chunk, priority=priority, timeout=timeout):
                yield reply

    @abstractmethod
    async def pause(self) -> None:
        """Stop delivering messages to the actor; they stay queued. Stop still works."""

    @abstractmethod
    async def resume(self) -> None:
        """Resume delivery after :meth:`pause`."""

    @abstractmethod
    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        """Stop the actor and wait until it has stopped.

        New messages are refused at once. With ``drain=True`` the actor first handles
        everything already queued; otherwise it stops after the message in hand and
        the queued requests fail with :class:`~pdc_core.ActorStopped`. After
        ``timeout`` seconds the actor is cancelled. Idempotent. Called by the actor
        on itself, it requests the stop and returns without waiting.
        """

    @abstractmethod
    async def wait(self) -> None:
        """Wait until the actor has stopped (cleanly, by crashing, or cancelled)."""

    @abstractmethod
    def statistics(self) -> ActorStatistics:
        """Return a snapshot of the actor's counters."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.actor_id!r} {self.state.value}>"


class ActorRunner(ABC):
    """Internal extension point: how an :class:`ActorNursery` runs one actor.

    ``ActorNursery.start_actor(runner)`` accepts any ``ActorRunner`` and returns
    ``runner.ref``. The nursery owns the task and the supervision; the runner owns the
    actor. The contract:

    * :meth:`run` runs one *incarnation* of the actor inside the nursery's task. It
      sets up whatever the actor needs (a mailbox loop, a resident kernel fed through
      a ring), calls ``started()`` exactly once when the actor is ready to receive
      (that completes the start handshake), then serves until the actor is stopped
      and returns. Raising an ``Exception`` is a crash: without a restart policy the
      nursery raises :class:`~pdc_core.ActorCrashed`; with one, the nursery calls
      :meth:`on_crash` and, after the backoff, :meth:`run` again on the same runner,
      whose ``ref`` must stay valid across incarnations. Raising before ``started()``
      fails the start: ``start_actor`` raises ``ActorCrashed`` ("while starting") and
      nothing else is affected. ``run`` is cancelled (anyio cancellation) when the
      nursery is cancelled or :attr:`cancel_scope` is cancelled; it must then release
      everything it holds (device memory, running kernels) before the cancellation
      propagates. When a crash escalates, the nursery cancels its other actors and its
      body *before* calling :meth:`finalize`.
    * :meth:`finalize` is called exactly once, synchronously, when the actor is done
      for good: after a clean return, an escalated crash (``error`` is the
      :class:`~pdc_core.ActorCrashed` the nursery raises) or cancellation (``error``
      is the cancellation exception). It must make the ref refuse new messages and
      fail every request still pending with ``error`` if it is an ``ActorCrashed``,
      else with :class:`~pdc_core.ActorStopped`, so that no caller is left waiting.
    * :attr:`cancel_scope` is set by the nursery around each incarnation; a runner may
      cancel it to force-stop itself (e.g. after a drain timeout).

    A persistent-kernel actor subclasses this with a ``run`` that launches the kernel,
    calls ``started()`` once it is resident, polls its ring until told to stop, and
    tears the kernel down in a ``finally``; its ``ref`` subclasses :class:`ActorRef`.
    """

    #: Cancel scope of the current incarnation, set by the nursery before :meth:`run`.
    cancel_scope: anyio.CancelScope | None = None

    @property
    @abstractmethod
    def ref(self) -> ActorRef[Any, Any]:
        """The handle returned by ``start_actor``; the same object across restarts."""

    @abstractmethod
    async def run(self, started: Callable[[], None]) -> None:
        """Run one incarnation; call ``started()`` once ready; return when stopped."""

    def on_crash(self, error: Exception, *, restarting: bool) -> None:  # noqa: B027
        """Called when :meth:`run` raised ``error``, before a restart or escalation.

        The default does nothing. Typical use: fail the request that was being
        handled and report the state as restarting.
        """

    @abstractmethod
    def finalize(self, error: BaseException | None) -> None:
        """Called once when the actor is done for good; fail what is pending."""


# --------------------------------------------------------------------------------------
# Mailbox actors
# --------------------------------------------------------------------------------------


class Actor(Generic[M, R]):
    """Base class of class-based mailbox actors.

    Subclass it and implement :meth:`handle`; ``ask`` returns what it returns. The
    actor's state lives on the instance: only one message is handled at a time, so no
    locking is needed. ``self.ref`` is the actor's own handle (set before
    :meth:`on_start`). Under a :class:`RestartPolicy`, a class (or factory) passed to
    ``start_actor`` is instantiated afresh for each incarnation; an instance is reused.

    Define :meth:`handle_batch` instead of (or as well as) :meth:`handle` to receive
    every message that is waiting, up to ``max_batch``, in one call: the natural shape
    for GPU work.
    """

    ref: ActorRef[M, R]

    async def on_start(self) -> None:
        """Called before the actor receives its first message (the start handshake)."""

    async def handle(self, message: M) -> R:
        """Handle one message and return the reply."""
        raise NotImplementedError(f"{type(self).__name__} must implement handle()")

    async def handle_batch(self, messages: list[M]) -> list[R]:
        """Handle several messages at once; return one reply per message, in order."""
        return [await self.handle(message) for message in messages]

    async def on_stop(self) -> None:
        """Called after the last message when the actor stops cleanly."""


class _FunctionActor(Actor[Any, Any]):
    def __init__(self, fn: Callable[[Any], Awaitable[Any]]) -> None:
        self.handle = fn  # type: ignore[method-assign, assignment]


class _Stop(Control):
    __slots__ = ()


_STOP: Final = _Stop()


class _Batch:
    """The reply cell shared by the requests of one ``ask_many``.

    ``ordered`` is True when all its requests went into one priority lane in order, so
    a run of them received together can be answered with one slice assignment.
    """

    __slots__ = ("ordered", "remaining", "results", "waiter")

    def __init__(self, waiter: Any, n: int, *, ordered: bool = False) -> None:
        self.waiter = waiter
        self.remaining = n
        self.results: list[Any] = [None] * n
        self.ordered = ordered


async def _cancellation_first() -> None:
    """If the calling task is being cancelled, raise its cancellation.

    When a nursery is cancelled its actors may stop before the cancellation reaches a
    task that was sending to them; that task must end by its cancellation, not by an
    ``ActorStopped`` that only says the actor went first.
    """
    if anyio.current_effective_deadline() == -math.inf:
        await anyio.sleep_forever()


def _fail_envelope(envelope: Any, error: BaseException) -> None:
    sink = envelope[1]
    if sink is None:
        return
    fail(sink if envelope[2] < 0 else sink.waiter, error)


class _MailboxActorRef(ActorRef[M, R]):
    """Handle of a mailbox actor (see :class:`ActorRef`)."""

    __slots__ = ("_actor_id", "_kit", "_mailbox", "_runner")

    def __init__(self, actor_id: str, mailbox: Mailbox[Any], kit: Kit) -> None:
        self._actor_id = actor_id
        self._mailbox = mailbox
        self._kit = kit
        self._runner: _MailboxActor | None = None

    @property
    def actor_id(self) -> str:
        return self._actor_id

    @property
    def state(self) -> ActorState:
        assert self._runner is not None
        return self._runner.state

    def _stopped_error(self) -> ActorStopped:
        runner = self._runner
        if runner is not None and runner.crash is not None:
            return ActorCrashed(self._actor_id, runner.crash.cause)
        return ActorStopped(f"actor {self._actor_id!r} is not running", actor_id=self._actor_id)

    async def _enqueue(self, envelope: tuple[Any, Any, int], priority: int) -> None:
        try:
            await self._mailbox.send(envelope, priority)
        except MailboxClosed:
            await _cancellation_first()
            raise self._stopped_error() from None

    async def tell(self, message: M, *, priority: int | None = None) -> None:
        if priority is None:
            priority = getattr(message, "priority", DEFAULT_PRIORITY)
        mailbox = self._mailbox
        ops = mailbox._ops = mailbox._ops + 1
        if not ops % _CHECKPOINT_EVERY:
            # Yield now and then, before enqueueing: a cancelled tell sends nothing.
            await self._kit.checkpoint()
        if (
            mailbox._size < mailbox._capacity
            and not mailbox._closed
            and type(priority) is int
            and 0 <= priority <= 255
        ):
            envelope = (message, None, -1)
            if mailbox._taker is None or not mailbox._handoff(envelope):
                mailbox._push(envelope, priority)
            return
        await self._enqueue((message, None, -1), check_priority(priority))

    async def ask(
        self, message: M, *, priority: int | None = None, timeout: float | None = None
    ) -> R:
        if priority is None:
            priority = getattr(message, "priority", DEFAULT_PRIORITY)
        kit = self._kit
        waiter = kit.waiter()
        mailbox = self._mailbox
        if (
            mailbox._size < mailbox._capacity
            and not mailbox._closed
            and type(priority) is int
            and 0 <= priority <= 255
        ):
            envelope = (message, waiter, -1)
            if mailbox._taker is None or not mailbox._handoff(envelope):
                mailbox._push(envelope, priority)
        else:
            await self._enqueue((message, waiter, -1), check_priority(priority))
        if timeout is not None:
            kit.arm(waiter, timeout)
        try:
            result = await waiter
        except ActorStopped:
            await _cancellation_first()
            raise
        if result is _TIMED_OUT:
            raise MessageTimeout(f"actor {self._actor_id!r} did not reply within {timeout} s")
        return cast(R, result)

    def _priorities(self, batch: list[M], priority: int | None) -> int | list[int]:
        if priority is not None:
            return check_priority(priority)
        first = getattr(batch[0], "priority", DEFAULT_PRIORITY)
        if all(getattr(m, "priority", DEFAULT_PRIORITY) == first for m in batch):
            return check_priority(first)
        return [check_priority(getattr(m, "priority", DEFAULT_PRIORITY)) for m in batch]

    async def _send_batch(
        self, envelopes: list[tuple[Any, Any, int]], prio: int | list[int]
    ) -> None:
        try:
            if isinstance(prio, int):
                await self._mailbox.send_many(envelopes, prio)
            else:
                for envelope, p in zip(envelopes, prio, strict=True):
                    await self._mailbox.send(envelope, p)
        except MailboxClosed:
            await _cancellation_first()
            raise self._stopped_error() from None

    async def tell_many(self, messages: Iterable[M], *, priority: int | None = None) -> None:
        batch = messages if isinstance(messages, list) else list(messages)
        if not batch:
            return
        prio = self._priorities(batch, priority)
        await self._send_batch([(m, None, -1) for m in batch], prio)

    async def ask_many(
        self, messages: Iterable[M], *, priority: int | None = None, timeout: float | None = None
    ) -> list[R]:
        batch = messages if isinstance(messages, list) else list(messages)
        if not batch:
            return []
        prio = self._priorities(batch, priority)
        kit = self._kit
        cell = _Batch(kit.waiter(), len(batch), ordered=isinstance(prio, int))
        envelopes = [(m, cell, i) for i, m in enumerate(batch)]
        if timeout is None:
            await self._send_batch(envelopes, prio)
        else:
            kit.arm(cell.waiter, timeout)
            with anyio.move_on_after(timeout):
                await self._send_batch(envelopes, prio)
        try:
            result = await cell.waiter
        except ActorStopped:
            await _cancellation_first()
            raise
        if result is _TIMED_OUT:
            raise MessageTimeout(
                f"actor {self._actor_id!r} did not reply to a batch of {len(batch)} "
                f"within {timeout} s ({len(batch) - cell.remaining} replies were ready)"
            )
        return cast(list[R], result)

    async def pause(self) -> None:
        runner = self._runner
        assert runner is not None
        if not self.alive:
            raise self._stopped_error()
        self._mailbox.pause()
        if runner.state is ActorState.RUNNING:
            runner.state = ActorState.PAUSED

    async def resume(self) -> None:
        runner = self._runner
        assert runner is not None
        if not self.alive:
            raise self._stopped_error()
        self._mailbox.resume()
        if runner.state is ActorState.PAUSED:
            runner.state = ActorState.RUNNING

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        runner = self._runner
        assert runner is not None
        if runner.finished:
            return
        if runner.state is not ActorState.STOPPING:
            runner.state = ActorState.STOPPING
        mailbox = self._mailbox
        mailbox.close()
        if drain:
            mailbox.resume()
        else:
            mailbox.send_control(_STOP)
        if runner.is_current_task():
            return
        if timeout is None:
            await self.wait()
            return
        with anyio.move_on_after(timeout):
            await self.wait()
        if not runner.finished:
            if runner.cancel_scope is not None:
                runner.cancel_scope.cancel()
            await self.wait()

    async def wait(self) -> None:
        runner = self._runner
        assert runner is not None
        if runner.finished:
            return
        waiter = self._kit.waiter()
        runner.stop_waiters.append(waiter)
        await waiter

    def statistics(self) -> ActorStatistics:
        runner = self._runner
        assert runner is not None
        return ActorStatistics(
            actor_id=self._actor_id,
            state=runner.state,
            handled=runner.handled,
            errors=runner.errors,
            restarts=runner.restarts,
            skipped=runner.skipped,
            mailbox=self._mailbox.statistics(),
        )

    @property
    def mailbox(self) -> Mailbox[Any]:
        """The actor's mailbox (for statistics; send through the handle)."""
        return self._mailbox


class _MailboxActor(ActorRunner):
    """Runs a mailbox actor: one task, one loop, no task per message."""

    def __init__(
        self,
        actor_id: str,
        make: Callable[[], Actor[Any, Any]],
        mailbox: Mailbox[Any],
        kit: Kit,
        max_batch: int,
    ) -> None:
        self._make = make
        self._mailbox = mailbox
        self._kit = kit
        self._max_batch = max_batch
        self._ref: _MailboxActorRef[Any, Any] = _MailboxActorRef(actor_id, mailbox, kit)
        self._ref._runner = self
        self.state = ActorState.STARTING
        self.finished = False
        self.crash: ActorCrashed | None = None
        self.handled = 0
        self.errors = 0
        self.restarts = 0
        self.skipped = 0
        self.stop_waiters: list[Any] = []
        self._inflight: Any = None
        self._task: Any = None

    @property
    def ref(self) -> _MailboxActorRef[Any, Any]:
        return self._ref

    def is_current_task(self) -> bool:
        return self._task is not None and self._task is self._kit.current_task()

    async def run(self, started: Callable[[], None]) -> None:
        self._task = self._kit.current_task()
        actor = self._make()
        actor.ref = self._ref
        await actor.on_start()
        if self.state is not ActorState.STOPPING:
            self.state = ActorState.PAUSED if self._mailbox.paused else ActorState.RUNNING
        started()
        if type(actor).handle_batch is not Actor.handle_batch:
            stopped = await self._serve_batches(actor)
        else:
            stopped = await self._serve(actor)
        if stopped:
            await actor.on_stop()

    async def _serve(self, actor: Actor[Any, Any]) -> bool:
        """Handle messages one at a time until stopped; return True on a clean stop.

        This is the hot loop: it reads the mailbox directly and resolves each reply
        from this task, with no task, timer or cancel scope per message.
        """
        mailbox = self._mailbox
        kit = self._kit
        handle = actor.handle
        poll = mailbox._poll
        new_waiter = kit.waiter
        count = 0
        item: Any = None
        try:
            while True:
                item = poll()
                if item is _EMPTY:
                    if mailbox._closed and not mailbox._size and not mailbox._ctrl:
                        return True
                    waiter = new_waiter()
                    mailbox._taker = waiter
                    try:
                        item = await waiter
                    except BaseException:
                        if mailbox._taker is waiter:
                            mailbox._taker = None
                        item = woken_value(waiter)
                        raise
                    if item is None:
                        continue
                if item.__class__ is tuple:
                    message, sink, index = item
                    if sink is None:
                        await handle(message)
                    elif index < 0:
                        if not sink.done():
                            reply = await handle(message)
                            if not sink.done():
                                sink.set_result(reply)
                        else:
                            self.skipped += 1
                            continue
                    elif not sink.waiter.done():
                        sink.results[index] = await handle(message)
                        sink.remaining -= 1
                        if not sink.remaining:
                            wake(sink.waiter, sink.results)
                    else:
                        self.skipped += 1
                        continue
                    self.handled += 1
                    count += 1
                    if not count % _CHECKPOINT_EVERY:
                        item = None
                        await kit.checkpoint()
                elif item is _STOP:
                    return True
        except BaseException:
            self._inflight = item
            raise

    async def _serve_batches(self, actor: Actor[Any, Any]) -> bool:
        """Hand every waiting message (up to max_batch) to ``handle_batch`` at once."""
        mailbox = self._mailbox
        handle_batch = actor.handle_batch
        max_batch = self._max_batch
        items: list[Any] = []
        try:
            while True:
                try:
                    items = await mailbox.receive_many(max_batch)
                except MailboxClosed:
                    return True
                first = items[0]
                last = items[-1]
                n = len(items)
                if (
                    first.__class__ is tuple
                    and last.__class__ is tuple
                    and first[2] >= 0
                    and first[1] is last[1]
                    and last[2] - first[2] == n - 1
                    and first[1].ordered
                ):
                    # A run of one ask_many's requests, in order: one call, one slice.
                    cell = first[1]
                    if cell.waiter.done():
                        self.skipped += n
                    else:
                        replies = await handle_batch([item[0] for item in items])
                        if len(replies) != n:
                            raise ValueError(
                                f"handle_batch returned {len(replies)} replies for {n} messages"
                            )
                        start = first[2]
                        cell.results[start : start + n] = replies
                        cell.remaining -= n
                        self.handled += n
                        if not cell.remaining:
                            wake(cell.waiter, cell.results)
                    items = []
                    continue
                if await self._handle_mixed(handle_batch, items):
                    return True
                items = []
        except BaseException:
            self._inflight = items
            raise

    async def _handle_mixed(
        self, handle_batch: Callable[[list[Any]], Awaitable[list[Any]]], items: list[Any]
    ) -> bool:
        """Handle a batch of tells, asks, batch parts and control; True on a stop."""
        stop = False
        live: list[Any] = []
        for item in items:
            if item.__class__ is not tuple:
                stop = stop or item is _STOP
                continue
            sink = item[1]
            if (
                sink is None
                or (item[2] < 0 and not sink.done())
                or (item[2] >= 0 and not sink.waiter.done())
            ):
                live.append(item)
            else:
                self.skipped += 1
        if live:
            replies = await handle_batch([item[0] for item in live])
            if len(replies) != len(live):
                raise ValueError(
                    f"handle_batch returned {len(replies)} replies for {len(live)} messages"
                )
            for (_message, sink, index), reply in zip(live, replies, strict=True):
                if sink is None:
                    continue
                if index < 0:
                    wake(sink, reply)
                else:
                    sink.results[index] = reply
                    sink.remaining -= 1
                    if not sink.remaining:
                        wake(sink.waiter, sink.results)
            self.handled += len(live)
        return stop

    def _fail_inflight(self, error: Callable[[], BaseException]) -> None:
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        for item in inflight if isinstance(inflight, list) else (inflight,):
            if item.__class__ is tuple:
                _fail_envelope(item, error())

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        self.errors += 1
        if restarting:
            self.restarts += 1
            self.state = ActorState.RESTARTING
            self._fail_inflight(lambda: ActorCrashed(self._ref.actor_id, error))

    def finalize(self, error: BaseException | None) -> None:
        self.finished = True
        actor_id = self._ref.actor_id
        failure: Callable[[], ActorStopped]
        if isinstance(error, ActorCrashed):
            self.state = ActorState.CRASHED
            crash = self.crash = error

            def failure() -> ActorStopped:
                return ActorCrashed(actor_id, crash.cause)

        else:
            self.state = ActorState.STOPPED
            reason = "was cancelled" if error is not None else "stopped"

            def failure() -> ActorStopped:
                return ActorStopped(
                    f"actor {actor_id!r} {reason} before replying", actor_id=actor_id
                )

        mailbox = self._mailbox
        mailbox.close()
        self._fail_inflight(failure)
        for envelope in mailbox.discard():
            _fail_envelope(envelope, failure())
        waiters, self.stop_waiters = self.stop_waiters, []
        for waiter in waiters:
            wake(waiter)


def _on_drop_for(name: str) -> Callable[[Any], None]:
    def on_drop(envelope: Any) -> None:
        error = MessageDropped(
            f"request to actor {name!r} was dropped by its full mailbox (policy drop_oldest)"
        )
        _fail_envelope(envelope, error)

    return on_drop


# --------------------------------------------------------------------------------------
# The nursery
# --------------------------------------------------------------------------------------

_ids = itertools.count(1)


def _flatten(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The distinct leaves of ``group``.

    Two ``ActorCrashed`` for the same crash (the actor's own, and the one a pending
    request of the body failed with) count as one.
    """
    leaves: list[BaseException] = []
    seen: set[object] = set()
    for exc in group.exceptions:
        for leaf in _flatten(exc) if isinstance(exc, BaseExceptionGroup) else [exc]:
            key: object = id(leaf)
            if isinstance(leaf, ActorCrashed):
                key = ("crash", leaf.actor_id, id(leaf.cause))
            if key not in seen:
                seen.add(key)
                leaves.append(leaf)
    return leaves


ActorTarget: TypeAlias = (
    ActorRunner
    | PersistentKernel
    | type[Actor[Any, Any]]
    | Actor[Any, Any]
    | Callable[[Any], Awaitable[Any]]
    | Callable[..., Actor[Any, Any]]
)


class ActorNursery:
    """Starts actors and bounds their lifetime. Create one with :func:`open_nursery`."""

    def __init__(self, *, shutdown_timeout: float | None = None) -> None:
        self._tg: anyio.abc.TaskGroup | None = None
        self._actors: dict[str, ActorRef[Any, Any]] = {}
        self._runners: dict[str, ActorRunner] = {}
        self._shutdown_timeout = shutdown_timeout
        self._open = False

    # -- context manager ----------------------------------------------------------------

    async def __aenter__(self) -> ActorNursery:
        if self._tg is not None:
            raise LifecycleError("an ActorNursery can be entered only once")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._tg is not None
        self._open = False
        if exc is None:
            for ref in list(self._actors.values()):
                self._request_stop(ref)
            if self._shutdown_timeout is not None and self._actors:
                self._tg.start_soon(self._watchdog, self._shutdown_timeout)
        try:
            return bool(await self._tg.__aexit__(exc_type, exc, tb))
        except BaseExceptionGroup as group:
            leaves = _flatten(group)
            if len(leaves) == 1:
                leaf = leaves[0]
                raise leaf from leaf.__cause__
            raise

    def _request_stop(self, ref: ActorRef[Any, Any]) -> None:
        """Ask an actor to stop after draining, without waiting."""
        runner = self._runners.get(ref.actor_id)
        if isinstance(runner, _MailboxActor):
            if not runner.finished:
                runner.state = ActorState.STOPPING
                runner.ref.mailbox.close()
                runner.ref.mailbox.resume()
        elif runner is not None:
            assert self._tg is not None
            self._tg.start_soon(self._stop_other, ref)

    @staticmethod
    async def _stop_other(ref: ActorRef[Any, Any]) -> None:
        await ref.stop(drain=True)

    async def _watchdog(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            for ref in list(self._actors.values()):
                await ref.wait()
        for runner in list(self._runners.values()):
            if runner.cancel_scope is not None:
                runner.cancel_scope.cancel()

    # -- properties ---------------------------------------------------------------------

    @property
    def actors(self) -> dict[str, ActorRef[Any, Any]]:
        """The live actors, by id (a copy)."""
        return dict(self._actors)

    @property
    def cancel_scope(self) -> anyio.CancelScope:
        """The nursery's cancel scope: cancelling it cancels every actor and the body."""
        if self._tg is None:
            raise LifecycleError("the nursery has not been entered")
        return self._tg.cancel_scope

    def cancel(self) -> None:
        """Cancel every actor and the body of the ``async with`` block."""
        self.cancel_scope.cancel()

    # -- starting actors ----------------------------------------------------------------

    async def start_actor(
        self,
        target: ActorTarget,
        /,
        *args: Any,
        name: str | None = None,
        capacity: int = DEFAULT_CAPACITY,
        backpressure: Backpressure | str = Backpressure.BLOCK,
        restart: RestartPolicy | None = None,
        max_batch: int = 1024,
        paused: bool = False,
    ) -> ActorRef[Any, Any]:
        """Start an actor and return its handle once it is running (a handshake).

        ``target`` is one of:

        * an :class:`Actor` subclass, or a callable returning an :class:`Actor`
          (called with ``*args``; called again for each restart);
        * an :class:`Actor` instance (reused across restarts);
        * an ``async def handler(message)`` whose return value is the reply;
        * an :class:`ActorRunner`, the extension point for other kinds of actor (the
          mailbox options do not apply then).
        * a :class:`~pdc_core.PersistentKernel`: launched on the best available
          backend and run as an actor (``name`` and ``paused`` apply; for a backend
          or launch options pass a :class:`~pdc_core.PersistentKernelActor`).

        ``capacity`` and ``backpressure`` configure the mailbox, ``restart`` opts
        into supervision, ``max_batch`` caps the messages given to one
        ``handle_batch`` call, and ``paused=True`` starts the actor with delivery
        paused. ``name`` must be unique among the nursery's live actors
        (:class:`~pdc_core.DuplicateActorError` otherwise); by default one is made up.
        """
        if not self._open or self._tg is None:
            raise LifecycleError("cannot start an actor: the nursery is not open")
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if isinstance(target, PersistentKernel):
            from ._kernel_actor import PersistentKernelActor

            if args:
                raise TypeError("positional arguments do not apply to a PersistentKernel")
            target = PersistentKernelActor(target, name=name, paused=paused)
        if isinstance(target, ActorRunner):
            if args:
                raise TypeError("positional arguments do not apply to an ActorRunner")
            runner: ActorRunner = target
        else:
            runner = self._mailbox_runner(
                target, args, name, capacity, backpressure, max_batch, paused
            )
        actor_id = runner.ref.actor_id
        if actor_id in self._actors:
            raise DuplicateActorError(f"an actor named {actor_id!r} is already running")
        self._actors[actor_id] = runner.ref
        self._runners[actor_id] = runner
        try:
            ref: ActorRef[Any, Any] = await self._tg.start(
                self._supervise, runner, restart, name=f"pdc-actor-{actor_id}"
            )
        except BaseException:
            self._forget(actor_id, runner)
            raise
        return ref

    def _mailbox_runner(
        self,
        target: Any,
        args: tuple[Any, ...],
        name: str | None,
        capacity: int,
        backpressure: Backpressure | str,
        max_batch: int,
        paused: bool,
    ) -> _MailboxActor:
        if isinstance(target, type) and issubclass(target, Actor):
            label = target.__name__

            def make() -> Actor[Any, Any]:
                return target(*args)

        elif isinstance(target, Actor):
            if args:
                raise TypeError("positional arguments do not apply to an Actor instance")
            label = type(target).__name__
            instance = target

            def make() -> Actor[Any, Any]:
                return instance

        elif inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
            getattr(target, "__call__", None)  # noqa: B004
        ):
            if args:
                raise TypeError("positional arguments do not apply to a handler function")
            label = getattr(target, "__name__", type(target).__name__)
            fn = target

            def make() -> Actor[Any, Any]:
                return _FunctionActor(fn)

        elif callable(target):
            label = getattr(target, "__name__", type(target).__name__)
            factory = target

            def make() -> Actor[Any, Any]:
                actor = factory(*args)
                if not isinstance(actor, Actor):
                    raise TypeError(
                        f"actor factory {label!r} returned {type(actor).__name__}, not an Actor"
                    )
                return actor

        else:
            raise TypeError(
                "start_actor() needs an Actor subclass or instance, an async handler "
                f"function, a factory or an ActorRunner, got {target!r}"
            )
        actor_id = name if name is not None else f"{label}-{next(_ids)}"
        kit = current_kit()
        mailbox: Mailbox[Any] = Mailbox(
            capacity, backpressure=backpressure, name=actor_id, on_drop=_on_drop_for(actor_id)
        )
        mailbox._kit = kit
        if paused:
            mailbox.pause()
        return _MailboxActor(actor_id, make, mailbox, kit, max_batch)

    def _forget(self, actor_id: str, runner: ActorRunner) -> None:
        if self._runners.get(actor_id) is runner:
            del self._runners[actor_id]
            del self._actors[actor_id]

    async def _supervise(
        self,
        runner: ActorRunner,
        restart: RestartPolicy | None,
        *,
        task_status: anyio.abc.TaskStatus[ActorRef[Any, Any]] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        ref = runner.ref
        actor_id = ref.actor_id
        is_started = False

        def started() -> None:
            nonlocal is_started
            if not is_started:
                is_started = True
                task_status.started(ref)

        history: deque[float] = deque()
        error: BaseException | None = None
        try:
            while True:
                try:
                    with anyio.CancelScope() as scope:
                        runner.cancel_scope = scope
                        await runner.run(started)
                except Exception as exc:
                    if not is_started:
                        crashed = ActorCrashed(actor_id, exc, note=" while starting")
                        runner.on_crash(exc, restarting=False)
                        error = crashed
                        raise crashed from exc
                    now = anyio.current_time()
                    while history and history[0] <= now - (restart.within if restart else 0):
                        history.popleft()
                    if restart is not None and len(history) < restart.max_restarts:
                        history.append(now)
                        runner.on_crash(exc, restarting=True)
                        await anyio.sleep(restart.delay(len(history)))
                        continue
                    runner.on_crash(exc, restarting=False)
                    crashed = ActorCrashed(actor_id, exc)
                    error = crashed
                    # One for all: cancel the siblings and the body now, before the
                    # requests pending on this actor are failed (in `finally`), so that
                    # a caller of this nursery ends by its cancellation, not by them.
                    if self._tg is not None:
                        self._tg.cancel_scope.cancel()
                    raise crashed from exc
                else:
                    if scope.cancelled_caught and not is_started:
                        raise ActorStopped(
                            f"actor {actor_id!r} was stopped while starting", actor_id=actor_id
                        )
                    started()
                    return
        except BaseException as exc:
            if error is None:
                error = exc
            raise
        finally:
            runner.cancel_scope = None
            self._forget(actor_id, runner)
            runner.finalize(error)


def open_nursery(*, shutdown_timeout: float | None = None) -> ActorNursery:
    """Open an actor nursery: ``async with open_nursery() as nursery: ...``.

    When the body completes, running actors are stopped after draining their
    mailboxes; with ``shutdown_timeout``, any still running after that many seconds
    are cancelled. See :class:`ActorNursery` and the module documentation for the
    guarantees.
    """
    return ActorNursery(shutdown_timeout=shutdown_timeout)
