"""A broadcast stream: one sending side, many subscribers, each getting every message.

``send, subscribe = create_broadcast_stream(max_buffer_size)`` is anyio's
``create_memory_object_stream`` with fan-out: each ``subscribe()`` returns a new
receive stream that gets every message sent after it subscribed, in order, through a
buffer of its own bounded by ``max_buffer_size``. What happens when a subscriber's
buffer is full is the stream's *slow-subscriber policy*:

* ``"wait"`` (the default): ``send`` waits until *every* subscriber has room, then
  delivers to all of them at once. Waiting sends are served first, in the order they
  began to wait, as by anyio's streams: the receive that makes room delivers the first
  waiting send's item then and there, and a ``send_nowait`` raises
  :class:`anyio.WouldBlock` (delivering to none) while any send waits or a subscriber
  is full. A send cancelled while it waits delivers to none, unless a receive had
  delivered its item already (it then raises the cancellation with its item sent, as
  anyio's); so no subscriber ever misses a message another one got.
* ``"drop_oldest"``: ``send`` never waits; a full subscriber loses the oldest message
  in its buffer (with ``max_buffer_size=0``, a subscriber not waiting in ``receive``
  loses the new one). Every loss is counted, per subscriber and in total, in
  :meth:`~BroadcastSendStream.statistics`.

The rules of closing, cloning and cancellation are documented at the public name,
:func:`create_broadcast_stream`.

Waiting is done with pdc's per-loop waiters (see :mod:`pdc_core._loop`), under asyncio
and trio.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Generic, Literal, NamedTuple, Self, TypeVar

from anyio import ClosedResourceError, EndOfStream, WouldBlock
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from .._loop import Kit, current_kit, full_checkpoint, wake, woken_value

__all__ = [
    "BroadcastReceiveStream",
    "BroadcastSendStream",
    "BroadcastStreamStatistics",
    "create_broadcast_stream",
]

T = TypeVar("T")
_T_co = TypeVar("_T_co", covariant=True)
_T_contra = TypeVar("_T_contra", contravariant=True)

#: What a waiting receiver or sender is woken with when its wait ends without an item.
_ENDED: Final = object()  # every send stream closed: end of stream
_CLOSED: Final = object()  # the waiting task's own handle was closed
_SENT: Final = object()  # a waiting send's item was delivered (by the receive making room)

_SlowSubscriberPolicy = Literal["wait", "drop_oldest"]


class BroadcastStreamStatistics(NamedTuple):
    """A snapshot of a broadcast stream, from :meth:`BroadcastSendStream.statistics` or
    :meth:`BroadcastReceiveStream.statistics` (anyio's memory-stream fields first)."""

    #: Items buffered: in this subscription (a receive stream), or in the fullest
    #: subscription (the send stream: what bounds a waiting ``send``).
    current_buffer_used: int
    #: Most items a subscription buffers (an int, or ``math.inf``).
    max_buffer_size: float
    #: Unclosed clones of the send stream.
    open_send_streams: int
    #: Unclosed receive streams: of this subscription, or of all (send stream).
    open_receive_streams: int
    #: Tasks waiting in ``send`` for a slow subscriber.
    tasks_waiting_send: int
    #: Tasks waiting in ``receive``: on this subscription, or on all (send stream).
    tasks_waiting_receive: int
    #: Subscriptions open now.
    subscribers: int
    #: Messages sent on the stream since it was created.
    sent: int
    #: Messages a full subscriber lost (``"drop_oldest"``): this subscription's, or
    #: every subscription's, closed ones included (send stream).
    dropped: int


class _Subscription:
    """One subscriber's buffer and the tasks waiting on it."""

    __slots__ = ("buffer", "clones", "dropped", "receivers")

    def __init__(self) -> None:
        self.buffer: deque[Any] = deque()
        #: Waiters of tasks in ``receive`` with nothing buffered, in arrival order.
        self.receivers: deque[Any] = deque()
        self.clones = 0
        self.dropped = 0

    def has_room(self, limit: float) -> bool:
        if len(self.buffer) < limit:
            return True
        return any(not waiter.done() for waiter in self.receivers)

    def waiting_receivers(self) -> int:
        return sum(not waiter.done() for waiter in self.receivers)


class _Send:
    """A ``send`` waiting for room (compared by identity, never by its item)."""

    __slots__ = ("delivered", "item", "waiter")

    def __init__(self, item: Any, waiter: Any) -> None:
        self.item = item
        self.waiter = waiter
        self.delivered = False


class _State:
    """What the clones of the send stream and every subscription share."""

    __slots__ = (
        "drop",
        "dropped",
        "kit",
        "limit",
        "open_senders",
        "pending",
        "sent",
        "subs",
        "waiting",
    )

    def __init__(self, limit: float, drop: bool) -> None:
        self.limit = limit
        self.drop = drop
        self.subs: list[_Subscription] = []
        self.open_senders = 0
        self.sent = 0
        #: Drops of subscriptions since closed (open ones count their own).
        self.dropped = 0
        #: The event loop of the tasks waiting now (kept when none waits: the next
        #: waiting task's loop replaces it).
        self.kit: Kit | None = None
        #: Tasks waiting in ``send`` or ``receive`` now.
        self.waiting = 0
        #: Sends waiting for room, in the order they began to wait.
        self.pending: deque[_Send] = deque()

    def bind(self, kit: Kit) -> None:
        """Bind to the event loop of ``kit``: the stream belongs to a loop only while one
        of its tasks waits on it; a task of another loop then is an error."""
        if self.waiting and self.kit is not None:
            raise RuntimeError(
                f"this broadcast stream is in use by a task of another ({self.kit.name}) "
                "event loop, which waits on it; it cannot be used from another event loop "
                "meanwhile"
            )
        self.kit = kit

    def serve(self) -> None:
        """Room may have appeared: deliver the waiting sends' items, first come first,
        while every subscription has room for the next (each send is woken, done)."""
        pending = self.pending
        while pending:
            send = pending[0]
            if self.offer(send.item) is not None:
                return
            pending.popleft()
            send.delivered = True
            wake(send.waiter, _SENT)

    def offer(self, item: Any) -> _Subscription | None:
        """Deliver ``item`` to every subscription now, or return one without room (and
        deliver to none) under the ``"wait"`` policy."""
        subs = self.subs
        limit = self.limit
        if not self.drop:
            for sub in subs:
                if len(sub.buffer) >= limit and not sub.has_room(limit):
                    return sub
        for sub in subs:
            receivers = sub.receivers
            while receivers:
                waiter = receivers.popleft()
                if not waiter.done():
                    waiter.set_result(item)
                    break
            else:
                buffer = sub.buffer
                if len(buffer) >= limit:  # "drop_oldest" (else there is room)
                    sub.dropped += 1
                    if not buffer:  # max_buffer_size=0 and nobody waiting: lose this one
                        continue
                    buffer.popleft()
                buffer.append(item)
        self.sent += 1
        return None

    def subscribe(self) -> BroadcastReceiveStream[Any]:
        """A new subscription: gets every message sent from now on."""
        sub = _Subscription()
        self.subs.append(sub)
        return BroadcastReceiveStream(self, sub)

    def unsubscribe(self, sub: _Subscription) -> None:
        try:
            self.subs.remove(sub)
        except ValueError:
            return
        self.dropped += sub.dropped
        sub.buffer.clear()
        if self.pending:  # the sends that waited for it may go on
            self.serve()

    def end(self) -> None:
        """Every send stream is closed: wake every waiting receiver to end."""
        for sub in self.subs:
            receivers = sub.receivers
            while receivers:
                wake(receivers.popleft(), _ENDED)

    def statistics(self, sub: _Subscription | None) -> BroadcastStreamStatistics:
        subs = self.subs
        senders = len(self.pending)
        if sub is None:
            return BroadcastStreamStatistics(
                max((len(s.buffer) for s in subs), default=0),
                self.limit,
                self.open_senders,
                sum(s.clones for s in subs),
                senders,
                sum(s.waiting_receivers() for s in subs),
                len(subs),
                self.sent,
                self.dropped + sum(s.dropped for s in subs),
            )
        return BroadcastStreamStatistics(
            len(sub.buffer),
            self.limit,
            self.open_senders,
            sub.clones,
            senders,
            sub.waiting_receivers(),
            len(subs),
            self.sent,
            sub.dropped,
        )


class BroadcastSendStream(ObjectSendStream[_T_contra], Generic[_T_contra]):
    """The sending side of a broadcast stream (see :func:`create_broadcast_stream`).

    Every item sent goes to every subscription open at that moment, in order.
    """

    __slots__ = ("_closed", "_state", "_waiting")

    def __init__(self, state: _State) -> None:
        self._state = state
        self._closed = False
        #: Waiters of this handle's sends that wait for room (woken on close).
        self._waiting: list[Any] = []
        state.open_senders += 1

    def send_nowait(self, item: _T_contra) -> None:
        """Deliver ``item`` to every subscriber now.

        Under ``"wait"`` raises :class:`anyio.WouldBlock` (delivering to none) when a
        subscriber's buffer is full; under ``"drop_oldest"`` it always delivers, a full
        subscriber losing its oldest message. Raises :class:`anyio.ClosedResourceError`
        if this send stream is closed.
        """
        if self._closed:
            raise ClosedResourceError
        state = self._state
        if state.pending or state.offer(item) is not None:  # waiting sends go first
            raise WouldBlock

    async def send(self, item: _T_contra) -> None:
        """Deliver ``item`` to every subscriber, waiting (``"wait"`` policy) until every
        subscriber has room.

        Raises :class:`anyio.ClosedResourceError` if this send stream is (or gets, while
        waiting) closed. Waiting sends are served in the order they began to wait.
        Cancellation while waiting delivers the item to no subscriber, unless a receive
        delivered it already (then the cancellation is raised all the same, as by
        anyio's streams).
        """
        if self._closed:
            raise ClosedResourceError
        state = self._state
        kit = current_kit()
        if kit is not state.kit:
            state.bind(kit)
        await kit.checkpoint()  # as anyio's: a cancelled send or receive does nothing
        if self._closed:
            raise ClosedResourceError
        if not state.pending and state.offer(item) is None:
            return
        waiter = kit.waiter()
        entry = _Send(item, waiter)
        state.pending.append(entry)
        self._waiting.append(waiter)
        state.waiting += 1
        try:
            result = await waiter
        finally:
            state.waiting -= 1
            self._waiting.remove(waiter)
            if not entry.delivered:  # closed or cancelled first: it never will be
                with contextlib.suppress(ValueError):  # close() took it out already
                    state.pending.remove(entry)
        if result is _CLOSED:
            raise ClosedResourceError

    def clone(self) -> BroadcastSendStream[_T_contra]:
        """Another handle on the sending side, closed separately: the subscribers see
        the end of the stream once every clone is closed. Raises
        :class:`anyio.ClosedResourceError` if this one is closed."""
        if self._closed:
            raise ClosedResourceError
        return BroadcastSendStream(self._state)

    def close(self) -> None:
        """Close this handle (as :meth:`aclose`, for synchronous code).

        Its sends still waiting raise :class:`anyio.ClosedResourceError`, having
        delivered nothing. Once every clone is closed, each subscriber receives what it
        has buffered, then :class:`anyio.EndOfStream`.
        """
        if self._closed:
            return
        self._closed = True
        state = self._state
        if self._waiting:
            # Out of the queue now, not when their tasks run: a receive making room
            # before then must not deliver the item of a send that raises.
            waiting = self._waiting
            state.pending = deque(send for send in state.pending if send.waiter not in waiting)
            for waiter in list(waiting):
                wake(waiter, _CLOSED)
        state.open_senders -= 1
        if not state.open_senders:
            state.end()

    async def aclose(self) -> None:
        """Close this handle (see :meth:`close`); never waits, but is a checkpoint (as
        trio's channels' ``aclose``): it closes, then raises a pending cancellation."""
        self.close()
        await full_checkpoint(current_kit())

    async def __aenter__(self) -> Self:
        """``async with`` the handle (closed on the way out); a checkpoint."""
        await full_checkpoint(current_kit())
        return self

    def statistics(self) -> BroadcastStreamStatistics:
        """A snapshot of the stream (see :class:`BroadcastStreamStatistics`)."""
        return self._state.statistics(None)

    def __enter__(self) -> BroadcastSendStream[_T_contra]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        flag = " closed" if self._closed else ""
        return f"<BroadcastSendStream to {len(self._state.subs)} subscriber(s){flag}>"


class BroadcastReceiveStream(ObjectReceiveStream[_T_co], Generic[_T_co]):
    """One subscription to a broadcast stream: every message sent after it subscribed,
    in order, through a buffer of its own (see :func:`create_broadcast_stream`)."""

    __slots__ = ("_closed", "_state", "_sub", "_waiting")

    def __init__(self, state: _State, sub: _Subscription) -> None:
        self._state = state
        self._sub = sub
        self._closed = False
        self._waiting: list[Any] = []
        sub.clones += 1

    def receive_nowait(self) -> _T_co:
        """Return the next buffered message without waiting.

        Raises :class:`anyio.WouldBlock` when none is buffered (with
        ``max_buffer_size=0`` nothing ever is: such a subscriber receives only while it
        waits in :meth:`receive`), :class:`anyio.EndOfStream` when none is buffered and
        the sending side is closed, :class:`anyio.ClosedResourceError` if this receive
        stream is closed.
        """
        if self._closed:
            raise ClosedResourceError
        sub = self._sub
        buffer = sub.buffer
        if buffer:
            item: _T_co = buffer.popleft()
            if self._state.pending:  # the first waiting send takes the room at once
                self._state.serve()
            return item
        if not self._state.open_senders:
            raise EndOfStream
        raise WouldBlock

    async def receive(self) -> _T_co:
        """Return the next message, waiting for one.

        Raises :class:`anyio.EndOfStream` once the sending side is closed and nothing is
        buffered, :class:`anyio.ClosedResourceError` if this receive stream is (or gets,
        while waiting) closed. A cancelled receive takes nothing: a message handed to it
        meanwhile goes back first in the buffer.
        """
        if self._closed:
            raise ClosedResourceError
        sub = self._sub
        state = self._state
        kit = current_kit()
        if kit is not state.kit:
            state.bind(kit)
        await kit.checkpoint()  # as anyio's: a cancelled send or receive does nothing
        if self._closed:
            raise ClosedResourceError
        buffer = sub.buffer
        if buffer:
            item: _T_co = buffer.popleft()
            if state.pending:  # the first waiting send takes the room at once
                state.serve()
            return item
        if not state.open_senders:
            raise EndOfStream
        waiter = kit.waiter()
        sub.receivers.append(waiter)
        self._waiting.append(waiter)
        if state.pending:  # max_buffer_size=0: a waiting receiver is room
            state.serve()
        state.waiting += 1
        try:
            result = await waiter
        except BaseException:
            state.waiting -= 1
            self._waiting.remove(waiter)
            if kit.woken(waiter):
                value = woken_value(waiter)
                if value is not _ENDED and value is not _CLOSED:
                    self._give_back(value)
            else:
                with contextlib.suppress(ValueError):
                    sub.receivers.remove(waiter)
            raise
        state.waiting -= 1
        self._waiting.remove(waiter)
        if result is _ENDED:
            raise EndOfStream
        if result is _CLOSED:
            raise ClosedResourceError
        return result  # type: ignore[no-any-return]

    def _give_back(self, item: Any) -> None:
        """A message was handed to a receive that was then cancelled: to the next waiting
        receiver of the subscription, else first in its buffer (which may then hold one
        more than ``max_buffer_size`` until received)."""
        sub = self._sub
        if self._closed and not sub.clones:
            return
        receivers = sub.receivers
        while receivers:
            waiter = receivers.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        sub.buffer.appendleft(item)

    def clone(self) -> BroadcastReceiveStream[_T_co]:
        """Another handle on this subscription: clones share its buffer, each message
        going to one of them (``subscribe()`` again for a copy of every message).
        Raises :class:`anyio.ClosedResourceError` if this one is closed."""
        if self._closed:
            raise ClosedResourceError
        return BroadcastReceiveStream(self._state, self._sub)

    def close(self) -> None:
        """Close this handle (as :meth:`aclose`, for synchronous code).

        Its receives still waiting raise :class:`anyio.ClosedResourceError`. Once every
        clone of the subscription is closed, it unsubscribes: its buffer is emptied and
        senders no longer wait for it.
        """
        if self._closed:
            return
        self._closed = True
        sub = self._sub
        for waiter in self._waiting:
            try:
                sub.receivers.remove(waiter)
            except ValueError:
                continue  # already handed a message: it gives it back
            wake(waiter, _CLOSED)
        sub.clones -= 1
        if not sub.clones:
            self._state.unsubscribe(sub)

    async def aclose(self) -> None:
        """Close this handle (see :meth:`close`); never waits, but is a checkpoint (as
        trio's channels' ``aclose``): it closes, then raises a pending cancellation."""
        self.close()
        await full_checkpoint(current_kit())

    async def __aenter__(self) -> Self:
        """``async with`` the handle (closed on the way out); a checkpoint."""
        await full_checkpoint(current_kit())
        return self

    def statistics(self) -> BroadcastStreamStatistics:
        """A snapshot of this subscription (see :class:`BroadcastStreamStatistics`)."""
        return self._state.statistics(self._sub)

    def __enter__(self) -> BroadcastReceiveStream[_T_co]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        flag = " closed" if self._closed else ""
        return f"<BroadcastReceiveStream buffering {len(self._sub.buffer)}{flag}>"


class create_broadcast_stream(
    tuple[BroadcastSendStream[T], Callable[[], BroadcastReceiveStream[T]]],
):
    """Create a broadcast stream: ``send, subscribe = create_broadcast_stream(16)``.

    Each ``subscribe()`` returns a new :class:`BroadcastReceiveStream` that receives
    every message sent on ``send`` (a :class:`BroadcastSendStream`) after it
    subscribed, in order, buffering up to ``max_buffer_size`` of them (an int >= 0, or
    ``math.inf``). ``slow_subscriber`` is the policy for a subscriber whose buffer is
    full: ``"wait"`` (``send`` waits until every subscriber has room, then delivers to
    all at once; a cancelled send delivers to none unless a receive had delivered its
    item already, as anyio's) or ``"drop_oldest"`` (``send``
    never waits; the subscriber loses its oldest message, counted in ``statistics()``).
    The item type can be given as ``create_broadcast_stream[int](16)``, as with
    :func:`anyio.create_memory_object_stream`.

    Raises :class:`ValueError` for a ``max_buffer_size`` that is not an int >= 0 or
    ``math.inf``, or an unknown policy.

    Closing follows anyio's memory object streams: ``clone()`` makes another handle on the
    same side (of a subscription, for a receive stream: clones share its buffer and
    compete for its messages; ``subscribe()`` again for a second copy of every message);
    a closed handle raises :class:`anyio.ClosedResourceError`; once every clone of the
    sending side is closed, subscribers receive what is buffered and then
    :class:`anyio.EndOfStream` (which ends ``async for``); once every clone of a
    subscription is closed, it stops receiving and a sender waiting for it goes on. A send
    with no subscriber delivers to nobody (it is not an error: subscribers come and go).

    As with anyio's streams, ``send`` and ``receive`` are checkpoints: each yields to
    the event loop once, so a cancelled one sends or takes nothing; ``send_nowait`` and
    ``receive_nowait`` never yield. Waiting sends are served first, in the order they
    began to wait: the receive that makes room delivers the first one's item, and a
    ``send_nowait`` raises :class:`anyio.WouldBlock` while any send waits. A stream
    belongs to an event loop only while a task of that loop waits on it: an idle
    stream works in a later ``anyio.run``, as anyio's do, and a task of another loop
    meanwhile gets a :class:`RuntimeError`.
    """

    def __new__(  # type: ignore[misc]
        cls, max_buffer_size: float = 0, *, slow_subscriber: _SlowSubscriberPolicy = "wait"
    ) -> tuple[BroadcastSendStream[T], Callable[[], BroadcastReceiveStream[T]]]:
        if isinstance(max_buffer_size, bool) or (
            max_buffer_size != math.inf and not isinstance(max_buffer_size, int)
        ):
            raise ValueError("max_buffer_size must be either an integer or math.inf")
        if max_buffer_size < 0:
            raise ValueError("max_buffer_size cannot be negative")
        if slow_subscriber not in ("wait", "drop_oldest"):
            raise ValueError(
                f"slow_subscriber must be 'wait' or 'drop_oldest', not {slow_subscriber!r}"
            )
        state = _State(max_buffer_size, slow_subscriber == "drop_oldest")
        subscribe: Callable[[], BroadcastReceiveStream[T]] = state.subscribe
        return BroadcastSendStream(state), subscribe
