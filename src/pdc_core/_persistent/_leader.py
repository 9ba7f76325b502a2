"""The leader of a persistent-kernel session: one waiting task watches the ring.

The session never blocks the event loop and never spins in a thread. One waiting task
at a time (the *leader*) pumps the ring through the :class:`~.ReplyRouter` and waits
through the kernel's :class:`~pdc_core.backend.HostWaiter` (or spins on the reply index
first, with ``wait="spin"``); every other waiting task (a *follower*) sleeps on the
event loop's cheapest waiter until the leader sees what it waits for, and one of them
is promoted when the leader leaves. A *watcher* (an actor's serving loop) never leads:
it pumps only while nobody leads, backing off.

Guarantees: while any task waits, one of them leads (a cancelled leader, or a promoted
follower that is cancelled instead of leading, promotes the next); every waiter's
predicate is looked at again after each pump that moved something and after
:meth:`Leader.notify_changed`; a spinning leader lets the event loop run at least every
:data:`SPIN_YIELD_EVERY` seconds. The leader calls the router only; the session calls
both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, Literal

import anyio.lowlevel

from .._backend._resident import HostWaiter
from .._loop import current_kit, wake
from ._router import ReplyRouter

__all__ = ["DEFAULT_SPIN_LIMIT", "SPIN_YIELD_EVERY", "Leader", "ReplyWait"]

#: How a caller waits for replies (see :class:`~pdc_core.PersistentKernelSession`).
ReplyWait = Literal["sleep", "spin"]

#: Default ``spin_limit``: seconds a spinning caller looks at the reply index before it
#: sleeps in the event loop.
DEFAULT_SPIN_LIMIT: Final = 100e-6

#: The longest a spinning caller keeps the event loop from running other tasks, seconds.
SPIN_YIELD_EVERY: Final = 0.001

#: Back-off bounds of :meth:`Leader.watch_until`'s pumping, seconds.
_WATCH_MIN: Final = 0.0005
_WATCH_MAX: Final = 0.02


class _Follower:
    """A task waiting in :meth:`Leader.wait_until` while another leads.

    It sleeps on the event loop's cheapest waiter (see ``_mailbox.Kit``): an
    ``anyio.Event`` costs more than the rest of a CPU-backend round trip's wake-up.
    """

    __slots__ = ("predicate", "waiter")

    def __init__(self, predicate: Callable[[], bool]) -> None:
        self.predicate = predicate
        self.waiter = current_kit().waiter()


class Leader:
    """Leader election, followers, watchers and spinning for one session's ring.

    Driven from the session's event loop only. Its state, by field: who changes it
    and which values are legal.
    """

    __slots__ = (
        "_ring",
        "_router",
        "_waiter",
        "followers",
        "leading",
        "spin_limit",
        "wait",
        "watchers",
        "yielded_at",
    )

    def __init__(
        self, router: ReplyRouter, waiter: HostWaiter, wait: ReplyWait, spin_limit: float
    ) -> None:
        self._router = router  # pumped by the leader and by a watcher while nobody leads
        self._ring = router.ring
        self._waiter = waiter  # the kernel's; closed by the session once it is released
        #: How a caller waits for replies, ``"sleep"`` or ``"spin"``; the session's
        #: ``wait`` (which may change it between calls).
        self.wait: ReplyWait = wait
        #: Seconds a spinning caller looks at the reply index (> 0, ``inf`` for no bound).
        self.spin_limit = spin_limit
        #: When the leader last let the event loop run (``perf_counter``): only grows,
        #: set by a spinning leader after it yields.
        self.yielded_at = 0.0
        #: True while a task is inside :meth:`_lead`: set and cleared by that task only
        #: (in :meth:`wait_until`); at most one task leads.
        self.leading = False
        #: Tasks waiting while another leads, in arrival order: each adds and removes
        #: itself; the leader wakes those whose predicate holds, and one on promotion.
        self.followers: list[_Follower] = []
        #: Kit waiters of tasks in :meth:`watch_until`: each adds and removes its own;
        #: :meth:`notify_changed` wakes them all.
        self.watchers: list[Any] = []

    def _satisfied(self, predicate: Callable[[], bool]) -> bool:
        return self._router.final or predicate()

    def pump(self) -> bool:
        """:meth:`ReplyRouter.pump`, telling every waiter when the kernel has finished
        (their predicates hold now). Whether anything moved."""
        router = self._router
        if not router.pump():
            return False
        if router.final:  # it has just finished: whoever waits, leader or not, looks again
            self.notify_changed()
        return True

    def wake_followers(self) -> None:
        """Wake the followers whose predicate holds now."""
        for follower in self.followers:
            if not follower.waiter.done() and self._satisfied(follower.predicate):
                wake(follower.waiter)

    def notify_changed(self) -> None:
        """Host-side state the waiters' predicates read has changed: every follower
        whose predicate holds and every watcher wakes, and the leader looks again."""
        if self.followers:
            self.wake_followers()
        for watcher in self.watchers:
            wake(watcher)
        if self.leading:
            self._waiter.kick()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds or the kernel has finished, leading the ring
        if nobody does (see the module documentation). Not a checkpoint by itself."""
        while True:
            if not self.leading:
                self.leading = True
                try:
                    await self._lead(predicate)  # it looks at the ring before it waits
                finally:
                    self.leading = False
                    self._promote()
                return
            if self.pump():
                self.wake_followers()
            if self._satisfied(predicate):
                return
            follower = _Follower(predicate)
            self.followers.append(follower)
            try:
                await follower.waiter
            finally:
                self.followers.remove(follower)
                if not self.leading:
                    # It may have been promoted and be leaving (cancelled) instead of
                    # leading: never leave the others without a leader.
                    self._promote()

    async def watch_until(self, predicate: Callable[[], bool]) -> None:
        """Wait as a watcher (never leading) until ``predicate()`` holds or the kernel
        has finished: pump while nobody leads, backing off from 0.5 ms to 20 ms."""
        kit = current_kit()
        delay = _WATCH_MIN
        while True:
            if not self.leading and self.pump():
                delay = _WATCH_MIN
                self.wake_followers()
            if self._satisfied(predicate):
                return
            waiter = kit.waiter()
            kit.arm(waiter, delay)
            self.watchers.append(waiter)
            try:
                await waiter
            finally:
                self.watchers.remove(waiter)
            delay = min(_WATCH_MAX, delay * 2)

    def kick(self) -> None:
        """Make the leader look again at once (it is parked in the waiter)."""
        self._waiter.kick()

    def _promote(self) -> None:
        for follower in self.followers:
            if wake(follower.waiter):  # it re-checks, and leads if it still has to wait
                return

    async def _lead(self, predicate: Callable[[], bool]) -> None:
        waiter = self._waiter
        ring = self._ring
        router = self._router
        waiter.begin()
        while True:
            if self.pump():
                waiter.progressed()
                if self.followers:
                    self.wake_followers()
            elif self.followers:
                # A follower may wait for a control word (paused) that moves no reply.
                self.wake_followers()
            if router.final or predicate():
                return
            outstanding = ring.in_head != ring.out_tail
            if outstanding and self.wait == "spin":
                if time.perf_counter() - self.yielded_at >= SPIN_YIELD_EVERY:
                    await anyio.lowlevel.checkpoint()  # let the other tasks run
                    self.yielded_at = time.perf_counter()
                    continue
                if self.spin():
                    continue
            await waiter.wait(outstanding)

    def spin(self) -> bool:
        """Wait for a reply outside the event loop (the kernel's
        :meth:`~pdc_core.backend.HostWaiter.spin_until_progress`) for up to
        :attr:`spin_limit`, but no longer than :data:`SPIN_YIELD_EVERY` after the leader
        last let the loop run (it then lets it run before it spins again, so other
        tasks wait no longer than that). Past that it looks once (a zero budget): the
        lean ``request`` then finds a reply already published without a detour.
        Whether a reply came or the kernel finished.
        """
        budget = min(self.spin_limit, self.yielded_at + SPIN_YIELD_EVERY - time.perf_counter())
        return self._waiter.spin_until_progress(self._ring, budget if budget > 0 else 0.0)
