"""The conformance suite a backend runs against itself.

Subclass :class:`BackendConformance` in a test module of your plugin and name your
backend::

    from pdc_core.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "mybackend"

pytest then runs every check below against ``get_backend("mybackend")``: allocation
of each memory kind the backend declares, copies in both directions (synchronous
and on a stream), stream ordering and events, ``UnifiedBuffer`` synchronization, the
memory pool's statistics, and the error messages for bad input. Checks that need a
capability the backend does not declare are skipped with that reason. Async checks
run under asyncio and trio when the pdc pytest plugin is enabled
(``pytest_plugins = ["pdc_core.testing.pytest_plugin"]``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from .._backend._contract import Backend, Capability, MemoryKind
from .._buffer import BufferState, UnifiedBuffer
from .._memory_pool import MemoryPool
from .._plugins import get_backend

__all__ = ["BackendConformance"]

_DTYPES = (np.float32, np.float64, np.int8, np.int64, np.complex64)
_RECORD = np.dtype([("id", "<u8"), ("value", "<f4"), ("flag", "u1")], align=True)


def _host(backend: Backend, device_array: Any) -> np.ndarray[Any, Any]:
    return backend.to_host(device_array)


class BackendConformance:
    """Checks every backend must pass; set ``backend_name`` in a subclass."""

    backend_name: ClassVar[str]

    @pytest.fixture
    def backend(self) -> Backend:
        """The backend under test (override to build it differently)."""
        return get_backend(self.backend_name)

    # -- discovery -------------------------------------------------------------------

    def test_declares_itself(self, backend: Backend) -> None:
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
        device = backend.allocate((8,), np.dtype(np.int32), MemoryKind.DEVICE)
        backend.to_device(np.arange(8, dtype=np.int32), out=device)
        np.testing.assert_array_equal(_host(backend, device), np.arange(8))

    def test_host_kinds_are_numpy_arrays(self, backend: Backend) -> None:
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
        with pytest.raises(ValueError, match="negative"):
            backend.allocate((-1,), np.dtype(np.float32))
        with pytest.raises(TypeError, match="objects"):
            backend.allocate((2,), np.dtype(object))

    def test_unified_memory_is_shared(self, backend: Backend) -> None:
        if not backend.has(Capability.UNIFIED_MEMORY):
            pytest.skip(f"the {backend.name} backend declares no unified memory")
        host = backend.allocate((4,), np.dtype(np.float32), MemoryKind.HOST)
        host[...] = 0
        view = backend.device_view(host)
        host[2] = 7.0
        assert float(_host(backend, view)[2]) == 7.0

    def test_memory_statistics(self, backend: Backend) -> None:
        stats = backend.memory_statistics()
        for value in (stats.hits, stats.misses, stats.bytes_in_use, stats.bytes_held):
            assert isinstance(value, int)
            assert value >= 0
        assert stats.bytes_in_use <= stats.bytes_held or stats.bytes_held == 0

    # -- streams and events ----------------------------------------------------------

    def test_stream_copies_complete_in_order(self, backend: Backend) -> None:
        stream = backend.create_stream()
        try:
            host = np.arange(1000, dtype=np.float32)
            device = backend.to_device(host, stream=stream)
            out = np.empty_like(host)
            backend.to_host(device, out=out, stream=stream)
            event = stream.record_event()
            event.synchronize()
            assert event.done
            stream.synchronize()
            assert stream.done
            np.testing.assert_array_equal(out, host)
        finally:
            stream.close()

    def test_wait_event_across_streams(self, backend: Backend) -> None:
        first, second = backend.create_stream(), backend.create_stream()
        try:
            host = np.arange(64, dtype=np.int64)
            device = backend.to_device(host, stream=first)
            second.wait_event(first.record_event())
            out = np.empty_like(host)
            backend.to_host(device, out=out, stream=second)
            second.synchronize()
            np.testing.assert_array_equal(out, host)
        finally:
            first.close()
            second.close()

    async def test_async_waits(self, backend: Backend) -> None:
        stream = backend.create_stream()
        try:
            backend.to_device(np.ones(256, dtype=np.float32), stream=stream)
            event = stream.record_event()
            await event.wait()
            await stream.wait()
            assert event.done
        finally:
            stream.close()

    # -- buffers and pool ------------------------------------------------------------

    def test_unified_buffer_round_trip(self, backend: Backend) -> None:
        buf = UnifiedBuffer((16,), dtype=np.float32, backend=backend)
        buf.host[:] = np.arange(16)
        buf.sync_to_device()
        assert buf.state is BufferState.SYNCHRONIZED
        np.testing.assert_array_equal(_host(backend, buf.device), np.arange(16))
        buf.sync_to_host()
        assert buf.state is BufferState.SYNCHRONIZED
        np.testing.assert_array_equal(buf.host_readonly(), np.arange(16))

    def test_host_writes_reach_the_device(self, backend: Backend) -> None:
        buf = UnifiedBuffer((4,), dtype=np.int32, backend=backend)
        buf.sync_to_device()
        buf.host[3] = 11
        assert int(_host(backend, buf.device)[3]) == 11

    def test_pool_reuses_buffers(self, backend: Backend) -> None:
        pool = MemoryPool(backend=backend)
        first = pool.acquire((32,), dtype=np.float32)
        pool.release(first)
        assert pool.acquire((32,), dtype=np.float32) is first
        stats = pool.statistics()
        assert (stats.hits, stats.misses) == (1, 1)
