"""The single-consumer lane of a mailbox: the actor loop's, the seed facade's, pdc-ray's.

The floor over :class:`~._mailbox_policy.MailboxPolicy`, beside the anyio stream (see
:mod:`._mailbox_state` for the floors). For queues that carry no control messages and
have one consuming task at a time, whose round trip is a few microseconds: each step is
one call, with no coroutine frame where none is needed, and the busiest ones
(:meth:`MailboxLane.offer`, the tell returned by :meth:`MailboxLane.deliverer`,
:meth:`MailboxLane.poll_or_park`) inline the policy's steps on the state's slots rather
than call them. They decide as the policy does: ``_size < _capacity`` is room, and
anything else goes to the slow path that asks :meth:`~._mailbox_policy.MailboxPolicy._has_room`.
Only these methods, ``poll`` and the stream's touch the queue from outside this package.
"""

# Timeouts are parameters, not cancel scopes, on purpose (see the _mailbox docstring).
# ruff: noqa: ASYNC109

from __future__ import annotations

from bisect import insort
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._exceptions import MailboxClosed, MessageTimeout
from .._loop import TIMED_OUT, TURN_CHECK_EVERY, Kit, Waiter, woken_value
from ._mailbox_policy import MailboxPolicy
from ._mailbox_state import CATCH_UP_AT, EMPTY, HANDED, QUEUED

__all__ = ["MailboxLane"]

T = TypeVar("T")


class MailboxLane(MailboxPolicy[T]):
    """The single-consumer steps of a mailbox (see the module documentation); methods
    only, over the state's slots."""

    __slots__ = ()

    @property
    def exhausted(self) -> bool:
        """Closed, with no data left to receive."""
        return self._closed and not self._sealed and not self._size

    @property
    def receiver_waits(self) -> bool:
        """Whether a receiver waits with nothing handed to it yet: one that was handed
        a message holds it, neither queued nor received by its task, until it runs."""
        return self._receiver_waits()

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
                # Straight to the parked taker: every message's path to an idle actor.
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
            mailbox: MailboxLane[T] = self,
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
        """Wait for the next item, as the single taker (see :meth:`park_taker`) or, while
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
