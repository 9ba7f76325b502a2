"""A 3-stage pipeline through kernel-to-kernel links against the same stages chained by
the host, on the cpu backend or on a CUDA GPU.

* ``links``: ``PersistentPipeline(a, b, c)``: the host writes stage a's ring and reads
  stage c's; records go a -> b -> c through links, never through the event loop (on
  CUDA: rings in device memory between three resident blocks).
* ``host``: the same three kernels as three sessions; the host makes three
  ``request`` round trips per record (latency), and three ``request_batch`` calls per
  batch (throughput).

Per record latency (one ``request`` through all three stages, p50 and p99) and
throughput (``request_batch`` of ``--batch`` records), under asyncio and trio. Rounds
interleave the two paths (alternating which goes first), each opened on its own for its
turn and closed after it (never a module loaded beside a resident kernel); the table
reports medians over rounds and the median of the per-round ratios links/host.

    .venv/bin/python benchmarks/k2k_pipeline.py --rounds 7
    .venv/bin/python benchmarks/k2k_pipeline.py --backend cuda --rounds 7

``--backend cuda`` needs a GPU: without one it prints why the backend is unavailable
and exits with status 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

import pdc_core
from pdc_core import (
    PersistentKernel,
    PersistentPipeline,
    open_persistent_kernel,
    open_persistent_pipeline,
)

REC = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)

#: Each stage's work, as a NumPy function (cpu body) and a C expression of ``x`` (cuda body).
STAGES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "a": (lambda x: x + 1, "x + 1.0"),
    "b": (lambda x: x * 2, "x * 2.0"),
    "c": (lambda x: x - 1, "x - 1.0"),
}


def cuda_body(expression: str) -> str:
    """The stage's CUDA body: ``reply.x = <expression of request.x>``."""
    return (
        "__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {\n"
        "    const double x = request.x;\n"
        "    reply.id = request.id;\n"
        f"    reply.x = {expression};\n"
        "    return 0;\n"
        "}\n"
    )


def stage(name: str, capacity: int) -> PersistentKernel:
    fn, expression = STAGES[name]
    kernel = PersistentKernel(name, REC, REC, capacity=capacity)
    kernel.add_body("cuda", cuda_body(expression))

    @kernel.body("cpu")
    def body(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
        replies = np.empty(len(requests), REC)
        replies["id"] = requests["id"]
        replies["x"] = fn(requests["x"])
        return replies

    return kernel


def kernels(capacity: int) -> list[PersistentKernel]:
    return [stage(name, capacity) for name in STAGES]


async def latency(call: Callable[[Any], Awaitable[Any]], count: int) -> list[float]:
    times = []
    for index in range(count):
        start = time.perf_counter()
        await call((index, float(index)))
        times.append(time.perf_counter() - start)
    return times


async def throughput(call: Callable[[Any], Awaitable[Any]], batch: Any, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        await call(batch)
    return len(batch) * repeat / (time.perf_counter() - start)


Call = Callable[[Any], Awaitable[Any]]


@asynccontextmanager
async def open_path(name: str, args: argparse.Namespace) -> AsyncIterator[tuple[Call, Call]]:
    """Open one configuration alone: ``(request, request_batch)`` of the links pipeline or
    of the host-chained sessions. Never both at once, and each path's modules are all
    loaded before its first launch: loading a module into a CUDA context where a kernel
    runs waits for that kernel (for ever, as a resident kernel never ends)."""
    if name == "links":
        pipeline = PersistentPipeline(*kernels(args.capacity))
        async with open_persistent_pipeline(pipeline, args.backend) as pipe:
            yield pipe.request, pipe.request_batch
        return
    stages = kernels(args.capacity)
    preload = getattr(pdc_core.get_backend(args.backend), "preload_persistent_kernels", None)
    if preload is not None:
        # Every module loaded before the first launch (on CUDA into one context, so the
        # three kernels share it and nothing is loaded beside a running one).
        preload(stages)
    async with AsyncExitStack() as stack:
        chain = [
            await stack.enter_async_context(open_persistent_kernel(kernel, args.backend))
            for kernel in stages
        ]

        async def host_request(record: Any) -> Any:
            for session in chain:
                record = await session.request(record)
            return record

        async def host_batch(records: Any) -> Any:
            for session in chain:
                records = await session.request_batch(records)
            return records

        yield host_request, host_batch


async def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    paths = ("links", "host")
    results: dict[str, dict[str, list[float]]] = {
        path: {"p50": [], "p99": [], "rate": []} for path in paths
    }
    batch = np.zeros(args.batch, REC)
    batch["id"] = np.arange(args.batch)
    batch["x"] = np.arange(args.batch, dtype=np.float64)
    expected = (batch["x"] + 1) * 2 - 1
    for round_ in range(args.rounds):
        order = paths if round_ % 2 == 0 else paths[::-1]
        for name in order:
            async with open_path(name, args) as (one, many):
                # Warm up (and check both paths compute the same) in every opening.
                assert np.array_equal((await many(batch))["x"], expected), name
                await latency(one, 50)
                times = sorted(await latency(one, args.requests))
                results[name]["p50"].append(times[len(times) // 2] * 1e6)
                results[name]["p99"].append(times[int(len(times) * 0.99)] * 1e6)
                results[name]["rate"].append(await throughput(many, batch, args.repeat))
    return results


def report(loop: str, results: dict[str, dict[str, list[float]]]) -> list[str]:
    rows = []
    for name in ("links", "host"):
        r = results[name]
        rows.append(
            f"| {loop} | {name} | {statistics.median(r['p50']):.0f} | "
            f"{statistics.median(r['p99']):.0f} | {statistics.median(r['rate']) / 1e6:.2f} |"
        )
    links, host = results["links"], results["host"]

    def ratio(key: str) -> float:
        return statistics.median(a / b for a, b in zip(links[key], host[key], strict=True))

    rows.append(
        f"| {loop} | links/host (median of per-round ratios) | {ratio('p50'):.2f}x | "
        f"{ratio('p99'):.2f}x | {ratio('rate'):.2f}x |"
    )
    return rows


def backend_description(name: str) -> str:
    """The backend that will run, in words; exits with status 2 if it cannot run here."""
    try:
        backend = pdc_core.get_backend(name)
    except pdc_core.BackendUnavailable as exc:
        print(f"k2k_pipeline: cannot measure on the {name} backend: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    info = backend.device_info
    return f"{backend.qualified_name} ({info.name})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=500, help="round trips per round")
    parser.add_argument("--batch", type=int, default=16384, help="records per batch")
    parser.add_argument("--repeat", type=int, default=5, help="batches per round")
    parser.add_argument("--capacity", type=int, default=1024, help="slots per ring and link")
    parser.add_argument("--loops", default="asyncio,trio")
    args = parser.parse_args()
    device = backend_description(args.backend)
    print(f"pdc-core {pdc_core.__version__}, numpy {np.__version__}, {device}, {args}")
    print("| loop | path | round trip p50 (us) | p99 (us) | request_batch (M records/s) |")
    print("|---|---|---:|---:|---:|")
    for loop in args.loops.split(","):
        results = anyio.run(measure, args, backend=loop)
        for row in report(loop, results):
            print(row, flush=True)


if __name__ == "__main__":
    main()
