"""The caller's side of a remote actor: a local prioritised mailbox, shipped in batches.

:class:`RemoteActorRef` is the handle users hold, and :class:`CallerSide` what it
calls: the runner's methods that run in the callers' tasks (one of the two sides of
:class:`pdc_ray.RemoteRunner`, over the fields :class:`~pdc_ray._runner_state.RunnerState`
declares).

How it works: ``tell`` and ``ask`` put requests into a local
:class:`pdc_core.Mailbox` (bounded, priorities 0..255, the start options'
backpressure policy and counters); the keeper's shippers take them from there in
priority order (:mod:`pdc_ray._runner_keeper`). A lone ``ask`` made while the feeder
is idle (nothing queued here, nothing in flight) skips the mailbox and the shipper:
its caller ships it as the next batch and waits for the answer itself, one task
switch less on each way (it still counts in the window, and in the mailbox's ``sent``
and ``received`` as a hand-off does). A caller that gives up (timeout, cancellation)
skips its requests here and has the shipped ones cancelled remotely. Control calls
(pause, resume, statistics) go in their own concurrency group.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import anyio

from pdc_core import (
    ActorRef,
    ActorState,
    ActorStatistics,
    ActorStopped,
    MailboxClosed,
    MailboxFull,
)
from pdc_core.lowlevel import TIMED_OUT, cancellation_first, check_timeout, current_task

from ._engine import PendingCall
from ._errors import RemoteActorLost
from ._runner_state import RunnerState, _AnswerGroup, _log, _Reply, _Request, _TargetReply
from ._wire import Location

__all__ = ["CallerSide", "RemoteActorRef"]

M = TypeVar("M")
R = TypeVar("R")


def _nothing() -> None:
    pass


class RemoteActorRef(ActorRef[M, R]):
    """The handle of a remote actor: the full :class:`~pdc_core.ActorRef` API, plus
    :attr:`location` and :meth:`remote_statistics`.

    ``priority=None`` means the message's own ``priority`` attribute when it has one,
    else 128. :meth:`statistics` counts what this side sees (its mailbox, replies
    received, requests skipped here); :meth:`remote_statistics` asks the remote actor.
    """

    __slots__ = ("_runner",)

    def __init__(self, runner: CallerSide) -> None:
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


class CallerSide(RunnerState):
    """The runner's methods that run in its callers' tasks: what :class:`RemoteActorRef`
    calls (see the module's docstring)."""

    #: The handle class :attr:`ref` is made from.
    ref_type: type[RemoteActorRef[Any, Any]] = RemoteActorRef

    @functools.cached_property
    def ref(self) -> RemoteActorRef[Any, Any]:
        """The actor's handle: one for the runner's lifetime (made on first use)."""
        return self.ref_type(self)

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
            # a parked shipper no longer counted as waiting was handed a message that
            # it has not numbered yet: a request shipped now would overtake it
            and (not self._parked or mailbox.receiver_waits)
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

    # -- control ------------------------------------------------------------------------

    async def pause(self) -> None:
        """Pause the local mailbox, then the remote actor's (a control call).

        Raises :class:`~pdc_core.ActorStopped` if the actor has stopped. Cancelled
        during the control call, the local mailbox stays paused.
        """
        if not self.ref.alive:
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
        if not self.ref.alive:
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
