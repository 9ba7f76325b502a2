"""What ``pdc bench --backend cuda`` measures beside pdc's own paths, and what the CUDA
benchmark scripts share (``benchmarks/cuda_floor.py``, ``benchmarks/cuda_ring.py``).

* **The mapped-memory floor** (:class:`MappedFloor`): a hand-written resident kernel and
  a Python host doing the least a round trip through mapped pinned memory can do. The
  host stores a request number into a control word and spins until the kernel answers
  in another; the kernel's thread 0 polls with acquire loads, the block meets at a
  barrier and thread 0 answers with a release store. With a payload (4 KiB, 64 KiB) the
  kernel first reads it from mapped memory with 16-byte loads, by thread 0 alone or by
  the whole block. It has the ring kernel's launch form, so the host build of
  :mod:`pdc_cuda.testing` runs it on CPU threads too (the floor of that kernel).
* **pdc's resident ring on payloads** (:func:`checksum_kernel`): ``session.request`` of
  one record of 4 KiB or 64 KiB whose reply is an 8-byte checksum of its first and last
  8 bytes, so the payload crosses the bus as the floor's does.
* **Launch paths** (a GPU only): :class:`PrePackedLaunch`, the lowest per-message launch
  cost Python has (the ``cuda.bindings`` driver API with the parameters packed once),
  and :func:`echo_launcher`'s CUDA-graph replay (:class:`~pdc_cuda.graphs.MessageLauncher`),
  each echoing the message through the ``echo`` kernel of :data:`ECHO_KERNEL`.

:func:`benchmark_paths` is what pdc-cuda registers through ``pdc_register_benchmarks``:
the floors, pdc's payload paths and, on a device that launches kernels, the launch paths
of 16 bytes (the size of ``pdc bench``'s own record), 4 KiB and 64 KiB. Every sampler
checks every reply, reaches a checkpoint every 256 round trips and stops what it
started (the floor kernel, a session, a launcher) on the way out, cancelled or not.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, Literal

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt

from pdc_core import PersistentKernel, open_persistent_kernel
from pdc_core.backend import Backend, BenchmarkPath, Capability, MemoryKind

from ._ring_source import KERNEL_NAME

__all__ = [
    "CHECKSUM_BODY",
    "ECHO_KERNEL",
    "FLOOR_SOURCE",
    "PAYLOADS",
    "MappedFloor",
    "PrePackedLaunch",
    "benchmark_paths",
    "bindings_echo",
    "checksum_kernel",
    "cuda_driver",
    "echo_launcher",
    "echo_threads",
    "floor_threads",
]

#: The floor kernel, in the ring kernel's launch form (region, region, state) so that the
#: host build's launcher runs it too. Control words (u64): 0 the host's request number
#: (from 1), 1 the kernel's answer, 2 stop, 3 payload bytes, 4 the block reads it
#: together (else thread 0 alone), 5 a sink that keeps the payload loads.
FLOOR_SOURCE: Final = r"""
#include <cuda/atomic>
struct pdc_state { unsigned long long unused; };
struct alignas(16) floor_u128 { unsigned long long lo, hi; };
typedef cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> floor_word;

extern "C" __global__ void pdc_ring_kernel(unsigned char* control, unsigned char* payload,
                                           pdc_state*) {
    unsigned long long* words = reinterpret_cast<unsigned long long*>(control);
    __shared__ unsigned long long s_request;  // thread 0 stores it before barrier 1 only
    const unsigned long long wide = words[3] / 16;  // plain: written before the launch
    const bool together = words[4] != 0;
    const floor_u128* data = reinterpret_cast<const floor_u128*>(payload);
    unsigned long long seen = 0, sum = 0;
    for (;;) {
        if (threadIdx.x == 0) {
            unsigned long long request;
            while ((request = floor_word(words[0]).load(cuda::memory_order_acquire)) == seen) {
                if (floor_word(words[2]).load(cuda::memory_order_relaxed) != 0) {
                    request = 0;
                    break;
                }
            }
            s_request = request;
        }
        __syncthreads();  // barrier 1
        const unsigned long long request = s_request;
        if (request == 0) break;
        if (together) {
            for (unsigned long long i = threadIdx.x; i < wide; i += blockDim.x) sum += data[i].lo;
        } else if (threadIdx.x == 0) {
            for (unsigned long long i = 0; i < wide; ++i) sum += data[i].lo;
        }
        __syncthreads();  // barrier 2
        if (threadIdx.x == 0) {
            seen = request;
            floor_word(words[1]).store(request, cuda::memory_order_release);
        }
    }
    if (sum == 42) floor_word(words[5]).store(sum, cuda::memory_order_relaxed);
}
"""

#: A pdc kernel's body: an 8-byte checksum of the request's first and last 8 bytes.
CHECKSUM_BODY: Final = r"""
__device__ int pdc_body(const pdc_request& q, pdc_reply& r) {
    unsigned long long first = 0, last = 0;
    const unsigned long long n = sizeof(q.b);
    for (unsigned long long k = 0; k < 8 && k < n; ++k) {
        first |= static_cast<unsigned long long>(q.b[k]) << (8 * k);
        last |= static_cast<unsigned long long>(q.b[n - 1 - k]) << (8 * k);
    }
    r.s = first + last;
    return 0;
}
"""

#: One message per launch: the block copies ``words`` 8-byte words from ``src`` to ``dst``.
ECHO_KERNEL: Final = """
extern "C" __global__ void echo(const unsigned long long* src, unsigned long long* dst,
                                unsigned long long words) {
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}
"""

#: The payload sizes of the floor and of pdc's payload paths, by label.
PAYLOADS: Final = {"8 B": 8, "4 KiB": 4096, "64 KiB": 65536}
#: ``pdc bench``'s own record (``id`` and ``x``, 16 bytes): the launch paths' small size.
RECORD_BYTES: Final = 16
#: Polls of the floor's answer word between two looks at its kernel's stream.
_POLLS_PER_LOOK: Final = 1 << 16


def floor_threads(backend: Any, nbytes: int) -> int:
    """The floor's block size for ``nbytes`` of payload (that of the first GPU run: 256,
    and 1,024 for 64 KiB), capped by the device's threads per block."""
    wanted = 1024 if nbytes > 4096 else 256
    return int(min(wanted, backend.properties.max_threads_per_block))


def echo_threads(words: int) -> int:
    """The block size of the one-block ``echo`` launch for ``words`` 8-byte words."""
    return min(256, max(32, words))


def checksum_kernel(nbytes: int) -> PersistentKernel[Any, Any]:
    """A persistent kernel taking one ``nbytes`` record (field ``b``) and answering the
    8-byte checksum (field ``s``) of :data:`CHECKSUM_BODY`."""
    request = np.dtype([("b", "u1", (nbytes,))])
    reply = np.dtype([("s", "<u8")])
    kernel = PersistentKernel(f"floor{nbytes}", request, reply, capacity=64)
    kernel.add_body("cuda", CHECKSUM_BODY)
    return kernel


class MappedFloor:
    """The floor kernel of ``backend`` (a GPU, or the host build's threads) and its
    mapped control words and payload (``payload_bytes``: the most a round trip may read).
    ``source`` is the kernel's source: :data:`FLOOR_SOURCE`, or a copy differing in a
    comment, which is a module new to the backend (``benchmarks/cuda_contexts.py --host``).

    :meth:`resident` launches it and yields a round trip; the kernel stops when the
    ``with`` block ends, however it ends.
    """

    def __init__(
        self, backend: Any, payload_bytes: int = max(PAYLOADS.values()), source: str = FLOOR_SOURCE
    ) -> None:
        self.backend = backend
        self.control = backend.allocate((64,), np.dtype(np.uint8), MemoryKind.MAPPED)
        self.words = self.control.view(np.uint64)
        self.payload = backend.allocate((payload_bytes,), np.dtype(np.uint8), MemoryKind.MAPPED)
        self.payload[:] = 1
        self.kernel = backend.compile_kernel(source, KERNEL_NAME)

    @contextlib.contextmanager
    def resident(self, nbytes: int, together: bool, threads: int) -> Iterator[Callable[[], int]]:
        """The kernel resident, reading ``nbytes`` of payload per request (by the block
        when ``together``, else by thread 0) with ``threads`` threads; yields ``once()``,
        one round trip, returning its time in nanoseconds. Raises ``RuntimeError`` if the
        kernel stops answering (its stream ended, or 10 s without an answer)."""
        if not 0 <= nbytes <= self.payload.nbytes:
            raise ValueError(f"nbytes must be in 0..{self.payload.nbytes}, not {nbytes}")
        backend, words = self.backend, self.words
        words[:] = 0
        words[3] = nbytes
        words[4] = 1 if together else 0
        stream = backend.create_stream()
        args = (
            np.uint64(backend.device_pointer(self.control)),
            np.uint64(backend.device_pointer(self.payload)),
            np.uint64(0),
        )
        try:
            self.kernel.launch((1,), (threads,), args, stream=stream)
            answered = 0
            clock = time.perf_counter_ns
            polls = range(_POLLS_PER_LOOK)

            def once() -> int:
                nonlocal answered
                request = answered + 1
                start = clock()
                words[0] = request
                # The floor's own loop: as tight as Python polls (no counter to keep),
                # with a look at the kernel's stream after every _POLLS_PER_LOOK polls.
                while True:
                    for _ in polls:
                        if words[1] == request:
                            break
                    else:
                        self._look(stream, start)
                        continue
                    break
                elapsed = clock() - start
                answered = request
                return elapsed

            yield once
        finally:
            words[2] = 1  # stop: the kernel leaves its poll loop
            stream.close()  # waits for it (raises what the launch raised)

    @staticmethod
    def _look(stream: Any, start: int) -> None:
        if stream.done:
            raise RuntimeError("the floor kernel stopped without answering")
        if time.perf_counter_ns() - start > 10_000_000_000:
            raise RuntimeError("the floor kernel has not answered for 10 s")


# -- launch paths (a GPU) ----------------------------------------------------------------------


#: Where NVIDIA's driver bindings live: cuda-bindings >= 12.6, else the older ``cuda.cuda``.
_DRIVER_MODULES: Final = ("cuda.bindings.driver", "cuda.cuda")


def _has_driver_bindings() -> bool:
    """Whether :func:`cuda_driver` can import (without importing it)."""
    for name in _DRIVER_MODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ImportError:  # no ``cuda`` package at all
            pass
    return False


def cuda_driver() -> Any:
    """``cuda.bindings.driver`` (cuda-bindings >= 12.6), else the older ``cuda.cuda``."""
    try:
        return importlib.import_module(_DRIVER_MODULES[0])
    except ImportError:
        return importlib.import_module(_DRIVER_MODULES[1])


class PrePackedLaunch:
    """One message through ``echo`` with the driver API and nothing rebuilt per message.

    ``host_in``/``host_out`` are pinned host arrays of ``words`` 8-byte words, ``src``
    and ``dst`` device addresses of as many, ``function`` the ``CUfunction`` of ``echo``
    and ``stream`` a ``CUstream``: the parameters (``src``, ``dst``, ``words``) are
    packed once into a ``void*[3]`` whose address every launch passes. Calling it
    copies the message into ``host_in``, then copy in, launch, copy out and
    synchronize, checking each call's ``CUresult``; it returns a copy of the reply.
    """

    def __init__(
        self,
        driver: Any,
        function: Any,
        stream: Any,
        src: int,
        dst: int,
        host_in: Any,
        host_out: Any,
        threads: int,
    ) -> None:
        self.driver = driver
        self.function = function
        self.stream = stream
        self.src = driver.CUdeviceptr(src)
        self.dst = driver.CUdeviceptr(dst)
        self.host_in = host_in
        self.host_out = host_out
        self.nbytes = host_in.nbytes
        self.threads = threads
        # The argument values, and the void*[] of their addresses (kept alive here).
        self._values = np.array([src, dst, host_in.size], dtype=np.uint64)
        base = self._values.ctypes.data
        self._params = np.array([base, base + 8, base + 16], dtype=np.uint64)
        self.params = int(self._params.ctypes.data)
        self.success = driver.CUresult.CUDA_SUCCESS

    def _check(self, result: tuple[Any, ...], call: str) -> None:
        if result[0] != self.success:
            raise RuntimeError(f"{call} failed: {result[0]!r}")

    def __call__(self, message: Any) -> Any:
        driver, stream = self.driver, self.stream
        np.copyto(self.host_in, message)
        self._check(
            driver.cuMemcpyHtoDAsync(self.src, self.host_in.ctypes.data, self.nbytes, stream),
            "cuMemcpyHtoDAsync",
        )
        self._check(
            driver.cuLaunchKernel(
                self.function, 1, 1, 1, self.threads, 1, 1, 0, stream, self.params, 0
            ),
            "cuLaunchKernel",
        )
        self._check(
            driver.cuMemcpyDtoHAsync(self.host_out.ctypes.data, self.dst, self.nbytes, stream),
            "cuMemcpyDtoHAsync",
        )
        self._check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        return self.host_out.copy()


@contextlib.contextmanager
def bindings_echo(backend: Any, size: int) -> Iterator[PrePackedLaunch]:
    """A :class:`PrePackedLaunch` of ``size``-byte messages (a multiple of 8): the
    ``echo`` kernel compiled by ``backend`` and launched by its ``CUfunction`` handle,
    device and pinned memory from CuPy, a non-blocking stream; the device current
    inside the block."""
    import cupy

    driver = cuda_driver()
    words = size // 8
    kernel = backend.compile_kernel(ECHO_KERNEL, "echo")
    with backend.device_context():
        stream = cupy.cuda.Stream(non_blocking=True)
        src = cupy.empty(words, np.uint64)
        dst = cupy.empty_like(src)
        pinned = [cupy.cuda.alloc_pinned_memory(size) for _ in range(2)]
        host_in, host_out = (np.frombuffer(memory, np.uint64, words) for memory in pinned)
        yield PrePackedLaunch(
            driver,
            driver.CUfunction(int(kernel.raw.kernel.ptr)),
            driver.CUstream(int(stream.ptr)),
            int(src.data.ptr),
            int(dst.data.ptr),
            host_in,
            host_out,
            echo_threads(words),
        )


def echo_launcher(backend: Any, size: int, graph: bool) -> Any:
    """A :class:`~pdc_cuda.graphs.MessageLauncher` of the ``echo`` kernel for ``size``-byte
    messages: a CUDA graph replayed per message (``graph``), else the same calls made
    directly."""
    from ._graphs import MessageLauncher

    kernel = backend.compile_kernel(ECHO_KERNEL, "echo")
    return MessageLauncher(kernel, grid=1, block=echo_threads(size // 8), graph=graph)


# -- pdc bench ---------------------------------------------------------------------------------

#: ``await sampler(n, warmup)``: ``n`` round trips (ns) after ``warmup`` untimed ones.
Sampler = Callable[[int, int], Awaitable[list[int]]]


async def _timed(once: Callable[[], int], n: int, warmup: int) -> list[int]:
    """``warmup`` then ``n`` calls of ``once()`` (each returns its own time, ns)."""
    samples: list[int] = []
    for i in range(warmup + n):
        elapsed = once()
        if i >= warmup:
            samples.append(elapsed)
        if not i % 256:
            await anyio.lowlevel.checkpoint()  # Ctrl-C and cancellation reach it
    return samples


def _echoed(call: Callable[[npt.NDArray[Any]], Any], size: int, what: str) -> Callable[[], int]:
    """One timed echo of a ``size``-byte message through ``call``, its reply checked."""
    message = np.arange(size // 8, dtype=np.uint64)
    clock = time.perf_counter_ns

    def once() -> int:
        message[0] += 1
        start = clock()
        reply = call(message)
        elapsed = clock() - start
        if not np.array_equal(reply, message):
            raise RuntimeError(f"{what}: the echo kernel returned another message")
        return elapsed

    return once


def floor_round_trip(backend: Any, nbytes: int, together: bool) -> Sampler:
    """Round trips of the mapped-memory floor with ``nbytes`` of payload."""

    async def sample(n: int, warmup: int) -> list[int]:
        floor = MappedFloor(backend, max(nbytes, 16))
        with floor.resident(nbytes, together, floor_threads(backend, nbytes)) as once:
            return await _timed(once, n, warmup)

    return sample


def payload_round_trip(backend: Any, nbytes: int, wait: Literal["sleep", "spin"]) -> Sampler:
    """``session.request`` of one ``nbytes`` record through :func:`checksum_kernel`."""

    async def sample(n: int, warmup: int) -> list[int]:
        kernel = checksum_kernel(nbytes)
        record = np.zeros((), kernel.request_dtype)
        record["b"] = 1
        expected = 2 * 0x0101010101010101
        options = {"threads": floor_threads(backend, nbytes)}
        clock = time.perf_counter_ns
        samples: list[int] = []
        async with open_persistent_kernel(kernel, backend, wait=wait, **options) as session:
            for i in range(warmup + n):
                start = clock()
                reply = await session.request(record)
                elapsed = clock() - start
                if int(reply["s"]) != expected:
                    raise RuntimeError(f"resident ring: checksum {int(reply['s'])} of {nbytes} B")
                if i >= warmup:
                    samples.append(elapsed)
        return samples

    return sample


def bindings_round_trip(backend: Any, size: int) -> Sampler:
    """Echoes of ``size`` bytes through :func:`bindings_echo`."""

    async def sample(n: int, warmup: int) -> list[int]:
        with bindings_echo(backend, size) as launch:
            return await _timed(_echoed(launch, size, "cuda.bindings launch"), n, warmup)

    return sample


def graph_round_trip(backend: Any, size: int) -> Sampler:
    """Echoes of ``size`` bytes through :func:`echo_launcher`'s graph replay."""

    async def sample(n: int, warmup: int) -> list[int]:
        from ._graphs import In, Out

        words = size // 8
        result = Out((words,), np.uint64)
        count = np.uint64(words)
        with echo_launcher(backend, size, graph=True) as launcher:

            def call(message: npt.NDArray[Any]) -> Any:
                return launcher(In(message), result, count)[0]

            return await _timed(_echoed(call, size, "graph replay"), n, warmup)

    return sample


def benchmark_paths(backend: Backend) -> list[BenchmarkPath]:
    """pdc-cuda's paths of ``pdc bench --backend cuda`` on ``backend`` (see the module
    documentation): the floors first, the launch paths where ``backend`` launches
    kernels (the ``cuda.bindings`` one where NVIDIA's driver bindings are installed),
    then pdc's payload paths held against the floors and launches of their size. The
    8-byte floor and the 16-byte launches are the baselines of pdc's own resident
    paths."""
    paths = [
        BenchmarkPath(
            "mapped-memory floor", floor_round_trip(backend, 8, False), resident_baseline=True
        )
    ]
    launches = backend.has(Capability.KERNELS)
    bindings = launches and _has_driver_bindings()
    if bindings:
        paths.append(
            BenchmarkPath(
                "cuda.bindings launch",
                bindings_round_trip(backend, RECORD_BYTES),
                resident_baseline=True,
            )
        )
    if launches:
        paths.append(
            BenchmarkPath(
                "graph replay", graph_round_trip(backend, RECORD_BYTES), resident_baseline=True
            )
        )
    for label, nbytes in PAYLOADS.items():
        if nbytes <= 8:
            continue
        block = f"mapped-memory floor, {label}, the block reads it"
        one = f"mapped-memory floor, {label}, one thread reads it"
        paths += [
            BenchmarkPath(one, floor_round_trip(backend, nbytes, False)),
            BenchmarkPath(block, floor_round_trip(backend, nbytes, True)),
        ]
        baselines: tuple[str, ...] = (block, one)
        if bindings:
            launch = f"cuda.bindings launch, {label}"
            paths.append(BenchmarkPath(launch, bindings_round_trip(backend, nbytes)))
            baselines += (launch,)
        if launches:
            graph = f"graph replay, {label}"
            paths.append(BenchmarkPath(graph, graph_round_trip(backend, nbytes)))
            baselines += (graph,)
        paths += [
            BenchmarkPath(
                f"resident ring, {label}", payload_round_trip(backend, nbytes, "sleep"), baselines
            ),
            BenchmarkPath(
                f"resident ring, {label}, spin",
                payload_round_trip(backend, nbytes, "spin"),
                baselines,
            ),
        ]
    return paths
