"""pdc's resident ring held against the physical floor, measured in one process.

The floor (issue 33) is a hand-written resident kernel and a Python host that do the
least a round trip through mapped pinned memory can do: the host stores one request
number into a control word and spins until the kernel answers in another; the kernel's
thread 0 polls with acquire loads, the block meets at a barrier, and thread 0 answers
with a release store. With a payload (4 KiB, 64 KiB) the kernel first reads it from
mapped memory with 16-byte loads, by one thread or by the whole block. Then, in the same
process, pdc's paths on records of the same sizes: ``session.request`` with
``wait="spin"`` and ``wait="sleep"`` (asyncio and trio) and a persistent-kernel actor's
``ask``. The pdc kernels answer an 8-byte checksum of the first and last 8 bytes of the
request: the payload crosses the bus as the floor's does (staged by the block, see
``ring_kernel.cu``), the body touches both ends. Every pdc figure is printed as a ratio
to its floor (8 B: the bare round trip; a payload: the block-read floor), plus the
Python calls of one ``session.request`` (cProfile, ``wait="spin"``). The floor kernel
and the checksum kernel are pdc-cuda's (``pdc_cuda._bench``), the ones ``pdc bench
--backend cuda`` measures too.

    python benchmarks/cuda_floor.py            # on a GPU (the cuda backend)
    python benchmarks/cuda_floor.py --host     # the host build: the kernel on CPU threads
    python benchmarks/cuda_floor.py --quick    # fewer round trips

On the host build (``pdc_cuda.testing.HostCudaBackend``: the same kernel sources, built
by g++ and run as one block of CPU threads) the floor is that of the CPU-thread kernel,
so the ratios can be tracked without a GPU; its absolute times say nothing about a GPU.
Without a GPU, and without ``--host``, it exits with status 2 saying why.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import numpy as np


def _calls(profile: cProfile.Profile) -> int:
    """The calls ``profile`` counted, less its own ``disable()``."""
    return int(pstats.Stats(profile).total_calls) - 1  # type: ignore[attr-defined]


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (ns), in microseconds."""
    p50, p99 = np.percentile(np.asarray(samples), [50, 99]) / 1e3
    return float(p50), float(p99)


def floor_samples(floor: Any, nbytes: int, together: bool, threads: int, count: int) -> list[int]:
    """Round trips (ns) of ``count`` requests to ``floor`` (a ``MappedFloor``), after a
    warm-up."""
    with floor.resident(nbytes, together, threads) as once:
        for _ in range(count // 10 + 1):
            once()
        return [once() for _ in range(count)]


async def timed(call: Callable[[], Awaitable[Any]], count: int) -> list[float]:
    clock = time.perf_counter_ns
    for _ in range(count // 10 + 1):
        await call()
    samples: list[float] = []
    for _ in range(count):
        start = clock()
        await call()
        samples.append(clock() - start)
    return samples


async def pdc_paths(
    backend: Any, nbytes: int, count: int, options: dict[str, Any], library: str
) -> dict[str, list[float] | int]:
    """Round trips of ``session.request`` (spin, sleep) and an actor's ``ask``."""
    from pdc_cuda._bench import checksum_kernel

    from pdc_core import PersistentKernelActor, open_nursery, open_persistent_kernel

    kernel = checksum_kernel(nbytes)
    record = np.zeros((), kernel.request_dtype)
    record["b"] = 1
    results: dict[str, list[float] | int] = {}
    for wait in ("spin", "sleep"):
        async with open_persistent_kernel(kernel, backend, wait=wait, **options) as session:
            results[f"request, wait={wait}"] = await timed(lambda: session.request(record), count)
            if wait == "spin":
                calls = []
                for _ in range(50):
                    profile = cProfile.Profile()
                    profile.enable()
                    await session.request(record)
                    profile.disable()
                    calls.append(_calls(profile))
                results["calls"] = int(statistics.median(calls))
    if library == "asyncio":
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(PersistentKernelActor(kernel, backend, **options))
            results["actor ask"] = await timed(lambda: ref.ask(record), count)
            await ref.stop()
    return results


def _poll_then(pause: Callable[[], object]) -> Callable[..., bool]:
    """``HostWaiter.spin_until_progress`` with ``pause()`` between looks."""

    def spin_until_progress(self: Any, ring: Any, limit: float) -> bool:
        deadline = time.perf_counter() + limit
        while True:
            if ring.load_out_head() != ring.out_tail or ring.done:
                return True
            if time.perf_counter() >= deadline:
                return False
            pause()

    return spin_until_progress


async def spin_variants(backend: Any, options: dict[str, Any], count: int, rounds: int) -> None:
    """``wait="spin"`` round trips (8 B) with the waiter's poll loop as shipped (tight),
    with ``os.sched_yield()`` and with ``time.sleep(0)`` between looks: rounds
    interleaved, the median of the rounds' p50 and p99."""
    import os

    from pdc_cuda._bench import checksum_kernel

    from pdc_core import open_persistent_kernel
    from pdc_core.backend import HostWaiter

    shipped = HostWaiter.spin_until_progress
    variants = {
        "tight (shipped)": shipped,
        "os.sched_yield()": _poll_then(os.sched_yield),
        "time.sleep(0)": _poll_then(lambda: time.sleep(0)),
    }
    kernel = checksum_kernel(8)
    record = np.zeros((), kernel.request_dtype)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    async with open_persistent_kernel(kernel, backend, wait="spin", **options) as session:
        try:
            for _ in range(rounds):
                for name, variant in variants.items():
                    HostWaiter.spin_until_progress = variant  # type: ignore[method-assign]
                    samples = await timed(lambda: session.request(record), count)
                    figures[name].append(percentiles(samples))
        finally:
            HostWaiter.spin_until_progress = shipped  # type: ignore[method-assign]
    print(f'wait="spin" poll loop, 8 B, asyncio ({rounds} interleaved rounds of {count}):')
    for name, values in figures.items():
        p50 = statistics.median(v[0] for v in values)
        p99 = statistics.median(v[1] for v in values)
        print(f"  {name:<17} p50 {p50:8.2f} us  p99 {p99:8.2f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", action="store_true", help="the host build (no GPU)")
    parser.add_argument("--quick", action="store_true", help="fewer round trips")
    parser.add_argument(
        "--spin-variants", action="store_true", help="also the waiter's poll loop, three ways"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="block size (default: 256; the host build 2, one per core of a small CI machine)",
    )
    args = parser.parse_args(argv)
    try:
        from pdc_cuda import CudaBackend
        from pdc_cuda._bench import PAYLOADS, MappedFloor
        from pdc_cuda.testing import HostCudaBackend
    except ImportError as exc:
        sys.exit(f"cuda_floor.py needs pdc-core and pdc-cuda installed: {exc}")
    kind = HostCudaBackend if args.host else CudaBackend
    availability = kind.availability()
    if not availability.available:
        print(f"cuda_floor.py: no {'host build' if args.host else 'GPU'}: "
              f"{availability.reason}", file=sys.stderr)  # fmt: skip
        return 2
    backend = kind()
    threads = args.threads or (2 if args.host else 256)
    # The host build's kernel threads spin rather than sleep between polls (its
    # __nanosleep is a real sleep of the OS's granularity, not a GPU's nanoseconds).
    options: dict[str, Any] = {"threads": threads}
    if args.host:
        options.update(backoff_min_ns=0, backoff_max_ns=0)
    scale = 0.2 if args.quick else 1.0
    counts = {8: int(3000 * scale), 4096: int(1000 * scale), 65536: int(300 * scale)}
    print(f"device: {backend!r}; Python {platform.python_version()}, NumPy {np.__version__}; "
          f"{threads} threads per block")  # fmt: skip

    floor = MappedFloor(backend)
    floors: dict[str, tuple[float, float]] = {}
    for label, nbytes in PAYLOADS.items():
        count = counts[nbytes]
        if nbytes == 8:
            floors[label] = percentiles(floor_samples(floor, 8, False, threads, count))
            print(
                f"floor {label:>6}: p50 {floors[label][0]:8.2f} us  p99 {floors[label][1]:8.2f} us"
            )
            continue
        one = percentiles(floor_samples(floor, nbytes, False, threads, count))
        block = percentiles(floor_samples(floor, nbytes, True, threads, count))
        floors[label] = block
        print(f"floor {label:>6}, one thread reads it: p50 {one[0]:8.2f} us  p99 {one[1]:8.2f} us")
        print(
            f"floor {label:>6}, the block reads it:  p50 {block[0]:8.2f} us  p99 {block[1]:8.2f} us"
        )

    print()
    print("| payload | loop | path | p50 (us) | p99 (us) | floor p50 (us) | p50 / floor |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    calls: dict[str, int] = {}
    libraries = ["asyncio"]
    try:
        import trio  # noqa: F401
    except ImportError:
        print("trio is not installed (pip install trio): asyncio only", file=sys.stderr)
    else:
        libraries.append("trio")
    for library in libraries:
        for label, nbytes in PAYLOADS.items():
            results = anyio.run(pdc_paths, backend, nbytes, counts[nbytes], options, library,
                                backend=library)  # fmt: skip
            calls[f"{library} {label}"] = int(results.pop("calls"))  # type: ignore[arg-type]
            base = floors[label][0]
            for path, samples in results.items():
                assert isinstance(samples, list)
                p50, p99 = percentiles(samples)
                print(f"| {label} | {library} | {path} | {p50:.2f} | {p99:.2f} | {base:.2f} "
                      f"| {p50 / base:.2f}x |")  # fmt: skip
    print()
    print("Python calls per single-record session.request (cProfile, wait=\"spin\", median of 50; "
          "the spin's polls included): "
          + ", ".join(f"{key} {value}" for key, value in calls.items()))  # fmt: skip
    if args.spin_variants:
        print()
        anyio.run(spin_variants, backend, options, counts[8], 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
