"""The anyio object stream of a mailbox: sending, receiving, closing.

The floor over :class:`~._mailbox_policy.MailboxPolicy` (see :mod:`._mailbox_state`
for the floors) that makes a mailbox an :class:`anyio.abc.ObjectSendStream` and an
:class:`anyio.abc.ObjectReceiveStream`: ``send``/``send_nowait``/``send_many``,
``receive``/``receive_nowait``/``receive_many``, the control lane's ``send_control``,
and the mailbox's states (``pause``, ``close``, ``aclose``, ``seal``, ``discard``).
Each operation checks its arguments, then asks the policy; the guarantees are those of
:class:`~pdc_core._actors._mailbox.Mailbox`.
"""

# Timeouts are parameters, not cancel scopes, on purpose (see the _mailbox docstring).
# ruff: noqa: ASYNC109

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Self, TypeVar

from anyio import WouldBlock
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from .._loop import TURN_CHECK_EVERY, Kit, check_timeout, current_kit, full_checkpoint
from .._loop._cancel import raise_cancelled
from ._mailbox_policy import MailboxPolicy
from ._mailbox_state import (
    _ROOM,
    CATCH_UP_AT,
    DEFAULT_PRIORITY,
    EMPTY,
    Backpressure,
    Control,
    check_priority,
)

__all__ = ["MailboxStream"]

T = TypeVar("T")


class MailboxStream(MailboxPolicy[T], ObjectSendStream[T], ObjectReceiveStream["T | Control"]):
    """The anyio stream face of a mailbox (see the module documentation); methods only,
    over the state's slots."""

    __slots__ = ()

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
