"""The seeds' priority example: high-priority messages are processed first.

    python examples/priority.py [--async-backend trio]

The worker is launched but not yet activated, so the messages queue up; once it is
activated it takes the urgent (255) ones before the normal (128) ones, FIFO within a
priority.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

import anyio

from pdc_core import Request, Response, RingKernelRuntime, ring_kernel


@ring_kernel(kernel_id="examples.priority_worker", queue_size=100)
async def worker(ctx: Any) -> None:
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.1)
        except asyncio.TimeoutError:  # noqa: UP041 - as the seeds write it
            continue
        await ctx.send(Response(result=msg.data, correlation_id=msg.message_id))


async def run(n: int = 5) -> list[str]:
    async with RingKernelRuntime() as runtime:
        await runtime.launch("examples.priority_worker")
        for i in range(n):
            await runtime.send(
                "examples.priority_worker", Request(data=f"normal-{i}", priority=128)
            )
        for i in range(n):
            await runtime.send(
                "examples.priority_worker", Request(data=f"urgent-{i}", priority=255)
            )
        await runtime.activate("examples.priority_worker")
        order = [
            (await runtime.receive("examples.priority_worker", timeout=5)).result
            for _ in range(2 * n)
        ]
    assert order == [f"urgent-{i}" for i in range(n)] + [f"normal-{i}" for i in range(n)]
    return order


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--async-backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    order = anyio.run(run, args.n, backend=args.async_backend)
    print("processing order:", ", ".join(order))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
