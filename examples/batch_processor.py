"""The seeds' batch processor: a ring kernel that collects a batch, processes it at once.

    python examples/batch_processor.py [--n 2000] [--async-backend trio]

The kernel below is the seed's ``batch_processor`` with ``pdc_core`` in place of
``pydotcompute``; ``process_batch_gpu`` squares every value with one vectorized call
(on a GPU backend this is where the device work goes).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

from pdc_core import Request, Response, RingKernelRuntime, ring_kernel


def process_batch_gpu(batch: list[Any]) -> list[float]:
    values = np.array([msg.data for msg in batch], dtype=np.float64)
    return (values**2).tolist()


@ring_kernel(kernel_id="examples.batch_processor", queue_size=10000)
async def batch_processor(ctx: Any) -> None:
    batch_size = 100

    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue

        batch = []
        for _ in range(batch_size):
            try:
                msg = await ctx.receive(timeout=0.01)
                batch.append(msg)
            except asyncio.TimeoutError:  # noqa: UP041 - as the seeds write it
                break

        if batch:
            results = process_batch_gpu(batch)
            for msg, result in zip(batch, results, strict=True):
                await ctx.send(Response(result=result, correlation_id=msg.message_id))


async def run(n: int) -> dict[Any, float]:
    async with RingKernelRuntime(enable_telemetry=True) as runtime:
        await runtime.launch("examples.batch_processor")
        await runtime.activate("examples.batch_processor")
        requests = [Request(data=float(i)) for i in range(n)]
        for request in requests:
            await runtime.send("examples.batch_processor", request)
        results = {}
        for _ in requests:
            response = await runtime.receive("examples.batch_processor", timeout=10)
            results[response.correlation_id] = response.result
        telemetry = runtime.get_telemetry("examples.batch_processor")
        assert telemetry is not None
        print(f"messages processed: {telemetry.messages_processed}")
    for request in requests:
        assert results[request.message_id] == request.data**2
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--async-backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    results = anyio.run(run, args.n, backend=args.async_backend)
    print(f"{len(results):,} requests answered in batches, every result correct")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
