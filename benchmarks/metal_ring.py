"""The persistent-kernel ring emulated on MLX (metal backend) vs the cpu backend, one run.

Run from the repository root, with pdc-cpu and pdc-metal installed::

    python benchmarks/metal_ring.py            # 5,000 round trips, 200,000 batched
    python benchmarks/metal_ring.py --quick    # fewer messages

Both backends run the same protocol through the same host-worker kernel
(``pdc_core.backend.HostWorkerKernel``); what differs is the body. The work is that of
``benchmarks/ring_kernel.py``: a
request ``(id: u8, x: f8)`` becomes a reply ``(id: u8, y: f8)`` with ``y = 2 x``.

* cpu: ``body(requests)`` over a NumPy record array.
* metal: ``body({"id": mx.array, "x": mx.array})`` returning ``{"id": ..., "y": ...}``,
  evaluated on the worker's dedicated MLX stream, then written into the reply slots.

Under asyncio and trio it measures the round trip (``await session.request``, p50 and
p99) and batched throughput (``request_batch``, device batches of up to 1,024 records),
and, as the per-message alternative on metal, ``await backend.run_async(fn, x)``: one
MLX evaluation dispatched per message to the backend's stream. Ratios are metal / cpu
from numbers taken in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import anyio
import numpy as np

try:  # the helpers moved into pdc-core; older checkouts have them beside this script
    from pdc_core._cli._bench_stats import (
        command_line,
        environment,
        gc_paused,
        ratio,
        summarize,
        table,
    )
except ImportError:  # pragma: no cover
    from _stats import command_line, environment, gc_paused, ratio, summarize, table

from pdc_core import PersistentKernel, get_backend, open_persistent_kernel

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)
CAPACITY = 1024


def cpu_double(requests: Any) -> Any:
    """The cpu body: a NumPy record array in, one out."""
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2.0
    return replies


def metal_double(requests: Any) -> Any:
    """The metal body: MLX arrays per field in, reply fields out."""
    return {"id": requests["id"], "y": requests["x"] * 2.0}


KERNEL = PersistentKernel(
    "double", REQ, REP, capacity=CAPACITY, bodies={"cpu": cpu_double, "metal": metal_double}
)


def requests(count: int) -> Any:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(count)
    out["x"] = np.arange(count) * 0.5
    return out


async def ring_round_trips(backend: str, count: int) -> list[float]:
    """Sequential ``request`` round trips through the ring, after a warm-up."""
    one = requests(1)
    samples = []
    async with open_persistent_kernel(KERNEL, backend) as session:
        for i in range(-min(count, 200), count):
            one["id"] = i % count
            start = time.perf_counter()
            reply = await session.request(one)
            if i >= 0:
                samples.append(time.perf_counter() - start)
            assert reply["id"] == i % count
    return samples


async def ring_throughput(backend: str, count: int) -> float:
    """Messages per second of one ``request_batch`` of ``count`` records."""
    batch = requests(count)
    async with open_persistent_kernel(KERNEL, backend) as session:
        await session.request_batch(batch[:CAPACITY])  # warm up
        start = time.perf_counter()
        replies = await session.request_batch(batch)
        elapsed = time.perf_counter() - start
    assert float(replies["y"][-1]) == float(batch["x"][-1]) * 2.0
    return count / elapsed


def run(library: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a fresh event loop of ``library``, the collector paused."""
    with gc_paused():
        return anyio.run(lambda: fn(*args), backend=library)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


async def metal_run_async_round_trips(count: int) -> list[float]:
    """One MLX evaluation per message on the backend's stream, awaited."""
    backend = get_backend("metal")
    x = np.ones(1, dtype=np.float64)
    samples = []
    for _ in range(min(count, 200)):  # warm up
        await backend.run_async(lambda v: v * 2.0, x)  # type: ignore[attr-defined]
    for _ in range(count):
        start = time.perf_counter()
        await backend.run_async(lambda v: v * 2.0, x)  # type: ignore[attr-defined]
        samples.append(time.perf_counter() - start)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--libraries", default="asyncio,trio", help="event loops, comma-separated")
    args = parser.parse_args(argv)
    metal = get_backend("metal")  # raises with what to install when unavailable
    get_backend("cpu")
    libraries = [name.strip() for name in args.libraries.split(",") if name.strip()]
    round_trips = 1_000 if args.quick else 5_000
    batched = 50_000 if args.quick else 200_000

    rows: list[list[str]] = []
    ratios: list[list[str]] = []
    for library in libraries:
        trips: dict[str, Any] = {}
        rates: dict[str, float] = {}
        for backend in ("cpu", "metal"):  # interleaved per library, same run
            print(f"[{library}] {backend}: round trips, batched ...", file=sys.stderr)
            trips[backend] = summarize(run(library, ring_round_trips, backend, round_trips))
            rates[backend] = run(library, ring_throughput, backend, batched)
            rows.append(
                [
                    library,
                    f"{backend} persistent kernel",
                    us(trips[backend].p50),
                    us(trips[backend].p99),
                    f"{rates[backend]:,.0f}",
                ]
            )
        print(f"[{library}] metal: run_async per message ...", file=sys.stderr)
        dispatched = summarize(run(library, metal_run_async_round_trips, round_trips))
        rows.append(
            [library, "metal run_async per message", us(dispatched.p50), us(dispatched.p99), ""]
        )
        ratios.append(
            [
                library,
                ratio(trips["metal"].p50, trips["cpu"].p50),
                ratio(trips["metal"].p99, trips["cpu"].p99),
                ratio(rates["metal"], rates["cpu"], 3),
                ratio(dispatched.p50, trips["metal"].p50),
            ]
        )

    env = environment(["numpy", "mlx", "mlx-cpu", "anyio", "trio", "pdc-core", "pdc-metal"])
    print(
        "\n".join(
            [
                f"metal device: {metal.device_info.name}",
                "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
                f"Command: {command_line()}",
                f"Round trips: {round_trips:,} per path; batched: request_batch({batched:,})",
                "",
                table(["loop", "path", "p50 (us)", "p99 (us)", "msgs/s"], rows, "llrrr"),
                "",
                "Ratios (same run): metal / cpu (latency >1: metal slower; throughput <1: "
                "metal slower), and per-message run_async / metal persistent p50",
                "",
                table(
                    [
                        "loop",
                        "round trip p50",
                        "round trip p99",
                        "batched throughput",
                        "run_async / ring p50",
                    ],
                    ratios,
                    "lrrrr",
                ),
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
