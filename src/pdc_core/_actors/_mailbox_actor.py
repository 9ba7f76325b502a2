"""Mailbox actors: an :class:`Actor` (or an async handler) fed through a :class:`Mailbox`.

One task per actor, one loop, no task per message: the loop takes what is waiting
(up to ``max_batch`` for ``handle_batch``), runs the handler and resolves each
request's waiter. Requests whose caller gave up are skipped, not handled.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable, Sequence
from inspect import CO_COROUTINE
from types import FunctionType
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

import anyio

from .._exceptions import (
    ActorCrashed,
    ActorStopped,
    LifecycleError,
    MailboxClosed,
    MessageDropped,
)
from .._loop import (
    Kit,
    Waiter,
    check_timeout,
    current_kit,
    fail,
    full_checkpoint,
    wake,
)
from ._mailbox import (
    EMPTY,
    HANDED,
    Control,
    Mailbox,
)
from ._refs import (
    ActorRef,
    ActorRunner,
    ActorState,
    ActorStatistics,
    StartOptions,
    cancellation_first,
    runner_for,
    running_actor,
)

__all__ = [
    "Actor",
    "BatchPart",
    "BatchReply",
    "Envelope",
    "MailboxActor",
    "MailboxActorRef",
    "ReplyTarget",
    "Told",
]

M = TypeVar("M")
R = TypeVar("R")

#: Yield to the scheduler once every this many messages handled without waiting.
_CHECKPOINT_EVERY: Final = 64

_ids = itertools.count(1)


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
        """Called before the actor receives its first message (the start handshake).

        An exception raised here fails the start: ``start_actor`` raises
        :class:`~pdc_core.ActorCrashed`. It runs in the actor's task and is cancelled
        with it (when the nursery is cancelled); the actor then never starts.
        """

    async def handle(self, message: M) -> R:
        """Handle one message and return the reply.

        An exception raised here crashes the actor (an ``ask`` of this message gets
        :class:`~pdc_core.ActorCrashed`); this default raises
        :class:`NotImplementedError`. It runs in the actor's task and is cancelled with
        it (the nursery cancelled, or a stop's ``timeout`` passed); the requests left
        unanswered then fail with :class:`~pdc_core.ActorStopped`.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement handle()")

    async def handle_batch(self, messages: list[M]) -> list[R]:
        """Handle several messages at once; return one reply per message, in order.

        This default awaits :meth:`handle` for each message. Exceptions and
        cancellation as for :meth:`handle`.
        """
        return [await self.handle(message) for message in messages]

    async def on_stop(self) -> None:
        """Called after the last message when the actor stops cleanly (not after a crash
        or a cancellation). An exception raised here crashes the actor; it is cancelled
        with the actor's task (when a stop's ``timeout`` passes or the nursery is
        cancelled)."""


class _FunctionActor(Actor[Any, Any]):
    def __init__(self, fn: Callable[[Any], Awaitable[Any]]) -> None:
        self.handle = fn  # type: ignore[method-assign, assignment]


def _same(instance: Actor[Any, Any]) -> Actor[Any, Any]:
    """The factory of an actor given as an instance: reused across restarts."""
    return instance


def _construct(cls: type[Actor[Any, Any]], *args: Any) -> Actor[Any, Any]:
    """The factory of an actor given as a class."""
    return cls(*args)


def _checked(factory: Callable[..., Any], *args: Any) -> Actor[Any, Any]:
    """Call a user's factory and check that it made an Actor."""
    actor = factory(*args)
    if not isinstance(actor, Actor):
        label = getattr(factory, "__name__", type(factory).__name__)
        raise TypeError(
            f"actor factory {label!r} returned {type(actor).__name__}, not an Actor "
            "(a handler must be an `async def handler(message)`)"
        )
    return actor


class _Stop(Control):
    __slots__ = ()


_STOP: Final = _Stop()


class BatchReply:
    """The reply target shared by the requests of one ``ask_many``: the waiter its caller
    awaits, the replies so far and how many are missing.

    ``ordered`` is True when all its requests went into one priority lane in order, so
    a run of them received together can be answered with one slice assignment.
    """

    __slots__ = ("ordered", "remaining", "results", "waiter")

    def __init__(self, waiter: Any, n: int, *, ordered: bool = False) -> None:
        self.waiter = waiter
        self.remaining = n
        self.results: list[Any] = [None] * n
        self.ordered = ordered


# What a mailbox actor's mailbox holds (besides control messages), and the one name of
# each request's reply target, ``reply``:
#
# * a ``tell``: the message itself, no envelope (a tuple, an Envelope, a Told or an
#   object of the event loop's waiter class told as data is wrapped in a Told, so
#   nothing is mistaken for what follows or for the loop's own waiter; the only control
#   message, the actor's stop, is told apart by identity);
# * an ``ask``: an :class:`Envelope`, whose ``reply`` is the waiter the caller awaits;
# * each message of an ``ask_many``: a :data:`BatchPart`, ``(message, reply, index)``
#   with ``reply`` the batch's :class:`BatchReply` and ``index`` the message's place.
#
# A batch part stays a plain tuple for a measured reason: a named type costs a Python
# frame per message (slotted class 135 ns, NamedTuple 121 ns, tuple 31-41 ns a message
# on this project's 2-core VM), a third of a handle_batch actor's whole cost per message.
# An ask pays its Envelope (about 100 ns) on a round trip of several microseconds.


class ReplyTarget(Protocol):
    """Where the reply to an ``ask`` goes: the caller's waiter, or any object that
    resolves like one (a mesh's reply slot). The actor skips a request whose target is
    ``done()`` (its caller gave up)."""

    def done(self) -> bool: ...

    def set_result(self, value: Any, /) -> None: ...

    def set_exception(self, error: BaseException, /) -> None: ...

    def exception(self) -> BaseException | None: ...


class Envelope:
    """One ``ask`` in a mailbox actor's mailbox: the message and its reply target."""

    __slots__ = ("message", "reply")

    def __init__(self, message: Any, reply: ReplyTarget) -> None:
        self.message = message
        #: The waiter the caller awaits (resolved with the reply, or failed).
        self.reply = reply

    def __repr__(self) -> str:
        return f"Envelope({self.message!r})"


class Told:
    """A told message that could be mistaken for an envelope (a tuple, an Envelope or
    a Told) or for the actor loop's waiter, wrapped: rare, so tells need no envelope
    otherwise."""

    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message = message


#: One message of an ``ask_many``: ``(message, reply, index)``, ``reply`` being the
#: batch's :class:`BatchReply` (see the comment above for why a tuple).
BatchPart = tuple[Any, BatchReply, int]


def _wrapped_classes(waiter_type: type) -> frozenset[type]:
    """The classes of told messages that are wrapped in a :class:`Told` (the one
    definition of that rule): those that could pass for an envelope (a tuple, an
    Envelope, a Told) or for ``waiter_type``, the class of the event loop's waiters,
    which the actor's loop parks on."""
    return frozenset((tuple, Envelope, Told, waiter_type))


def _told(message: Any, wrapped: frozenset[type]) -> Any:
    """What the mailbox holds for a told ``message`` (``wrapped``: see
    :func:`_wrapped_classes`)."""
    return Told(message) if message.__class__ in wrapped else message


def _fail_request(item: Any, error: BaseException) -> None:
    """Fail the caller of ``item`` (an ask or a batch part; a tell has none)."""
    cls = item.__class__
    if cls is Envelope:
        fail(item.reply, error)
    elif cls is tuple:
        fail(item[1].waiter, error)


def _message_of(item: Any) -> Any:
    cls = item.__class__
    if cls is Envelope or cls is Told:
        return item.message
    if cls is tuple:
        return item[0]
    return item


class MailboxActorRef(ActorRef[M, R]):
    """Handle of a mailbox actor (see :class:`ActorRef`)."""

    __slots__ = (
        "_actor_id",
        "_cancel_called",
        "_deliver",
        "_kit",
        "_mailbox",
        "_runner",
        "_waiter_type",
        "_wrapped",
    )

    def __init__(self, actor_id: str, mailbox: Mailbox[Any], kit: Kit) -> None:
        self._actor_id = actor_id
        self._mailbox = mailbox
        self._kit = kit
        # ActorRef's entry check, bound once: a slot that shadows the method.
        self._cancel_called = kit.cancel_called  # type: ignore[method-assign]
        self._runner: MailboxActor | None = None
        #: The class of this loop's waiters: what the actor's loop parks on, so a told
        #: message of that class is wrapped (see Mailbox.poll_or_park).
        self._waiter_type: type = type(kit.waiter())
        self._wrapped = _wrapped_classes(self._waiter_type)
        # ActorRef's delivery of a tell, as one call into the mailbox (measured: one
        # Python frame less per tell than a method calling Mailbox.offer): a told
        # message that could pass for an envelope or the loop's waiter is wrapped in a
        # Told (the classes of _wrapped_classes, one definition), the mailbox's
        # fairness rule applies, and what cannot finish at once goes on in
        # _deliver_slowly. ActorRef.tell applies every rule of the handle before this.
        self._deliver = mailbox.deliverer(  # type: ignore[method-assign, assignment]
            self._wrapped, Told, self._deliver_slowly
        )

    if TYPE_CHECKING:  # at run time the slot above, set in __init__

        def _deliver(self, message: M, priority: int) -> Awaitable[None] | None: ...

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

    def _check_not_self(self, operation: str, queued: Any = None) -> None:
        """An actor waiting for its own reply would wait forever: refuse it (and have
        the request ``queued`` meanwhile, if any, skipped: its waiter is failed)."""
        runner = self._runner
        if runner is not None and runner.is_current_task():
            error = LifecycleError(
                f"actor {self._actor_id!r} called {operation}() on itself from its handler: "
                "it would wait forever for its own reply (use tell, or handle it inline)"
            )
            if queued is not None:
                fail(queued, error)
            raise error

    def _admits_caller(self) -> bool:
        """The mailbox is sealed (its nursery drains) and the caller is one of the
        nursery's actors, whose sends must go on until the nursery is quiescent."""
        runner = self._runner
        return (
            self._mailbox.sealed
            and runner is not None
            and runner.is_member is not None
            and runner.is_member(self._kit.current_task())
        )

    async def _enqueue(self, item: Any, priority: int) -> None:
        try:
            await self._mailbox.send(item, priority)
        except MailboxClosed:
            if self._admits_caller():
                await self._mailbox.admit(item, priority)
                return
            await cancellation_first()
            raise self._stopped_error() from None

    # Delivery without a coroutine per message: a tell that finds room is done when
    # _deliver returns, and an ask's caller awaits the reply's waiter itself. _deliver
    # is a slot holding the mailbox's deliverer (see __init__): one call per tell.

    async def _deliver_slowly(self, item: Any, priority: int, checkpoint: bool) -> None:
        """The rest of a tell the deliverer could not finish (``item`` already wrapped):
        yield first at the end of a turn, or to let the actor catch up (a tell
        cancelled there sends nothing); wait for room, or meet a closed mailbox."""
        if checkpoint:
            await self._kit.checkpoint()
            if self._mailbox.offer(item, priority):
                return
        await self._enqueue(item, priority)

    def _request(self, message: M, priority: int, timeout: float | None) -> Awaitable[Any]:
        kit = self._kit
        reply = kit.waiter()
        envelope = Envelope(message, reply)
        offered = self._mailbox.offer(envelope, priority)
        if offered != HANDED:  # the actor is busy (or not started): is it asking itself?
            self._check_not_self("ask", reply)
            if not offered:
                return self._request_slowly(envelope, reply, priority, timeout)
        if timeout is not None:
            kit.arm(reply, timeout)
        return reply

    async def _request_slowly(
        self, envelope: Envelope, reply: Waiter, priority: int, timeout: float | None
    ) -> Any:
        """An ask that waits for room (or meets a closed mailbox)."""
        await self._enqueue(envelope, priority)
        if timeout is not None:
            self._kit.arm(reply, timeout)
        return await reply

    # -- for handles of several actors (a mesh): requests with a reply target of theirs --

    def offer_request(self, message: M, priority: int, reply: ReplyTarget) -> bool:
        """Queue an ``ask`` of ``message`` whose reply target is ``reply`` (a
        :class:`ReplyTarget`: resolved with the reply or failed; the actor skips the
        request once ``reply.done()``), if the mailbox takes it without
        waiting; False, with nothing done, otherwise. ``priority`` must be checked."""
        return bool(self._mailbox.offer(Envelope(message, reply), priority))

    async def enqueue_request(self, message: M, priority: int, reply: ReplyTarget) -> None:
        """:meth:`offer_request` that waits for room (backpressure applies); raises
        :class:`~pdc_core.ActorStopped` when the actor takes no messages."""
        await self._enqueue(Envelope(message, reply), priority)

    def offer_tell(self, message: M, priority: int) -> bool:
        """Queue a tell of ``message`` if the mailbox takes it without waiting."""
        return bool(self._mailbox.offer(_told(message, self._wrapped), priority))

    async def _send_batch(self, items: list[Any], prio: int | list[int]) -> None:
        mailbox = self._mailbox
        try:
            if self._admits_caller():
                priorities = [prio] * len(items) if isinstance(prio, int) else prio
                for item, p in zip(items, priorities, strict=True):
                    await mailbox.admit(item, p)
            elif isinstance(prio, int):
                await mailbox.send_many(items, prio)
            else:
                for item, p in zip(items, prio, strict=True):
                    await mailbox.send(item, p)
        except MailboxClosed:
            await cancellation_first()
            raise self._stopped_error() from None

    async def _deliver_many(self, messages: Sequence[M], priority: int | list[int]) -> None:
        wrapped = self._wrapped
        await self._send_batch([_told(m, wrapped) for m in messages], priority)

    async def _request_many(
        self, messages: Sequence[M], priority: int | list[int], timeout: float | None
    ) -> Any:
        self._check_not_self("ask_many")
        kit = self._kit
        reply = BatchReply(kit.waiter(), len(messages), ordered=isinstance(priority, int))
        parts: list[BatchPart] = list(zip(messages, itertools.repeat(reply), itertools.count()))
        if timeout is None:
            await self._send_batch(parts, priority)
        else:
            kit.arm(reply.waiter, timeout)
            with anyio.move_on_after(timeout):
                await self._send_batch(parts, priority)
        return await reply.waiter

    async def pause(self) -> None:
        await full_checkpoint(self._kit)  # a checkpoint, as every lifecycle call
        runner = self._runner
        assert runner is not None
        if not self.alive:
            raise self._stopped_error()
        self._mailbox.pause()
        if runner.state is ActorState.RUNNING:
            runner.state = ActorState.PAUSED

    async def resume(self) -> None:
        await full_checkpoint(self._kit)
        runner = self._runner
        assert runner is not None
        if not self.alive:
            raise self._stopped_error()
        self._mailbox.resume()
        if runner.state is ActorState.PAUSED:
            runner.state = ActorState.RUNNING

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        timeout = check_timeout(timeout)
        await full_checkpoint(self._kit)  # a pending cancellation stops nothing
        runner = self._runner
        assert runner is not None
        if runner.finished:
            return
        if not drain and runner.state is ActorState.RESTARTING and runner.cancel_scope:
            runner.cancel_scope.cancel()  # waiting out a restart backoff: end it now
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
        await full_checkpoint(self._kit)
        runner = self._runner
        assert runner is not None
        if runner.finished:
            return
        waiter = self._kit.waiter()
        if runner.stop_waiters is None:
            runner.stop_waiters = []
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
            failed=runner.failed,
        )

    @property
    def mailbox(self) -> Mailbox[Any]:
        """The actor's mailbox (for statistics; send through the handle)."""
        return self._mailbox


class MailboxActor(ActorRunner):
    """Runs a mailbox actor: one task, one loop, no task per message.

    ``make(target, *args)`` makes the actor of each incarnation.
    """

    _engages_cancel_scope = True

    __slots__ = (
        "_args",
        "_inflight",
        "_kit",
        "_mailbox",
        "_make",
        "_max_batch",
        "_ran_in_nursery",
        "_ref",
        "_target",
        "_task",
        "cancel_scope",
        "crash",
        "errors",
        "failed",
        "finished",
        "handled",
        "is_member",
        "restarts",
        "skipped",
        "state",
        "stop_waiters",
    )

    def __init__(
        self,
        actor_id: str,
        make: Callable[..., Actor[Any, Any]],
        target: Any,
        args: tuple[Any, ...],
        mailbox: Mailbox[Any],
        kit: Kit,
        max_batch: int,
    ) -> None:
        self._make = make
        self._target = target
        self._args = args
        self._mailbox = mailbox
        self._kit = kit
        self._max_batch = max_batch
        self._ref: MailboxActorRef[Any, Any] = MailboxActorRef(actor_id, mailbox, kit)
        self._ref._runner = self
        self.state = ActorState.STARTING
        self.finished = False
        self.crash: ActorCrashed | None = None
        self.handled = 0
        self.errors = 0
        self.restarts = 0
        self.skipped = 0
        self.failed = 0
        self.stop_waiters: list[Any] | None = None
        self._inflight: Any = None
        self._task: Any = None
        #: Set by a draining nursery: whether a task is one of the nursery's actors.
        self.is_member: Callable[[object], bool] | None = None
        self.cancel_scope = None
        self._ran_in_nursery = False

    @property
    def ref(self) -> MailboxActorRef[Any, Any]:
        return self._ref

    def begin_drain(self, on_idle: Callable[[], None], is_member: Callable[[object], bool]) -> None:
        if not self.finished:
            self.is_member = is_member
            self._mailbox.seal(on_idle)

    @property
    def idle(self) -> bool:
        return self.finished or self._mailbox.starved()

    def unfinished(self) -> int:
        handling = self.state is not ActorState.RESTARTING and not self.idle
        return len(self._mailbox) + handling

    def request_drain(self, start_soon: Callable[..., object]) -> None:
        if not self.finished:
            self.state = ActorState.STOPPING
            self._mailbox.close()
            self._mailbox.resume()

    def is_current_task(self) -> bool:
        return self._task is not None and self._task is self._kit.current_task()

    def _ready_at_once(self) -> bool:
        # A handler, or an instance without on_start: making it cannot fail or wait.
        make = self._make
        if make is _FunctionActor or (
            make is _same and type(self._target).on_start is Actor.on_start
        ):
            self.state = ActorState.PAUSED if self._mailbox.paused else ActorState.RUNNING
            return True
        return False

    async def run(self, started: Callable[[], None]) -> None:
        """Make the actor, start it, then handle messages one at a time until stopped.

        The loop is the hot path: it reads the mailbox directly and resolves each
        reply from this task, with no task, timer or cancel scope per message (and no
        coroutine of its own: each wake-up of the actor passes through this frame).
        The incarnation's cancel scope is engaged before the first of the user's code
        that can wait, so a handler actor that never gets a message never needs one.
        """
        self._task = self._kit.current_task()
        running_actor.set(self._ref)  # this task's context, and its handler's child tasks'
        scope = self.cancel_scope
        assert scope is not None
        if self._make is not _FunctionActor and self._make is not _same:
            scope.engage()  # a user's class or factory
        actor = self._make(self._target, *self._args)
        actor.ref = self._ref
        cls = type(actor)
        if cls.on_start is not Actor.on_start:
            scope.engage()
            await actor.on_start()
        mailbox = self._mailbox
        if self.state is not ActorState.STOPPING:
            self.state = ActorState.PAUSED if mailbox.paused else ActorState.RUNNING
        started()
        if cls.handle_batch is not Actor.handle_batch:
            scope.engage()
            if await self._serve_batches(actor) and cls.on_stop is not Actor.on_stop:
                await actor.on_stop()
            return
        engaged = False
        kit = self._kit
        handle = actor.handle
        poll_or_park = mailbox.poll_or_park
        waiter_type: Any = self._ref._waiter_type
        count = 0
        item: Any = None
        try:
            while True:
                item = poll_or_park()
                if item.__class__ is waiter_type:  # parked (a told waiter is wrapped)
                    waiter = item
                    try:
                        item = await waiter
                    except BaseException:
                        item = mailbox.release_taker(waiter)  # handed meanwhile: in flight
                        raise
                    count = 0  # it waited: the count to the next checkpoint starts again
                    if item is None:
                        continue  # woken to look again
                elif item is EMPTY:
                    break  # closed, and nothing left
                if item is _STOP:
                    break
                if not engaged:
                    scope.engage()
                    engaged = True
                kind = item.__class__
                if kind is Envelope:
                    reply = item.reply
                    if reply.done():  # its caller gave up
                        self.skipped += 1
                        continue
                    value = await handle(item.message)
                    if not reply.done():
                        reply.set_result(value)
                elif kind is tuple:  # a part of an ask_many
                    message, batch, index = item
                    if batch.waiter.done():
                        self.skipped += 1
                        continue
                    batch.results[index] = await handle(message)
                    batch.remaining -= 1
                    if not batch.remaining:
                        wake(batch.waiter, batch.results)
                elif kind is Told:
                    await handle(item.message)
                else:  # a tell
                    await handle(item)
                self.handled += 1
                count += 1
                if not count % _CHECKPOINT_EVERY:
                    item = None
                    await kit.checkpoint()
        except BaseException:
            self._inflight = item
            raise
        if cls.on_stop is not Actor.on_stop:
            scope.engage()
            await actor.on_stop()

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
                    and first[1] is last[1]
                    and last[2] - first[2] == n - 1
                    and first[1].ordered
                ):
                    # A run of one ask_many's parts, in order: one call, one slice.
                    batch = first[1]
                    if batch.waiter.done():
                        self.skipped += n
                    else:
                        replies = await handle_batch([part[0] for part in items])
                        if replies is None or len(replies) != n:
                            raise self._replies_error(replies, n, n)
                        start = first[2]
                        batch.results[start : start + n] = replies
                        batch.remaining -= n
                        self.handled += n
                        if not batch.remaining:
                            wake(batch.waiter, batch.results)
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
        """Handle a batch of tells, asks, batch parts and control; True on a stop.

        A stop (without drain) taken with data in the same batch ends the actor before
        that data: it was queued, not in hand, and its requests fail with ActorStopped
        (finalize fails what is left in flight)."""
        if any(item is _STOP for item in items):
            self._inflight = [item for item in items if item is not _STOP]
            return True
        live: list[Any] = []
        asks = 0
        for item in items:
            cls = item.__class__
            if (cls is Envelope and item.reply.done()) or (cls is tuple and item[1].waiter.done()):
                self.skipped += 1
            else:
                live.append(item)
                asks += cls is Envelope or cls is tuple
        # In place: what _serve_batches fails if the call raises (skipped ones are not).
        items[:] = live
        if live:
            replies = await handle_batch([_message_of(item) for item in live])
            if replies is None and not asks:
                self.handled += len(live)  # a batch of tells needs no replies
                return False
            if replies is None or len(replies) != len(live):
                raise self._replies_error(replies, len(live), asks)
            for item, value in zip(live, replies, strict=True):
                cls = item.__class__
                if cls is Envelope:
                    wake(item.reply, value)
                elif cls is tuple:
                    _, batch, index = item
                    batch.results[index] = value
                    batch.remaining -= 1
                    if not batch.remaining:
                        wake(batch.waiter, batch.results)
            self.handled += len(live)
        return False

    def _replies_error(self, replies: Any, n: int, asks: int) -> Exception:
        """``handle_batch`` returned the wrong thing for a batch of ``n`` messages, of
        which ``asks`` wait for a reply: a TypeError for None, else a ValueError."""
        got = "None" if replies is None else f"{len(replies)} replies"
        return (TypeError if replies is None else ValueError)(
            f"actor {self._ref.actor_id!r}: handle_batch returned {got} for a batch of "
            f"{n} messages ({asks} of them asks): it must return a list of {n} replies, "
            "one per message in order (None only when every message is a tell)"
        )

    def _fail_inflight(self, error: Callable[[], BaseException]) -> None:
        """Fail the messages in hand (taken from the mailbox, never handled): each ask's
        caller gets ``error()``, and every one (tells too) is counted in ``failed``."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        for item in inflight if isinstance(inflight, list) else (inflight,):
            if isinstance(item, Control):
                continue
            self.failed += 1
            _fail_request(item, error())

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
        for item in mailbox.discard():
            _fail_request(item, failure())
        waiters, self.stop_waiters = self.stop_waiters, None
        for waiter in waiters or ():
            wake(waiter)

    def dropped(self, item: Any) -> None:
        """The mailbox's drop_oldest policy dropped ``item``: fail its request."""
        error = MessageDropped(
            f"request to actor {self._ref.actor_id!r} was dropped by its full mailbox "
            "(policy drop_oldest)"
        )
        _fail_request(item, error)


def _is_async(target: object) -> bool:
    """Whether ``target`` is an async function, or an object with an async ``__call__``."""
    if target.__class__ is FunctionType and target.__code__.co_flags & CO_COROUTINE:
        return True  # the common case, without inspect's unwrapping
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004
    )


def _check_factory(factory: Callable[..., Any], label: str, args: tuple[Any, ...]) -> None:
    """A plain ``def`` that cannot be called with ``args`` is a handler written without
    ``async``, not a factory: say so at start, not with an argument error later."""
    try:
        inspect.signature(factory).bind(*args)
    except TypeError:
        raise TypeError(
            f"{label!r} is a plain function that cannot be called with the {len(args)} "
            "positional argument(s) given to start_actor: a handler must be "
            "`async def handler(message)`, and a factory is called with those arguments "
            "and must return an Actor"
        ) from None
    except ValueError:  # no signature to check (some builtins): the call will tell
        return


@runner_for.register(object)
def _mailbox_runner(target: Any, /, args: tuple[Any, ...], options: StartOptions) -> MailboxActor:
    """Mailbox actors serve every target no other kind of actor claims."""
    make: Callable[..., Actor[Any, Any]]
    if isinstance(target, type) and issubclass(target, Actor):
        label = target.__name__
        make = _construct
    elif isinstance(target, Actor):
        if args:
            raise TypeError("positional arguments do not apply to an Actor instance")
        label = type(target).__name__
        make = _same
    elif _is_async(target):
        if args:
            raise TypeError("positional arguments do not apply to a handler function")
        label = getattr(target, "__name__", type(target).__name__)
        make = _FunctionActor
    elif callable(target):
        label = getattr(target, "__name__", type(target).__name__)
        _check_factory(target, label, args)
        make = _checked
    else:
        raise TypeError(
            "start_actor() needs an Actor subclass or instance, an async handler "
            f"function, a factory or an ActorRunner, got {target!r}"
        )
    name = options.name
    actor_id = name if name is not None else f"{label}-{next(_ids)}"
    kit = current_kit()
    mailbox: Mailbox[Any] = Mailbox(
        options.capacity, backpressure=options.backpressure, name=actor_id
    )
    mailbox.bind()
    if options.paused:
        mailbox.pause()
    runner = MailboxActor(actor_id, make, target, args, mailbox, kit, options.max_batch)
    mailbox.on_drop = runner.dropped
    return runner
