"""``MessageLauncher`` on a real GPU (marked ``cuda``), and its CUDA sources compiled without one.

``pytest -m cuda plugins/pdc_cuda`` runs the GPU tests on a machine with an NVIDIA GPU;
elsewhere they skip with the backend's reason. Each runs under a watchdog of
``PDC_CUDA_TEST_TIMEOUT`` seconds (120 by default) that dumps the stacks and ends the
run rather than hanging. The sources they launch are compiled to PTX by NVRTC on every
CI run (``test_the_sources_compile``), so a GPU session never fails on a typo.
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import DOUBLE, REPLY, REQUEST, needs_nvrtc, requires_gpu
from pdc_cuda import compile_to_ptx
from pdc_cuda.graphs import In, InOut, MessageLauncher, Out

import pdc_core
from pdc_core.backend import MemoryKind

#: ``y[i] = a * x[i]`` for ``i < n``.
SCALE_INTO = """
extern "C" __global__ void scale_into(const float* x, float* y, float a, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""

#: Stores 1 into ``started``, waits (at most about 20 s) until the host stores a non-zero
#: ``release``, then copies ``x`` into ``y``: a replay that stays in flight until told.
WAIT_THEN_COPY = """
extern "C" __global__ void wait_then_copy(const volatile unsigned int* release,
                                          volatile unsigned int* started,
                                          const float* x, float* y, unsigned long long n) {
    if (threadIdx.x == 0) {
        started[0] = 1u;
        __threadfence_system();
        for (long long i = 0; i < 20000000LL && release[0] == 0u; ++i) __nanosleep(1000);
    }
    __syncthreads();
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}
"""

#: ``x[i] += 1`` for ``i < n`` (an InOut buffer).
INCREMENT = """
extern "C" __global__ void increment(int* x, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}
"""

SOURCES = {"scale_into": SCALE_INTO, "wait_then_copy": WAIT_THEN_COPY, "increment": INCREMENT}


def on_gpu(test: Any) -> Any:
    """Mark ``test`` ``cuda``, skip it without a GPU, and run it under the watchdog."""
    for mark in (pytest.mark.cuda, requires_gpu(), pytest.mark.usefixtures("gpu_watchdog")):
        test = mark(test)
    return test


@needs_nvrtc()
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_sources_compile(name):
    assert f".entry {name}(" in compile_to_ptx(SOURCES[name])


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _scale_message(x: np.ndarray, a: float) -> tuple[Any, ...]:
    return (In(x), Out(x.shape, np.float32), np.float32(a), np.uint64(x.size))


@on_gpu
@pytest.mark.parametrize("graph", [True, False])
def test_results_and_replay_reuse(cuda, graph):
    kernel = cuda.compile_kernel(SCALE_INTO, "scale_into")
    with MessageLauncher(kernel, graph=graph) as launcher:
        for i in range(50):
            x = np.arange(1000, dtype=np.float32) + i
            (y,) = launcher(*_scale_message(x, 3.0))
            np.testing.assert_array_equal(y, 3 * x)
        stats = launcher.statistics
        assert stats.messages == 50
        if graph:
            assert (stats.captures, stats.replays) == (1, 50)
        else:
            assert (stats.captures, stats.plain_launches) == (0, 50)


@on_gpu
def test_a_shape_change_captures_again_and_evicts(cuda):
    kernel = cuda.compile_kernel(SCALE_INTO, "scale_into")
    with MessageLauncher(kernel, max_graphs=1) as launcher:
        for n in (100, 5000, 100, 100_000):
            x = np.random.default_rng(n).random(n, dtype=np.float32)
            (y,) = launcher(*_scale_message(x, 0.5))
            np.testing.assert_array_equal(y, np.float32(0.5) * x)
        stats = launcher.statistics
        assert (stats.captures, stats.evictions, stats.cached) == (4, 3, 1)


@on_gpu
def test_in_out_and_source_kernels(cuda):
    increment = pdc_core.kernel.source(INCREMENT, name="increment")
    with MessageLauncher(increment, backend=cuda) as launcher:
        x = np.arange(300, dtype=np.int32)
        (y,) = launcher(InOut(x), np.uint64(300))
        (z,) = launcher(InOut(y), np.uint64(300))
        np.testing.assert_array_equal(z, x + 2)
        np.testing.assert_array_equal(x, np.arange(300))


@on_gpu
@pytest.mark.anyio
async def test_launch_async(cuda):
    kernel = cuda.compile_kernel(SCALE_INTO, "scale_into")
    async with MessageLauncher(kernel) as launcher:
        results = {}

        async def send(i: int) -> None:
            x = np.full(256, i, np.float32)
            (results[i],) = await launcher.launch_async(*_scale_message(x, 2.0))

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(send, i)
        for i in range(8):
            np.testing.assert_array_equal(results[i], np.full(256, 2.0 * i))
        assert launcher.statistics.captures == 1
    assert launcher.closed


@on_gpu
@pytest.mark.anyio
async def test_a_cancelled_message_waits_for_its_replay_and_close_frees(cuda):
    kernel = cuda.compile_kernel(WAIT_THEN_COPY, "wait_then_copy")
    release = cuda.allocate((1,), np.dtype(np.uint32), MemoryKind.MAPPED)
    started = cuda.allocate((1,), np.dtype(np.uint32), MemoryKind.MAPPED)
    release[0] = 1
    started[0] = 0
    release_view = cuda.mapped_device_array(release)
    started_view = cuda.mapped_device_array(started)
    x = np.arange(64, dtype=np.float32)
    args = (release_view, started_view, In(x), Out(64, np.float32), np.uint64(64))
    before = cuda.memory_statistics().bytes_in_use  # the device pool's bytes in use
    launcher = MessageLauncher(kernel, grid=1, block=32)
    (y,) = launcher(*args)  # captured; released at once
    np.testing.assert_array_equal(y, x)
    release[0] = 0
    started[0] = 0
    finished: list[bool] = []
    scope = anyio.CancelScope()

    async def send() -> None:
        with scope:
            try:
                await launcher.launch_async(*args)
            finally:
                finished.append(True)

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        try:
            with anyio.fail_after(10):
                while started[0] == 0:  # noqa: ASYNC110 - the kernel signals through host memory
                    await anyio.sleep(0.001)
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert not finished  # cancelled, yet waiting (shielded) for its replay
            launcher.close()  # in flight: freed when the message ends
        finally:
            release[0] = 1
    assert finished == [True]
    assert launcher.statistics.cached == 0
    assert cuda.memory_statistics().bytes_in_use == before


@on_gpu
@pytest.mark.anyio
async def test_capture_and_replay_beside_a_resident_kernel(cuda):
    """Capture, instantiation and replays wait for their own stream, never the device."""
    from pdc_core import PersistentKernel, open_persistent_kernel

    kernel = cuda.compile_kernel(SCALE_INTO, "scale_into")  # loaded before the kernel is resident
    resident = PersistentKernel("double", REQUEST, REPLY, capacity=64)
    resident.add_body("cuda", DOUBLE)
    async with open_persistent_kernel(resident, cuda) as session:
        with MessageLauncher(kernel) as launcher:
            for _ in range(3):
                x = np.arange(512, dtype=np.float32)
                (y,) = await launcher.launch_async(*_scale_message(x, 4.0))
                np.testing.assert_array_equal(y, 4 * x)
        reply = await session.request((5, 1.5))
        assert float(reply["y"]) == 3.0
