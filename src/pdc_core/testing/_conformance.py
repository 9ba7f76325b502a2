"""The conformance suite a backend runs against itself.

Subclass :class:`BackendConformance` in a test module of your plugin and name your
backend::

    from pdc_core.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "mybackend"

pytest then runs every check below against ``get_backend("mybackend")``:

* discovery: devices and availability;
* memory: allocation honours shape and dtype for each memory kind the backend
  declares; copies in both directions (synchronous and on a stream) are *copies*: a
  write to the source after the copy, or to the copy, is never seen through the other;
  ``UnifiedBuffer`` synchronization and the memory pool's statistics; the error
  messages for bad input;
* streams and events: work queued on a stream runs in order, ``synchronize`` returns,
  an event recorded on a stream completes (``done`` becomes ``True``, ``synchronize``
  and ``wait`` return), each within :attr:`BackendConformance.timeout` seconds -- a
  call that never returns fails the check instead of hanging the test run;
* with ``PERSISTENT_KERNELS``: a kernel run through the backend's resident kernel
  (one request, batches across the ring's wrap, pause and resume, a drain stop that
  answers everything published, a stop now that answers nothing more, a body
  error surfacing through the error word as :class:`~pdc_core.ActorCrashed`, and a
  kernel launched with device-resident state that its body updates and that
  ``read_state()`` reads back, paused and stopped). The kit runs a host body (a
  Python callable on the request array) by default; a backend with another body
  format overrides :meth:`BackendConformance.persistent_kernel`,
  :meth:`BackendConformance.failing_persistent_kernel` and
  :meth:`BackendConformance.stateful_persistent_kernel`;
* with ``PYTHON_KERNELS``: the seeds' ``@kernel`` examples (a vector add over
  ``cuda.grid(1)``, a 2-D kernel over ``cuda.grid(2)`` and a shared-memory reduction
  with ``cuda.syncthreads()``), compared with NumPy. A backend whose Python kernels
  are not numba.cuda-style bodies is told apart by the error pdc_core.cuda raises
  outside a kernel, and the check skips with that reason; override
  :meth:`BackendConformance.run_python_kernel_examples` to run its own.

Checks that need a capability the backend does not declare are skipped with that
reason. Async checks are marked ``anyio``: anyio's pytest plugin runs them under the
backends the ``anyio_backend`` fixture names (parametrize it over asyncio and trio).

The kit imports pdc only through its public faces (``pdc_core``, ``pdc_core.backend``,
``pdc_core.cuda``), as a third-party plugin does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import anyio
import numpy as np
import pytest

from pdc_core import (
    ActorCrashed,
    ActorStopped,
    BufferState,
    MemoryPool,
    PersistentKernel,
    PersistentKernelError,
    PersistentKernelSession,
    SessionState,
    UnifiedBuffer,
    cuda,
    get_backend,
    kernel,
)
from pdc_core.backend import Backend, Capability, ErrorCode, MemoryKind

__all__ = ["BackendConformance"]

_T = TypeVar("_T")

_DTYPES = (np.float32, np.float64, np.int8, np.int64, np.complex64)
_RECORD = np.dtype([("id", "<u8"), ("value", "<f4"), ("flag", "u1")], align=True)
_OUTSIDE_KERNEL = "pdc_core.cuda functions can only be called inside a kernel"


def _host(backend: Backend, device_array: Any) -> np.ndarray[Any, Any]:
    return backend.to_host(device_array)


def _bounded(call: Callable[[], _T], seconds: float, what: str) -> _T:
    """``call()``, run on a watchdog thread: fail the check if it has not returned in time.

    A call that never returns is left behind on its daemon thread; the check fails
    with ``what`` instead of hanging the test run.
    """
    result: list[_T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # re-raised on the test's thread
            error.append(exc)

    thread = threading.Thread(target=run, name="pdc-conformance-watchdog", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{what} did not return within {seconds:g} s", pytrace=False)
    if error:
        raise error[0]
    return result[0]


def _state(session: PersistentKernelSession) -> SessionState:
    """The session's state, read afresh (not narrowed by an earlier check)."""
    return session.state


def _eventually(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {seconds:g} s", pytrace=False)
        time.sleep(0.001)


# -- the seeds' kernels (seed 001: performance guide; seed 004: numba/CuPy guide) ---------


@kernel(block=(256,))
def _vector_add(a: Any, b: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < len(out):
        out[i] = a[i] + b[i]


@kernel
def _add_one(A: Any) -> None:
    x, y = cuda.grid(2)
    if x < A.shape[0] and y < A.shape[1]:
        A[x, y] += 1


@kernel
def _reduce(data: Any, out: Any) -> None:
    shared = cuda.shared.array(256, dtype=np.float32)
    i = cuda.grid(1)
    tid = cuda.threadIdx.x
    if i < len(data):
        shared[tid] = data[i]
    else:
        shared[tid] = 0
    cuda.syncthreads()
    s = 128
    while s > 0:
        if tid < s:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        out[cuda.blockIdx.x] = shared[0]


# -- the default persistent kernel: a host body ------------------------------------------

#: The request and reply dtype of the kit's persistent kernel: one ``float32`` each.
_PERSISTENT_DTYPE = np.dtype(np.float32)


def _affine(requests: Any) -> Any:
    """Reply ``2 * x + 1`` to each request ``x``: NumPy arrays, MLX arrays, ... alike."""
    return requests * 2 + 1


def _failing(requests: Any) -> Any:
    raise RuntimeError("conformance: the body reports an error")


#: The initial state of the kit's stateful kernel: (sum of requests, count of requests).
_INITIAL_STATE = np.array([0.5, 0.0], dtype=np.float32)


def _accumulate(requests: Any, state: Any) -> Any:
    """Reply ``2 * x + 1`` and add each request to ``state[0]``, one to ``state[1]``,
    updating the state in place (the host body's convention)."""
    state[0] += requests.sum()
    state[1] += len(requests)
    return requests * 2 + 1


class BackendConformance:
    """Checks every backend must pass; set ``backend_name`` in a subclass."""

    backend_name: ClassVar[str]
    #: Async checks run through anyio's pytest plugin.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    #: Seconds any blocking call (``synchronize``, ``wait``, a persistent-kernel
    #: exchange) may take before the check fails.
    timeout: ClassVar[float] = 10.0

    @pytest.fixture
    def backend(self) -> Backend:
        """The backend under test (override to build it differently)."""
        return get_backend(self.backend_name)

    # -- hooks for the kernel checks -------------------------------------------------

    def persistent_kernel(self, backend: Backend) -> PersistentKernel | None:
        """The kernel the persistent checks run, or ``None`` to skip them.

        It must take ``float32`` requests and answer each ``x`` with the ``float32``
        ``2 * x + 1``, with a capacity of 8. The default has a host body (a Python
        callable on the array of requests) registered under the backend's name: what
        ``HostWorkerKernel`` backends run. Override it for another body format.
        """
        return PersistentKernel(
            "conformance_affine", _PERSISTENT_DTYPE, _PERSISTENT_DTYPE, capacity=8
        ).add_body(backend.name, _affine)

    def failing_persistent_kernel(self, backend: Backend) -> PersistentKernel | None:
        """A kernel like :meth:`persistent_kernel` whose body reports an error on every
        batch (through the error word), or ``None`` to skip that check."""
        return PersistentKernel(
            "conformance_failing", _PERSISTENT_DTYPE, _PERSISTENT_DTYPE, capacity=8
        ).add_body(backend.name, _failing)

    def stateful_persistent_kernel(self, backend: Backend) -> PersistentKernel | None:
        """A kernel like :meth:`persistent_kernel` launched with state, or ``None`` to
        skip that check. Its initial state is ``float32 [0.5, 0]``; for each request
        ``x`` the body adds ``x`` to ``state[0]`` and one to ``state[1]``, in the
        backend's device-resident state, and answers ``2 * x + 1``. The default has a
        host body that updates the NumPy state array it is given in place."""
        return PersistentKernel(
            "conformance_stateful",
            _PERSISTENT_DTYPE,
            _PERSISTENT_DTYPE,
            capacity=8,
            state=_INITIAL_STATE,
        ).add_body(backend.name, _accumulate)

    def run_python_kernel_examples(self, backend: Backend) -> None:
        """Run the seeds' numba.cuda-style ``@kernel`` examples on ``backend``."""
        n = 1000
        a = np.arange(n, dtype=np.float32)
        b = np.full(n, 0.5, dtype=np.float32)
        out = np.zeros(n, dtype=np.float32)
        _vector_add(a, b, out, backend=backend)
        np.testing.assert_array_equal(out, a + b)

        out[...] = 0
        stream = backend.create_stream()
        try:
            _vector_add(a, a, out, stream=stream, backend=backend)
            _bounded(stream.synchronize, self.timeout, "stream.synchronize() after a launch")
        finally:
            stream.close()
        np.testing.assert_array_equal(out, a + a)

        matrix = np.arange(100 * 37, dtype=np.float64).reshape(100, 37)
        expected = matrix + 1
        _add_one(matrix, grid=(7, 3), block=(16, 16), backend=backend)
        np.testing.assert_array_equal(matrix, expected)

        data = np.arange(1000, dtype=np.float32)  # block sums are exact in float32
        sums = np.zeros(4, dtype=np.float32)
        _reduce(data, sums, grid=4, block=256, backend=backend)
        np.testing.assert_array_equal(sums, [data[k * 256 : (k + 1) * 256].sum() for k in range(4)])

    # -- discovery -------------------------------------------------------------------

    def test_declares_itself(self, backend: Backend) -> None:
        """The backend has an identifier name and a distribution, is available, and
        lists at least one device, indexed in order, with its name and kind."""
        assert backend.name.isidentifier()
        assert isinstance(backend.distribution, str)
        assert backend.availability().available
        devices = backend.devices()
        assert devices, "an available backend has at least one device"
        for index, device in enumerate(devices):
            assert device.index == index
            assert device.backend == backend.name
            assert device.kind in {"cpu", "gpu"}
        assert backend.device_info.index == backend.device

    # -- memory ----------------------------------------------------------------------

    @pytest.mark.parametrize("dtype", [*_DTYPES, _RECORD])
    def test_round_trip_copies(self, backend: Backend, dtype: Any) -> None:
        """Host to device and back keeps shape, dtype and values (plain and record
        dtypes), and ``to_host(out=...)`` fills and returns ``out``."""
        host = np.zeros((3, 5), dtype=dtype)
        if host.dtype.names:
            host["id"] = np.arange(15).reshape(3, 5)
            host["value"] = 0.5
        else:
            host[...] = np.arange(15).reshape(3, 5).astype(host.dtype)
        device = backend.to_device(host)
        back = _host(backend, device)
        assert back.shape == host.shape
        assert back.dtype == host.dtype
        np.testing.assert_array_equal(back, host)
        out = np.empty_like(host)
        assert backend.to_host(device, out=out) is out
        np.testing.assert_array_equal(out, host)

    def test_copy_into_existing_device_memory(self, backend: Backend) -> None:
        """``to_device(host, out=device)`` copies into memory already allocated."""
        device = backend.allocate((8,), np.dtype(np.int32), MemoryKind.DEVICE)
        backend.to_device(np.arange(8, dtype=np.int32), out=device)
        np.testing.assert_array_equal(_host(backend, device), np.arange(8))

    def test_host_to_device_copies_are_copies(self, backend: Backend) -> None:
        """A write to the host array after ``to_device`` is not seen on the device."""
        original = np.arange(12, dtype=np.float32).reshape(3, 4)
        host = original.copy()
        device = backend.to_device(host)
        if isinstance(device, np.ndarray):
            assert not np.shares_memory(device, host), "to_device returned a view of its source"
        into = backend.allocate((3, 4), np.dtype(np.float32), MemoryKind.DEVICE)
        backend.to_device(host, out=into)
        stream = backend.create_stream()
        try:
            queued = backend.to_device(host, stream=stream)
            _bounded(stream.synchronize, self.timeout, "stream.synchronize() after to_device")
        finally:
            stream.close()
        host[...] = -1  # the copies must not see this
        for what, copy in (("to_device", device), ("to_device(out=)", into), ("stream", queued)):
            back = _host(backend, copy)
            assert np.array_equal(back, original), (
                f"a write to the host array after {what} changed the device copy: "
                "the device array shares memory with the host"
            )

    def test_device_to_host_copies_are_copies(self, backend: Backend) -> None:
        """The array ``to_host`` returns is the caller's: writes to it, or to the device
        array afterwards, are not seen through the other."""
        original = np.arange(12, dtype=np.float32).reshape(3, 4)
        device = backend.to_device(original)
        first = backend.to_host(device)
        assert isinstance(first, np.ndarray)
        if isinstance(device, np.ndarray):
            assert not np.shares_memory(first, device), "to_host returned a view of the device"
        second = backend.to_host(device)
        assert first is not second, "two to_host calls returned the same array"
        assert not np.shares_memory(first, second), "two to_host calls returned shared memory"
        first[...] = -1  # the device array must not see this
        assert np.array_equal(backend.to_host(device), original), (
            "a write to the result of to_host changed the device array: they share memory"
        )
        backend.to_device(np.zeros_like(original), out=device)  # nor the result this
        assert np.array_equal(second, original), (
            "a write to the device array changed an earlier result of to_host"
        )
        out = np.empty_like(original)
        backend.to_host(backend.to_device(original), out=out)
        assert np.array_equal(out, original)

    def _declared_kinds(self, backend: Backend) -> list[MemoryKind]:
        unified = backend.has(Capability.UNIFIED_MEMORY)
        kinds = [MemoryKind.HOST, MemoryKind.DEVICE]
        for kind, capability in (
            (MemoryKind.PINNED, Capability.PINNED_MEMORY),
            (MemoryKind.MAPPED, Capability.MAPPED_MEMORY),
            (MemoryKind.MANAGED, Capability.MANAGED_MEMORY),
        ):
            if unified or backend.has(capability):
                kinds.append(kind)
        return kinds

    @pytest.mark.parametrize("dtype", _DTYPES)
    def test_allocate_honours_shape_and_dtype(self, backend: Backend, dtype: Any) -> None:
        """``allocate`` of every declared memory kind gives the shape and dtype asked
        for, NumPy arrays for the host kinds, and memory that holds what is written."""
        dtype = np.dtype(dtype)
        host_kinds = {MemoryKind.HOST, MemoryKind.PINNED, MemoryKind.MAPPED}
        for kind in self._declared_kinds(backend):
            for shape in ((3, 4), (7,)):
                array = backend.allocate(shape, dtype, kind)
                values = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
                if kind in host_kinds:  # a NumPy array
                    assert isinstance(array, np.ndarray), kind
                    seen = array
                else:  # the backend's device array, seen through a copy
                    seen = _host(backend, array)
                assert (seen.shape, seen.dtype) == (shape, dtype), (
                    f"allocate({shape}, {dtype}, {kind.name}) gave an array of "
                    f"{seen.shape} {seen.dtype}"
                )
                if kind in host_kinds:
                    array[...] = values
                    np.testing.assert_array_equal(array, values)
                else:
                    backend.to_device(values, out=array)
                    np.testing.assert_array_equal(_host(backend, array), values)

    def test_host_kinds_are_numpy_arrays(self, backend: Backend) -> None:
        """Host, pinned and mapped memory (as declared) are writable NumPy arrays."""
        kinds = [MemoryKind.HOST]
        if backend.has(Capability.PINNED_MEMORY) or backend.has(Capability.UNIFIED_MEMORY):
            kinds.append(MemoryKind.PINNED)
        if backend.has(Capability.MAPPED_MEMORY) or backend.has(Capability.UNIFIED_MEMORY):
            kinds.append(MemoryKind.MAPPED)
        for kind in kinds:
            array = backend.allocate((4, 2), np.dtype(np.float32), kind)
            assert isinstance(array, np.ndarray), kind
            assert array.shape == (4, 2)
            array[...] = 1.5
            assert float(array.sum()) == 12.0

    def test_bad_allocations_are_named(self, backend: Backend) -> None:
        """A negative shape is a :class:`ValueError` and an object dtype a
        :class:`TypeError`, each saying what is wrong."""
        with pytest.raises(ValueError, match="negative"):
            backend.allocate((-1,), np.dtype(np.float32))
        with pytest.raises(TypeError, match="objects"):
            backend.allocate((2,), np.dtype(object))

    def test_unified_memory_is_shared(self, backend: Backend) -> None:
        """With unified memory, a host write is seen through ``device_view`` without a
        copy; skipped without the capability."""
        if not backend.has(Capability.UNIFIED_MEMORY):
            pytest.skip(f"the {backend.name} backend declares no unified memory")
        host = backend.allocate((4,), np.dtype(np.float32), MemoryKind.HOST)
        host[...] = 0
        view = backend.device_view(host)
        host[2] = 7.0
        assert float(_host(backend, view)[2]) == 7.0

    def test_memory_statistics(self, backend: Backend) -> None:
        """``memory_statistics()`` gives non-negative integer counters, with no more
        bytes in use than held (unless the backend holds none)."""
        stats = backend.memory_statistics()
        for value in (stats.hits, stats.misses, stats.bytes_in_use, stats.bytes_held):
            assert isinstance(value, int)
            assert value >= 0
        assert stats.bytes_in_use <= stats.bytes_held or stats.bytes_held == 0

    # -- streams and events ----------------------------------------------------------

    def test_stream_copies_complete_in_order(self, backend: Backend) -> None:
        """Copies queued on one stream run in order: the copy back sees the copy in."""
        stream = backend.create_stream()
        try:
            host = np.arange(1000, dtype=np.float32)
            device = backend.to_device(host, stream=stream)
            out = np.empty_like(host)
            backend.to_host(device, out=out, stream=stream)
            event = stream.record_event()
            _bounded(event.synchronize, self.timeout, "event.synchronize()")
            assert event.done
            _bounded(stream.synchronize, self.timeout, "stream.synchronize()")
            assert stream.done
            np.testing.assert_array_equal(out, host)
        finally:
            stream.close()

    def test_stream_runs_work_in_submission_order(self, backend: Backend) -> None:
        """Copies into one device array and out of it, queued alternately: each copy
        out sees exactly the copy in queued just before it."""
        rounds = 8
        sources = [np.full(4096, k, dtype=np.int64) for k in range(rounds)]
        outs = [np.full(4096, -1, dtype=np.int64) for _ in range(rounds)]
        device = backend.allocate((4096,), np.dtype(np.int64), MemoryKind.DEVICE)
        stream = backend.create_stream()
        try:
            for source, out in zip(sources, outs, strict=True):
                backend.to_device(source, out=device, stream=stream)
                backend.to_host(device, out=out, stream=stream)
            _bounded(stream.synchronize, self.timeout, "stream.synchronize()")
            assert stream.done
        finally:
            stream.close()
        for k, out in enumerate(outs):
            assert (out == k).all(), f"copy out {k} saw {sorted(set(out.tolist()))}"

    def test_recorded_event_completes(self, backend: Backend) -> None:
        """An event recorded after a copy becomes done and ``synchronize`` returns,
        also on an idle stream, within :attr:`timeout`."""
        stream = backend.create_stream()
        try:
            backend.to_device(np.ones(256, dtype=np.float32), stream=stream)
            event = stream.record_event()
            _eventually(lambda: event.done, self.timeout, "a recorded event did not become done")
            _bounded(event.synchronize, self.timeout, "event.synchronize()")
            assert event.done
            # an event recorded on a stream with nothing queued completes too
            _bounded(stream.synchronize, self.timeout, "stream.synchronize()")
            idle = stream.record_event()
            _bounded(idle.synchronize, self.timeout, "event.synchronize() on an idle stream")
            assert idle.done
        finally:
            stream.close()

    def test_wait_event_across_streams(self, backend: Backend) -> None:
        """A stream that waits on another stream's event sees that stream's copy."""
        first, second = backend.create_stream(), backend.create_stream()
        try:
            host = np.arange(64, dtype=np.int64)
            device = backend.to_device(host, stream=first)
            event = first.record_event()
            _bounded(lambda: second.wait_event(event), self.timeout, "stream.wait_event()")
            out = np.empty_like(host)
            backend.to_host(device, out=out, stream=second)
            _bounded(second.synchronize, self.timeout, "stream.synchronize()")
            np.testing.assert_array_equal(out, host)
        finally:
            first.close()
            second.close()

    async def test_async_waits(self, backend: Backend) -> None:
        """``await event.wait()`` and ``await stream.wait()`` return once a queued copy
        is done, within :attr:`timeout`. Cancelled, it still closes its stream."""
        stream = backend.create_stream()
        try:
            backend.to_device(np.ones(256, dtype=np.float32), stream=stream)
            event = stream.record_event()
            try:
                with anyio.fail_after(self.timeout):
                    await event.wait()
                    await stream.wait()
            except TimeoutError:
                pytest.fail(
                    f"event.wait() or stream.wait() did not return within {self.timeout:g} s",
                    pytrace=False,
                )
            assert event.done
        finally:
            stream.close()

    # -- buffers and pool ------------------------------------------------------------

    def test_unified_buffer_round_trip(self, backend: Backend) -> None:
        """A :class:`~pdc_core.UnifiedBuffer` on the backend syncs to the device and
        back, SYNCHRONIZED after each."""
        buf = UnifiedBuffer((16,), dtype=np.float32, backend=backend)
        buf.host[:] = np.arange(16)
        buf.sync_to_device()
        assert buf.state is BufferState.SYNCHRONIZED
        np.testing.assert_array_equal(_host(backend, buf.device), np.arange(16))
        buf.sync_to_host()
        assert buf.state is BufferState.SYNCHRONIZED
        np.testing.assert_array_equal(buf.host_readonly(), np.arange(16))

    def test_host_writes_reach_the_device(self, backend: Backend) -> None:
        """A write through ``buf.host`` after a sync is seen through ``buf.device``."""
        buf = UnifiedBuffer((4,), dtype=np.int32, backend=backend)
        buf.sync_to_device()
        buf.host[3] = 11
        assert int(_host(backend, buf.device)[3]) == 11

    def test_pool_reuses_buffers(self, backend: Backend) -> None:
        """A :class:`~pdc_core.MemoryPool` on the backend hands a released buffer out
        again, and counts one miss and one hit."""
        pool = MemoryPool(backend=backend)
        first = pool.acquire((32,), dtype=np.float32)
        pool.release(first)
        assert pool.acquire((32,), dtype=np.float32) is first
        stats = pool.statistics()
        assert (stats.hits, stats.misses) == (1, 1)

    # -- Python kernels --------------------------------------------------------------

    def test_python_kernels_run_the_seeds_examples(self, backend: Backend) -> None:
        """A backend declaring Python kernels runs the seeds' ``@kernel`` examples
        (:meth:`run_python_kernel_examples`); skipped without the capability."""
        if not backend.has(Capability.PYTHON_KERNELS):
            pytest.skip(f"the {backend.name} backend declares no Python kernels")
        try:
            self.run_python_kernel_examples(backend)
        except RuntimeError as exc:
            if _OUTSIDE_KERNEL not in str(exc):
                raise
            pytest.skip(
                f"the {backend.name} backend runs Python kernels, but not numba.cuda-style "
                "bodies (cuda.grid); override run_python_kernel_examples to check its own"
            )

    # -- persistent kernels ----------------------------------------------------------

    async def _start(
        self, backend: Backend, failing: bool = False, stateful: bool = False
    ) -> PersistentKernelSession:
        if not backend.has(Capability.PERSISTENT_KERNELS):
            pytest.skip(f"the {backend.name} backend declares no persistent kernels")
        hook = (
            self.failing_persistent_kernel
            if failing
            else self.stateful_persistent_kernel
            if stateful
            else self.persistent_kernel
        )
        spec = hook(backend)
        if spec is None:
            kind = "failing " if failing else "stateful " if stateful else ""
            pytest.skip(
                f"no {kind}persistent kernel for the {backend.name} "
                f"backend: override {hook.__name__}() to give one in its body format"
            )
        default = getattr(type(self), hook.__name__) is getattr(BackendConformance, hook.__name__)
        try:
            return await PersistentKernelSession.start(
                spec, backend, launch_timeout=self.timeout, stop_timeout=self.timeout
            )
        except TypeError as exc:
            if default and backend.device_info.kind != "cpu":
                pytest.skip(
                    f"the {backend.name} backend does not run the kit's host body ({exc}); "
                    f"override {hook.__name__}() to give one in its body format"
                )
            raise

    def _requests(self, start: int, count: int) -> np.ndarray[Any, Any]:
        return np.arange(start, start + count, dtype=np.float32)

    async def test_persistent_kernel_request(self, backend: Backend) -> None:
        """One request is answered by the resident kernel, and the session stops
        cleanly with one sent and one replied. Cancelled, it still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                reply = await session.request(np.float32(3.5))
                assert float(reply) == 8.0
                assert _state(session) is SessionState.RUNNING
        finally:
            await session.stop()
        assert _state(session) is SessionState.STOPPED
        assert session.statistics().sent == session.statistics().replied == 1

    async def test_persistent_kernel_batches(self, backend: Backend) -> None:
        """Batches larger than the ring are answered in order, by ``request_batch`` and
        by ``send_batch`` waiting for room while another task receives. Cancelled, it
        still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                requests = self._requests(0, 3 * session.capacity + 5)  # wraps the ring
                replies = await session.request_batch(requests)
                np.testing.assert_array_equal(replies, requests * 2 + 1)
                sent = self._requests(100, 2 * session.capacity + 1)
                got: list[float] = []
                async with anyio.create_task_group() as tg:  # sends wait for room
                    tg.start_soon(session.send_batch, sent)
                    while len(got) < len(sent):
                        got.extend(np.asarray(await session.receive_batch()).tolist())
                assert got == (sent * 2 + 1).tolist()
        finally:
            await session.stop()

    async def test_persistent_kernel_pause_and_resume(self, backend: Backend) -> None:
        """A paused kernel acknowledges the pause and answers nothing; resumed, it
        answers what was sent meanwhile, in order. Cancelled, it still stops the
        session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                await session.pause()
                assert _state(session) is SessionState.PAUSED
                assert session.resident.paused
                await session.send_batch(self._requests(0, 3))
            with anyio.move_on_after(0.05):
                await session.receive()
                pytest.fail("a paused kernel answered a request", pytrace=False)
            assert session.statistics().replied == 0
            with anyio.fail_after(self.timeout):
                await session.resume()
                assert _state(session) is SessionState.RUNNING
                got: list[float] = []
                while len(got) < 3:
                    got.extend(np.asarray(await session.receive_batch()).tolist())
                assert got == [1.0, 3.0, 5.0]
        finally:
            await session.stop()

    async def test_persistent_kernel_drain_stop_answers_everything(self, backend: Backend) -> None:
        """``stop(drain=True)`` of a paused kernel answers every request sent before it;
        the replies can still be received, then ``receive`` raises ``ActorStopped``.
        Cancelled, it still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                await session.pause()  # a drain overrides the pause
                requests = self._requests(0, session.capacity)
                await session.send_batch(requests)
        finally:
            await session.stop(drain=True)
        stats = session.statistics()
        assert (stats.sent, stats.replied, stats.unprocessed) == (len(requests), len(requests), 0)
        replies = np.asarray(await session.receive_batch())
        np.testing.assert_array_equal(replies, requests * 2 + 1)
        with pytest.raises(ActorStopped):
            await session.receive()

    async def test_persistent_kernel_stop_now(self, backend: Backend) -> None:
        """``stop()`` without drain leaves requests published to a paused kernel
        unprocessed (counted), and later calls raise ``ActorStopped``. Cancelled, it
        still stops the session."""
        session = await self._start(backend)
        try:
            with anyio.fail_after(self.timeout):
                assert float(await session.request(np.float32(1.0))) == 3.0
                await session.pause()  # nothing published from here on is consumed
                await session.send_batch(self._requests(0, 4))
        finally:
            await session.stop()
        assert _state(session) is SessionState.STOPPED
        stats = session.statistics()
        assert (stats.sent, stats.replied, stats.unprocessed) == (5, 1, 4)
        with pytest.raises(ActorStopped):
            await session.receive()
        with pytest.raises(ActorStopped):
            await session.request(np.float32(2.0))

    async def test_persistent_kernel_error_word(self, backend: Backend) -> None:
        """A body that fails sets the error word: the request gets ``ActorCrashed``
        caused by a ``PersistentKernelError`` with its code, the session is CRASHED and
        refuses further requests. Cancelled, it still stops the session."""
        session = await self._start(backend, failing=True)
        try:
            with anyio.fail_after(self.timeout), pytest.raises(ActorCrashed) as info:
                await session.request(np.float32(1.0))
            error = info.value.cause
            assert isinstance(error, PersistentKernelError)
            assert error.code != ErrorCode.NONE, "the crash did not come from the error word"
            assert _state(session) is SessionState.CRASHED
            with pytest.raises(ActorCrashed):
                await session.request(np.float32(2.0))
        finally:
            await session.stop()

    async def test_persistent_kernel_state(self, backend: Backend) -> None:
        """A kernel launched with state (the backend's ``make_state``) updates it from
        its body batch after batch; ``read_state()`` gives a NumPy copy of it, of the
        state's shape and dtype, while paused and after the stop. Cancelled, it still
        stops the session."""
        session = await self._start(backend, stateful=True)
        try:
            with anyio.fail_after(self.timeout):
                assert float(await session.request(np.float32(3.0))) == 7.0
                requests = self._requests(1, 2 * session.capacity + 3)  # wraps the ring
                replies = await session.request_batch(requests)
                np.testing.assert_array_equal(replies, requests * 2 + 1)
                await session.pause()
                state = session.read_state()
                expected = [0.5 + 3.0 + float(requests.sum()), 1.0 + len(requests)]
                assert isinstance(state, np.ndarray), f"read_state() gave {type(state)}"
                assert (state.shape, state.dtype) == (_INITIAL_STATE.shape, _INITIAL_STATE.dtype)
                assert state.tolist() == expected, "the body's updates are not in the state"
                state[...] = -1  # a copy: writing it changes nothing on the device
                await session.resume()
                assert float(await session.request(np.float32(2.0))) == 5.0
        finally:
            await session.stop()
        final = session.read_state()
        assert isinstance(final, np.ndarray)
        assert final.tolist() == [expected[0] + 2.0, expected[1] + 1.0]
