"""Round-trip latency of one request/reply, side by side, in one run.

Run from the repository root (PyDotCompute is optional: ``pip install pydotcompute==0.2.0``
into the same environment to include it)::

    python benchmarks/actor_round_trip.py             # 15 rounds x 2000 round trips
    python benchmarks/actor_round_trip.py --quick     # 5 rounds x 1000

Contenders, each echoing the same pre-built ``Request`` object back to the caller:

* ``floor`` -- the least any two-task round trip costs on the event loop: a server task
  parked on a bare ``asyncio`` future or ``trio.lowlevel.wait_task_rescheduled``, no
  queue, no checks. Nothing built on two tasks can beat it.
* ``bare anyio streams`` -- a request and a reply memory-object stream written the
  obvious way: the caller ``await send`` then ``await receive``; a server task does
  ``async for msg in requests: await replies.send(msg)``.
* ``pdc ask`` -- ``await ref.ask(msg)`` on a mailbox actor whose handler returns msg.
* ``pdc seed facade`` -- ``await runtime.send(id, msg); await runtime.receive(id)`` on
  pdc's ``RingKernelRuntime`` with the kernel below.
* ``PyDotCompute 0.2.0`` -- the same two calls on PyDotCompute's ``RingKernelRuntime``
  with the *same kernel source* (asyncio only; PyDotCompute does not run on trio).

The kernel is the seeds' loop shape::

    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=TIMEOUT)
        except Exception:
            continue
        await ctx.send(msg)

run twice: with ``TIMEOUT=0.1`` (as every seed kernel does) and with ``TIMEOUT=None``.
(``except Exception`` because PyDotCompute's receive timeout, ``QueueTimeoutError``,
is not a ``TimeoutError``: the seeds' ``except asyncio.TimeoutError`` would let it
kill the kernel there.)

Each contender runs in a fresh event loop per round; within a round the contenders
run back to back in a rotating order. The table shows percentiles of all samples
pooled; the targets are ratios of p50s taken within each round (side by side), and
their median over the rounds, which a burst of load from another process on a shared
machine cannot skew.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

# PyDotCompute installs uvloop on import when it is available; keep every asyncio
# contender on the same, stock event loop.
os.environ.setdefault("PYDOTCOMPUTE_NO_UVLOOP", "1")

import anyio
import sniffio
from _stats import command_line, environment, ratio, summarize, table

import pdc_core
from pdc_core import Request, RingKernelRuntime, open_nursery, ring_kernel

try:
    import pydotcompute
    from pydotcompute import RingKernelRuntime as PdcRuntime
    from pydotcompute import message as pdc_message
    from pydotcompute import ring_kernel as pdc_ring_kernel
except ImportError:  # pragma: no cover - optional baseline
    pydotcompute = None

Sampler = Callable[[int, int], Awaitable[list[int]]]


def make_echo_kernel(timeout: float | None) -> Callable[[Any], Awaitable[None]]:
    """The kernel source shared by pdc's facade and PyDotCompute."""

    async def echo(ctx: Any) -> None:
        while not ctx.should_terminate:
            if not ctx.is_active:
                await ctx.wait_active()
                continue
            try:
                msg = await ctx.receive(timeout=timeout)
            except Exception:
                continue
            await ctx.send(msg)

    return echo


ECHO_TIMEOUT = make_echo_kernel(0.1)
ECHO_NO_TIMEOUT = make_echo_kernel(None)
ring_kernel(kernel_id="rt_echo_timeout", queue_size=4096)(ECHO_TIMEOUT)
ring_kernel(kernel_id="rt_echo_no_timeout", queue_size=4096)(ECHO_NO_TIMEOUT)

if pydotcompute is not None:
    pdc_ring_kernel(kernel_id="rt_echo_timeout", queue_size=4096)(ECHO_TIMEOUT)
    pdc_ring_kernel(kernel_id="rt_echo_no_timeout", queue_size=4096)(ECHO_NO_TIMEOUT)

    @pdc_message
    class PdcRequest:
        data: Any = None


async def bare_streams(n: int, warmup: int) -> list[int]:
    send_req, recv_req = anyio.create_memory_object_stream[Any](1)
    send_rep, recv_rep = anyio.create_memory_object_stream[Any](1)

    async def server() -> None:
        async with recv_req, send_rep:
            async for msg in recv_req:
                await send_rep.send(msg)

    msg = Request(data=1)
    samples: list[int] = []
    clock = time.perf_counter_ns
    async with anyio.create_task_group() as tg:
        tg.start_soon(server)
        async with send_req, recv_rep:
            for i in range(warmup + n):
                t0 = clock()
                await send_req.send(msg)
                await recv_rep.receive()
                if i >= warmup:
                    samples.append(clock() - t0)
    return samples


async def floor_handoff(n: int, warmup: int) -> list[int]:
    """The least any two-task round trip costs on this event loop: a server task parked
    on a bare future (asyncio) or ``wait_task_rescheduled`` (trio), no queue at all."""
    samples: list[int] = []
    clock = time.perf_counter_ns
    msg = Request(data=1)
    if sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()
        box: list[Any] = [None, None]  # [server's future, request]

        async def server() -> None:
            while True:
                box[0] = loop.create_future()
                request, reply = await box[0]
                reply.set_result(request)

        task = loop.create_task(server())
        while box[0] is None:  # noqa: ASYNC110 - wait for the server to park
            await asyncio.sleep(0)
        for i in range(warmup + n):
            t0 = clock()
            reply = loop.create_future()
            box[0].set_result((msg, reply))
            await reply
            if i >= warmup:
                samples.append(clock() - t0)
        task.cancel()
        return samples

    import outcome
    import trio

    lowlevel = trio.lowlevel
    parked: list[Any] = [None]

    def abort(_: Any) -> Any:
        return lowlevel.Abort.SUCCEEDED

    async def trio_server() -> None:
        while True:
            parked[0] = lowlevel.current_task()
            request, caller = await lowlevel.wait_task_rescheduled(abort)
            lowlevel.reschedule(caller, outcome.Value(request))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio_server)
        while parked[0] is None:
            await lowlevel.checkpoint()
        me = lowlevel.current_task()
        for i in range(warmup + n):
            t0 = clock()
            lowlevel.reschedule(parked[0], outcome.Value((msg, me)))
            await lowlevel.wait_task_rescheduled(abort)
            if i >= warmup:
                samples.append(clock() - t0)
        nursery.cancel_scope.cancel()
    return samples


async def pdc_ask(n: int, warmup: int) -> list[int]:
    async def echo(msg: Any) -> Any:
        return msg

    msg = Request(data=1)
    samples: list[int] = []
    clock = time.perf_counter_ns
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, capacity=4096)
        for i in range(warmup + n):
            t0 = clock()
            await ref.ask(msg)
            if i >= warmup:
                samples.append(clock() - t0)
    return samples


def facade(kernel_id: str) -> Sampler:
    async def run(n: int, warmup: int) -> list[int]:
        msg = Request(data=1)
        samples: list[int] = []
        clock = time.perf_counter_ns
        async with RingKernelRuntime(enable_telemetry=True) as runtime:
            await runtime.launch(kernel_id)
            await runtime.activate(kernel_id)
            for i in range(warmup + n):
                t0 = clock()
                await runtime.send(kernel_id, msg)
                await runtime.receive(kernel_id)
                if i >= warmup:
                    samples.append(clock() - t0)
        return samples

    return run


def pydotcompute_runtime(kernel_id: str) -> Sampler:
    async def run(n: int, warmup: int) -> list[int]:
        msg = PdcRequest(data=1)
        samples: list[int] = []
        clock = time.perf_counter_ns
        async with PdcRuntime(enable_telemetry=True) as runtime:
            await runtime.launch(kernel_id)
            await runtime.activate(kernel_id)
            for i in range(warmup + n):
                t0 = clock()
                await runtime.send(kernel_id, msg)
                await runtime.receive(kernel_id)
                if i >= warmup:
                    samples.append(clock() - t0)
            # A kernel blocked in receive() without a timeout never sees the shutdown
            # flag: PyDotCompute waits out the whole timeout, then cancels it.
            await runtime.shutdown(timeout=0.2)
        return samples

    return run


def contenders() -> list[tuple[str, str, Sampler]]:
    """(backend, label, sampler) for everything that can run here."""
    out: list[tuple[str, str, Sampler]] = []
    for backend in ("asyncio", "trio"):
        out += [
            (backend, FLOOR, floor_handoff),
            (backend, BARE, bare_streams),
            (backend, ASK, pdc_ask),
            (backend, FACADE_T, facade("rt_echo_timeout")),
            (backend, FACADE, facade("rt_echo_no_timeout")),
        ]
    if pydotcompute is not None:
        out += [
            ("asyncio", PYDOT_T, pydotcompute_runtime("rt_echo_timeout")),
            ("asyncio", PYDOT, pydotcompute_runtime("rt_echo_no_timeout")),
        ]
    return out


FLOOR = "floor: bare two-task handoff, no queue"
BARE = "bare anyio streams"
ASK = "pdc ask"
FACADE_T = "pdc seed facade, receive(timeout=0.1)"
FACADE = "pdc seed facade, receive()"
PYDOT_T = "PyDotCompute, receive(timeout=0.1)"
PYDOT = "PyDotCompute, receive()"


def targets() -> list[tuple[str, tuple[str, str], tuple[str, str], float]]:
    """(name, numerator, denominator, bound): the design targets, plus the same ratios
    against PyDotCompute's kernel written without a receive timeout."""
    out = []
    for backend, bound in (("asyncio", 1 / 3), ("trio", 1 / 2)):
        out.append((f"{backend}: ask / bare streams", (backend, ASK), (backend, BARE), 1.25))
        if pydotcompute is not None:
            out += [
                (
                    f"{backend}: ask / PyDotCompute, seed kernel (timeout=0.1)",
                    (backend, ASK),
                    ("asyncio", PYDOT_T),
                    bound,
                ),
                (
                    f"{backend}: facade / PyDotCompute, same seed kernel (timeout=0.1)",
                    (backend, FACADE_T),
                    ("asyncio", PYDOT_T),
                    0.5,
                ),
                (
                    f"{backend}: floor (no queue at all) / PyDotCompute, kernel without timeout",
                    (backend, FLOOR),
                    ("asyncio", PYDOT),
                    bound,
                ),
                (
                    f"{backend}: ask / PyDotCompute, kernel without timeout",
                    (backend, ASK),
                    ("asyncio", PYDOT),
                    bound,
                ),
                (
                    f"{backend}: facade / PyDotCompute, same kernel without timeout",
                    (backend, FACADE),
                    ("asyncio", PYDOT),
                    0.5,
                ),
            ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="round trips per contender per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="5 rounds x 1000")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 1000, 5

    env = environment(["anyio", "trio", "numpy", "sniffio", "pydotcompute", "pdc-core"])
    print("# Actor round trip (one request, one reply), microseconds")
    print()
    print("Command: " + command_line())
    print("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    print(
        f"Rounds: {args.rounds}; in each, every contender does {args.n} round trips "
        f"(+{args.warmup} warm-up) in a fresh event loop, in rotating order."
    )
    print()

    runs = contenders()
    samples: dict[tuple[str, str], list[int]] = {(b, label): [] for b, label, _ in runs}
    round_p50: dict[tuple[str, str], list[float]] = {key: [] for key in samples}
    for round_index in range(args.rounds):
        shift = round_index % len(runs)
        for backend, label, sampler in runs[shift:] + runs[:shift]:
            gc.collect()
            result = anyio.run(sampler, args.n, args.warmup, backend=backend)
            samples[(backend, label)] += result
            round_p50[(backend, label)].append(summarize(result).p50 / 1e3)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    stats = {key: summarize(values).scaled(1e-3) for key, values in samples.items()}
    print("All samples pooled:")
    print()
    rows = [
        [backend, label, f"{s.p50:.2f}", f"{s.p99:.2f}", ratio(s.p50, stats[(backend, BARE)].p50)]
        for (backend, label), s in stats.items()
    ]
    print(table(["backend", "implementation", "p50 us", "p99 us", "p50 / bare"], rows, "llrrr"))
    print()

    # Ratios of p50s measured in the same round (side by side, minutes apart at most),
    # then the median over rounds: robust to a burst of load on a shared machine.
    checks = []
    for name, num, den, bound in targets():
        per_round = sorted(a / b for a, b in zip(round_p50[num], round_p50[den], strict=True))
        value = statistics.median(per_round)
        checks.append((name, value, bound, per_round[0], per_round[-1]))
    print("Targets (median over rounds of the per-round p50 ratio; range over rounds):")
    print()
    print(
        table(
            ["ratio of p50s", "measured", "range", "target", "met"],
            [
                [
                    name,
                    f"{value:.3f}",
                    f"{low:.2f}-{high:.2f}",
                    f"<= {bound:.3f}",
                    "yes" if value <= bound else "NO",
                ]
                for name, value, bound, low, high in checks
            ],
            "lrrrl",
        )
    )
    if pydotcompute is None:
        print("\nPyDotCompute is not installed: pip install pydotcompute==0.2.0 to compare.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "environment": env,
                    "command": command_line(),
                    "pdc_core": pdc_core.__version__,
                    "pooled": {
                        f"{b} / {label}": {"p50_us": s.p50, "p99_us": s.p99, "n": s.count}
                        for (b, label), s in stats.items()
                    },
                    "round_p50_us": {f"{b} / {label}": v for (b, label), v in round_p50.items()},
                    "targets": {
                        name: {"value": v, "bound": bd, "min": lo, "max": hi}
                        for name, v, bd, lo, hi in checks
                    },
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
