"""The cpu backend's host-memory cache and ``MemoryPool``: cost per allocation, and what
stays cached after a workload.

Run from the repository root (pdc-core and pdc-cpu installed)::

    python benchmarks/memory_cache.py            # 5 rounds
    python benchmarks/memory_cache.py --json     # one JSON object, for comparisons

To compare two source trees, run it with each tree's ``src`` and
``plugins/pdc_cpu/src`` first on ``PYTHONPATH``, alternately (it uses only public API
that both sides of such a change have).

Per-operation costs (median over rounds of the mean over ``--ops`` operations):

* **allocate+drop, hit** -- ``cpu.allocate((n,), uint8)`` then dropping the array, the
  same size every time (each allocation reuses the block the previous one gave back),
  for 4 KiB and 1 MiB; next to **np.empty+drop**, the same without the cache (NumPy's
  allocator: ``malloc`` for small arrays, ``mmap`` for large ones, untouched pages).
* **MemoryPool acquire+release** -- ``MemoryPool(backend=cpu)`` handing the same
  ``UnifiedBuffer`` of 1024 float32 back and forth (the seeds' pool).
* **UnifiedBuffer+close** -- ``UnifiedBuffer((1024,), float32, backend=cpu)`` made and
  closed: an allocation from the cache plus the buffer's own set-up.

Workloads (one fresh backend each; every array written once per 4 KiB page, so its
pages are really resident; then dropped before the next is made):

* **ascending** -- 40 arrays of 1, 2, ... 40 MiB, one at a time: live peak 40 MiB, none
  can reuse a smaller block.
* **descending** -- 40, 39, ... 1 MiB: each can reuse the block of the one before.
* **jitter** -- 200 arrays of random sizes between 0.5 and 1 MiB (seeded), one at a time.

For each: the bytes cached after it, the live peak, the hits and misses, and the growth
of the process's resident memory over the workload (``/proc/self/statm``; Linux).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pdc_core import MemoryPool, UnifiedBuffer, get_backend

KiB = 2**10
MiB = 2**20
PAGE = 4096
U8 = np.dtype(np.uint8)


def _fresh_cpu() -> Any:
    """A private cpu backend: its own cache, statistics from zero."""
    return type(get_backend("cpu"))()


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * PAGE
    except OSError:  # not Linux
        return 0


def _per_op(operation: Callable[[], None], ops: int) -> float:
    """Mean seconds per call of ``operation`` over ``ops`` calls (collector paused)."""
    operation()  # warm: the first call fills the cache
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(ops):
            operation()
        return (time.perf_counter() - start) / ops
    finally:
        gc.enable()


def _costs(ops: int) -> dict[str, float]:
    cpu = _fresh_cpu()
    pool = MemoryPool(backend=cpu)
    held = pool.acquire((1024,), np.float32)
    pool.release(held)
    results = {}
    for label, size in (("4 KiB", 4 * KiB), ("1 MiB", MiB)):
        shape = (size,)

        def cached(shape: tuple[int] = shape) -> None:
            cpu.allocate(shape, U8)

        def plain(shape: tuple[int] = shape) -> None:
            np.empty(shape, U8)

        results[f"allocate+drop, hit, {label}"] = _per_op(cached, ops)
        results[f"np.empty+drop, {label}"] = _per_op(plain, ops)

    def acquire_release() -> None:
        pool.release(pool.acquire((1024,), np.float32))

    def buffer_close() -> None:
        UnifiedBuffer((1024,), np.float32, backend=cpu).close()

    results["MemoryPool acquire+release"] = _per_op(acquire_release, ops)
    results["UnifiedBuffer+close"] = _per_op(buffer_close, ops // 4)
    return results


def _workload(sizes: list[int]) -> dict[str, int]:
    cpu = _fresh_cpu()
    gc.collect()
    before = _resident_bytes()
    peak = 0
    for size in sizes:
        array = cpu.allocate((size,), U8)
        array[::PAGE] = 1  # every page resident
        peak = max(peak, cpu.memory_statistics().bytes_in_use)
        del array
    stats = cpu.memory_statistics()
    grown = _resident_bytes() - before
    cpu.free_cached_memory()
    return {
        "cached": stats.bytes_held - stats.bytes_in_use,
        "live peak": peak,
        "hits": stats.hits,
        "misses": stats.misses,
        "resident growth": grown,
    }


def _workloads() -> dict[str, dict[str, int]]:
    jitter = random.Random(26)
    return {
        "ascending 1..40 MiB": _workload([index * MiB for index in range(1, 41)]),
        "descending 40..1 MiB": _workload([index * MiB for index in range(40, 0, -1)]),
        "jitter 0.5-1 MiB x200": _workload([jitter.randrange(MiB // 2, MiB) for _ in range(200)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    rounds = [_costs(args.ops) for _ in range(args.rounds)]
    costs = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    workloads = _workloads()
    if args.json:
        print(json.dumps({"costs_s": costs, "workloads": workloads}))
        return
    print(f"Per operation (median of {args.rounds} rounds of {args.ops:,}):")
    for name, seconds in costs.items():
        print(f"  {name:32} {seconds * 1e9:10.0f} ns")
    print("Workloads (each array written, then dropped before the next):")
    for name, result in workloads.items():
        print(
            f"  {name:24} cached {result['cached'] / MiB:7.1f} MiB, live peak "
            f"{result['live peak'] / MiB:5.1f} MiB, hits {result['hits']:3}, misses "
            f"{result['misses']:3}, resident +{result['resident growth'] / MiB:.1f} MiB"
        )


if __name__ == "__main__":
    main()
