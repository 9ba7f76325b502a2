"""UnifiedBuffer: validation, the host/device state machine, zero-copy interop."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pdc_core import BufferState, CapabilityError, UnifiedBuffer, get_backend


@pytest.mark.parametrize(
    ("shape", "error", "fragment"),
    [
        ((-1, 3), ValueError, "negative dimension -1"),
        ((2.5,), TypeError, "2.5"),
        ("12", TypeError, "'12'"),
        ((True,), TypeError, "bool"),
        (None, TypeError, "None"),
    ],
)
def test_bad_shape_is_named(shape, error, fragment):
    with pytest.raises(error, match=fragment):
        UnifiedBuffer(shape)


@pytest.mark.parametrize(
    ("dtype", "fragment"),
    [("float77", "float77"), (object, "Python objects"), (str, "has no size")],
)
def test_bad_dtype_is_named(dtype, fragment):
    with pytest.raises(TypeError, match=fragment):
        UnifiedBuffer((4,), dtype=dtype)


def test_shapes_accept_ints_and_numpy_ints():
    assert UnifiedBuffer(5).shape == (5,)
    assert UnifiedBuffer((np.int64(2), 3)).shape == (2, 3)
    assert UnifiedBuffer((0,)).size == 0


def test_seed_usage_on_the_default_backend():
    buf = UnifiedBuffer((1000,), dtype=np.float32)
    data = np.arange(1000, dtype=np.float32)
    buf.host[:500] = data[:500]
    buf.host[500:] = data[500:]
    buf.sync_to_device()
    np.testing.assert_array_equal(np.asarray(buf.device), data)
    buf.sync_to_host()
    np.testing.assert_array_equal(buf.host[:], data)


def test_unified_backend_shares_memory_and_stays_synchronized():
    buf = UnifiedBuffer((8,), dtype=np.int64, backend="cpu")
    assert buf.state is BufferState.UNINITIALIZED  # no memory before its first use
    buf.host[3] = 7
    assert buf.state is BufferState.SYNCHRONIZED
    assert buf.device[3] == 7
    assert np.shares_memory(buf.host, buf.device)
    buf.device[4] = 9  # a write on the "device" is visible on the host without a copy
    assert buf.host_readonly()[4] == 9
    assert buf.state is BufferState.SYNCHRONIZED


def test_pinned_on_cpu_is_host_memory(example_backend):
    assert UnifiedBuffer((4,), pinned=True, backend="cpu").pinned


class TestDiscreteDeviceStateMachine:
    """On a backend with separate device memory, every transition and copy counts."""

    def test_lazy_transitions(self, example_backend):
        buf = UnifiedBuffer((4,), dtype=np.float64, backend=example_backend)
        copies = example_backend.copies
        assert buf.state is BufferState.UNINITIALIZED
        buf.allocate(device=False)
        assert buf.state is BufferState.HOST_ONLY
        assert copies == {"to_device": 0, "to_host": 0}

        buf.host[:] = [1, 2, 3, 4]
        assert buf.state is BufferState.HOST_ONLY
        buf.sync_to_device()
        assert buf.state is BufferState.SYNCHRONIZED
        assert copies["to_device"] == 1
        buf.sync_to_device()  # nothing changed: no copy
        assert copies["to_device"] == 1

        device = buf.device
        assert buf.state is BufferState.DEVICE_DIRTY
        device._data[:] *= 10  # the "kernel" writes device memory
        assert list(buf.host_readonly()) == [10, 20, 30, 40]
        assert buf.state is BufferState.SYNCHRONIZED
        assert copies["to_host"] == 1

    def test_a_host_write_is_never_lost_by_a_later_device_read(self, example_backend):
        buf = UnifiedBuffer((3,), dtype=np.int32, backend=example_backend)
        buf.sync_to_device()
        buf.host[1] = 42  # taking .host marks the host copy dirty
        assert buf.state is BufferState.HOST_DIRTY
        assert buf.device._data[1] == 42

    def test_a_device_write_is_seen_by_the_next_host_read(self, example_backend):
        buf = UnifiedBuffer((2,), dtype=np.int32, backend=example_backend)
        buf.device._data[:] = [5, 6]
        assert list(buf.host) == [5, 6]
        assert buf.state is BufferState.HOST_DIRTY

    def test_readonly_view_cannot_be_written(self, example_backend):
        buf = UnifiedBuffer((2,), backend=example_backend)
        view = buf.host_readonly()
        with pytest.raises(ValueError, match="read-only"):
            view[0] = 1

    def test_explicit_dirty_marks(self, example_backend):
        buf = UnifiedBuffer((2,), dtype=np.int32, backend=example_backend)
        kept = buf.host
        buf.sync_to_device()
        kept[0] = 3  # written through an array kept from before the sync
        buf.mark_host_dirty()
        assert buf.device._data[0] == 3
        buf.sync_to_host()
        buf.mark_device_dirty()
        assert buf.state is BufferState.DEVICE_DIRTY

    def test_pinned_needs_the_capability(self, example_backend):
        assert UnifiedBuffer((2,), pinned=True, backend=example_backend).pinned

    def test_device_is_used_for_dlpack_device(self, example_backend):
        with pytest.raises(AttributeError):
            UnifiedBuffer((2,), backend=example_backend).__cuda_array_interface__  # noqa: B018


def test_pinned_without_the_capability_is_refused(install_plugins, example_backend_importable):
    source = """
from pdc_example_backend import ExampleBackend
from pdc_core import Capability
from pdc_core.backend import hookimpl

class NoPinBackend(ExampleBackend):
    name = "nopin"
    distribution = "pdc-nopin"
    capabilities = frozenset({Capability.DEVICE_MEMORY})

@hookimpl
def pdc_register_backends(register):
    register(NoPinBackend)
"""
    install_plugins("pdc-nopin", {"nopin": "pdc_nopin"}, {"pdc_nopin": source})
    with pytest.raises(CapabilityError, match="no pinned_memory capability"):
        UnifiedBuffer((2,), pinned=True, backend="nopin")


def test_from_array_wraps_without_copying():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = UnifiedBuffer.from_array(array)
    assert np.shares_memory(buf.host, array)
    assert buf.shape == (2, 3)
    strided = UnifiedBuffer.from_array(array[:, ::2])  # not contiguous: copied
    assert not np.shares_memory(strided.host, array)
    np.testing.assert_array_equal(strided.host, array[:, ::2])


def test_numpy_and_dlpack_interop_without_copies():
    buf = UnifiedBuffer((5,), dtype=np.int16)
    buf.host[:] = range(5)
    assert np.shares_memory(np.asarray(buf), buf.host)
    through_dlpack = np.from_dlpack(buf)
    assert np.shares_memory(through_dlpack, buf.host)
    assert buf.__dlpack_device__() == (1, 0)  # kDLCPU
    assert np.asarray(buf, dtype=np.float64).dtype == np.float64


@pytest.mark.skipif(
    sys.version_info < (3, 12), reason="the Python buffer protocol for Python classes is 3.12+"
)
def test_python_buffer_protocol():
    buf = UnifiedBuffer((3,), dtype=np.uint8)
    view = memoryview(buf)
    view[1] = 200
    assert buf.host[1] == 200


def test_metal_view_names_the_package_when_missing(monkeypatch):
    from pdc_core import BackendUnavailable, reload_plugins

    monkeypatch.setenv("PDC_PLUGINS", "cpu")
    reload_plugins()
    try:
        with pytest.raises(BackendUnavailable, match="pip install pdc-metal"):
            UnifiedBuffer((2,)).metal  # noqa: B018
    finally:
        monkeypatch.delenv("PDC_PLUGINS")
        reload_plugins()


def test_repr_mentions_state_and_backend():
    text = repr(UnifiedBuffer((2, 2), backend=get_backend("cpu")).allocate())
    assert "shape=(2, 2)" in text
    assert "cpu:0" in text
    assert "SYNCHRONIZED" in text


def test_close_gives_the_memory_back_and_refuses_later_use(example_backend):
    import gc
    import weakref

    with UnifiedBuffer((1000,), dtype=np.float64, backend=example_backend) as buf:
        buf.device._data[:] = 1.0  # device memory exists too
        host = weakref.ref(buf._host)
    gc.disable()
    try:
        assert host() is None  # reference counting alone freed it: close let go
    finally:
        gc.enable()
    assert buf.closed
    assert buf.shape == (1000,)
    assert buf.nbytes == 8000
    for use in (lambda: buf.host, lambda: buf.device, buf.sync_to_device, np.asarray):
        with pytest.raises(ValueError, match=r"UnifiedBuffer of shape \(1000,\) is closed"):
            use(buf) if use is np.asarray else use()
    buf.close()  # idempotent


async def test_a_closed_buffer_refuses_dirty_marks(example_backend):
    buf = UnifiedBuffer((4,), dtype=np.int32, backend=example_backend)
    buf.sync_to_device()
    buf.close()
    for mark in (buf.mark_host_dirty, buf.mark_device_dirty):
        with pytest.raises(ValueError, match=r"UnifiedBuffer of shape \(4,\) is closed"):
            mark()


@pytest.mark.parametrize("backend_name", ["example", "cpu"])
async def test_a_readonly_view_cannot_be_made_writable_again(backend_name, example_backend):
    backend = example_backend if backend_name == "example" else get_backend("cpu")
    buf = UnifiedBuffer((2, 3), dtype=[("id", "<u8"), ("x", "<f8")], backend=backend)
    buf.host["id"] = np.arange(6).reshape(2, 3)
    view = buf.host_readonly()
    for derived in (view, view[1:], view["x"], view.view(), view.reshape(6), view.T):
        with pytest.raises(ValueError, match="WRITEABLE"):
            derived.flags.writeable = True
    assert view.shape == (2, 3)
    assert view.dtype == buf.dtype
    assert list(view["id"].ravel()) == list(range(6))
    buf.host["id"][0, 0] = 42  # a view, not a copy: later writes show through
    assert buf.host_readonly()["id"][0, 0] == 42
    assert UnifiedBuffer((0, 5), backend=backend).host_readonly().shape == (0, 5)
    assert UnifiedBuffer((), dtype=np.int16, backend=backend).host_readonly().shape == ()


async def test_copying_or_pickling_a_buffer_is_a_type_error_saying_how_to_copy_the_data(
    example_backend,
):
    import copy
    import pickle

    buf = UnifiedBuffer((3,), dtype=np.float32, backend=example_backend)
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match=r"UnifiedBuffer cannot be copied or pickled") as info:
            attempt(buf)
        assert "numpy.array(buf)" in str(info.value)
        assert "_thread" not in str(info.value)
    data = np.array(buf)  # what the message says does work
    assert pickle.loads(pickle.dumps(data)).shape == (3,)
    assert UnifiedBuffer.from_array(data, backend=example_backend).shape == (3,)


def test_a_closed_buffer_is_not_kept_by_its_pool(example_backend):
    from pdc_core import MemoryPool

    pool = MemoryPool(backend=example_backend)
    buf = pool.acquire((16,), dtype=np.float32)
    buf.close()
    pool.release(buf)
    stats = pool.statistics()
    assert stats.bytes_in_use == 0
    assert stats.bytes_held == 0
    assert pool.acquire((16,), dtype=np.float32) is not buf


async def test_sync_to_host_async_copies_without_blocking_the_loop(example_backend):
    buf = UnifiedBuffer((3,), dtype=np.int32, backend=example_backend)
    buf.device._data[:] = 7  # the device copy is newer now
    stream = example_backend.create_stream()
    await buf.sync_to_host_async(stream)
    assert buf.state is BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(buf.host_readonly(), [7, 7, 7])
    stream.close()
    buf.device._data[:] = 9
    await buf.sync_to_host_async()  # on a stream of its own
    np.testing.assert_array_equal(buf.host_readonly(), [9, 9, 9])


# -- allocation on first use, allocate() and free() ------------------------------------


def test_memory_is_taken_on_first_use_and_free_gives_it_back():
    buf = UnifiedBuffer(5, dtype=np.int16, backend="cpu")  # an int is one dimension
    assert (buf.shape, buf.dtype, buf.nbytes, len(buf)) == ((5,), np.int16, 10, 5)
    assert not buf.is_allocated
    assert buf.state is BufferState.UNINITIALIZED
    buf[1] = 4  # any use of the data allocates zero-filled memory
    assert buf.is_allocated
    assert list(buf.host_readonly()) == [0, 4, 0, 0, 0]
    buf.free()
    assert not buf.is_allocated
    assert buf.state is BufferState.UNINITIALIZED
    assert list(buf.host) == [0] * 5  # usable again: fresh memory
    buf.close()
    assert not buf.is_allocated
    with pytest.raises(ValueError, match="is closed"):
        buf.free()


def test_allocate_chooses_whether_the_device_copy_is_made_now(example_backend):
    buf = UnifiedBuffer((3,), dtype=np.int32, backend=example_backend)
    assert buf.allocate(device=False) is buf
    assert buf.state is BufferState.HOST_ONLY
    assert example_backend.copies["to_device"] == 0
    buf.host[:] = [1, 2, 3]
    buf.allocate()  # keeps the data, adds the device copy
    assert buf.state is BufferState.SYNCHRONIZED
    assert list(buf.device._data) == [1, 2, 3]
    assert UnifiedBuffer((2,), backend="cpu").allocate().state is BufferState.SYNCHRONIZED
    assert UnifiedBuffer((2,), backend="cpu").allocate(device=False).state is (
        BufferState.HOST_ONLY
    )
    with pytest.raises(ValueError, match="always has host memory"):
        UnifiedBuffer((2,)).allocate(host=False)


def test_marking_a_copy_of_a_buffer_without_memory_dirty_is_refused():
    from pdc_core import BufferNotAllocatedError

    buf = UnifiedBuffer((2,), backend="cpu")
    for mark in (buf.mark_host_dirty, buf.mark_device_dirty):
        with pytest.raises(BufferNotAllocatedError, match="not been allocated"):
            mark()
    assert not buf.is_allocated


def test_data_methods_go_through_the_host_copy_and_chain(example_backend):
    buf = UnifiedBuffer((4,), dtype=np.float32, backend=example_backend)
    assert buf.fill(2.5) is buf
    assert buf.is_allocated
    buf.sync_to_device()
    assert buf.copy_from(np.arange(4)) is buf
    assert buf.state is BufferState.HOST_DIRTY  # the next device use copies it over
    assert list(buf.device._data) == [0, 1, 2, 3]
    out = np.empty(4, np.float32)
    assert buf.copy_to(out) is out
    assert list(out) == [0, 1, 2, 3]
    assert buf[2] == 2
    view = buf[1:3]
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 9
    assert list(buf.zeros().host_readonly()) == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="could not broadcast"):
        buf.copy_from(np.arange(3))


def test_synchronize_copies_the_newer_copy_over(example_backend):
    buf = UnifiedBuffer((2,), dtype=np.int32, backend=example_backend)
    buf.synchronize()  # no memory: nothing to do
    assert not buf.is_allocated
    buf.device._data[:] = [5, 6]
    buf.synchronize()
    assert buf.state is BufferState.SYNCHRONIZED
    assert list(buf.host_readonly()) == [5, 6]
    kept = buf.host
    kept[0] = 1
    buf.synchronize()
    assert buf.state is BufferState.SYNCHRONIZED
    assert list(buf.device._data) == [1, 6]


async def test_ensure_on_host_and_on_device(example_backend):
    buf = UnifiedBuffer((2,), dtype=np.int32, backend=example_backend)
    await buf.ensure_on_device()
    assert buf.state is BufferState.SYNCHRONIZED
    buf.device._data[:] = 3
    await buf.ensure_on_host()
    assert list(buf.host_readonly()) == [3, 3]
    buf.host[:] = 4
    await buf.ensure_on_device()
    assert list(buf.device._data) == [4, 4]


async def _meanwhile(backend, buf, use):
    """Run ``use(buf)`` while ``buf.sync_to_host_async`` waits for its queued copy."""
    import anyio

    class HeldStream(type(backend.create_stream())):
        released = False

        @property
        def done(self) -> bool:
            return self.released

    stream = HeldStream(backend)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(buf.sync_to_host_async, stream)
            await anyio.wait_all_tasks_blocked()  # it waits for the copy
            use(buf)
            stream.released = True


async def test_free_while_sync_to_host_async_waits_leaves_the_buffer_without_memory(
    example_backend,
):
    # The copy was queued into the memory that free() gave back: when it completes the
    # buffer is still UNINITIALIZED, not SYNCHRONIZED with no memory behind it.
    buf = UnifiedBuffer((3,), dtype=np.int32, backend=example_backend)
    buf.device._data[:] = 7  # the device copy is newer
    await _meanwhile(example_backend, buf, UnifiedBuffer.free)
    assert not buf.is_allocated
    assert buf.state is BufferState.UNINITIALIZED
    np.testing.assert_array_equal(buf.host_readonly(), [0, 0, 0])  # starts over


async def test_a_host_write_while_sync_to_host_async_waits_stays_dirty(example_backend):
    # A write through .host meanwhile made the host copy the newer one: the copy's end
    # must not mark the buffer SYNCHRONIZED, or the write never reaches the device.
    buf = UnifiedBuffer((3,), dtype=np.int32, backend=example_backend)
    buf.device._data[:] = 7

    def write(buf: UnifiedBuffer) -> None:
        buf.host[0] = 5

    await _meanwhile(example_backend, buf, write)
    assert buf.state is BufferState.HOST_DIRTY
    buf.sync_to_device()
    np.testing.assert_array_equal(buf.device._data, [5, 7, 7])
