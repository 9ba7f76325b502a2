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
from typing import Any, Final, Generic, TypeVar

import anyio

from .._exceptions import (
    ActorCrashed,
    ActorStopped,
    LifecycleError,
    MailboxClosed,
    MessageDropped,
)
from .._loop import (
    TURN_CHECK_EVERY,
    Kit,
    check_timeout,
    current_kit,
    fail,
    wake,
    woken_value,
)
from ._mailbox import (
    CATCH_UP_AT,
    EMPTY,
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
    message_priority,
    raise_cancelled,
    runner_for,
)

__all__ = ["Actor", "BatchReply", "MailboxActor", "MailboxActorRef"]

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


def _fail_envelope(envelope: Any, error: BaseException) -> None:
    sink = envelope[1]
    if sink is None:
        return
    fail(sink if envelope[2] < 0 else sink.waiter, error)


class MailboxActorRef(ActorRef[M, R]):
    """Handle of a mailbox actor (see :class:`ActorRef`)."""

    __slots__ = ("_actor_id", "_cancel_called", "_kit", "_mailbox", "_runner")

    def __init__(self, actor_id: str, mailbox: Mailbox[Any], kit: Kit) -> None:
        self._actor_id = actor_id
        self._mailbox = mailbox
        self._kit = kit
        # ActorRef's entry check, bound once: a slot that shadows the method.
        self._cancel_called = kit.cancel_called  # type: ignore[method-assign]
        self._runner: MailboxActor | None = None

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

    def _check_not_self(self, operation: str) -> None:
        """An actor waiting for its own reply would wait forever: refuse it."""
        runner = self._runner
        if runner is not None and runner.is_current_task():
            raise LifecycleError(
                f"actor {self._actor_id!r} called {operation}() on itself from its handler: "
                "it would wait forever for its own reply (use tell, or handle it inline)"
            )

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

    async def _enqueue(self, envelope: tuple[Any, Any, int], priority: int) -> None:
        try:
            await self._mailbox.send(envelope, priority)
        except MailboxClosed:
            if self._admits_caller():
                await self._mailbox.admit(envelope, priority)
                return
            await cancellation_first()
            raise self._stopped_error() from None

    async def tell(self, message: M, *, priority: int | None = None) -> None:
        """:meth:`ActorRef.tell` with :meth:`_deliver` inlined: the measured fast path of
        the most frequent call (one coroutine per message instead of two; see
        docs/benchmarks.md). The rules are ActorRef's, through the same helpers."""
        if self._cancel_called():
            await raise_cancelled()
        if priority is None or type(priority) is not int or not 0 <= priority <= 255:
            priority = message_priority(message, priority)
        mailbox = self._mailbox
        kit = self._kit
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and (mailbox._size >= CATCH_UP_AT or kit.turn_is_over()):
            await kit.checkpoint()  # before enqueueing: a cancelled tell sends nothing
        if mailbox._size < mailbox._capacity and not mailbox._closed:
            envelope = (message, None, -1)
            if mailbox._taker is None or not mailbox._handoff(envelope):
                mailbox._push(envelope, priority)
            return
        await self._enqueue((message, None, -1), priority)

    async def _deliver(self, message: M, priority: int) -> None:
        mailbox = self._mailbox
        kit = self._kit
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and (mailbox._size >= CATCH_UP_AT or kit.turn_is_over()):
            # Yield at the end of a turn, or to let the actor catch up, before
            # enqueueing: a cancelled tell sends nothing.
            await kit.checkpoint()
        if mailbox._size < mailbox._capacity and not mailbox._closed:
            envelope = (message, None, -1)
            if mailbox._taker is None or not mailbox._handoff(envelope):
                mailbox._push(envelope, priority)
            return
        await self._enqueue((message, None, -1), priority)

    async def _request(self, message: M, priority: int, timeout: float | None) -> Any:
        kit = self._kit
        waiter = kit.waiter()
        mailbox = self._mailbox
        if mailbox._size < mailbox._capacity and not mailbox._closed:
            envelope = (message, waiter, -1)
            if mailbox._taker is None or not mailbox._handoff(envelope):
                self._check_not_self("ask")  # the actor is busy: is it asking itself?
                mailbox._push(envelope, priority)
        else:
            self._check_not_self("ask")
            await self._enqueue((message, waiter, -1), priority)
        if timeout is not None:
            kit.arm(waiter, timeout)
        return await waiter

    async def _send_batch(
        self, envelopes: list[tuple[Any, Any, int]], prio: int | list[int]
    ) -> None:
        mailbox = self._mailbox
        try:
            if self._admits_caller():
                priorities = [prio] * len(envelopes) if isinstance(prio, int) else prio
                for envelope, p in zip(envelopes, priorities, strict=True):
                    await mailbox.admit(envelope, p)
            elif isinstance(prio, int):
                await mailbox.send_many(envelopes, prio)
            else:
                for envelope, p in zip(envelopes, prio, strict=True):
                    await mailbox.send(envelope, p)
        except MailboxClosed:
            await cancellation_first()
            raise self._stopped_error() from None

    async def _deliver_many(self, messages: Sequence[M], priority: int | list[int]) -> None:
        await self._send_batch([(m, None, -1) for m in messages], priority)

    async def _request_many(
        self, messages: Sequence[M], priority: int | list[int], timeout: float | None
    ) -> Any:
        self._check_not_self("ask_many")
        kit = self._kit
        cell = BatchReply(kit.waiter(), len(messages), ordered=isinstance(priority, int))
        envelopes = [(m, cell, i) for i, m in enumerate(messages)]
        if timeout is None:
            await self._send_batch(envelopes, priority)
        else:
            kit.arm(cell.waiter, timeout)
            with anyio.move_on_after(timeout):
                await self._send_batch(envelopes, priority)
        return await cell.waiter

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
        timeout = check_timeout(timeout)
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
        poll = mailbox.poll
        new_waiter = kit.waiter
        count = 0
        item: Any = None
        try:
            while True:
                # Most often there is nothing: then look no further than two counters.
                item = poll() if mailbox._size or mailbox._ctrl else EMPTY
                if item is EMPTY:
                    if (
                        mailbox._closed
                        and not mailbox._sealed
                        and not mailbox._size
                        and not mailbox._ctrl
                    ):
                        break
                    waiter = new_waiter()
                    mailbox._taker = waiter
                    if mailbox._sealed and mailbox._on_starved is not None:
                        mailbox._on_starved()  # a draining nursery: maybe all are idle now
                    try:
                        item = await waiter
                    except BaseException:
                        if mailbox._taker is waiter:
                            mailbox._taker = None
                        item = woken_value(waiter)
                        raise
                    count = 0  # it waited: the count to the next checkpoint starts again
                    if item is None:
                        continue
                if item.__class__ is tuple:
                    if not engaged:
                        scope.engage()
                        engaged = True
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
                    break
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
        """Handle a batch of tells, asks, batch parts and control; True on a stop.

        A stop (without drain) taken with data in the same batch ends the actor before
        that data: it was queued, not in hand, and its requests fail with ActorStopped
        (finalize fails what is left in flight)."""
        if any(item is _STOP for item in items):
            self._inflight = [item for item in items if item.__class__ is tuple]
            return True
        live: list[Any] = []
        for item in items:
            if item.__class__ is not tuple:
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
        return False

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
        waiters, self.stop_waiters = self.stop_waiters, None
        for waiter in waiters or ():
            wake(waiter)

    def dropped(self, envelope: Any) -> None:
        """The mailbox's drop_oldest policy dropped ``envelope``: fail its request."""
        error = MessageDropped(
            f"request to actor {self._ref.actor_id!r} was dropped by its full mailbox "
            "(policy drop_oldest)"
        )
        _fail_envelope(envelope, error)


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
    mailbox._kit = kit
    if options.paused:
        mailbox.pause()
    runner = MailboxActor(actor_id, make, target, args, mailbox, kit, options.max_batch)
    mailbox._on_drop = runner.dropped
    return runner
