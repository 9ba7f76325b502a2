"""Throughput of messages into one actor and replies back, side by side, in one run.

Run from the repository root (PyDotCompute is optional: ``pip install pydotcompute==0.2.0``
into the same environment to include it)::

    python benchmarks/actor_throughput.py            # 3 rounds x 100,000 messages
    python benchmarks/actor_throughput.py --quick    # 2 rounds x 30,000

Every contender gets the same pre-built ``Request(data=i)`` messages and returns
``data * 2`` for each, and the replies are checked. Time runs from the first send to
the last reply.

* ``PyDotCompute 0.2.0 streaming`` -- a producer task ``await runtime.send(id, msg)``
  for every message while the caller ``await runtime.receive(id)`` every reply; the
  kernel is the seeds' loop (``ctx.receive(timeout=0.1)``, ``ctx.send(msg.data * 2)``),
  queues of 4096. PyDotCompute has no batch API on its runtime.
* ``pdc seed facade streaming`` -- the same code and kernel on pdc's runtime.
* ``pdc ask_many, handle()`` -- ``await ref.ask_many(messages)`` into a mailbox actor
  (capacity 4096) whose ``handle(msg)`` returns ``msg.data * 2``, one call per message.
* ``pdc ask_many, handle_batch()`` -- the batched path: the same actor with
  ``handle_batch(msgs)`` returning ``[m.data * 2 for m in msgs]``, called once per run
  of waiting messages (up to 4096), the shape of a GPU kernel over a batch.

Rounds are interleaved in a rotating order; the table shows each contender's median
rate over rounds, and its ratio to PyDotCompute's rate in the same round (median and
range over rounds), which a burst of load on a shared machine cannot skew.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("PYDOTCOMPUTE_NO_UVLOOP", "1")

import anyio
from _stats import command_line, environment, table

from pdc_core import Actor, Request, RingKernelRuntime, open_nursery, ring_kernel

try:
    import pydotcompute
    from pydotcompute import RingKernelRuntime as PdcRuntime
    from pydotcompute import message as pdc_message
    from pydotcompute import ring_kernel as pdc_ring_kernel
except ImportError:  # pragma: no cover - optional baseline
    pydotcompute = None

QUEUE = 4096
Runner = Callable[[list[Any]], Awaitable[tuple[float, list[Any]]]]


async def doubler(ctx: Any) -> None:
    """The kernel both runtimes run (the seeds' loop shape)."""
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.1)
        except Exception:
            continue
        await ctx.send(msg.data * 2)


ring_kernel(kernel_id="tp_doubler", queue_size=QUEUE)(doubler)
if pydotcompute is not None:
    pdc_ring_kernel(kernel_id="tp_doubler", queue_size=QUEUE)(doubler)

    @pdc_message
    class PdcRequest:
        data: Any = None


class PerMessage(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        return message.data * 2


class Batched(Actor[Any, Any]):
    async def handle_batch(self, messages: list[Any]) -> list[Any]:
        return [m.data * 2 for m in messages]


async def streaming(runtime: Any, messages: list[Any]) -> tuple[float, list[Any]]:
    replies: list[Any] = []

    async def produce() -> None:
        for msg in messages:
            await runtime.send("tp_doubler", msg)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(produce)
        for _ in range(len(messages)):
            replies.append(await runtime.receive("tp_doubler"))
    return time.perf_counter() - start, replies


async def pydotcompute_streaming(messages: list[Any]) -> tuple[float, list[Any]]:
    async with PdcRuntime(enable_telemetry=True) as runtime:
        await runtime.launch("tp_doubler")
        await runtime.activate("tp_doubler")
        result = await streaming(runtime, messages)
        await runtime.shutdown(timeout=1.0)
    return result


async def facade_streaming(messages: list[Any]) -> tuple[float, list[Any]]:
    async with RingKernelRuntime(enable_telemetry=True) as runtime:
        await runtime.launch("tp_doubler")
        await runtime.activate("tp_doubler")
        return await streaming(runtime, messages)


def ask_many(actor: type[Actor[Any, Any]]) -> Runner:
    async def run(messages: list[Any]) -> tuple[float, list[Any]]:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(actor, capacity=QUEUE, max_batch=QUEUE)
            start = time.perf_counter()
            replies = await ref.ask_many(messages)
            return time.perf_counter() - start, replies

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 rounds x 30,000")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 30_000, 2

    env = environment(["anyio", "trio", "numpy", "sniffio", "pydotcompute", "pdc-core"])
    print("# Throughput into one actor (requests in, replies out), messages per second")
    print()
    print("Command: " + command_line())
    print("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    print(f"Rounds: {args.rounds} x {args.n} messages, median shown")
    print()

    runs: list[tuple[str, str, Runner, bool]] = []
    if pydotcompute is not None:
        runs.append(("asyncio", "PyDotCompute 0.2.0 streaming", pydotcompute_streaming, True))
    for backend in ("asyncio", "trio"):
        runs += [
            (backend, "pdc seed facade streaming", facade_streaming, False),
            (backend, "pdc ask_many, handle()", ask_many(PerMessage), False),
            (backend, "pdc ask_many, handle_batch()", ask_many(Batched), False),
        ]
    ours = [Request(data=i) for i in range(args.n)]
    theirs = [PdcRequest(data=i) for i in range(args.n)] if pydotcompute is not None else []
    expected = [2 * i for i in range(args.n)]
    rates: dict[tuple[str, str], list[float]] = {(b, label): [] for b, label, _, _ in runs}
    for round_index in range(args.rounds):
        shift = round_index % len(runs)
        for backend, label, runner, is_theirs in runs[shift:] + runs[:shift]:
            gc.collect()
            seconds, replies = anyio.run(runner, theirs if is_theirs else ours, backend=backend)
            if sorted(replies) != expected:
                raise SystemExit(f"{backend} / {label}: wrong replies")
            rates[(backend, label)].append(args.n / seconds)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    median = {key: statistics.median(values) for key, values in rates.items()}
    ref_key = ("asyncio", "PyDotCompute 0.2.0 streaming")
    reference = rates.get(ref_key)

    def side_by_side(key: tuple[str, str]) -> tuple[float, float, float]:
        """Median, min and max over rounds of this contender's rate / PyDotCompute's."""
        assert reference is not None
        per_round = sorted(a / b for a, b in zip(rates[key], reference, strict=True))
        return statistics.median(per_round), per_round[0], per_round[-1]

    rows = []
    for (backend, label), rate in median.items():
        if reference:
            mid, low, high = side_by_side((backend, label))
            versus = f"{mid:.1f}x ({low:.1f}-{high:.1f})"
        else:
            versus = "n/a"
        rows.append([backend, label, f"{rate:,.0f}", versus])
    print(
        table(
            ["backend", "implementation", "msg/s (median)", "vs PyDotCompute, same round"],
            rows,
            "llrr",
        )
    )
    if reference:
        print()
        checks = []
        for backend in ("asyncio", "trio"):
            mid, low, high = side_by_side((backend, "pdc ask_many, handle_batch()"))
            checks.append(
                [
                    f"{backend}: batched ask_many vs PyDotCompute streaming",
                    f"{mid:.1f}x",
                    f"{low:.1f}-{high:.1f}",
                    ">= 10x",
                    "yes" if mid >= 10 else "NO",
                ]
            )
        print(table(["target", "measured", "range", "target", "met"], checks, "lrrrl"))
    else:
        print("\nPyDotCompute is not installed: pip install pydotcompute==0.2.0 to compare.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
