"""What many actors cost: starting them, their memory, and idle kernels' CPU, in one run.

Run from the repository root::

    python benchmarks/actor_spawn.py             # 7 rounds x 10,000 actors
    python benchmarks/actor_spawn.py --quick     # 3 rounds x 5,000

Three tables:

1. **Start.** Each contender starts ``--n`` actors one after the other in a fresh event
   loop, the collector running as in an application, until every one has run to its
   first wait. Time per actor is process CPU time (the machine may be shared; the work
   is all CPU), and the slowest single start is wall-clock time (a stall shows there).

   * ``floor`` -- an ``asyncio.Queue`` and a task reading it, written the obvious way
     (``q = asyncio.Queue(); loop.create_task(reader(q))``), until every task has
     started; under trio a memory channel and ``nursery.start_soon(receive)``. No
     handshake, no supervision, no bound: the least an actor can be.
   * ``pdc start_actor`` -- ``await nursery.start_actor(handler)``: a bounded,
     prioritised mailbox, a supervised task, and the start handshake (it returns once
     the actor is running).
   * ``pdc seed facade launch`` -- ``await runtime.launch(f"k{i}", kernel)`` on a
     ``RingKernelRuntime``: an input and an output queue, telemetry and a task each;
     the kernel is the seeds' loop (``receive(timeout=0.1)``), launched, not activated.

   The targets are per-round ratios (median over rounds): start_actor at most 2x the
   floor; a launch at most 2x a start_actor.

2. **Memory.** ``tracemalloc`` bytes per live actor (traced memory with ``--n`` of them
   running, less before, over ``--n``), once per contender, in a fresh loop.

3. **Idle CPU.** ``--n`` seed-facade kernels, launched and activated, running the seeds'
   loop with nothing to receive: with ``receive(timeout=0.1)`` and with ``receive()``;
   and, for reference, the same timed loop written on the event loop's own primitives
   (``n`` tasks doing ``await asyncio.wait_for(queue.get(), 0.1)``; under trio
   ``with trio.move_on_after(0.1): await receive()``). Process CPU time over a
   ``--window`` second wall-clock window after they settle, as a percentage of one core.
   Last, the interpreter's floor: the CPU of throwing a ``TimeoutError`` into ``--n``
   parked seed loops, ten times a second each, with no event loop or timer at all.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import sys
import time
import tracemalloc
import types
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import anyio

from pdc_core import RingKernelRuntime, open_nursery, ring_kernel
from pdc_core._cli._bench_paths import rotated
from pdc_core._cli._bench_stats import print_header, table

FLOOR = "floor: a task and a queue"
START = "pdc start_actor"
LAUNCH = "pdc seed facade launch"


async def _handler(message: Any) -> Any:
    return message


def _seed_loop(timeout: float | None) -> Any:
    async def kernel(ctx: Any) -> None:
        while not ctx.should_terminate:
            if not ctx.is_active:
                await ctx.wait_active()
                continue
            try:
                msg = await ctx.receive(timeout=timeout)
            except TimeoutError:
                continue
            await ctx.send(msg)

    return ring_kernel(kernel_id=f"spawn_bench.{timeout}", queue_size=64, auto_register=False)(
        kernel
    )


TIMED = _seed_loop(0.1)
UNTIMED = _seed_loop(None)

#: ``start_all()`` starts the actors of a run and returns the slowest single start in
#: seconds (0.0 for the floor, which starts them all at once).
StartAll = Callable[[], Awaitable[float]]
Body = Callable[[StartAll], Awaitable[Any]]


async def _floor_asyncio(n: int, keep: list[Any]) -> float:
    loop = asyncio.get_running_loop()

    async def reader(queue: asyncio.Queue[Any]) -> None:
        while True:
            await queue.get()

    for _ in range(n):
        queue: asyncio.Queue[Any] = asyncio.Queue()
        keep.append((queue, loop.create_task(reader(queue))))
    await _all_running()
    return 0.0


async def _floor_trio(n: int, keep: list[Any]) -> float:
    import trio

    nursery = keep[0]
    for _ in range(n):
        send, receive = trio.open_memory_channel[Any](0)
        keep.append(send)
        nursery.start_soon(receive.receive)
    await _all_running()
    return 0.0


async def _with_floor(n: int, body: Body) -> Any:
    """Run ``body(start_all)`` where ``start_all()`` starts ``n`` floor actors."""
    if _on_asyncio():
        keep: list[Any] = []
        try:
            return await body(lambda: _floor_asyncio(n, keep))
        finally:
            for _queue, task in keep:
                task.cancel()
            await asyncio.sleep(0)
    import trio

    async with trio.open_nursery() as nursery:
        trio_keep: list[Any] = [nursery]
        result = await body(lambda: _floor_trio(n, trio_keep))
        nursery.cancel_scope.cancel()
    return result


async def _all_running() -> None:
    """Return once every task started so far has run to its first wait."""
    if _on_asyncio():
        await asyncio.sleep(0)  # the tasks were scheduled first, and run in that order
    else:
        import trio.testing

        await trio.testing.wait_all_tasks_blocked()


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _with_actors(n: int, body: Body) -> Any:
    async with open_nursery() as nursery:

        async def start_all() -> float:
            slowest = 0.0
            for _ in range(n):
                begin = time.perf_counter()
                await nursery.start_actor(_handler)
                slowest = max(slowest, time.perf_counter() - begin)
            await _all_running()
            return slowest

        result = await body(start_all)
        nursery.cancel()
    return result


async def _with_kernels(n: int, body: Body) -> Any:
    async with RingKernelRuntime() as runtime:

        async def launch_all() -> float:
            slowest = 0.0
            for i in range(n):
                begin = time.perf_counter()
                await runtime.launch(f"k{i}", TIMED)
                slowest = max(slowest, time.perf_counter() - begin)
            await _all_running()
            return slowest

        result = await body(launch_all)
        await runtime.shutdown(timeout=1.0)
    return result


WITH = {FLOOR: _with_floor, START: _with_actors, LAUNCH: _with_kernels}


async def _time_per_actor(contender: str, n: int) -> tuple[float, float]:
    """Seconds per actor to start ``n``, and the slowest single start."""

    async def body(start_all: StartAll) -> tuple[float, float]:
        begin = time.process_time()
        slowest = await start_all()
        return (time.process_time() - begin) / n, slowest

    result: tuple[float, float] = await WITH[contender](n, body)
    return result


async def _bytes_per_actor(contender: str, n: int) -> float:
    async def body(start_all: StartAll) -> float:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        await start_all()
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / n

    tracemalloc.start()
    try:
        result: float = await WITH[contender](n, body)
    finally:
        tracemalloc.stop()
    return result


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _cpu_share(window: float) -> float:
    """Percent of a core this process uses over ``window`` seconds, after settling."""
    await anyio.sleep(0.5)
    cpu, wall = _cpu_seconds(), time.perf_counter()
    await anyio.sleep(window)
    return 100 * (_cpu_seconds() - cpu) / (time.perf_counter() - wall)


async def _idle_cpu(n: int, timed: bool, window: float) -> float:
    """Percent of a core used by ``n`` activated, idle seed kernels."""
    kernel = TIMED if timed else UNTIMED
    async with RingKernelRuntime() as runtime:
        for i in range(n):
            await runtime.launch(f"k{i}", kernel)
            await runtime.activate(f"k{i}")
        used = await _cpu_share(window)
        await runtime.shutdown(timeout=1.0)
    return used


async def _idle_cpu_floor(n: int, window: float) -> float:
    """The seeds' loop written on the event loop's own queue and timeout: ``n`` tasks,
    each ``await asyncio.wait_for(queue.get(), 0.1)`` (trio: ``move_on_after(0.1)``
    around ``receive()``) again and again, with nothing to receive."""
    if _on_asyncio():

        async def poll(queue: asyncio.Queue[Any]) -> None:
            while True:
                try:
                    await asyncio.wait_for(queue.get(), 0.1)
                except TimeoutError:
                    continue

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(poll(asyncio.Queue())) for _ in range(n)]
        used = await _cpu_share(window)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return used
    import trio

    async def trio_poll(receive: Any) -> None:
        while True:
            with trio.move_on_after(0.1):
                await receive.receive()

    async with trio.open_nursery() as nursery:
        keep = []
        for _ in range(n):
            send, receive = trio.open_memory_channel[Any](0)
            keep.append(send)
            nursery.start_soon(trio_poll, receive)
        used = await _cpu_share(window)
        nursery.cancel_scope.cancel()
    return used


class _FloorContext:
    should_terminate = False
    is_active = True


@types.coroutine
def _parked() -> Generator[None, None, None]:
    yield


def _idle_cpu_interpreter_floor(n: int, timeouts_per_second: float, rounds: int = 20) -> float:
    """Percent of a core that ``n`` seed loops cost at ``timeouts_per_second`` each when
    a timeout costs only what CPython must do for it: no event loop, no timer, just a
    ``TimeoutError`` thrown into each parked loop, caught by the seeds' ``except``, the
    two flags looked at, and the loop parked again. Any implementation costs more."""

    async def receive() -> None:
        await _parked()

    async def seed_loop(ctx: _FloorContext) -> None:
        while not ctx.should_terminate:
            if not ctx.is_active:
                continue
            try:
                await receive()
            except TimeoutError:
                continue

    loops = [seed_loop(_FloorContext()) for _ in range(n)]
    for loop in loops:
        loop.send(None)
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(rounds):
            for loop in loops:
                loop.throw(TimeoutError())
        best = min(best, (time.process_time() - started) / (rounds * n))
    for loop in loops:
        loop.close()
    return 100.0 * best * n * timeouts_per_second


def _run(backend: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    gc.collect()
    return anyio.run(fn, *args, backend=backend)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="actors per run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--window", type=float, default=3.0, help="idle CPU window, seconds")
    parser.add_argument("--quick", action="store_true", help="3 rounds x 5,000")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 5_000, 3
    n = args.n
    print_header(
        f"Many actors: start, memory and idle CPU ({n:,} actors)",
        ["anyio", "trio", "pdc-core"],
        f"Rounds: {args.rounds}; in each, every contender starts {n:,} actors in a fresh "
        "event loop, in rotating order (the collector running).",
    )
    runs = [(b, c) for b in ("asyncio", "trio") for c in (FLOOR, START, LAUNCH)]
    per_actor: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    slowest: dict[tuple[str, str], float] = dict.fromkeys(runs, 0.0)
    for round_index in range(args.rounds):
        for key in rotated(runs, round_index):
            seconds, longest = _run(key[0], _time_per_actor, key[1], n)
            per_actor[key].append(seconds)
            slowest[key] = max(slowest[key], longest)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    def ratios(num: tuple[str, str], den: tuple[str, str]) -> tuple[float, float, float]:
        values = sorted(a / b for a, b in zip(per_actor[num], per_actor[den], strict=True))
        return statistics.median(values), values[0], values[-1]

    print("Start, microseconds per actor (median over rounds):")
    print()
    rows = []
    for backend, contender in runs:
        mid, low, high = ratios((backend, contender), (backend, FLOOR))
        longest = slowest[(backend, contender)]
        rows.append(
            [
                backend,
                contender,
                f"{statistics.median(per_actor[(backend, contender)]) * 1e6:.1f}",
                f"{mid:.2f} ({low:.2f}-{high:.2f})",
                f"{longest * 1e3:.1f}" if longest else "n/a",
            ]
        )
    headers = ["backend", "contender", "us per actor", "/ floor, same round", "slowest start ms"]
    print(table(headers, rows, "llrrr"))
    print()
    checks = []
    for backend in ("asyncio", "trio"):
        for name, num, den in (
            ("start_actor / floor", START, FLOOR),
            ("launch / start_actor", LAUNCH, START),
        ):
            mid, low, high = ratios((backend, num), (backend, den))
            met = "yes" if mid <= 2 else "NO"
            checks.append(
                [f"{backend}: {name}", f"{mid:.2f}", f"{low:.2f}-{high:.2f}", "<= 2", met]
            )
    print("Targets (median over rounds of the per-round ratio; range over rounds):")
    print()
    print(table(["ratio", "measured", "range", "target", "met"], checks, "lrrrl"))
    print()

    print(f"Memory, tracemalloc bytes per live actor ({n:,} alive):")
    print()
    memory = {key: _run(key[0], _bytes_per_actor, key[1], n) for key in runs}
    rows = [
        [b, c, f"{memory[(b, c)]:,.0f}", f"{memory[(b, c)] / memory[(b, FLOOR)]:.2f}"]
        for b, c in runs
    ]
    print(table(["backend", "contender", "bytes per actor", "/ floor"], rows, "llrr"))
    print()

    print(
        f"Idle CPU of {n:,} activated seed kernels with nothing to receive "
        f"(process CPU over {args.window:g} s of wall time):"
    )
    print()
    rows = []
    for backend in ("asyncio", "trio"):
        for timed, label in ((True, "receive(timeout=0.1)"), (False, "receive()")):
            used = _run(backend, _idle_cpu, n, timed, args.window)
            rows.append([backend, f"seed kernels, {label}", f"{used:.1f}%"])
        used = _run(backend, _idle_cpu_floor, n, args.window)
        floor = "wait_for(queue.get(), 0.1)" if backend == "asyncio" else "move_on_after(0.1)"
        rows.append([backend, f"plain tasks, {floor}", f"{used:.1f}%"])
    used = _idle_cpu_interpreter_floor(n, timeouts_per_second=10.0)
    rows.append(["none", "CPython floor: TimeoutError thrown into parked loops", f"{used:.1f}%"])
    print(table(["backend", "idle loop", "% of a core"], rows, "llr"))
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)  # the stock loop, whatever an import installed
    sys.exit(main())
