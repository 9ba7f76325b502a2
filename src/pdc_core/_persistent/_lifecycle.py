"""The lifecycle half of a persistent-kernel session: its state, the event loop it is
bound to, how its tasks wait, and how it stops and releases the kernel.

:class:`SessionLifecycle` holds every field of a session (each says which values are
legal and who changes them) and makes the :class:`~._router.ReplyRouter` and the
:class:`~._leader.Leader`; :class:`~._session.PersistentKernelSession` adds the public
API for records on top (launching, sending, requests, receiving, pause). Calls go one
way: the session to this class, this class to the leader and the router.

Guarantees: a stop never hangs (shielded, bounded by its timeout) and releases the
kernel's memory only once its execution has exited; a crash nobody was told about is
raised when the session is left; one event loop drives a session.
"""

# ruff: noqa: ASYNC109
# ``stop(timeout)`` is the documented API (as for actors): a stop must be bounded even
# when the caller is being cancelled, so it cannot lean on the caller's cancel scopes.

from __future__ import annotations

import collections
import logging
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Generic, Self

import anyio
import anyio.lowlevel
import numpy.typing as npt

from .._backend._contract import Backend
from .._backend._persistent_kernel import PersistentKernelSpec, RepT, ReqT
from .._backend._resident import ResidentKernel, stop_timeout_error
from .._backend._ring import StopMode
from .._exceptions import ActorStopped, KernelStopTimeout, PersistentKernelError
from .._loop import (
    TURN_CHECK_EVERY,
    Kit,
    check_duration,
    check_timeout,
    current_kit,
    current_library,
    current_loop,
    full_checkpoint,
    loop_getter,
    seconds_or_inf,
)
from .._loop._cancel import raise_cancelled
from ._leader import DEFAULT_SPIN_LIMIT, Leader, ReplyWait
from ._router import Pending, ReplyRouter
from ._session_types import (
    SessionState,
    SessionStatistics,
    _check_session_options,
    _check_wait,
)

if TYPE_CHECKING:
    from types import TracebackType


__all__ = ["SessionLifecycle"]

_log = logging.getLogger("pdc.persistent")


class _Writer:
    """A task waiting for ring room to write the rest of its records."""

    __slots__ = ("sink",)

    def __init__(self, sink: Pending | int) -> None:
        self.sink = sink


def _never() -> bool:
    return False


def _no_loop() -> object:
    return None


class SessionLifecycle(Generic[ReqT, RepT]):
    """A session's state, event loop, waiting and stopping (see the module
    documentation); :class:`~pdc_core.PersistentKernelSession` is the class to use."""

    def __init__(
        self,
        kernel: PersistentKernelSpec,
        backend: Backend,
        resident: ResidentKernel,
        *,
        receive_window: int | None = None,
        stop_timeout: float = 5.0,
        wait: ReplyWait = "sleep",
        spin_limit: float = DEFAULT_SPIN_LIMIT,
    ) -> None:
        receive_window, stop_timeout, wait, spin_limit = _check_session_options(
            receive_window, stop_timeout, wait, spin_limit
        )
        self.kernel = kernel
        self.backend = backend
        self.resident = resident
        #: What :meth:`stop` (and leaving ``async with``) waits at most by default.
        self.stop_timeout = stop_timeout
        self.memory = resident.memory  # the ring region; detached once released
        # Fixed for the session's life: the kernel's one host end (records and control
        # words), its host waiter (the leader's; closed by _release) and its doorbell.
        self._ring = resident.ring
        self._waiter = resident.host_waiter()
        self._wake = resident.wake
        # The roles (see the module documentation): calls go session -> leader ->
        # router and session -> router, never back.
        self._router = ReplyRouter(self._ring, resident, kernel.name, backend.qualified_name)
        self._leader = Leader(self._router, self._waiter, wait, spin_limit)
        layout = kernel.layout
        #: Replies to sends that may be neither received nor discarded at once (>= 1).
        self.receive_window = (
            layout.in_capacity + layout.out_capacity if receive_window is None else receive_window
        )
        #: The lifecycle as the session drives it: STARTING -> RUNNING (the handshake)
        #: <-> PAUSED (pause/resume) -> STOPPING (stop); only while the router is not
        #: final: from then on :attr:`state` is the router's outcome (STOPPED/CRASHED).
        self._state = SessionState.STARTING
        # The event loop that drives it, bound once at first use (_bind_loop), with
        # what is read from it on every call; never rebound.
        self._loop: object = None
        self._loop_name = ""
        #: The loop's check for a cancelled scope: the per-message calls raise such a
        #: cancellation on entry instead of completing (bound with the loop).
        self._cancel_called: Callable[[], bool] = _never
        #: The loop's kit (bound with the loop): its fair turns make a task whose
        #: per-message calls complete without waiting yield within about a millisecond.
        self._kit: Kit | None = None
        #: The loop's cheapest :func:`current_loop` (bound with the loop): ``request``'s
        #: lean path checks the loop with it.
        self._loop_now: Callable[[], object] = _no_loop
        #: Tasks waiting for ring room, in arrival order: each adds and removes itself
        #: (_write_all); only the first that can use room writes.
        self._writers: collections.deque[_Writer] = collections.deque()
        #: Replies to sends in flight or in the inbox, not yet received: + by _write,
        #: - by receive_batch; at most ``receive_window`` (a send waits for room).
        self._unreceived = 0
        # Stopping, one way each: _released (stop() is done with the kernel) False ->
        # True; _stop_timed_out, the timeout of a stop that failed, None or a number;
        # _freed (waiter closed, resident released, rings detached) False -> True,
        # only after _released: by _stop, or by the last task out of wait_until when
        # a leader was parked in the waiter.
        self._released = False
        self._stop_timed_out: float | None = None
        self._freed = False
        # A session dropped without being closed still asks its kernel to stop, so an
        # abandoned worker thread or resident kernel does not run forever.
        self._finalizer = weakref.finalize(self, resident.request_stop, StopMode.NOW)

    @property
    def wait(self) -> ReplyWait:
        """How a caller waits for replies: ``"sleep"`` in the event loop, or ``"spin"``
        on the reply index for up to :attr:`spin_limit` seconds first (settable)."""
        return self._leader.wait

    @wait.setter
    def wait(self, wait: ReplyWait) -> None:
        _check_wait(wait)
        self._leader.wait = wait

    @property
    def spin_limit(self) -> float:
        """Seconds a spinning caller looks at the reply index before it sleeps
        (settable: a positive number, or ``None``/``inf`` for no bound)."""
        return self._leader.spin_limit

    @spin_limit.setter
    def spin_limit(self, spin_limit: float) -> None:
        self._leader.spin_limit = seconds_or_inf(check_duration(spin_limit, "spin_limit"))

    async def _handshake(self, launch_timeout: float, name: str, failure: str) -> None:
        """The start handshake: wait until the kernel signals ``STARTED``, or stop it
        and raise :class:`~pdc_core.PersistentKernelError` (``failure`` says what did
        not happen in time) or the error it reported."""
        try:
            with anyio.fail_after(launch_timeout):
                await self.wait_until(lambda: self._ring.started)
        except TimeoutError:
            await self._abort()
            raise PersistentKernelError(
                name,
                0,
                f"{failure} within {launch_timeout:g} s on "
                f"{self.backend.qualified_name} ({self.memory.describe()})",
            ) from None
        except BaseException:
            await self._abort()
            raise
        if self._router.final:
            await self._abort()
            if self._router.error is not None:
                raise self._router.error
            raise PersistentKernelError(name, 0, "it stopped before it started")
        self._state = SessionState.RUNNING

    async def _abort(self) -> None:
        with anyio.CancelScope(shield=True):
            with suppress(KernelStopTimeout, ActorStopped):
                await self._stop()

    async def __aenter__(self) -> Self:
        try:
            await full_checkpoint(current_kit())
        except BaseException:  # cancelled: __aexit__ will not run, so close it here
            with anyio.CancelScope(shield=True):
                await self._close(raise_crash=False)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose(_raise_crash=exc is None)

    async def aclose(self, *, _raise_crash: bool = True) -> None:
        """Stop the kernel (see :meth:`stop`, within :attr:`stop_timeout`) and release
        everything. After a stop that timed out it does not wait again: it releases the
        memory if the kernel has exited since, and keeps it otherwise.

        If the kernel crashed and no caller has been told yet, raises the
        :class:`~pdc_core.ActorCrashed` here, so a crash is never silent.

        A checkpoint: a pending cancellation is raised once the kernel is stopped.
        """
        await self._close(raise_crash=_raise_crash)
        await full_checkpoint(current_kit())

    async def _close(self, *, raise_crash: bool) -> None:
        if self._stop_timed_out is None:
            await self._stop()
        elif self.resident.exited:  # it stopped since: release without waiting again
            await self._stop(0)
        if raise_crash and self._router.error is not None and not self._router.error_reported:
            self._router.raise_terminal()

    @property
    def state(self) -> SessionState:
        """Where the session is in its lifecycle (starting, running, paused, stopped)."""
        router = self._router
        if router.final:  # the kernel is done: how it ended
            return SessionState.CRASHED if router.error is not None else SessionState.STOPPED
        return self._state

    @property
    def error(self) -> PersistentKernelError | None:
        """What the kernel reported (or the backend saw) if it crashed, else ``None``."""
        return self._router.error

    @property
    def capacity(self) -> int:
        """Slots of the kernel's input ring: the most requests in flight at once."""
        return self.kernel.capacity

    def statistics(self) -> SessionStatistics:
        """A snapshot of the session's counters: requests sent, replies published,
        received and discarded, device batches, requests left unprocessed."""
        return SessionStatistics(
            sent=self._ring.in_head,
            replied=self._router.replied,
            received=self._router.received,
            discarded=self._router.discarded,
            batches=self._ring.batches,
            unprocessed=self._router.unprocessed,
        )

    @property
    def collected_replies(self) -> int:
        """Replies to :meth:`send` collected from the ring and not yet received."""
        return self._router.inbox_count

    def read_state(self) -> npt.NDArray[Any] | None:
        """A host copy of the kernel's device-resident state (see ``ResidentKernel``)."""
        return self.resident.read_state()

    def _check_loop(self) -> None:
        """Bind the session to the running event loop at first use; refuse any other."""
        loop = current_loop()
        if loop is not self._loop:
            self._bind_loop(loop)

    async def _enter(self) -> None:
        """The entry of a per-message call: bind the session to the running loop (or
        refuse another), raise a cancellation already pending, and take the loop's fair
        turn: a device that answers at once (or a ring with room) would otherwise let
        a task call ``request``/``send``/``receive`` forever without yielding."""
        self._check_loop()
        if self._cancel_called():  # a per-message call: raised on entry
            await raise_cancelled()
        kit = self._kit
        if kit is not None:
            ops = kit.ops = kit.ops + 1
            if not ops % TURN_CHECK_EVERY and kit.turn_is_over():
                await kit.checkpoint()

    def _bind_loop(self, loop: object) -> None:
        if self._loop is None:
            self._loop = loop
            self._loop_name = current_library()
            kit = self._kit = current_kit()
            self._cancel_called = kit.cancel_called
            self._loop_now = loop_getter()
            return
        raise RuntimeError(
            f"persistent kernel {self.kernel.name!r} belongs to the {self._loop_name} event "
            "loop that started it; a persistent-kernel session (and a kernel actor) cannot "
            "be used from another event loop"
        )

    def _check_open(self) -> None:
        router = self._router
        if router.terminal is not None:
            router.raise_terminal()
        if self._state in (SessionState.STOPPING, SessionState.STOPPED):
            name = self.kernel.name
            raise ActorStopped(f"persistent kernel {name!r} is stopping", actor_id=name)

    # -- waiting ------------------------------------------------------------------------------

    def notify_changed(self) -> None:
        """Tell tasks in :meth:`wait_until` that host-side state their predicates read
        has changed (their predicates are re-checked soon)."""
        self._leader.notify_changed()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds or the kernel has finished (stopped or crashed).

        While waiting, the task takes its turn leading the ring (collecting replies for
        every other caller), so a long-lived task such as an actor's serving loop can
        wait for its own condition here and keep the session flowing. ``predicate`` is
        re-checked whenever the ring moves and after :meth:`notify_changed`; it must be
        cheap and must not block. Cancelling the wait is safe.

        The first waiting task leads: it pumps the ring and waits through the
        kernel's :class:`HostWaiter`; the others sleep until the leader sees their
        predicate hold, or until one of them is promoted when the leader leaves.
        """
        loop = current_loop()
        if loop is not self._loop:
            self._bind_loop(loop)
        try:
            await self._leader.wait_until(predicate)
        finally:
            if self._released and not self._leader.leading:
                self._release()  # stopped while a leader was parked: the last one out frees

    async def watch_until(self, predicate: Callable[[], bool]) -> None:
        """Like :meth:`wait_until`, for a long-lived task that must not slow the others.

        The watcher never leads: a task that waits for a reply leads the ring itself
        and is woken by the kernel directly, with no hand-off through the watcher (an
        actor's serving loop watches; leading, it would add a task switch to every
        ``ask``). While nobody leads, the watcher pumps the ring, backing off from
        0.5 ms to 20 ms, so a crash or a stop is seen within 20 ms with no request in
        flight. :meth:`notify_changed` wakes it at once. Cancelling the wait is safe.

        A ``KeyboardInterrupt`` or ``SystemExit`` raised by the kernel's body is raised
        here (as itself, chained from :attr:`error`) instead of returning, so that it
        reaches whoever watches the kernel, as an interrupt in an actor's handler does.
        """
        self._check_loop()
        await self._leader.watch_until(predicate)
        if self._router.interrupted:
            self._router.raise_terminal()

    async def stop(self, timeout: float | None = None, *, drain: bool = False) -> None:
        """Stop the kernel and release its memory; idempotent.

        ``drain=False``: the kernel finishes the batch in hand and stops; requests it
        had not consumed fail with :class:`~pdc_core.ActorStopped`. ``drain=True``: it
        first answers everything already published (replies keep flowing to their
        callers meanwhile). Either way, every reply the kernel published is delivered.
        Shielded from cancellation, bounded by ``timeout`` (default:
        :attr:`stop_timeout`); raises :class:`~pdc_core.KernelStopTimeout` if the kernel
        has not stopped by then (the memory is then kept, since the device may still use
        it). Calling it again tries again. A checkpoint: a pending cancellation is
        raised once the kernel is stopped.
        """
        await self._stop(timeout, drain=drain)
        await full_checkpoint(current_kit())

    async def _stop(self, timeout: float | None = None, *, drain: bool = False) -> None:
        if self._released:
            return
        self._check_loop()
        timeout = self.stop_timeout if timeout is None else seconds_or_inf(check_timeout(timeout))
        deadline = time.monotonic() + timeout
        with anyio.CancelScope(shield=True):
            if not self._router.final:
                if self._state is not SessionState.STOPPING:
                    self._state = SessionState.STOPPING
                self.resident.request_stop(StopMode.DRAIN if drain else StopMode.NOW)
                self.notify_changed()
                with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                    await self.wait_until(lambda: False)
                if not self._router.final:
                    self._stop_timed_out = timeout
                    raise stop_timeout_error(self.resident, timeout)
            if not await self.resident.wait_exited(max(0.0, deadline - time.monotonic())):
                self._stop_timed_out = timeout
                raise stop_timeout_error(self.resident, timeout)
            if not self._released:
                _log.debug("persistent kernel %r stopped", self.kernel.name)
                self._released = True
                if self._leader.leading:  # it is parked in the waiter: the last one out releases
                    self._leader.kick()
                else:
                    self._release()
            self.notify_changed()

    def _release(self) -> None:
        if not self._freed:
            self._freed = True
            self._finalizer.detach()
            self._waiter.close()
            self.resident.release()
            # The kernel has exited: let the rings' allocation go now (a backend with
            # other kernels still resident defers the free in release()), not whenever
            # the garbage collector gets to the session.
            self._ring.detach()

    def __repr__(self) -> str:
        return (
            f"<PersistentKernelSession {self.kernel.name!r} on {self.backend.qualified_name} "
            f"{self.state.value}>"
        )
