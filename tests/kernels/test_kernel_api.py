"""``@kernel``: decorator forms, arguments, backends, streams, errors, async launch.

A fake discrete-GPU backend (separate device memory, a kernel "compiler") stands in
for pdc-cuda, to check what the kernel layer hands to a backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from pdc_core import (
    Backend,
    BackendUnavailable,
    BufferState,
    Capability,
    CapabilityError,
    DeviceInfo,
    Kernel,
    UnifiedBuffer,
    cuda,
    get_backend,
    kernel,
)
from pdc_core.backend import Availability, Event, MemoryKind, MemoryStatistics, Stream


@kernel(block=(128,))
def scale(data, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < len(data):
        out[i] = data[i] * 2


@kernel
def increment(a):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


# -- decorator forms ---------------------------------------------------------------------


def test_decorator_forms() -> None:
    assert isinstance(scale, Kernel)
    assert scale.block == (128,)
    assert scale.grid is None
    assert scale.name == scale.__name__ == "scale"
    assert increment.block is None
    assert scale.py_func is not None
    assert scale.source is None
    assert "scale" in repr(scale)

    @kernel(name="renamed", grid=(2,), block=4)
    def fixed(out):  # type: ignore[no-untyped-def]
        out[cuda.grid(1)] = cuda.blockIdx.x

    out = np.zeros(8)
    fixed(out)
    np.testing.assert_array_equal(out, [0, 0, 0, 0, 1, 1, 1, 1])
    assert fixed.name == "renamed"


def test_numba_launch_forms() -> None:
    data = np.arange(10.0)
    out = np.zeros(10)
    scale[1, 16](data, out)
    np.testing.assert_array_equal(out, data * 2)
    stream = get_backend("cpu").create_stream()
    out[:] = 0
    scale[(1,), (16,), stream, 0](data, out)
    stream.synchronize()
    np.testing.assert_array_equal(out, data * 2)
    scale[1, 16, 0](data, out)  # numba's "default stream" 0
    assert "scale" in repr(scale[1, 16])
    with pytest.raises(TypeError, match=r"kernel\[grid, block\]"):
        scale[16]


def test_cuda_jit_forms() -> None:
    @cuda.jit(device=True)
    def twice(x):  # type: ignore[no-untyped-def]
        return 2 * x

    @cuda.jit("void(float64[:])")
    def apply(a):  # type: ignore[no-untyped-def]
        i = cuda.grid(1)
        if i < a.size:
            a[i] = twice(a[i])

    assert twice(3) == 6  # a device function stays a plain function
    a = np.arange(5.0)
    apply(a)
    np.testing.assert_array_equal(a, np.arange(5.0) * 2)


def test_launch_options_and_cpu_mode() -> None:
    @kernel(options={"cpu_mode": "threads"})
    def per_thread(a):  # type: ignore[no-untyped-def]
        a[cuda.grid(1)] = cuda.threadIdx.x

    a = np.zeros(64)
    per_thread(a, block=32)
    np.testing.assert_array_equal(a, np.tile(np.arange(32), 2))
    assert per_thread.options == {"cpu_mode": "threads"}


# -- arguments ----------------------------------------------------------------------------


def test_unified_buffers_are_passed_through_their_device_view() -> None:
    data = UnifiedBuffer.from_array(np.arange(300, dtype=np.float32))
    out = UnifiedBuffer((300,), dtype=np.float32)
    scale(data, out)
    np.testing.assert_array_equal(out.host, np.arange(300) * 2)
    assert out.state is BufferState.SYNCHRONIZED


def test_scalars_and_size() -> None:
    @kernel
    def fill(out, value, n):  # type: ignore[no-untyped-def]
        i = cuda.grid(1)
        if i < n:
            out[i] = value

    out = np.zeros(100)
    fill(out, 2.5, 40, size=40)
    assert (out[:40] == 2.5).all()
    assert (out[40:] == 0).all()
    assert fill.config_for(out, 2.5, 40, size=40).grid == (1,)


def test_empty_launch_does_nothing() -> None:
    scale(np.zeros(0), np.zeros(0))


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((np.zeros(4),), TypeError, r"scale\(data, out\) called with 1 argument"),
        ((np.zeros(4), [0, 0, 0, 0]), TypeError, "argument 1 of kernel 'scale' is a list"),
        ((np.zeros(4), "out"), TypeError, "is a str"),
        ((np.zeros(4), (np.zeros(4), [1])), TypeError, "item 1 of argument 1 .* is a list"),
        ((np.zeros(4), object()), TypeError, "is a object"),
    ],
)
def test_bad_arguments(args: tuple[Any, ...], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        scale(*args)


def test_bad_launch_options() -> None:
    data = np.zeros(4)
    with pytest.raises(ValueError, match="shared_mem must not be negative"):
        scale(data, data, shared_mem=-1)
    with pytest.raises(TypeError, match="stream must be a pdc Stream"):
        scale(data, data, stream="default")  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable, match="nosuch"):
        scale(data, data, backend="nosuch")
    with pytest.raises(TypeError, match="unexpected keyword"):
        scale(data, data, threads=4)  # type: ignore[call-arg]


def test_bad_kernels() -> None:
    with pytest.raises(TypeError, match=r"@kernel\(block=\(256,\)\)"):
        kernel((256,))  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="async function"):

        @kernel
        async def coroutine(a):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(TypeError, match="generator"):

        @kernel
        def generator(a):  # type: ignore[no-untyped-def]
            yield a

    with pytest.raises(TypeError, match="Python function"):
        kernel(len)
    with pytest.raises(ValueError, match="cpu_mode"):
        kernel(options={"cpu_mode": "fast"})(lambda a: None)
    with pytest.raises(TypeError, match="mapping"):
        kernel(options=("-O3",))(lambda a: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backend must be"):
        kernel(backend=3)(lambda a: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="already a kernel"):
        kernel(scale)


def test_kernel_errors_propagate_with_the_thread() -> None:
    @kernel
    def fails(a):  # type: ignore[no-untyped-def]
        if cuda.grid(1) == 7:
            raise ArithmeticError("thread seven")

    with pytest.raises(ArithmeticError, match="thread seven") as caught:
        fails(np.zeros(16))
    assert "thread (7, 0, 0)" in caught.value.__notes__[0]


# -- source kernels and backends -------------------------------------------------------------

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def test_source_kernels_need_the_kernels_capability() -> None:
    saxpy = kernel.source(SAXPY, block=256)
    assert saxpy.name == "saxpy"
    assert saxpy.source == SAXPY
    assert saxpy.py_func is None
    x = np.ones(10, np.float32)
    with pytest.raises(CapabilityError) as caught:
        saxpy(np.float32(2), x, x.copy(), np.int32(10))
    message = str(caught.value)
    assert "'saxpy' cannot run on the cpu:0 backend" in message
    assert "no kernels capability" in message
    assert "pip install pdc-cuda" in message


def test_source_kernel_names() -> None:
    two = SAXPY + 'extern "C" __global__ void other(float* y) {}'
    with pytest.raises(ValueError, match="found: saxpy, other"):
        kernel.source(two)
    assert kernel.source(two, name="other").name == "other"
    with pytest.raises(ValueError, match="not a C identifier"):
        kernel.source(SAXPY, name="sax py")
    with pytest.raises(TypeError, match="non-empty string"):
        kernel.source("  ")
    with pytest.raises(TypeError, match="compiler flags"):
        kernel.source(SAXPY, options={"fastmath": True})  # type: ignore[arg-type]


class FakeDeviceArray:
    """Device memory of the fake GPU: a private NumPy array nobody else can see."""

    def __init__(self, data: npt.NDArray[Any]) -> None:
        self._data = data
        self.shape = data.shape
        self.dtype = data.dtype

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}


class FakeStream(Stream):
    """Runs work immediately, remembering that it was queued on a stream."""

    def __init__(self, backend: FakeGpu) -> None:
        self._backend = backend

    @property
    def backend(self) -> FakeGpu:
        return self._backend

    def synchronize(self) -> None:
        pass

    @property
    def done(self) -> bool:
        return True

    def wait_event(self, event: Event) -> None:
        pass


class FakeEvent(Event):
    def record(self, stream: Stream) -> None:
        pass

    @property
    def done(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class FakeGpu(Backend):
    """A discrete device: arrays must be copied in and out; it "compiles" SAXPY."""

    name: ClassVar[str] = "fakegpu"
    distribution: ClassVar[str] = "pdc-fakegpu"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.DEVICE_MEMORY, Capability.KERNELS, Capability.PYTHON_KERNELS}
    )

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)
        self.log: list[tuple[Any, ...]] = []

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [DeviceInfo("fakegpu", 0, "Fake GPU", "gpu", properties={"maxThreadsPerBlock": 512})]

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        if kind in (MemoryKind.DEVICE, MemoryKind.MANAGED):
            return FakeDeviceArray(np.zeros(shape, dtype))
        return np.zeros(shape, dtype)

    def to_device(self, host: Any, out: Any = None, stream: Stream | None = None) -> Any:
        self.log.append(("to_device", host.shape, stream is not None))
        if out is None:
            return FakeDeviceArray(np.array(host, copy=True))
        np.copyto(out._data, host)
        return out

    def to_host(self, device: Any, out: Any = None, stream: Stream | None = None) -> Any:
        self.log.append(("to_host", device.shape, stream is not None))
        if out is None:
            return device._data.copy()
        np.copyto(out, device._data)
        return out

    def memory_statistics(self) -> MemoryStatistics:
        return MemoryStatistics()

    def create_stream(self) -> FakeStream:
        return FakeStream(self)

    def create_event(self) -> FakeEvent:
        return FakeEvent()

    def synchronize(self) -> None:
        pass

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> Any:
        self.log.append(("compile", name, options))
        return ("module", name)

    def launch_kernel(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
    ) -> None:
        self.log.append(("launch", kernel, grid, block, shared_mem, stream is not None))
        a, x, y, n = args
        assert isinstance(x, FakeDeviceArray)
        assert isinstance(y, FakeDeviceArray)
        y._data[:n] = a * x._data[:n] + y._data[:n]

    def run_python_kernel(
        self,
        body: Callable[..., Any],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
        options: Any = None,
    ) -> None:
        self.log.append(("run", body.__name__, grid, block, dict(options or {})))
        host_args = tuple(a._data if isinstance(a, FakeDeviceArray) else a for a in args)
        cuda.simulate(body, grid, block, host_args, shared_mem=shared_mem)


def test_source_kernel_on_a_discrete_gpu() -> None:
    gpu = FakeGpu()
    saxpy = kernel.source(SAXPY, block=256, options=("-O3",), backend=gpu)
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, dtype=np.float32)
    saxpy(np.float32(2), x, y, np.int32(1000))
    saxpy(np.float32(2), x, y, np.int32(1000))  # compiled once
    np.testing.assert_array_equal(y, 4 * x + 1)
    compiles = [entry for entry in gpu.log if entry[0] == "compile"]
    assert compiles == [("compile", "saxpy", ("-O3",))]
    launch = next(entry for entry in gpu.log if entry[0] == "launch")
    assert launch == ("launch", ("module", "saxpy"), (4, 1, 1), (256, 1, 1), 0, False)
    # NumPy arguments were copied in, and (being writeable) copied back
    assert gpu.log[:2] == [("to_device", (1000,), False), ("to_device", (1000,), False)]
    assert ("to_host", (1000,), False) in gpu.log


def test_python_kernel_on_a_discrete_gpu_with_a_stream_and_buffers() -> None:
    gpu = FakeGpu()
    data = UnifiedBuffer.from_array(np.arange(600, dtype=np.float32), backend=gpu)
    out = UnifiedBuffer((600,), dtype=np.float32, backend=gpu)
    stream = gpu.create_stream()
    scale(data, out, stream=stream)  # the backend comes from the buffers and the stream
    stream.synchronize()
    assert out.state is BufferState.DEVICE_DIRTY
    np.testing.assert_array_equal(out.host, np.arange(600) * 2)
    run = next(entry for entry in gpu.log if entry[0] == "run")
    assert run == ("run", "scale", (5, 1, 1), (128, 1, 1), {})


def test_device_limits_of_the_backend_apply() -> None:
    gpu = FakeGpu()
    with pytest.raises(ValueError, match="at most 512"):
        scale(np.zeros(4), np.zeros(4), block=1024, backend=gpu)
    assert increment.config_for(np.zeros(10**6), backend=gpu).block == (512,)


def test_mixed_backends_are_refused() -> None:
    gpu = FakeGpu()
    on_gpu = UnifiedBuffer((4,), backend=gpu)
    with pytest.raises(
        ValueError,
        match="backend= names cpu:0, but argument 0 \\(a UnifiedBuffer\\) is on fakegpu:0",
    ):
        increment(on_gpu, backend="cpu")
    with pytest.raises(ValueError, match="the stream is on cpu:0"):
        increment(on_gpu, stream=get_backend("cpu").create_stream())


def test_device_arrays_are_refused_by_the_cpu_backend() -> None:
    with pytest.raises(TypeError, match="CUDA device array"):
        increment(FakeDeviceArray(np.zeros(4)), backend="cpu")


def test_non_contiguous_arrays_on_a_discrete_gpu() -> None:
    with pytest.raises(ValueError, match="non-contiguous"):
        increment(np.zeros((4, 4))[:, 0], backend=FakeGpu())


def test_backends_without_python_kernels() -> None:
    class SourceOnly(FakeGpu):
        name: ClassVar[str] = "sourceonly"
        capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.KERNELS})

    with pytest.raises(CapabilityError, match="no python_kernels capability") as caught:
        increment(np.zeros(4), backend=SourceOnly())
    assert "Backends here that can: cpu" in str(caught.value)

    class Minimal(Backend):
        """The contract's defaults refuse both kinds of kernels."""

        name: ClassVar[str] = "minimal"
        distribution: ClassVar[str] = "none"
        availability = FakeGpu.availability
        devices = FakeGpu.devices
        allocate = FakeGpu.allocate
        to_device = FakeGpu.to_device
        to_host = FakeGpu.to_host
        memory_statistics = FakeGpu.memory_statistics
        create_stream = FakeGpu.create_stream  # type: ignore[assignment]
        create_event = FakeGpu.create_event  # type: ignore[assignment]
        synchronize = FakeGpu.synchronize

    minimal = Minimal()
    with pytest.raises(CapabilityError, match="cannot launch kernels"):
        minimal.launch_kernel(None, (1, 1, 1), (1, 1, 1), ())
    with pytest.raises(CapabilityError, match="cannot run Python kernel bodies"):
        minimal.run_python_kernel(len, (1, 1, 1), (1, 1, 1), ())


def test_cpu_backend_declares_python_kernels_only() -> None:
    cpu = get_backend("cpu")
    assert cpu.has(Capability.PYTHON_KERNELS)
    assert not cpu.has(Capability.KERNELS)


# -- streams and async -----------------------------------------------------------------------


def test_launch_on_a_cpu_stream_returns_before_completion() -> None:
    release = threading.Event()

    @kernel
    def slow(a):  # type: ignore[no-untyped-def]
        release.wait(10)  # held until the launch has returned (bounded: a bug fails, not hangs)
        a[cuda.grid(1)] = 1

    stream = get_backend("cpu").create_stream()
    a = np.zeros(4)
    slow(a, stream=stream, block=4)
    assert not a.any()  # returned while the kernel was held (a blocking launch would fail here)
    release.set()
    stream.synchronize()
    np.testing.assert_array_equal(a, 1)
    stream.close()


async def test_launch_async() -> None:
    data = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(data)
    await scale.launch_async(data, out)
    np.testing.assert_array_equal(out, data * 2)
    out[:] = 0
    await scale[8, 128].launch_async(data, out)
    np.testing.assert_array_equal(out, data * 2)


async def test_launch_async_on_a_given_stream() -> None:
    stream = get_backend("cpu").create_stream()
    a = np.zeros(10)
    await increment.launch_async(a, stream=stream)
    await increment.launch_async(a, stream=stream)
    np.testing.assert_array_equal(a, 2)
    stream.close()


@kernel
def sleepy(a):  # type: ignore[no-untyped-def]
    time.sleep(0.3)  # once: 64 threads for 64 elements never diverge
    a[cuda.grid(1)] = 1


async def test_launch_async_does_not_block_the_event_loop() -> None:
    ticks = 0
    release = threading.Event()

    @kernel
    def held(a):  # type: ignore[no-untyped-def]
        release.wait(10)  # until the loop has ticked 10 times (bounded: a bug fails, not hangs)
        a[cuda.grid(1)] = 1

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1
            if ticks == 10:  # the loop ran while launch_async below waited
                release.set()

    a = np.zeros(64)
    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        await held.launch_async(a)
        group.cancel_scope.cancel()
    np.testing.assert_array_equal(a, 1)
    assert ticks >= 10


async def test_cancelled_launch_async_waits_for_the_kernel() -> None:
    # By identity: a thread of an earlier test may end meanwhile, which a count misreads.
    threads_before = set(threading.enumerate())
    a = np.zeros(64)
    start = time.perf_counter()
    with anyio.move_on_after(0.05) as scope:
        await sleepy.launch_async(a)
    assert scope.cancelled_caught
    assert time.perf_counter() - start >= 0.25  # shielded until the kernel finished
    np.testing.assert_array_equal(a, 1)  # nothing is still writing to it
    assert set(threading.enumerate()) <= threads_before  # the stream's worker is gone


async def test_launch_async_raises_kernel_errors() -> None:
    @kernel
    def fails(a):  # type: ignore[no-untyped-def]
        raise OverflowError("from the kernel")

    with pytest.raises(OverflowError, match="from the kernel"):
        await fails.launch_async(np.zeros(4))
