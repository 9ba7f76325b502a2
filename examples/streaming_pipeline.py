"""A three-stage streaming pipeline of actors: parse -> square -> sum, in one nursery.

    python examples/streaming_pipeline.py [--n 100000] [--async-backend trio]

Each stage forwards to the next with ``tell``; bounded mailboxes give backpressure,
so a fast producer waits for the slowest stage instead of filling memory. Stages are
stopped in pipeline order, each after draining, so no message is lost.
(``pdc demo`` is the bigger version of this: anomaly detection over sensor frames.)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

from pdc_core import Actor, ActorRef, open_nursery


class Square(Actor[np.ndarray, None]):
    def __init__(self, downstream: ActorRef[Any, Any]) -> None:
        self.downstream = downstream

    async def handle_batch(self, messages: list[np.ndarray]) -> list[None]:
        # Every chunk waiting, handled at once: the natural shape for device work.
        squared = np.concatenate(messages) ** 2
        await self.downstream.tell(squared)
        return [None] * len(messages)


class Total(Actor[np.ndarray, None]):
    def __init__(self) -> None:
        self.total = 0
        self.count = 0

    async def handle(self, message: np.ndarray) -> None:
        self.total += int(message.sum(dtype=np.int64))
        self.count += message.size


async def run(n: int, chunk: int = 1000) -> int:
    total = Total()
    async with open_nursery() as nursery:
        sink = await nursery.start_actor(total, name="total", capacity=16)
        square = await nursery.start_actor(Square(sink), name="square", capacity=16)
        for start in range(0, n, chunk):
            await square.tell(np.arange(start, min(start + chunk, n), dtype=np.int64))
        await square.stop(drain=True)
        await sink.stop(drain=True)
    assert total.count == n
    assert total.total == sum(i * i for i in range(n))
    return total.total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--async-backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    total = anyio.run(run, args.n, backend=args.async_backend)
    print(f"sum of squares below {args.n:,} = {total:,} (correct)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
