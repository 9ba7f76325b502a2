"""Persistent kernels: the spec, the handle a backend returns, and the host session.

A persistent kernel is launched once, stays resident, and is fed through the rings of
:mod:`pdc_core._ring`: a message costs a few memory writes instead of a launch. Three
pieces, from the user down to the backend:

* :class:`PersistentKernel` -- what to run: request and reply record dtypes, the ring
  capacity, one *body* per backend (CUDA C device-function source for ``cuda``, a
  Python callable over NumPy record arrays for ``cpu``), optional device-resident
  state.
* :class:`PersistentKernelSession` -- the host side, under asyncio or trio: it owns
  the rings, launches the kernel through the backend, and offers ``send``,
  ``receive``, ``request`` (a round trip, matched by slot order), their batch forms,
  ``pause``/``resume`` and ``stop``. Open one with :func:`open_persistent_kernel`.
* :class:`ResidentKernel` -- what :meth:`Backend.launch_persistent_kernel` returns:
  the backend implements how the device side runs (``wake``, ``exited``, optionally
  ``host_waiter``); the protocol-level control (stop, pause, status, error) is
  implemented here once for every backend.

How the host waits: the session never blocks the event loop and never spins in a
thread. One waiting task at a time (the *leader*) watches the ring through a
:class:`HostWaiter` obtained from the kernel; other waiting tasks sleep on an event
until the leader sees what they wait for. The default waiter, :class:`PollingWaiter`,
polls inside the event loop with ``sleep(0)`` while replies are outstanding and
backs off to 1 ms sleeps when idle; a backend whose device side shares the host's
interpreter (the CPU backend's worker thread) supplies a waiter that sleeps in the
event loop's selector until the worker signals instead, because a host spinning in
the loop starves a worker that needs the GIL.
"""

# ruff: noqa: ASYNC109
# ``stop(timeout)`` is the documented API (as for actors): a stop must be bounded even
# when the caller is being cancelled, so it cannot lean on the caller's cancel scopes.

from __future__ import annotations

import abc
import collections
import enum
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from ._exceptions import (
    ActorCrashed,
    ActorStopped,
    KernelBodyMissing,
    KernelStopTimeout,
    PersistentKernelError,
)
from ._mailbox import current_kit, wake
from ._ring import (
    ErrorCode,
    Offset,
    RingHost,
    RingLayout,
    RingMemory,
    StopMode,
    coerce_batch,
    coerce_record,
    record_dtype,
)

if TYPE_CHECKING:
    from types import TracebackType

    from ._backend import Backend

__all__ = [
    "DeviceSource",
    "HostWaiter",
    "KernelStatus",
    "PersistentKernel",
    "PersistentKernelSession",
    "PollingWaiter",
    "ResidentKernel",
    "SessionState",
    "SessionStatistics",
    "open_persistent_kernel",
    "persistent_kernel",
]

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceSource:
    """The body of a persistent kernel for a compiling backend (CUDA C, Metal, ...).

    ``source`` defines a device function named ``entry``; how the backend wraps it in
    its resident loop (and the exact signature it expects) is documented by the
    backend. ``options`` are extra compiler options.
    """

    source: str
    entry: str = "pdc_body"
    options: tuple[str, ...] = ()


def _backend_key(backend: str) -> str:
    if not isinstance(backend, str) or not backend:
        raise TypeError(f"a backend name must be a non-empty str, not {backend!r}")
    return backend.partition(":")[0].lower()


#: Backends whose persistent-kernel body is a Python callable, and over what.
_CALLABLE_BODIES: Final = {"cpu": "NumPy record arrays", "metal": "MLX arrays"}


class PersistentKernel:
    """What a persistent kernel is: record layouts, ring capacity, bodies, state.

    ``request_dtype`` and ``reply_dtype`` are the record layouts of the input and
    output slots (structured dtypes, ideally with ``align=True``; see
    ``docs/ring-protocol.md``). ``capacity`` is the number of slots of each ring.
    The kernel answers every request with exactly one reply, in request order.
    ``max_batch`` caps how many requests one body call gets (default: ``capacity``).
    ``state`` is the initial value of optional device-resident state: the backend
    copies it to device memory at launch, and the body receives it with every batch.

    Bodies are registered per backend name (``"cpu"``, ``"cuda"``, ...):

    * ``cpu``: a callable ``body(requests) -> replies`` (or ``body(requests, state)``
      when the kernel has state) over NumPy record arrays, batch in, batch out: it
      gets a read-only array of ``n >= 1`` requests and returns ``n`` replies of
      ``reply_dtype``. The request array is only valid during the call.
    * ``metal``: a callable over MLX arrays (MLX has no structured dtypes):
      ``body(requests) -> replies`` (``body(requests, state)`` with state), where
      ``requests`` maps each request field name to an MLX array with one row per
      request, in the field's dtype, and ``replies`` maps every reply field name to an
      array of ``n`` rows; with state it may also return ``(replies, new_state)``.
      A wrong reply (missing or unknown field, wrong shape) crashes the kernel with
      ``ErrorCode.BAD_REPLY`` naming the field. See :mod:`pdc_metal._persistent`.
    * compiling backends: a :class:`DeviceSource` (a plain ``str`` is taken as the
      source of a function named ``pdc_body``).

    Use :meth:`body` as a decorator, :meth:`add_body`, or :func:`persistent_kernel`.
    """

    def __init__(
        self,
        name: str,
        request_dtype: npt.DTypeLike,
        reply_dtype: npt.DTypeLike,
        *,
        capacity: int = 256,
        max_batch: int | None = None,
        state: npt.ArrayLike | None = None,
        bodies: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a persistent kernel needs a non-empty str name, not {name!r}")
        self.name = name
        self.layout = RingLayout(request_dtype, reply_dtype, capacity)
        if max_batch is None:
            max_batch = capacity
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, not {max_batch!r}")
        self.max_batch = max_batch
        self.state: npt.NDArray[Any] | None = None
        if state is not None:
            initial = np.array(state, copy=True)
            record_dtype(initial.dtype, "state")
            self.state = initial
        self._bodies: dict[str, Any] = {}
        for backend, body in (bodies or {}).items():
            self.add_body(backend, body)

    @property
    def request_dtype(self) -> np.dtype[Any]:
        return self.layout.request_dtype

    @property
    def reply_dtype(self) -> np.dtype[Any]:
        return self.layout.reply_dtype

    @property
    def capacity(self) -> int:
        return self.layout.in_capacity

    @property
    def bodies(self) -> Mapping[str, Any]:
        """The registered bodies by backend name (read-only)."""
        return MappingProxyType(self._bodies)

    def add_body(self, backend: str, body: Any) -> PersistentKernel:
        """Register ``body`` for ``backend`` (replacing any previous one); returns self."""
        key = _backend_key(backend)
        if isinstance(body, str):
            body = DeviceSource(body)
        if key in _CALLABLE_BODIES and not callable(body):
            raise TypeError(
                f"the {key} body of persistent kernel {self.name!r} must be a callable over "
                f"{_CALLABLE_BODIES[key]}, not {type(body).__name__}"
            )
        if body is None:
            raise TypeError(f"the {key} body of persistent kernel {self.name!r} is None")
        self._bodies[key] = body
        return self

    def body(self, backend: str) -> Callable[[F], F]:
        """Decorator registering the decorated function as the body for ``backend``."""

        def register(fn: F) -> F:
            self.add_body(backend, fn)
            return fn

        return register

    def body_for(self, backend: str) -> Any:
        """The body for ``backend`` (``"cuda:1"`` counts as ``"cuda"``).

        Raises :class:`~pdc_core.KernelBodyMissing` naming the backends that have one.
        """
        key = _backend_key(backend)
        try:
            return self._bodies[key]
        except KeyError:
            have = ", ".join(sorted(self._bodies)) or "none"
            raise KernelBodyMissing(
                f"persistent kernel {self.name!r} has no body for the {key} backend; "
                f"it has bodies for: {have}"
            ) from None

    def __repr__(self) -> str:
        return (
            f"<PersistentKernel {self.name!r} {self.request_dtype} -> {self.reply_dtype} "
            f"capacity={self.capacity} bodies={sorted(self._bodies)}>"
        )


def persistent_kernel(
    *,
    request_dtype: npt.DTypeLike,
    reply_dtype: npt.DTypeLike,
    capacity: int = 256,
    name: str | None = None,
    max_batch: int | None = None,
    state: npt.ArrayLike | None = None,
    backend: str = "cpu",
) -> Callable[[Callable[..., Any]], PersistentKernel]:
    """Decorator: make a :class:`PersistentKernel` whose ``backend`` body is the function.

    ::

        @persistent_kernel(request_dtype=REQ, reply_dtype=REP, capacity=64)
        def double(requests):
            replies = np.empty(len(requests), REP)
            replies["y"] = requests["x"] * 2
            return replies

        double.add_body("cuda", CUDA_SOURCE)
    """

    def make(fn: Callable[..., Any]) -> PersistentKernel:
        kernel = PersistentKernel(
            name or str(getattr(fn, "__name__", "kernel")),
            request_dtype,
            reply_dtype,
            capacity=capacity,
            max_batch=max_batch,
            state=state,
        )
        kernel.add_body(backend, fn)
        return kernel

    return make


# --------------------------------------------------------------------------------------
# How the host waits
# --------------------------------------------------------------------------------------


def _current_sleep() -> Callable[[float], Awaitable[None]]:
    """The running library's own ``sleep`` (cheaper per call than ``anyio.sleep``)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return asyncio.sleep
    try:
        import trio

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):
        return anyio.sleep
    return trio.sleep


class HostWaiter(abc.ABC):
    """How the host's leader task waits for the device side to make progress.

    The session calls :meth:`begin` when a task becomes leader, then loops: look at
    the ring, call :meth:`progressed` if something moved, and ``await`` :meth:`wait`
    when what it waits for has not happened yet. ``wait`` may return early; it must
    not block the event loop, and it must return soon after :meth:`kick` (called by
    other host tasks when they changed something the leader may be waiting for).
    """

    def begin(self) -> None:  # noqa: B027 - optional hook
        """A task became the leader."""

    def progressed(self) -> None:  # noqa: B027 - optional hook
        """The leader saw the device side make progress."""

    def kick(self) -> None:  # noqa: B027 - optional hook
        """Another host task changed the session's state: make :meth:`wait` return soon."""

    @abc.abstractmethod
    async def wait(self, outstanding: bool) -> None:
        """Wait a little. ``outstanding``: replies are due from the device side."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the waiter holds (called once, in the event loop, at the end)."""


class PollingWaiter(HostWaiter):
    """Polls inside the event loop: ``sleep(0)`` while replies are due, backing off when idle.

    While replies are outstanding it yields with ``sleep(0)`` for ``spin`` seconds
    after the last progress (a device answers in microseconds; a selector's
    resolution is a millisecond), then sleeps ``min_sleep`` doubling up to
    ``max_sleep``. With nothing outstanding it goes straight to the growing sleeps.
    It never blocks the event loop and runs no thread.
    """

    def __init__(
        self, *, spin: float = 0.001, min_sleep: float = 0.0001, max_sleep: float = 0.001
    ) -> None:
        if not (spin >= 0 and 0 < min_sleep <= max_sleep):
            raise ValueError("need spin >= 0 and 0 < min_sleep <= max_sleep")
        self.spin = spin
        self.min_sleep = min_sleep
        self.max_sleep = max_sleep
        self._sleep: Callable[[float], Awaitable[None]] | None = None
        self._last = 0.0
        self._delay = 0.0
        self._kicked = False

    def begin(self) -> None:
        self._last = time.perf_counter()
        self._delay = 0.0

    def progressed(self) -> None:
        self._last = time.perf_counter()
        self._delay = 0.0

    def kick(self) -> None:
        self._kicked = True

    async def wait(self, outstanding: bool) -> None:
        sleep = self._sleep
        if sleep is None:
            sleep = self._sleep = _current_sleep()
        if self._kicked:
            self._kicked = False
            self._delay = 0.0
            await sleep(0)
            return
        if outstanding and time.perf_counter() - self._last < self.spin:
            await sleep(0)
            return
        self._delay = min(self.max_sleep, max(self.min_sleep, self._delay * 2))
        await sleep(self._delay)


# --------------------------------------------------------------------------------------
# The handle a backend returns
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelStatus:
    """A snapshot of a resident kernel's control block."""

    started: bool
    paused: bool
    done: bool
    error_code: int
    error_message: str
    stop: StopMode
    pause_requested: bool
    in_head: int
    in_tail: int
    out_head: int
    out_tail: int
    batches: int
    exited: bool


class ResidentKernel(abc.ABC):
    """A persistent kernel resident on a device: what ``launch_persistent_kernel`` returns.

    **Backend authors** subclass it and implement :meth:`wake` and :attr:`exited`, and
    may override :attr:`failure`, :attr:`error_cause`, :meth:`host_waiter`,
    :meth:`read_state` and :meth:`release`. The device side must follow
    ``docs/ring-protocol.md`` on :attr:`memory`, whose header and indices the host has
    initialised before the launch. ``launch_persistent_kernel`` returns once the
    launch is queued; it must not wait for the ``STARTED`` word (the session does).

    **Everything else** -- stop, pause, resume, status, error -- is the protocol,
    implemented here on the control block: stores to the host-owned words followed by
    :meth:`wake`, loads of the kernel-owned ones. Use :class:`PersistentKernelSession`
    rather than this handle to exchange records.
    """

    def __init__(self, backend: Backend, kernel: PersistentKernel, memory: RingMemory) -> None:
        self.backend = backend
        self.kernel = kernel
        self.memory = memory

    # -- implemented by backends ------------------------------------------------------

    @abc.abstractmethod
    def wake(self) -> None:
        """Doorbell: the host stored ``IN_HEAD``, ``OUT_TAIL``, ``STOP`` or ``PAUSE``.

        Called from the event loop's thread right after the store; must be cheap and
        must not block. A device that polls the control block (CUDA) does nothing.
        """

    @property
    @abc.abstractmethod
    def exited(self) -> bool:
        """True once the device side's execution has ended (thread returned, kernel done).

        Only then may the ring memory be released.
        """

    @property
    def failure(self) -> BaseException | None:
        """A failure of the execution itself, seen by the backend (launch error, device
        fault, a worker that died); ``None`` when there was none. The error *word* is
        separate: it is what the kernel reported about itself."""
        return None

    @property
    def error_cause(self) -> BaseException | None:
        """The host-side exception behind the error word, when the backend has one (the
        CPU backend keeps the exception the body raised)."""
        return None

    def host_waiter(self) -> HostWaiter:
        """How the host should wait for this kernel; the default polls in the event loop."""
        return PollingWaiter()

    def read_state(self) -> npt.NDArray[Any] | None:
        """A host copy of the device-resident state (``None`` without state).

        Consistent only while the kernel is paused or after it has stopped.
        """
        return None

    def release(self) -> None:  # noqa: B027 - optional hook
        """Free what the launch holds; called once, only after :attr:`exited`."""

    # -- the protocol, the same for every backend ---------------------------------------

    def _store32(self, offset: Offset, value: int) -> None:
        self.memory.words32[offset >> 2] = value

    def request_stop(self, mode: StopMode = StopMode.NOW) -> None:
        """Store ``STOP`` (``NOW`` wins over ``DRAIN``) and ring the doorbell."""
        if self.memory.load32(Offset.STOP) != StopMode.NOW:
            self._store32(Offset.STOP, int(mode))
        self.wake()

    def pause(self) -> None:
        """Ask the kernel to park between batches (see :attr:`paused` for the ack)."""
        self._store32(Offset.PAUSE, 1)
        self.wake()

    def resume(self) -> None:
        """Let a paused kernel go on."""
        self._store32(Offset.PAUSE, 0)
        self.wake()

    @property
    def started(self) -> bool:
        return bool(self.memory.load32(Offset.STARTED))

    @property
    def paused(self) -> bool:
        return bool(self.memory.load32(Offset.PAUSED))

    @property
    def done(self) -> bool:
        return bool(self.memory.load32(Offset.DONE))

    @property
    def error(self) -> PersistentKernelError | None:
        """The error the kernel reported (error word), or the backend saw; else ``None``."""
        code = self.memory.load32(Offset.ERROR_CODE)
        if code:
            error = PersistentKernelError(self.kernel.name, code, self.memory.error_message())
            error.__cause__ = self.error_cause
            return error
        failure = self.failure
        if failure is not None:
            error = PersistentKernelError(
                self.kernel.name, 0, f"{type(failure).__name__}: {failure}"
            )
            error.__cause__ = failure
            return error
        return None

    @property
    def status(self) -> KernelStatus:
        memory = self.memory
        words = memory.snapshot()
        return KernelStatus(
            started=bool(words["started"]),
            paused=bool(words["paused"]),
            done=bool(words["done"]),
            error_code=words["error_code"],
            error_message=memory.error_message(),
            stop=StopMode(words["stop"]),
            pause_requested=bool(words["pause"]),
            in_head=words["in_head"],
            in_tail=words["in_tail"],
            out_head=words["out_head"],
            out_tail=words["out_tail"],
            batches=words["batches"],
            exited=self.exited,
        )

    async def wait_exited(self, timeout: float) -> bool:
        """Wait (polling, backing off to 1 ms) until :attr:`exited`; False on timeout."""
        deadline = time.monotonic() + timeout
        delay = 0.0
        while not self.exited:
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(delay)
            delay = min(0.001, delay * 2 or 0.00005)
        return True

    async def stop(self, timeout: float = 5.0, *, drain: bool = False) -> None:
        """Request a stop and wait until the kernel is done and its execution has ended.

        This handle does not consume replies: with ``drain=True`` and a full output
        ring nothing can finish (a :class:`PersistentKernelSession` drains while it
        stops). Raises :class:`~pdc_core.KernelStopTimeout` after ``timeout`` seconds,
        describing the control block; never hangs.
        """
        self.request_stop(StopMode.DRAIN if drain else StopMode.NOW)
        deadline = time.monotonic() + timeout
        delay = 0.0
        with anyio.CancelScope(shield=True):
            while not (self.done or self.exited):
                if time.monotonic() >= deadline:
                    raise _stop_timeout(self, timeout)
                await anyio.sleep(delay)
                delay = min(0.001, delay * 2 or 0.00005)
            if not await self.wait_exited(max(0.0, deadline - time.monotonic())):
                raise _stop_timeout(self, timeout)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kernel.name!r} on {self.backend.qualified_name}>"


def _stop_timeout(resident: ResidentKernel, timeout: float) -> KernelStopTimeout:
    memory = resident.memory
    done = memory.load32(Offset.DONE)
    why = (
        "its done word is set but its execution has not ended"
        if done
        else "its done word is still 0"
    )
    return KernelStopTimeout(
        f"persistent kernel {resident.kernel.name!r} on {resident.backend.qualified_name} did "
        f"not stop within {timeout:g} s: {why} ({memory.describe()}); its ring memory is "
        "kept alive"
    )


# --------------------------------------------------------------------------------------
# The host session
# --------------------------------------------------------------------------------------


def backend_for(kernel: PersistentKernel, backend: Backend | str | None) -> Backend:
    """The backend that will run ``kernel``: ``backend``, a name, or the best available.

    Checks everything that can be checked before a launch: raises :class:`TypeError`,
    :class:`~pdc_core.BackendUnavailable`, :class:`~pdc_core.CapabilityError` (no
    persistent kernels) or :class:`~pdc_core.KernelBodyMissing` (no body for it).
    """
    from ._backend import Backend, Capability
    from ._registry import get_backend

    if not isinstance(kernel, PersistentKernel):
        raise TypeError(f"expected a PersistentKernel, not {type(kernel).__name__}")
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend)
    elif not isinstance(backend, Backend):
        raise TypeError(f"backend must be a Backend or a name, not {type(backend).__name__}")
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
    caller with an error, or was reported by ``receive``)."""

    sent: int
    replied: int
    received: int
    discarded: int
    batches: int
    unprocessed: int


class _Pending:
    """The replies awaited by one ``request``/``request_batch`` call.

    ``replies`` stays ``None`` until the first replies arrive; when they all arrive in
    one piece it is a view of the copy read from the ring (no second copy).
    """

    __slots__ = ("count", "error", "filled", "replies")

    def __init__(self, count: int) -> None:
        self.count = count
        self.replies: npt.NDArray[Any] | None = None
        self.filled = 0
        self.error: BaseException | None = None

    def fill(self, replies: npt.NDArray[Any]) -> None:
        take = len(replies)
        if self.filled == 0 and take == self.count:
            self.replies = replies
        else:
            if self.replies is None:
                self.replies = np.empty(self.count, dtype=replies.dtype)
            self.replies[self.filled : self.filled + take] = replies
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


class PersistentKernelSession:
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

    One event loop drives a session; it is not thread-safe.
    """

    def __init__(
        self,
        kernel: PersistentKernel,
        backend: Backend,
        resident: ResidentKernel,
        *,
        receive_window: int | None = None,
    ) -> None:
        self.kernel = kernel
        self.backend = backend
        self.resident = resident
        self.memory = resident.memory
        self._ring = RingHost(self.memory)
        self._waiter = resident.host_waiter()
        self._wake = resident.wake
        layout = kernel.layout
        self.receive_window = (
            layout.in_capacity + layout.out_capacity if receive_window is None else receive_window
        )
        if self.receive_window < 1:
            raise ValueError(f"receive_window must be at least 1, not {self.receive_window}")
        self._state = SessionState.STARTING
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
        self._watchers: list[Any] = []  # kit waiters of tasks in watch_until
        self._final = False  # the kernel is done (or failed) and its replies are collected
        self._idle_pumps = 0
        self._terminal: Callable[[], ActorStopped] | None = None
        self._error: PersistentKernelError | None = None
        self._error_reported = False
        self._released = False  # stop() is done with the kernel
        self._freed = False  # the waiter is closed and the resident released
        # A session dropped without being closed still asks its kernel to stop, so an
        # abandoned worker thread or resident kernel does not run forever.
        self._finalizer = weakref.finalize(self, resident.request_stop, StopMode.NOW)

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        kernel: PersistentKernel,
        backend: Backend | str | None = None,
        *,
        launch_timeout: float = 10.0,
        receive_window: int | None = None,
        **options: Any,
    ) -> PersistentKernelSession:
        """Allocate the rings, launch ``kernel`` and wait until it is resident.

        ``backend`` is a :class:`Backend` or a name for :func:`~pdc_core.get_backend`
        (default: the best available). ``options`` go to the backend's
        ``launch_persistent_kernel`` (see its documentation). Raises
        :class:`~pdc_core.CapabilityError` for a backend without persistent kernels,
        :class:`~pdc_core.KernelBodyMissing` when ``kernel`` has no body for it, and
        :class:`~pdc_core.PersistentKernelError` when the kernel fails to start or does
        not signal ``STARTED`` within ``launch_timeout`` seconds (it is then stopped).
        """
        backend = backend_for(kernel, backend)
        memory = RingMemory.allocate(backend, kernel.layout)
        resident = backend.launch_persistent_kernel(kernel, memory, **options)
        if not isinstance(resident, ResidentKernel):
            raise TypeError(
                f"{backend!r}.launch_persistent_kernel returned {type(resident).__name__}, "
                "not a ResidentKernel"
            )
        session = cls(kernel, backend, resident, receive_window=receive_window)
        try:
            with anyio.fail_after(launch_timeout):
                await session.wait_until(lambda: session._ring.started)
        except TimeoutError:
            await session._abort()
            raise PersistentKernelError(
                kernel.name,
                0,
                f"it did not signal STARTED within {launch_timeout:g} s on "
                f"{backend.qualified_name} ({session.memory.describe()})",
            ) from None
        except BaseException:
            await session._abort()
            raise
        if session._final:
            await session._abort()
            if session._error is not None:
                raise session._error
            raise PersistentKernelError(kernel.name, 0, "it stopped before it started")
        session._state = SessionState.RUNNING
        return session

    async def _abort(self) -> None:
        with anyio.CancelScope(shield=True):
            with suppress(KernelStopTimeout, ActorStopped):
                await self.stop(timeout=5.0)

    async def __aenter__(self) -> PersistentKernelSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose(_raise_crash=exc is None)

    async def aclose(self, *, _raise_crash: bool = True) -> None:
        """Stop the kernel (see :meth:`stop`) and release everything.

        If the kernel crashed and no caller has been told yet, raises the
        :class:`~pdc_core.ActorCrashed` here, so a crash is never silent.
        """
        await self.stop()
        if _raise_crash and self._error is not None and not self._error_reported:
            self._raise_terminal()

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def error(self) -> PersistentKernelError | None:
        """What the kernel reported (or the backend saw) if it crashed, else ``None``."""
        return self._error

    @property
    def capacity(self) -> int:
        return self.kernel.capacity

    @property
    def statistics(self) -> SessionStatistics:
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

    # -- the ring ---------------------------------------------------------------------------

    def _pump(self) -> bool:
        """Collect published replies and notice the end of the kernel; never waits."""
        if self._final:
            return False
        ring = self._ring
        if ring.load_out_head() != ring.out_tail:
            self._route(ring.read_loaded())
            self._wake()
            return True
        if ring.done:
            self._finish()
            return True
        # The done word is the signal; ``exited`` (which may cost a driver call) only
        # catches a device side that died without setting it, so look now and then.
        self._idle_pumps += 1
        if not self._idle_pumps & 15 and self.resident.exited:
            self._finish()
            return True
        return False

    def _pump_all(self) -> bool:
        """Pump until nothing moves (replies, then the done word, may come in one go)."""
        progressed = False
        while self._pump():
            progressed = True
        return progressed

    def _route(self, replies: npt.NDArray[Any]) -> None:
        count = len(replies)
        position = 0
        seq = self._replied
        routes = self._routes
        while position < count:
            route = routes[0]
            take = min(route.end - seq, count - position)
            sink = route.sink
            if sink is _RECEIVE:
                self._inbox.append(replies[position : position + take])
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
            self._error = error
            self._state = SessionState.CRASHED
            crash_error = error

            def crashed() -> ActorStopped:
                return ActorCrashed(name, crash_error)

            self._terminal = crashed
        else:
            self._state = SessionState.STOPPED
            detail = f"; {unprocessed} published request(s) were not handled" if unprocessed else ""

            def stopped() -> ActorStopped:
                return ActorStopped(f"persistent kernel {name!r} is stopped{detail}", actor_id=name)

            self._terminal = stopped
        for route in self._routes:
            sink = route.sink
            if isinstance(sink, _Pending) and sink.error is None:
                sink.error = self._terminal()
            elif sink is _DISCARD:
                self._discarded += route.end - route.start
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
        while True:
            if self._pump_all():
                self._wake_followers()
            if self._satisfied(predicate):
                return
            if not self._leader:
                self._leader = True
                try:
                    await self._lead(predicate)
                finally:
                    self._leader = False
                    if self._released:
                        self._release()
                    else:
                        self._promote()
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
        """
        kit = current_kit()
        delay = _WATCH_MIN
        while True:
            if not self._leader and self._pump_all():
                delay = _WATCH_MIN
                self._wake_followers()
            if self._satisfied(predicate):
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
            if self._pump_all():
                waiter.progressed()
                if self._followers:
                    self._wake_followers()
            elif self._followers:
                # A follower may wait for a control word (paused) that moves no reply.
                self._wake_followers()
            if self._final or predicate():
                return
            await waiter.wait(ring.in_head != ring.out_tail)

    # -- sending ------------------------------------------------------------------------------

    async def send(self, record: Any, *, reply: bool = True) -> int:
        """Publish one request; return its sequence number (its reply's place in order).

        Waits while the ring is full (backpressure). The reply is delivered by
        :meth:`receive`, or dropped with ``reply=False`` (fire and forget).
        """
        batch = coerce_record(record, self.kernel.request_dtype)
        return await self._send(batch, _RECEIVE if reply else _DISCARD)

    async def send_batch(self, records: Any, *, reply: bool = True) -> int:
        """Publish a batch of requests in order; return the first one's sequence number.

        A batch larger than the free space is written in pieces as space frees up.
        Every record is validated before the first is written.
        """
        batch = coerce_batch(records, self.kernel.request_dtype)
        return await self._send(batch, _RECEIVE if reply else _DISCARD)

    async def _send(self, batch: npt.NDArray[Any], sink: int) -> int:
        self._check_open()
        first = self._ring.in_head
        total = len(batch)
        done = self._write(batch, sink)
        while done < total:
            await self.wait_until(lambda: self._free_for(sink) > 0)
            self._check_open()
            done += self._write(batch[done:], sink)
        return first

    # -- requests ------------------------------------------------------------------------------

    async def request(self, record: Any) -> Any:
        """Send one request and return its reply (a record of the reply dtype)."""
        batch = coerce_record(record, self.kernel.request_dtype)
        return (await self._request(batch))[0]

    async def request_batch(self, records: Any) -> npt.NDArray[Any]:
        """Send a batch and return its replies, in order, as an array of the reply dtype."""
        batch = coerce_batch(records, self.kernel.request_dtype)
        return await self._request(batch)

    async def _request(self, batch: npt.NDArray[Any]) -> npt.NDArray[Any]:
        self._check_open()
        total = len(batch)
        if total == 0:
            return np.empty(0, dtype=self.kernel.reply_dtype)
        pending = _Pending(total)
        try:
            done = self._write(batch, pending)
            while done < total:
                await self.wait_until(
                    lambda: pending.error is not None or self._ring.free_slots() > 0
                )
                if pending.error is not None:
                    break
                self._check_open()
                done += self._write(batch[done:], pending)
            if pending.filled < total and pending.error is None:
                await self.wait_until(lambda: pending.filled == total or pending.error is not None)
        except BaseException:
            self._abandon(pending)
            raise
        if pending.filled < total:
            if pending.error is None:  # pragma: no cover - wait_until only returns when final
                self._check_open()
            assert pending.error is not None
            if self._error is not None:
                self._error_reported = True
            raise pending.error
        assert pending.replies is not None
        return pending.replies

    def _abandon(self, pending: _Pending) -> None:
        for route in self._routes:
            if route.sink is pending:
                route.sink = _DISCARD

    # -- receiving -----------------------------------------------------------------------------

    async def receive(self) -> Any:
        """The next reply to a :meth:`send`, in order; waits for one.

        After the kernel stops, replies already collected are still returned; then it
        raises :class:`~pdc_core.ActorStopped` (or ``ActorCrashed``).
        """
        return (await self.receive_batch(1))[0]

    async def receive_batch(self, max_count: int | None = None) -> npt.NDArray[Any]:
        """Between 1 and ``max_count`` (default: all available) replies to sends, in order."""
        if max_count is not None and max_count < 1:
            raise ValueError(f"max_count must be at least 1, not {max_count}")
        self._pump_all()
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
        """
        self._check_open()
        self.resident.pause()
        await self.wait_until(lambda: self._ring.paused)
        self._check_open()
        self._state = SessionState.PAUSED

    async def resume(self) -> None:
        """Let a paused kernel go on; returns once it has left its pause."""
        self._check_open()
        self.resident.resume()
        await self.wait_until(lambda: not self._ring.paused)
        self._check_open()
        self._state = SessionState.RUNNING

    async def stop(self, timeout: float = 5.0, *, drain: bool = False) -> None:
        """Stop the kernel and release its memory; idempotent.

        ``drain=False``: the kernel finishes the batch in hand and stops; requests it
        had not consumed fail with :class:`~pdc_core.ActorStopped`. ``drain=True``: it
        first answers everything already published (replies keep flowing to their
        callers meanwhile). Either way, every reply the kernel published is delivered.
        Shielded from cancellation, bounded by ``timeout``; raises
        :class:`~pdc_core.KernelStopTimeout` if the kernel has not stopped by then
        (the memory is then kept, since the device may still use it).
        """
        if self._released:
            return
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
                    raise _stop_timeout(self.resident, timeout)
            if not await self.resident.wait_exited(max(0.0, deadline - time.monotonic())):
                raise _stop_timeout(self.resident, timeout)
            if not self._released:
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

    def __repr__(self) -> str:
        return (
            f"<PersistentKernelSession {self.kernel.name!r} on {self.backend.qualified_name} "
            f"{self._state.value}>"
        )


@asynccontextmanager
async def open_persistent_kernel(
    kernel: PersistentKernel,
    backend: Backend | str | None = None,
    *,
    launch_timeout: float = 10.0,
    receive_window: int | None = None,
    **options: Any,
) -> AsyncIterator[PersistentKernelSession]:
    """Launch ``kernel`` and yield its :class:`PersistentKernelSession`; stop it on exit.

    ::

        async with open_persistent_kernel(double, "cpu") as kernel:
            reply = await kernel.request((1, 2.0))

    On exit the kernel is stopped (shielded from cancellation, bounded in time) and
    its memory released; a crash nobody was told about is raised there.
    """
    session = await PersistentKernelSession.start(
        kernel,
        backend,
        launch_timeout=launch_timeout,
        receive_window=receive_window,
        **options,
    )
    async with session:
        yield session
