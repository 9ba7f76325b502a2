"""The state a :class:`~pdc_ray.RemoteRunner` keeps, and the wire both its sides use.

A runner has two sides over one state: the caller's (:mod:`pdc_ray._runner_caller`:
the local mailbox's entry points, a lone ``ask`` shipped by its own caller, replies,
giving up, control calls) and the keeper's (:mod:`pdc_ray._runner_keeper`: the tasks
of each incarnation, which ship what waits, watch the host and carry cancellations
and stops). :class:`pdc_ray._runner.RemoteRunner` joins them and owns the start and
the end of each incarnation. Both sides are mixins of :class:`RunnerState`, so every
field is an attribute of the runner itself: no extra hop per message.

This module declares every field once, with what it means, and holds what both sides
do with it: number a batch and put it on the wire (:meth:`RunnerState._sequence`,
:meth:`~RunnerState._submit`), hand out the host's answer
(:meth:`~RunnerState._answered`), end an incarnation (:meth:`~RunnerState._end`) and
tell a draining nursery when the runner is idle.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from pdc_core import ActorCrashed, ActorState, ActorStopped, Mailbox, MessageDropped
from pdc_core.lowlevel import DEFAULT_PRIORITY, ActorRunner, StartOptions

from ._bridge import LoopInbox
from ._engine import Engine, PendingCall, PlacementSpec
from ._errors import RemoteActorLost
from ._wire import CRASHED, OK, Failure, HostSpec, Location, UnsentReply, unpack_error

__all__ = ["RunnerState"]

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


class RunnerState(ActorRunner):
    """The fields of a remote actor's runner, declared once, and the wire both of its
    sides use (see the module's docstring). Not a runner by itself: see
    :class:`pdc_ray.RemoteRunner`."""

    # -- across incarnations ------------------------------------------------------------
    #: The actor's id (the host spec's).
    actor_id: str
    #: Creates, calls, watches and kills the host of each incarnation.
    _engine: Engine
    #: What the host of each incarnation is created from.
    _spec: HostSpec
    #: Where the host may run (Ray's resources, placement group, ...).
    _placement: PlacementSpec
    #: At most this many ``deliver`` calls on the wire at once (and as many shippers).
    _window: int
    #: Seconds a heartbeat (or the replies still on their way at the end) may take.
    _heartbeat: float
    #: Seconds the create-and-start handshake may take.
    _start_timeout: float
    #: Seconds to wait for the engine to report a killed host dead.
    _kill_timeout: float
    #: At most this many requests per shipped batch.
    _max_batch: int
    #: The local mailbox: bounded, by priority, the start options' backpressure.
    _mailbox: Mailbox[_Request]
    #: Request ids, unique for this runner.
    _ids: itertools.count[int]
    #: The runner's state, as its ref reports it.
    state: ActorState
    #: Where the current incarnation runs; None when none runs.
    location: Location | None
    #: Set once the runner is finalized (its ref refuses new messages).
    finished: anyio.Event
    #: Messages the remote actor handled, as its answers report (see ``statistics``).
    handled: int
    #: Incarnations that crashed or were lost (counted by ``on_crash``).
    errors: int
    #: Incarnations restarted under the actor's restart policy.
    restarts: int
    #: Requests dropped here unshipped: their callers had given up on them.
    skipped: int
    #: The crash that finalized the runner, if any (the cause of later refusals).
    _crash: ActorCrashed | None
    #: Requests shipped straight from their callers, past the mailbox (counted as the
    #: mailbox's sent and received in ``statistics``).
    _direct: int
    #: A stop request: None when none was made, else whether it drains.
    _stop: bool | None
    #: Set when a stop is requested (the current incarnation's stopper waits on it).
    _stop_wake: anyio.Event
    #: A draining nursery's test of whether a task belongs to it (its members may
    #: still send to the sealed mailbox).
    _is_member: Callable[[object], bool] | None
    #: A draining nursery's callback for when this runner is idle.
    _on_idle: Callable[[], None] | None

    # -- per incarnation (see _reset) ---------------------------------------------------
    #: The engine's handle of the host; None when no incarnation has one.
    _actor: object | None
    #: The incarnation's task group; None when no incarnation runs its tasks.
    _tg: anyio.abc.TaskGroup | None
    #: Runs callables soon in this runner's event loop, from any thread.
    _inbox: LoopInbox | None
    #: The next batch's sequence number (the host hands batches over in this order).
    _seq: int
    #: The batches on the wire, by sequence number, until their answer is handed out.
    _inflight: dict[int, list[_Request]]
    #: Why the incarnation ended (None: it stopped); set by the first _end.
    _cause: BaseException | None
    #: Set when the incarnation is over (by _end).
    _ending: anyio.Event
    #: Set once, after the end, no batch is in flight (the closer waits for it).
    _quiet: anyio.Event
    #: The last failure unpacked and its cause (one cause object per failure).
    _last_failure: tuple[Failure, BaseException] | None
    #: ``(seq, id)`` of shipped requests whose callers gave up, to cancel remotely.
    _to_cancel: list[tuple[int, int]]
    #: Set when _to_cancel has news for the cancels task.
    _cancel_wake: anyio.Event
    #: Shippers still running.
    _shippers: int
    #: Set when the last shipper returns (a draining stop waits for it).
    _shipped_all: anyio.Event
    #: Held by the one shipper that waits on the mailbox and numbers what it takes
    #: (taking and numbering are one step: see KeeperSide._ship).
    _taking: anyio.Lock
    #: True while the shipper holding _taking waits in the mailbox: a message the
    #: mailbox hands it is in its hand, neither queued nor in flight, until it runs.
    _parked: bool
    #: ``deliver`` calls on the wire (at most _window).
    _calls: int
    #: Set when a call on the wire completes (room for another).
    _room: anyio.Event
    #: A direct call whose caller stopped waiting (at most one: no direct call is made
    #: while another batch is in flight), for the adopter task to collect.
    _orphan: tuple[int, list[_Request], PendingCall] | None
    #: Set when _orphan has one for the adopter.
    _orphan_wake: anyio.Event
    #: The group holding the answer to this runner's posted request, if any (at most
    #: one: a request is posted only when nothing is in flight).
    _group: _AnswerGroup | None

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
        self._mailbox = Mailbox(
            options.capacity,
            backpressure=options.backpressure,
            name=spec.actor_id,
            on_drop=self._dropped,
        )
        if options.paused:
            self._mailbox.pause()
        self._ids = itertools.count()
        self.state = ActorState.STARTING
        self.location = None
        self.finished = anyio.Event()
        self.handled = self.errors = self.restarts = self.skipped = 0
        self._crash = None
        self._direct = 0
        self._stop = None
        self._stop_wake = anyio.Event()
        self._is_member = None
        self._on_idle = None
        self._actor = None
        self._tg = None
        self._inbox = None
        self._shippers = 0
        self._group = None
        self._reset()

    def _reset(self) -> None:
        """The per-incarnation fields, as a new incarnation starts them."""
        self._seq = 0
        self._inflight = {}
        self._cause = None
        self._ending = anyio.Event()
        self._quiet = anyio.Event()
        self._last_failure = None
        self._to_cancel = []
        self._cancel_wake = anyio.Event()
        self._shipped_all = anyio.Event()
        self._taking = anyio.Lock()
        self._parked = False
        self._calls = 0
        self._room = anyio.Event()
        self._orphan = None
        self._orphan_wake = anyio.Event()

    @property
    def spec(self) -> HostSpec:
        """What the host of each incarnation is created from."""
        return self._spec

    def next_id(self) -> int:
        """A new request id, unique for this runner (across incarnations)."""
        return next(self._ids)

    def _stopped_error(self) -> ActorStopped:
        if self._crash is not None:
            return ActorCrashed(self.actor_id, self._crash.cause)
        return ActorStopped(f"actor {self.actor_id!r} is not running", actor_id=self.actor_id)

    def _dropped(self, request: _Request) -> None:
        if request.reply is not None:
            request.reply.fail(
                MessageDropped(
                    f"request to actor {self.actor_id!r} was dropped by its full mailbox "
                    "(policy drop_oldest)"
                )
            )

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

    # -- the wire: batches numbered, shipped and answered ------------------------------

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
