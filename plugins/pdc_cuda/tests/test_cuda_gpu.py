"""Behaviour on a real GPU: marked ``cuda``, skipped with the backend's reason elsewhere.

Run on a machine with an NVIDIA GPU: ``pytest -m cuda plugins/pdc_cuda``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import requires_gpu
from pdc_cuda import CudaCompileError, CudaRingBody

import pdc_core
from pdc_core import (
    ActorCrashed,
    BackendError,
    BackendUnavailable,
    BufferState,
    MemoryKind,
    UnifiedBuffer,
)
from pdc_core.testing import BackendConformance
from pdc_core.testing.pytest_plugin import anyio_backend  # noqa: F401 - asyncio and trio

# anyio runs the async tests under asyncio and trio even when this directory is run
# alone (the pdc pytest plugin is loaded by the top-level tests/conftest.py only).
pytestmark = [pytest.mark.cuda, requires_gpu(), pytest.mark.anyio]

REQUEST = np.dtype([("id", "<u8"), ("x", "<f4")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f4")], align=True)
DOUBLE = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.id = request.id;
    reply.y = 2.0f * request.x;
    return request.id == 0xDEADull ? 300 : 0;
}
"""


@pytest.fixture
def cuda():
    return pdc_core.get_backend("cuda")


class TestCudaConformance(BackendConformance):
    backend_name = "cuda"


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

    kernel = cuda.compile_kernel(
        'extern "C" __global__ void scale(float* x, float a, unsigned long long n) {'
        "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;"
        "  if (i < n) x[i] *= a; }",
        "scale",
    )
    data = cupy.arange(100_000, dtype=cupy.float32)
    config = kernel(data.size, data, np.float32(3), np.uint64(data.size))
    assert config.block == (256, 1, 1)
    np.testing.assert_allclose(data.get(), np.arange(100_000, dtype=np.float32) * 3)
    with pytest.raises(CudaCompileError, match="error"):
        cuda.compile_kernel('extern "C" __global__ void k() { int x = ; }', "k")
    with pytest.raises(ValueError, match="defines no kernel named 'nope'"):
        cuda.compile_kernel('extern "C" __global__ void k() {}', "nope")


def _double_kernel(**kw):
    from pdc_core._persistent import PersistentKernel

    kernel = PersistentKernel("double", REQUEST, REPLY, capacity=64, **kw)
    kernel.add_body("cuda", DOUBLE)
    return kernel


async def test_resident_kernel_round_trips_and_stops(cuda):
    from pdc_core._persistent import open_persistent_kernel

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
    from pdc_core._persistent import open_persistent_kernel

    with pytest.raises(ActorCrashed) as caught:
        async with open_persistent_kernel(_double_kernel(), cuda) as session:
            await session.request((0xDEAD, 1.0))
    assert caught.value.cause.code == 300
    assert "request #0" in caught.value.cause.detail


async def test_body_that_does_not_compile_fails_the_launch(cuda):
    from pdc_core._persistent import PersistentKernel, open_persistent_kernel

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
