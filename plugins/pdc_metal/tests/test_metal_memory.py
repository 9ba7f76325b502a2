"""Memory of the metal backend: what is shared is proven shared, what is copied is a copy.

"Shared" is never asserted from documentation: each claim is checked by the data
address of both views and by a write through one seen through the other.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metal_support import HAS_MLX, metal_backend, needs_mlx

from pdc_core import BackendError, BufferState, UnifiedBuffer
from pdc_core.backend import MemoryKind
from pdc_core.testing import BackendConformance

pytestmark = needs_mlx

if HAS_MLX:
    import mlx.core as mx

SHAREABLE = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
]
UNSHAREABLE = [
    np.dtype(np.complex128),
    np.dtype(">f4"),
    np.dtype("S4"),
    np.dtype([("id", "<u8"), ("value", "<f4")]),
]


def address(array: Any) -> int:
    """The data address of a NumPy array or (through its zero-copy export) an MLX array."""
    return int(np.asarray(array).ctypes.data)


class TestMetalConformance(BackendConformance):
    """pdc's conformance kit, run against the metal backend."""

    backend_name = "metal"

    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64, np.complex64])
    def test_round_trip_copies(self, backend: Any, dtype: Any) -> None:
        """The kit's check, minus its structured record: MLX cannot hold one (see below)."""
        super().test_round_trip_copies(backend, dtype)

    def test_record_dtypes_are_refused(self, backend: Any) -> None:
        record = np.zeros(3, dtype=[("id", "<u8"), ("value", "<f4")])
        with pytest.raises(TypeError, match="no exact MLX equivalent"):
            backend.to_device(record)


# -- the device view is the host memory --------------------------------------------


def test_device_view_shares_the_host_allocation() -> None:
    metal = metal_backend()
    host = metal.allocate((4, 3), np.dtype(np.float32), MemoryKind.HOST)
    assert isinstance(host, np.ndarray)
    view = metal.device_view(host)
    assert isinstance(view, mx.array)
    assert address(view) == address(host)
    host[1, 2] = 42.0  # a host write, seen by MLX work without any copy or sync
    assert metal.run(lambda x: x * 2, view).tolist()[1][2] == 84.0
    np.asarray(view)[0, 0] = -1.0  # a write into MLX's buffer, seen by the host view
    assert host[0, 0] == -1.0


@pytest.mark.parametrize("kind", [MemoryKind.HOST, MemoryKind.PINNED, MemoryKind.MAPPED])
def test_host_kinds_are_numpy_views_of_mlx_memory(kind: MemoryKind) -> None:
    metal = metal_backend()
    host = metal.allocate((8,), np.dtype(np.int32), kind)
    assert metal.can_view(host)
    assert address(metal.device_view(host)) == address(host)


@pytest.mark.parametrize("kind", [MemoryKind.DEVICE, MemoryKind.MANAGED])
def test_device_kinds_are_evaluated_mlx_arrays(kind: MemoryKind) -> None:
    metal = metal_backend()
    device = metal.allocate((2, 2), np.dtype(np.float16), kind)
    assert isinstance(device, mx.array)
    assert device.dtype == mx.float16
    assert device.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_unified_buffer_views_share_memory_and_never_copy() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((16,), dtype=np.float32, backend=metal).allocate()
    assert buf.state is BufferState.SYNCHRONIZED
    host_address = address(buf.host)
    buf.host[:] = np.arange(16)
    assert address(buf.metal) == address(buf.device) == host_address
    assert float(mx.sum(buf.metal).item()) == float(np.arange(16).sum())
    buf.sync_to_device()
    buf.sync_to_host()
    assert buf.state is BufferState.SYNCHRONIZED
    assert address(buf.host) == host_address  # syncing moved nothing


def test_rebinding_a_view_never_detaches_or_frees_the_buffer() -> None:
    """``view[i] = v`` rebinds an MLX array; the buffer's memory must stay intact.

    Handing out the MLX array that owns the buffer would let this free memory the
    host view still points to (measured: the host then reads another allocation's
    data). Views are fresh arrays, so the owner is never rebound.
    """
    metal = metal_backend()
    buf = UnifiedBuffer((1 << 14,), dtype=np.float32, backend=metal)
    buf.host[:] = 1.0
    view = buf.metal
    pending = view + 0  # keeps the old data referenced, so MLX cannot donate it
    view[0] = 5.0
    mx.eval(view, pending)
    assert float(view[0].item()) == 5.0
    assert buf.host[0] == 1.0  # MLX arrays are values: the buffer is not written
    del view, pending
    gc.collect()
    junk = [mx.full((1 << 14,), 9.0) for _ in range(16)]
    mx.eval(junk)
    np.testing.assert_array_equal(buf.host_readonly(), np.ones(1 << 14, dtype=np.float32))
    assert address(buf.metal) == address(buf.host)


def test_results_written_back_are_seen_by_the_next_host_read() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((5,), dtype=np.float32, backend=metal)
    buf.host[:] = [0, 1, 2, 3, 4]
    metal.run(lambda x: x * x + 1, buf, out=buf)
    np.testing.assert_array_equal(buf.host, [1, 2, 5, 10, 17])


def test_to_host_evaluates_lazy_work() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((3,), dtype=np.float32, backend=metal)
    buf.host[:] = 2.0
    lazy = mx.exp(buf.metal) * 0 + buf.metal * 10  # not evaluated yet
    np.testing.assert_array_equal(metal.to_host(lazy), [20.0, 20.0, 20.0])


def test_a_graph_reads_the_buffer_when_evaluated_not_when_built() -> None:
    """The documented hazard of lazy evaluation: evaluate before rewriting the input."""
    metal = metal_backend()
    buf = UnifiedBuffer((2,), dtype=np.float32, backend=metal)
    buf.host[:] = 1.0
    doubled = buf.metal * 2
    buf.host[:] = 10.0
    assert doubled.tolist() == [20.0, 20.0]


# -- what MLX cannot share is copied, visibly ----------------------------------------


def test_from_array_copies_foreign_memory_into_mlx_memory() -> None:
    metal = metal_backend()
    source = np.arange(6, dtype=np.int64)
    buf = UnifiedBuffer.from_array(source, backend=metal)
    assert address(buf.host) != address(source)
    assert metal.can_view(buf.host)
    assert not metal.can_view(source)
    assert address(buf.metal) == address(buf.host)
    source[0] = 99
    assert buf.host[0] == 0


def test_from_array_keeps_mlx_memory_without_a_copy() -> None:
    metal = metal_backend()
    host = metal.allocate((6,), np.dtype(np.int64), MemoryKind.HOST)
    buf = UnifiedBuffer.from_array(host, backend=metal)
    assert address(buf.host) == address(host)


def test_metal_of_a_cpu_buffer_is_a_snapshot_copy() -> None:
    metal_backend()
    buf = UnifiedBuffer((4,), dtype=np.float32, backend="cpu")
    buf.host[:] = 3.0
    snapshot = buf.metal
    assert isinstance(snapshot, mx.array)
    assert snapshot.tolist() == [3.0] * 4
    assert address(snapshot) != address(buf.host_readonly())
    buf.host[:] = 4.0
    assert snapshot.tolist() == [3.0] * 4
    assert buf.metal.tolist() == [4.0] * 4


def test_device_view_refuses_memory_it_cannot_share() -> None:
    metal = metal_backend()
    with pytest.raises(BackendError, match="did not allocate"):
        metal.device_view(np.zeros(4, dtype=np.float32))
    host = metal.allocate((8,), np.dtype(np.float32), MemoryKind.HOST)
    with pytest.raises(BackendError, match="partial or strided"):
        metal.device_view(host[2:6])
    with pytest.raises(BackendError, match="partial or strided"):
        metal.device_view(host[::2])


def test_a_reinterpreting_view_shares_too() -> None:
    metal = metal_backend()
    host = metal.allocate((4,), np.dtype(np.float32), MemoryKind.HOST)
    host[:] = 1.0
    as_ints = metal.device_view(host.view(np.uint32))
    assert as_ints.dtype == mx.uint32
    assert address(as_ints) == address(host)
    assert as_ints.tolist() == [0x3F800000] * 4


@pytest.mark.parametrize("dtype", SHAREABLE)
def test_every_mlx_dtype_round_trips_and_shares(dtype: Any) -> None:
    metal = metal_backend()
    values = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    buf = UnifiedBuffer.from_array(values, backend=metal)
    assert address(buf.metal) == address(buf.host)
    np.testing.assert_array_equal(metal.to_host(buf.metal), values)
    np.testing.assert_array_equal(metal.to_host(metal.to_device(values)), values)


@pytest.mark.parametrize("dtype", UNSHAREABLE, ids=str)
def test_dtypes_mlx_cannot_hold_are_refused_not_narrowed(dtype: np.dtype[Any]) -> None:
    """``mx.array`` would turn complex128 into complex64: pdc refuses instead."""
    metal = metal_backend()
    with pytest.raises(TypeError, match=r"MLX|byte order"):
        metal.to_device(np.zeros(2, dtype=dtype))
    buf = UnifiedBuffer((2,), dtype=dtype, backend=metal)  # memory on first use
    with pytest.raises(TypeError, match=r"MLX|byte order"):
        buf.allocate()
    assert not buf.is_allocated


def test_bfloat16_has_no_numpy_equivalent() -> None:
    metal = metal_backend()
    with pytest.raises(TypeError, match="bfloat16"):
        metal.to_host(mx.zeros(2, dtype=mx.bfloat16))


def test_bad_copies_are_named() -> None:
    metal = metal_backend()
    with pytest.raises(TypeError, match="needs an MLX array"):
        metal.to_host(np.zeros(2))
    with pytest.raises(ValueError, match="cannot copy"):
        metal.to_host(mx.zeros(3), out=np.empty(4, dtype=np.float32))
    target = metal.allocate((3,), np.dtype(np.float32), MemoryKind.DEVICE)
    with pytest.raises(ValueError, match="shape"):
        metal.to_device(np.zeros(4, dtype=np.float32), out=target)
    with pytest.raises(TypeError, match="dtype"):
        metal.to_device(np.zeros(3, dtype=np.int32), out=target)
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        metal.to_device(np.zeros((2, 3), np.float32), out=mx.broadcast_to(mx.zeros(3), (2, 3)))
    with pytest.raises(TypeError, match="metal stream"):
        metal.to_device(np.zeros(2), stream=object())  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple),
    dtype=st.sampled_from([np.float32, np.int16, np.uint8, np.complex64, np.bool_]),
    seed=st.integers(0, 2**16),
)
def test_round_trips_and_sharing_for_any_shape(
    shape: tuple[int, ...], dtype: Any, seed: int
) -> None:
    metal = metal_backend()
    values = np.random.default_rng(seed).integers(0, 2, size=shape).astype(dtype)
    buf = UnifiedBuffer.from_array(values, backend=metal)
    np.testing.assert_array_equal(metal.to_host(buf.metal), values)
    if values.size:
        assert address(buf.metal) == address(buf.host)
        buf.host.flat[-1] = values.flat[0]
        assert metal.to_host(buf.metal).flat[-1] == values.flat[0]


# -- statistics ----------------------------------------------------------------------


def test_memory_statistics_come_from_mlx() -> None:
    metal = metal_backend()
    before = metal.memory_statistics()
    block = metal.allocate((1 << 18,), np.dtype(np.float32), MemoryKind.DEVICE)
    during = metal.memory_statistics()
    assert during.bytes_in_use >= before.bytes_in_use + (1 << 20)
    assert during.bytes_held >= during.bytes_in_use
    assert during.limit == int(mx.get_memory_limit())
    report = metal.memory_report()
    assert report["peak"] >= report["active"] >= (1 << 20)
    del block
    gc.collect()
    assert metal.memory_statistics().bytes_in_use <= during.bytes_in_use - (1 << 20)
    metal.free_cached_memory()
    assert metal.memory_report()["cache"] == 0
