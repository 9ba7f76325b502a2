"""Streams, events and running MLX work on them (sync, futures, async under both loops)."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import anyio
import numpy as np
import pytest
from metal_support import HAS_MLX, metal_backend, needs_mlx
from pdc_metal import MetalEvent, MetalStream

from pdc_core import UnifiedBuffer

pytestmark = needs_mlx

if HAS_MLX:
    import mlx.core as mx


def _stream_threads() -> int:
    return sum(thread.name == "pdc-metal-stream" for thread in threading.enumerate())


def test_work_runs_in_order_on_a_dedicated_mlx_stream() -> None:
    metal = metal_backend()
    seen: list[tuple[int, Any]] = []
    with metal.create_stream() as stream:
        for index in range(20):
            stream.submit(lambda i=index: seen.append((i, mx.default_stream(mx.default_device()))))
        stream.synchronize()
        assert stream.done
    assert [index for index, _ in seen] == list(range(20))
    mlx_streams = {str(s) for _, s in seen}
    assert len(mlx_streams) == 1
    assert mlx_streams != {str(mx.default_stream(mx.default_device()))}


def test_results_are_evaluated_before_the_work_counts_as_done() -> None:
    metal = metal_backend()
    with metal.create_stream() as stream:
        future = stream.submit(lambda: mx.arange(1_000_000) * 2)
        event = stream.record_event()
        event.synchronize()
        assert future.done()
        assert int(np.asarray(future.result())[-1]) == 1_999_998


def test_events_order_work_across_streams() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((1,), dtype=np.int64, backend=metal)
    first, second = metal.create_stream(), metal.create_stream()
    try:
        gate = threading.Event()
        first.submit(gate.wait)
        first.submit(lambda: buf.host.__setitem__(0, 7))
        marker = first.record_event()
        assert isinstance(marker, MetalEvent)
        assert not marker.done
        second.wait_event(marker)
        read = second.submit(lambda: int(buf.host[0]))
        time.sleep(0.05)
        assert not read.done()  # second waits for first
        gate.set()
        assert read.result(timeout=10) == 7
    finally:
        first.close()
        second.close()


def test_stream_errors_surface_in_the_future_and_in_synchronize() -> None:
    metal = metal_backend()
    with metal.create_stream() as stream:
        future = stream.submit(lambda: 1 / 0)
        later = stream.submit(lambda: mx.array([1, 2]) + 1)
        with pytest.raises(ZeroDivisionError):
            stream.synchronize()
        with pytest.raises(ZeroDivisionError):
            future.result()
        assert later.result().tolist() == [2, 3]
        stream.synchronize()  # the error was reported once


def test_closing_stops_the_worker_and_refuses_more_work() -> None:
    metal = metal_backend()
    before = _stream_threads()
    stream = metal.create_stream()
    stream.submit(lambda: mx.ones(3))
    assert _stream_threads() == before + 1
    stream.close()
    assert _stream_threads() == before
    assert stream.closed
    with pytest.raises(RuntimeError, match="closed"):
        stream.submit(lambda: None)
    stream.close()  # idempotent


def test_a_forgotten_stream_does_not_leak_its_thread() -> None:
    metal = metal_backend()
    before = _stream_threads()
    stream = metal.create_stream()
    stream.submit(lambda: mx.ones(3)).result(timeout=10)
    assert _stream_threads() == before + 1
    del stream
    gc.collect()
    deadline = time.monotonic() + 5
    while _stream_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _stream_threads() == before


def test_wrong_stream_and_event_types_are_named() -> None:
    metal = metal_backend()
    with metal.create_stream() as stream:
        with pytest.raises(TypeError, match="metal event"):
            stream.wait_event(object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="metal stream"):
            MetalEvent().record(object())  # type: ignore[arg-type]
    assert MetalEvent().done  # never recorded: done


def test_copies_on_a_stream_of_lazy_graphs_built_on_another_thread() -> None:
    """MLX cannot evaluate, on the worker, a graph built on this thread's default stream;
    ``to_host`` starts evaluation here so the stream's copy works."""
    metal = metal_backend()
    lazy = mx.arange(10) * 3
    out = np.empty(10, dtype=np.int32)
    with metal.create_stream() as stream:
        metal.to_host(lazy, out=out, stream=stream)
        stream.synchronize()
    np.testing.assert_array_equal(out, np.arange(10) * 3)


def test_submit_converts_buffers_and_writes_out() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((4,), dtype=np.float32, backend=metal)
    buf.host[:] = [1, 2, 3, 4]
    future = metal.submit(lambda x: x * 10, buf, out=buf)
    assert isinstance(metal.default_stream, MetalStream)
    assert future.result(timeout=10).tolist() == [10, 20, 30, 40]
    np.testing.assert_array_equal(buf.host, [10, 20, 30, 40])


def test_backend_synchronize_waits_for_every_stream() -> None:
    metal = metal_backend()
    done: list[int] = []
    streams = [metal.create_stream() for _ in range(3)]
    try:
        for index, stream in enumerate(streams):
            stream.submit(lambda i=index: (time.sleep(0.01), done.append(i)))
        metal.synchronize()
        assert sorted(done) == [0, 1, 2]
    finally:
        for stream in streams:
            stream.close()


async def test_run_async_does_not_block_the_loop() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((3,), dtype=np.float32, backend=metal)
    buf.host[:] = [1, 2, 3]
    ticks = 0
    gate = threading.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not gate.is_set():
            ticks += 1
            await anyio.sleep(0.001)

    def slow(x: Any) -> Any:
        gate.wait(5)
        return mx.sqrt(x * x) + 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0.01)
        result = metal.run_async(slow, buf, out=buf)
        tg.start_soon(_release_later, gate)
        values = await result
    assert ticks > 1
    assert values.tolist() == [2.0, 3.0, 4.0]
    np.testing.assert_array_equal(buf.host, [2, 3, 4])


async def _release_later(gate: threading.Event) -> None:
    await anyio.sleep(0.02)
    gate.set()


async def test_cancelled_wait_leaves_the_work_to_finish() -> None:
    metal = metal_backend()
    gate = threading.Event()
    finished = threading.Event()

    def work() -> Any:
        gate.wait(5)
        finished.set()
        return mx.zeros(1)

    with metal.create_stream() as stream:
        with anyio.move_on_after(0.02) as scope:
            await metal.run_async(work, stream=stream)
        assert scope.cancelled_caught
        gate.set()
        await stream.wait()
        assert finished.is_set()


async def test_stream_and_event_waits_under_both_loops() -> None:
    metal = metal_backend()
    with metal.create_stream() as stream:
        stream.submit(lambda: mx.ones(100) * 2)
        event = stream.record_event()
        await event.wait()
        await stream.wait()
        assert event.done
        assert stream.done
