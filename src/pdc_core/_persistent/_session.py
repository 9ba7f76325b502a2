"""The host session of a persistent kernel: rings, launch, requests, stop.

A persistent kernel is launched once, stays resident, and is fed through the rings of
the ring protocol (:mod:`pdc_core.backend`): a message costs a few memory writes
instead of a launch. :class:`PersistentKernelSession` is the host side, under asyncio
or trio: it owns the rings, launches the kernel through the backend, and offers
``send``, ``receive``, ``request`` (a round trip, matched by slot order), their batch
forms, ``pause``/``resume`` and ``stop``. Open one with :func:`open_persistent_kernel`.

The session is three objects with one-way calls: the session itself (this module:
the public API, writing requests and the writers' queue; its lifecycle, loop binding
and stopping in the base class, :mod:`._lifecycle`) calls the :class:`~._leader.Leader`
(who waits: one waiting task leads the ring, the others follow) and the
:class:`~._router.ReplyRouter` (where each reply goes); the leader calls the router;
the router calls neither. All three reach the ring through the kernel's one host end,
``resident.ring``.

How the host waits: the session never blocks the event loop and never spins in a
thread. One waiting task at a time (the *leader*) watches the ring through the
kernel's :class:`~pdc_core.backend.HostWaiter`; other waiting tasks sleep on a waiter
until the leader sees what they wait for.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from .._backend._contract import Backend
from .._backend._persistent_kernel import PersistentKernelSpec, RepT, ReqT
from .._backend._resident import ResidentKernel
from .._backend._ring import (
    RingMemory,
    coerce_batch,
    coerce_record,
)
from .._loop import (
    TURN_CHECK_EVERY,
    check_count,
    check_duration,
    current_kit,
    full_checkpoint,
    seconds_or_inf,
)
from .._loop._cancel import raise_cancelled
from ._leader import DEFAULT_SPIN_LIMIT, ReplyWait
from ._lifecycle import SessionLifecycle, _Writer
from ._router import DISCARD, RECEIVE, Pending
from ._session_types import (
    RecordBatch,
    RecordLike,
    SessionState,
    SessionStatistics,
    _check_session_options,
    backend_for,
)

__all__ = [
    "PersistentKernelSession",
    "RecordBatch",
    "RecordLike",
    "SessionState",
    "SessionStatistics",
    "backend_for",
    "open_persistent_kernel",
]

_log = logging.getLogger("pdc.persistent")


class PersistentKernelSession(SessionLifecycle[ReqT, RepT]):
    """The host side of one resident persistent kernel, under asyncio or trio.

    Owns the ring memory (allocated from the backend as ``MemoryKind.MAPPED``) and
    the :class:`ResidentKernel`. Use it as ``async with open_persistent_kernel(k) as s``,
    or ``s = await PersistentKernelSession.start(k)`` ... ``await s.aclose()``.

    Guarantees:

    * Replies come back in request order, exactly once. :meth:`request` and
      :meth:`request_batch` return the replies to *their* records (matched by slot
      order, so records need no id field); the replies to :meth:`send` and
      :meth:`send_batch` are delivered by :meth:`receive`/:meth:`receive_batch`, in
      order; with ``reply=False`` they are discarded.
    * Backpressure: a send waits while the input ring is full, and while
      ``receive_window`` replies to sends are neither received nor discarded, so
      memory stays bounded when nobody receives.
    * Bad records raise :class:`~pdc_core.RecordError` before anything is written.
    * When the kernel stops, every request published but not answered fails its
      caller with :class:`~pdc_core.ActorStopped`; when it reports an error (or its
      execution fails), with :class:`~pdc_core.ActorCrashed` whose cause is a
      :class:`~pdc_core.PersistentKernelError`. Replies published before that are
      still delivered. Operations on a stopped kernel raise the same errors.
    * :meth:`stop` never hangs: it raises :class:`~pdc_core.KernelStopTimeout` when the
      kernel does not stop in time, and it finishes even when the calling task is
      being cancelled (shielded, bounded by its timeout).
    * A cancelled ``request`` leaves its replies to be discarded; a cancelled send of
      a batch may have sent a prefix of it (see :attr:`statistics`).

    Waiting for replies: with ``wait="sleep"`` (the default) the caller sleeps in the
    event loop until the kernel signals, costing nothing while it waits. With
    ``wait="spin"`` a caller whose replies are due first spins on the reply index for
    up to ``spin_limit`` seconds (default 100 us) in a tight loop (giving the GIL up
    between looks only to a device that is a Python thread and needs it),
    and sleeps only if none came: a round trip saves the event loop's wake-up
    (CPU-backend figures in docs/benchmarks.md) at the price of a busy host thread
    while it spins. Spinning holds the event loop: other tasks wait up to 1 ms at
    most, after which the caller lets the loop run before it spins again.

    One event loop drives a session (the one that first uses it: the one that starts
    it); it is not thread-safe. Every async method used from another event loop (in
    another thread, or a later ``anyio.run``) raises :class:`RuntimeError` saying so,
    before it touches the ring.

    Types: ``PersistentKernelSession[ReqT, RepT]`` carries the NumPy scalar types of
    the kernel's request and reply records: :meth:`request` returns a ``RepT``
    (``numpy.void`` for a structured dtype, whose fields are read as ``reply["y"]``),
    :meth:`request_batch` an ``NDArray[RepT]``. A session opened for a
    :class:`~pdc_core.PersistentKernel` is ``PersistentKernelSession[Any, Any]``;
    annotate it (``session: PersistentKernelSession[np.void, np.void]``) to have its
    replies checked. Records are accepted as :data:`RecordLike`, batches as
    :data:`RecordBatch`.
    """

    # -- launching ------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        kernel: PersistentKernelSpec[ReqT, RepT],
        backend: Backend | str | None = None,
        *,
        launch_timeout: float = 10.0,
        receive_window: int | None = None,
        stop_timeout: float = 5.0,
        wait: ReplyWait = "sleep",
        spin_limit: float = DEFAULT_SPIN_LIMIT,
        **options: Any,
    ) -> PersistentKernelSession[ReqT, RepT]:
        """Allocate the rings, launch ``kernel`` and wait until it is resident.

        ``backend`` is a :class:`Backend` or a name for :func:`~pdc_core.get_backend`
        (default: the best available). ``wait`` and ``spin_limit`` say how callers wait
        for replies (see the class documentation). ``options`` go to the backend's
        ``launch_persistent_kernel`` (see its documentation). Raises
        :class:`~pdc_core.CapabilityError` for a backend without persistent kernels,
        :class:`~pdc_core.KernelBodyMissing` when ``kernel`` has no body for it, and
        :class:`~pdc_core.PersistentKernelError` when the kernel fails to start or does
        not signal ``STARTED`` within ``launch_timeout`` seconds (it is then stopped).
        A caller already cancelled on entry launches nothing; cancelled while it waits
        for ``STARTED``, the kernel is stopped (shielded) before the cancellation
        propagates.
        """
        launch_timeout = seconds_or_inf(check_duration(launch_timeout, "launch_timeout"))
        # Every option is checked before anything is allocated or launched: a refused
        # call leaves no resident kernel (no worker thread) behind.
        _check_session_options(receive_window, stop_timeout, wait, spin_limit)
        await full_checkpoint(current_kit())  # a pending cancellation launches nothing
        backend = backend_for(kernel, backend)
        backend.check_launch_options(options)  # a misspelt option allocates nothing
        memory = RingMemory.allocate(backend, kernel.layout)
        resident = backend.launch_persistent_kernel(kernel, memory, **options)
        if not isinstance(resident, ResidentKernel):
            raise TypeError(
                f"{backend!r}.launch_persistent_kernel returned {type(resident).__name__}, "
                "not a ResidentKernel"
            )
        session = cls(
            kernel,
            backend,
            resident,
            receive_window=receive_window,
            stop_timeout=stop_timeout,
            wait=wait,
            spin_limit=spin_limit,
        )
        await session._handshake(launch_timeout, kernel.name, "it did not signal STARTED")
        _log.debug("persistent kernel %r resident on %s", kernel.name, backend.qualified_name)
        return session

    # -- writing ------------------------------------------------------------------------------

    def _free_for(self, sink: Pending | int) -> int:
        free = self._ring.free_slots()
        if sink is RECEIVE:
            free = min(free, self.receive_window - self._unreceived)
        return free

    def _write(self, records: npt.NDArray[Any], sink: Pending | int) -> int:
        """Write what fits now (one ``IN_HEAD`` store) and route its replies to ``sink``."""
        ring = self._ring
        limit = len(records)
        if sink is RECEIVE:
            limit = min(limit, self.receive_window - self._unreceived)
            if limit <= 0:
                return 0
        written = ring.write(records[:limit] if limit < len(records) else records)
        if written:
            end = ring.in_head
            self._router.add(end - written, end, sink)
            if sink is RECEIVE:
                self._unreceived += written
            self._wake()
        return written

    async def send(self, record: RecordLike, *, reply: bool = True) -> int:
        """Publish one request; return its sequence number (its reply's place in order).

        Waits while the ring is full (backpressure). The reply is delivered by
        :meth:`receive`, or dropped with ``reply=False`` (fire and forget). A caller
        already cancelled on entry sends nothing, and cancelling the wait for room
        leaves the record unsent.
        """
        batch = coerce_record(record, self.kernel.request_dtype)
        return await self._send(batch, RECEIVE if reply else DISCARD)

    async def send_batch(self, records: RecordBatch[ReqT], *, reply: bool = True) -> int:
        """Publish a batch of requests in order; return the first one's sequence number.

        A batch larger than the free space is written in pieces as space frees up.
        Every record is validated before the first is written. A caller already
        cancelled on entry sends nothing; cancelled while it waits for room, the
        pieces already written stay sent (see :meth:`statistics`) and the rest is not.
        """
        batch = coerce_batch(records, self.kernel.request_dtype)
        return await self._send(batch, RECEIVE if reply else DISCARD)

    async def _send(self, batch: npt.NDArray[Any], sink: int) -> int:
        await self._enter()
        self._check_open()
        first = self._ring.in_head
        await self._write_all(batch, sink)
        return first

    def _window_closed(self, sink: Pending | int) -> bool:
        return sink is RECEIVE and self._unreceived >= self.receive_window

    def _may_write(self, writer: _Writer) -> bool:
        """Whether ``writer`` is first among the queued writers that can use ring room
        (a send held back by the receive window holds back nobody else)."""
        for queued in self._writers:
            if queued is writer:
                return True
            if not self._window_closed(queued.sink):
                return False
        return False  # pragma: no cover - a writer asks only while it is queued

    async def _write_all(
        self, batch: npt.NDArray[Any], sink: Pending | int, pending: Pending | None = None
    ) -> None:
        """Write ``batch`` in order, waiting for room; stop early if ``pending`` fails.

        Writers that wait for room get it first come, first served: a task whose
        reply has just come back and that writes again at once cannot take the room
        that freed up from one that has been waiting for it.
        """
        total = len(batch)
        done = 0 if self._writers else self._write(batch, sink)
        if done == total:
            return
        writer = _Writer(sink)
        self._writers.append(writer)
        try:
            while done < total:
                await self.wait_until(
                    lambda: (
                        (pending is not None and pending.error is not None)
                        or (self._may_write(writer) and self._free_for(sink) > 0)
                    )
                )
                if pending is not None and pending.error is not None:
                    return
                self._check_open()
                done += self._write(batch[done:], sink)
        finally:
            self._writers.remove(writer)
            if self._writers:
                self.notify_changed()  # the next writer may have room now

    # -- requests ------------------------------------------------------------------------------

    async def request(self, record: RecordLike) -> RepT:
        """Send one request and return its reply (a record of the reply dtype).

        Raises :class:`~pdc_core.RecordError` for a bad record and
        :class:`~pdc_core.ActorStopped` (or ``ActorCrashed``) if the kernel stops
        first. A caller already cancelled on entry sends nothing; cancelled after
        sending, its reply is discarded when it comes.
        """
        ring = self._ring
        kit = self._kit
        try:  # on the session's loop? (the general path's _check_loop says what is wrong)
            on_loop = self._loop_now() is self._loop
        except RuntimeError:  # trio's token getter outside trio
            on_loop = False
        if (
            not on_loop
            or kit is None
            or self._router.routes  # replies in flight: only the general path routes them
            or self._leader.leading
            or self._writers
            or self._router.terminal is not None
            or (self._state is not SessionState.RUNNING and self._state is not SessionState.PAUSED)
        ):
            reply: RepT = (await self._request(coerce_record(record, self.kernel.request_dtype)))[0]
            return reply
        # The lean path: this task is the only one using the ring (nothing in flight, no
        # leader, no writer waiting), and nothing below awaits until the general wait,
        # so no other task can interleave: put the record, spin, take the reply.
        if self._cancel_called():  # a per-message call: raised on entry
            await raise_cancelled()
        ops = kit.ops = kit.ops + 1  # _enter's fair turn, written out: no call here
        if not ops % TURN_CHECK_EVERY and kit.turn_is_over():
            await kit.checkpoint()
            # Other tasks ran: what was checked above may no longer hold.
            return await self.request(record)
        if not ring.put_one(record):  # the ring is still full of answered requests
            reply = (await self._request(coerce_record(record, self.kernel.request_dtype)))[0]
            return reply
        try:
            self._wake()
            came = self._leader.wait == "spin" and self._leader.spin()
        except BaseException:
            # Published, not yet routed: route its reply to nobody before raising, or
            # the next request would take it as its own.
            self._router.abandon(self._router.route_last())
            raise
        if came:
            reply = ring.take_one()
            if reply is not None:
                self._router.replied += 1
                return reply
        # Not answered yet: route its reply as the general path does, and wait there
        # (no local names the pending: a raised error's traceback holds this frame).
        reply = (await self._wait_for(self._router.route_last()))[0]
        return reply

    async def request_batch(self, records: RecordBatch[ReqT]) -> npt.NDArray[RepT]:
        """Send a batch and return its replies, in order, as an array of the reply dtype.

        Errors as for :meth:`request`. A caller already cancelled on entry sends
        nothing; cancelled later, a prefix of the batch may have been sent, and the
        replies to it are discarded when they come.
        """
        batch = coerce_batch(records, self.kernel.request_dtype)
        return await self._request(batch)

    async def _request(
        self, batch: npt.NDArray[Any], published: Callable[[], object] | None = None
    ) -> npt.NDArray[RepT]:
        """The general path of a request; ``published()`` is called once the whole
        batch is in the ring (or its writing stopped because a reply failed), before
        the wait for the replies."""
        await self._enter()
        self._check_open()
        total = len(batch)
        if total == 0:
            return np.empty(0, dtype=self.kernel.reply_dtype)
        pending = Pending(total)
        try:
            await self._write_all(batch, pending, pending)
        except BaseException:
            self._router.abandon(pending)
            raise
        if published is not None:
            published()
        return await self._wait_for(pending)

    async def _wait_for(self, pending: Pending) -> npt.NDArray[RepT]:
        """Wait for ``pending``'s replies (its records are written and routed to it)."""
        total = pending.count
        try:
            if pending.filled < total and pending.error is None:
                await self.wait_until(lambda: pending.filled == total or pending.error is not None)
        except BaseException:
            self._router.abandon(pending)
            raise
        if pending.filled < total:
            if pending.error is None:  # pragma: no cover - wait_until only returns when final
                self._check_open()
            error = pending.error
            assert error is not None
            self._router.discarded += pending.filled  # replies that came before the failure
            if self._router.error is not None:
                self._router.error_reported = True
            # The error's traceback holds this frame: drop the frame's references to the
            # error, or error -> frame -> pending -> error is a cycle that keeps the whole
            # session (and its rings) alive until the garbage collector runs.
            del pending
            try:
                raise error
            finally:
                del error
        assert pending.replies is not None
        return pending.replies

    # -- receiving -----------------------------------------------------------------------------

    async def receive(self) -> RepT:
        """The next reply to a :meth:`send`, in order; waits for one.

        After the kernel stops, replies already collected are still returned; then it
        raises :class:`~pdc_core.ActorStopped` (or ``ActorCrashed``). Cancellation as
        for :meth:`receive_batch`.
        """
        reply: RepT = (await self.receive_batch(1))[0]
        return reply

    async def receive_batch(self, max_count: int | None = None) -> npt.NDArray[RepT]:
        """Between 1 and ``max_count`` (default: all available) replies to sends, in order.

        Waits for one; errors after a stop as for :meth:`receive`; ``max_count`` is an
        int by the one integer rule (:class:`TypeError` otherwise) and below 1 is a
        :class:`ValueError`. A caller already cancelled on entry takes nothing, and a
        cancelled wait takes nothing: the replies stay for the next receive.
        """
        if max_count is not None:
            max_count = check_count(max_count, "max_count")
        await self._enter()
        self._leader.pump()
        router = self._router
        if not router.inbox_count:
            if router.terminal is None:
                await self.wait_until(lambda: router.inbox_count > 0)
            if not router.inbox_count:
                router.raise_terminal()
        replies = router.take(max_count)
        self._unreceived -= len(replies)
        self.notify_changed()
        return replies

    # -- control ----------------------------------------------------------------------------

    async def pause(self) -> None:
        """Park the kernel between batches; returns once it has acknowledged.

        Requests sent while paused wait in the ring (and sends wait when it is full).
        A caller already cancelled on entry pauses nothing; cancelled while it waits
        for the acknowledgement, the pause stays requested and the kernel parks
        (:meth:`resume` lets it go on).
        """
        self._check_loop()
        await full_checkpoint(current_kit())
        self._check_open()
        self.resident.pause()
        await self.wait_until(lambda: self._ring.paused)
        self._check_open()
        self._state = SessionState.PAUSED

    async def resume(self) -> None:
        """Let a paused kernel go on; returns once it has left its pause.

        A caller already cancelled on entry resumes nothing; cancelled while it waits,
        the resume stays requested and the kernel goes on.
        """
        self._check_loop()
        await full_checkpoint(current_kit())
        self._check_open()
        self.resident.resume()
        await self.wait_until(lambda: not self._ring.paused)
        self._check_open()
        self._state = SessionState.RUNNING


@asynccontextmanager
async def open_persistent_kernel(
    kernel: PersistentKernelSpec[ReqT, RepT],
    backend: Backend | str | None = None,
    *,
    launch_timeout: float = 10.0,
    receive_window: int | None = None,
    stop_timeout: float = 5.0,
    wait: ReplyWait = "sleep",
    spin_limit: float = DEFAULT_SPIN_LIMIT,
    **options: Any,
) -> AsyncIterator[PersistentKernelSession[ReqT, RepT]]:
    """Launch ``kernel`` and yield its :class:`PersistentKernelSession`; stop it on exit.

    ::

        async with open_persistent_kernel(double, "cpu") as kernel:
            reply = await kernel.request((1, 2.0))

    On exit the kernel is stopped (shielded from cancellation, within
    ``stop_timeout`` seconds; not again if a stop already timed out) and its memory
    released; a crash nobody was told about is raised there.
    """
    session = await PersistentKernelSession.start(
        kernel,
        backend,
        launch_timeout=launch_timeout,
        receive_window=receive_window,
        stop_timeout=stop_timeout,
        wait=wait,
        spin_limit=spin_limit,
        **options,
    )
    async with session:
        yield session
