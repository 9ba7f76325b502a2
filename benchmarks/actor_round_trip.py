"""Round-trip latency of one request/reply, side by side, in one run.

Run from the repository root (PyDotCompute is optional: ``pip install pydotcompute==0.2.0``
into the same environment to include it)::

    python benchmarks/actor_round_trip.py             # 10 rounds x 3000 round trips
    python benchmarks/actor_round_trip.py --quick     # 3 rounds x 2000

Contenders, each echoing the same pre-built ``Request`` object back to the caller:

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

Each contender runs in a fresh event loop per round; rounds are interleaved in a
rotating order and the samples of all rounds are pooled before taking percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

# PyDotCompute installs uvloop on import when it is available; keep every asyncio
# contender on the same, stock event loop.
os.environ.setdefault("PYDOTCOMPUTE_NO_UVLOOP", "1")

import anyio
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
            (backend, "bare anyio streams", bare_streams),
            (backend, "pdc ask", pdc_ask),
            (backend, "pdc seed facade, receive(timeout=0.1)", facade("rt_echo_timeout")),
            (backend, "pdc seed facade, receive()", facade("rt_echo_no_timeout")),
        ]
    if pydotcompute is not None:
        out += [
            ("asyncio", "PyDotCompute, receive(timeout=0.1)", pydotcompute_runtime("rt_echo_timeout")),
            ("asyncio", "PyDotCompute, receive()", pydotcompute_runtime("rt_echo_no_timeout")),
        ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="round trips per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="3 rounds x 2000")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 2000, 3

    env = environment(["anyio", "trio", "numpy", "sniffio", "pydotcompute", "pdc-core"])
    print("# Actor round trip (one request, one reply), microseconds")
    print()
    print("Command: " + command_line())
    print("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    print(f"Rounds: {args.rounds} x {args.n} round trips (+{args.warmup} warm-up), pooled")
    print()

    runs = contenders()
    samples: dict[tuple[str, str], list[int]] = {(b, label): [] for b, label, _ in runs}
    for round_index in range(args.rounds):
        shift = round_index % len(runs)
        for backend, label, sampler in runs[shift:] + runs[:shift]:
            gc.collect()
            result = anyio.run(sampler, args.n, args.warmup, backend=backend)
            samples[(backend, label)] += result
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    stats = {key: summarize(values).scaled(1e-3) for key, values in samples.items()}
    pdc_ref = stats.get(("asyncio", "PyDotCompute, receive(timeout=0.1)"))
    pdc_ref_nt = stats.get(("asyncio", "PyDotCompute, receive()"))
    rows = []
    for (backend, label), s in stats.items():
        bare = stats[(backend, "bare anyio streams")]
        rows.append(
            [
                backend,
                label,
                f"{s.p50:.2f}",
                f"{s.p99:.2f}",
                ratio(s.p50, bare.p50),
                ratio(s.p50, pdc_ref.p50) if pdc_ref else "n/a",
                ratio(s.p50, pdc_ref_nt.p50) if pdc_ref_nt else "n/a",
            ]
        )
    print(
        table(
            [
                "backend",
                "implementation",
                "p50 us",
                "p99 us",
                "p50 / bare",
                "p50 / PyDotCompute (timeout=0.1)",
                "p50 / PyDotCompute (no timeout)",
            ],
            rows,
            "llrrrrr",
        )
    )
    print()

    checks: list[tuple[str, float, float]] = []
    for backend in ("asyncio", "trio"):
        ask = stats[(backend, "pdc ask")].p50
        bare = stats[(backend, "bare anyio streams")].p50
        checks.append((f"{backend}: ask p50 / bare streams p50 <= 1.25", ask / bare, 1.25))
        if pdc_ref:
            bound = 1 / 3 if backend == "asyncio" else 1 / 2
            checks.append(
                (
                    f"{backend}: ask p50 / PyDotCompute (timeout=0.1) p50 <= {bound:.3f}",
                    ask / pdc_ref.p50,
                    bound,
                )
            )
            facade_t = stats[(backend, "pdc seed facade, receive(timeout=0.1)")].p50
            checks.append(
                (
                    f"{backend}: facade p50 / PyDotCompute p50, kernel receive(timeout=0.1) <= 0.5",
                    facade_t / pdc_ref.p50,
                    0.5,
                )
            )
        if pdc_ref_nt:
            bound = 1 / 3 if backend == "asyncio" else 1 / 2
            checks.append(
                (
                    f"{backend}: ask p50 / PyDotCompute (no timeout) p50 <= {bound:.3f}",
                    ask / pdc_ref_nt.p50,
                    bound,
                )
            )
            facade_nt = stats[(backend, "pdc seed facade, receive()")].p50
            checks.append(
                (
                    f"{backend}: facade p50 / PyDotCompute p50, kernel receive() <= 0.5",
                    facade_nt / pdc_ref_nt.p50,
                    0.5,
                )
            )
    print(
        table(
            ["target", "measured", "met"],
            [[name, f"{value:.3f}", "yes" if value <= bound else "NO"] for name, value, bound in checks],
            "lrl",
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
                    "results": {
                        f"{b} / {label}": {"p50_us": s.p50, "p99_us": s.p99, "n": s.count}
                        for (b, label), s in stats.items()
                    },
                    "checks": {name: {"value": v, "bound": bd} for name, v, bd in checks},
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
