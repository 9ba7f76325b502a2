"""Helpers of the pdc-cuda tests.

Tests that need a GPU are marked ``cuda`` and skip, with the backend's own reason
("no CUDA driver (libcuda.so not found)", ...), where the backend is unavailable.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pdc_core.backend import Availability

#: benchmarks/cuda_ring.py, which the tests load as a module.
BENCHMARK = Path(__file__).resolve().parents[3] / "benchmarks" / "cuda_ring.py"


def load_benchmark(name: str = "cuda_ring") -> Any:
    """``benchmarks/<name>.py`` imported as a module (it is not a package)."""
    path = BENCHMARK.with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"pdc_{name}_benchmark", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nvrtc_missing() -> str | None:
    """Why NVRTC cannot be used here, or ``None`` when it can."""
    from pdc_cuda import NvrtcUnavailable
    from pdc_cuda._nvrtc import find_nvrtc

    try:
        find_nvrtc()
    except NvrtcUnavailable as exc:
        return str(exc)
    return None


def needs_nvrtc() -> pytest.MarkDecorator:
    """``skipif`` NVRTC is missing, with the reason (``pdc-cuda[nvrtc]`` provides it)."""
    missing = nvrtc_missing()
    return pytest.mark.skipif(missing is not None, reason=f"NVRTC cannot be loaded: {missing}")


def real_stderr(config: pytest.Config) -> int:
    """A descriptor of the terminal's stderr, which pytest's output capture leaves alone.

    pytest's faulthandler plugin keeps one (so crash dumps are seen); where it is not
    there, the process's original stderr. A watchdog writing to the captured stderr
    would end the run without a word.
    """
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return int(config.stash[fault_handler_stderr_fd_key])
    except (ImportError, KeyError):
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else 2


@functools.cache
def cuda_availability() -> Availability:
    from pdc_cuda import CudaBackend

    return CudaBackend.availability()


def host_build_marks() -> list[pytest.MarkDecorator]:
    """The marks of a host-build test module: ``cuda_host``, and a skip saying why where
    no host build of the ring kernel can be made (no C++20 compiler, no NVRTC)."""
    from pdc_cuda.testing import HostCudaBackend

    availability = HostCudaBackend.availability()
    return [
        pytest.mark.cuda_host,
        pytest.mark.skipif(
            not availability.available,
            reason=f"no host build of the ring kernel: {availability.reason}",
        ),
    ]


def requires_gpu() -> pytest.MarkDecorator:
    """``skipif`` with the exact reason the cuda backend gives for being unavailable."""
    availability = cuda_availability()
    return pytest.mark.skipif(
        not availability.available,
        reason=f"needs a CUDA GPU: the cuda backend is unavailable here: {availability.reason}",
    )


class FakeRuntimeError(Exception):
    """Stands for ``cupy.cuda.runtime.CUDARuntimeError``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"cudaError {status}")
        self.status = status


class FakeRawStream:
    """Stands for ``cupy.cuda.Stream``: records what is done to it."""

    def __init__(self, ptr: int, log: list[tuple[str, int]]) -> None:
        self.ptr = ptr
        self.status = 0
        self._log = log

    def synchronize(self) -> None:
        self._log.append(("stream.synchronize", self.ptr))

    def __enter__(self) -> FakeRawStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class FakeCupy:
    """The slice of CuPy's API the backend's stream and launch paths use.

    ``log`` records every synchronizing call, so a test can assert that nothing
    waited for the whole device (``deviceSynchronize``).
    """

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self.null = FakeRawStream(0, self.log)
        self.current = self.null
        log = self.log
        fake = self

        class Event:
            def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
                self.ptr = 0xE0
                self.stream: FakeRawStream | None = None

            def record(self, stream: FakeRawStream) -> None:
                self.stream = stream
                log.append(("event.record", stream.ptr))

            def synchronize(self) -> None:
                log.append(("event.synchronize", self.stream.ptr if self.stream else -1))

            @property
            def done(self) -> bool:
                return True

        def stream_query(ptr: int) -> int:
            return fake.streams.get(ptr, fake.null).status

        def device_synchronize() -> None:
            log.append(("deviceSynchronize", -1))

        self.streams: dict[int, FakeRawStream] = {}
        runtime = type(
            "runtime",
            (),
            {
                "CUDARuntimeError": FakeRuntimeError,
                "streamQuery": staticmethod(stream_query),
                "eventQuery": staticmethod(lambda ptr: 0),
                "deviceSynchronize": staticmethod(device_synchronize),
            },
        )
        self.cuda = type(
            "cuda",
            (),
            {
                "runtime": runtime,
                "Event": Event,
                "get_current_stream": staticmethod(lambda: fake.current),
            },
        )

    def stream(self, ptr: int) -> FakeRawStream:
        """A new fake non-blocking stream with handle ``ptr``."""
        raw = FakeRawStream(ptr, self.log)
        self.streams[ptr] = raw
        return raw


H100_PROPERTIES = {
    "name": b"NVIDIA H100",
    "major": 9,
    "minor": 0,
    "canMapHostMemory": 1,
    "kernelExecTimeoutEnabled": 0,
    "multiProcessorCount": 132,
    "maxThreadsPerBlock": 1024,
}


def fake_backend(**properties: Any) -> Any:
    """A real ``CudaBackend`` bound to fake device properties, built without CUDA.

    Its bookkeeping (resident kernels, deferred frees, streams) is the real code;
    ``device_context`` does nothing. Install :class:`FakeCupy` as ``sys.modules
    ["cupy"]`` for the methods that call CuPy.
    """
    import contextlib

    from pdc_cuda import CudaBackend, CudaDeviceProperties

    parsed = CudaDeviceProperties.from_dict(0, {**H100_PROPERTIES, **properties})

    class FakeCudaBackend(CudaBackend):
        def __init__(self) -> None:
            self.device = 0
            self._setup_residency("shared", 8)  # the primary context: CuPy, faked

        @property
        def properties(self) -> CudaDeviceProperties:
            return parsed

        @contextlib.contextmanager
        def device_context(self) -> Iterator[None]:
            yield

        def device_pointer(self, host: Any) -> int:
            return int(host.ctypes.data)

    return FakeCudaBackend()


# -- CUDA sources the GPU tests use (compiled to PTX without a GPU by
#    test_cuda_gpu_sources.py, so a GPU run never fails on a typo) ---------------------

REQUEST = np.dtype([("id", "<u8"), ("x", "<f4")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f4")], align=True)
STATE = np.dtype([("count", "<u8")])

#: Doubles ``x``; request id 0xDEAD makes the body return error code 300.
DOUBLE = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.id = request.id;
    reply.y = 2.0f * request.x;
    return request.id == 0xDEADull ? 300 : 0;
}
"""

#: Counts requests in the device state; replies carry the count seen before each.
COUNTING = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply, pdc_state* state) {
    reply.id = atomicAdd(&state->count, 1ull);
    reply.y = request.x;
    return 0;
}
"""

#: A plain kernel: ``x[i] *= a`` for ``i < n``.
SCALE = (
    'extern "C" __global__ void scale(float* x, float a, unsigned long long n) {'
    "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;"
    "  if (i < n) x[i] *= a; }"
)


def skip_if_a_kernel_is_resident(backend: Any) -> Any:
    """``backend``, or skip the test (saying which kernels) if a kernel an earlier test
    launched is still resident on its device: queued behind a kernel that never ends,
    the test would only hang under the watchdog and hide every test after it."""
    resident = backend.resident_kernels()
    if resident:
        names = ", ".join(sorted(repr(kernel.kernel.name) for kernel in resident))
        pytest.skip(
            f"a kernel an earlier test launched is still resident on {backend.qualified_name} "
            f"({names}): this test would queue behind it"
        )
    return backend


#: A 16-byte record with 7 bytes of padding after ``flag``.
PADDED = np.dtype([("id", "<u8"), ("flag", "u1")], align=True)


def padding_kernels() -> list[Any]:
    """Kernels whose body fills the whole reply with 0xAB before writing its fields
    (what a struct assignment or a stale stage would leave in the padding): one whose
    8-byte requests are read in place, one whose padded requests are staged."""
    from pdc_core import PersistentKernel

    dirty = (
        "__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {\n"
        "    unsigned char* bytes = reinterpret_cast<unsigned char*>(&reply);\n"
        "    for (unsigned int i = 0; i < sizeof(pdc_reply); ++i) bytes[i] = 0xAB;\n"
        "    reply.id = request.ID + 1;\n"
        "    reply.flag = 1;\n"
        "    return 0;\n"
        "}\n"
    )
    in_place = PersistentKernel("padding_in_place", np.uint64, PADDED, capacity=16)
    staged = PersistentKernel("padding_staged", PADDED, PADDED, capacity=16)
    return [
        in_place.add_body("cuda", dirty.replace("ID", "value")),
        staged.add_body("cuda", dirty.replace("ID", "id")),
    ]
