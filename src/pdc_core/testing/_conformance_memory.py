"""The conformance kit's memory and stream checks (a role of ``BackendConformance``).

Allocation honours shape and dtype for each memory kind the backend declares; copies
in both directions (synchronous and on a stream) are *copies*; streams run work in
order; events complete; ``UnifiedBuffer`` and ``MemoryPool`` work on the backend. A
blocking call runs under the kit's watchdog (:func:`~pdc_core.testing._conformance_base.bounded`).
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import BufferState, MemoryPool, UnifiedBuffer
from pdc_core.backend import Backend, Capability, MemoryKind

from ._conformance_base import ConformanceBase, bounded, eventually, to_host

__all__ = ["MemoryChecks"]

_DTYPES = (np.float32, np.float64, np.int8, np.int64, np.complex64)
_RECORD = np.dtype([("id", "<u8"), ("value", "<f4"), ("flag", "u1")], align=True)


class MemoryChecks(ConformanceBase):
    """Memory, streams and events, buffers and the pool."""

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
        back = to_host(backend, device)
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
        np.testing.assert_array_equal(to_host(backend, device), np.arange(8))

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
            bounded(stream.synchronize, self.timeout, "stream.synchronize() after to_device")
        finally:
            stream.close()
        host[...] = -1  # the copies must not see this
        for what, copy in (("to_device", device), ("to_device(out=)", into), ("stream", queued)):
            back = to_host(backend, copy)
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
                    seen = to_host(backend, array)
                assert (seen.shape, seen.dtype) == (shape, dtype), (
                    f"allocate({shape}, {dtype}, {kind.name}) gave an array of "
                    f"{seen.shape} {seen.dtype}"
                )
                if kind in host_kinds:
                    array[...] = values
                    np.testing.assert_array_equal(array, values)
                else:
                    backend.to_device(values, out=array)
                    np.testing.assert_array_equal(to_host(backend, array), values)

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
        assert float(to_host(backend, view)[2]) == 7.0

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
            bounded(event.synchronize, self.timeout, "event.synchronize()")
            assert event.done
            bounded(stream.synchronize, self.timeout, "stream.synchronize()")
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
            bounded(stream.synchronize, self.timeout, "stream.synchronize()")
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
            eventually(lambda: event.done, self.timeout, "a recorded event did not become done")
            bounded(event.synchronize, self.timeout, "event.synchronize()")
            assert event.done
            # an event recorded on a stream with nothing queued completes too
            bounded(stream.synchronize, self.timeout, "stream.synchronize()")
            idle = stream.record_event()
            bounded(idle.synchronize, self.timeout, "event.synchronize() on an idle stream")
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
            bounded(lambda: second.wait_event(event), self.timeout, "stream.wait_event()")
            out = np.empty_like(host)
            backend.to_host(device, out=out, stream=second)
            bounded(second.synchronize, self.timeout, "stream.synchronize()")
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
        np.testing.assert_array_equal(to_host(backend, buf.device), np.arange(16))
        buf.sync_to_host()
        assert buf.state is BufferState.SYNCHRONIZED
        np.testing.assert_array_equal(buf.host_readonly(), np.arange(16))

    def test_host_writes_reach_the_device(self, backend: Backend) -> None:
        """A write through ``buf.host`` after a sync is seen through ``buf.device``."""
        buf = UnifiedBuffer((4,), dtype=np.int32, backend=backend)
        buf.sync_to_device()
        buf.host[3] = 11
        assert int(to_host(backend, buf.device)[3]) == 11

    def test_pool_reuses_buffers(self, backend: Backend) -> None:
        """A :class:`~pdc_core.MemoryPool` on the backend hands a released buffer out
        again, and counts one miss and one hit."""
        pool = MemoryPool(backend=backend)
        first = pool.acquire((32,), dtype=np.float32)
        pool.release(first)
        assert pool.acquire((32,), dtype=np.float32) is first
        stats = pool.statistics()
        assert (stats.hits, stats.misses) == (1, 1)
