"""Every ring-kernel snippet of the seed documents, with ``pdc_core`` for ``pydotcompute``.

The kernel bodies below are copied from ``../shared/seeds/001_*.txt`` ("GPU
Optimization", sections Batch Processing, Queue Size Tuning, Priority Processing,
Async Streams and Actor Telemetry). Only what the snippets leave to the reader is
added: ``process_batch_gpu``, the ``worker`` kernel, the workload, and for
``stream_processor`` NumPy stand-ins for CuPy's streams and ``cp.asarray``. Each test
runs under asyncio and under trio; the snippets' ``except asyncio.TimeoutError`` must
catch the receive timeout under both.
"""

# The seed code is kept as written (bare except, asyncio.TimeoutError, zip without strict).
# ruff: noqa: E722, UP041, B905

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import Request, Response, RingKernelRuntime, ring_kernel

LIMIT = 10


def process_batch_gpu(batch: list[Any]) -> list[Any]:
    """What the seed leaves to the reader: the batch's work (NumPy here)."""
    return list(np.asarray([msg.data for msg in batch]) * 2)


# --- Batch Processing (verbatim) --------------------------------------------------------


# fmt: off
@ring_kernel(kernel_id="batch_processor", queue_size=10000)
async def batch_processor(ctx):
    batch_size = 100

    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue

        try:
            # Collect batch
            batch = []
            for _ in range(batch_size):
                try:
                    msg = await ctx.receive(timeout=0.01)
                    batch.append(msg)
                except asyncio.TimeoutError:
                    break

            if batch:
                # Process batch on GPU
                results = process_batch_gpu(batch)

                # Send responses
                for msg, result in zip(batch, results):
                    await ctx.send(Response(
                        result=result,
                        correlation_id=msg.message_id,
                    ))

        except:
            continue
# fmt: on


# --- Queue Size Tuning (verbatim) -------------------------------------------------------


# fmt: off
# High throughput, more memory
@ring_kernel(kernel_id="high_throughput", queue_size=10000)
async def high_throughput(ctx):
    ...

# Low latency, less buffering
@ring_kernel(kernel_id="low_latency", queue_size=100)
async def low_latency(ctx):
    ...
# fmt: on


# --- Async Streams (verbatim but for CuPy) ----------------------------------------------


class _Stream:
    """Stands in for ``cp.cuda.Stream`` on a machine without CUDA."""

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        pass


class cp:  # stands in for the ``cupy`` module
    class cuda:
        Stream = _Stream

    asarray = staticmethod(np.asarray)


def kernel(buf: Any) -> Any:
    """The snippet's ``kernel``: some work on the current buffer."""
    return buf * 2


@ring_kernel(kernel_id="stream_processor")
async def stream_processor(ctx):
    # Create CUDA streams
    stream1 = cp.cuda.Stream()
    stream2 = cp.cuda.Stream()

    current_buf = None
    next_buf = None

    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue

        try:
            # Receive next work
            msg = await ctx.receive(timeout=0.1)

            # Process current while loading next
            if current_buf is not None:
                with stream1:
                    result = kernel(current_buf)

            # Load next data
            with stream2:
                next_buf = cp.asarray(msg.data)

            # Synchronize
            stream1.synchronize()
            stream2.synchronize()

            if current_buf is not None:
                await ctx.send(Response(result=result))

            current_buf = next_buf

        except asyncio.TimeoutError:
            continue


# --- the "worker" the Priority Processing and Actor Telemetry snippets talk to --------

processed: list[Any] = []


@ring_kernel(kernel_id="worker", queue_size=1000)
async def worker(ctx):
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.1)
        except asyncio.TimeoutError:
            continue
        processed.append(msg.data)
        await ctx.send(Response(result=msg.data, correlation_id=msg.message_id))


# --- tests ------------------------------------------------------------------------------


async def test_batch_processor() -> None:
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime(enable_telemetry=True) as runtime:
            await runtime.launch("batch_processor")
            await runtime.activate("batch_processor")
            requests = [Request(data=i) for i in range(1000)]
            for request in requests:
                await runtime.send("batch_processor", request)
            responses = [await runtime.receive("batch_processor") for _ in requests]
            telemetry = runtime.get_telemetry("batch_processor")
    by_request = {r.correlation_id: r.result for r in responses}
    assert by_request == {req.message_id: 2 * req.data for req in requests}
    assert telemetry is not None
    assert telemetry.messages_processed == 1000
    assert telemetry.messages_sent == 1000
    assert telemetry.error_count == 0


async def test_batch_processor_deactivate_and_terminate() -> None:
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime() as runtime:
            await runtime.launch("batch_processor")
            await runtime.activate("batch_processor")
            await runtime.deactivate("batch_processor")
            for i in range(250):
                await runtime.send("batch_processor", Request(data=i))
            await anyio.wait_all_tasks_blocked()  # the kernel has done all it would do
            assert runtime.get_telemetry("batch_processor").messages_processed == 0
            await runtime.reactivate("batch_processor")
            got = sorted([(await runtime.receive("batch_processor")).result for _ in range(250)])
            await runtime.terminate("batch_processor")
    assert got == [2 * i for i in range(250)]


async def test_queue_size_tuning_kernels() -> None:
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime() as runtime:
            fast = await runtime.launch("high_throughput")
            slim = await runtime.launch("low_latency")
            await runtime.activate("high_throughput")
            await runtime.activate("low_latency")
            await fast.wait()  # their bodies are `...`: they end at once, cleanly
            await slim.wait()
            assert runtime.get_kernel_state("low_latency").name == "TERMINATED"
    assert fast.definition.input_queue_size == 10000
    assert slim.definition.input_queue_size == 100


@pytest.mark.parametrize("send_normal_first", [False, True])
async def test_priority_processing(send_normal_first: bool) -> None:
    processed.clear()
    x, y = "x", "y"
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime() as runtime:
            await runtime.launch("worker")  # queued until activated

            # High-priority messages processed first
            urgent = Request(data=x, priority=255)
            normal = Request(data=y, priority=128)

            if send_normal_first:
                await runtime.send("worker", normal)
                await runtime.send("worker", urgent)
            else:
                await runtime.send("worker", urgent)  # Processed first
                await runtime.send("worker", normal)  # Processed second

            await runtime.activate("worker")
            await runtime.receive("worker")
            await runtime.receive("worker")
    assert processed == ["x", "y"]


async def test_stream_processor_without_cupy() -> None:
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime() as runtime:
            await runtime.launch("stream_processor")
            await runtime.activate("stream_processor")
            for i in range(5):
                await runtime.send("stream_processor", Request(data=np.full(4, i)))
            results = [await runtime.receive("stream_processor") for _ in range(4)]
            with pytest.raises(asyncio.TimeoutError):  # the 5th waits for a 6th
                await runtime.receive("stream_processor", timeout=0.05)
    for i, response in enumerate(results):
        np.testing.assert_array_equal(response.result, np.full(4, 2 * i))


async def test_actor_telemetry(capsys: pytest.CaptureFixture[str]) -> None:
    with anyio.fail_after(LIMIT):
        async with RingKernelRuntime(enable_telemetry=True) as runtime:
            await runtime.launch("worker")
            await runtime.activate("worker")

            # Run workload...
            for i in range(200):
                await runtime.send("worker", Request(data=i))
                await runtime.receive("worker")

            telemetry = runtime.get_telemetry("worker")
            print(f"Throughput: {telemetry.throughput:.1f} msg/s")
            print(f"Messages: {telemetry.messages_processed}")
    out = capsys.readouterr().out
    assert "Messages: 200\n" in out
    assert telemetry is not None
    assert telemetry.throughput > 0
    assert float(out.split("Throughput: ")[1].split(" ")[0]) > 0
    assert telemetry.latency_p99_ns >= telemetry.latency_p50_ns > 0
