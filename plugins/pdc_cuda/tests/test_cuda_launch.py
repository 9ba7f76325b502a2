"""Launch configuration and the launch/stream paths of the cuda backend, with a fake CuPy.

The automatic configuration is the core's (``tests/kernels/test_kernel_launch_config.py``
tests its table and limits); here: that pdc-cuda uses it with the device's and the
kernel's limits, that explicit grids become the triples ``RawKernel`` takes, and that
the paths which wait (``launch_kernel`` without a stream, ``synchronize`` while a
kernel is resident) wait for one stream, never for the whole device.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import FakeCupy, FakeRuntimeError, fake_backend
from pdc_cuda import CudaKernel, LaunchConfig, auto_block_size, launch_config
from pdc_cuda._launch import explicit_config
from pdc_cuda._streams import CudaEvent, CudaStream, query_done

import pdc_core


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


class _Raw:
    """Stands for a ``cupy.RawKernel``: records its launches."""

    def __init__(self, max_threads_per_block: int = 1024) -> None:
        self.max_threads_per_block = max_threads_per_block
        self.launches: list[tuple[object, ...]] = []

    def __call__(self, grid, block, args, *, shared_mem=0):
        self.launches.append((grid, block, args, shared_mem))


class _Resident:
    """Stands for a CudaResidentKernel in the backend's bookkeeping."""

    def __init__(self, stream: CudaStream) -> None:
        self.stream = stream
        self.exited = False
        self.shares_primary = True  # placement "shared": in the primary context
        self.label = "'resident'"


def _kernel(backend, max_threads_per_block=1024):
    raw = _Raw(max_threads_per_block)
    return CudaKernel(backend, raw, "k", "src", ()), raw


def test_the_automatic_configuration_is_the_cores():
    assert launch_config is pdc_core.launch_config
    assert auto_block_size is pdc_core.auto_block_size
    assert LaunchConfig is pdc_core.LaunchConfig
    backend = fake_backend(maxThreadsPerBlock=1024)
    assert backend.launch_config(1_000_000) == LaunchConfig(grid=(1954,), block=(512,))
    assert backend.launch_config((100, 100)) == LaunchConfig(grid=(7, 7), block=(16, 16))


def test_the_kernels_own_limit_caps_the_block():
    backend = fake_backend()
    kernel, _ = _kernel(backend, max_threads_per_block=384)  # register-limited
    assert kernel.thread_limit == 384
    assert kernel.config(10**7).block == (256,)  # a power of two within the limit
    with pytest.raises(ValueError, match="512 threads; the device allows at most 384"):
        kernel.config(10**7, block=512)


def test_explicit_grids_and_blocks_become_triples():
    assert explicit_config(4, 256) == ((4, 1, 1), (256, 1, 1))
    assert explicit_config((2, 3), (16, 16)) == ((2, 3, 1), (16, 16, 1))
    assert explicit_config(8, (32, 4)) == ((8, 1, 1), (32, 4, 1))
    assert explicit_config(0, 64) == ((0, 1, 1), (64, 1, 1))
    with pytest.raises(ValueError, match="dimension x is 2048"):
        explicit_config(1, 2048)
    with pytest.raises(ValueError, match="block 0 has a zero dimension"):
        explicit_config(1, 0)
    with pytest.raises(ValueError, match="at most 256"):
        explicit_config(1, 512, max_threads_per_block=256)
    with pytest.raises(TypeError, match="grid must be an int"):
        explicit_config("4", 1)


def test_launch_kernel_without_a_stream_waits_for_its_stream_only(cupy):
    backend = fake_backend()
    kernel, raw = _kernel(backend)
    x = np.float32(2)
    backend.launch_kernel(kernel, (4, 1, 1), (256, 1, 1), (x,))
    assert raw.launches == [((4, 1, 1), (256, 1, 1), (x,), 0)]
    # The legacy default stream is waited for through an event, never the device.
    assert cupy.log == [("event.record", 0), ("event.synchronize", 0)]
    cupy.current = cupy.stream(0x51)  # a current stream of the caller's
    backend.launch_kernel(kernel, (1, 1, 1), (32, 1, 1), ())
    assert cupy.log[-1] == ("stream.synchronize", 0x51)
    assert ("deviceSynchronize", -1) not in cupy.log


def test_launch_kernel_on_a_stream_returns_at_once(cupy):
    backend = fake_backend()
    kernel, raw = _kernel(backend)
    stream = CudaStream(backend, cupy.stream(0x52))
    backend.launch_kernel(kernel, (2, 1, 1), (64, 1, 1), (), stream=stream, shared_mem=128)
    assert raw.launches == [((2, 1, 1), (64, 1, 1), (), 128)]
    assert cupy.log == []
    backend.launch_kernel(kernel, (0, 1, 1), (64, 1, 1), (), stream=stream)  # empty grid
    assert len(raw.launches) == 1
    with pytest.raises(TypeError, match="was not compiled by"):
        backend.launch_kernel(_kernel(fake_backend())[0], (1, 1, 1), (1, 1, 1), ())


def test_a_numpy_array_argument_is_refused(cupy):
    backend = fake_backend()
    kernel, _ = _kernel(backend)
    with pytest.raises(TypeError, match="lives in host memory"):
        backend.launch_kernel(kernel, (1, 1, 1), (1, 1, 1), (np.zeros(4),))


def test_stream_and_event_status(cupy):
    assert query_done(0) is True
    assert query_done(600) is False  # cudaErrorNotReady
    with pytest.raises(FakeRuntimeError) as caught:
        query_done(700)  # cudaErrorIllegalAddress: CuPy's Stream.done would say False
    assert caught.value.status == 700
    backend = fake_backend()
    raw = cupy.stream(0x53)
    stream = CudaStream(backend, raw)
    raw.status = 600
    assert not stream.done
    raw.status = 0
    assert stream.done
    raw.status = 719  # cudaErrorLaunchFailure
    with pytest.raises(FakeRuntimeError):
        stream.done  # noqa: B018
    assert CudaEvent(SimpleNamespace(ptr=1)).done


def test_synchronize_while_resident_never_waits_for_the_device(cupy):
    backend = fake_backend()
    other = CudaStream(backend, cupy.stream(0x61))
    backend._streams.add(other)
    resident_stream = CudaStream(backend, cupy.stream(0x62))
    backend._streams.add(resident_stream)
    resident = _Resident(resident_stream)
    backend.residency.register(resident)
    backend.synchronize()
    assert ("stream.synchronize", 0x61) in cupy.log
    assert ("stream.synchronize", 0x62) not in cupy.log
    assert ("deviceSynchronize", -1) not in cupy.log
    assert cupy.log[-2:] == [("event.record", 0), ("event.synchronize", 0)]
    with pytest.raises(pdc_core.BackendError, match=r"primary CUDA context \('resident'\)"):
        backend.free_cached_memory()
    resident.exited = True
    cupy.log.clear()
    backend.synchronize()
    assert cupy.log == [("deviceSynchronize", -1)]


def test_a_kernel_in_a_context_of_its_own_leaves_the_primary_context_free(cupy):
    """synchronize() waits for the primary context: the kernel is in another one."""
    backend = fake_backend()
    resident_stream = CudaStream(backend, cupy.stream(0x63))
    resident = _Resident(resident_stream)
    resident.shares_primary = False  # placement "own": a context pdc owns
    backend.residency.register(resident)
    backend.synchronize()
    assert cupy.log == [("deviceSynchronize", -1)]
    assert backend.resident_kernels() == [resident]
