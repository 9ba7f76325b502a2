"""The host session of a persistent kernel: rings, launch, requests, stop.

A persistent kernel is launched once, stays resident, and is fed through the rings of
the ring protocol (:mod:`pdc_core.backend`): a message costs a few memory writes
instead of a launch. :class:`PersistentKernelSession` is the host side, under asyncio
or trio: it owns the rings, launches the kernel through the backend, and offers
``send``, ``receive``, ``request`` (a round trip, matched by slot order), their batch
forms, ``pause``/``resume`` and ``stop``. Open one with :func:`open_persistent_kernel`.

How the host waits: the session never blocks the event loop and never spins in a
thread. One waiting task at a time (the *leader*) watches the ring through the
kernel's :class:`~pdc_core.backend.HostWaiter`; other waiting tasks sleep on a waiter
until the leader sees what they wait for.
"""

# ruff: noqa: ASYNC109
# ``stop(timeout)`` is the documented API (as for actors): a stop must be bounded even
# when the caller is being cancelled, so it cannot lean on the caller's cancel scopes.

from __future__ import annotations

import collections
import enum
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, Self, TypeAlias

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt

from .._backend._contract import Backend, Capability
from .._backend._persistent_kernel import PersistentKernelSpec, RepT, ReqT
from .._backend._resident import ResidentKernel, stop_timeout_error
from .._backend._ring import (
    ErrorCode,
    RingMemory,
    StopMode,
    coerce_batch,
    coerce_record,
    copy_records,
    records_copy,
)
from .._exceptions import ActorCrashed, ActorStopped, KernelStopTimeout, PersistentKernelError
from .._loop import (
    TURN_CHECK_EVERY,
    Kit,
    check_count,
    check_duration,
    check_timeout,
    current_kit,
    current_library,
    current_loop,
    full_checkpoint,
    loop_getter,
    seconds_or_inf,
    wake,
)
from .._loop._cancel import raise_cancelled
from .._plugins import resolve_backend

if TYPE_CHECKING:
    from types import TracebackType


#: One record as the session accepts it (see ``pdc_core.backend.coerce_record``): a
#: NumPy scalar or one-record array of the request dtype, a tuple of field values, a
#: mapping of field names, a bytes-like payload of at most one slot, or a Python
#: scalar of a one-field dtype. Which fields a record has is the dtype's business,
#: checked when it is sent: Python's types cannot spell a structured dtype's fields.
RecordLike: TypeAlias = (
    np.generic
    | npt.NDArray[Any]
    | tuple[Any, ...]
    | Mapping[str, Any]
    | bytes
    | bytearray
    | memoryview
    | int
    | float
    | complex
    | str
)
#: A batch as the session accepts it: a 1-D array of the request dtype (used as is)
#: or a sequence of records.
RecordBatch: TypeAlias = "npt.NDArray[ReqT] | Sequence[RecordLike]"

__all__ = [
    "PersistentKernelSession",
    "RecordBatch",
    "RecordLike",
    "SessionState",
    "SessionStatistics",
    "backend_for",
    "open_persistent_kernel",
]


# --------------------------------------------------------------------------------------
# The host session
# --------------------------------------------------------------------------------------


_log = logging.getLogger("pdc.persistent")


def backend_for(kernel: PersistentKernelSpec, backend: Backend | str | None) -> Backend:
    """The backend that will run ``kernel``: ``backend``, a name, or the best available.

    Checks everything that can be checked before a launch: raises :class:`TypeError`,
    :class:`~pdc_core.BackendUnavailable`, :class:`~pdc_core.CapabilityError` (no
    persistent kernels) or :class:`~pdc_core.KernelBodyMissing` (no body for it).
    """
    if not isinstance(kernel, PersistentKernelSpec):
        raise TypeError(f"expected a PersistentKernel, not {type(kernel).__name__}")
    backend = resolve_backend(backend)
    backend.require(Capability.PERSISTENT_KERNELS, "run persistent kernels")
    kernel.body_for(backend.name)
    return backend


class SessionState(enum.Enum):
    """Lifecycle of a :class:`PersistentKernelSession`."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"


@dataclass(frozen=True)
class SessionStatistics:
    """Counters of a session. ``unprocessed`` counts requests that were published but
    never answered because the kernel stopped or crashed first (each one failed its
    caller with an error, or was reported by ``receive``). Every reply is counted once:
    ``replied`` is those returned by ``request``/``request_batch``, plus ``received``,
    plus ``discarded`` (replies to ``reply=False`` sends, and those that reached a
    request whose caller was cancelled or failed first); ``sent == replied +
    unprocessed`` once the kernel has stopped."""

    sent: int
    replied: int
    received: int
    discarded: int
    batches: int
    unprocessed: int


class _Pending:
    """The replies awaited by one ``request``/``request_batch`` call.

    ``replies`` stays ``None`` until the first replies arrive; they are copied into it
    straight from the ring's slots (one copy per reply).
    """

    __slots__ = ("count", "error", "filled", "replies")

    def __init__(self, count: int) -> None:
        self.count = count
        self.replies: npt.NDArray[Any] | None = None
        self.filled = 0
        self.error: BaseException | None = None

    def fill(self, replies: npt.NDArray[Any]) -> None:
        """Copy ``replies`` (views of ring slots) in after those already filled."""
        take = len(replies)
        if take == self.count:
            self.replies = records_copy(replies)
        else:
            if self.replies is None:
                self.replies = np.empty(self.count, dtype=replies.dtype)
            copy_records(self.replies[self.filled : self.filled + take], replies)
        self.filled += take


class _Route:
    """Where the replies of sequence numbers ``[start, end)`` go."""

    __slots__ = ("end", "sink", "start")

    def __init__(self, start: int, end: int, sink: _Pending | int) -> None:
        self.start = start
        self.end = end
        self.sink = sink


_RECEIVE: Final = 0
_DISCARD: Final = 1


class _Writer:
    """A task waiting for ring room to write the rest of its records."""

    __slots__ = ("sink",)

    def __init__(self, sink: _Pending | int) -> None:
        self.sink = sink


#: How a caller waits for replies (see :class:`PersistentKernelSession`).
_ReplyWait = Literal["sleep", "spin"]

#: Default ``spin_limit``: seconds a spinning caller looks at the reply index before it
#: sleeps in the event loop.
_DEFAULT_SPIN_LIMIT: Final = 100e-6

#: The longest a spinning caller keeps the event loop from running other tasks, seconds.
_SPIN_YIELD_EVERY: Final = 0.001

#: Back-off bounds of :meth:`PersistentKernelSession.watch_until`'s pumping, seconds.
_WATCH_MIN: Final = 0.0005
_WATCH_MAX: Final = 0.02


class _Follower:
    """A task waiting in :meth:`PersistentKernelSession.wait_until` while another leads.

    It sleeps on the event loop's cheapest waiter (see ``_mailbox.Kit``): an
    ``anyio.Event`` costs more than the rest of a CPU-backend round trip's wake-up.
    """

    __slots__ = ("predicate", "waiter")

    def __init__(self, predicate: Callable[[], bool]) -> None:
        self.predicate = predicate
        self.waiter = current_kit().waiter()


def _check_session_options(
    receive_window: int | None, stop_timeout: float, wait: _ReplyWait, spin_limit: float
) -> tuple[int | None, float, _ReplyWait, float]:
    """The session's options, checked (before anything is launched) and normalised:
    ``receive_window`` ``None`` or a count of at least 1 by the one integer rule
    (:func:`~pdc_core._loop.check_count`), ``stop_timeout`` and ``spin_limit``
    positive durations (``inf`` for none), ``wait`` ``"sleep"`` or ``"spin"``. Raises a
    :class:`TypeError` or :class:`ValueError` naming the option."""
    window = None if receive_window is None else check_count(receive_window, "receive_window")
    stop = seconds_or_inf(check_duration(stop_timeout, "stop_timeout"))
    if not isinstance(wait, str) or wait not in ("sleep", "spin"):
        raise ValueError(f"wait must be 'sleep' or 'spin', not {wait!r}")
    spin = seconds_or_inf(check_duration(spin_limit, "spin_limit"))
    return window, stop, wait, spin


def _never() -> bool:
    return False


def _no_loop() -> object:
    return None


def _interrupt_again(interrupt: BaseException, error: PersistentKernelError) -> BaseException:
    """A fresh ``KeyboardInterrupt``/``SystemExit`` like the body's, chained from
    ``error`` (whose cause is the body's own, with its traceback on the worker)."""
    try:
        again = type(interrupt)(*interrupt.args)
    except Exception:  # a subclass with another signature: raise the body's own
        return interrupt
    again.__cause__ = error
    return again


class PersistentKernelSession(Generic[ReqT, RepT]):
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

    def __init__(
        self,
        kernel: PersistentKernelSpec,
        backend: Backend,
        resident: ResidentKernel,
        *,
        receive_window: int | None = None,
        stop_timeout: float = 5.0,
        wait: _ReplyWait = "sleep",
        spin_limit: float = _DEFAULT_SPIN_LIMIT,
    ) -> None:
        receive_window, stop_timeout, wait, spin_limit = _check_session_options(
            receive_window, stop_timeout, wait, spin_limit
        )
        self.kernel = kernel
        #: How a caller waits for replies: ``"sleep"`` in the event loop, or ``"spin"``
        #: on the reply index for up to :attr:`spin_limit` seconds first.
        self.wait = wait
        self.spin_limit = spin_limit
        self._yielded_at = 0.0  # when the leader last let the event loop run
        self.backend = backend
        self.resident = resident
        #: What :meth:`stop` (and leaving ``async with``) waits at most by default.
        self.stop_timeout = stop_timeout
        self.memory = resident.memory
        self._ring = resident.ring  # the one host end: control and records
        self._waiter = resident.host_waiter()
        self._wake = resident.wake
        layout = kernel.layout
        self.receive_window = (
            layout.in_capacity + layout.out_capacity if receive_window is None else receive_window
        )
        self._state = SessionState.STARTING
        self._loop: object = None  # the event loop that drives it (see _check_loop)
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
        self._routes: collections.deque[_Route] = collections.deque()
        self._inbox: collections.deque[npt.NDArray[Any]] = collections.deque()
        self._inbox_count = 0
        self._unreceived = 0  # replies to sends not yet received (in flight or in the inbox)
        self._replied = 0  # sequence number of the next reply to route
        self._received = 0
        self._discarded = 0
        self._unprocessed = 0
        self._leader = False
        self._followers: list[_Follower] = []
        self._writers: collections.deque[_Writer] = collections.deque()  # in arrival order
        self._watchers: list[Any] = []  # kit waiters of tasks in watch_until
        self._final = False  # the kernel is done (or failed) and its replies are collected
        self._idle_pumps = 0
        self._terminal: Callable[[], BaseException] | None = None
        self._error: PersistentKernelError | None = None
        self._error_reported = False
        self._interrupted = False  # the body raised KeyboardInterrupt or SystemExit
        self._released = False  # stop() is done with the kernel
        self._stop_timed_out: float | None = None  # the timeout of a stop that failed
        self._freed = False  # the waiter is closed and the resident released
        # A session dropped without being closed still asks its kernel to stop, so an
        # abandoned worker thread or resident kernel does not run forever.
        self._finalizer = weakref.finalize(self, resident.request_stop, StopMode.NOW)

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        kernel: PersistentKernelSpec[ReqT, RepT],
        backend: Backend | str | None = None,
        *,
        launch_timeout: float = 10.0,
        receive_window: int | None = None,
        stop_timeout: float = 5.0,
        wait: _ReplyWait = "sleep",
        spin_limit: float = _DEFAULT_SPIN_LIMIT,
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
        if self._final:
            await self._abort()
            if self._error is not None:
                raise self._error
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
        if raise_crash and self._error is not None and not self._error_reported:
            self._raise_terminal()

    @property
    def state(self) -> SessionState:
        """Where the session is in its lifecycle (starting, running, paused, stopped)."""
        return self._state

    @property
    def error(self) -> PersistentKernelError | None:
        """What the kernel reported (or the backend saw) if it crashed, else ``None``."""
        return self._error

    @property
    def capacity(self) -> int:
        """Slots of the kernel's input ring: the most requests in flight at once."""
        return self.kernel.capacity

    def statistics(self) -> SessionStatistics:
        """A snapshot of the session's counters: requests sent, replies published,
        received and discarded, device batches, requests left unprocessed."""
        return SessionStatistics(
            sent=self._ring.in_head,
            replied=self._replied,
            received=self._received,
            discarded=self._discarded,
            batches=self._ring.batches,
            unprocessed=self._unprocessed,
        )

    @property
    def collected_replies(self) -> int:
        """Replies to :meth:`send` collected from the ring and not yet received."""
        return self._inbox_count

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

    # -- the ring ---------------------------------------------------------------------------

    def _pump(self) -> bool:
        """Collect published replies and notice the end of the kernel; never waits.

        Whether anything moved. One look at each word: replies published after it are
        seen by the next pump (the host waiter returns at once for them).
        """
        if self._final:
            return False
        ring = self._ring
        progressed = False
        if ring.load_out_head() != ring.out_tail:
            count = 0
            for piece in ring.published():
                self._route(piece)
                count += len(piece)
            ring.release(count)
            if ring.in_head != ring.out_head:
                # Requests it has not answered remain: it may be waiting for the room
                # just released. (With none, ringing would only wake it to find nothing.)
                self._wake()
            progressed = True
        if ring.done:  # after the replies: _finish collects any published since
            self._finish()
            return True
        if progressed:
            return True
        # The done word is the signal; ``exited`` (which may cost a driver call) only
        # catches a device side that died without setting it, so look now and then.
        self._idle_pumps += 1
        if not self._idle_pumps & 15 and self.resident.exited:
            self._finish()
            return True
        return False

    def _route(self, replies: npt.NDArray[Any]) -> None:
        """Hand ``replies`` (views of ring slots, in order) to their sinks; each sink
        copies what it keeps."""
        count = len(replies)
        position = 0
        seq = self._replied
        routes = self._routes
        while position < count:
            route = routes[0]
            take = min(route.end - seq, count - position)
            sink = route.sink
            if sink is _RECEIVE:
                self._inbox.append(records_copy(replies[position : position + take]))
                self._inbox_count += take
            elif sink is _DISCARD:
                self._discarded += take
            else:
                assert isinstance(sink, _Pending)
                sink.fill(replies if take == count else replies[position : position + take])
            position += take
            seq += take
            if seq == route.end:
                routes.popleft()
            else:
                route.start = seq
        self._replied = seq

    def _finish(self) -> None:
        """The kernel is done or its execution ended: collect the last replies, fail the rest."""
        ring = self._ring
        exited_without_done = not ring.done
        if ring.load_out_head() != ring.out_tail:
            self._route(ring.read())
        self._final = True
        name = self.kernel.name
        error = self.resident.error
        if error is None and exited_without_done:
            error = PersistentKernelError(
                name, 0, "its execution ended without setting the done word"
            )
        if error is None and ring.stop_requested is StopMode.RUN:
            error = PersistentKernelError(
                name, int(ErrorCode.NONE), "it finished without being asked to stop"
            )
        unprocessed = ring.in_head - self._replied
        self._unprocessed = unprocessed
        if error is not None:
            _log.warning(
                "persistent kernel %r on %s crashed: %s", name, self.backend.qualified_name, error
            )
            self._error = error
            self._state = SessionState.CRASHED
            crash_error = error
            interrupt = error.__cause__
            if isinstance(interrupt, KeyboardInterrupt | SystemExit):
                # The body was interrupted (or exited): that reaches the event loop's
                # thread as itself, wherever the crash would be raised, as an interrupt
                # in an actor's handler does.
                caught = interrupt
                self._interrupted = True

                def interrupted() -> BaseException:
                    return _interrupt_again(caught, crash_error)

                self._terminal = interrupted
            else:

                def crashed() -> ActorStopped:
                    return ActorCrashed(name, crash_error)

                self._terminal = crashed
        else:
            self._state = SessionState.STOPPED
            detail = f"; {unprocessed} published request(s) were not handled" if unprocessed else ""

            def stopped() -> ActorStopped:
                return ActorStopped(f"persistent kernel {name!r} is stopped{detail}", actor_id=name)

            self._terminal = stopped
        # Requests still routed were never answered: they are ``unprocessed`` (never
        # ``discarded``, which counts replies).
        for route in self._routes:
            sink = route.sink
            if isinstance(sink, _Pending) and sink.error is None:
                sink.error = self._terminal()
        self._routes.clear()
        self.notify_changed()  # whoever waits, leader or follower, must look again

    def _raise_terminal(self) -> None:
        assert self._terminal is not None
        if self._error is not None:
            self._error_reported = True
        raise self._terminal()

    def _check_open(self) -> None:
        if self._terminal is not None:
            self._raise_terminal()
        if self._state in (SessionState.STOPPING, SessionState.STOPPED):
            name = self.kernel.name
            raise ActorStopped(f"persistent kernel {name!r} is stopping", actor_id=name)

    def _free_for(self, sink: _Pending | int) -> int:
        free = self._ring.free_slots()
        if sink is _RECEIVE:
            free = min(free, self.receive_window - self._unreceived)
        return free

    def _write(self, records: npt.NDArray[Any], sink: _Pending | int) -> int:
        """Write what fits now (one ``IN_HEAD`` store) and record where its replies go."""
        ring = self._ring
        limit = len(records)
        if sink is _RECEIVE:
            limit = min(limit, self.receive_window - self._unreceived)
            if limit <= 0:
                return 0
        written = ring.write(records[:limit] if limit < len(records) else records)
        if written:
            end = ring.in_head
            start = end - written
            routes = self._routes
            if routes and routes[-1].sink is sink and routes[-1].end == start:
                routes[-1].end = end
            else:
                routes.append(_Route(start, end, sink))
            if sink is _RECEIVE:
                self._unreceived += written
            self._wake()
        return written

    # -- waiting ------------------------------------------------------------------------------

    def _satisfied(self, predicate: Callable[[], bool]) -> bool:
        return self._final or predicate()

    def _wake_followers(self) -> None:
        for follower in self._followers:
            if not follower.waiter.done() and self._satisfied(follower.predicate):
                wake(follower.waiter)

    def notify_changed(self) -> None:
        """Tell tasks in :meth:`wait_until` that host-side state their predicates read
        has changed (their predicates are re-checked soon)."""
        if self._followers:
            self._wake_followers()
        for watcher in self._watchers:
            wake(watcher)
        if self._leader:
            self._waiter.kick()

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
        while True:
            if not self._leader:
                self._leader = True
                try:
                    await self._lead(predicate)  # it looks at the ring before it waits
                finally:
                    self._leader = False
                    if self._released:
                        self._release()
                    else:
                        self._promote()
                return
            if self._pump():
                self._wake_followers()
            if self._satisfied(predicate):
                return
            follower = _Follower(predicate)
            self._followers.append(follower)
            try:
                await follower.waiter
            finally:
                self._followers.remove(follower)
                if not self._leader:
                    # It may have been promoted and be leaving (cancelled) instead of
                    # leading: never leave the others without a leader.
                    self._promote()

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
        kit = current_kit()
        delay = _WATCH_MIN
        while True:
            if not self._leader and self._pump():
                delay = _WATCH_MIN
                self._wake_followers()
            if self._satisfied(predicate):
                if self._interrupted:
                    self._raise_terminal()
                return
            waiter = kit.waiter()
            kit.arm(waiter, delay)
            self._watchers.append(waiter)
            try:
                await waiter
            finally:
                self._watchers.remove(waiter)
            delay = min(_WATCH_MAX, delay * 2)

    def _promote(self) -> None:
        for follower in self._followers:
            if wake(follower.waiter):  # it re-checks, and leads if it still has to wait
                return

    async def _lead(self, predicate: Callable[[], bool]) -> None:
        waiter = self._waiter
        ring = self._ring
        waiter.begin()
        while True:
            if self._pump():
                waiter.progressed()
                if self._followers:
                    self._wake_followers()
            elif self._followers:
                # A follower may wait for a control word (paused) that moves no reply.
                self._wake_followers()
            if self._final or predicate():
                return
            outstanding = ring.in_head != ring.out_tail
            if outstanding and self.wait == "spin":
                if time.perf_counter() - self._yielded_at >= _SPIN_YIELD_EVERY:
                    await anyio.lowlevel.checkpoint()  # let the other tasks run
                    self._yielded_at = time.perf_counter()
                    continue
                if self._spin():
                    continue
            await waiter.wait(outstanding)

    def _spin(self) -> bool:
        """Wait for a reply outside the event loop (the kernel's
        :meth:`~pdc_core.backend.HostWaiter.spin_until_progress`) for up to
        :attr:`spin_limit`, but no longer than :data:`_SPIN_YIELD_EVERY` after the leader
        last let the loop run (it then lets it run before it spins again, so other
        tasks wait no longer than that). Past that it looks once (a zero budget): the
        lean ``request`` then finds a reply already published without a detour.
        Whether a reply came or the kernel finished.
        """
        budget = min(self.spin_limit, self._yielded_at + _SPIN_YIELD_EVERY - time.perf_counter())
        return self._waiter.spin_until_progress(self._ring, budget if budget > 0 else 0.0)

    # -- sending ------------------------------------------------------------------------------

    async def send(self, record: RecordLike, *, reply: bool = True) -> int:
        """Publish one request; return its sequence number (its reply's place in order).

        Waits while the ring is full (backpressure). The reply is delivered by
        :meth:`receive`, or dropped with ``reply=False`` (fire and forget). A caller
        already cancelled on entry sends nothing, and cancelling the wait for room
        leaves the record unsent.
        """
        batch = coerce_record(record, self.kernel.request_dtype)
        return await self._send(batch, _RECEIVE if reply else _DISCARD)

    async def send_batch(self, records: RecordBatch[ReqT], *, reply: bool = True) -> int:
        """Publish a batch of requests in order; return the first one's sequence number.

        A batch larger than the free space is written in pieces as space frees up.
        Every record is validated before the first is written. A caller already
        cancelled on entry sends nothing; cancelled while it waits for room, the
        pieces already written stay sent (see :meth:`statistics`) and the rest is not.
        """
        batch = coerce_batch(records, self.kernel.request_dtype)
        return await self._send(batch, _RECEIVE if reply else _DISCARD)

    async def _send(self, batch: npt.NDArray[Any], sink: int) -> int:
        await self._enter()
        self._check_open()
        first = self._ring.in_head
        await self._write_all(batch, sink)
        return first

    def _window_closed(self, sink: _Pending | int) -> bool:
        return sink is _RECEIVE and self._unreceived >= self.receive_window

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
        self, batch: npt.NDArray[Any], sink: _Pending | int, pending: _Pending | None = None
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
            or self._routes  # replies in flight: only the general path routes them
            or self._leader
            or self._writers
            or self._terminal is not None
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
            came = self.wait == "spin" and self._spin()
        except BaseException:
            # Published, not yet routed: route its reply to nobody before raising, or
            # the next request would take it as its own.
            self._abandon(self._route_last())
            raise
        if came:
            reply = ring.take_one()
            if reply is not None:
                self._replied += 1
                return reply
        # Not answered yet: route its reply as the general path does, and wait there
        # (no local names the pending: a raised error's traceback holds this frame).
        reply = (await self._wait_for(self._route_last()))[0]
        return reply

    async def request_batch(self, records: RecordBatch[ReqT]) -> npt.NDArray[RepT]:
        """Send a batch and return its replies, in order, as an array of the reply dtype.

        Errors as for :meth:`request`. A caller already cancelled on entry sends
        nothing; cancelled later, a prefix of the batch may have been sent, and the
        replies to it are discarded when they come.
        """
        batch = coerce_batch(records, self.kernel.request_dtype)
        return await self._request(batch)

    async def _request(self, batch: npt.NDArray[Any]) -> npt.NDArray[RepT]:
        await self._enter()
        self._check_open()
        total = len(batch)
        if total == 0:
            return np.empty(0, dtype=self.kernel.reply_dtype)
        pending = _Pending(total)
        try:
            await self._write_all(batch, pending, pending)
        except BaseException:
            self._abandon(pending)
            raise
        return await self._wait_for(pending)

    def _route_last(self) -> _Pending:
        """Route the reply to the request just published by :meth:`RingHost.put_one`."""
        head = self._ring.in_head
        pending = _Pending(1)
        self._routes.append(_Route(head - 1, head, pending))
        return pending

    async def _wait_for(self, pending: _Pending) -> npt.NDArray[RepT]:
        """Wait for ``pending``'s replies (its records are written and routed to it)."""
        total = pending.count
        try:
            if pending.filled < total and pending.error is None:
                await self.wait_until(lambda: pending.filled == total or pending.error is not None)
        except BaseException:
            self._abandon(pending)
            raise
        if pending.filled < total:
            if pending.error is None:  # pragma: no cover - wait_until only returns when final
                self._check_open()
            error = pending.error
            assert error is not None
            self._discarded += pending.filled  # replies that came before the failure
            if self._error is not None:
                self._error_reported = True
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

    def _abandon(self, pending: _Pending) -> None:
        """The caller of ``pending`` is gone: the replies it already holds are discarded
        (``replied == returned + received + discarded`` holds), and so will the rest be."""
        self._discarded += pending.filled
        for route in self._routes:
            if route.sink is pending:
                route.sink = _DISCARD

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

        Waits for one; errors after a stop as for :meth:`receive`; ``max_count`` below
        1 is a :class:`ValueError`. A caller already cancelled on entry takes nothing,
        and a cancelled wait takes nothing: the replies stay for the next receive.
        """
        if max_count is not None:
            max_count = check_count(max_count, "max_count")
        await self._enter()
        self._pump()
        if not self._inbox_count:
            if self._terminal is None:
                await self.wait_until(lambda: self._inbox_count > 0)
            if not self._inbox_count:
                self._raise_terminal()
        inbox = self._inbox
        if max_count is None or max_count >= self._inbox_count:
            chunks = list(inbox)
            inbox.clear()
        else:
            chunks = []
            wanted = max_count
            while wanted:
                chunk = inbox[0]
                if len(chunk) <= wanted:
                    chunks.append(inbox.popleft())
                    wanted -= len(chunk)
                else:
                    chunks.append(chunk[:wanted])
                    inbox[0] = chunk[wanted:]
                    wanted = 0
        replies = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        count = len(replies)
        self._inbox_count -= count
        self._unreceived -= count
        self._received += count
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
            if not self._final:
                if self._state is not SessionState.STOPPING:
                    self._state = SessionState.STOPPING
                self.resident.request_stop(StopMode.DRAIN if drain else StopMode.NOW)
                self.notify_changed()
                with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                    await self.wait_until(lambda: False)
                if not self._final:
                    self._stop_timed_out = timeout
                    raise stop_timeout_error(self.resident, timeout)
            if not await self.resident.wait_exited(max(0.0, deadline - time.monotonic())):
                self._stop_timed_out = timeout
                raise stop_timeout_error(self.resident, timeout)
            if not self._released:
                _log.debug("persistent kernel %r stopped", self.kernel.name)
                self._released = True
                if self._leader:  # it is parked in the waiter: the last one out releases
                    self._waiter.kick()
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
            f"{self._state.value}>"
        )


@asynccontextmanager
async def open_persistent_kernel(
    kernel: PersistentKernelSpec[ReqT, RepT],
    backend: Backend | str | None = None,
    *,
    launch_timeout: float = 10.0,
    receive_window: int | None = None,
    stop_timeout: float = 5.0,
    wait: _ReplyWait = "sleep",
    spin_limit: float = _DEFAULT_SPIN_LIMIT,
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
