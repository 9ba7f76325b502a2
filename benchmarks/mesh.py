"""Actor meshes and the broadcast stream against hand-written floors, in one run.

Run from the repository root::

    python benchmarks/mesh.py            # both event loops, 7 rounds
    python benchmarks/mesh.py --quick    # 3 rounds
    python benchmarks/mesh.py --ray      # also pdc-ray against bare Ray (starts Ray: slow)

Contenders, each measured in the same event loop, rounds interleaved:

* ``call`` of a small message over ``k`` local actors (k = 100 and 1,000): pdc's
  ``await mesh.call(msg)`` over ``k`` actors whose handler returns the message, against
  the floor the issue names: ``k`` bounded queues (``asyncio.Queue(1024)``; under trio
  ``k`` memory channels of 1024) each read by a task that runs the same handler, one
  loop of non-blocking puts (``put_nowait``/``send_nowait``) of ``(message, box)``,
  then one wait until the ``k`` replies are in the box (the last reply sets one event).
  Targets: pdc/floor <= 1.3 at k = 100; the per-member cost at 1,000 within 1.5x of
  that at 100.
* the broadcast stream with 100 subscribers: ``send_nowait`` of one message (and
  ``await send``, which is a checkpoint as anyio's) against 100 ``send_nowait`` calls on
  100 anyio memory object streams; each subscriber's buffer is drained between rounds
  (not timed). Target: <= 1.3.
* ``--ray``: ``await mesh.call(x)`` over 8 remote actors placed with ``pdc_ray.on()``
  against ``ray.get([a.method.remote(x) for a in actors])`` over 8 bare Ray actors,
  asyncio only (``ray.get`` blocks the loop), and for reference the same 8 calls
  awaited through Ray's own asyncio support (``await asyncio.gather(*refs)``). Each
  round interleaves 10 blocks of 10 calls of each (alternating the order) and reports
  the ratios of the medians, and the CPU time this process spent per call (the event
  loop and Ray's driver threads: what waiting costs on the caller's side). Target:
  pdc / ray.get <= 1.15.

Times are medians of per-round medians; ratios are medians of per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from pdc_core import ActorMesh, create_broadcast_stream, open_nursery
from pdc_core._loop import current_library

QUEUE = 1024


async def echo(message: Any) -> Any:
    return message


# -- call over k actors ------------------------------------------------------------------


class _Floor:
    """k bounded queues, a task each; a call puts to all without waiting, then waits."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.box: list[Any] = []
        self.event: Any = None

    async def serve_asyncio(self, queue: asyncio.Queue[Any]) -> None:
        while True:
            message, box = await queue.get()
            box.append(await echo(message))
            if len(box) == self.k:
                self.event.set()

    async def call_asyncio(self, queues: list[asyncio.Queue[Any]], message: Any) -> list[Any]:
        box: list[Any] = []
        self.event = asyncio.Event()
        for queue in queues:
            queue.put_nowait((message, box))
        await self.event.wait()
        return box

    async def serve_trio(self, receive: Any) -> None:
        async for message, box in receive:
            box.append(await echo(message))
            if len(box) == self.k:
                self.event.set()

    async def call_trio(self, sends: list[Any], message: Any) -> list[Any]:
        import trio

        box: list[Any] = []
        self.event = trio.Event()
        for send in sends:
            send.send_nowait((message, box))
        await self.event.wait()
        return box


async def _time(call: Callable[[], Awaitable[Any]], reps: int) -> float:
    """Median seconds per call over ``reps`` calls, after a warm-up."""
    for _ in range(max(3, reps // 10)):
        await call()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def call_round(k: int, reps: int) -> dict[str, float]:
    """One round at ``k`` actors: floor, then pdc, in the same event loop."""
    out: dict[str, float] = {}
    floor = _Floor(k)
    library = current_library()
    async with anyio.create_task_group() as tg:
        if library == "asyncio":
            queues: list[asyncio.Queue[Any]] = [asyncio.Queue(QUEUE) for _ in range(k)]
            for queue in queues:
                tg.start_soon(floor.serve_asyncio, queue)
            await anyio.lowlevel.checkpoint()
            out["floor"] = await _time(lambda: floor.call_asyncio(queues, "m"), reps)
        else:
            import trio

            pairs = [trio.open_memory_channel[Any](QUEUE) for _ in range(k)]
            for _, receive in pairs:
                tg.start_soon(floor.serve_trio, receive)
            await anyio.lowlevel.checkpoint()
            sends = [send for send, _ in pairs]
            out["floor"] = await _time(lambda: floor.call_trio(sends, "m"), reps)
        tg.cancel_scope.cancel()
    async with open_nursery() as nursery:
        mesh: ActorMesh[Any, Any] = await nursery.start_mesh(echo, shape={"actor": k})
        assert await mesh.call("m") == ["m"] * k
        out["pdc"] = await _time(lambda: mesh.call("m"), reps)
    return out


# -- broadcast to 100 subscribers --------------------------------------------------------


async def broadcast_round(n: int, messages: int, reps: int) -> dict[str, float]:
    """Seconds per message sent to ``n`` subscribers: pdc send_nowait, pdc send, and n
    anyio memory-stream send_nowait calls; buffers drained between batches, untimed."""
    out: dict[str, list[float]] = {"floor": [], "pdc send_nowait": [], "pdc send": []}
    streams = [anyio.create_memory_object_stream[Any](messages) for _ in range(n)]
    sends = [send for send, _ in streams]
    receives = [receive for _, receive in streams]
    bsend, subscribe = create_broadcast_stream[Any](messages)
    subscribers = [subscribe() for _ in range(n)]
    payload = [object() for _ in range(messages)]

    def drain() -> None:
        for receive in receives:
            while receive.statistics().current_buffer_used:
                receive.receive_nowait()
        for subscriber in subscribers:
            while subscriber.statistics().current_buffer_used:
                subscriber.receive_nowait()

    for _ in range(reps):
        start = time.perf_counter()
        for item in payload:
            for send in sends:
                send.send_nowait(item)
        out["floor"].append((time.perf_counter() - start) / messages)
        drain()
        start = time.perf_counter()
        for item in payload:
            bsend.send_nowait(item)
        out["pdc send_nowait"].append((time.perf_counter() - start) / messages)
        drain()
        start = time.perf_counter()
        for item in payload:
            await bsend.send(item)
        out["pdc send"].append((time.perf_counter() - start) / messages)
        drain()
    opened: list[Any] = [*sends, *receives, bsend, *subscribers]
    for stream in opened:
        stream.close()
    return {key: statistics.median(values) for key, values in out.items()}


# -- the run -----------------------------------------------------------------------------


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} us"


def run_loop(backend: str, rounds: int) -> dict[str, float]:
    """Every local measurement under ``backend``; returns median ratios and times."""
    ratios: dict[str, list[float]] = {}
    times: dict[str, list[float]] = {}

    def record(name: str, value: float, store: dict[str, list[float]]) -> None:
        store.setdefault(name, []).append(value)

    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            r100 = anyio.run(call_round, 100, 200, backend=backend)
            r1000 = anyio.run(call_round, 1000, 40, backend=backend)
            bc = anyio.run(broadcast_round, 100, 256, 10, backend=backend)
        finally:
            gc.enable()
        record("call k=100: pdc / floor", r100["pdc"] / r100["floor"], ratios)
        record("call k=1000: pdc / floor", r1000["pdc"] / r1000["floor"], ratios)
        record(
            "call per member, k=1000 / k=100 (pdc)",
            (r1000["pdc"] / 1000) / (r100["pdc"] / 100),
            ratios,
        )
        record(
            "call per member, k=1000 / k=100 (floor)",
            (r1000["floor"] / 1000) / (r100["floor"] / 100),
            ratios,
        )
        record("broadcast 100: send_nowait / floor", bc["pdc send_nowait"] / bc["floor"], ratios)
        record("broadcast 100: send / floor", bc["pdc send"] / bc["floor"], ratios)
        for name, value in (
            ("call k=100 floor", r100["floor"]),
            ("call k=100 pdc", r100["pdc"]),
            ("call k=1000 floor", r1000["floor"]),
            ("call k=1000 pdc", r1000["pdc"]),
            ("broadcast 100 floor (per message)", bc["floor"]),
            ("broadcast 100 pdc send_nowait", bc["pdc send_nowait"]),
            ("broadcast 100 pdc send", bc["pdc send"]),
        ):
            record(name, value, times)
    print(f"\n== {backend} ({rounds} rounds) ==")
    for name, values in times.items():
        print(f"  {name:40s} {_us(statistics.median(values))}")
    result = {}
    for name, values in ratios.items():
        med = statistics.median(values)
        result[name] = med
        print(f"  {name:40s} {med:9.2f}x  (rounds {min(values):.2f}-{max(values):.2f})")
    return result


# -- pdc-ray against bare Ray --------------------------------------------------------------


def run_ray(rounds: int) -> float:
    import pdc_ray
    import ray

    @ray.remote
    class Bare:
        async def method(self, x: Any) -> Any:
            return x

    async def main() -> float:
        ratios = []
        temp_dir = tempfile.mkdtemp(prefix="pdc-ray-bench-", dir="/tmp")
        connect = pdc_ray.connect(
            address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp_dir
        )
        async with connect, open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                echo, shape={"worker": 8}, placement=pdc_ray.on(num_cpus=0.01)
            )
            actors = [Bare.options(num_cpus=0.01).remote() for _ in range(8)]  # type: ignore[attr-defined]
            ray.get([a.method.remote(0) for a in actors])
            assert await mesh.call(1) == [1] * 8

            async def pdc_call() -> None:
                await mesh.call(1)

            async def bare_call() -> None:
                ray.get([a.method.remote(1) for a in actors])

            async def bare_await() -> None:  # Ray's own asyncio support, for reference
                await asyncio.gather(*[a.method.remote(1) for a in actors])

            for _ in range(10):  # warm-up
                await bare_call()
                await bare_await()
                await pdc_call()
            for _ in range(rounds):
                # Interleaved: 10 blocks of 10 calls each way, alternating the order, so
                # that a burst of load on the machine hits all alike.
                samples: dict[str, list[float]] = {"bare": [], "await": [], "pdc": []}
                cpu = {"bare": 0.0, "await": 0.0, "pdc": 0.0}
                for block in range(10):
                    order = [("bare", bare_call), ("await", bare_await), ("pdc", pdc_call)]
                    for name, call in order if block % 2 == 0 else order[::-1]:
                        for _ in range(10):
                            start, start_cpu = time.perf_counter(), time.process_time()
                            await call()
                            samples[name].append(time.perf_counter() - start)
                            cpu[name] += time.process_time() - start_cpu
                bare = statistics.median(samples["bare"])
                awaited = statistics.median(samples["await"])
                pdc = statistics.median(samples["pdc"])
                ratios.append(pdc / bare)
                print(
                    f"  ray round: ray.get {_us(bare)}  await {_us(awaited)}  pdc {_us(pdc)}"
                    f"  pdc/ray.get {pdc / bare:.2f}  await/ray.get {awaited / bare:.2f}"
                    f"\n    this process's CPU per call: ray.get {_us(cpu['bare'] / 100)},"
                    f" await {_us(cpu['await'] / 100)}, pdc {_us(cpu['pdc'] / 100)}"
                )
            for actor in actors:
                ray.kill(actor)
        return statistics.median(ratios)

    ratio = anyio.run(main)
    print(f"  call over 8 remote actors: pdc / ray.get  {ratio:.2f}x (target <= 1.15)")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    parser.add_argument("--ray", action="store_true", help="also pdc-ray against bare Ray")
    parser.add_argument("--ray-only", action="store_true", help="pdc-ray against bare Ray only")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    from importlib.metadata import version

    print(
        f"python {platform.python_version()}, anyio {version('anyio')}, trio {version('trio')}"
        f", {platform.machine()}, {sys.platform}"
    )
    if args.ray_only:
        run_ray(rounds)
        return
    results = {backend: run_loop(backend, rounds) for backend in ("asyncio", "trio")}
    print("\n== targets ==")
    for backend, result in results.items():
        call = result["call k=100: pdc / floor"]
        linear = result["call per member, k=1000 / k=100 (pdc)"]
        bc = result["broadcast 100: send_nowait / floor"]
        print(
            f"  {backend:7s} call/floor {call:.2f} (<= 1.3: {'met' if call <= 1.3 else 'MISSED'})"
            f"  linear {linear:.2f} (<= 1.5: {'met' if linear <= 1.5 else 'MISSED'})"
            f"  broadcast {bc:.2f} (<= 1.3: {'met' if bc <= 1.3 else 'MISSED'})"
        )
    if args.ray:
        print("\n== pdc-ray (asyncio) ==")
        run_ray(rounds)


if __name__ == "__main__":
    main()
