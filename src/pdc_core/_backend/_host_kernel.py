"""Persistent kernels of host backends: a worker thread running the ring protocol.

A backend whose device computes from host threads (the ``cpu`` backend with NumPy, the
``metal`` backend on MLX, a third-party backend on some other array library) runs a
persistent kernel as a worker thread that is the device side of
``docs/ring-protocol.md``, on the very memory layout a GPU would use. It drives
:class:`~pdc_core.backend.RingDevice` (the protocol's reference device endpoint) and calls the
kernel's body once per contiguous run of requests, so a batch costs one call.
:class:`HostWorkerKernel` is that worker, written once; a backend configures it with

* the backend name whose body it runs (:attr:`HostWorkerKernel.body_backend`, default
  the backend's own name),
* :meth:`HostWorkerKernel.worker_context`: set-up around the worker's loop, on the
  worker thread (metal: a dedicated MLX stream made the thread's default),
* :meth:`HostWorkerKernel.call_body` and :meth:`HostWorkerKernel.store_replies`: how
  a run of request records is handed to the body, and how its result becomes reply
  records in the output slots (default: NumPy record arrays in and out, the ``cpu``
  convention),
* :meth:`HostWorkerKernel.make_state` / :meth:`HostWorkerKernel.state_to_host`: where
  device-resident state lives.

Waiting, on both sides, never burns the GIL:

* the worker sleeps on a *doorbell* (a ``queue.SimpleQueue``, whose hand-off costs
  about half a ``threading.Event``'s) that the host rings
  (:meth:`HostWorkerKernel.wake`) after every store to the control block, but only
  while the worker may be going to sleep (a flag it raises before it looks for work,
  so no ring is lost); the session skips the ring after giving output slots back when
  no request is left unanswered (the worker cannot be waiting for them then);
* the host's leader task sleeps in its event loop's selector on one end of a socket
  pair; the worker writes a byte to the other end (a *signal*) only while the host is
  actually waiting (a flag, checked after a progress counter is bumped, so no wake-up
  is lost). It signals every status change, and replies once half the ring's capacity
  has been published since its last signal or when it has no request left to process
  (then just before it sleeps, so that the woken host finds the interpreter free):
  a host streaming batches through a deep ring wakes twice per ring-full, not once per
  device batch, and refills the ring while the worker works through its other half,
  while a lone request is signalled as soon as it is answered.

A Python thread that spins on the control block instead burns a core while idle and
holds the GIL for whole switch intervals (5 ms): round trips get a ~10 ms tail (p99
~50x the default on a 2-core VM), and with a host that also spins on ``sleep(0)`` in
its event loop the median itself is ~5 ms (~50-100x). A host spinning in the loop
alone starves the worker of the GIL too (p99 ~1-2 ms). ``benchmarks/ring_kernel.py``
measures all of these (the launch options ``worker_wait="spin"`` and
``host_wait="poll"`` exist for that comparison only); see ``docs/benchmarks.md``.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from .._exceptions import BackendError, RecordError, RingProtocolError
from ._contract import MemoryKind
from ._persistent_kernel import PersistentKernelSpec
from ._resident import HostWaiter, PollingWaiter, ResidentKernel
from ._ring import (
    ErrorCode,
    RingDevice,
    RingHost,
    RingMemory,
    StopMode,
    copy_records,
    describe_dtype,
)

if TYPE_CHECKING:
    from ._contract import Backend
    from ._links import StageLink

__all__ = [
    "HostWait",
    "HostWorkerKernel",
    "WorkerWait",
]

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


def _result_kind(result: object) -> str:
    """What a body returned, for an error message: ``a tuple of 2 items``, ``an ndarray``."""
    if isinstance(result, tuple | list):
        return f"a {type(result).__name__} of {len(result)} item(s)"
    name = type(result).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


class HostWorkerKernel(ResidentKernel):
    """A persistent kernel resident in a worker thread of the host process.

    Start one with :meth:`launch` from ``Backend.launch_persistent_kernel``; it returns
    once the thread is started (the session waits for the ``STARTED`` word). The
    thread is named ``pdc-<backend>-kernel-<kernel name>``; it ends once the kernel has
    stored ``DONE``, and :meth:`release` joins it.

    Launch options (``open_persistent_kernel(kernel, backend, **options)``):

    * ``worker_wait``: ``"doorbell"`` (default) sleeps on the doorbell when idle;
      ``"spin"`` polls the control block without sleeping (for measurement only).
    * ``host_wait``: ``"notify"`` (default) makes the host sleep in its selector until
      the worker signals; ``"poll"`` uses the generic in-loop polling of
      :class:`~pdc_core.backend.PollingWaiter` (for measurement only: it starves the worker).
    * ``idle_timeout``: seconds the idle worker sleeps between looks at the control
      block even without a doorbell (default 0.05; the doorbell is what wakes it).

    Errors: an exception from :meth:`call_body` is reported as ``ErrorCode.BODY``, a
    :class:`~pdc_core.RecordError` from :meth:`store_replies` as
    ``ErrorCode.BAD_REPLY`` (the message says what was wrong), anything else the
    worker hits as ``ErrorCode.DEVICE``; the session raises them as
    :class:`~pdc_core.ActorCrashed`, and :attr:`error_cause` keeps the exception the
    body raised. A ``KeyboardInterrupt`` or ``SystemExit`` from the body is a
    ``BODY`` error too, and the session raises it as itself in the event loop's
    thread (chained from the error). Nothing of a failed batch is published.

    **Subclassing** (a host backend with its own array library): override the hooks
    below; everything else -- the protocol loop, waiting, stop, pause, errors -- stays
    here. All hooks except :meth:`make_state` run on the worker thread.
    """

    #: The backend whose body the worker calls (``kernel.body_for``); ``None``: the
    #: name of the backend that launches it.
    body_backend: ClassVar[str | None] = None

    #: The launch options :meth:`launch` accepts (subclasses may add their own).
    launch_options: ClassVar[frozenset[str]] = frozenset(
        {"worker_wait", "host_wait", "idle_timeout", "link"}
    )

    def __init__(
        self,
        backend: Backend,
        kernel: PersistentKernelSpec,
        memory: RingMemory,
        *,
        worker_wait: WorkerWait = "doorbell",
        host_wait: HostWait = "notify",
        idle_timeout: float = 0.05,
        link: StageLink | None = None,
    ) -> None:
        super().__init__(backend, kernel, memory)
        if worker_wait not in ("doorbell", "spin"):
            raise ValueError(f"worker_wait must be 'doorbell' or 'spin', not {worker_wait!r}")
        if host_wait not in ("notify", "poll"):
            raise ValueError(f"host_wait must be 'notify' or 'poll', not {host_wait!r}")
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive, not {idle_timeout!r}")
        self.body: Callable[..., Any] = kernel.body_for(self.body_backend or backend.name)
        self._spin = worker_wait == "spin"
        self._host_wait = host_wait
        self._idle_timeout = idle_timeout
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        #: True from the moment the worker looks for work until it has found some.
        self._worker_idle = False
        #: The device-resident state (what :meth:`make_state` made), or ``None``.
        self.state: Any = None if kernel.state is None else self.make_state(kernel.state)
        #: Bumped by the worker after each publish or status change (only it writes it).
        self.progress = 0
        #: Replies published since the worker last signalled the host (worker only).
        self._unsignalled = 0
        self._signal_every = max(1, kernel.capacity // 2)
        #: True while the host's leader sleeps on the socket (only the host writes it).
        self.host_waiting = False
        #: True while the host's leader blocks on :attr:`spin_bell` (only the host writes it).
        self.host_spinning = False
        #: What a spinning host blocks on, outside its event loop (see ``_signal``).
        self.spin_bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._host_sock, self._worker_sock = socket.socketpair()
        self._host_sock.setblocking(False)
        self._worker_sock.setblocking(False)
        #: The kernel's place in a pipeline (``None``: a kernel on its own); see
        #: :class:`~pdc_core.backend.StageLink`.
        self.link = link
        #: Whose socket and ``host_waiting`` flag :meth:`_signal` uses: this kernel's
        #: own, another stage's of its pipeline, or nobody's (a middle stage).
        self._signal_to: HostWorkerKernel | None = self._signal_target(link)
        self._failure: BaseException | None = None
        self._error_cause: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"pdc-{backend.name}-kernel-{kernel.name}", daemon=True
        )
        self._released = False
        self._thread.start()

    @classmethod
    def launch(
        cls, backend: Backend, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> HostWorkerKernel:
        """``launch_persistent_kernel`` for a host backend: check, then start the worker.

        Unknown options are a ``TypeError`` naming them and the known ones.
        """
        unknown = sorted(set(options) - cls.launch_options)
        if unknown:
            raise TypeError(
                f"unknown launch option(s) for the {backend.name} backend: {', '.join(unknown)} "
                f"(known: {', '.join(sorted(cls.launch_options))})"
            )
        if not isinstance(kernel, PersistentKernelSpec):
            raise TypeError(f"expected a PersistentKernel, not {type(kernel).__name__}")
        link = options.get("link")
        if link is not None:
            link.check(kernel, rings)
        elif not isinstance(rings, RingMemory) or rings.layout != kernel.layout:
            raise TypeError("rings must be a RingMemory allocated for this kernel's layout")
        return cls(backend, kernel, rings, **options)

    # -- hooks for host backends ---------------------------------------------------------

    def make_state(self, initial: npt.NDArray[Any]) -> Any:
        """The device-resident state from its initial value (called once, at launch, on
        the launching thread). Default: the backend's ``DEVICE`` allocation, a copy,
        which works where that allocation is a NumPy array. Where it is anything else
        (a wrapper of the backend's own), this raises :class:`~pdc_core.BackendError`
        before anything starts, naming the hooks the backend must override."""
        state = self.backend.allocate(initial.shape, initial.dtype, MemoryKind.DEVICE)
        if not isinstance(state, np.ndarray):
            raise BackendError(
                f"persistent kernel {self.kernel.name!r} has state, but the "
                f"{self.backend.name} backend's DEVICE memory is "
                f"{type(state).__module__}.{type(state).__qualname__}, not a NumPy array, so "
                f"{type(self).__qualname__}'s default make_state cannot hold it: override "
                "make_state (and state_to_host, to read it back; call_body, if the body "
                "needs the state in another form) in the backend's HostWorkerKernel subclass"
            )
        np.copyto(state, initial)
        return state

    def state_to_host(self, state: Any) -> npt.NDArray[Any]:
        """A host copy of the state, for :meth:`read_state`. Default: ``np.array(state)``,
        which must give the state's own shape and dtype (else a
        :class:`~pdc_core.BackendError` naming this hook and ``make_state``)."""
        host = np.array(state, copy=True)
        initial = self.kernel.state
        if initial is not None and (host.shape, host.dtype) != (initial.shape, initial.dtype):
            raise BackendError(
                f"the state of persistent kernel {self.kernel.name!r} reads back as an array "
                f"of shape {host.shape} and dtype {host.dtype}, not {initial.shape} "
                f"{initial.dtype}: {type(state).__qualname__} is not a NumPy array; override "
                f"state_to_host (with make_state) in the {self.backend.name} backend's "
                "HostWorkerKernel subclass"
            )
        return host

    @contextlib.contextmanager
    def worker_context(self) -> Iterator[None]:
        """Entered on the worker thread around its whole life (after the header check,
        before ``STARTED``); an exception here is reported as ``ErrorCode.DEVICE``.
        Default: nothing."""
        yield

    def call_body(self, requests: npt.NDArray[Any]) -> Any:
        """Call :attr:`body` on a run of ``requests`` (a read-only view of the input
        slots, valid only during the call) and return its result, fully computed.

        Default (the ``cpu`` convention): ``body(requests)``, or ``body(requests,
        state)`` with state. Any exception (``KeyboardInterrupt`` too) is reported as
        ``ErrorCode.BODY``.
        """
        if self.state is None:
            return self.body(requests)
        return self.body(requests, self.state)

    def store_replies(self, result: Any, replies: npt.NDArray[Any]) -> None:
        """Write ``result`` (what :meth:`call_body` returned) into ``replies`` (the
        output slots of the run, a writable record array of ``len(requests)`` records).

        Raise :class:`~pdc_core.RecordError` saying what is wrong with ``result``
        (reported as ``ErrorCode.BAD_REPLY``). Default: ``result`` must be an array of
        exactly ``len(replies)`` records of the reply dtype.
        """
        count = len(replies)
        reply_dtype = replies.dtype
        reason: str | None = None
        try:
            array = np.asarray(result) if result is not None else None
        except (ValueError, TypeError) as exc:  # ragged, such as (replies, new_state)
            array = None
            reason = f"{type(exc).__name__}: {exc}"
        if array is None or array.dtype != reply_dtype:
            # Only here: formatting a structured dtype costs microseconds, and this
            # runs for every batch a body answers.
            if array is not None:
                reason = f"dtype {describe_dtype(array.dtype)}"
            if isinstance(result, tuple):  # most likely (replies, new_state)
                # First, and short: the error word keeps 256 bytes of the message.
                raise RecordError(
                    f"the body returned a tuple of {len(result)} item(s), not an array of "
                    f"{count} reply record(s): a body returns only its replies and updates "
                    "the state array it is given in place ((replies, new_state) is the "
                    "metal body's form)"
                )
            got = "None" if reason is None else f"{_result_kind(result)} ({reason})"
            raise RecordError(
                f"the body returned {got} for {count} request(s); it must return "
                f"{count} replies of dtype {describe_dtype(reply_dtype)}"
            )
        if array.shape != (count,):
            raise RecordError(
                f"the body returned replies of shape {array.shape} for {count} "
                f"request(s); it must return exactly one reply per request, shape ({count},)"
            )
        copy_records(replies, array)

    # -- ResidentKernel -------------------------------------------------------------------

    def wake(self) -> None:
        if self._worker_idle:
            self._bell.put(None)

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
            return PollingWaiter(device_needs_gil=True)
        return _NotifyWaiter(self)

    def _signal_target(self, link: StageLink | None) -> HostWorkerKernel | None:
        """Whose socket this worker signals the host through: its own (a kernel alone, or
        a pipeline's last stage), the last stage's (stage 0 of a pipeline whose last
        stage is a host worker too), or nobody's (a middle stage)."""
        if link is None or link.is_last:
            return self
        last = link.last
        if link.index == 0 and isinstance(last, HostWorkerKernel):
            return last
        return None

    def pipeline_host_waiter(self, first: ResidentKernel) -> HostWaiter | None:
        """:meth:`joint_host_waiter` when ``first`` is a host worker too."""
        return self.joint_host_waiter(first) if isinstance(first, HostWorkerKernel) else None

    def joint_host_waiter(self, first: HostWorkerKernel) -> HostWaiter:
        """The host waiter of a pipeline whose last stage is this kernel and whose first
        stage is ``first`` (launched with a link whose ``signal_to`` names this kernel):
        both signal through this kernel's socket, and the waiter watches both progress
        counters, so a signal of either is never lost."""
        if self._host_wait == "poll":
            return PollingWaiter(device_needs_gil=True)
        return _NotifyWaiter(self, first)

    def read_state(self) -> npt.NDArray[Any] | None:
        return None if self.state is None else self.state_to_host(self.state)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._thread.join()
        self._host_sock.close()
        self._worker_sock.close()

    # -- the worker thread ------------------------------------------------------------------

    def _notify(self) -> None:
        """A status change: tell a waiting host now."""
        self.progress += 1
        self._signal()

    def _signal(self) -> None:
        self._unsignalled = 0
        if self.host_spinning:
            self.spin_bell.put(None)
        target = self._signal_to
        if target is not None and target.host_waiting:
            try:  # noqa: SIM105 - suppress() costs 0.2 us, and this runs per round trip
                target._worker_sock.send(b"\0")
            except OSError:  # full (a wake-up is pending anyway) or closed
                pass

    def wait_until(self, condition: Callable[[], bool]) -> None:
        """Sleep on the doorbell until ``condition()`` holds (worker thread only).

        For a device side that waits for a neighbour (a pipeline stage waiting for the
        next stage to start, pause or finish): the neighbour rings this kernel's
        doorbell after its change; the idle timeout bounds the cost of a missed ring."""
        while True:
            self._worker_idle = True  # before looking: a doorbell rung after this is heard
            if condition():
                return
            self._sleep()

    def _sleep(self) -> None:
        """Idle: wait for the doorbell (the caller raised ``_worker_idle`` before it
        looked; a ring left over from before then only makes it look once more)."""
        if not self._spin:
            try:  # noqa: SIM105 - suppress() costs 0.2 us, and this runs per round trip
                self._bell.get(timeout=self._idle_timeout)
            except queue.Empty:
                pass

    def _run(self) -> None:
        link = self.link
        device = (
            RingDevice(self.memory) if link is None else link.device(self.memory, self.wait_until)
        )
        try:
            try:
                device.check_header()
            except RingProtocolError as exc:
                device.set_error(ErrorCode.PROTOCOL, str(exc))
                return
            with self.worker_context():
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
        limit = self.kernel.max_batch
        now, run, drain = StopMode.NOW, StopMode.RUN, StopMode.DRAIN
        while True:
            self._worker_idle = True  # before looking: a doorbell rung after this is heard
            stop = device.stop_mode()
            if stop is now:
                return
            if stop is run and device.pause_requested():
                self._park(device)
                continue
            index, count = device.next_batch(limit)
            if count == 0:
                if stop is drain and device.drained():
                    return
                # Replies not signalled yet (the last run's, or the output ring is full):
                # signal now that there is nothing left to do, just before sleeping, so
                # that the woken host finds the interpreter free.
                if self._unsignalled:
                    self._signal()
                self._sleep()
                continue
            self._worker_idle = False
            self._process(device, index, count)
            self.progress += 1
            self._unsignalled += count
            if self._unsignalled >= self._signal_every:
                self._signal()

    def _park(self, device: RingDevice) -> None:
        device.set_paused(True)
        self._notify()
        while True:
            self._worker_idle = True
            if not device.pause_requested() or device.stop_mode() is not StopMode.RUN:
                break
            self._sleep()
        device.set_paused(False)
        self._notify()

    def _process(self, device: RingDevice, index: int, count: int) -> None:
        requests = device.inputs(index, count)
        requests.flags.writeable = False
        try:
            result = self.call_body(requests)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit too: the body's own
            raise _BodyFailed(ErrorCode.BODY, f"the body raised {_describe(exc)}", exc) from None
        try:
            self.store_replies(result, device.outputs(index, count))
        except RecordError as exc:
            raise _BodyFailed(ErrorCode.BAD_REPLY, str(exc)) from None
        device.publish(count)


class _NotifyWaiter(HostWaiter):
    """The host's leader sleeps in the event loop's selector until the worker signals.

    Under asyncio the socket stays registered with the loop (``add_reader``) for the
    session's life, which halves the cost of a wake-up compared with registering it
    per wait; under trio and other loops it uses their ``wait_readable``.
    """

    def __init__(self, kernel: HostWorkerKernel, other: HostWorkerKernel | None = None) -> None:
        self._kernel = kernel
        #: A second worker signalling through ``kernel``'s socket (a pipeline's first stage).
        self._other = other
        self._seen_other = 0
        self._sock = kernel._host_sock
        self._seen = 0
        self._wait_readable: Callable[[], Any] | None = None
        self._asyncio_loop: Any = None
        self._future: Any = None

    def begin(self) -> None:
        self._seen = self._kernel.progress
        if self._other is not None:
            self._seen_other = self._other.progress

    def spin_until_progress(self, ring: RingHost, limit: float) -> bool:
        """Block on the worker's signal, outside the event loop, for up to ``limit``:
        the wake-up is the thread hand-off itself, and nothing spins."""
        kernel = self._kernel
        kernel.host_spinning = True
        try:
            if kernel.progress != self._seen:
                return True
            try:
                kernel.spin_bell.get(timeout=limit)
            except queue.Empty:
                return kernel.progress != self._seen
            return True
        finally:
            kernel.host_spinning = False
            self._seen = kernel.progress

    def kick(self) -> None:
        if self._kernel.host_waiting:
            with contextlib.suppress(OSError):
                self._kernel._worker_sock.send(b"\0")

    def _drain(self) -> None:
        # One read: the worker writes a byte per signal and signals only a waiting
        # host, so one read nearly always takes them all, and a second would only
        # fail with EAGAIN (as costly as the first). Bytes left over just make the
        # socket readable again: one spurious look at the ring.
        try:  # noqa: SIM105 - suppress() costs 0.2 us, and this runs per round trip
            self._sock.recv(4096)
        except OSError:
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
        other = self._other
        kernel.host_waiting = True
        try:
            if kernel.progress != self._seen:
                return
            if other is not None and other.progress != self._seen_other:
                return
            await wait_readable()
            if self._asyncio_loop is None:
                self._drain()
        finally:
            kernel.host_waiting = False
            self._future = None
            self._seen = kernel.progress
            if other is not None:
                self._seen_other = other.progress

    def close(self) -> None:
        loop = self._asyncio_loop
        if loop is not None:
            self._asyncio_loop = None
            with contextlib.suppress(Exception):  # the loop may already be closed
                loop.remove_reader(self._sock.fileno())
