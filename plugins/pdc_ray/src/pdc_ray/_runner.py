"""The caller's side of a remote actor: a local prioritised mailbox, shipped in batches.

:class:`RemoteRunner` is the :class:`~pdc_core.lowlevel.ActorRunner` a placement such
as :func:`pdc_ray.on` makes, and :class:`RemoteActorRef` the handle users hold. The
caller's nursery supervises the runner like any other actor; each incarnation of it is
one host process created through an :class:`~pdc_ray.Engine` (a Ray actor).

How it works: ``tell`` and ``ask`` put requests into a local
:class:`pdc_core.Mailbox` (bounded, priorities 0..255, the start options'
backpressure policy and counters). ``window`` shipper tasks each take what is waiting,
in priority order (FIFO within a priority), give it the next sequence number and ship
it as one engine call; the host hands batches to the actor in sequence order, so the
order decided here holds across a wire that reorders calls. A shipper takes from the
mailbox only when it has no call in flight, and at most ``window`` calls are on the
wire at once, so everything else waits here, in priority order. A lone ``ask`` made
while the feeder is idle (nothing queued here, nothing in flight) skips the mailbox
and the shipper: its caller ships it as the next batch and waits for the answer
itself, one task switch less on each way (it still counts in the window, and in the
mailbox's ``sent`` and ``received`` as a hand-off does). Control calls (stop, pause,
statistics, ping, cancel) go in their own concurrency group.

The guarantees are documented at the public name, :class:`pdc_ray.RemoteRunner`.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import anyio
import anyio.abc

from pdc_core import (
    ActorCrashed,
    ActorRef,
    ActorState,
    ActorStatistics,
    ActorStopped,
    Mailbox,
    MailboxClosed,
    MailboxFull,
    MessageDropped,
)
from pdc_core.lowlevel import (
    DEFAULT_PRIORITY,
    TIMED_OUT,
    ActorRunner,
    StartOptions,
    cancellation_first,
    check_timeout,
    current_task,
)

from ._bridge import LoopInbox, loop_inbox
from ._engine import Engine, PendingCall, PlacementSpec
from ._errors import PlacementTimeout, RemoteActorLost
from ._wire import CRASHED, OK, Failure, HostSpec, Location, UnsentReply, unpack_error

__all__ = ["RemoteActorRef", "RemoteRunner"]

M = TypeVar("M")
R = TypeVar("R")

_log = logging.getLogger("pdc.ray")


class _Reply:
    """Where the replies to one ``ask`` or one ``ask_many`` land."""

    __slots__ = ("abandoned", "error", "event", "remaining", "requests", "values")

    def __init__(self, n: int) -> None:
        self.event = anyio.Event()
        self.values: list[Any] = [None] * n
        self.remaining = n
        self.error: BaseException | None = None
        self.abandoned = False
        self.requests: list[_Request] = []

    def set(self, index: int, value: Any) -> None:
        if self.event.is_set():
            return
        self.values[index] = value
        self.remaining -= 1
        if not self.remaining:
            self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()

    def settled(self) -> bool:
        """Whether every reply is in, or the request failed."""
        return self.event.is_set()


class _TargetReply(_Reply):
    """The reply of one request, handed to a target that quacks like the waiter of an
    ``ask`` (``done``, ``set_result``, ``set_exception``): a mesh's reply slot. Nobody
    waits on it here; ``convert`` turns the host's reply into what the caller gets."""

    __slots__ = ("convert", "over", "target")

    def __init__(self, target: Any, convert: Callable[[Any], Any] | None) -> None:
        self.target = target
        self.convert = convert
        self.over = False
        self.error = None
        self.abandoned = False
        self.requests = []

    def set(self, index: int, value: Any) -> None:
        if self.over:
            return
        self.over = True
        target = self.target
        if target.done():
            return
        if self.convert is not None:
            try:
                value = self.convert(value)
            except Exception as error:
                target.set_exception(error)
                return
        target.set_result(value)

    def fail(self, error: BaseException) -> None:
        if self.over:
            return
        self.over = True
        self.error = error
        if not self.target.done():
            self.target.set_exception(error)

    def settled(self) -> bool:
        return self.over


class _Request:
    """One message in the local mailbox and on the wire."""

    __slots__ = ("id", "index", "message", "priority", "reply", "seq")

    def __init__(self, rid: int, message: Any, reply: _Reply | None, index: int) -> None:
        self.priority = DEFAULT_PRIORITY
        self.id = rid
        self.message = message
        self.reply = reply
        self.index = index
        #: The sequence number of the batch that shipped it (-1: not shipped).
        self.seq = -1


def _nothing() -> None:
    pass


class _AnswerGroup:
    """The answers to the requests one mesh operation posted directly (one per remote
    member), re-entering the event loop together: the engine's callbacks (any thread)
    park them here, and the loop is woken once, when the last is in. :meth:`flush`
    hands out what is parked at once (the caller gave up, or an incarnation ended)."""

    __slots__ = ("_expected", "_inbox", "_lock", "_parked")

    def __init__(self, inbox: LoopInbox) -> None:
        self._inbox = inbox
        self._lock = threading.Lock()
        self._parked: list[Callable[[], None]] = []
        self._expected = 0

    def expect(self) -> None:
        """One more answer will come (in the loop, before its callback is set)."""
        with self._lock:
            self._expected += 1

    def arrive(self, answered: Callable[[], None]) -> None:
        """An answer is in (any thread): hand them all out once the last is."""
        with self._lock:
            self._parked.append(answered)
            self._expected -= 1
            last = not self._expected
        if last:
            self._inbox.put(self.flush)

    def flush(self) -> None:
        """Hand out the answers parked so far (in the loop)."""
        with self._lock:
            parked, self._parked = self._parked, []
        for answered in parked:
            answered()


class RemoteActorRef(ActorRef[M, R]):
    """The handle of a remote actor: the full :class:`~pdc_core.ActorRef` API, plus
    :attr:`location` and :meth:`remote_statistics`.

    ``priority=None`` means the message's own ``priority`` attribute when it has one,
    else 128. :meth:`statistics` counts what this side sees (its mailbox, replies
    received, requests skipped here); :meth:`remote_statistics` asks the remote actor.
    """

    __slots__ = ("_runner",)

    def __init__(self, runner: RemoteRunner) -> None:
        self._runner = runner

    @property
    def actor_id(self) -> str:
        return self._runner.actor_id

    @property
    def state(self) -> ActorState:
        return self._runner.state

    @property
    def location(self) -> Location | None:
        """Where the current incarnation runs (node, pid, GPU ids); ``None`` when no
        incarnation is running."""
        return self._runner.location

    # -- delivery (the rules are ActorRef's) --------------------------------------------

    async def _deliver(self, message: M, priority: int) -> None:
        await self._post(message, priority)

    async def _post(self, message: Any, priority: int) -> None:
        """Queue ``message`` as one request whose reply is not wanted."""
        runner = self._runner
        await runner.enqueue(_Request(runner.next_id(), message, None, 0), priority)

    async def _request(self, message: M, priority: int, timeout: float | None) -> Any:
        """Send ``message`` as one request and return its reply (or TIMED_OUT)."""
        return await self._runner.request(message, priority, timeout)

    def _post_request(self, message: Any, priority: int, target: Any) -> bool:
        """Send ``message`` as one request whose reply goes to ``target`` (a mesh's
        reply slot), without waiting; False when that needs a wait (then
        :meth:`_send_request`). See :meth:`RemoteRunner.post_request`."""
        return self._runner.post_request(message, priority, target)

    async def _send_request(self, message: Any, priority: int, target: Any) -> None:
        """:meth:`_post_request`, waiting for room in the local mailbox."""
        await self._runner.send_request(message, priority, target)

    # -- a mesh's broadcast: wait for room everywhere, then tell all ----------------------

    def _tell_would_wait(self) -> bool:
        """Whether a tell would wait now (the local mailbox is full and blocks)."""
        return self._runner.tell_would_wait()

    async def _wait_room(self) -> None:
        """Wait until a tell would not wait (see :meth:`pdc_core.Mailbox.wait_room`)."""
        await self._runner.wait_room()

    def _tell_nowait(self, message: Any, priority: int) -> bool | Exception:
        """Queue ``message`` as a tell at once (a full ``"drop_oldest"`` mailbox evicts):
        True when queued, the error that refuses it (``ActorStopped``,
        ``MailboxFull``), or False when only :meth:`tell` can (a draining nursery's
        actor is admitted, waiting for room)."""
        return self._runner.tell_nowait(message, priority)

    async def _request_many(
        self, messages: Sequence[M], priority: int | list[int], timeout: float | None
    ) -> Any:
        runner = self._runner
        deadline = None if timeout is None else anyio.current_time() + timeout
        reply = _Reply(len(messages))
        requests = [_Request(runner.next_id(), m, reply, i) for i, m in enumerate(messages)]
        reply.requests = requests
        prios = [priority] * len(messages) if isinstance(priority, int) else priority
        with anyio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
            try:
                await runner.enqueue_many(requests, prios)
            except BaseException:
                runner.abandon(reply)
                raise
        if scope.cancelled_caught:
            runner.abandon(reply)
            return TIMED_OUT
        remaining = None if deadline is None else deadline - anyio.current_time()
        return await runner.wait_reply(reply, remaining, len(messages))

    async def pause(self) -> None:
        await self._runner.pause()

    async def resume(self) -> None:
        await self._runner.resume()

    async def stop(self, *, drain: bool = False, timeout: float | None = None) -> None:
        await self._runner.stop(drain=drain, timeout=check_timeout(timeout))

    async def wait(self) -> None:
        await self._runner.finished.wait()

    def statistics(self) -> ActorStatistics:
        return self._runner.statistics()

    async def remote_statistics(self) -> ActorStatistics:
        """Ask the remote actor for its own statistics (its handled, errors, skipped
        and the remote mailbox). Raises :class:`~pdc_core.ActorStopped` when no
        incarnation is running. Cancelling it abandons the wait, not the call."""
        return await self._runner.remote_statistics()


class RemoteRunner(ActorRunner):
    """Runs one remote actor for its nursery: the caller's side of it.

    Guarantees:

    * **Start is a handshake.** ``start_actor`` returns once the remote ``on_start`` has
      run. A failure raises ``ActorCrashed(... while starting)`` with the original
      cause; a placement not satisfied within ``start_timeout`` fails with a
      :class:`~pdc_ray.PlacementTimeout` cause. Either way the host process is killed
      and confirmed dead before ``start_actor`` raises.
    * **The remote actor lives no longer than its nursery.** On a normal exit it drains
      and stops; on every exit (clean, crash, cancellation) the host process is killed
      and the runner waits until the engine reports it dead, at most ``kill_timeout``
      seconds (then it logs a warning and gives up waiting).
    * **Crashes and losses surface.** A remote exception is the ``cause`` of the
      nursery's :class:`~pdc_core.ActorCrashed`, with its original type and the remote
      traceback in its notes (:class:`~pdc_ray.RemoteError` when it cannot be rebuilt
      here). A dead process, or one that misses its heartbeat (``heartbeat`` seconds,
      3 by default), is a crash caused by :class:`~pdc_ray.RemoteActorLost`.
    * **No request is left hanging.** Every ``ask`` ends with its reply,
      :class:`~pdc_core.MessageTimeout`, or an error: ``ActorCrashed`` for requests in
      flight when the actor crashed or was lost (they may or may not have been handled:
      delivery is at most once), ``ActorStopped`` when it stopped first,
      :class:`~pdc_core.MessageDropped` when a ``"drop_oldest"`` mailbox evicted it.
      Under a :class:`~pdc_core.RestartPolicy` the requests still queued here are handled
      by the next incarnation.
    * **Cancellation leaves nothing behind.** A cancelled (or timed-out) ``ask`` whose
      request was shipped is cancelled remotely: the host skips it if the actor has not
      got it yet. No task or callback outlives the runner.
    """

    #: The handle class :attr:`ref` is made from.
    ref_type: type[RemoteActorRef[Any, Any]] = RemoteActorRef

    def __init__(
        self,
        engine: Engine,
        spec: HostSpec,
        placement: PlacementSpec,
        options: StartOptions,
        *,
        window: int,
        heartbeat: float,
        start_timeout: float,
        kill_timeout: float,
    ) -> None:
        self.actor_id = spec.actor_id
        self._engine = engine
        self._spec = spec
        self._placement = placement
        self._window = window
        self._heartbeat = heartbeat
        self._start_timeout = start_timeout
        self._kill_timeout = kill_timeout
        self._max_batch = options.max_batch
        self._mailbox: Mailbox[_Request] = Mailbox(
            options.capacity,
            backpressure=options.backpressure,
            name=spec.actor_id,
            on_drop=self._dropped,
        )
        if options.paused:
            self._mailbox.pause()
        self._ref = self.ref_type(self)
        self._ids = itertools.count()
        self.state = ActorState.STARTING
        self.location: Location | None = None
        self.finished = anyio.Event()
        self.handled = self.errors = self.restarts = self.skipped = 0
        self._crash: ActorCrashed | None = None
        # Per incarnation:
        self._actor: object | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._seq = 0
        self._inflight: dict[int, list[_Request]] = {}
        self._cause: BaseException | None = None
        self._ending = anyio.Event()
        self._quiet = anyio.Event()
        self._last_failure: tuple[Failure, BaseException] | None = None
        self._to_cancel: list[tuple[int, int]] = []
        self._cancel_wake = anyio.Event()
        self._shippers = 0
        self._shipped_all = anyio.Event()
        self._calls = 0  # deliver calls on the wire (at most window)
        self._room = anyio.Event()  # set when a call on the wire completes
        #: A direct call whose caller stopped waiting (at most one: no direct call is
        #: made while another batch is in flight).
        self._orphan: tuple[int, list[_Request], PendingCall] | None = None
        self._orphan_wake = anyio.Event()
        #: Runs callables soon in this runner's event loop, from any thread.
        self._inbox: LoopInbox | None = None
        #: The group holding the answer to this runner's posted request, if any (at
        #: most one: a request is posted only when nothing is in flight).
        self._group: _AnswerGroup | None = None
        #: Requests shipped straight from their callers, past the mailbox.
        self._direct = 0
        # Stop requests, across incarnations:
        self._stop: bool | None = None  # None: not requested; else whether to drain
        self._stop_wake = anyio.Event()
        # A draining nursery:
        self._is_member: Callable[[object], bool] | None = None
        self._on_idle: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<RemoteRunner {self.actor_id!r} on {self._engine!r} {self.state.value}>"

    @property
    def ref(self) -> RemoteActorRef[Any, Any]:
        return self._ref

    @property
    def spec(self) -> HostSpec:
        """What the host of each incarnation is created from."""
        return self._spec

    def next_id(self) -> int:
        """A new request id, unique for this runner (across incarnations)."""
        return next(self._ids)

    # -- the caller's side of the ref -------------------------------------------------

    def _stopped_error(self) -> ActorStopped:
        if self._crash is not None:
            return ActorCrashed(self.actor_id, self._crash.cause)
        return ActorStopped(f"actor {self.actor_id!r} is not running", actor_id=self.actor_id)

    async def enqueue(self, request: _Request, priority: int) -> None:
        """Queue ``request`` locally (backpressure applies); ActorStopped when stopped.

        Cancelling the wait for room leaves the request unqueued (a mailbox's
        ``send``).
        """
        mailbox = self._mailbox
        request.priority = priority
        try:
            await mailbox.send(request, priority)
        except MailboxClosed:
            if self._admits_caller():
                await mailbox.admit(request, priority)
                return
            await cancellation_first()
            raise self._stopped_error() from None

    async def enqueue_many(self, requests: list[_Request], priorities: list[int]) -> None:
        """Queue ``requests`` locally, in order, each at its priority (backpressure
        applies); :class:`~pdc_core.ActorStopped` when stopped. Cancelled while it
        waits for room, the requests before the wait are queued and the rest are not.
        """
        mailbox = self._mailbox
        for request, priority in zip(requests, priorities, strict=True):
            request.priority = priority
        try:
            if len(set(priorities)) == 1 and not mailbox.sealed:
                await mailbox.send_many(requests, priorities[0])
                return
            for request, priority in zip(requests, priorities, strict=True):
                await self.enqueue(request, priority)
        except MailboxClosed:
            await cancellation_first()
            raise self._stopped_error() from None

    def _admits_caller(self) -> bool:
        return (
            self._mailbox.sealed and self._is_member is not None and self._is_member(current_task())
        )

    async def request(self, message: Any, priority: int, timeout: float | None) -> Any:
        """Send ``message`` as one request and return its reply.

        When the feeder is idle (nothing queued here, nothing in flight, not paused,
        stopping or draining) the request does not wait for a shipper: this task ships
        it at once as the next batch in sequence and waits for the host's answer
        itself. Otherwise it is queued and shipped in turn. Returns ``TIMED_OUT``
        after ``timeout``. Cancelled, it gives the request up, here and remotely if
        it was shipped (:meth:`wait_reply`).
        """
        reply = _Reply(1)
        request = _Request(self.next_id(), message, reply, 0)
        reply.requests.append(request)
        if self._ships_directly():
            request.priority = priority
            if not await self._ship_directly(request, timeout):
                self.abandon(reply)
                return TIMED_OUT
        else:
            await self.enqueue(request, priority)
        values = await self.wait_reply(reply, timeout, 1)
        return values if values is TIMED_OUT else values[0]

    def post_request(
        self,
        message: Any,
        priority: int,
        target: Any,
        convert: Callable[[Any], Any] | None = None,
    ) -> bool:
        """Send ``message`` as one request whose reply (through ``convert``) or error
        goes to ``target``, without waiting and without a task: how a mesh asks a
        remote member. ``target`` quacks like an ``ask``'s waiter (``done``,
        ``set_result``, ``set_exception``) and takes ``on_abandon(callback)``: the
        callback, called when the caller gives up, skips the request here and cancels
        it remotely, as for an abandoned ``ask``.

        When the feeder is idle (see :meth:`request`) the request is shipped at once
        as the next batch in sequence, and the engine's done callback hands out the
        answer (no task waits for it; an engine that cannot call back leaves it to the
        incarnation's adopter task). Otherwise it is queued, if the mailbox has room,
        and shipped in turn. Returns False, with nothing sent, when that needs a wait
        (full, sealed or closed): then :meth:`send_request`.
        """
        reply = _TargetReply(target, convert)
        request = _Request(self.next_id(), message, reply, 0)
        reply.requests.append(request)
        request.priority = priority
        if self._ships_directly():
            self._post_directly(request, target)
        else:
            mailbox = self._mailbox
            if mailbox.sealed or not mailbox.offer(request, priority):
                return False
        target.on_abandon(functools.partial(self.abandon, reply))
        return True

    async def send_request(
        self,
        message: Any,
        priority: int,
        target: Any,
        convert: Callable[[Any], Any] | None = None,
    ) -> None:
        """:meth:`post_request`, queued with the mailbox's backpressure (waiting for
        room); a refusal (``ActorStopped``, ``MailboxFull``) goes to ``target``.
        Cancelling the wait for room leaves the request unqueued."""
        reply = _TargetReply(target, convert)
        request = _Request(self.next_id(), message, reply, 0)
        reply.requests.append(request)
        try:
            await self.enqueue(request, priority)
        except Exception as error:
            if not target.done():
                target.set_exception(error)
            return
        target.on_abandon(functools.partial(self.abandon, reply))

    def tell_would_wait(self) -> bool:
        """Whether queueing a tell would wait now (full, with the ``"block"`` policy)."""
        mailbox = self._mailbox
        return (
            len(mailbox) >= mailbox.capacity
            and not mailbox.closed
            and mailbox.backpressure.value == "block"
        )

    async def wait_room(self) -> None:
        """Wait until queueing a tell would not wait (the local mailbox's
        :meth:`~pdc_core.Mailbox.wait_room`): a caller already cancelled on entry gets
        its cancellation, and a cancelled wait takes no room."""
        await self._mailbox.wait_room()

    def tell_nowait(self, message: Any, priority: int) -> bool | Exception:
        """Queue ``message`` as a tell without waiting (see
        ``RemoteActorRef._tell_nowait``)."""
        request = _Request(self.next_id(), message, None, 0)
        request.priority = priority
        try:
            self._mailbox.send_nowait(request, priority)
        except MailboxFull as error:
            return error
        except MailboxClosed:
            if self._admits_caller():
                return False
            return self._stopped_error()
        return True

    def _post_directly(self, request: _Request, target: Any) -> None:
        """Ship ``request`` alone, now, as the next batch; its answer is handed out by
        the engine's done callback, re-entering the event loop (or by the adopter).

        The answers to one mesh operation's requests (``target.shared()``, the same
        dict for every member's slot of one ``call``) re-enter the loop together: an
        :class:`_AnswerGroup` holds them until the last is in, so the loop wakes once
        for all the members instead of once each. It lets them go sooner when the
        caller gives up, or when a member's incarnation ends (see :meth:`_end`)."""
        actor = self._actor
        assert actor is not None
        inbox = self._inbox
        assert inbox is not None
        self._direct += 1
        batch = [request]
        seq = self._sequence(batch)
        sent = self._submit(actor, seq, batch)
        if sent is None:
            return  # lost: the incarnation ends and run() fails the request
        batch, pending = sent
        answered = functools.partial(self._answered_later, seq, batch, pending)
        shared = target.shared() if hasattr(target, "shared") else None
        if shared is None:

            def done() -> None:  # in any thread
                inbox.put(answered)

        else:
            group = shared.get(_AnswerGroup)
            if group is None:
                group = shared[_AnswerGroup] = _AnswerGroup(inbox)
                target.on_abandon(group.flush)
            group.expect()
            self._group = group

            def done() -> None:  # in any thread
                group.arrive(answered)

        if not pending.add_done_callback(done):
            if shared is not None:
                group.arrive(_nothing)  # not coming through the group after all
                self._group = None
            self._orphan = (seq, batch, pending)
            self._orphan_wake.set()

    def _answered_later(self, seq: int, batch: list[_Request], pending: PendingCall) -> None:
        """The answer to a posted batch is in (in the event loop, outside any task)."""
        if self._inflight.get(seq) is not batch:
            return  # that incarnation is over: run() failed its requests
        self._group = None
        try:
            try:
                outcome = pending.result_nowait()
            except RemoteActorLost as exc:
                self._end(exc, lost=True)
                return  # the batch stays in flight: run() fails it with the loss
            self._answered(seq, batch, outcome)
        except Exception as exc:  # the engine failed: treat as lost, as the watch does
            _log.exception("remote actor %r: handing out an answer failed", self.actor_id)
            self._end(RemoteActorLost(f"answer from remote actor {self.actor_id!r}: {exc}"))

    def _ships_directly(self) -> bool:
        """Whether the feeder is idle: an incarnation is running with nothing queued
        here or in flight, and its mailbox takes messages (not paused, closed or
        sealed). A request shipped now takes the next sequence number without
        overtaking anything and without passing ``window`` calls on the wire."""
        mailbox = self._mailbox
        return (
            not self._inflight
            and self._tg is not None
            and not len(mailbox)
            and not mailbox.paused
            and not mailbox.closed
            and not mailbox.sealed
            and not self._ending.is_set()
        )

    async def _ship_directly(self, request: _Request, timeout: float | None) -> bool:
        """Ship ``request`` alone from the calling task and hand out the answer; False
        when ``timeout`` passed first. If the wait for the answer ends early (timeout
        or cancellation), the incarnation's adopter task takes it over: the call goes
        on, and its answer is collected as any other."""
        actor = self._actor
        assert actor is not None
        self._direct += 1
        batch = [request]
        seq = self._sequence(batch)
        sent = self._submit(actor, seq, batch)
        if sent is None:
            return True  # lost: the incarnation ends and run() fails the request
        collected = False
        try:
            if timeout is None:
                await self._collect(seq, *sent)
                collected = True
            else:
                with anyio.move_on_after(timeout):
                    await self._collect(seq, *sent)
                    collected = True
        finally:
            if not collected:  # the incarnation's adopter collects the answer
                self._orphan = (seq, *sent)
                self._orphan_wake.set()
        return collected

    async def wait_reply(self, reply: _Reply, timeout: float | None, n: int) -> Any:
        """Wait for every reply of ``reply`` and return them; on timeout (then return
        TIMED_OUT) or cancellation, give up on it (here, and remotely for requests
        already shipped)."""
        if not reply.event.is_set():
            try:
                if timeout is None:
                    await reply.event.wait()
                else:
                    with anyio.move_on_after(timeout):
                        await reply.event.wait()
            except BaseException:
                self.abandon(reply)
                raise
        if not reply.event.is_set():
            self.abandon(reply)
            return TIMED_OUT
        if reply.error is not None:
            raise reply.error
        return reply.values

    def abandon(self, reply: _Reply) -> None:
        """The caller gave up on ``reply``: skip its requests here, cancel them there."""
        if reply.settled():
            return
        reply.abandoned = True
        reply.fail(ActorStopped(f"the caller gave up on actor {self.actor_id!r}"))
        shipped = [(r.seq, r.id) for r in reply.requests if r.seq >= 0]
        if shipped and self._tg is not None:
            self._to_cancel.extend(shipped)
            self._cancel_wake.set()

    def _dropped(self, request: _Request) -> None:
        if request.reply is not None:
            request.reply.fail(
                MessageDropped(
                    f"request to actor {self.actor_id!r} was dropped by its full mailbox "
                    "(policy drop_oldest)"
                )
            )

    async def pause(self) -> None:
        """Pause the local mailbox, then the remote actor's (a control call).

        Raises :class:`~pdc_core.ActorStopped` if the actor has stopped. Cancelled
        during the control call, the local mailbox stays paused.
        """
        if not self._ref.alive:
            raise self._stopped_error()
        self._mailbox.pause()
        if self.state is ActorState.RUNNING:
            self.state = ActorState.PAUSED
        await self._control("pause")

    async def resume(self) -> None:
        """Resume the local mailbox, then the remote actor's (a control call).

        Raises :class:`~pdc_core.ActorStopped` if the actor has stopped. Cancelled
        during the control call, the local mailbox stays resumed.
        """
        if not self._ref.alive:
            raise self._stopped_error()
        self._mailbox.resume()
        if self.state is ActorState.PAUSED:
            self.state = ActorState.RUNNING
        await self._control("resume")

    async def _control(self, method: str, *args: Any) -> Any:
        """A control call to the running incarnation, if any (None otherwise)."""
        actor = self._actor
        if actor is None or self._tg is None:
            return None
        try:
            return await self._engine.call(actor, method, *args, control=True)
        except RemoteActorLost:
            return None  # the watch reports the loss

    async def stop(self, *, drain: bool, timeout: float | None) -> None:
        """Close the local mailbox (failing its queued requests with
        :class:`~pdc_core.ActorStopped` unless ``drain``), ask the runner to stop, and
        wait until it has finished; after ``timeout`` seconds cancel the incarnation.
        Cancelled while it waits, the stop it requested goes on."""
        if self.finished.is_set():
            return
        if self._stop is None or (self._stop and not drain):
            self._stop = drain
            self._stop_wake.set()
        if self.state is not ActorState.STOPPING:
            if not drain and self.state is ActorState.RESTARTING and self.cancel_scope:
                self.cancel_scope.cancel()  # waiting out a restart backoff: end it now
            self.state = ActorState.STOPPING
        mailbox = self._mailbox
        mailbox.close()
        if drain:
            mailbox.resume()
        else:
            error = ActorStopped(
                f"actor {self.actor_id!r} stopped before replying", actor_id=self.actor_id
            )
            for request in mailbox.discard():
                if request.reply is not None:
                    request.reply.fail(error)
        if timeout is None:
            await self.finished.wait()
            return
        with anyio.move_on_after(timeout):
            await self.finished.wait()
        if not self.finished.is_set():
            if self.cancel_scope is not None:
                self.cancel_scope.cancel()
            await self.finished.wait()

    def statistics(self) -> ActorStatistics:
        """The caller-side statistics: the state, the handled, errors, restarts and
        skipped counts this runner keeps, and the local mailbox's (requests shipped
        directly counted as sent and received)."""
        mailbox = self._mailbox.statistics()
        if self._direct:  # passed straight through, as a mailbox counts a hand-off
            mailbox = dataclasses.replace(
                mailbox, sent=mailbox.sent + self._direct, received=mailbox.received + self._direct
            )
        return ActorStatistics(
            actor_id=self.actor_id,
            state=self.state,
            handled=self.handled,
            errors=self.errors,
            restarts=self.restarts,
            skipped=self.skipped,
            mailbox=mailbox,
        )

    async def remote_statistics(self) -> ActorStatistics:
        """The running incarnation's own statistics (a control call); raises
        :class:`~pdc_core.ActorStopped` when none runs. Cancelling it abandons the
        wait, not the call."""
        stats = await self._control("statistics")
        if stats is None:
            raise self._stopped_error()
        return cast(ActorStatistics, stats)

    # -- the nursery's side -------------------------------------------------------------

    async def run(self, started: Callable[[], None]) -> None:
        self._reset()
        try:
            await self._start()
            if self.state is not ActorState.STOPPING:
                self.state = ActorState.PAUSED if self._mailbox.paused else ActorState.RUNNING
            started()
            actor = self._actor
            assert actor is not None
            self._inbox = loop_inbox()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._watch, actor)
                tg.start_soon(self._closer, tg.cancel_scope)
                tg.start_soon(self._beat, actor)
                tg.start_soon(self._cancels, actor)
                tg.start_soon(self._stopper, actor)
                tg.start_soon(self._adopt)
                self._shippers = self._window
                for _ in range(self._window):
                    tg.start_soon(self._ship, actor)
            if self._cause is not None:
                raise self._cause
        finally:
            self._tg = None
            self.location = None
            self._fail_inflight()
            if self._actor is not None:
                await self._kill(self._actor)
                self._actor = None

    def _reset(self) -> None:
        self._seq = 0
        self._inflight = {}
        self._cause = None
        self._ending = anyio.Event()
        self._quiet = anyio.Event()
        self._last_failure = None
        self._to_cancel = []
        self._cancel_wake = anyio.Event()
        self._shipped_all = anyio.Event()
        self._calls = 0
        self._room = anyio.Event()
        self._orphan = None
        self._orphan_wake = anyio.Event()

    async def _start(self) -> None:
        """Create the host and complete the handshake, within ``start_timeout``."""
        engine = self._engine
        outcome: tuple[int, Any] | None = None
        with anyio.move_on_after(self._start_timeout) as scope:
            self._actor = await engine.create(self._spec, self._placement)
            outcome = await engine.call(self._actor, "start")
        if outcome is None:
            assert scope.cancelled_caught
            raise PlacementTimeout(
                f"remote actor {self.actor_id!r} was not started within {self._start_timeout:g} s"
                f" (start_timeout) on {self._engine!r}; can the cluster satisfy "
                f"{self._placement!r}?"
            )
        code, payload = outcome
        if code != OK:
            raise self._unpack(payload)
        self.location = payload

    def _unpack(self, failure: Failure) -> BaseException:
        """The crash cause of ``failure``: one object per failure, however many
        messages report it (a delivery and the watch report the same crash)."""
        last = self._last_failure
        if last is not None and last[0] == failure:
            return last[1]
        cause = unpack_error(failure)
        self._last_failure = (failure, cause)
        return cause

    def _end(self, cause: BaseException | None, *, lost: bool = False) -> None:
        """This incarnation is over (the first call decides why)."""
        if self._ending.is_set():
            return
        self._cause = cause
        self._ending.set()
        if lost or not self._inflight:
            self._quiet.set()
        group = self._group
        if group is not None:  # an answer held for a mesh's other members: let it go
            self._group = None
            group.flush()

    async def _closer(self, scope: anyio.CancelScope) -> None:
        """Once the incarnation is over, let the replies already on their way arrive
        (the host answered every batch before it reported the end), then stop."""
        await self._ending.wait()
        with anyio.move_on_after(self._heartbeat):
            await self._quiet.wait()
        scope.cancel()

    async def _watch(self, actor: object) -> None:
        try:
            code, failure = await self._engine.watch(actor)
        except RemoteActorLost as exc:
            self._end(exc, lost=True)
            return
        except Exception as exc:  # the engine failed: treat as lost
            self._end(RemoteActorLost(f"watching remote actor {self.actor_id!r} failed: {exc}"))
            return
        if code == CRASHED:
            assert failure is not None
            self._end(self._unpack(failure))
        else:
            self._end(None)

    async def _beat(self, actor: object) -> None:
        """The heartbeat: a control call every third of ``heartbeat`` that must be
        answered within ``heartbeat`` seconds, else the actor is lost."""
        interval = self._heartbeat / 3
        while True:
            await anyio.sleep(interval)
            with anyio.move_on_after(self._heartbeat) as scope:
                try:
                    await self._engine.call(actor, "ping", control=True)
                except RemoteActorLost as exc:
                    self._end(exc, lost=True)
                    return
            if scope.cancelled_caught:
                self._end(
                    RemoteActorLost(
                        f"remote actor {self.actor_id!r} missed its heartbeat "
                        f"({self._heartbeat:g} s without an answer)"
                    ),
                    lost=True,
                )
                return

    async def _cancels(self, actor: object) -> None:
        """Ship the cancellations of requests whose callers gave up."""
        while True:
            await self._cancel_wake.wait()
            self._cancel_wake = anyio.Event()
            ids, self._to_cancel = self._to_cancel, []
            if ids:
                try:
                    await self._engine.call(actor, "cancel", ids, control=True)
                except RemoteActorLost:
                    return  # the watch reports it

    async def _adopt(self) -> None:
        """Collect the answers to direct calls whose callers stopped waiting."""
        while True:
            await self._orphan_wake.wait()
            self._orphan_wake = anyio.Event()
            orphan, self._orphan = self._orphan, None
            if orphan is not None:
                await self._collect(*orphan)

    async def _stopper(self, actor: object) -> None:
        """Carry a stop request to the host: a draining one once everything queued
        here has been shipped and answered."""
        while self._stop is None:
            self._stop_wake = anyio.Event()
            await self._stop_wake.wait()
        try:
            if self._stop:
                await self._engine.call(actor, "resume", control=True)  # draining resumes
                await self._shipped_all.wait()
                await self._wait_for_room(1)  # and the answers to direct calls are in
            await self._engine.call(actor, "stop", bool(self._stop), control=True)
        except RemoteActorLost:
            return  # the watch reports it

    async def _ship(self, actor: object) -> None:
        """One of ``window`` shippers: take what waits (by priority), ship, repeat."""
        mailbox = self._mailbox
        try:
            while True:
                try:
                    taken = await mailbox.receive_many(self._max_batch)
                except MailboxClosed:
                    return
                requests = [request for request in taken if isinstance(request, _Request)]
                if self._ending.is_set():
                    # This incarnation is over: what was taken goes back, in order, for
                    # the next one (or for finalize to fail).
                    for request in reversed(requests):
                        mailbox.requeue(request, request.priority)
                    return
                batch: list[_Request] = []
                for request in requests:
                    reply = request.reply
                    if reply is not None and reply.abandoned:
                        self.skipped += 1
                    else:
                        batch.append(request)
                if not batch:
                    continue
                seq = self._sequence(batch)
                await self._wait_for_room(self._window)  # a caller's direct call holds one
                sent = self._submit(actor, seq, batch)
                if sent is None:
                    return
                await self._collect(seq, *sent)
        finally:
            self._shippers -= 1
            if not self._shippers:
                self._shipped_all.set()

    def _sequence(self, batch: list[_Request]) -> int:
        """Give ``batch`` the next sequence number: from now on it is in flight."""
        seq = self._seq
        self._seq += 1
        self._inflight[seq] = batch
        for request in batch:
            request.seq = seq
        return seq

    async def _wait_for_room(self, limit: int) -> None:
        """Wait until fewer than ``limit`` deliver calls are on the wire."""
        while self._calls >= limit:
            if self._room.is_set():
                self._room = anyio.Event()
            await self._room.wait()

    def _submit(
        self, actor: object, seq: int, batch: list[_Request]
    ) -> tuple[list[_Request], PendingCall] | None:
        """Send batch number ``seq``; return the requests it carries and the pending
        call, or ``None`` when the host is gone (this incarnation ends)."""
        engine = self._engine
        try:
            try:
                pending = engine.submit(actor, "deliver", seq, *self._pack(batch))
            except TypeError as exc:
                # The batch could not be sent (a message does not pickle): fail it, and
                # fill its place in the sequence so that the batches after it go on.
                self._refuse(batch, exc)
                batch = self._inflight[seq] = []
                pending = engine.submit(actor, "deliver", seq, [])
        except RemoteActorLost as exc:
            self._end(exc, lost=True)
            return None
        self._calls += 1
        return batch, pending

    async def _collect(self, seq: int, batch: list[_Request], pending: PendingCall) -> None:
        """Wait for the host's answer to batch ``seq`` and hand it out."""
        try:
            outcome = await pending.result()
        except RemoteActorLost as exc:
            self._end(exc, lost=True)
            return  # the batch stays in flight: run() fails it with the loss
        self._answered(seq, batch, outcome)

    def _answered(self, seq: int, batch: list[_Request], outcome: tuple[int, Any]) -> None:
        """Hand out the host's answer to batch ``seq``."""
        code, payload = outcome
        self._calls -= 1
        self._room.set()
        self._delivered(seq)
        if code == OK:
            self.handled += self._distribute(batch, payload)
        elif code == CRASHED:
            cause = self._unpack(payload)
            for request in batch:
                if request.reply is not None:
                    request.reply.fail(ActorCrashed(self.actor_id, cause))
            self._end(cause)
        else:
            error = ActorStopped(
                f"actor {self.actor_id!r} stopped before replying", actor_id=self.actor_id
            )
            for request in batch:
                if request.reply is not None:
                    request.reply.fail(error)

    def _pack(self, batch: list[_Request]) -> tuple[Any, ...]:
        """The arguments of the ``deliver`` call that ships ``batch`` (after its
        sequence number): its items (see ``pdc_ray._host.Item``)."""
        return ([(r.id, r.message, r.reply is not None) for r in batch],)

    def _distribute(self, batch: list[_Request], payload: Any) -> int:
        """Hand the replies of a delivered ``batch`` to their callers; return how many
        messages the remote actor handled."""
        for request, value in zip(batch, payload, strict=True):
            if request.reply is not None:
                if type(value) is UnsentReply:  # the actor went on; this ask fails
                    request.reply.fail(
                        TypeError(
                            f"the reply of remote actor {self.actor_id!r} could not be sent "
                            f"back: {value.detail}"
                        )
                    )
                else:
                    request.reply.set(request.index, value)
        return len(batch)

    def _refuse(self, batch: list[_Request], exc: Exception) -> None:
        detail = f"{type(exc).__name__}: {exc}"
        tells = 0
        for request in batch:
            if request.reply is not None:
                request.reply.fail(
                    TypeError(f"cannot send to remote actor {self.actor_id!r}: {detail}")
                )
            else:
                tells += 1
        if tells:
            _log.error(
                "%d message(s) told to remote actor %r could not be sent: %s",
                tells,
                self.actor_id,
                detail,
            )

    def _delivered(self, seq: int) -> None:
        self._inflight.pop(seq, None)
        if not self._inflight:
            if self._ending.is_set():
                self._quiet.set()
            if self._on_idle is not None and self.idle:
                self._on_idle()

    def _fail_inflight(self) -> None:
        inflight, self._inflight = self._inflight, {}
        if not inflight:
            return
        cause = self._cause
        for batch in inflight.values():
            for request in batch:
                if request.reply is None:
                    continue
                if cause is not None:
                    request.reply.fail(ActorCrashed(self.actor_id, cause))
                else:
                    request.reply.fail(
                        ActorStopped(
                            f"actor {self.actor_id!r} stopped before replying",
                            actor_id=self.actor_id,
                        )
                    )

    async def _kill(self, actor: object) -> None:
        """Kill the host process and wait until the engine reports it dead (bounded)."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self._kill_timeout) as scope:
                await self._engine.kill(actor)
            if scope.cancelled_caught:
                _log.warning(
                    "remote actor %r: %r did not report its process dead within %g s "
                    "(kill_timeout); no longer waiting",
                    self.actor_id,
                    self._engine,
                    self._kill_timeout,
                )

    def on_crash(self, error: Exception, *, restarting: bool) -> None:
        self.errors += 1
        if restarting:
            self.restarts += 1
            self.state = ActorState.RESTARTING

    def finalize(self, error: BaseException | None) -> None:
        if isinstance(error, ActorCrashed):
            self.state = ActorState.CRASHED
            self._crash = error
            crash = error

            def failure() -> ActorStopped:
                return ActorCrashed(self.actor_id, crash.cause)

        else:
            self.state = ActorState.STOPPED
            reason = "was cancelled" if error is not None else "stopped"

            def failure() -> ActorStopped:
                return ActorStopped(
                    f"actor {self.actor_id!r} {reason} before replying", actor_id=self.actor_id
                )

        mailbox = self._mailbox
        mailbox.close()
        for request in mailbox.discard():
            if request.reply is not None:
                request.reply.fail(failure())
        self.finished.set()

    # -- a draining nursery -------------------------------------------------------------

    def begin_drain(self, on_idle: Callable[[], None], is_member: Callable[[object], bool]) -> None:
        if not self.finished.is_set():
            self._is_member = is_member
            self._on_idle = on_idle
            self._mailbox.seal(self._starved)

    def _starved(self) -> None:
        if self._on_idle is not None and self.idle:
            self._on_idle()

    @property
    def idle(self) -> bool:
        return self.finished.is_set() or (self._mailbox.starved() and not self._inflight)

    def unfinished(self) -> int:
        return len(self._mailbox) + sum(len(batch) for batch in self._inflight.values())
