"""The policy of a mailbox: who gets in, and who gets what.

The floor above :class:`~._mailbox_state.MailboxState` (see that module for the
floors). It holds every decision the anyio stream and the single-consumer lane share,
written once:

* **the full-mailbox decision**, :meth:`MailboxPolicy._has_room`: room is a free place
  in the queue or, as in anyio's memory streams, a receiver waiting for the message
  (the only room an unbuffered mailbox has). The fast paths (``offer``, a tell's
  ``deliverer``, ``send`` and ``send_nowait``) test ``_size < _capacity`` first, which
  implies room, and ask ``_has_room`` only when that fails;
* **the backpressure policies** for an item that finds no room: ``"drop_oldest"``
  evicts (:meth:`MailboxPolicy._offer_full`, every drop counted and logged at most once
  a second), ``"raise"`` refuses (:meth:`MailboxPolicy._full_error`), ``"block"`` waits
  in line (:meth:`MailboxPolicy._wait_sender`);
* **the hand-over**, as anyio's streams do it: an item sent while a receiver waits is
  that receiver's (handed as ``(item, priority)``, put back in its place if the
  receiver is cancelled before it runs); the receive that makes room moves the first
  waiting sender's item in at once, so senders are served in order and a later
  ``send_nowait`` finds the mailbox as full as before; a send that was handed room
  completes even if ``close()`` follows.

Nothing here is public; :class:`~pdc_core._actors._mailbox.Mailbox` documents the
behaviour.
"""

# Timeouts are parameters, not cancel scopes, on purpose (see the _mailbox docstring).
# ruff: noqa: ASYNC109

from __future__ import annotations

import logging
import time
from bisect import insort
from collections import deque
from typing import Any, Final, TypeVar

from .._exceptions import MailboxClosed, MailboxFull, MessageTimeout
from .._loop import TIMED_OUT, Kit, current_kit, woken_value
from ._mailbox_state import (
    _NO_LANES,
    _ROOM,
    _SENT,
    EMPTY,
    Backpressure,
    MailboxState,
    _MailboxBroken,
    _remove,
    _Send,
)

__all__ = ["MailboxPolicy"]

T = TypeVar("T")

#: Drops under the drop_oldest policy are logged once, then once per this many.
_DROP_LOG_EVERY: Final = 1000
_log = logging.getLogger("pdc.mailbox")


class MailboxPolicy(MailboxState[T]):
    """Admission, the backpressure policies and the hand-over (see the module
    documentation); methods only, over the state's slots."""

    __slots__ = ()

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
