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

**Layout.** :class:`Mailbox` is built in floors, each a class of methods over one set of
slots, so a message costs no extra attribute hop: ``_mailbox_state`` declares every
field once (what it holds, its legal values, which floor changes it);
``_mailbox_policy`` decides who gets in and who gets what (the full-mailbox decision,
``_has_room``, written once; the backpressure policies; the hand-over between waiting
senders and receivers); ``_mailbox_stream`` is the anyio object stream and
``_mailbox_lane`` the single-consumer lane of an actor's loop, the seed facade and
pdc-ray. Every name of this module's ``__all__`` is importable from it as before.
"""

from __future__ import annotations

from typing import TypeVar

from ._mailbox_lane import MailboxLane
from ._mailbox_state import (
    CATCH_UP_AT,
    DEFAULT_CAPACITY,
    DEFAULT_PRIORITY,
    EMPTY,
    HANDED,
    QUEUED,
    Backpressure,
    Control,
    MailboxStatistics,
    check_priority,
)
from ._mailbox_stream import MailboxStream

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


class Mailbox(MailboxLane[T], MailboxStream[T]):
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

    __slots__ = ()
