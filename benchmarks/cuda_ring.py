"""The resident CUDA ring kernel against launching work per message, measured in one run.

Needs an NVIDIA GPU, CuPy and NVRTC (``pip install -e . -e plugins/pdc_cpu
-e 'plugins/pdc_cuda[nvrtc]'``). From the repository root::

    python benchmarks/cuda_ring.py                 # full run (a few minutes)
    python benchmarks/cuda_ring.py --quick         # fewer messages
    python benchmarks/cuda_ring.py --markdown      # also print a section for docs/benchmarks.md

On a machine without a usable GPU it refuses at once, saying why (exit status 2).
A measurement that fails is reported (its cells say ``failed``, the error is printed)
and the others go on; the exit status is then 1. A watchdog (``--timeout``, 600 s by
default) dumps every thread's stack and exits if the run hangs on the device.

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
import faulthandler
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

PAYLOADS = {"8 B": 8, "64 B": 64, "512 B": 512, "4 KiB": 4096, "64 KiB": 65536}
BACKOFFS = (0, 64, 256, 1024)
LIBRARIES = ("asyncio", "trio")
#: Records per request_batch in the throughput measurement (one whole ring).
BATCH_CAPACITY = 1 << 16
#: design.md §5, for an H100-class GPU.
TARGET_P50_US = 10.0
TARGET_SPEEDUP = 5.0
TARGET_BATCHED = 10e6

T = TypeVar("T")

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


def echo_kernel(name: str, dtype: np.dtype[Any], capacity: int) -> Any:
    """The persistent kernel every resident measurement runs: echo the record."""
    from pdc_core import PersistentKernel

    kernel = PersistentKernel(name, dtype, dtype, capacity=capacity)
    kernel.add_body("cuda", ECHO_BODY)
    return kernel


def launch_options(threads: int, backoff: tuple[int, int] | None = None) -> dict[str, Any]:
    """Options for ``open_persistent_kernel`` on the cuda backend."""
    options: dict[str, Any] = {"threads": threads}
    if backoff is not None:
        options["backoff_min_ns"], options["backoff_max_ns"] = backoff
    return options


def resident_round_trips(
    backend: Any, size: int, count: int, library: str, backoff: tuple[int, int] | None = None
) -> list[float]:
    import anyio

    from pdc_core import open_persistent_kernel

    dtype = record_dtype(size)
    kernel = echo_kernel(f"echo{size}", dtype, 64)
    options = launch_options(32, backoff)
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


def resident_throughput(
    backend: Any, library: str, batches: int, capacity: int = BATCH_CAPACITY
) -> float:
    import anyio

    from pdc_core import open_persistent_kernel

    dtype = record_dtype(8)
    kernel = echo_kernel("echo-batched", dtype, capacity)
    batch = np.zeros(capacity, dtype)
    batch["id"] = np.arange(capacity)
    elapsed = 0.0

    async def main() -> None:
        nonlocal elapsed
        async with open_persistent_kernel(kernel, backend, **launch_options(1024)) as session:
            replies = await session.request_batch(batch)  # warm up
            if not np.array_equal(replies["id"], batch["id"]):
                raise AssertionError("the batched echo returned other records")
            start = time.perf_counter()
            for _ in range(batches):
                await session.request_batch(batch)
            elapsed = time.perf_counter() - start

    anyio.run(main, backend=library)
    return batches * capacity / elapsed


# -- launch + copies, and graph replay -------------------------------------------------------


def launched_round_trips(backend: Any, size: int, count: int, graph: bool) -> list[float]:
    import cupy

    from pdc_core.backend import MemoryKind

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

        runtime = cupy.cuda.runtime
        nbytes = words * 8

        def enqueue() -> None:
            # Raw asynchronous copies: CuPy's ndarray set/get refuse a capturing stream.
            runtime.memcpyAsync(
                dev_in.data.ptr, host_in.ctypes.data, nbytes, runtime.memcpyHostToDevice, stream.ptr
            )
            with stream:
                kernel.raw((1,), (threads,), args)
            runtime.memcpyAsync(
                host_out.ctypes.data,
                dev_out.data.ptr,
                nbytes,
                runtime.memcpyDeviceToHost,
                stream.ptr,
            )

        if graph:
            with stream:
                stream.begin_capture()
                try:
                    enqueue()
                finally:  # a failed capture still ends, or the stream stays capturing
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


class Failures:
    """Runs measurements, recording the ones that fail instead of stopping the run."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def run(self, label: str, measure: Callable[[], T]) -> T | None:
        try:
            return measure()
        except Exception as exc:
            self.errors.append(f"{label}: {type(exc).__name__}: {exc}")
            print(f"FAILED {label}:", file=sys.stderr)
            traceback.print_exc()
            return None


def cell(point: tuple[float, float] | None) -> str:
    return "failed" if point is None else f"{point[0]:.1f} / {point[1]:.1f}"


def ratio(numerator: tuple[float, float] | None, denominator: tuple[float, float] | None) -> str:
    if numerator is None or denominator is None:
        return "n/a"
    return f"{numerator[0] / denominator[0]:.1f}x"


def targets(results: dict[str, Any]) -> list[str]:
    """design.md §5's CUDA targets, each with the figure measured and met / missed."""
    lines = []
    small = results["round_trip_us"].get("8 B", {})
    resident = small.get("resident (asyncio)")
    launched = small.get("launch + copies")
    if resident is not None:
        verdict = "met" if resident[0] <= TARGET_P50_US else "missed"
        lines.append(
            f"round trip p50 <= {TARGET_P50_US:g} us (8 B, asyncio): {resident[0]:.1f} us, "
            f"{verdict}"
        )
    if resident is not None and launched is not None:
        speedup = launched[0] / resident[0]
        verdict = "met" if speedup >= TARGET_SPEEDUP else "missed"
        lines.append(
            f">= {TARGET_SPEEDUP:g}x faster than launch + copies (8 B): {speedup:.1f}x, {verdict}"
        )
    rates = [rate for rate in results["batched_msgs_per_s"].values() if rate is not None]
    if rates:
        best = max(rates)
        verdict = "met" if best >= TARGET_BATCHED else "missed"
        lines.append(
            f"batched >= {TARGET_BATCHED / 1e6:g} M msgs/s: {best / 1e6:.2f} M msgs/s, {verdict}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages per point")
    parser.add_argument("--markdown", action="store_true", help="print a docs section")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before a hung run dumps its stacks and exits (0: no watchdog)",
    )
    args = parser.parse_args(argv)
    backend = refuse_without_gpu()
    if args.timeout > 0:
        faulthandler.dump_traceback_later(args.timeout, exit=True, file=sys.stderr)
    try:
        return run(backend, args)
    finally:
        faulthandler.cancel_dump_traceback_later()


def run(backend: Any, args: argparse.Namespace) -> int:
    failures = Failures()
    count = 500 if args.quick else 5000
    results: dict[str, Any] = {"environment": environment(backend), "round_trip_us": {}}
    rows = []
    for label, size in PAYLOADS.items():
        n = count if size <= 4096 else max(100, count // 10)
        point: dict[str, tuple[float, float] | None] = {}
        for library in LIBRARIES:
            samples = failures.run(
                f"resident {label} ({library})",
                lambda size=size, n=n, library=library: resident_round_trips(
                    backend, size, n, library
                ),
            )
            point[f"resident ({library})"] = None if samples is None else percentiles(samples)
        for name, graph in (("launch + copies", False), ("graph replay", True)):
            samples = failures.run(
                f"{name} {label}",
                lambda size=size, n=n, graph=graph: launched_round_trips(backend, size, n, graph),
            )
            point[name] = None if samples is None else percentiles(samples)
        results["round_trip_us"][label] = point
        resident = point["resident (asyncio)"]
        rows.append(
            (
                label,
                *(cell(value) for value in point.values()),
                ratio(point["launch + copies"], resident),
                ratio(point["graph replay"], resident),
                ratio(point["resident (trio)"], resident),
            )
        )
        print(f"{label}: " + ", ".join(f"{k} p50/p99 {cell(v)} us" for k, v in point.items()))
    backoffs: dict[str, tuple[float, float] | None] = {}
    for ns in BACKOFFS:
        samples = failures.run(
            f"back-off {ns} ns",
            lambda ns=ns: resident_round_trips(
                backend, 8, count, "asyncio", backoff=(ns, max(ns, 64))
            ),
        )
        backoffs[f"{ns} ns"] = None if samples is None else percentiles(samples)
        print(f"back-off {ns} ns: p50/p99 {cell(backoffs[f'{ns} ns'])} us")
    results["backoff_round_trip_us"] = backoffs
    batches = 5 if args.quick else 50
    throughput = {
        library: failures.run(
            f"batched ({library})",
            lambda library=library: resident_throughput(backend, library, batches),
        )
        for library in LIBRARIES
    }
    results["batched_msgs_per_s"] = throughput
    for library, rate in throughput.items():
        shown = "failed" if rate is None else f"{rate / 1e6:.2f} M msgs/s"
        print(f"batched ({library}): {shown}")
    results["targets"] = targets(results)
    results["failures"] = failures.errors
    for line in results["targets"]:
        print(f"target: {line}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    if args.markdown:
        print_markdown(results, rows, backoffs, throughput)
    if failures.errors:
        print(f"\n{len(failures.errors)} measurement(s) failed:", file=sys.stderr)
        for error in failures.errors:
            print(f"  {error}", file=sys.stderr)
        return 1
    return 0


def print_markdown(
    results: dict[str, Any],
    rows: list[tuple[str, ...]],
    backoffs: dict[str, tuple[float, float] | None],
    throughput: dict[str, float | None],
) -> None:
    env = results["environment"]
    print("\n## CUDA resident ring kernel\n")
    print(f"- Date: {env['date']}")
    print(f"- Device: {env['device']}; driver CUDA {env['driver']}, runtime {env['cuda_runtime']}")
    print(f"- Versions: Python {env['python']}, NumPy {env['numpy']}, CuPy {env['cupy']}")
    print("- Command: `python benchmarks/cuda_ring.py --markdown`\n")
    print(
        "Round trip p50 / p99 (us) per message, one record echoed by the kernel. Ratio "
        "columns, by p50: how many times slower than the resident kernel under asyncio.\n"
    )
    print(
        "| payload | resident (asyncio) | resident (trio) | launch + copies | graph replay "
        "| launch / resident | graph / resident | trio / asyncio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        "\nIdle back-off of the kernel (8 B, asyncio), p50 / p99 (us): "
        + ", ".join(f"{name}: {cell(point)}" for name, point in backoffs.items())
    )
    print(
        f"\nBatched throughput (request_batch of {BATCH_CAPACITY} 8-byte records): "
        + ", ".join(
            f"{lib} {'failed' if rate is None else f'{rate / 1e6:.2f} M msgs/s'}"
            for lib, rate in throughput.items()
        )
    )
    if results.get("targets"):
        print("\nTargets (design.md §5):\n")
        for line in results["targets"]:
            print(f"- {line}")
    if results.get("failures"):
        print("\nFailed measurements:\n")
        for error in results["failures"]:
            print(f"- {error}")


if __name__ == "__main__":
    sys.exit(main())
