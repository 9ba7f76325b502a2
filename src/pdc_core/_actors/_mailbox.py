"""Mailboxes: bounded, prioritised message queues with backpressure and a control lane.

A :class:`Mailbox` is the queue in front of every mailbox actor. It guarantees:

* **Bounded.** At most ``capacity`` data messages are queued (default 1024; 0 is an
  unbuffered mailbox, where a sender meets a receiver). What
  happens to a sender when it is full is the mailbox's :class:`Backpressure` policy:
  ``"block"`` (the default) waits for room, ``"raise"`` raises :class:`MailboxFull`,
  ``"drop_oldest"`` evicts the oldest message of the lowest priority present.
* **Prioritised.** Each message has a priority in 0..255; higher priorities are
  received first and messages of equal priority in the order they were sent. A
  priority outside 0..255 is a :class:`ValueError` naming the value.
* **Nothing silent.** Every message the mailbox accepted is eventually received,
  dropped by the ``"drop_oldest"`` policy or discarded by :meth:`Mailbox.discard`, and
  each of those is counted in :meth:`Mailbox.statistics`:
  ``sent == received + dropped + discarded + depth`` holds at every moment.
* **A separate control lane.** :meth:`Mailbox.send_control` never blocks and never
  drops, whatever the data lane holds, and control messages are received ahead of all
  data, so a full mailbox can never lose a stop. :meth:`Mailbox.pause` is a state of
  the mailbox, not a message, so it cannot be lost either: while paused, data stays
  queued and only control messages are delivered.

Mailboxes work under asyncio and trio (whichever anyio runs on); waiting integrates
with anyio cancel scopes, and a cancelled ``send`` or ``receive`` neither loses nor
duplicates a message. The waiting itself uses each event loop's cheapest primitive
(an ``asyncio.Future``, or ``trio.lowlevel.wait_task_rescheduled``) rather than
``anyio`` streams, whose per-operation checkpoints would double the cost of a
round trip. Operations that complete without waiting (a ``send`` that finds room, a
``receive`` that finds a message, an actor's ``tell``) still yield to the scheduler
once the task has run them for about a millisecond without waiting: the event loop
counts them, whichever mailboxes they touch, and reads the clock once every 64. So a
busy producer or consumer cannot starve other tasks or ignore cancellation for much
longer than a millisecond, however it spreads its messages over mailboxes. At those
looks a ``send`` or ``tell`` also yields when the mailbox it sends to holds 32 messages
or more, so that a receiver that has fallen behind catches up in runs of about 64
instead of after the sender has filled the whole mailbox.

A ``send``, ``admit``, ``receive`` or ``receive_many`` whose caller's cancel scope is
already cancelled raises that cancellation on entry, before it takes or sends anything.

A mailbox belongs to the event loop that first waits on it.

**A mailbox is an anyio object stream.** :class:`Mailbox` implements both
:class:`anyio.abc.ObjectSendStream` and :class:`anyio.abc.ObjectReceiveStream`, so it
plugs into any anyio pipeline. It is one object that is both ends of a memory object
stream, and maps their semantics so:

* :meth:`Mailbox.close` (synchronous) and :meth:`Mailbox.aclose` (and leaving
  ``async with mailbox:``) close the *sending* side: queued data can still be received.
* ``send`` after that raises :class:`anyio.ClosedResourceError` ("closed by us").
* ``receive`` on a closed mailbox with nothing left raises :class:`anyio.EndOfStream`,
  so ``async for item in mailbox`` ends once the mailbox is closed and drained.
* Once the *receiving* side is gone - :meth:`Mailbox.discard` on a closed mailbox, which
  is what a stopping actor does with what it will never handle - ``send`` raises
  :class:`anyio.BrokenResourceError` instead.

All three are :class:`~pdc_core.MailboxClosed`, as before, so ``except MailboxClosed``
keeps working: ``MailboxClosed`` is itself both an ``anyio.ClosedResourceError`` and an
``anyio.EndOfStream`` (one object is both ends, so its close is both "closed by us" and
"closed by the other end"), and the broken case a subclass that is also an
``anyio.BrokenResourceError`` (and still an ``EndOfStream`` for its receivers).
Priorities and timeouts are extra, optional arguments of ``send`` and ``receive``.
"""

# Timeouts are parameters, not cancel scopes, on purpose: a deadline scope costs more than
# a whole round trip (see the mailbox module docstring), and the seed API takes them.
# ruff: noqa: ASYNC109

from __future__ import annotations

import enum
import logging
import time
from bisect import insort
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar

from anyio import BrokenResourceError, WouldBlock
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from .._exceptions import MailboxClosed, MailboxFull, MessageTimeout
from .._loop import (
    TIMED_OUT,
    TURN_CHECK_EVERY,
    Kit,
    Waiter,
    check_count,
    check_timeout,
    current_kit,
    full_checkpoint,
    strict_int,
    woken_value,
)
from .._loop._cancel import raise_cancelled

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CATCH_UP_AT",
    "DEFAULT_CAPACITY",
    "DEFAULT_PRIORITY",
    "EMPTY",
    "HANDED",
    "QUEUED",
    "Backpressure",
    "Control",
    "Mailbox",
    "MailboxStatistics",
    "check_priority",
]

T = TypeVar("T")

#: Priority of a message that does not say otherwise (the seeds' default).
DEFAULT_PRIORITY: Final = 128
#: Capacity of a mailbox that does not say otherwise.
DEFAULT_CAPACITY: Final = 1024
#: A sender checking its turn (see :class:`~pdc_core._loop.Turns`) also yields when the
#: mailbox it sends to holds this many messages: its receiver has fallen behind.
CATCH_UP_AT: Final = 32
#: Drops under the drop_oldest policy are logged once, then once per this many.
_DROP_LOG_EVERY: Final = 1000
_log = logging.getLogger("pdc.mailbox")
#: What :meth:`Mailbox.poll` and :meth:`Mailbox.take` return when there is nothing.
EMPTY: Final = object()
#: What :meth:`Mailbox.offer` returns when it accepted the item: queued, or handed
#: straight to the parked receiver (both true; ``0`` when it did not accept it).
QUEUED: Final = 1
HANDED: Final = 2

#: What a waiting sender's waiter is resolved with once its item was moved in.
_SENT: Final = object()
#: The item of a :meth:`Mailbox.wait_room` wait: it waits for room, sending nothing.
_ROOM: Final = object()

#: The lanes and priorities of every mailbox that has never held data: shared, and
#: never changed (a mailbox makes its own with its first lane).
_NO_LANES: Final[list[Any]] = [None] * 256
_NO_PRIORITIES: Final[list[int]] = []


def check_priority(priority: object) -> int:
    """Return ``priority`` as an int after checking it is in 0..255.

    Raises :class:`ValueError` naming the value when it is out of range, and
    :class:`TypeError` when it is not an integer (the rule of :func:`strict_int`:
    NumPy integers are, bools and floats are not).
    """
    if type(priority) is int and 0 <= priority <= 255:
        return priority
    value = strict_int(priority, "priority", "an int in 0..255")
    if not 0 <= value <= 255:
        raise ValueError(f"priority must be in 0..255 (higher is served first), got {priority!r}")
    return value


class Backpressure(enum.Enum):
    """What a mailbox does with a data message when it is full."""

    #: Wait until there is room (the default). Never loses a message.
    BLOCK = "block"
    #: Raise :class:`~pdc_core.MailboxFull` at once; the message is not enqueued.
    RAISE = "raise"
    #: Evict the oldest message of the lowest priority present to make room. A message
    #: is never evicted in favour of one of lower priority: when the newcomer's priority
    #: is below everything queued, the newcomer itself is dropped. Every drop is counted.
    DROP_OLDEST = "drop_oldest"

    @classmethod
    def coerce(cls, value: Backpressure | str) -> Backpressure:
        """Accept a member or its name (``"block"``, ``"raise"``, ``"drop_oldest"``).

        PyDotCompute's spellings ``"reject"`` and ``"drop"`` are accepted too.
        """
        if isinstance(value, Backpressure):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            key = {"reject": "raise", "drop": "drop_oldest"}.get(key, key)
            for member in cls:
                if member.value == key:
                    return member
        choices = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown backpressure policy {value!r}; choose one of {choices}")


class Control:
    """Base class of control messages.

    Control messages travel on their own lane: :meth:`Mailbox.send_control` never
    blocks and never drops, and :meth:`Mailbox.receive` returns them ahead of any data,
    even while the mailbox is paused. Subclass it for your own control messages.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    """A snapshot of a mailbox's counters.

    ``sent == received + dropped + discarded + depth`` always holds: every data
    message the mailbox accepted is accounted for.
    """

    #: Name given to the mailbox, if any.
    name: str | None
    #: Most data messages the mailbox holds.
    capacity: int
    #: What a sender meets when the mailbox is full.
    backpressure: Backpressure
    #: Data messages queued now.
    depth: int
    #: Highest ``depth`` seen.
    peak_depth: int
    #: Control messages queued now.
    control_depth: int
    #: Data messages accepted (including those later dropped).
    sent: int
    #: Data messages handed to a receiver.
    received: int
    #: Data messages dropped by the ``"drop_oldest"`` policy.
    dropped: int
    #: ``dropped`` broken down by priority.
    dropped_by_priority: Mapping[int, int]
    #: Data messages refused with :class:`~pdc_core.MailboxFull` (``"raise"`` policy).
    rejected: int
    #: Data messages removed unreceived by :meth:`Mailbox.discard`.
    discarded: int
    #: Control messages sent.
    control_sent: int
    #: Tasks waiting to send because the mailbox is full.
    senders_waiting: int
    #: Tasks waiting to receive.
    receivers_waiting: int
    #: Whether data delivery is paused.
    paused: bool
    #: Whether the mailbox refuses new data.
    closed: bool


# MailboxClosed is both an anyio.ClosedResourceError and an anyio.EndOfStream: a mailbox
# is both ends in one object, so closing it is at once "closed by us" (for its senders)
# and "closed by the other end" (for its receivers). This one adds BrokenResourceError
# for the senders of a mailbox whose receiving side is gone. Private until pdc_core
# exports it; catch MailboxClosed or anyio.BrokenResourceError.


class _MailboxBroken(MailboxClosed, BrokenResourceError):
    """``send`` on a mailbox whose receiving side is gone: it was closed and its queue
    discarded, as a stopping actor does (:class:`anyio.BrokenResourceError`)."""


class _Send:
    """A ``send`` waiting for room, with its item (removed by identity, never by its
    item's ``==``); ``item`` is :data:`_ROOM` for a :meth:`Mailbox.wait_room`."""

    __slots__ = ("item", "priority", "waiter")

    def __init__(self, waiter: Any, item: Any, priority: int) -> None:
        self.waiter = waiter
        self.item = item
        self.priority = priority


def _remove(waiters: deque[Any] | None, waiter: Any) -> None:
    if waiters is None:
        return
    try:  # noqa: SIM105 - contextlib.suppress is slower, and this runs per timed-out wait
        waiters.remove(waiter)
    except ValueError:
        pass


# --------------------------------------------------------------------------------------
# The mailbox.
# --------------------------------------------------------------------------------------


class Mailbox(ObjectSendStream[T], ObjectReceiveStream["T | Control"]):
    """A bounded, prioritised queue of messages with a separate control lane.

    It is an anyio object stream, both ends in one object: ``send``, ``receive``,
    ``aclose``, ``async with`` and ``async for`` behave as anyio's, with the priority
    (and the timeout) as extra arguments. See the module documentation for the
    guarantees and how closing maps to :class:`anyio.EndOfStream`,
    :class:`anyio.ClosedResourceError` and :class:`anyio.BrokenResourceError`.

    Items and room are handed over as by anyio's streams: an item sent while a receiver
    waits is that receiver's; a waiting receiver is room (the only room of an unbuffered
    ``Mailbox(0)``); waiting senders are served in order, the receive that makes room
    moving the first one's item in at once. What differs from anyio's memory object
    streams, and nothing else does:

    * there is no ``clone()``: one object is both ends, so closing it closes the sending
      side only and a receiver is never closed on its own;
    * :meth:`statistics` returns a :class:`MailboxStatistics`;
    * an unclosed mailbox is not reported with a :class:`ResourceWarning`;
    * its exceptions are anyio's, never trio's own, even under trio;
    * the capacity is an ``int`` of at least 0 (not ``math.inf``), the item type a
      subscript only (no ``item_type`` argument);
    * a ``send`` or ``receive`` that completes without waiting is a cancellation point
      but not a scheduling point (see the module documentation).

    ``on_drop`` is called with each data message the ``"drop_oldest"`` policy drops,
    after it has been removed (actors use it to fail the dropped request's caller). It
    is not called for messages removed by :meth:`discard`.
    """

    __slots__ = (
        "_backpressure",
        "_broken",
        "_capacity",
        "_closed",
        "_control_sent",
        "_ctrl",
        "_discarded",
        "_dropped",
        "_dropped_by_priority",
        "_drops_checked",
        "_drops_logged_at",
        "_drops_warned",
        "_kit",
        "_lanes",
        "_name",
        "_on_drop",
        "_on_starved",
        "_paused",
        "_peak",
        "_prios",
        "_received",
        "_receivers",
        "_rejected",
        "_sealed",
        "_senders",
        "_sent",
        "_size",
        "_taker",
    )

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        *,
        backpressure: Backpressure | str = Backpressure.BLOCK,
        name: str | None = None,
        on_drop: Callable[[T], object] | None = None,
    ) -> None:
        self._capacity = check_count(capacity, "capacity", 0)
        self._backpressure = Backpressure.coerce(backpressure)
        self._name = name
        self._on_drop = on_drop
        # An idle mailbox holds no queue at all: each lane (a deque per priority in
        # use) and each line of waiters is made when first needed, so that ten thousand
        # idle actors cost little memory and give the collector little to scan.
        self._lanes: list[deque[T] | None] = _NO_LANES  # a deque per priority in use
        self._prios: list[int] = _NO_PRIORITIES  # priorities with queued data, ascending
        self._size = 0
        self._ctrl: deque[Control] | None = None
        self._receivers: deque[Any] | None = None
        self._taker: Any = None
        self._senders: deque[_Send] | None = None
        self._kit: Kit | None = None
        self._paused = False
        self._closed = False
        self._broken = False
        self._drops_checked = 0
        self._drops_warned = 0
        self._drops_logged_at = 0.0
        self._sealed = False
        self._on_starved: Callable[[], None] | None = None
        # The counters of statistics(): sent == received + dropped + discarded + depth.
        self._sent = 0
        self._received = 0
        self._dropped = 0
        self._dropped_by_priority: dict[int, int] | None = None  # made at the first drop
        self._rejected = 0
        self._discarded = 0
        self._control_sent = 0
        self._peak = 0

    # -- properties ---------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Most data messages the mailbox holds."""
        return self._capacity

    @property
    def backpressure(self) -> Backpressure:
        """The policy applied to a sender when the mailbox is full."""
        return self._backpressure

    @property
    def name(self) -> str | None:
        """The name given at construction, used in error messages."""
        return self._name

    @property
    def paused(self) -> bool:
        """Whether data delivery is paused (control messages are still delivered)."""
        return self._paused

    @property
    def closed(self) -> bool:
        """Whether the mailbox refuses new data."""
        return self._closed

    def __len__(self) -> int:
        """Number of data messages queued."""
        return self._size

    def __repr__(self) -> str:
        label = f" {self._name!r}" if self._name else ""
        flags = "".join((" paused" if self._paused else "", " closed" if self._closed else ""))
        return f"<Mailbox{label} {self._size}/{self._capacity} {self._backpressure.value}{flags}>"

    def _label(self) -> str:
        return f"mailbox {self._name!r}" if self._name else "mailbox"

    def statistics(self) -> MailboxStatistics:
        """Return a snapshot of the counters (see :class:`MailboxStatistics`)."""
        return MailboxStatistics(
            name=self._name,
            capacity=self._capacity,
            backpressure=self._backpressure,
            depth=self._size,
            # An unbuffered mailbox's item passes through the queue within one call.
            peak_depth=min(self._peak, self._capacity),
            control_depth=len(self._ctrl or ()),
            sent=self._sent,
            received=self._received,
            dropped=self._dropped,
            dropped_by_priority=MappingProxyType(dict(self._dropped_by_priority or {})),
            rejected=self._rejected,
            discarded=self._discarded,
            control_sent=self._control_sent,
            senders_waiting=sum(not s.waiter.done() for s in self._senders or ()),
            receivers_waiting=len(self._receivers or ()) + (self._taker is not None),
            paused=self._paused,
            closed=self._closed,
        )

    def _bind(self) -> Kit:
        kit = self._kit = current_kit()
        return kit

    def bind(self) -> None:
        """Belong to the running event loop from now on (a mailbox otherwise belongs to
        the loop that first uses it): what an actor's mailbox does when it is made."""
        self._bind()

    @property
    def on_drop(self) -> Callable[[T], object] | None:
        """Called with each data message the ``"drop_oldest"`` policy drops (see the
        class documentation); settable, e.g. once the actor that fails the dropped
        requests exists."""
        return self._on_drop

    @on_drop.setter
    def on_drop(self, callback: Callable[[T], object] | None) -> None:
        self._on_drop = callback

    # -- internals ----------------------------------------------------------------------

    def _push(self, item: T, priority: int) -> None:
        """Accept ``item`` (the caller checked :meth:`_has_room`): queued, and handed to
        the first waiting receiver if one waits (see :meth:`_wake_receiver`)."""
        self._enqueue(item, priority)
        if (self._receivers or self._taker is not None) and not self._paused:
            self._wake_receiver()

    def _enqueue(self, item: T, priority: int) -> None:
        lane = self._lanes[priority]
        if lane is None:
            lane = self._new_lane(priority)
        if not lane:
            insort(self._prios, priority)
        lane.append(item)
        size = self._size = self._size + 1
        self._sent += 1
        if size > self._peak:
            self._peak = size

    def _has_room(self) -> bool:
        """Whether a data message can go in now without waiting: the one full-mailbox
        decision. Room is a free place in the queue or, as in anyio's streams, a
        receiver waiting for the message (the only room an unbuffered mailbox has)."""
        if self._size < self._capacity:
            return True
        return not self._paused and self._receiver_waits()

    def _receiver_waits(self) -> bool:
        taker = self._taker
        if taker is not None and not taker.done():
            return True
        return any(not waiter.done() for waiter in self._receivers or ())

    def _new_lane(self, priority: int) -> deque[T]:
        if self._lanes is _NO_LANES:  # the mailbox's own lists, from its first lane on
            self._lanes = [None] * 256
            self._prios = []
        lane: deque[T] = deque()
        self._lanes[priority] = lane
        return lane

    def _requeue(self, item: T, priority: int) -> None:
        """Put back, first in its priority, an item whose receiver was cancelled after
        it was handed over (asyncio can cancel a task whose wake-up is pending). The
        mailbox may hold ``capacity + 1`` messages until it is received."""
        lane = self._lanes[priority]
        if lane is None:
            lane = self._new_lane(priority)
        if not lane:
            insort(self._prios, priority)
        lane.appendleft(item)
        self._size += 1
        self._received -= 1
        if (self._receivers or self._taker is not None) and not self._paused:
            self._wake_receiver()

    def _wake_all_receivers(self) -> None:
        """Closed and empty: every waiting receiver must find out."""
        while self._receivers or self._taker is not None:
            self._wake_receiver()

    def poll(self) -> Any:
        """Take the next deliverable item, control first, or return :data:`EMPTY`.

        Taking a data message makes room, which the first waiting sender's item takes at
        once (senders are served in order); with nothing queued, the first waiting
        sender's item is taken (an unbuffered mailbox's rendezvous)."""
        if self._ctrl:
            return self._ctrl.popleft()
        if (not self._size or self._paused) and (
            self._paused or not self._senders or not self._move_sender()
        ):
            return EMPTY
        prios = self._prios
        lane = self._lanes[prios[-1]]
        assert lane is not None
        item = lane.popleft()
        if not lane:
            prios.pop()
        size = self._size = self._size - 1
        self._received += 1
        if self._senders:
            self._serve_senders()
        if not size and self._closed and not self._sealed:
            self._wake_all_receivers()
        return item

    def _deliverable(self) -> bool:
        if self._ctrl:
            return True
        if self._paused:
            return False
        if self._size:
            return True
        # Unbuffered: a waiting sender's item is taken straight from it.
        return any(not s.waiter.done() and s.item is not _ROOM for s in self._senders or ())

    def _wake_receiver(self) -> None:
        """Something may be deliverable: wake the taker to look, else hand the first
        waiting receiver the next data message (it is that receiver's: nobody else can
        take it, as in anyio's streams), or wake it to look (control, or closed)."""
        taker = self._taker
        if taker is not None:
            self._taker = None
            if not taker.done():
                taker.set_result(None)
                return
        receivers = self._receivers
        while receivers:
            waiter = receivers.popleft()
            if not waiter.done():
                if self._size and not self._paused and not self._ctrl:
                    # A pair, so that a receiver cancelled before it runs puts it back
                    # in its place (_abandon_receiver).
                    waiter.set_result(self._take_next())
                else:
                    waiter.set_result(None)
                return

    def _wake_receivers(self) -> None:
        """Data was queued (or delivery resumed): each waiting receiver, up to one per
        message, is handed one (see :meth:`_wake_receiver`)."""
        while not self._paused and self._receiver_waits():
            if not self._size and not (self._senders and self._move_sender()):
                return  # nothing (more) to hand
            self._wake_receiver()

    def _take_next(self) -> tuple[Any, int]:
        """Remove the next data message for a receiver: ``(item, priority)``."""
        prios = self._prios
        priority = prios[-1]
        lane = self._lanes[priority]
        assert lane is not None
        item = lane.popleft()
        if not lane:
            prios.pop()
        self._size -= 1
        self._received += 1
        if self._senders:
            self._serve_senders()
        if not self._size and self._closed and not self._sealed:
            self._wake_all_receivers()
        return item, priority

    def _handoff(self, item: T) -> bool:
        """Hand ``item`` straight to the waiting taker; False if there is none.

        An actor's loop waits as the mailbox's single *taker* when nothing is
        deliverable; while it does (and the mailbox is neither paused nor closed)
        nothing is queued, so a new message can skip the queue without breaking the
        priority or FIFO order. It is counted as sent and received.
        """
        taker = self._taker
        if taker is None or self._paused or self._closed or item is None:
            return False
        self._taker = None
        if taker.done():
            return False
        taker.set_result(item)
        self._sent += 1
        self._received += 1
        return True

    def _abandon_receiver(self, waiter: Any) -> None:
        """A receiver's wait ended by an exception: pass on a wake-up it may have had."""
        kit = self._kit
        assert kit is not None
        if kit.woken(waiter):
            handed = woken_value(waiter)
            if type(handed) is tuple:  # its item: back in its place, or to the next one
                self._requeue(*handed)
            elif self._deliverable():
                self._wake_receiver()
        else:
            _remove(self._receivers, waiter)

    def _move_sender(self) -> bool:
        """Move the first waiting sender's item into the queue (its ``send`` is done)
        and return True; a :meth:`wait_room` met on the way is woken (it looks for room
        itself). False when no sender with an item waits."""
        senders = self._senders
        while senders:
            entry = senders.popleft()
            waiter = entry.waiter
            if waiter.done():
                continue
            if entry.item is _ROOM:
                waiter.set_result(None)
                continue
            self._enqueue(entry.item, entry.priority)
            waiter.set_result(_SENT)
            return True
        return False

    def _serve_senders(self) -> None:
        """Room appeared: waiting senders' items move in, first come first, while it
        lasts (so a later ``send_nowait`` finds the mailbox as full as before)."""
        while self._senders and self._size < self._capacity:
            if not self._move_sender():
                return

    def _drop(self, item: T, priority: int) -> None:
        self._dropped += 1
        by_priority = self._dropped_by_priority
        if by_priority is None:
            by_priority = self._dropped_by_priority = {}
        by_priority[priority] = by_priority.get(priority, 0) + 1
        if self._dropped - self._drops_checked >= _DROP_LOG_EVERY or self._dropped == 1:
            self._log_drops()  # the first drop, then at most once a second
        if self._on_drop is not None:
            self._on_drop(item)

    def _log_drops(self) -> None:
        """Warn about drops: the first, then at most once a second (the clock is read
        once per :data:`_DROP_LOG_EVERY` drops)."""
        dropped = self._drops_checked = self._dropped
        now = time.monotonic()
        if dropped > 1 and now - self._drops_logged_at < 1.0:
            return
        self._drops_logged_at = now
        _log.warning(
            "%s is full: its drop_oldest policy has dropped %d message(s) in all "
            "(%d since the last warning)",
            self._label(),
            dropped,
            dropped - self._drops_warned,
        )
        self._drops_warned = dropped

    def _offer_full(self, item: T, priority: int) -> None:
        """Apply the drop-oldest policy to a full mailbox (nobody waiting to receive)."""
        prios = self._prios
        if not prios or priority < prios[0]:
            # Below everything queued, or unbuffered (capacity 0, nothing to evict):
            # the newcomer itself is dropped.
            self._sent += 1
            self._drop(item, priority)
            return
        lowest = prios[0]
        lane = self._lanes[lowest]
        assert lane is not None
        victim = lane.popleft()
        if not lane:
            prios.pop(0)
        self._size -= 1
        self._enqueue(item, priority)
        self._drop(victim, lowest)

    def _full_error(self, accepted: int = 0) -> MailboxFull:
        policy = self._backpressure
        why = "" if policy is Backpressure.RAISE else " (send_nowait never waits)"
        return MailboxFull(
            f"{self._label()} is full ({self._capacity} messages) and its backpressure "
            f"policy is {policy.value!r}{why}",
            capacity=self._capacity,
            accepted=accepted,
        )

    def _closed_error(self) -> MailboxClosed:
        """What a sender meets on a closed mailbox."""
        if self._broken:
            return _MailboxBroken(
                f"{self._label()} is closed and its receiver is gone (its queue was discarded)"
            )
        return MailboxClosed(f"{self._label()} is closed")

    def _ended_error(self) -> MailboxClosed:
        """What a receiver meets on a closed mailbox with nothing left."""
        return MailboxClosed(f"{self._label()} is closed and drained")

    # -- sending ------------------------------------------------------------------------

    def send_nowait(self, item: T, priority: int = DEFAULT_PRIORITY) -> None:
        """Enqueue ``item`` without waiting (or hand it to a waiting receiver).

        When the mailbox has no room (see the module documentation: a waiting receiver
        is room, and waiting senders come first): ``"drop_oldest"`` makes room as
        documented, the other policies raise :class:`~pdc_core.MailboxFull` (an
        :class:`anyio.WouldBlock`; counted as ``rejected``).
        Raises :class:`~pdc_core.MailboxClosed` after :meth:`close` (an
        :class:`anyio.ClosedResourceError`, or :class:`anyio.BrokenResourceError` once the
        receiving side is gone).
        """
        if type(priority) is not int or not 0 <= priority <= 255:
            priority = check_priority(priority)
        if self._closed:
            raise self._closed_error()
        if self._size < self._capacity or self._has_room():
            self._push(item, priority)
        elif self._backpressure is Backpressure.DROP_OLDEST:
            self._offer_full(item, priority)
        else:
            self._rejected += 1
            raise self._full_error()

    async def send(self, item: T, priority: int = DEFAULT_PRIORITY) -> None:
        """Enqueue ``item``, applying the backpressure policy when the mailbox is full.

        With ``"block"`` this waits for room; waiting senders are served in the order
        they began to wait, and the receive that makes room moves the first one's item
        in at once (its ``send`` is then done, even if :meth:`close` follows).
        Cancelling the wait leaves the item unsent, unless a receive had moved it in
        already (the cancellation is then raised all the same, as by anyio's streams).
        Raises :class:`~pdc_core.MailboxClosed` if the mailbox is (or gets) closed
        before the item is enqueued: an :class:`anyio.ClosedResourceError`, or an
        :class:`anyio.BrokenResourceError` once the receiving side is gone (see the module
        documentation).
        """
        if type(priority) is not int or not 0 <= priority <= 255:
            priority = check_priority(priority)
        kit = self._kit or self._bind()
        if kit.cancel_called():  # a caller in a cancelled scope sends nothing
            await raise_cancelled()
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and (self._size >= CATCH_UP_AT or kit.turn_is_over()):
            await kit.checkpoint()
        if self._closed:
            raise self._closed_error()
        if self._size < self._capacity or self._has_room():
            self._push(item, priority)
            return
        await self._send_full(item, priority, kit)

    async def admit(self, item: T, priority: int = DEFAULT_PRIORITY) -> None:
        """:meth:`send` that a :meth:`seal`-ed mailbox lets in: how the actors of a
        draining nursery keep sending to each other. Backpressure applies as for
        :meth:`send`; raises :class:`~pdc_core.MailboxClosed` once closed for good. A
        caller already cancelled on entry sends nothing, and cancelling the wait for
        room leaves the item unsent."""
        if not self._sealed:
            await self.send(item, priority)
            return
        if (self._kit or self._bind()).cancel_called():
            await raise_cancelled()
        priority = check_priority(priority)
        if self._has_room():
            self._push(item, priority)
            return
        await self._send_full(item, priority, self._kit or self._bind())

    async def wait_room(self) -> None:
        """Wait until a :meth:`send` would not wait, without sending anything: there is
        room, the policy is not ``"block"``, or the mailbox is closed (then ``send``
        raises). A :meth:`send_nowait` or :meth:`offer` made right after, with no
        ``await`` between, takes the room; after an ``await``, another sender may have
        taken it (check again). How a mesh's ``broadcast`` waits for room in every member
        before it tells any. A caller already cancelled on entry gets its cancellation;
        a cancelled wait takes nothing."""
        kit = self._kit or self._bind()
        if kit.cancel_called():
            await raise_cancelled()
        if self._closed or self._backpressure is not Backpressure.BLOCK or self._has_room():
            return
        # Woken when room appeared, in line with the senders (those behind it in line
        # may take it before this caller looks: it checks again, as said above).
        await self._wait_sender(_ROOM, 0, kit)

    async def _send_full(self, item: T, priority: int, kit: Kit) -> None:
        """Apply the backpressure policy to an item that finds no room."""
        if self._backpressure is Backpressure.DROP_OLDEST:
            self._offer_full(item, priority)
            return
        if self._backpressure is Backpressure.RAISE:
            self._rejected += 1
            raise self._full_error()
        await self._wait_sender(item, priority, kit)

    def _check_loop(self, kit: Kit) -> None:
        """A mailbox waits with the event loop that first used it; any other is an error."""
        if kit is not current_kit():
            raise RuntimeError(
                f"{self._label()} belongs to the {kit.name} event loop that first used it; "
                "a mailbox (and an actor) cannot be used from another event loop"
            )

    async def _wait_sender(self, item: Any, priority: int, kit: Kit) -> None:
        """Wait in line as a sender until a receive moves ``item`` in (or, for
        :data:`_ROOM`, until there may be room: look again). Raises MailboxClosed once
        closed for good; a sender already waiting when the mailbox was sealed goes on
        waiting."""
        self._check_loop(kit)
        waiter = kit.waiter()
        entry = _Send(waiter, item, priority)
        if self._senders is None:
            self._senders = deque()
        self._senders.append(entry)
        try:
            result = await waiter
        except BaseException:
            if not kit.woken(waiter):
                _remove(self._senders, entry)
            raise
        if result is not _SENT and item is not _ROOM:
            raise self._closed_error()  # woken by close(): the item was not sent

    def send_many_nowait(self, items: Iterable[T], priority: int = DEFAULT_PRIORITY) -> int:
        """Enqueue as many of ``items`` as the policy allows without waiting.

        Returns how many were accepted. With ``"drop_oldest"`` all are accepted (some
        may be dropped, and counted); otherwise, if not all fit, the ones that fit are
        enqueued and :class:`~pdc_core.MailboxFull` is raised with ``accepted`` set.
        """
        priority = check_priority(priority)
        if self._closed:
            raise self._closed_error()
        batch = items if isinstance(items, Sequence) else list(items)
        accepted = self._push_many(batch, 0, priority)
        if accepted < len(batch):
            if self._backpressure is Backpressure.DROP_OLDEST:
                for item in batch[accepted:]:
                    self._offer_full(item, priority)
                return len(batch)
            self._rejected += len(batch) - accepted
            raise self._full_error(accepted)
        return accepted

    async def send_many(self, items: Iterable[T], priority: int = DEFAULT_PRIORITY) -> int:
        """Enqueue all of ``items`` at ``priority``, waking the receiver once per chunk.

        This is the fast path for bulk traffic. With ``"block"`` it waits for room
        whenever the mailbox fills (in line with the other senders), so memory stays
        bounded; if cancelled while waiting, the items before the wait were enqueued
        and the rest were not (the one it waited with too, if a receive had moved it in
        already). The other policies behave as :meth:`send_many_nowait`. Returns the
        number accepted.
        """
        priority = check_priority(priority)
        kit = self._kit or self._bind()
        await kit.checkpoint()
        if self._closed:
            raise self._closed_error()
        batch = items if isinstance(items, Sequence) else list(items)
        total = len(batch)
        done = self._push_many(batch, 0, priority)
        if done == total:
            return total
        if self._backpressure is Backpressure.DROP_OLDEST:
            for item in batch[done:]:
                self._offer_full(item, priority)
            return total
        if self._backpressure is Backpressure.RAISE:
            self._rejected += total - done
            raise self._full_error(done)
        while done < total:
            await self._wait_sender(batch[done], priority, kit)
            done = self._push_many(batch, done + 1, priority)
        return total

    def _push_many(self, batch: Sequence[T], start: int, priority: int) -> int:
        """Accept ``batch[start:]`` while there is room (waiting senders first: none go
        in while one waits); return the new start index."""
        if self._senders and any(not s.waiter.done() for s in self._senders):
            return start
        n_batch = len(batch)
        while start < n_batch and self._size >= self._capacity and self._has_room():
            self._push(batch[start], priority)  # unbuffered: to a waiting receiver
            start += 1
        room = self._capacity - self._size
        if room <= 0 or start >= n_batch:
            return start
        stop = min(n_batch, start + room)
        lane = self._lanes[priority]
        if lane is None:
            lane = self._new_lane(priority)
        if not lane:
            insort(self._prios, priority)
        if start == 0 and stop == n_batch:
            lane.extend(batch)
        else:
            lane.extend(batch[start:stop])  # not islice: that would skip `start` items
        n = stop - start
        size = self._size = self._size + n
        self._sent += n
        if size > self._peak:
            self._peak = size
        if (self._receivers or self._taker is not None) and not self._paused:
            self._wake_receivers()
        return stop

    def send_control(self, message: Control) -> None:
        """Enqueue a control message. Never blocks, never drops, never fails.

        Control messages are received before any data, even while paused or closed.
        """
        if not isinstance(message, Control):
            raise TypeError(f"control messages must be Control instances, got {message!r}")
        if self._ctrl is None:
            self._ctrl = deque()
        self._ctrl.append(message)
        self._control_sent += 1
        if self._receivers or self._taker is not None:
            self._wake_receiver()

    # -- receiving ----------------------------------------------------------------------

    def receive_nowait(self) -> T | Control:
        """Return the next control message, else the next data message, without waiting.

        Raises :class:`anyio.WouldBlock` when nothing is deliverable (empty, or only
        data while paused) and :class:`~pdc_core.MailboxClosed` (an
        :class:`anyio.EndOfStream`) when the mailbox is closed and holds nothing more to
        receive.
        """
        item = self.poll()
        if item is EMPTY:
            if self._closed and not self._sealed and not self._size:
                raise self._ended_error()
            raise WouldBlock
        result: T | Control = item
        return result

    async def receive(self, timeout: float | None = None) -> T | Control:
        """Return the next control message, else the highest-priority data message.

        Waits while nothing is deliverable. Raises :class:`~pdc_core.MessageTimeout`
        (a :class:`TimeoutError`) after ``timeout`` seconds, and
        :class:`~pdc_core.MailboxClosed` (an :class:`anyio.EndOfStream`) once the
        mailbox is closed and empty. A
        cancelled receive takes nothing from the mailbox.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        kit = self._kit or self._bind()
        if kit.cancel_called():  # a caller in a cancelled scope takes nothing
            await raise_cancelled()
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and kit.turn_is_over():
            await kit.checkpoint()
        item = self.poll()
        if item is EMPTY:
            item = await self._wait_receive(kit, timeout)
        result: T | Control = item
        return result

    # -- the fast path of single-consumer queues (a ring kernel's input and output) ------
    #
    # For queues that carry no control messages and have one consuming task at a time,
    # whose round trip is a few microseconds: each is one call, with no coroutine frame
    # where none is needed. Only these touch the queue from outside this package.

    @property
    def exhausted(self) -> bool:
        """Closed, with no data left to receive."""
        return self._closed and not self._sealed and not self._size

    def offer(self, item: T, priority: int) -> int:
        """Enqueue ``item`` now if it can go in without waiting: :data:`HANDED` when it
        went straight to the parked receiver (see :meth:`park_receiver`), else
        :data:`QUEUED`; ``0``, with nothing done, when the mailbox is closed or full or
        ``priority`` is not an int in 0..255 (then :meth:`send` says why, or waits).
        Both successes are true, so ``if mailbox.offer(...)`` reads as "accepted"."""
        if (
            self._size < self._capacity
            and type(priority) is int
            and 0 <= priority <= 255
            and not self._closed
        ):
            taker = self._taker
            if taker is not None and not self._paused and item is not None:
                # _handoff, inlined: this is every message's path to an idle actor.
                self._taker = None
                if not taker.done():
                    taker.set_result(item)
                    self._sent += 1
                    self._received += 1
                    return HANDED
            # _push, inlined: every tell to a busy actor comes this way.
            lane = self._lanes[priority]
            if lane is None:
                lane = self._new_lane(priority)
            if not lane:
                insort(self._prios, priority)
            lane.append(item)
            size = self._size = self._size + 1
            self._sent += 1
            if size > self._peak:
                self._peak = size
            if (self._receivers or self._taker is not None) and not self._paused:
                self._wake_receiver()
            return QUEUED
        return 0

    def deliverer(
        self,
        wrapped: frozenset[type],
        wrap: Callable[[Any], T],
        slow: Callable[[T, int, bool], Awaitable[None]],
    ) -> Callable[[Any, int], Awaitable[None] | None]:
        """A one-call send for a sender that completes without a coroutine when it can
        (a mailbox actor's ``tell``: its handle's ``_deliver``).

        ``deliver(item, priority)``, with ``priority`` already checked (an int in
        0..255): an ``item`` whose class is in ``wrapped`` is replaced by ``wrap(item)``;
        then the fairness rule of :meth:`send` applies (every :data:`TURN_CHECK_EVERY`-th
        operation of the loop, at the end of a turn or when :data:`CATCH_UP_AT` items
        wait, the sender must yield first): if so it returns ``slow(item, priority,
        True)``, the awaitable that yields and then sends. Otherwise :meth:`offer`:
        ``None`` once the item is in (queued, or handed to the parked receiver), else
        (closed or full) ``slow(item, priority, False)``.
        """
        bound = self._kit or self._bind()

        # What it reads comes in as defaults (one tuple) rather than closure cells, as in
        # _loop._cancel's check: measured 10-20 ns less a tell on asyncio.
        def deliver(
            item: Any,
            priority: int,
            mailbox: Mailbox[T] = self,
            kit: Kit = bound,
            wrapped: frozenset[type] = wrapped,
            wrap: Callable[[Any], T] = wrap,
            slow: Callable[[T, int, bool], Awaitable[None]] = slow,
        ) -> Awaitable[None] | None:
            if item.__class__ in wrapped:
                item = wrap(item)
            ops = kit.ops = kit.ops + 1
            if not ops % TURN_CHECK_EVERY and (mailbox._size >= CATCH_UP_AT or kit.turn_is_over()):
                return slow(item, priority, True)
            if mailbox._size < mailbox._capacity and not mailbox._closed:
                # offer()'s body (priority already checked), inlined: one Python frame
                # less on every tell (docs/benchmarks.md, issue 25/26 section).
                taker = mailbox._taker
                if taker is not None and not mailbox._paused and item is not None:
                    mailbox._taker = None
                    if not taker.done():
                        taker.set_result(item)
                        mailbox._sent += 1
                        mailbox._received += 1
                        return None
                lane = mailbox._lanes[priority]
                if lane is None:
                    lane = mailbox._new_lane(priority)
                if not lane:
                    insort(mailbox._prios, priority)
                lane.append(item)
                size = mailbox._size = mailbox._size + 1
                mailbox._sent += 1
                if size > mailbox._peak:
                    mailbox._peak = size
                if (mailbox._receivers or mailbox._taker is not None) and not mailbox._paused:
                    mailbox._wake_receiver()
                return None
            return slow(item, priority, False)

        return deliver

    def requeue(self, item: T, priority: int) -> None:
        """Put back, first in its priority, an item whose receiver was cancelled after it
        was handed over (counted as not received)."""
        self._requeue(item, priority)

    def count_undelivered(self) -> None:
        """An item taken from the mailbox never reached its receiver (it was cancelled
        and the item cannot go back): count it as discarded instead of received."""
        self._received -= 1
        self._discarded += 1

    def park_taker(self) -> Waiter | None:
        """Become the mailbox's single taker, waiting without a timeout.

        Returns the waiter to await: it resolves to an item handed over directly, or to
        ``None`` (look again with :meth:`poll` or :meth:`take`). Returns ``None`` instead
        when another task is the taker or the mailbox is closed. A wait that ends with an
        exception must call :meth:`release_taker`.
        """
        if self._taker is not None or self._closed:
            return None
        waiter = (self._kit or self._bind()).waiter()
        self._taker = waiter
        return waiter

    def poll_or_park(self) -> Any:
        """:meth:`poll`, and when nothing is deliverable :meth:`park_receiver`, in one
        call: the step of a single consumer's loop (an actor's).

        Returns the next item; or, having parked, the waiter to await (an object of the
        type the event loop's waiters have: a consumer that may also receive such
        objects as items must wrap them when they are sent); or :data:`EMPTY` once the
        mailbox is closed and has nothing left.
        """
        if self._ctrl:
            return self._ctrl.popleft()
        if self._size and not self._paused:
            # poll(), inlined: a busy actor takes every message this way.
            prios = self._prios
            lane = self._lanes[prios[-1]]
            assert lane is not None
            item = lane.popleft()
            if not lane:
                prios.pop()
            size = self._size = self._size - 1
            self._received += 1
            if self._senders:
                self._serve_senders()
            if not size and self._closed and not self._sealed:
                self._wake_all_receivers()
            return item
        if self._senders:  # unbuffered: take a waiting sender's item (or wake wait_room)
            item = self.poll()
            if item is not EMPTY:
                return item
        if self._closed and not self._sealed and not self._size:
            return EMPTY
        waiter = (self._kit or self._bind()).waiter()
        self._taker = waiter
        if self._sealed and self._on_starved is not None:
            self._on_starved()
        return waiter

    def park_receiver(self) -> Waiter | None:
        """Become the mailbox's single receiver until something arrives: the wait of an
        actor's serving loop, which is the only task receiving from its mailbox. Call
        it after :meth:`poll` found nothing.

        Returns the waiter to await: it resolves to an item handed over directly (see
        :meth:`offer`), or to ``None`` (look again with :meth:`poll`); or returns
        ``None`` when the mailbox is closed and has nothing left (:attr:`exhausted`).
        Unlike :meth:`park_taker` it parks on a :meth:`seal`-ed mailbox too, and then
        calls its ``on_starved`` (a receiver waits on an empty mailbox: the draining
        nursery may be quiescent now). A wait that ends with an exception must call
        :meth:`release_taker`.
        """
        if self._closed and not self._sealed and not self._size and not self._ctrl:
            return None
        waiter = (self._kit or self._bind()).waiter()
        self._taker = waiter
        if self._sealed and self._on_starved is not None:
            self._on_starved()
        return waiter

    def release_taker(self, waiter: Waiter) -> Any:
        """A taker's wait ended early: free the taker slot and return the item handed
        to it meanwhile (``None`` if none), which the caller must not lose."""
        if self._taker is waiter:
            self._taker = None
        handed = woken_value(waiter)
        return None if handed is TIMED_OUT else handed

    async def take(
        self, timeout: float | None, abandon: Callable[[Any, BaseException], None]
    ) -> Any:
        """Wait for the next item, as the single taker (see :meth:`_handoff`) or, while
        another task is the taker, in line behind it.

        Returns the item, :data:`TIMED_OUT` after ``timeout`` seconds, or :data:`EMPTY`
        once the mailbox is closed and empty. A wait that ends with an exception (a
        cancellation included) calls ``abandon(handed, exc)`` with the item handed
        meanwhile (or ``None``) before the
        exception propagates. Only for mailboxes that carry no control messages and are
        not paused while taken from.
        """
        kit = self._kit or self._bind()
        if self._taker is not None:
            try:
                return await self._wait_receive(kit, timeout)
            except MailboxClosed:
                return EMPTY
            except MessageTimeout:
                return TIMED_OUT
            except BaseException as exc:
                abandon(None, exc)
                raise
        deadline = None if timeout is None else kit.now() + timeout
        remaining = timeout
        while True:
            if self._closed and not self._sealed and not self._size:
                return EMPTY
            waiter = kit.waiter()
            self._taker = waiter
            if remaining is not None:
                kit.arm(waiter, remaining)
            try:
                result = await waiter
            except BaseException as exc:
                abandon(self.release_taker(waiter), exc)
                raise
            if result is TIMED_OUT:
                if self._taker is waiter:
                    self._taker = None
                return TIMED_OUT
            if result is not None:
                return result
            item = self.poll()
            if item is not EMPTY:
                return item
            if deadline is not None:
                remaining = max(0.0, deadline - kit.now())

    async def _wait_receive(self, kit: Kit, timeout: float | None) -> Any:
        self._check_loop(kit)
        deadline = None if timeout is None else kit.now() + timeout
        remaining = timeout
        while True:
            if self._senders:  # unbuffered: take a waiting sender's item (or wake wait_room)
                item = self.poll()
                if item is not EMPTY:
                    return item
            if self._closed and not self._sealed and not self._size and not self._ctrl:
                raise self._ended_error()
            waiter = kit.waiter()
            if self._receivers is None:
                self._receivers = deque()
            self._receivers.append(waiter)
            if self._sealed and self._on_starved is not None and not self._size:
                self._on_starved()
            if remaining is not None:
                kit.arm(waiter, remaining)
            try:
                result = await waiter
            except BaseException:
                self._abandon_receiver(waiter)
                raise
            if result is TIMED_OUT:
                _remove(self._receivers, waiter)
                raise MessageTimeout(f"nothing received from {self._label()} within {timeout} s")
            if type(result) is tuple:  # handed to this receiver: (item, priority)
                return result[0]
            item = self.poll()
            if item is not EMPTY:
                return item
            if deadline is not None:
                remaining = deadline - kit.now()

    def receive_many_nowait(self, max_items: int) -> list[T | Control]:
        """Take up to ``max_items`` deliverable items (control first) without waiting.

        Raises :class:`ValueError` when ``max_items`` is less than 1, as :meth:`receive_many`.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        out: list[T | Control] = []
        ctrl = self._ctrl
        while ctrl and len(out) < max_items:
            out.append(ctrl.popleft())
        if not self._size and self._senders and not self._paused:
            self._move_sender()  # unbuffered: the first waiting sender's item
        if self._paused or not self._size:
            return out
        prios = self._prios
        lanes = self._lanes
        taken = 0
        want = max_items - len(out)
        while prios and taken < want:
            lane = lanes[prios[-1]]
            assert lane is not None
            n = min(len(lane), want - taken)
            if n == len(lane):
                out.extend(lane)
                lane.clear()
                prios.pop()
            else:
                popleft = lane.popleft
                out.extend([popleft() for _ in range(n)])
            taken += n
        if taken:
            self._size -= taken
            self._received += taken
            if self._senders:
                self._serve_senders()
            if not self._size and self._closed and not self._sealed:
                self._wake_all_receivers()
        return out

    async def receive_many(self, max_items: int, timeout: float | None = None) -> list[T | Control]:
        """Wait for at least one deliverable item, then take up to ``max_items``.

        Same order, timeout and closing rules as :meth:`receive`; ``max_items`` below 1
        is a :class:`ValueError`. A caller already cancelled on entry takes nothing, and
        a cancelled wait takes nothing from the mailbox.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        if timeout is not None:
            timeout = check_timeout(timeout)
        kit = self._kit or self._bind()
        if kit.cancel_called():  # a caller in a cancelled scope takes nothing
            await raise_cancelled()
        ops = kit.ops = kit.ops + 1
        if not ops % TURN_CHECK_EVERY and kit.turn_is_over():
            await kit.checkpoint()
        if not self._deliverable():
            first = await self._wait_receive(kit, timeout)
            rest = self.receive_many_nowait(max_items - 1) if max_items > 1 else []
            return [first, *rest]
        return self.receive_many_nowait(max_items)

    # ``async for item in mailbox`` is anyio's: it ends on EndOfStream (closed, drained).

    # -- state --------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop delivering data (it stays queued); control messages are still delivered."""
        self._paused = True

    def resume(self) -> None:
        """Resume delivering data."""
        if not self._paused:
            return
        self._paused = False
        self._wake_receivers()

    def close(self) -> None:
        """Refuse new data from now on. Queued data can still be received.

        This closes the mailbox's sending side: senders, blocked ones included, raise
        :class:`~pdc_core.MailboxClosed` (an :class:`anyio.ClosedResourceError`); once
        the mailbox is empty, receivers raise it too (an :class:`anyio.EndOfStream`).
        Control messages are still accepted. Idempotent; it also ends a :meth:`seal`.
        """
        if self._closed and not self._sealed:
            return
        self._closed = True
        self._sealed = False
        self._on_starved = None
        senders = self._senders
        while senders:  # their items were not moved in: each send raises
            waiter = senders.popleft().waiter
            if not waiter.done():
                waiter.set_result(None)
        if not self._size:
            self._wake_all_receivers()

    async def aclose(self) -> None:
        """:meth:`close`, as :class:`anyio.abc.AsyncResource` spells it (and leaving
        ``async with mailbox:`` does): the sending side closes, queued data can still be
        received, and receivers then meet :class:`anyio.EndOfStream`. A checkpoint, as
        trio's channels' ``aclose``: it closes, then raises a pending cancellation."""
        self.close()
        await full_checkpoint(self._kit or current_kit())

    async def __aenter__(self) -> Self:
        """``async with mailbox:`` (closed on the way out); a checkpoint."""
        await full_checkpoint(self._kit or current_kit())
        return self

    def __enter__(self) -> Self:
        """``with mailbox:`` (closed on the way out, as :meth:`close`), as anyio 4's
        memory streams allow in synchronous code."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def seal(self, on_starved: Callable[[], None]) -> None:
        """Refuse new data from :meth:`send` (it raises MailboxClosed), but not from
        :meth:`admit`, and keep receivers waiting when the mailbox is empty instead of
        ending them: the state of a draining nursery's mailboxes. A paused mailbox is
        resumed. ``on_starved()`` is called whenever a receiver starts waiting on the
        empty mailbox (see :meth:`starved`). :meth:`close` ends the seal.
        """
        if self._closed:
            return
        self._closed = self._sealed = True
        self._on_starved = on_starved
        self.resume()

    @property
    def sealed(self) -> bool:
        """Whether the mailbox is :meth:`seal`-ed (and not closed for good yet)."""
        return self._sealed

    def starved(self) -> bool:
        """Nothing is queued and a receiver waits, not yet woken."""
        return not (self._size or self._ctrl) and self._receiver_waits()

    def discard(self) -> list[T]:
        """Remove and return every queued data message, counting them as discarded.

        ``on_drop`` is *not* called: the caller decides what the discarded messages
        mean. Blocked senders are woken, since there is room again. On a closed mailbox
        this also marks its receiving side gone: from then on senders meet an
        :class:`anyio.BrokenResourceError` (still a :class:`~pdc_core.MailboxClosed`).
        """
        out: list[T] = []
        for priority in reversed(self._prios):
            lane = self._lanes[priority]
            assert lane is not None
            out.extend(lane)
            lane.clear()
        self._prios.clear()
        self._size = 0
        self._discarded += len(out)
        if self._closed and not self._sealed:
            self._broken = True  # closed and emptied for good: the receiving side is gone
        if self._senders:
            self._serve_senders()
        if self._closed:
            self._wake_all_receivers()
        return out
