"""Throughput into many actors fed round-robin, from 1 actor to 10,000, in one run.

Run from the repository root::

    python benchmarks/actor_scaling.py            # 5 rounds, 200,000 messages a run
    python benchmarks/actor_scaling.py --quick    # 3 rounds, 100,000

For each number of actors ``k`` one producer sends the same pre-built messages
round-robin (message ``i`` to actor ``i % k``); every actor's handler counts, and the
clock stops when the last message has been handled. Actors are started before the clock
starts. Contenders, at each ``k``:

* ``floor`` -- ``k`` tasks each reading its own ``asyncio.Queue(4096)`` and awaiting the
  same handler, fed with ``await queues[i % k].put(msg)``: written the obvious way, what
  the event loop itself costs. A queue's ``put`` and ``get`` wait (and yield) only when
  it is full or empty. Under trio ``k`` memory channels of 4096, used the same way:
  ``send_nowait`` and ``receive_nowait``, waiting in ``send``/``receive`` only when full
  or empty, with a checkpoint every 64 sends and every 64 receives so that both sides
  stay cancellable and fair, as trio asks of a task that does not wait. (Trio's own
  ``send`` and ``receive`` checkpoint on every call: a channel used through them alone
  moves about 150,000 messages a second here, which measures the checkpoints, not the
  channel.)
* ``pdc tell`` -- ``await refs[i % k].tell(msg)`` into ``k`` actors (capacity 4096) whose
  handler is that same ``async def``.

Each run is in a fresh event loop (the collector paused), rounds interleaved in a
rotating order; the tables show median rates, each ``k`` against ``k = 1`` of the same
contender in the same round, and pdc against the floor at the same ``k`` in the same
round (medians of per-round ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import anyio

from pdc_core import Request, open_nursery
from pdc_core._cli import _bench_paths as paths
from pdc_core._cli._bench_stats import print_header, table
from pdc_core._loop import current_library

FLOOR = "floor: a queue and a task each"
TELL = "pdc tell"
QUEUE = 4096
#: The trio floor's sender and receivers checkpoint once every this many messages.
TRIO_CHECKPOINT_EVERY = 64
COUNTS = [1, 16, 256, 1024, 4096, 10_000]


class _Sink:
    """The handler of every actor of a run: counts, and sets ``done`` at the last one."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.done = anyio.Event()

    async def handler(self, message: Any) -> None:
        self.count += 1
        if self.count == self.n:
            self.done.set()


async def floor(k: int, n: int) -> float:
    messages = [Request(data=i) for i in range(n)]
    sink = _Sink(n)
    if current_library() == "asyncio":
        queues: list[asyncio.Queue[Any]] = [asyncio.Queue(QUEUE) for _ in range(k)]

        async def consume(queue: asyncio.Queue[Any]) -> None:
            while True:
                await sink.handler(await queue.get())

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(consume(queue)) for queue in queues]
        await asyncio.sleep(0)
        begin = time.perf_counter()
        for i, message in enumerate(messages):
            await queues[i % k].put(message)
        await sink.done.wait()
        elapsed = time.perf_counter() - begin
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return n / elapsed
    import trio
    import trio.testing

    async def trio_consume(receive: Any) -> None:
        received = 0
        while True:
            try:
                message = receive.receive_nowait()
            except trio.WouldBlock:
                message = await receive.receive()
            await sink.handler(message)
            received += 1
            if not received % TRIO_CHECKPOINT_EVERY:
                await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        sends = []
        for _ in range(k):
            send, receive = trio.open_memory_channel[Any](QUEUE)
            sends.append(send)
            nursery.start_soon(trio_consume, receive)
        await trio.testing.wait_all_tasks_blocked()
        begin = time.perf_counter()
        for i, message in enumerate(messages):
            send = sends[i % k]
            try:
                send.send_nowait(message)
            except trio.WouldBlock:
                await send.send(message)
            if i % TRIO_CHECKPOINT_EVERY == TRIO_CHECKPOINT_EVERY - 1:
                await trio.lowlevel.checkpoint()
        await sink.done.wait()
        elapsed = time.perf_counter() - begin
        nursery.cancel_scope.cancel()
    return n / elapsed


async def tell(k: int, n: int) -> float:
    messages = [Request(data=i) for i in range(n)]
    sink = _Sink(n)
    async with open_nursery() as nursery:
        refs = [await nursery.start_actor(sink.handler, capacity=QUEUE) for _ in range(k)]
        await anyio.wait_all_tasks_blocked()
        begin = time.perf_counter()
        for i, message in enumerate(messages):
            await refs[i % k].tell(message)
        await sink.done.wait()
        elapsed = time.perf_counter() - begin
    return n / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 rounds x 100,000")
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 100_000, 3
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    print_header(
        "Throughput into k actors fed round-robin, messages per second",
        ["anyio", "trio", "pdc-core"],
        f"Rounds: {args.rounds} x {args.n:,} messages; k = {', '.join(map(str, COUNTS))}.",
    )
    runners = {FLOOR: floor, TELL: tell}
    runs = [(b, c, k) for b in backends for c in (FLOOR, TELL) for k in COUNTS]
    rates: dict[tuple[str, str, int], list[float]] = {key: [] for key in runs}
    for round_index in range(args.rounds):
        for backend, contender, k in paths.rotated(runs, round_index):
            rate = paths.run_fresh(backend, runners[contender], k, args.n)
            rates[(backend, contender, k)].append(rate)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    def ratio(num: tuple[str, str, int], den: tuple[str, str, int]) -> str:
        values = sorted(a / b for a, b in zip(rates[num], rates[den], strict=True))
        return f"{statistics.median(values):.2f} ({values[0]:.2f}-{values[-1]:.2f})"

    rows = []
    for backend in backends:
        for k in COUNTS:
            rows.append(
                [
                    backend,
                    f"{k:,}",
                    f"{statistics.median(rates[(backend, FLOOR, k)]):,.0f}",
                    ratio((backend, FLOOR, k), (backend, FLOOR, 1)),
                    f"{statistics.median(rates[(backend, TELL, k)]):,.0f}",
                    ratio((backend, TELL, k), (backend, TELL, 1)),
                    ratio((backend, TELL, k), (backend, FLOOR, k)),
                ]
            )
    headers = [
        "backend",
        "actors",
        "floor msg/s",
        "floor / k=1",
        "pdc tell msg/s",
        "pdc / k=1",
        "pdc / floor",
    ]
    print(table(headers, rows, "lrrrrrr"))
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)  # the stock loop, whatever an import installed
    sys.exit(main())
