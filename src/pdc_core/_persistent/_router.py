"""The reply router of a persistent-kernel session: where every reply goes.

Requests are published in order and the kernel answers them in order, so a reply is
matched to its request by its sequence number alone. :class:`ReplyRouter` keeps, for
each published range of sequence numbers, its *sink*: a waiting ``request`` call
(:class:`Pending`), the inbox of :meth:`~pdc_core.PersistentKernelSession.receive`
(:data:`RECEIVE`), or nobody (:data:`DISCARD`). :meth:`ReplyRouter.pump` collects what
the kernel published and hands each reply to its sink; when the kernel is done it fails
the sinks still waiting (:meth:`ReplyRouter.finish`).

Guarantees: every reply is routed exactly once, in order, and counted once
(``replied == returned + received + discarded``); once the kernel is done, every
request published and not answered is counted in :attr:`ReplyRouter.unprocessed` and
fails its caller. The router knows the ring and the kernel's handle only: it never
waits and never calls the session or the leader. :meth:`ReplyRouter.pump` says whether
anything moved and the caller (the leader) tells whoever waits.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .._backend._resident import ResidentKernel
from .._backend._ring import ErrorCode, RingHost, StopMode, copy_records, records_copy
from .._exceptions import ActorCrashed, ActorStopped, PersistentKernelError

__all__ = ["DISCARD", "RECEIVE", "Pending", "ReplyRouter"]

_log = logging.getLogger("pdc.persistent")

#: The sink of replies to sends: the session's inbox, for ``receive``.
RECEIVE: Final = 0
#: The sink of replies nobody waits for (``reply=False``, an abandoned request).
DISCARD: Final = 1


class Pending:
    """The replies awaited by one ``request``/``request_batch`` call.

    ``replies`` stays ``None`` until the first replies arrive; they are copied into it
    straight from the ring's slots (one copy per reply).
    """

    __slots__ = ("count", "error", "filled", "replies")

    def __init__(self, count: int) -> None:
        self.count = count  # replies awaited; fixed
        # Written by the router only: ``replies`` from the first reply on, ``filled``
        # grows to ``count``; ``error`` set once, when the kernel ends first.
        self.replies: npt.NDArray[Any] | None = None
        self.filled = 0
        self.error: BaseException | None = None

    def fill(self, replies: npt.NDArray[Any]) -> None:
        """Copy ``replies`` (views of ring slots) in after those already filled."""
        take = len(replies)
        if take == self.count:
            self.replies = records_copy(replies)
        else:
            if self.replies is None:
                self.replies = np.empty(self.count, dtype=replies.dtype)
            copy_records(self.replies[self.filled : self.filled + take], replies)
        self.filled += take


class _Route:
    """Where the replies of sequence numbers ``[start, end)`` go."""

    __slots__ = ("end", "sink", "start")

    def __init__(self, start: int, end: int, sink: Pending | int) -> None:
        self.start = start
        self.end = end
        self.sink = sink


def _interrupt_again(interrupt: BaseException, error: PersistentKernelError) -> BaseException:
    """A fresh ``KeyboardInterrupt``/``SystemExit`` like the body's, chained from
    ``error`` (whose cause is the body's own, with its traceback on the worker)."""
    try:
        again = type(interrupt)(*interrupt.args)
    except Exception:  # a subclass with another signature: raise the body's own
        return interrupt
    again.__cause__ = error
    return again


class ReplyRouter:
    """Routes the replies of one ring to their sinks; see the module documentation.

    Driven from the session's event loop only (not thread-safe). Its state, by field:
    who changes it and which values are legal.
    """

    __slots__ = (
        "_idle_pumps",
        "_resident",
        "_wake",
        "discarded",
        "error",
        "error_reported",
        "final",
        "inbox",
        "inbox_count",
        "interrupted",
        "name",
        "received",
        "replied",
        "ring",
        "routes",
        "terminal",
        "unprocessed",
        "where",
    )

    def __init__(self, ring: RingHost, resident: ResidentKernel, name: str, where: str) -> None:
        #: The host end the replies are read from (the resident's ``ring``).
        self.ring = ring
        self._resident = resident  # its doorbell, ``exited`` and ``error``
        self._wake = resident.wake
        self.name = name  # the kernel's name, for errors
        self.where = where  # the backend's qualified name, for the crash's log line
        #: The published ranges not yet fully answered, in sequence order, contiguous
        #: from :attr:`replied`: appended by the session when it publishes
        #: (:meth:`add`, :meth:`route_last`), popped here as replies come, re-pointed
        #: to :data:`DISCARD` by :meth:`abandon`; empty once :attr:`final`.
        self.routes: collections.deque[_Route] = collections.deque()
        #: Replies routed to :data:`RECEIVE` and not yet taken (copies, in order):
        #: appended here, taken by :meth:`take`; ``inbox_count`` is their total length.
        self.inbox: collections.deque[npt.NDArray[Any]] = collections.deque()
        self.inbox_count = 0
        #: The sequence number of the next reply to route: only grows (here, and in
        #: the session's lean ``request``, which takes its one reply itself).
        self.replied = 0
        self.received = 0  # replies taken from the inbox (by take); only grows
        self.discarded = 0  # replies nobody took (DISCARD, abandoned sinks); only grows
        #: Requests published but never answered: set once, by :meth:`finish`.
        self.unprocessed = 0
        #: The kernel is done (or its execution ended) and its last replies are routed:
        #: False until :meth:`finish`, then True for ever. Nothing is routed after.
        self.final = False
        self._idle_pumps = 0  # pumps that moved nothing: every 16th looks at ``exited``
        #: Makes the error every later operation raises: ``None`` until :meth:`finish`,
        #: then set for ever (:class:`~pdc_core.ActorStopped`, ``ActorCrashed``, or the
        #: body's interrupt again).
        self.terminal: Callable[[], BaseException] | None = None
        #: What the kernel reported if it crashed: set at most once, by :meth:`finish`.
        self.error: PersistentKernelError | None = None
        #: Whether a caller was told of :attr:`error` (False -> True, by
        #: :meth:`raise_terminal` and by a failed request): else leaving the session says.
        self.error_reported = False
        #: The body raised ``KeyboardInterrupt`` or ``SystemExit`` (set by :meth:`finish`).
        self.interrupted = False

    # -- publishing ---------------------------------------------------------------

    def add(self, start: int, end: int, sink: Pending | int) -> None:
        """Route the replies of ``[start, end)``, just published, to ``sink``."""
        routes = self.routes
        if routes and routes[-1].sink is sink and routes[-1].end == start:
            routes[-1].end = end
        else:
            routes.append(_Route(start, end, sink))

    def route_last(self) -> Pending:
        """Route the reply to the request just published by :meth:`RingHost.put_one`."""
        head = self.ring.in_head
        pending = Pending(1)
        self.routes.append(_Route(head - 1, head, pending))
        return pending

    def abandon(self, pending: Pending) -> None:
        """The caller of ``pending`` is gone: the replies it already holds are discarded
        (``replied == returned + received + discarded`` holds), and so will the rest be."""
        self.discarded += pending.filled
        for route in self.routes:
            if route.sink is pending:
                route.sink = DISCARD

    # -- collecting ---------------------------------------------------------------

    def pump(self) -> bool:
        """Collect published replies and notice the end of the kernel; never waits.

        Whether anything moved (replies routed, or the kernel found done: then
        :attr:`final`). One look at each word: replies published after it are seen by
        the next pump (the host waiter returns at once for them).
        """
        if self.final:
            return False
        ring = self.ring
        progressed = False
        if ring.load_out_head() != ring.out_tail:
            count = 0
            for piece in ring.published():
                self._route(piece)
                count += len(piece)
            ring.release(count)
            if ring.in_head != ring.out_head:
                # Requests it has not answered remain: it may be waiting for the room
                # just released. (With none, ringing would only wake it to find nothing.)
                self._wake()
            progressed = True
        if ring.done:  # after the replies: finish collects any published since
            self.finish()
            return True
        if progressed:
            return True
        # The done word is the signal; ``exited`` (which may cost a driver call) only
        # catches a device side that died without setting it, so look now and then.
        self._idle_pumps += 1
        if not self._idle_pumps & 15 and self._resident.exited:
            self.finish()
            return True
        return False

    def _route(self, replies: npt.NDArray[Any]) -> None:
        """Hand ``replies`` (views of ring slots, in order) to their sinks; each sink
        copies what it keeps."""
        count = len(replies)
        position = 0
        seq = self.replied
        routes = self.routes
        while position < count:
            route = routes[0]
            take = min(route.end - seq, count - position)
            sink = route.sink
            if sink is RECEIVE:
                self.inbox.append(records_copy(replies[position : position + take]))
                self.inbox_count += take
            elif sink is DISCARD:
                self.discarded += take
            else:
                assert isinstance(sink, Pending)
                sink.fill(replies if take == count else replies[position : position + take])
            position += take
            seq += take
            if seq == route.end:
                routes.popleft()
            else:
                route.start = seq
        self.replied = seq

    def take(self, max_count: int | None) -> npt.NDArray[Any]:
        """Take up to ``max_count`` (all when ``None``) replies from the inbox, in order
        (at least one must be there)."""
        inbox = self.inbox
        if max_count is None or max_count >= self.inbox_count:
            chunks = list(inbox)
            inbox.clear()
        else:
            chunks = []
            wanted = max_count
            while wanted:
                chunk = inbox[0]
                if len(chunk) <= wanted:
                    chunks.append(inbox.popleft())
                    wanted -= len(chunk)
                else:
                    chunks.append(chunk[:wanted])
                    inbox[0] = chunk[wanted:]
                    wanted = 0
        replies = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        count = len(replies)
        self.inbox_count -= count
        self.received += count
        return replies

    # -- the end ------------------------------------------------------------------

    def finish(self) -> None:
        """The kernel is done or its execution ended: collect the last replies, fail the rest."""
        ring = self.ring
        exited_without_done = not ring.done
        if ring.load_out_head() != ring.out_tail:
            self._route(ring.read())
        self.final = True
        name = self.name
        error = self._resident.error
        if error is None and exited_without_done:
            error = PersistentKernelError(
                name, 0, "its execution ended without setting the done word"
            )
        if error is None and ring.stop_requested is StopMode.RUN:
            error = PersistentKernelError(
                name, int(ErrorCode.NONE), "it finished without being asked to stop"
            )
        unprocessed = ring.in_head - self.replied
        self.unprocessed = unprocessed
        if error is not None:
            _log.warning("persistent kernel %r on %s crashed: %s", name, self.where, error)
            self.error = error
            crash_error = error
            interrupt = error.__cause__
            if isinstance(interrupt, KeyboardInterrupt | SystemExit):
                # The body was interrupted (or exited): that reaches the event loop's
                # thread as itself, wherever the crash would be raised, as an interrupt
                # in an actor's handler does.
                caught = interrupt
                self.interrupted = True

                def interrupted() -> BaseException:
                    return _interrupt_again(caught, crash_error)

                self.terminal = interrupted
            else:

                def crashed() -> ActorStopped:
                    return ActorCrashed(name, crash_error)

                self.terminal = crashed
        else:
            detail = f"; {unprocessed} published request(s) were not handled" if unprocessed else ""

            def stopped() -> ActorStopped:
                return ActorStopped(f"persistent kernel {name!r} is stopped{detail}", actor_id=name)

            self.terminal = stopped
        # Requests still routed were never answered: they are ``unprocessed`` (never
        # ``discarded``, which counts replies).
        for route in self.routes:
            sink = route.sink
            if isinstance(sink, Pending) and sink.error is None:
                sink.error = self.terminal()
        self.routes.clear()

    def raise_terminal(self) -> None:
        """Raise what every operation raises once the kernel is done."""
        assert self.terminal is not None
        if self.error is not None:
            self.error_reported = True
        raise self.terminal()
