"""The resident CUDA ring kernel against launching work per message, measured in one run.

Needs an NVIDIA GPU, CuPy and NVRTC (``pip install -e . -e plugins/pdc_cpu
-e 'plugins/pdc_cuda[nvrtc]'``). From the repository root::

    python benchmarks/cuda_ring.py                 # full run (a few minutes)
    python benchmarks/cuda_ring.py --quick         # fewer messages
    python benchmarks/cuda_ring.py --markdown      # also print a section for docs/benchmarks.md

On a machine without a usable GPU it refuses at once, saying why (exit status 2).

What it measures, per payload size (the record size: 8 B .. 64 KiB; the body echoes
the record, copying every byte in the kernel):

* **resident**: ``await session.request(record)`` through a resident ring kernel
  (``pdc_core.open_persistent_kernel``) -- host stores into mapped pinned memory, the
  kernel polls, replies come back through the output ring. Under asyncio and trio.
* **launch + copies**: per message, an asynchronous H2D copy from pinned memory, a
  CuPy ``RawKernel`` launch doing the same echo, a D2H copy into pinned memory and a
  stream synchronize -- what a design without a resident kernel pays.
* **graph replay**: the same three operations captured once in a CUDA graph and
  replayed per message, then a stream synchronize.

Plus the round trip at several idle back-offs of the kernel (0/64/256/1024 ns, 8 B),
and batched throughput (``request_batch`` of whole rings of 8-byte records).
Round trips are reported as p50/p99 in microseconds; ratios are computed from medians
of the same run. Targets (design.md §5, H100-class GPU): resident p50 <= 10 us, at
least 5x faster than launch + copies, batched >= 10 M msgs/s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from typing import Any

import numpy as np

PAYLOADS = {"8 B": 8, "64 B": 64, "512 B": 512, "4 KiB": 4096, "64 KiB": 65536}
BACKOFFS = (0, 64, 256, 1024)

ECHO_BODY = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    const unsigned long long* src = reinterpret_cast<const unsigned long long*>(&request);
    unsigned long long* dst = reinterpret_cast<unsigned long long*>(&reply);
    for (unsigned int i = 0; i < sizeof(pdc_request) / 8; ++i) dst[i] = src[i];
    return 0;
}
"""

ECHO_KERNEL = """
extern "C" __global__ void echo(const unsigned long long* src, unsigned long long* dst,
                                unsigned long long words) {
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}
"""


def record_dtype(size: int) -> np.dtype[Any]:
    """A record of exactly ``size`` bytes (a multiple of 8): an id and payload words."""
    if size == 8:
        return np.dtype([("id", "<u8")])
    return np.dtype([("id", "<u8"), ("payload", "<u8", ((size - 8) // 8,))])


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_s)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50 * 1e6, p99 * 1e6


def refuse_without_gpu() -> Any:
    """The cuda backend, or exit 2 with the reason it is unavailable."""
    try:
        from pdc_cuda import CudaBackend

        import pdc_core
    except ImportError as exc:
        sys.exit(f"cuda_ring.py needs pdc-core and pdc-cuda installed: {exc}")
    availability = CudaBackend.availability()
    if not availability.available:
        print(
            "cuda_ring.py needs an NVIDIA GPU: the cuda backend is unavailable here: "
            f"{availability.reason}.\nRun it on a machine with a GPU (see the module docstring).",
            file=sys.stderr,
        )
        sys.exit(2)
    return pdc_core.get_backend("cuda")


# -- resident kernel ----------------------------------------------------------------------


def resident_round_trips(
    backend: Any, size: int, count: int, library: str, backoff: tuple[int, int] | None = None
) -> list[float]:
    import anyio

    from pdc_core._persistent import PersistentKernel, open_persistent_kernel

    dtype = record_dtype(size)
    kernel = PersistentKernel(f"echo{size}", dtype, dtype, capacity=64)
    kernel.add_body("cuda", ECHO_BODY)
    options: dict[str, Any] = {"threads": 32}
    if backoff is not None:
        options["backoff_min_ns"], options["backoff_max_ns"] = backoff
    record = np.zeros((), dtype)
    samples: list[float] = []

    async def main() -> None:
        async with open_persistent_kernel(kernel, backend, **options) as session:
            for _ in range(min(200, count)):  # warm up
                await session.request(record)
            clock = time.perf_counter
            for i in range(count):
                record["id"] = i
                start = clock()
                reply = await session.request(record)
                samples.append(clock() - start)
                if int(reply["id"]) != i:
                    raise AssertionError(f"reply {int(reply['id'])} to request {i}")

    anyio.run(main, backend=library)
    return samples


def resident_throughput(backend: Any, library: str, batches: int) -> float:
    import anyio

    from pdc_core._persistent import PersistentKernel, open_persistent_kernel

    dtype = record_dtype(8)
    capacity = 1 << 16
    kernel = PersistentKernel("echo-batched", dtype, dtype, capacity=capacity)
    kernel.add_body("cuda", ECHO_BODY)
    batch = np.zeros(capacity, dtype)
    batch["id"] = np.arange(capacity)
    elapsed = 0.0

    async def main() -> None:
        nonlocal elapsed
        async with open_persistent_kernel(kernel, backend, threads=1024) as session:
            await session.request_batch(batch)  # warm up
            start = time.perf_counter()
            for _ in range(batches):
                await session.request_batch(batch)
            elapsed = time.perf_counter() - start

    anyio.run(main, backend=library)
    return batches * capacity / elapsed


# -- launch + copies, and graph replay -------------------------------------------------------


def launched_round_trips(backend: Any, size: int, count: int, graph: bool) -> list[float]:
    import cupy

    from pdc_core import MemoryKind

    words = size // 8
    kernel = backend.compile_kernel(ECHO_KERNEL, "echo")
    host_in = backend.allocate((words,), np.dtype("<u8"), MemoryKind.PINNED)
    host_out = backend.allocate((words,), np.dtype("<u8"), MemoryKind.PINNED)
    host_in[:] = np.arange(words)
    with backend.device_context():
        dev_in = cupy.empty(words, dtype=cupy.uint64)
        dev_out = cupy.empty(words, dtype=cupy.uint64)
        stream = cupy.cuda.Stream(non_blocking=True)
        threads = min(256, max(32, words))
        args = (dev_in, dev_out, np.uint64(words))

        def enqueue() -> None:
            dev_in.set(host_in, stream=stream)
            with stream:
                kernel.raw((1,), (threads,), args)
            dev_out.get(stream=stream, out=host_out, blocking=False)

        if graph:
            with stream:
                stream.begin_capture()
                enqueue()
                captured = stream.end_capture()

            def once() -> None:
                captured.launch(stream=stream)
                stream.synchronize()
        else:

            def once() -> None:
                enqueue()
                stream.synchronize()

        for _ in range(min(200, count)):
            once()
        samples = []
        clock = time.perf_counter
        for _ in range(count):
            start = clock()
            once()
            samples.append(clock() - start)
    if not np.array_equal(host_out, host_in):
        raise AssertionError("the echo kernel did not copy the payload")
    return samples


# -- report ----------------------------------------------------------------------------------


def environment(backend: Any) -> dict[str, Any]:
    import cupy
    from pdc_cuda._availability import format_cuda_version

    props = backend.properties
    runtime = cupy.cuda.runtime
    return {
        "date": datetime.date.today().isoformat(),
        "device": f"{props.name} (compute capability {props.compute_capability}, "
        f"{props.multiprocessor_count} SMs)",
        "driver": format_cuda_version(runtime.driverGetVersion()),
        "cuda_runtime": format_cuda_version(runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "host": platform.processor() or platform.machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages per point")
    parser.add_argument("--markdown", action="store_true", help="print a docs section")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    backend = refuse_without_gpu()
    count = 500 if args.quick else 5000
    results: dict[str, Any] = {"environment": environment(backend), "round_trip_us": {}}
    rows = []
    for label, size in PAYLOADS.items():
        n = count if size <= 4096 else max(100, count // 10)
        point: dict[str, tuple[float, float]] = {}
        for library in ("asyncio", "trio"):
            point[f"resident ({library})"] = percentiles(
                resident_round_trips(backend, size, n, library)
            )
        point["launch + copies"] = percentiles(launched_round_trips(backend, size, n, graph=False))
        point["graph replay"] = percentiles(launched_round_trips(backend, size, n, graph=True))
        results["round_trip_us"][label] = point
        resident = point["resident (asyncio)"][0]
        rows.append(
            (
                label,
                *(f"{p50:.1f} / {p99:.1f}" for p50, p99 in point.values()),
                f"{point['launch + copies'][0] / resident:.1f}x",
                f"{point['graph replay'][0] / resident:.1f}x",
            )
        )
        print(f"{label}: " + ", ".join(f"{k} p50 {v[0]:.1f} us" for k, v in point.items()))
    backoffs = {}
    for ns in BACKOFFS:
        p50, p99 = percentiles(
            resident_round_trips(backend, 8, count, "asyncio", backoff=(ns, max(ns, 64)))
        )
        backoffs[f"{ns} ns"] = (p50, p99)
        print(f"back-off {ns} ns: p50 {p50:.1f} us, p99 {p99:.1f} us")
    results["backoff_round_trip_us"] = backoffs
    batches = 5 if args.quick else 50
    throughput = {lib: resident_throughput(backend, lib, batches) for lib in ("asyncio", "trio")}
    results["batched_msgs_per_s"] = throughput
    for lib, rate in throughput.items():
        print(f"batched ({lib}): {rate / 1e6:.2f} M msgs/s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    if args.markdown:
        print_markdown(results, rows, backoffs, throughput)
    return 0


def print_markdown(
    results: dict[str, Any],
    rows: list[tuple[str, ...]],
    backoffs: dict[str, tuple[float, float]],
    throughput: dict[str, float],
) -> None:
    env = results["environment"]
    print("\n## CUDA resident ring kernel\n")
    print(f"- Date: {env['date']}")
    print(f"- Device: {env['device']}; driver CUDA {env['driver']}, runtime {env['cuda_runtime']}")
    print(f"- Versions: Python {env['python']}, NumPy {env['numpy']}, CuPy {env['cupy']}")
    print("- Command: `python benchmarks/cuda_ring.py --markdown`\n")
    print(
        "Round trip p50 / p99 (us) per message, one record echoed by the kernel; last two "
        "columns: how many times slower than the resident kernel (asyncio), by p50.\n"
    )
    print(
        "| payload | resident (asyncio) | resident (trio) | launch + copies | graph replay "
        "| launch / resident | graph / resident |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        "\nIdle back-off of the kernel (8 B, asyncio): "
        + ", ".join(
            f"{name}: p50 {p50:.1f} us / p99 {p99:.1f} us" for name, (p50, p99) in backoffs.items()
        )
    )
    print(
        "\nBatched throughput (request_batch of 65536 8-byte records): "
        + ", ".join(f"{lib} {rate / 1e6:.2f} M msgs/s" for lib, rate in throughput.items())
    )


if __name__ == "__main__":
    sys.exit(main())
