"""The state every part of a :class:`~pdc_core._actors._mailbox.Mailbox` shares, declared once.

A mailbox is one object built in floors, each a class over the one below, all sharing
the slots declared here (so a message costs no extra attribute hop, whichever floor
handles it):

1. this module: the values a mailbox is made of (:class:`Backpressure`,
   :class:`Control`, :class:`MailboxStatistics`, the constants) and
   :class:`MailboxState`, its fields with what each holds, which values are legal and
   which floor changes it, plus the reads that change nothing (properties,
   :meth:`MailboxState.statistics`);
2. :mod:`._mailbox_policy`: who gets in and who gets what - the full-mailbox decision
   (``_has_room``, written once), the backpressure policies, and the hand-over of items
   and room between waiting senders and receivers, as anyio's memory streams do;
3. :mod:`._mailbox_stream` (the anyio object stream: ``send``, ``receive``, closing)
   and :mod:`._mailbox_lane` (the single-consumer lane of an actor's loop, the seed
   facade's queues, pdc-ray), side by side over the policy;
4. :mod:`._mailbox`: :class:`~pdc_core._actors._mailbox.Mailbox`, both of them, and
   the guarantees.

Only these five modules read a mailbox's fields (a test holds it).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from anyio import BrokenResourceError

from .._exceptions import MailboxClosed
from .._loop import Kit, check_count, current_kit, strict_int

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
    "MailboxState",
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


class MailboxState(Generic[T]):
    """The fields of a mailbox, declared once, and the reads that change nothing.

    Each field's entry says what it holds, which values are legal, and which floor
    changes it ("policy": :mod:`._mailbox_policy`, "stream": :mod:`._mailbox_stream`,
    "lane": :mod:`._mailbox_lane`). The floors above add methods only (``__slots__ =
    ()``), so a mailbox is one slotted object however it is built.

    Invariants between the fields, kept by every method that returns:

    * ``_size == sum(len(_lanes[p]) for p in _prios)`` and ``_prios`` lists exactly the
      priorities whose lane is non-empty, ascending;
    * ``_sent == _received + _dropped + _discarded + _size`` (the statistics' rule);
    * while a receiver waits un-woken (``_taker`` or in ``_receivers``) and the mailbox is
      not paused, nothing deliverable is queued: a new item is handed to it at once;
    * while a sender waits un-woken in ``_senders`` with an item, the queue is full
      (``_size >= _capacity``), so its item moves in at the first receive.
    """

    __slots__ = {  # noqa: RUF023 - in the order of the class documentation's floors
        # -- set once, at construction ----------------------------------------------
        "_capacity": "Most data messages queued: an int >= 0 (0: unbuffered). Fixed.",
        "_backpressure": "The Backpressure policy applied when full. Fixed.",
        "_name": "The name in error messages and repr, or None. Fixed.",
        "_on_drop": "Called with each item drop_oldest drops, or None. Set by the owner.",
        "_kit": (
            "The event loop the mailbox belongs to, or None until first used (policy, "
            "stream and lane set it once, through _bind)."
        ),
        # -- the queue (policy; the lane's offer/deliverer and the stream's bulk paths
        #    inline the policy's steps) ---------------------------------------------
        "_lanes": (
            "A deque of data items per priority 0..255 (None where never used); the "
            "shared, never-written _NO_LANES until the first item arrives."
        ),
        "_prios": (
            "The priorities whose lane is non-empty, ascending (the highest, last, is "
            "served first); the shared empty _NO_PRIORITIES until the first item."
        ),
        "_size": "Data items queued: 0.._capacity (capacity + 1 while a requeue waits).",
        "_ctrl": "Queued Control messages, or None until the first (stream: send_control).",
        # -- who waits --------------------------------------------------------------
        "_receivers": (
            "Waiters of tasks waiting in receive/receive_many/take, first first, or None "
            "until the first. A waiter is resolved with None (look again) or, handed its "
            "item, with (item, priority); done waiters may linger until popped (policy)."
        ),
        "_taker": (
            "The single consumer's waiter while it is parked (lane: park_taker, "
            "park_receiver, poll_or_park, take), else None; resolved with the item "
            "handed to it or with None (look again). Cleared by whoever resolves it."
        ),
        "_senders": (
            "_Send entries of tasks waiting for room, first first, or None until the "
            "first; a resolved (done) entry may linger until popped. Their items are "
            "not counted in _size until moved in (policy: _move_sender)."
        ),
        # -- the state machine: open -> (paused <-> open) -> sealed -> closed -> broken
        "_paused": "True while data delivery is paused (stream: pause/resume; seal resumes).",
        "_closed": "True once sends are refused: after seal or close (stream). Never reset.",
        "_sealed": (
            "True while sealed: _closed is True too, admit still lets data in and "
            "receivers wait on empty instead of ending (stream: seal; close clears it)."
        ),
        "_broken": (
            "True once closed and discarded: the receiving side is gone, senders get "
            "BrokenResourceError (stream: discard). Implies _closed and not _sealed."
        ),
        "_on_starved": "Called when a receiver waits on a sealed, empty mailbox, or None.",
        # -- the counters of statistics() ------------------------------------------
        "_sent": "Data items accepted (dropped ones included): only grows, but requeue.",
        "_received": "Data items handed to a receiver (a requeue takes one back).",
        "_dropped": "Data items dropped by drop_oldest (policy: _drop).",
        "_dropped_by_priority": "_dropped by priority, or None until the first drop.",
        "_rejected": "Data items refused with MailboxFull under the raise policy.",
        "_discarded": "Data items removed by discard or counted undelivered (lane).",
        "_control_sent": "Control messages sent (stream: send_control).",
        "_peak": "The highest _size seen.",
        # -- the drop_oldest warning's rate limit (policy: _log_drops) ---------------
        "_drops_checked": "_dropped when the clock was last read.",
        "_drops_warned": "_dropped at the last warning.",
        "_drops_logged_at": "time.monotonic() of the last warning (0.0: none yet).",
    }

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
        self._lanes: list[deque[T] | None] = _NO_LANES
        self._prios: list[int] = _NO_PRIORITIES
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
