"""The measured paths of ``pdc bench`` and of the ``benchmarks/`` scripts: one of each.

Every path is a plain coroutine function, run in a fresh event loop of its own (see
:func:`run_fresh`), under asyncio or trio:

* a **latency sampler** ``sampler(n, warmup) -> list[int]``: ``warmup`` untimed round
  trips, then ``n`` timed ones; samples in nanoseconds;
* a **throughput runner** ``runner(n) -> float``: ``n`` messages through the path,
  replies checked; messages per second, timed from the first send to the last reply.

The work is the same for every contender of a table: the latency paths echo one
pre-built ``Request`` back; the throughput paths answer ``data * 2`` per message; the
persistent-kernel paths turn a record ``(id, x)`` into ``(id, y = 2 x)``.
PyDotCompute 0.2.0, when installed, runs the *same kernel functions* as pdc's seed
facade (:func:`pydotcompute` registers them there).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import resource
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt

from .. import Request, RingKernelRuntime, ring_kernel
from .._actors import Actor, open_nursery
from .._loop import current_library
from .._persistent import PersistentKernelActor, open_persistent_kernel
from ..backend import Backend, PersistentKernel

__all__ = [
    "BODIES",
    "CAPACITY",
    "DOUBLER",
    "ECHO",
    "ECHO_NO_TIMEOUT",
    "LAUNCH_SOURCES",
    "PER_MESSAGE",
    "QUEUE",
    "REP",
    "REQ",
    "LatencySampler",
    "ThroughputRunner",
    "ask_many",
    "ask_stream",
    "backend_kind",
    "backend_name",
    "bare_streams",
    "double",
    "double_kernel",
    "facade_round_trip",
    "facade_streaming",
    "floor_handoff",
    "launch_round_trip",
    "pdc_ask",
    "persistent_actor_round_trip",
    "persistent_batched",
    "persistent_round_trip",
    "persistent_round_trips_and_idle",
    "pydotcompute",
    "pydotcompute_round_trip",
    "pydotcompute_streaming",
    "ring_floor_round_trip",
    "rotated",
    "run_fresh",
    "task_per_message_batched",
    "task_per_message_round_trip",
    "task_per_ring_batched",
    "tell_many",
    "thread_ping_pong",
]

LatencySampler = Callable[[int, int], Awaitable[list[int]]]
ThroughputRunner = Callable[[int], Awaitable[float]]

#: Queue sizes of the seed-facade kernels and mailbox capacities of the actor paths.
QUEUE: Final = 4096
#: The seed kernels (the seeds' loop shape), registered in pdc and in PyDotCompute.
ECHO: Final = "pdc_bench.echo"  # receive(timeout=0.1), as every seed kernel does
ECHO_NO_TIMEOUT: Final = "pdc_bench.echo_no_timeout"  # receive() without a timeout
DOUBLER: Final = "pdc_bench.doubler"  # receive(timeout=0.1), send(msg.data * 2)


def _seed_kernel(timeout: float | None, reply: Callable[[Any], Any]) -> Any:
    async def kernel(ctx: Any) -> None:
        while not ctx.should_terminate:
            if not ctx.is_active:
                await ctx.wait_active()
                continue
            try:
                msg = await ctx.receive(timeout=timeout)
            except Exception:  # PyDotCompute's receive timeout is no TimeoutError
                continue
            await ctx.send(reply(msg))

    return kernel


_SEED_KERNELS: Final = {
    ECHO: _seed_kernel(0.1, lambda msg: msg),
    ECHO_NO_TIMEOUT: _seed_kernel(None, lambda msg: msg),
    DOUBLER: _seed_kernel(0.1, lambda msg: msg.data * 2),
}
for _kernel_id, _kernel in _SEED_KERNELS.items():
    ring_kernel(kernel_id=_kernel_id, queue_size=QUEUE)(_kernel)


def pydotcompute() -> Any:
    """The ``pydotcompute`` module with the seed kernels registered, or ``None``.

    Keeps it on the stock asyncio loop (it installs uvloop on import otherwise). Its
    message class is ``module.pdc_bench_request``.
    """
    os.environ.setdefault("PYDOTCOMPUTE_NO_UVLOOP", "1")
    try:
        module: Any = importlib.import_module("pydotcompute")
    except ImportError:
        return None
    if not hasattr(module, "pdc_bench_request"):
        for kernel_id, kernel in _SEED_KERNELS.items():
            module.ring_kernel(kernel_id=kernel_id, queue_size=QUEUE)(kernel)

        @module.message
        class PdcRequest:
            data: Any = None

        module.pdc_bench_request = PdcRequest
    return module


# -- latency ----------------------------------------------------------------------------------


async def _sample(n: int, warmup: int, once: Callable[[], Awaitable[Any]]) -> list[int]:
    samples: list[int] = []
    clock = time.perf_counter_ns
    for i in range(warmup + n):
        t0 = clock()
        await once()
        if i >= warmup:
            samples.append(clock() - t0)
    return samples


async def floor_handoff(n: int, warmup: int) -> list[int]:
    """The least any two-task round trip costs on this event loop: a server task parked
    on a bare future (asyncio) or ``wait_task_rescheduled`` (trio), no queue at all."""
    msg = Request(data=1)
    if current_library() == "asyncio":
        loop = asyncio.get_running_loop()
        box: list[Any] = [None]  # the server's future

        async def server() -> None:
            while True:
                box[0] = loop.create_future()
                request, reply = await box[0]
                reply.set_result(request)

        task = loop.create_task(server())
        while box[0] is None:  # noqa: ASYNC110 - wait for the server to park
            await asyncio.sleep(0)

        async def once() -> None:
            reply = loop.create_future()
            box[0].set_result((msg, reply))
            await reply

        try:
            return await _sample(n, warmup, once)
        finally:
            task.cancel()

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

        async def trio_once() -> None:
            lowlevel.reschedule(parked[0], outcome.Value((msg, me)))
            await lowlevel.wait_task_rescheduled(abort)

        samples = await _sample(n, warmup, trio_once)
        nursery.cancel_scope.cancel()
    return samples


async def bare_streams(n: int, warmup: int) -> list[int]:
    """Two memory-object streams written the obvious way; a server task echoes."""
    send_req, recv_req = anyio.create_memory_object_stream[Any](1)
    send_rep, recv_rep = anyio.create_memory_object_stream[Any](1)

    async def server() -> None:
        async with recv_req, send_rep:
            async for msg in recv_req:
                await send_rep.send(msg)

    msg = Request(data=1)

    async def once() -> None:
        await send_req.send(msg)
        await recv_rep.receive()

    async with anyio.create_task_group() as tg:
        tg.start_soon(server)
        async with send_req, recv_rep:
            samples = await _sample(n, warmup, once)
    return samples


async def pdc_ask(n: int, warmup: int) -> list[int]:
    """``await ref.ask(msg)`` on a mailbox actor whose handler returns the message."""

    async def echo(msg: Any) -> Any:
        return msg

    msg = Request(data=1)
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, capacity=QUEUE)
        samples = await _sample(n, warmup, lambda: ref.ask(msg))
    return samples


def _runtime_round_trip(
    runtime_class: Any, kernel_id: str, msg: Any, shutdown: float | None
) -> LatencySampler:
    async def sample(n: int, warmup: int) -> list[int]:
        async with runtime_class(enable_telemetry=True) as runtime:
            await runtime.launch(kernel_id)
            await runtime.activate(kernel_id)

            async def once() -> None:
                await runtime.send(kernel_id, msg)
                await runtime.receive(kernel_id)

            samples = await _sample(n, warmup, once)
            if shutdown is not None:
                await runtime.shutdown(timeout=shutdown)
        return samples

    return sample


def facade_round_trip(kernel_id: str = ECHO) -> LatencySampler:
    """``runtime.send`` + ``runtime.receive`` on pdc's seed facade."""
    return _runtime_round_trip(RingKernelRuntime, kernel_id, Request(data=1), None)


def pydotcompute_round_trip(kernel_id: str = ECHO) -> LatencySampler | None:
    """The same two calls on PyDotCompute's runtime (asyncio only); None if absent.

    A kernel blocked in ``receive()`` without a timeout never sees PyDotCompute's
    shutdown flag: it waits out its whole shutdown timeout, so that is kept short.
    """
    module = pydotcompute()
    if module is None:
        return None
    return _runtime_round_trip(
        module.RingKernelRuntime, kernel_id, module.pdc_bench_request(data=1), 0.2
    )


# -- throughput -------------------------------------------------------------------------------


def _doubled(replies: list[Any], n: int, what: str) -> None:
    if sorted(replies) != [2 * i for i in range(n)]:
        raise RuntimeError(f"{what}: wrong replies")


class _BatchSink(Actor[Any, None]):
    def __init__(self) -> None:
        self.count = 0

    async def handle_batch(self, messages: list[Any]) -> list[None]:
        self.count += len(messages)
        return [None] * len(messages)


async def tell_many(n: int) -> float:
    """``tell_many`` in chunks of 1024 into an actor with ``handle_batch``; until drained."""
    msgs = [Request(data=i) for i in range(n)]
    sink = _BatchSink()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(sink, capacity=QUEUE, max_batch=1024)
        t0 = time.perf_counter()
        for start in range(0, n, 1024):
            await ref.tell_many(msgs[start : start + 1024])
        await ref.stop(drain=True)
        elapsed = time.perf_counter() - t0
    if sink.count != n:
        raise RuntimeError(f"tell_many: {sink.count} of {n} messages handled")
    return n / elapsed


class _PerMessage(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        return message.data * 2


class _Batched(Actor[Any, Any]):
    async def handle_batch(self, messages: list[Any]) -> list[Any]:
        return [m.data * 2 for m in messages]


def ask_many(batched: bool) -> ThroughputRunner:
    """``ask_many`` into an actor with ``handle_batch`` (``batched``) or ``handle``."""
    actor = _Batched if batched else _PerMessage

    async def run(n: int) -> float:
        msgs = [Request(data=i) for i in range(n)]
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(actor, capacity=QUEUE, max_batch=QUEUE)
            t0 = time.perf_counter()
            replies = await ref.ask_many(msgs)
            elapsed = time.perf_counter() - t0
        _doubled(replies, n, "ask_many")
        return n / elapsed

    return run


async def ask_stream(n: int) -> float:
    """Windowed request/reply (``ask_stream``, window 256) into a ``handle`` actor."""
    msgs = [Request(data=i) for i in range(n)]
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(_PerMessage, capacity=QUEUE)
        t0 = time.perf_counter()
        replies = [reply async for reply in ref.ask_stream(msgs, window=256)]
        elapsed = time.perf_counter() - t0
    _doubled(replies, n, "ask_stream")
    return n / elapsed


def _runtime_streaming(
    runtime_class: Any, make: Callable[[int], Any], shutdown: float | None
) -> ThroughputRunner:
    """A producer task sends every message while the caller receives every reply."""

    async def run(n: int) -> float:
        msgs = [make(i) for i in range(n)]
        replies: list[Any] = []
        async with runtime_class(enable_telemetry=True) as runtime:
            await runtime.launch(DOUBLER)
            await runtime.activate(DOUBLER)

            async def produce() -> None:
                for msg in msgs:
                    await runtime.send(DOUBLER, msg)

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                for _ in range(n):
                    replies.append(await runtime.receive(DOUBLER))
            elapsed = time.perf_counter() - t0
            if shutdown is not None:
                await runtime.shutdown(timeout=shutdown)
        _doubled(replies, n, "streaming")
        return n / elapsed

    return run


def facade_streaming() -> ThroughputRunner:
    """Streaming through pdc's seed facade (the seeds' doubling kernel)."""
    return _runtime_streaming(RingKernelRuntime, lambda i: Request(data=i), None)


def pydotcompute_streaming() -> ThroughputRunner | None:
    """The same streaming on PyDotCompute's runtime (asyncio only); None if absent."""
    module = pydotcompute()
    if module is None:
        return None
    return _runtime_streaming(
        module.RingKernelRuntime, lambda i: module.pdc_bench_request(data=i), 1.0
    )


# -- persistent kernels -----------------------------------------------------------------------

REQ: Final = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP: Final = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)
#: Ring slots of the benchmark kernel: a device batch is up to this many records.
CAPACITY: Final = 1024


def double(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The work, as the cpu body: one NumPy pass over a whole batch."""
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2.0
    return replies


#: The same work for each backend's persistent kernel.
BODIES: Final[dict[str, Any]] = {
    "cpu": double,
    "cuda": (
        "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) "
        "{ r.id = q.id; r.y = q.x * 2.0; return 0; }"
    ),
}


def backend_name(backend: Backend | str) -> str:
    """The backend as the labels name it: as given, or an instance's name."""
    return backend if isinstance(backend, str) else backend.name


def backend_kind(backend: Backend | str) -> str:
    """The backend's name without a device: ``"cuda"`` for ``"cuda:1"`` or a cuda instance."""
    return backend_name(backend).partition(":")[0]


def double_kernel(backend: Backend | str) -> PersistentKernel:
    """The benchmark's persistent kernel with its body for ``backend``."""
    kind = backend_kind(backend)
    return PersistentKernel("double", REQ, REP, capacity=CAPACITY).add_body(kind, BODIES[kind])


def _records(count: int) -> npt.NDArray[Any]:
    out = np.zeros(count, REQ)
    out["id"] = np.arange(count)
    out["x"] = np.arange(count) * 0.5
    return out


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def persistent_round_trips_and_idle(
    backend: Backend | str, n: int, warmup: int, idle: float = 0.0, **options: Any
) -> tuple[list[int], float]:
    """Round trips (``session.request``, ns), then the share of a core the process
    burns during ``idle`` seconds while the kernel waits for work (0 if not measured).
    ``options`` go to the backend's launch (e.g. the cpu backend's ``worker_wait``)."""
    one = _records(1)
    async with open_persistent_kernel(double_kernel(backend), backend, **options) as session:
        for _ in range(warmup):
            await session.request(one)
        samples: list[int] = []
        clock = time.perf_counter_ns
        for i in range(n):
            one["id"] = i
            t0 = clock()
            reply = await session.request(one)
            samples.append(clock() - t0)
            if reply["id"] != i:
                raise RuntimeError(f"persistent kernel: reply {reply['id']} for request {i}")
        used = 0.0
        if idle:
            before, started = _cpu_seconds(), time.perf_counter()
            await anyio.sleep(idle)
            used = (_cpu_seconds() - before) / (time.perf_counter() - started)
    return samples, used


def persistent_round_trip(backend: Backend | str = "cpu", **options: Any) -> LatencySampler:
    """One record to a persistent kernel on ``backend`` and its reply back."""

    async def sample(n: int, warmup: int) -> list[int]:
        samples, _ = await persistent_round_trips_and_idle(backend, n, warmup, **options)
        return samples

    return sample


#: Per-message launch kernels by backend name, ``(source, entry)``, for ``pdc bench
#: --backend``: the request's bytes copied in, one launch of one thread doubling ``x``
#: as the persistent kernel's body does, the reply's bytes copied out (:data:`REQ`,
#: :data:`REP`: ``id`` at byte 0, the double at byte 8).
LAUNCH_SOURCES: Final[dict[str, tuple[str, str]]] = {
    "cuda": (
        'extern "C" __global__ void pdc_bench_double(const unsigned char* q, unsigned char* r) {\n'
        "    *reinterpret_cast<unsigned long long*>(r) =\n"
        "        *reinterpret_cast<const unsigned long long*>(q);\n"
        "    *reinterpret_cast<double*>(r + 8) = *reinterpret_cast<const double*>(q + 8) * 2.0;\n"
        "}\n",
        "pdc_bench_double",
    ),
}


def launch_round_trip(backend: Backend | str) -> LatencySampler:
    """One record per launch through the backend contract: ``to_device`` into a device
    buffer, ``launch_kernel`` (which returns once the kernel is done), ``to_host`` of
    the reply; the kernel of :data:`LAUNCH_SOURCES`. Synchronous, as a launching
    program waits: its best case."""

    async def sample(n: int, warmup: int) -> list[int]:
        from .._plugins import resolve_backend

        target = resolve_backend(backend)
        source, entry = LAUNCH_SOURCES[backend_kind(target)]
        kernel = target.compile_kernel(source, entry)
        one = _records(1)
        reply = np.zeros(1, REP)
        request_bytes, reply_bytes = one.view(np.uint8), reply.view(np.uint8)
        on_device = target.to_device(request_bytes)
        answer = target.to_device(reply_bytes)
        samples: list[int] = []
        clock = time.perf_counter_ns
        for i in range(warmup + n):
            one["id"] = i
            t0 = clock()
            target.to_device(request_bytes, out=on_device)
            target.launch_kernel(kernel, (1, 1, 1), (1, 1, 1), (on_device, answer))
            target.to_host(answer, out=reply_bytes)
            if i >= warmup:
                samples.append(clock() - t0)
            if int(reply["id"][0]) != i or float(reply["y"][0]) != float(one["x"][0]) * 2:
                raise RuntimeError(f"launch per message: reply {reply[0]} for request {one[0]}")
            if not i % 256:
                await anyio.lowlevel.checkpoint()  # Ctrl-C and cancellation reach it
        return samples

    return sample


def ring_floor_round_trip(backend: Backend | str) -> LatencySampler:
    """The ring protocol's own round trip from Python, no session and no event loop:
    the resident kernel driven through :class:`~pdc_core.backend.RingHost` (put one
    record, wake, spin with the kernel's host waiter, take the reply). What the
    session's paths are held against: the least pdc's host side can cost."""

    async def sample(n: int, warmup: int) -> list[int]:
        from .._plugins import resolve_backend
        from ..backend import RingHost, RingMemory

        target = resolve_backend(backend)
        kernel = double_kernel(backend)
        memory = RingMemory.allocate(target, kernel.layout)
        resident = target.launch_persistent_kernel(kernel, memory)
        waiter = resident.host_waiter()
        samples: list[int] = []
        try:
            ring = RingHost(memory)
            for _ in range(30_000):  # up to 30 s for the launch
                if ring.started:
                    break
                await anyio.sleep(0.001)
            else:
                raise RuntimeError(f"ring floor: the kernel did not start: {resident.error}")
            one = _records(1)[0]
            clock = time.perf_counter_ns
            for i in range(warmup + n):
                t0 = clock()
                if not ring.put_one(one):
                    raise RuntimeError("ring floor: the ring is full with nothing in flight")
                resident.wake()
                reply = ring.take_one()
                while reply is None:
                    if ring.done:
                        raise RuntimeError(f"ring floor: the kernel stopped: {resident.error}")
                    waiter.spin_until_progress(ring, 0.001)
                    reply = ring.take_one()
                if i >= warmup:
                    samples.append(clock() - t0)
        finally:
            with anyio.CancelScope(shield=True):
                await resident.stop(5.0)
            waiter.close()
            resident.release()
        return samples

    return sample


def persistent_actor_round_trip(backend: Backend | str = "cpu") -> LatencySampler:
    """``await ref.ask(record)`` on the same kernel run as an actor of a nursery."""

    async def sample(n: int, warmup: int) -> list[int]:
        one = _records(1)
        async with open_nursery() as nursery:
            actor = PersistentKernelActor(double_kernel(backend), backend)
            ref = await nursery.start_actor(actor)
            samples = await _sample(n, warmup, lambda: ref.ask(one))
            await ref.stop()
        return samples

    return sample


def persistent_batched(backend: Backend | str = "cpu") -> ThroughputRunner:
    """``request_batch`` of ``n`` records (written ring-full by ring-full)."""

    async def run(n: int) -> float:
        batch = _records(n)
        async with open_persistent_kernel(double_kernel(backend), backend) as session:
            await session.request_batch(batch[: min(n, CAPACITY)])  # warm up
            t0 = time.perf_counter()
            replies = await session.request_batch(batch)
            elapsed = time.perf_counter() - t0
        if replies["id"][-1] != n - 1 or float(replies["y"][-1]) != float(batch["x"][-1]) * 2:
            raise RuntimeError("persistent kernel: wrong replies")
        return n / elapsed

    return run


class _Result:
    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: Any = None


async def _task(record: npt.NDArray[Any], result: _Result) -> None:
    result.value = double(record)[0]
    result.event.set()


async def task_per_message_round_trip(n: int, warmup: int) -> list[int]:
    """The same work without a resident kernel: a new task per message, computing the
    body on a 1-record array and handing the reply back through an event."""
    one = _records(1)
    samples: list[int] = []
    clock = time.perf_counter_ns
    async with anyio.create_task_group() as tg:
        for i in range(warmup + n):
            one["id"] = i
            t0 = clock()
            result = _Result()
            tg.start_soon(_task, one, result)
            await result.event.wait()
            if i >= warmup:
                samples.append(clock() - t0)
            if result.value["id"] != i:
                raise RuntimeError(f"task per message: reply {result.value['id']} for {i}")
    return samples


async def task_per_message_batched(n: int) -> float:
    """``n`` messages, one task each, all in flight at once."""
    batch = _records(n)
    results = [_Result() for _ in range(n)]
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(_task, batch[i : i + 1], results[i])
    elapsed = time.perf_counter() - t0
    if results[-1].value["id"] != n - 1:
        raise RuntimeError("task per message: wrong replies")
    return n / elapsed


async def _chunk_task(records: npt.NDArray[Any], result: _Result) -> None:
    result.value = double(records)


async def task_per_ring_batched(n: int) -> float:
    """``n`` records, one task per ring-full (``CAPACITY`` records, the grain that
    ``request_batch`` writes a persistent kernel's ring in), all in flight at once: the
    like-for-like baseline of ``request_batch``."""
    batch = _records(n)
    starts = range(0, n, CAPACITY)
    results = [_Result() for _ in starts]
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for start, result in zip(starts, results, strict=True):
            tg.start_soon(_chunk_task, batch[start : start + CAPACITY], result)
    elapsed = time.perf_counter() - t0
    last = results[-1].value
    if last["id"][-1] != n - 1 or float(last["y"][-1]) != float(batch["x"][-1]) * 2:
        raise RuntimeError("task per ring-full: wrong replies")
    return n / elapsed


#: Per backend: how the same work is dispatched without a resident kernel
#: (label, latency sampler, throughput runner).
PER_MESSAGE: Final[dict[str, tuple[str, LatencySampler, ThroughputRunner]]] = {
    "cpu": ("a task per message", task_per_message_round_trip, task_per_message_batched),
}


def thread_ping_pong(n: int) -> list[int]:
    """Two ``threading.Event`` hand-offs between two threads (ns): the floor under any
    round trip through a worker thread on this machine (no event loop, no ring)."""
    ping, pong = threading.Event(), threading.Event()

    def echo() -> None:
        for _ in range(n):
            ping.wait()
            ping.clear()
            pong.set()

    worker = threading.Thread(target=echo)
    worker.start()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        ping.set()
        pong.wait()
        pong.clear()
        samples.append(clock() - t0)
    worker.join()
    return samples


# -- running ----------------------------------------------------------------------------------


def run_fresh(library: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``fn(*args)`` in a fresh event loop of ``library``, the collector paused.

    Ctrl-C (SIGINT, in the main thread) always ends it with ``KeyboardInterrupt``, once
    ``fn`` has been cancelled and has cleaned up. The loop's own SIGINT handling is not
    enough: asyncio's cancels the main task once, and code under measurement (a
    baseline library, say) that swallows that one ``CancelledError`` would let the
    whole suite run on; an anyio cancel scope stays cancelled until ``fn`` ends.
    """
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if threading.current_thread() is not threading.main_thread():
            return anyio.run(fn, *args, backend=library)
        interrupted: list[bool] = []
        result = anyio.run(_interruptible, fn, args, interrupted, backend=library)
        if interrupted:
            raise KeyboardInterrupt
        return result
    finally:
        if was_enabled:
            gc.enable()


async def _interruptible(
    fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], interrupted: list[bool]
) -> Any:
    result: Any = None
    error: Exception | None = None

    async def call() -> None:
        nonlocal result, error
        try:
            result = await fn(*args)
        except Exception as exc:  # raised as itself below, not in an exception group
            error = exc
        tg.cancel_scope.cancel()  # done: stop watching for signals

    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            async for _ in signals:
                interrupted.append(True)
                tg.cancel_scope.cancel()
                break
    if error is not None:
        raise error
    return result


def rotated(items: list[Any], round_index: int) -> list[Any]:
    """``items`` rotated by the round: each contender takes every place in turn."""
    if not items:
        return items
    shift = round_index % len(items)
    return items[shift:] + items[:shift]
