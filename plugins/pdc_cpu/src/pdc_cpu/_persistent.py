"""The CPU backend's persistent kernel: a worker thread running the ring protocol.

The worker is the device side of ``docs/ring-protocol.md``, on the very memory layout
a GPU would use (it drives :class:`pdc_core.RingDevice`, the protocol's reference
device endpoint). It processes each contiguous run of requests with one call of the
kernel's ``cpu`` body over a NumPy record array, so batches cost one Python call.

Waiting, on both sides, never burns the GIL:

* the worker sleeps on a ``threading.Event`` *doorbell* that the host rings
  (:meth:`CpuResidentKernel.wake`) after every store to the control block;
* the host's leader task sleeps in its event loop's selector on one end of a socket
  pair; the worker writes a byte to the other end after it publishes something,
  but only while the host is actually waiting (a flag, checked after a progress
  counter is bumped, so no wake-up is lost).

A Python thread that spins on the control block instead burns a core while idle and
holds the GIL for whole switch intervals (5 ms): round trips get a ~10 ms tail (p99
~50x the default on a 2-core VM), and with a host that also spins on ``sleep(0)`` in
its event loop the median itself is ~5 ms (~50-100x). A host spinning in the loop
alone starves the worker of the GIL too (p99 ~1-2 ms). ``benchmarks/ring_kernel.py``
measures all of these (the options ``worker_wait="spin"`` and ``host_wait="poll"``
exist for that comparison only); see ``docs/benchmarks.md``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from pdc_core import (
    ErrorCode,
    HostWaiter,
    MemoryKind,
    PersistentKernel,
    PollingWaiter,
    ResidentKernel,
    RingDevice,
    RingMemory,
    RingProtocolError,
    StopMode,
)

if TYPE_CHECKING:
    from ._backend import CpuBackend

__all__ = ["CpuResidentKernel"]

WorkerWait = Literal["doorbell", "spin"]

HostWait = Literal["notify", "poll"]


class _BodyFailed(Exception):
    def __init__(self, code: int, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.cause = cause


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class CpuResidentKernel(ResidentKernel):
    """A persistent kernel resident in a worker thread of the CPU backend.

    Launch options (``open_persistent_kernel(kernel, "cpu", **options)``):

    * ``worker_wait``: ``"doorbell"`` (default) sleeps on the doorbell when idle;
      ``"spin"`` polls the control block without sleeping (for measurement only).
    * ``host_wait``: ``"notify"`` (default) makes the host sleep in its selector until
      the worker signals; ``"poll"`` uses the generic in-loop polling of
      :class:`~pdc_core.PollingWaiter` (for measurement only: it starves the worker).
    * ``idle_timeout``: seconds the idle worker sleeps between looks at the control
      block even without a doorbell (default 0.05; the doorbell is what wakes it).

    The device-resident state (when the kernel has one) is a NumPy array the body
    receives as its second argument and may update in place.
    """

    def __init__(
        self,
        backend: CpuBackend,
        kernel: PersistentKernel,
        memory: RingMemory,
        *,
        worker_wait: WorkerWait = "doorbell",
        host_wait: HostWait = "notify",
        idle_timeout: float = 0.05,
    ) -> None:
        super().__init__(backend, kernel, memory)
        if worker_wait not in ("doorbell", "spin"):
            raise ValueError(f"worker_wait must be 'doorbell' or 'spin', not {worker_wait!r}")
        if host_wait not in ("notify", "poll"):
            raise ValueError(f"host_wait must be 'notify' or 'poll', not {host_wait!r}")
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive, not {idle_timeout!r}")
        body = kernel.body_for("cpu")
        self._body: Callable[..., Any] = body
        self._spin = worker_wait == "spin"
        self._host_wait = host_wait
        self._idle_timeout = idle_timeout
        self._bell = threading.Event()
        self._state: npt.NDArray[Any] | None = None
        if kernel.state is not None:
            state = backend.allocate(kernel.state.shape, kernel.state.dtype, MemoryKind.DEVICE)
            np.copyto(state, kernel.state)
            self._state = state
        #: Bumped by the worker after each publish or status change (only it writes it).
        self.progress = 0
        #: True while the host's leader sleeps on the socket (only the host writes it).
        self.host_waiting = False
        self._host_sock, self._worker_sock = socket.socketpair()
        self._host_sock.setblocking(False)
        self._worker_sock.setblocking(False)
        self._failure: BaseException | None = None
        self._error_cause: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"pdc-cpu-kernel-{kernel.name}", daemon=True
        )
        self._released = False
        self._thread.start()

    # -- ResidentKernel -------------------------------------------------------------------

    def wake(self) -> None:
        self._bell.set()

    @property
    def exited(self) -> bool:
        return not self._thread.is_alive()

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def error_cause(self) -> BaseException | None:
        return self._error_cause

    def host_waiter(self) -> HostWaiter:
        if self._host_wait == "poll":
            return PollingWaiter()
        return _NotifyWaiter(self)

    def read_state(self) -> npt.NDArray[Any] | None:
        return None if self._state is None else self._state.copy()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._thread.join()
        self._host_sock.close()
        self._worker_sock.close()

    # -- the worker thread ------------------------------------------------------------------

    def _notify(self) -> None:
        self.progress += 1
        if self.host_waiting:
            with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed
                self._worker_sock.send(b"\0")

    def _sleep(self) -> None:
        """Idle: wait for the doorbell (the caller cleared it before looking)."""
        if not self._spin:
            self._bell.wait(self._idle_timeout)

    def _run(self) -> None:
        device = RingDevice(self.memory)
        try:
            try:
                device.check_header()
            except RingProtocolError as exc:
                device.set_error(ErrorCode.PROTOCOL, str(exc))
                return
            device.mark_started()
            self._notify()
            self._loop(device)
        except _BodyFailed as failed:
            self._error_cause = failed.cause
            device.set_error(failed.code, failed.message)
        except RingProtocolError as exc:
            device.set_error(ErrorCode.PROTOCOL, str(exc))
        except BaseException as exc:  # a bug here must still end in the done word
            self._failure = exc
            device.set_error(ErrorCode.DEVICE, _describe(exc))
        finally:
            device.mark_done()
            self._notify()

    def _loop(self, device: RingDevice) -> None:
        bell = self._bell
        limit = self.kernel.max_batch
        while True:
            bell.clear()  # before looking: a doorbell rung after this is not lost
            stop = device.stop_mode()
            if stop is StopMode.NOW:
                return
            if stop is StopMode.RUN and device.pause_requested():
                self._park(device)
                continue
            index, count = device.next_batch(limit)
            if count == 0:
                if stop is StopMode.DRAIN and device.drained():
                    return
                self._sleep()
                continue
            self._process(device, index, count)
            self._notify()

    def _park(self, device: RingDevice) -> None:
        device.set_paused(True)
        self._notify()
        bell = self._bell
        while True:
            bell.clear()
            if not device.pause_requested() or device.stop_mode() is not StopMode.RUN:
                break
            self._sleep()
        device.set_paused(False)
        self._notify()

    def _process(self, device: RingDevice, index: int, count: int) -> None:
        requests = device.inputs(index, count)
        requests.flags.writeable = False
        try:
            if self._state is None:
                result = self._body(requests)
            else:
                result = self._body(requests, self._state)
        except Exception as exc:
            raise _BodyFailed(ErrorCode.BODY, f"the body raised {_describe(exc)}", exc) from None
        reply_dtype = self.kernel.reply_dtype
        replies = np.asarray(result) if result is not None else None
        if replies is None or replies.dtype != reply_dtype:
            got = "None" if replies is None else f"dtype {replies.dtype}"
            raise _BodyFailed(
                ErrorCode.BAD_REPLY,
                f"the body returned {got} for {count} request(s); it must return "
                f"{count} replies of dtype {reply_dtype}",
            )
        if replies.shape != (count,):
            raise _BodyFailed(
                ErrorCode.BAD_REPLY,
                f"the body returned replies of shape {replies.shape} for {count} "
                f"request(s); it must return exactly one reply per request, shape ({count},)",
            )
        device.outputs(index, count)[...] = replies
        device.publish(count)


class _NotifyWaiter(HostWaiter):
    """The host's leader sleeps in the event loop's selector until the worker signals.

    Under asyncio the socket stays registered with the loop (``add_reader``) for the
    session's life, which halves the cost of a wake-up compared with registering it
    per wait; under trio and other loops it uses their ``wait_readable``.
    """

    def __init__(self, kernel: CpuResidentKernel) -> None:
        self._kernel = kernel
        self._sock = kernel._host_sock
        self._seen = 0
        self._wait_readable: Callable[[], Any] | None = None
        self._asyncio_loop: Any = None
        self._future: Any = None

    def begin(self) -> None:
        self._seen = self._kernel.progress

    def kick(self) -> None:
        if self._kernel.host_waiting:
            with contextlib.suppress(OSError):
                self._kernel._worker_sock.send(b"\0")

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while self._sock.recv(4096):
                pass

    def _setup(self) -> Callable[[], Any]:
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._asyncio_loop = loop
            loop.add_reader(self._sock.fileno(), self._on_readable)

            def wait_asyncio() -> Any:
                self._future = loop.create_future()
                return self._future

            return wait_asyncio
        try:
            import trio

            trio.lowlevel.current_task()
        except (ImportError, RuntimeError):
            import anyio

            return lambda: anyio.wait_readable(self._sock)
        sock = self._sock

        async def wait_trio() -> None:
            await trio.lowlevel.wait_readable(sock)

        return wait_trio

    def _on_readable(self) -> None:
        self._drain()
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, outstanding: bool) -> None:
        kernel = self._kernel
        wait_readable = self._wait_readable
        if wait_readable is None:
            wait_readable = self._wait_readable = self._setup()
        kernel.host_waiting = True
        try:
            if kernel.progress != self._seen:
                return
            await wait_readable()
            if self._asyncio_loop is None:
                self._drain()
        finally:
            kernel.host_waiting = False
            self._future = None
            self._seen = kernel.progress

    def close(self) -> None:
        loop = self._asyncio_loop
        if loop is not None:
            self._asyncio_loop = None
            with contextlib.suppress(Exception):  # the loop may already be closed
                loop.remove_reader(self._sock.fileno())


def launch(
    backend: CpuBackend, kernel: PersistentKernel, rings: RingMemory, **options: Any
) -> CpuResidentKernel:
    """``CpuBackend.launch_persistent_kernel``: start the worker thread."""
    known = {"worker_wait", "host_wait", "idle_timeout"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"unknown launch option(s) for the cpu backend: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    if not isinstance(kernel, PersistentKernel):
        raise TypeError(f"expected a PersistentKernel, not {type(kernel).__name__}")
    if not isinstance(rings, RingMemory) or rings.layout != kernel.layout:
        raise TypeError("rings must be a RingMemory allocated for this kernel's layout")
    return CpuResidentKernel(backend, kernel, rings, **options)
