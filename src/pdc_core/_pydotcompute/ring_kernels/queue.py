"""Body of PyDotCompute\'s :mod:`pdc_core.ring_kernels.queue`; see its docstring."""

# Timeouts are parameters here, as in PyDotCompute (see _mailbox for why not scopes).
# ruff: noqa: ASYNC109

from __future__ import annotations

import enum
import sys
from typing import Generic, TypeVar, cast

import anyio
import anyio.lowlevel

from pdc_core import Backpressure, Mailbox, MailboxFull, MessageTimeout
from pdc_core.lowlevel import DEFAULT_PRIORITY, check_timeout, message_priority, strict_int

__all__ = ["BackpressureStrategy", "MessageQueue"]

_T = TypeVar("_T")


class BackpressureStrategy(enum.Enum):
    """PyDotCompute's names of pdc's :class:`~pdc_core.Backpressure` policies."""

    #: Wait for room (:attr:`Backpressure.BLOCK <pdc_core.Backpressure.BLOCK>`).
    BLOCK = Backpressure.BLOCK
    #: Raise ``QueueFullError`` (:attr:`Backpressure.RAISE <pdc_core.Backpressure.RAISE>`).
    REJECT = Backpressure.RAISE
    #: Evict to make room (:attr:`Backpressure.DROP_OLDEST
    #: <pdc_core.Backpressure.DROP_OLDEST>`).
    DROP_OLDEST = Backpressure.DROP_OLDEST


class MessageQueue(Generic[_T]):
    """A :class:`~pdc_core.Mailbox` under PyDotCompute's queue API (see the module)."""

    def __init__(
        self,
        maxsize: int = 4096,
        *,
        backpressure: BackpressureStrategy = BackpressureStrategy.BLOCK,
        use_priority: bool = True,
        kernel_id: str = "",
    ) -> None:
        # The caller's name in the error (the mailbox's would say "capacity").
        maxsize = self._maxsize = strict_int(maxsize, "maxsize")
        self._backpressure = BackpressureStrategy(backpressure)
        self._use_priority = use_priority
        self._kernel_id = kernel_id
        # maxsize 0 is "unbounded" in PyDotCompute (as in asyncio.Queue).
        capacity = maxsize if maxsize > 0 else sys.maxsize
        self._mailbox: Mailbox[_T] = Mailbox(
            capacity, backpressure=self._backpressure.value, name=kernel_id or None
        )

    def _priority(self, message: _T) -> int:
        return message_priority(message) if self._use_priority else DEFAULT_PRIORITY

    @property
    def maxsize(self) -> int:
        """The most messages queued (0: unbounded)."""
        return self._maxsize

    @property
    def qsize(self) -> int:
        """The messages queued now."""
        return len(self._mailbox)

    @property
    def empty(self) -> bool:
        """Whether no message is queued."""
        return not len(self._mailbox)

    @property
    def full(self) -> bool:
        """Whether the queue holds ``maxsize`` messages."""
        return 0 < self._maxsize <= len(self._mailbox)

    async def put(self, message: _T, *, timeout: float | None = None) -> bool:
        """Enqueue ``message`` under the backpressure policy; always ``True``.

        Raises ``QueueFullError`` (:class:`~pdc_core.MailboxFull`) when full under
        ``REJECT``, and ``QueueTimeoutError`` (:class:`~pdc_core.MessageTimeout`) when
        a blocked put found no room within ``timeout`` seconds; a ``timeout`` of zero
        or less means "now" (enqueued when there is room). A cancelled or timed-out put
        enqueues nothing (as the mailbox's ``send``).
        """
        seconds = check_timeout(timeout)  # NaN or a bool: an error naming timeout
        priority = self._priority(message)
        if seconds is None:
            await self._mailbox.send(message, priority)
            return True
        await anyio.lowlevel.checkpoint()
        if not self.full or self._backpressure is not BackpressureStrategy.BLOCK:
            # Room, or a policy that never waits: enqueued now, whatever the timeout (a
            # scope of zero seconds would cancel the send before it looked for room).
            self._mailbox.send_nowait(message, priority)
            return True
        with anyio.move_on_after(seconds) as scope:
            await self._mailbox.send(message, priority)
        if scope.cancelled_caught:
            raise MessageTimeout(f"queue {self._kernel_id!r} had no room within {timeout} s")
        return True

    async def get(self, *, timeout: float | None = None) -> _T:
        """The next message (highest priority first); ``QueueTimeoutError`` after
        ``timeout`` seconds without one. A cancelled get takes nothing."""
        # No control message is ever sent to this mailbox: what it returns is data.
        return cast(_T, await self._mailbox.receive(timeout))

    def get_nowait(self) -> _T | None:
        """The next message, or ``None`` when the queue is empty."""
        try:
            return cast(_T, self._mailbox.receive_nowait())
        except anyio.WouldBlock:
            return None

    def put_nowait(self, message: _T) -> bool:
        """Enqueue ``message`` without waiting; ``False`` when full (and not dropping)."""
        try:
            self._mailbox.send_nowait(message, self._priority(message))
        except MailboxFull:
            return False
        return True

    def clear(self) -> int:
        """Remove every queued message (counted as discarded); how many there were."""
        return len(self._mailbox.discard())

    def get_stats(self) -> dict[str, int]:
        """PyDotCompute's counters, read from the mailbox's statistics."""
        stats = self._mailbox.statistics()
        return {
            "current_size": stats.depth,
            "max_size": self._maxsize,
            "total_enqueued": stats.sent,
            "total_dequeued": stats.received,
            "total_dropped": stats.dropped,
        }

    def __len__(self) -> int:
        return len(self._mailbox)

    def __repr__(self) -> str:
        return (
            f"MessageQueue(size={self.qsize}/{self._maxsize}, priority={self._use_priority}, "
            f"backpressure={self._backpressure.name})"
        )
