"""The CPU backend: allocation through its caching pool, copies, streams and events."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
from pdc_cpu import CpuBackend

from pdc_core import Capability, get_backend
from pdc_core.backend import MemoryKind


@pytest.fixture
def cpu() -> CpuBackend:
    return CpuBackend()  # a private instance, so pool statistics start at zero


def test_capabilities_are_honest(cpu):
    assert cpu.has(Capability.UNIFIED_MEMORY)
    assert not cpu.has(Capability.DEVICE_MEMORY)
    assert not cpu.has(Capability.PINNED_MEMORY)
    assert get_backend("cpu").device_info.kind == "cpu"


@pytest.mark.parametrize("kind", list(MemoryKind))
def test_every_kind_of_memory_is_host_memory(cpu, kind):
    array = cpu.allocate((3, 4), np.dtype(np.float32), kind)
    assert isinstance(array, np.ndarray)
    assert array.shape == (3, 4)
    assert array.dtype == np.float32


def test_unknown_memory_kind_is_refused(cpu):
    with pytest.raises(ValueError, match="'vram'"):
        cpu.allocate((2,), np.dtype(np.int8), "vram")


def test_pool_reuses_a_block_only_after_every_view_is_gone(cpu):
    first = cpu.allocate((100,), np.dtype(np.float64))
    address = first.ctypes.data
    derived = first[10:20].reshape(2, 5)
    del first
    gc.collect()
    assert cpu.memory_statistics().bytes_in_use == 1024  # 800 B rounded up to 512 B granules
    second = cpu.allocate((100,), np.dtype(np.float64))
    assert second.ctypes.data != address  # the block is still viewed by `derived`
    del derived, second
    gc.collect()
    assert cpu.memory_statistics().bytes_in_use == 0
    third = cpu.allocate((128,), np.dtype(np.float64))  # same 1 KiB size class
    stats = cpu.memory_statistics()
    assert stats.hits == 1
    assert stats.misses == 2
    assert third.nbytes == 1024
    cpu.free_cached_memory()
    assert cpu.memory_statistics().bytes_held == 1024


def test_structured_dtypes_round_trip(cpu):
    dtype = np.dtype([("id", "<u8"), ("value", "<f4")], align=True)
    array = cpu.allocate((5,), dtype)
    assert array.dtype == dtype
    array["id"] = np.arange(5)
    np.testing.assert_array_equal(cpu.to_host(cpu.to_device(array))["id"], np.arange(5))


def test_copies_are_real_copies(cpu):
    host = np.arange(10)
    device = cpu.to_device(host)
    assert not np.shares_memory(device, host)
    out = np.empty_like(host)
    assert cpu.to_host(device, out=out) is out
    with pytest.raises(ValueError, match=r"shape \(10,\)"):
        cpu.to_host(device, out=np.empty(3, dtype=host.dtype))


def test_stream_runs_work_in_order_off_the_calling_thread(cpu):
    stream = cpu.create_stream()
    order: list[int] = []
    threads: set[int] = set()

    def step(index: int) -> None:
        time.sleep(0.001 * (5 - index))  # later items are faster: order must still hold
        order.append(index)
        threads.add(threading.get_ident())

    for index in range(5):
        stream.submit(lambda index=index: step(index))
    stream.synchronize()
    assert order == [0, 1, 2, 3, 4]
    assert threads
    assert threading.get_ident() not in threads
    stream.close()


def test_async_copy_then_event(cpu):
    with cpu.create_stream() as stream:
        host = np.arange(1000, dtype=np.int32)
        gate = threading.Event()
        stream.submit(gate.wait)  # hold the stream so the copy is visibly queued
        out = cpu.to_device(host, stream=stream)
        event = stream.record_event()
        assert not event.done
        gate.set()
        event.synchronize()
        assert event.done
        np.testing.assert_array_equal(out, host)


def test_wait_event_orders_two_streams(cpu):
    first, second = cpu.create_stream(), cpu.create_stream()
    log: list[str] = []
    gate = threading.Event()
    first.submit(gate.wait)
    first.submit(lambda: log.append("first"))
    event = first.record_event()
    reached = threading.Event()
    second.submit(reached.set)
    second.wait_event(event)
    second.submit(lambda: log.append("second"))
    assert reached.wait(10)  # second's worker runs and has come to the wait
    time.sleep(0.01)  # a chance to go wrong: nothing may happen, so nothing to wait for
    assert log == []  # second is held behind first's event
    gate.set()
    cpu.synchronize()
    assert log == ["first", "second"]
    first.close()
    second.close()


def test_errors_in_stream_work_surface_at_synchronize(cpu):
    stream = cpu.create_stream()

    def fail() -> None:
        raise RuntimeError("work failed")

    stream.submit(fail)
    with pytest.raises(RuntimeError, match="work failed"):
        stream.synchronize()
    stream.synchronize()  # reported once
    stream.close()
    with pytest.raises(RuntimeError, match="closed"):
        stream.submit(lambda: None)


def test_unrecorded_event_is_done(cpu):
    assert cpu.create_event().done


def test_closed_and_collected_streams_stop_their_threads(cpu):
    # By identity: a thread of an earlier test may end meanwhile, which a count misreads.
    before = set(threading.enumerate())
    stream = cpu.create_stream()
    stream.submit(lambda: None)
    stream.synchronize()
    (worker,) = set(threading.enumerate()) - before
    del stream
    gc.collect()
    worker.join(2)
    assert not worker.is_alive()


async def test_async_waits_do_not_block_the_event_loop(cpu):
    import anyio

    stream = cpu.create_stream()
    gate = threading.Event()
    stream.submit(lambda: gate.wait(10))  # bounded: a blocked loop fails, not hangs
    event = stream.record_event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not event.done:
            ticks += 1
            if ticks == 4:  # the loop ran while event.wait() below waited: let it end
                gate.set()
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        with anyio.fail_after(5):
            await event.wait()
            await stream.wait()
    assert ticks > 3
    stream.close()
