"""Behaviour on a real GPU: marked ``cuda``, skipped with the backend's reason elsewhere.

Run on a machine with an NVIDIA GPU: ``pytest -m cuda plugins/pdc_cuda``. Every test
runs under a watchdog (``PDC_CUDA_TEST_TIMEOUT`` seconds, 120 by default): a test that
hangs on the device dumps every thread's stack and ends the run instead of using up
the machine's time. Every CUDA source used here is also compiled to PTX without a GPU
by ``test_cuda_gpu_sources.py``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import (
    COUNTING,
    DOUBLE,
    REPLY,
    REQUEST,
    SCALE,
    STATE,
    requires_gpu,
)
from pdc_cuda import CudaCompileError, CudaRingBody
from pdc_cuda._numba import numba_numpy_mismatch

import pdc_core
from pdc_core import ActorCrashed, BackendError, BackendUnavailable, BufferState, UnifiedBuffer
from pdc_core.backend import MemoryKind
from pdc_core.testing import BackendConformance
from pdc_core.testing.pytest_plugin import anyio_backend  # noqa: F401 - asyncio and trio

# anyio runs the async tests under asyncio and trio even when this directory is run
# alone (the pdc pytest plugin is loaded by the top-level tests/conftest.py only).
pytestmark = [
    pytest.mark.cuda,
    requires_gpu(),
    pytest.mark.anyio,
    pytest.mark.usefixtures("gpu_watchdog"),
]


class TestCudaConformance(BackendConformance):
    backend_name = "cuda"

    def run_python_kernel_examples(self, backend: Any) -> None:
        _skip_if_numba_cannot_compile()
        super().run_python_kernel_examples(backend)


def _skip_if_numba_cannot_compile() -> None:
    if importlib.util.find_spec("numba") is None:
        pytest.skip("numba-cuda is not installed: pip install -e 'plugins/pdc_cuda[numba]'")
    mismatch = numba_numpy_mismatch()
    if mismatch is not None:
        pytest.skip(mismatch)


def test_devices_and_properties(cuda):
    info = cuda.device_info
    assert info.kind == "gpu"
    assert info.total_memory is not None
    assert info.total_memory > 0
    for key in (
        "compute_capability",
        "multiProcessorCount",
        "canMapHostMemory",
        "unifiedAddressing",
        "kernelExecTimeoutEnabled",
    ):
        assert key in info.properties


def test_device_index_out_of_range_lists_devices(cuda):
    count = len(cuda.devices())
    with pytest.raises(BackendUnavailable, match=f"has {count} device"):
        pdc_core.get_backend(f"cuda:{count}")


def test_memory_kinds(cuda):
    import cupy

    for kind in (MemoryKind.PINNED, MemoryKind.MAPPED):
        host = cuda.allocate((1000,), np.dtype(np.float32), kind)
        assert isinstance(host, np.ndarray)
        host[:] = 3
    mapped = cuda.allocate((16,), np.dtype(np.int32), MemoryKind.MAPPED)
    mapped[:] = np.arange(16)
    view = cuda.mapped_device_array(mapped)
    assert int(view.sum()) == int(np.arange(16).sum())  # the device reads host memory
    for kind in (MemoryKind.DEVICE, MemoryKind.MANAGED):
        array = cuda.allocate((8,), np.dtype(np.float64), kind)
        assert isinstance(array, cupy.ndarray)


def test_pinned_unified_buffer_gives_cupy_arrays_and_interop(cuda):
    import cupy

    buf = UnifiedBuffer((256,), dtype=np.float32, pinned=True, backend=cuda)
    buf.host[:] = np.arange(256)
    device = buf.device
    assert isinstance(device, cupy.ndarray)
    device *= 2
    buf.sync_to_host()
    assert buf.state is BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(buf.host_readonly(), np.arange(256) * 2)
    assert buf.__cuda_array_interface__["shape"] == (256,)
    assert cupy.from_dlpack(buf).shape == (256,)


def test_kernels_compile_launch_and_report_errors(cuda):
    import cupy

    kernel = cuda.compile_kernel(SCALE, "scale")
    data = cupy.arange(100_000, dtype=cupy.float32)
    config = kernel(data.size, data, np.float32(3), np.uint64(data.size))
    assert config.block == (256,)  # a launch config keeps the dimensions it was given
    np.testing.assert_allclose(data.get(), np.arange(100_000, dtype=np.float32) * 3)
    with pytest.raises(CudaCompileError, match="error"):
        cuda.compile_kernel('extern "C" __global__ void k() { int x = ; }', "k")
    with pytest.raises(ValueError, match="defines no kernel named 'nope'"):
        cuda.compile_kernel('extern "C" __global__ void k() {}', "nope")


def _double_kernel(**kw):
    from pdc_core import PersistentKernel

    kernel = PersistentKernel("double", REQUEST, REPLY, capacity=64, **kw)
    kernel.add_body("cuda", DOUBLE)
    return kernel


async def test_resident_kernel_round_trips_and_stops(cuda):
    from pdc_core import open_persistent_kernel

    async with open_persistent_kernel(_double_kernel(), cuda) as session:
        assert cuda._resident
        cuda.synchronize()  # must not wait for the resident kernel
        with pytest.raises(BackendError, match="persistent kernel"):
            cuda.free_cached_memory()
        reply = await session.request((7, 1.5))
        assert (int(reply["id"]), float(reply["y"])) == (7, 3.0)
        batch = np.zeros(1000, REQUEST)
        batch["id"] = np.arange(1000)
        batch["x"] = np.arange(1000)
        replies = await session.request_batch(batch)
        np.testing.assert_array_equal(replies["id"], np.arange(1000))
        np.testing.assert_array_equal(replies["y"], np.arange(1000) * 2)
        await session.pause()
        await session.resume()
    assert not cuda._resident


async def test_error_word_surfaces_as_actor_crashed(cuda):
    from pdc_core import open_persistent_kernel

    with pytest.raises(ActorCrashed) as caught:
        async with open_persistent_kernel(_double_kernel(), cuda) as session:
            await session.request((0xDEAD, 1.0))
    assert caught.value.cause.code == 300
    assert "request #0" in caught.value.cause.detail


async def test_body_that_does_not_compile_fails_the_launch(cuda):
    from pdc_core import PersistentKernel, open_persistent_kernel

    kernel = PersistentKernel("broken", REQUEST, REPLY)
    kernel.add_body(
        "cuda",
        CudaRingBody(
            "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) { r.nope = 1; return 0; }"
        ),
    )
    with pytest.raises(CudaCompileError, match="nope"):
        async with open_persistent_kernel(kernel, cuda):
            pass
    assert not cuda._resident


def test_launch_kernel_without_a_stream_returns_completed(cuda):
    import cupy

    kernel = cuda.compile_kernel(SCALE, "scale")
    data = cupy.ones(4096, dtype=cupy.float32)
    config = kernel.config(data.size)
    cuda.launch_kernel(
        kernel, config.grid3, config.block3, (data, np.float32(5), np.uint64(data.size))
    )
    assert float(data.sum()) == 5 * 4096
    stream = cuda.create_stream()
    cuda.launch_kernel(
        kernel, config.grid3, config.block3, (data, np.float32(2), np.uint64(data.size)),
        stream=stream,
    )  # fmt: skip
    stream.synchronize()
    assert float(data.sum()) == 10 * 4096
    stream.close()


def test_kernel_source_decorator_with_numpy_arguments(cuda):
    scale = pdc_core.kernel.source(SCALE, name="scale")
    data = np.arange(1000, dtype=np.float32)
    scale(data, np.float32(3), np.uint64(data.size), backend=cuda)  # copied there and back
    np.testing.assert_allclose(data, np.arange(1000, dtype=np.float32) * 3)


async def test_kernel_launch_async(cuda):
    scale = pdc_core.kernel.source(SCALE, name="scale")
    data = np.ones(300, dtype=np.float32)
    await scale.launch_async(data, np.float32(4), np.uint64(data.size), backend=cuda)
    np.testing.assert_allclose(data, 4)


@pytest.mark.skipif(
    importlib.util.find_spec("numba") is None,
    reason="numba-cuda is not installed: pip install -e 'plugins/pdc_cuda[numba]'",
)
def test_python_kernel_through_numba(cuda):
    from pdc_core import cuda as pdc_cuda_api

    _skip_if_numba_cannot_compile()

    @pdc_core.kernel(block=(128,))
    def square(data, out):  # type: ignore[no-untyped-def]
        i = pdc_cuda_api.grid(1)
        if i < data.shape[0]:
            out[i] = data[i] * data[i]

    data = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(data)
    square(data, out, backend=cuda)
    np.testing.assert_allclose(out, data * data)


async def test_plain_launches_while_a_kernel_is_resident(cuda):
    """A launch without a stream waits for its own stream, never the resident kernel."""
    import cupy

    from pdc_core import open_persistent_kernel

    # Everything a launch needs is compiled and loaded before the kernel is resident:
    # the test is about waiting (one stream, never the device), not module loading.
    kernel = cuda.compile_kernel(SCALE, "scale")
    data = cupy.ones(256, dtype=cupy.float32)
    async with open_persistent_kernel(_double_kernel(), cuda) as session:
        cuda.launch_kernel(kernel, (1, 1, 1), (256, 1, 1), (data, np.float32(3), np.uint64(256)))
        np.testing.assert_array_equal(cuda.to_host(data), np.full(256, 3, np.float32))
        cuda.synchronize()
        reply = await session.request((1, 2.0))
        assert float(reply["y"]) == 4.0


async def test_drain_answers_every_published_request(cuda):
    from pdc_core import open_persistent_kernel

    batch = np.zeros(64, REQUEST)
    batch["id"] = np.arange(64)
    batch["x"] = 1
    replies = {}
    async with open_persistent_kernel(_double_kernel(), cuda) as session:

        async def ask() -> None:
            replies["batch"] = await session.request_batch(batch)

        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            with anyio.fail_after(10):
                while session.resident.status.in_head < 64:  # noqa: ASYNC110 - host-side poll
                    await anyio.sleep(0.001)
            await session.stop(drain=True)
    np.testing.assert_array_equal(replies["batch"]["id"], np.arange(64))
    assert not cuda.resident_kernels()


async def test_device_state_is_shared_and_read_back(cuda):
    from pdc_core import PersistentKernel, open_persistent_kernel

    kernel = PersistentKernel("counting", REQUEST, REPLY, capacity=64, state=np.zeros(1, STATE))
    kernel.add_body("cuda", COUNTING)
    batch = np.zeros(100, REQUEST)
    batch["id"] = np.arange(100)
    async with open_persistent_kernel(kernel, cuda) as session:
        replies = await session.request_batch(batch)
        assert sorted(int(seen) for seen in replies["id"]) == list(range(100))
        await session.pause()
        assert int(session.read_state()["count"][0]) == 100
        await session.resume()
        await session.request((0, 0.0))
    assert int(session.read_state()["count"][0]) == 101  # the copy taken at the stop


async def test_the_kernel_takes_a_request_by_its_sequence_word_alone(cuda):
    """ring-protocol.md section 12: on CUDA the input ring has sequenced slots, and the
    kernel answers a request whose payload and sequence word are stored, IN_HEAD not."""
    from pdc_core.backend import Offset, RingMemory

    kernel = _double_kernel()
    memory = RingMemory.allocate(cuda, kernel.layout)
    assert memory.layout.sequenced_input
    assert memory.in_sequences is not None
    resident = cuda.launch_persistent_kernel(kernel, memory)
    try:
        with anyio.fail_after(30):
            while not resident.started:  # noqa: ASYNC110 - the device stores it
                await anyio.sleep(0.001)
        memory.in_slots[0] = (5, 2.5)  # the payload, then its sequence word: request 0
        memory.in_sequences[0] = 1
        with anyio.fail_after(30):
            while memory.load64(Offset.OUT_HEAD) != 1:  # noqa: ASYNC110 - the device's
                await anyio.sleep(0.001)
        assert memory.load64(Offset.IN_HEAD) == 0  # never published by IN_HEAD
        assert memory.load64(Offset.IN_TAIL) == 1
        assert (int(memory.out_slots[0]["id"]), float(memory.out_slots[0]["y"])) == (5, 5.0)
        memory.words64[Offset.IN_HEAD >> 3] = 1  # what the host stores next
    finally:
        await resident.stop(10)
        resident.release()
    assert resident.error is None
    assert not cuda.resident_kernels()
