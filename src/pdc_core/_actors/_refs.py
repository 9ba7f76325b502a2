"""Actor handles and runners: the contract every kind of actor fulfils.

:class:`ActorRef` is the handle users hold (``tell``, ``ask``, ``stop``, ...), with one
implementation per kind of actor. :class:`ActorRunner` is how an
:class:`~pdc_core.ActorNursery` runs one actor. :func:`runner_for` turns a
``start_actor`` target into its runner; each kind of actor registers the targets it
serves (mailbox actors take every target no other kind claims; persistent kernels
register :class:`~pdc_core.PersistentKernel`), so the nursery knows no concrete kind.
All of it is public for extenders in :mod:`pdc_core.lowlevel`.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import enum
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Sequence,
)
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Protocol, SupportsIndex, TypeVar, cast, runtime_checkable

import anyio
from anyio.abc import ObjectSendStream

from .._exceptions import ActorStopped, MessageTimeout
from .._loop import TIMED_OUT, IncarnationScope, check_count, check_timeout, current_kit
from .._loop._cancel import raise_cancelled
from ._mailbox import DEFAULT_PRIORITY, Backpressure, MailboxStatistics, check_priority

__all__ = [
    "DEFAULT_PRIORITY",
    "TIMED_OUT",
    "ActorLike",
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "Placement",
    "RunsAs",
    "StartOptions",
    "StartsAs",
    "cancel_called",
    "cancellation_first",
    "check_priority",
    "check_timeout",
    "current_task",
    "message_priority",
    "raise_cancelled",
    "runner_for",
    "running_actor",
]

M = TypeVar("M")
R = TypeVar("R")
_RefT_co = TypeVar("_RefT_co", bound="ActorRef[Any, Any]", covariant=True)


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
    #: Messages taken from the mailbox that were never handled: every message of a
    #: handler call that raised (a ``handle_batch`` call fails its whole batch; each
    #: ask in it fails with :class:`~pdc_core.ActorCrashed`, each tell is lost) and any
    #: in hand when the actor stopped. With a mailbox, ``mailbox.received == handled +
    #: failed + skipped`` once the actor is idle or stopped.
    failed: int = 0


class ActorRef(ABC, Generic[M, R]):
    """A handle to an actor: the only way to talk to it.

    ``M`` is the type of message the actor accepts and ``R`` the type of its replies.
    Every implementation guarantees that ``ask`` completes (reply, timeout or error)
    and never hangs after the actor has stopped.

    **The rules of the messaging methods**, applied here, once, for every kind of actor
    (a kind supplies delivery only: :meth:`_deliver`, :meth:`_request` and, optionally,
    their batch forms):

    * **Priority**: ``priority`` if given, else the message's own ``priority``
      attribute, else :data:`DEFAULT_PRIORITY` (128). An integer in 0..255 (NumPy
      integer scalars too; higher is served first, FIFO within a priority); out of
      range is a :class:`ValueError` naming the value, anything but an integer a
      :class:`TypeError` (:func:`check_priority`). A kind whose queue is FIFO (a
      persistent kernel's ring) checks priorities but cannot order by them.
    * **Timeout**: ``None`` or ``inf`` waits as long as it takes; zero or negative
      means now (a reply not already there is a timeout); NumPy scalars are numbers;
      NaN is a :class:`ValueError` and anything but a number a :class:`TypeError`
      (:func:`check_timeout`). A timeout raises :class:`~pdc_core.MessageTimeout`
      (a :class:`TimeoutError`) "actor 'id' did not reply within T s" (``ask_many``:
      "did not reply to a batch of N within T s"); ``ask_many``'s bounds the batch.
    * **Cancellation**: each method raises the cancellation of an already-cancelled
      cancel scope on entry, before anything is sent. Otherwise they complete without
      yielding when they need not wait, and yield about once a millisecond (see
      :class:`~pdc_core.Mailbox`). A cancelled ``ask`` leaves nothing behind: its
      request is skipped if not yet handled and its reply, if one comes, is dropped.
    * **Stop while asking**: a caller whose request cannot be answered because the
      actor stopped gets :class:`~pdc_core.ActorStopped` (:class:`~pdc_core.ActorCrashed`
      after a crash), unless it is being cancelled: then the cancellation, first.
    * **Empty batches**: ``tell_many([])`` and ``ask_many([])`` send nothing and
      return at once (``None`` and ``[]``), whatever the actor's state; their arguments
      are still checked.
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

    # -- the messaging methods: the rules, once ----------------------------------------

    async def tell(self, message: M, *, priority: SupportsIndex | None = None) -> None:
        """Send ``message`` without waiting for a reply (fire and forget).

        Waits only for mailbox room under the ``"block"`` policy. Like a mailbox's
        ``send``, it still yields to other tasks about once a millisecond, however a
        task spreads its tells over actors, and now and then when the actor has fallen
        behind (see :class:`~pdc_core.Mailbox`); a tell cancelled there sends nothing.
        Raises :class:`~pdc_core.ActorStopped` if the actor is not running.
        """
        if self._cancel_called():
            await raise_cancelled()
        if priority is None:
            priority = getattr(message, "priority", DEFAULT_PRIORITY)
        if type(priority) is not int or not 0 <= priority <= 255:
            priority = check_priority(priority)
        try:
            waiting = self._deliver(message, priority)
            if waiting is not None:
                await waiting
        except ActorStopped:
            await cancellation_first()
            raise

    async def ask(
        self, message: M, *, priority: SupportsIndex | None = None, timeout: float | None = None
    ) -> R:
        """Send ``message`` and return the actor's reply to it.

        Raises :class:`~pdc_core.MessageTimeout` (a :class:`TimeoutError`) after
        ``timeout`` seconds, :class:`~pdc_core.ActorStopped` if the actor stops first,
        :class:`~pdc_core.ActorCrashed` if handling the message crashed the actor.
        Cancelling it leaves nothing behind: the request is skipped if not yet handled
        and its reply, if one comes, is dropped; a caller already cancelled on entry
        sends nothing.
        """
        if self._cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        if priority is None:
            priority = getattr(message, "priority", DEFAULT_PRIORITY)
        if type(priority) is not int or not 0 <= priority <= 255:
            priority = check_priority(priority)
        try:
            result = await self._request(message, priority, timeout)
        except ActorStopped:
            await cancellation_first()
            raise
        if result is TIMED_OUT:
            raise self._timeout_error(timeout)
        reply: R = result  # (not cast(): a call on the hot path)
        return reply

    async def tell_many(
        self, messages: Iterable[M], *, priority: SupportsIndex | None = None
    ) -> None:
        """Send every message of ``messages``, in order, without waiting for replies.

        Waits for room as :meth:`tell` does; raises :class:`~pdc_core.ActorStopped` if
        the actor is not running. A caller already cancelled on entry sends nothing;
        cancelled while it waits for room, a prefix of the batch may have been sent
        and the rest is not.
        """
        if self._cancel_called():
            await raise_cancelled()
        if priority is not None:
            priority = check_priority(priority)
        batch = self._batch(messages)
        if not len(batch):
            return
        try:
            await self._deliver_many(batch, _priorities(batch, priority))
        except ActorStopped:
            await cancellation_first()
            raise

    async def ask_many(
        self,
        messages: Iterable[M],
        *,
        priority: SupportsIndex | None = None,
        timeout: float | None = None,
    ) -> list[R]:
        """Send every message and return the replies, in the order of ``messages``.

        ``timeout`` bounds the whole batch. If any request fails, this raises that
        request's error. Cancelling it abandons the batch as a cancelled :meth:`ask`
        abandons its request (a prefix of it may have been sent; replies that come
        are dropped); a caller already cancelled on entry sends nothing.
        """
        if self._cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        if priority is not None:
            priority = check_priority(priority)
        batch = self._batch(messages)
        if not len(batch):
            return []
        try:
            result = await self._request_many(batch, _priorities(batch, priority), timeout)
        except ActorStopped:
            await cancellation_first()
            raise
        if result is TIMED_OUT:
            raise self._timeout_error(timeout, len(batch))
        return cast("list[R]", result)

    def _timeout_error(self, timeout: float | None, batch: int | None = None) -> MessageTimeout:
        """The :class:`~pdc_core.MessageTimeout` of an ``ask`` (``batch=None``) or of an
        ``ask_many`` of ``batch`` messages that timed out after ``timeout`` seconds."""
        what = "reply" if batch is None else f"reply to a batch of {batch}"
        return MessageTimeout(f"actor {self.actor_id!r} did not {what} within {timeout:g} s")

    async def ask_stream(
        self,
        messages: Iterable[M] | AsyncIterable[M],
        *,
        window: int = 256,
        priority: SupportsIndex | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[R]:
        """Yield the replies to ``messages`` in order, with up to ``window`` in flight.

        ``messages`` may be an async iterable. ``timeout`` bounds each window;
        ``window`` is an int (NumPy integers too) by the rule of priorities: anything
        else (``2.0``, ``True``) is a :class:`TypeError`, below 1 a :class:`ValueError`;
        errors are those of
        :meth:`ask_many`. Cancelling it abandons the window in flight as a cancelled
        :meth:`ask_many` does; the replies already yielded stand.
        """
        if self._cancel_called():
            await raise_cancelled()
        window = check_count(window, "window")
        if timeout is not None:
            timeout = check_timeout(timeout)
        if priority is not None:
            priority = check_priority(priority)
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

    def _cancel_called(self) -> bool:
        """The entry check: whether the caller is in a cancelled cancel scope. The
        default asks the running loop's kit; a kind that holds its kit may bind
        ``kit.cancel_called`` instead (one lookup less per message)."""
        return current_kit().cancel_called()

    # -- what each kind of actor supplies: delivery ------------------------------------

    def _batch(self, messages: Iterable[M]) -> Sequence[M]:
        """The messages of ``tell_many``/``ask_many`` as a sequence. The default makes a
        list; a kind may coerce instead (a kernel makes one record array). Per-message
        default priorities are read from the items of a list only."""
        return messages if isinstance(messages, list) else list(messages)

    @abstractmethod
    def _deliver(self, message: M, priority: int) -> Awaitable[None] | None:
        """Deliver one message whose reply is not wanted (``tell``).

        ``priority`` is resolved and checked (an int in 0..255); the caller was not
        cancelled on entry. Wait for room as the actor's policy says; raise
        :class:`~pdc_core.ActorStopped` if the actor does not take messages (the rule
        turns it into the cancellation of a cancelled caller).

        Usually an ``async def``. A kind with a fast path may make it a plain method
        that returns ``None`` once the message is delivered without waiting, or an
        awaitable that finishes the delivery: no coroutine per message.
        """

    @abstractmethod
    def _request(self, message: M, priority: int, timeout: float | None) -> Awaitable[Any]:
        """Deliver one request; the awaitable returned gives its reply, or
        :data:`TIMED_OUT` once ``timeout`` seconds have passed (``None``: no timeout;
        zero or negative: now).

        ``priority`` and ``timeout`` are resolved and checked. Raise
        :class:`~pdc_core.ActorStopped` (or :class:`~pdc_core.ActorCrashed`) when the
        request cannot be answered. A request whose caller is cancelled or times out
        must leave nothing behind: no waiter registered, no timer armed for it, and no
        reply delivered later to another request.

        Usually an ``async def``; a kind with a fast path may return the object its
        caller awaits directly (a mailbox actor returns the reply's waiter).
        """

    async def _deliver_many(self, messages: Sequence[M], priority: int | list[int]) -> None:
        """Deliver a non-empty batch of messages, in order, whose replies are not wanted.

        ``priority`` is one checked priority for all, or one per message. The default
        delivers them one by one with :meth:`_deliver`.
        """
        priorities = [priority] * len(messages) if isinstance(priority, int) else priority
        for message, one in zip(messages, priorities, strict=True):
            waiting = self._deliver(message, one)
            if waiting is not None:
                await waiting

    async def _request_many(
        self, messages: Sequence[M], priority: int | list[int], timeout: float | None
    ) -> Any:
        """Deliver a non-empty batch of requests; return their replies in order, or
        :data:`TIMED_OUT` once ``timeout`` seconds have passed for the whole batch.

        The default asks them one by one with :meth:`_request`, within one deadline.
        """
        priorities = [priority] * len(messages) if isinstance(priority, int) else priority
        deadline = None if timeout is None else anyio.current_time() + timeout
        replies: list[Any] = []
        for message, one in zip(messages, priorities, strict=True):
            remaining = None if deadline is None else deadline - anyio.current_time()
            reply = await self._request(message, one, remaining)
            if reply is TIMED_OUT:
                return TIMED_OUT
            replies.append(reply)
        return replies

    def send_stream(self, *, priority: SupportsIndex | None = None) -> ObjectSendStream[M]:
        """Return an :class:`anyio.abc.ObjectSendStream` that tells the actor each item.

        ``await stream.send(item)`` is ``await ref.tell(item, priority=priority)``, so
        an actor plugs into any anyio pipeline. Once the actor has stopped, ``send``
        raises :class:`anyio.BrokenResourceError` (also an
        :class:`~pdc_core.ActorStopped`). ``aclose()`` (and leaving ``async with``)
        closes this stream only, after which its ``send`` raises
        :class:`anyio.ClosedResourceError`: it does *not* stop the actor, which other
        senders may still be using (stop it with :meth:`stop`).
        """
        return _RefSendStream(self, priority)

    @abstractmethod
    async def pause(self) -> None:
        """Stop delivering messages to the actor; they stay queued. Stop still works.

        Raises :class:`~pdc_core.ActorStopped` if the actor is not running. A
        checkpoint: a caller already cancelled on entry pauses nothing; a kind that
        waits for the actor to acknowledge (a persistent kernel), cancelled during
        that wait, leaves the pause requested.
        """

    @abstractmethod
    async def resume(self) -> None:
        """Resume delivery after :meth:`pause`.

        Raises :class:`~pdc_core.ActorStopped` if the actor is not running. A
        checkpoint: a caller already cancelled on entry resumes nothing; a kind that
        waits for the actor to acknowledge, cancelled during that wait, leaves the
        resume requested.
        """

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


class _ActorGone(ActorStopped, anyio.BrokenResourceError):
    """``send`` on an actor's send stream after the actor stopped."""


class _RefSendStream(ObjectSendStream[M]):
    """What :meth:`ActorRef.send_stream` returns."""

    def __init__(self, ref: ActorRef[M, Any], priority: SupportsIndex | None) -> None:
        self._ref = ref
        self._priority = priority
        self._closed = False

    async def send(self, item: M) -> None:
        if self._closed:
            raise anyio.ClosedResourceError(
                f"this send stream of actor {self._ref.actor_id!r} is closed"
            )
        try:
            await self._ref.tell(item, priority=self._priority)
        except ActorStopped as exc:
            raise _ActorGone(str(exc), actor_id=exc.actor_id) from exc

    async def aclose(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        flag = " closed" if self._closed else ""
        return f"<send stream of {self._ref!r}{flag}>"


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

    #: Cancel scope of the current incarnation, set by the nursery before :meth:`run`;
    #: ``cancel_scope.cancel()`` force-stops the incarnation.
    cancel_scope: IncarnationScope | None = None
    #: Set by the nursery that starts the runner: a runner runs in one nursery, once.
    _ran_in_nursery: bool = False
    #: pdc's own runners set this when :meth:`run` calls ``cancel_scope.engage()``
    #: itself before anything that may wait in a cancel scope of its own (see
    #: :class:`~pdc_core._loop.IncarnationScope`); otherwise the nursery does at once.
    _engages_cancel_scope: bool = False

    @property
    @abstractmethod
    def ref(self) -> ActorRef[Any, Any]:
        """The handle returned by ``start_actor``; the same object across restarts."""

    @abstractmethod
    async def run(self, started: Callable[[], None]) -> None:
        """Run one incarnation; call ``started()`` once ready; return when stopped.

        An ``Exception`` raised here is a crash of the actor. It is cancelled when the
        nursery or :attr:`cancel_scope` is, and must then release everything it holds
        (device memory, running kernels) before the cancellation propagates.
        """

    def _ready_at_once(self) -> bool:
        """pdc's own runners: True when getting ready involves nothing that waits or can
        fail, so the actor is ready as soon as its task exists (``run`` then calls
        ``started()`` before it first waits) and ``start_actor`` need not wait for it.
        The runner then reports itself running at once. The default is False."""
        return False

    def on_crash(self, error: Exception, *, restarting: bool) -> None:  # noqa: B027
        """Called when :meth:`run` raised ``error``, before a restart or escalation.

        The default does nothing. Typical use: fail the request that was being
        handled and report the state as restarting.
        """

    @abstractmethod
    def finalize(self, error: BaseException | None) -> None:
        """Called once when the actor is done for good; fail what is pending."""

    # -- the nursery's exit: drain to quiescence, then stop together ------------------

    def begin_drain(  # noqa: B027 - optional hook
        self, on_idle: Callable[[], None], is_member: Callable[[object], bool]
    ) -> None:
        """The nursery's body has ended: refuse messages from outside the nursery but go
        on serving its own actors (``is_member(task)`` says whether a sending task is
        one of them), and call ``on_idle()`` whenever the actor runs out of work.

        The default does nothing: a kind of actor that never sends to its siblings by
        itself is idle whenever :attr:`idle` says so.
        """

    @property
    def idle(self) -> bool:
        """Whether the actor has nothing queued and nothing in hand (default: True).

        The nursery stops its actors, together, once all are idle at the same time.
        """
        return True

    def unfinished(self) -> int:
        """Messages queued or in hand, for the error of a ``shutdown_timeout``."""
        return 0

    def request_drain(self, start_soon: Callable[..., object]) -> None:
        """All the nursery's actors are idle: stop after draining, without waiting.

        The default starts ``ref.stop(drain=True)`` as a task of the nursery with
        ``start_soon``; a runner that can request the stop synchronously overrides it.
        """
        start_soon(_drain_and_stop, self.ref)


async def _drain_and_stop(ref: ActorRef[Any, Any]) -> None:
    await ref.stop(drain=True)


async def cancellation_first() -> None:
    """If the calling task is being cancelled, raise its cancellation.

    When a nursery is cancelled its actors may stop before the cancellation reaches a
    task that was sending to them; that task must end by its cancellation, not by an
    ``ActorStopped`` that only says the actor went first.
    """
    if anyio.current_effective_deadline() == -math.inf:
        await anyio.sleep_forever()


def message_priority(message: object, priority: object = None) -> int:
    """The priority a message is sent with: ``priority`` if not ``None``, else the
    message's own ``priority`` attribute, else :data:`DEFAULT_PRIORITY`; checked with
    :func:`check_priority` (an int in 0..255; NumPy integers accepted)."""
    if priority is None:
        priority = getattr(message, "priority", DEFAULT_PRIORITY)
    if type(priority) is int and 0 <= priority <= 255:
        return priority
    return check_priority(priority)


def _priorities(batch: Sequence[Any], priority: int | None) -> int | list[int]:
    """One checked priority for a whole batch, or one per message when they differ (a
    batch a kind coerced into something else than a list, such as a record array, has
    no per-message priorities)."""
    if priority is not None:
        return priority
    if not isinstance(batch, list):
        return DEFAULT_PRIORITY
    # The rule of message_priority, a batch at a time: each distinct value checked once.
    priorities = [getattr(message, "priority", DEFAULT_PRIORITY) for message in batch]
    distinct = set(priorities)
    if len(distinct) == 1:
        return message_priority(None, priorities[0])
    checked = {value: message_priority(None, value) for value in distinct}
    return [checked[value] for value in priorities]


def cancel_called() -> bool:
    """Whether the calling task is in a cancel scope that has been cancelled (and not
    shielded from it), so that its next checkpoint raises the cancellation. A
    per-message call checks it on entry and then ``await raise_cancelled()``."""
    return current_kit().cancel_called()


#: The handle of the actor whose own task runs the code reading it: set by an actor's
#: runner in its task, and inherited (as every context variable, on both loops) by the
#: child tasks its handler starts, so "a member calls its own mesh" is seen from those
#: too. ``None`` outside actors.
running_actor: ContextVar[object] = ContextVar("pdc_running_actor", default=None)


def current_task() -> object:
    """The running task, as the event loop knows it (an ``asyncio.Task`` or a
    ``trio.lowlevel.Task``): what a draining nursery's ``is_member`` is asked about."""
    return current_kit().current_task()


@dataclass(frozen=True, slots=True)
class StartOptions:
    """The options of :meth:`~pdc_core.ActorNursery.start_actor`, as a runner factory
    registered with :func:`runner_for` receives them.

    ``capacity``, ``backpressure`` and ``max_batch`` configure a mailbox; a kind of
    actor without one ignores them. ``name`` is ``None`` when the caller gave none.
    """

    name: str | None = None
    capacity: int = 1024
    backpressure: Backpressure | str = Backpressure.BLOCK
    max_batch: int = 1024
    paused: bool = False


@functools.singledispatch
def runner_for(target: object, /, args: tuple[Any, ...], options: StartOptions) -> ActorRunner:
    """Turn a ``start_actor`` target into the :class:`ActorRunner` that runs it.

    Dispatches on the type of ``target``. A kind of actor registers the targets it
    serves with ``@runner_for.register(TargetType)``; the factory receives the positional
    arguments given to ``start_actor`` after the target and its :class:`StartOptions`,
    and raises :class:`TypeError` for those that do not apply. An
    :class:`ActorRunner` runs itself. Mailbox actors are registered for ``object``:
    they serve every target no other kind claims.
    """
    raise TypeError(f"start_actor() cannot start {target!r}: no kind of actor serves it")


# -- what start_actor's types know of a target, without naming a kind of actor ------------


class ActorLike(Protocol[M, R]):
    """For type checkers: a target that handles ``M`` and replies ``R`` and whose handle
    is its ``ref``, an ``ActorRef[M, R]`` (what a mailbox actor's ``Actor`` is)."""

    @property
    def ref(self) -> ActorRef[M, R]: ...

    async def handle(self, message: M) -> R: ...


class RunsAs(Protocol[_RefT_co]):
    """For type checkers: a target that runs itself and whose ``ref`` is the handle
    ``start_actor`` returns (an :class:`ActorRunner`)."""

    @property
    def ref(self) -> _RefT_co: ...


class StartsAs(Protocol[_RefT_co]):
    """For type checkers: a target that declares the handle ``start_actor`` returns for
    it with ``__pdc_handle__`` (declared only under ``TYPE_CHECKING``: a kind of actor
    registers the target with :func:`runner_for` at run time)."""

    def __pdc_handle__(self) -> _RefT_co: ...


@runtime_checkable
class Placement(Protocol):
    """Where an actor runs: what ``start_actor(target, placement=...)`` accepts.

    A placement turns the target into the :class:`ActorRunner` that runs it there (in
    another process, on another machine), exactly as :func:`runner_for` does for
    actors of this process. The nursery then supervises that runner like any other:
    the start handshake, restarts, draining and cancellation apply unchanged. It
    raises :class:`TypeError` for a target it cannot place.
    """

    def runner_for(
        self, target: object, /, args: tuple[Any, ...], options: StartOptions
    ) -> ActorRunner:
        """Return the runner that runs ``target`` at this placement."""
        ...


@runner_for.register(ActorRunner)
def _runner_itself(
    target: ActorRunner, /, args: tuple[Any, ...], options: StartOptions
) -> ActorRunner:
    if args:
        raise TypeError("positional arguments do not apply to an ActorRunner")
    return target
