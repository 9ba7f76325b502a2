"""A resident kernel as the host sees it, and how the host waits for it.

:class:`ResidentKernel` is what ``Backend.launch_persistent_kernel`` returns: a
backend implements how its device side runs (``wake``, ``exited``, optionally
``host_waiter``), and the protocol-level control (stop, pause, status, error) is
implemented here once, on the ring's control block, for every backend.

How the host waits: one waiting task at a time (the session's *leader*) watches the
ring through a :class:`HostWaiter` obtained from the kernel. The default,
:class:`PollingWaiter`, polls inside the event loop with ``sleep(0)`` while replies
are outstanding and backs off to short sleeps when idle; a backend whose device side
shares the host's interpreter supplies a waiter that sleeps in the event loop's
selector until its worker signals, because a host spinning in the loop starves a
worker that needs the GIL.
"""

# ruff: noqa: ASYNC109
# ``wait_exited(timeout)`` must be bounded even while the caller is being cancelled.

from __future__ import annotations

import abc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import numpy.typing as npt

from .._exceptions import KernelStopTimeout, PersistentKernelError
from .._loop import check_timeout, current_sleep
from ._device import DeviceLike
from ._ring import Offset, RingHost, RingMemory, StopMode

if TYPE_CHECKING:
    from ._persistent_kernel import PersistentKernelSpec

__all__ = ["HostWaiter", "KernelStatus", "PollingWaiter", "ResidentKernel", "stop_timeout_error"]


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
        """Wait a little. ``outstanding``: replies are due from the device side.

        Called by the session's leader in the event loop, which looks at the ring again
        after it returns. Cancelling it must end the wait only, leaving the waiter
        usable.
        """

    #: Whether the device side is a thread of this interpreter that needs the GIL to
    #: answer (a host worker): :meth:`spin_until_progress` then gives the GIL up between
    #: looks. A GPU, or a device in native threads, needs no GIL.
    device_needs_gil: bool = False

    def spin_until_progress(self, ring: RingHost, limit: float) -> bool:
        """Wait up to ``limit`` seconds *without* the event loop for the device side to
        publish a reply or finish; return whether it did (a session's ``wait="spin"``).

        It holds the event loop, so it must return within ``limit``. The default
        polls ``OUT_HEAD`` and the done word in a tight loop bounded by ``limit``: no
        sleep, no yield (``time.sleep(0)`` is a timed sleep on Linux that costs the
        timer slack, ~50 us, and ``os.sched_yield()`` measured no better on the host
        build; docs/benchmarks.md). Only when :attr:`device_needs_gil` does it call
        ``time.sleep(0)`` between looks, the one call that lets another Python thread
        run. A backend whose device signals the host can block on that signal
        instead, with a timeout: no CPU burnt while it waits.
        """
        load = ring.load_out_head
        tail = ring.out_tail  # the host's own index: it cannot move while this spins
        clock = time.perf_counter
        deadline = clock() + limit
        if self.device_needs_gil:
            while True:
                if load() != tail or ring.done:
                    return True
                if clock() >= deadline:
                    return False
                time.sleep(0)  # give the GIL to the device's thread
        while True:
            if load() != tail or ring.done:
                return True
            if clock() >= deadline:
                return False

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the waiter holds (called once, in the event loop, at the end)."""


class PollingWaiter(HostWaiter):
    """Polls inside the event loop: ``sleep(0)`` while replies are due, backing off when idle.

    While replies are outstanding it yields with ``sleep(0)`` for ``spin`` seconds
    after the last progress (a device answers in microseconds; a selector's
    resolution is a millisecond), then sleeps ``min_sleep`` doubling up to
    ``max_sleep``. With nothing outstanding it goes straight to the growing sleeps.
    It never blocks the event loop and runs no thread. ``device_needs_gil``: see
    :attr:`HostWaiter.device_needs_gil`.
    """

    def __init__(
        self,
        *,
        spin: float = 0.001,
        min_sleep: float = 0.0001,
        max_sleep: float = 0.001,
        device_needs_gil: bool = False,
    ) -> None:
        if not (spin >= 0 and 0 < min_sleep <= max_sleep):
            raise ValueError("need spin >= 0 and 0 < min_sleep <= max_sleep")
        self.device_needs_gil = device_needs_gil
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
        """Yield (``sleep(0)``) after a :meth:`kick` or while replies are due within
        ``spin`` of the last progress; else sleep, doubling from ``min_sleep`` to
        ``max_sleep``. Cancelling it ends the sleep only."""
        sleep = self._sleep
        if sleep is None:
            sleep = self._sleep = current_sleep()
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
    implemented here on the control block: the host-owned words stored by its
    :attr:`ring` (the host end, their one writer) followed by :meth:`wake`, loads of the
    kernel-owned ones. Use :class:`PersistentKernelSession` rather than this handle to
    exchange records.
    """

    def __init__(
        self, backend: DeviceLike, kernel: PersistentKernelSpec, memory: RingMemory
    ) -> None:
        self.backend = backend
        self.kernel = kernel
        self.memory = memory
        self._ring: RingHost | None = None  # made by ``ring`` at first use

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

    def pipeline_host_waiter(self, first: ResidentKernel) -> HostWaiter | None:
        """The host waiter of a pipeline whose last stage is this kernel and whose first
        stage is ``first``, when this kind of kernel has a better one than the generic
        (:meth:`PipelineResident.host_waiter`); ``None`` (the default) otherwise."""
        return None

    # -- the protocol, the same for every backend ---------------------------------------

    @property
    def ring(self) -> RingHost:
        """The host end of :attr:`memory`: the one :class:`RingHost` of this kernel,
        made at first use, through which the host session exchanges records and this
        handle stores the control words (nothing else stores a host word)."""
        ring: RingHost | None = getattr(self, "_ring", None)
        if ring is None:
            ring = self._ring = RingHost(self.memory)
        return ring

    def request_stop(self, mode: StopMode = StopMode.NOW) -> None:
        """Ask the host end to store ``STOP`` (``NOW`` wins over ``DRAIN``) and ring
        the doorbell."""
        self.ring.request_stop(mode)
        self.wake()

    def pause(self) -> None:
        """Ask the kernel to park between batches (see :attr:`paused` for the ack)."""
        self.ring.set_pause(True)
        self.wake()

    def resume(self) -> None:
        """Let a paused kernel go on."""
        self.ring.set_pause(False)
        self.wake()

    @property
    def started(self) -> bool:
        """The ``STARTED`` word: the kernel is resident and polling its ring."""
        return bool(self.memory.load32(Offset.STARTED))

    @property
    def paused(self) -> bool:
        """The ``PAUSED`` word: the kernel is parked in a pause."""
        return bool(self.memory.load32(Offset.PAUSED))

    @property
    def done(self) -> bool:
        """The ``DONE`` word: the kernel has left its loop (its execution may still be
        ending: see :attr:`exited`)."""
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
        """A snapshot of the control block (every word, the error message) and of
        :attr:`exited`, for diagnostics."""
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
        """Wait (polling, backing off to 1 ms) until :attr:`exited`; False on timeout.

        Cancelling it ends the wait only: the kernel is not affected.
        """
        check_timeout(timeout)
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
        describing the control block; never hangs. Shielded from cancellation: a
        cancelled caller's stop still finishes (within ``timeout``), and the
        cancellation reaches the caller at its next checkpoint.
        """
        check_timeout(timeout)
        self.request_stop(StopMode.DRAIN if drain else StopMode.NOW)
        deadline = time.monotonic() + timeout
        delay = 0.0
        with anyio.CancelScope(shield=True):
            while not (self.done or self.exited):
                if time.monotonic() >= deadline:
                    raise stop_timeout_error(self, timeout)
                await anyio.sleep(delay)
                delay = min(0.001, delay * 2 or 0.00005)
            if not await self.wait_exited(max(0.0, deadline - time.monotonic())):
                raise stop_timeout_error(self, timeout)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kernel.name!r} on {self.backend.qualified_name}>"


def stop_timeout_error(resident: ResidentKernel, timeout: float) -> KernelStopTimeout:
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
