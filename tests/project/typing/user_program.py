"""A user program of pdc_core's public API, type-checked by tests/project/test_typing.py.

It is never run: ``mypy --strict`` checks it. Every line ending in
``# expect-error: <code>`` must fail with exactly that mypy error code; every other
line must pass. ``assert_type`` pins the types that flow from ``start_actor``.
"""

from __future__ import annotations

from typing import Any, assert_type

import numpy as np
import numpy.typing as npt

from pdc_core import (
    Actor,
    ActorMesh,
    ActorRef,
    Control,
    KernelActorRef,
    Mailbox,
    MeshError,
    PersistentKernel,
    PersistentKernelActor,
    PersistentKernelSession,
    Request,
    Response,
    RingKernelContext,
    RingKernelRuntime,
    create_broadcast_stream,
    open_nursery,
    open_persistent_kernel,
    persistent_kernel,
    ring_kernel,
)
from pdc_core.backend import PersistentKernelSpec
from pdc_core.lowlevel import ActorRunner, Placement

# -- actors: a subclass, an instance, a factory, an async handler ------------------------


class Doubler(Actor[int, int]):
    async def handle(self, message: int) -> int:
        return message * 2


class Greeter(Actor[str, str]):
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    async def handle(self, message: str) -> str:
        return f"{self.greeting}, {message}"


def make_greeter(greeting: str) -> Greeter:
    return Greeter(greeting)


async def length(message: str) -> int:
    return len(message)


async def actors(runner: ActorRunner, elsewhere: Placement) -> None:
    async with open_nursery() as nursery:
        doubler = await nursery.start_actor(Doubler, name="doubler", capacity=16)
        assert_type(doubler, ActorRef[int, int])
        assert_type(await doubler.ask(21), int)
        assert_type(await doubler.ask(21, priority=0, timeout=1.0), int)
        # NumPy integers are priorities, as the runtime accepts them (SupportsIndex)
        assert_type(await doubler.ask(21, priority=np.int64(5)), int)
        await doubler.tell(1, priority=np.uint8(200))
        await doubler.tell_many(range(3), priority=np.int32(7))
        assert_type(await doubler.ask_many([1, 2], priority=np.int64(5)), list[int])
        await doubler.ask(21, priority=5.0)  # expect-error: arg-type
        await doubler.tell(1, priority="5")  # expect-error: arg-type
        assert_type(await doubler.ask_many([1, 2, 3]), list[int])
        await doubler.tell(1)
        await doubler.tell_many(range(3))
        async for reply in doubler.ask_stream(range(10), window=4):
            assert_type(reply, int)

        greeter = await nursery.start_actor(Greeter, "hello")
        assert_type(greeter, ActorRef[str, str])
        instance = await nursery.start_actor(Greeter("hi"), name="hi")
        assert_type(instance, ActorRef[str, str])
        made = await nursery.start_actor(make_greeter, "hey")
        assert_type(made, ActorRef[str, str])
        handler = await nursery.start_actor(length, backpressure="drop_oldest")
        assert_type(handler, ActorRef[str, int])
        assert_type(await handler.ask("four"), int)
        other = await nursery.start_actor(runner, name="other")
        assert_type(other, ActorRef[Any, Any])
        placed = await nursery.start_actor(Doubler, placement=elsewhere, capacity=4)
        assert_type(placed, ActorRef[int, int])
        placed_handler = await nursery.start_actor(length, placement=elsewhere)
        assert_type(placed_handler, ActorRef[str, int])

        # What strict checking must refuse.
        bad: str = await doubler.ask(1)  # expect-error: assignment
        await doubler.tell("x")  # expect-error: arg-type
        await doubler.ask_many(["a", "b"])  # expect-error: list-item
        await greeter.ask(3)  # expect-error: arg-type
        await handler.tell(b"bytes")  # expect-error: arg-type
        count: str = await handler.ask("x")  # expect-error: assignment
        await nursery.start_actor(Doubler, capacity="big")  # expect-error: call-overload
        await nursery.start_actor(Doubler, placement="gpu")  # expect-error: call-overload
        print(bad, count)


# -- mailboxes -------------------------------------------------------------------------


async def mailboxes() -> None:
    mailbox: Mailbox[int] = Mailbox(8, backpressure="block")
    await mailbox.send(1, priority=3)
    mailbox.send_nowait(2)
    item = await mailbox.receive(timeout=1.0)
    assert_type(item, int | Control)
    await mailbox.send("x")  # expect-error: arg-type


# -- the seeds' ring-kernel API --------------------------------------------------------


@ring_kernel(kernel_id="typing_square", queue_size=1000)
async def square(ctx: RingKernelContext) -> None:
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.1)
        except TimeoutError:
            continue
        await ctx.send(Response(result=msg.data**2, correlation_id=msg.message_id))


async def seeds() -> None:
    async with RingKernelRuntime(enable_telemetry=True) as runtime:
        await runtime.launch("typing_square")
        await runtime.activate("typing_square")
        await runtime.send("typing_square", Request(data=7))
        response = await runtime.receive("typing_square", timeout=5)
        print(response.result)
        telemetry = runtime.get_telemetry("typing_square")
        if telemetry is not None:
            assert_type(telemetry.messages_processed, int)


# -- persistent kernels ----------------------------------------------------------------

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REP = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def double(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    replies = np.empty(len(requests), REP)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


kernel = PersistentKernel("typing_double", REQ, REP, capacity=64, bodies={"cpu": double})


def twice(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return values * 2


F8 = np.dtype(np.float64)
plain = PersistentKernel("typing_twice", F8, F8, capacity=64, bodies={"cpu": twice})


async def persistent() -> None:
    async with open_persistent_kernel(kernel, "cpu") as session:
        assert_type(kernel, PersistentKernel[np.void, np.void])
        assert_type(session, PersistentKernelSession[np.void, np.void])
        reply = await session.request((1, 2.0))
        print(reply["y"])
        typed = session
        assert_type(await typed.request((1, 2.0)), np.void)
        assert_type(await typed.request({"id": 1, "x": 2.0}), np.void)
        assert_type(await typed.request(np.zeros(1, REQ)), np.void)
        assert_type(await typed.request(bytes(16)), np.void)
        assert_type(await typed.request_batch(np.zeros(4, REQ)), npt.NDArray[np.void])
        assert_type(await typed.request_batch([(1, 2.0), (2, 3.0)]), npt.NDArray[np.void])
        assert_type(await typed.send((1, 2.0)), int)
        assert_type(await typed.send_batch([(1, 2.0)], reply=False), int)
        assert_type(await typed.receive(), np.void)
        assert_type(await typed.receive_batch(), npt.NDArray[np.void])
        print((await typed.request((1, 2.0)))["y"])

        # What strict checking must refuse.
        await session.request([1, 2.0])  # expect-error: arg-type
        await session.request(None)  # expect-error: arg-type
        await session.request_batch(3)  # expect-error: arg-type
        untyped = PersistentKernel("untyped", [("id", "<u8")], [("id", "<u8")])
        assert_type(untyped, PersistentKernel[Any, Any])
        await session.send({1, 2})  # expect-error: arg-type
        await typed.request_batch(np.zeros(4))  # expect-error: arg-type
        text: str = await typed.request((1, 2.0))  # expect-error: assignment
        replies = await typed.request_batch([(1, 2.0)])
        floats: npt.NDArray[np.float64] = replies  # expect-error: assignment
        print(text, floats)

    async with open_persistent_kernel(plain, "cpu") as numbers:
        scalars = numbers
        assert_type(scalars, PersistentKernelSession[np.float64, np.float64])
        assert_type(await scalars.request(2.0), np.float64)
        assert_type(await scalars.request_batch(np.zeros(4)), npt.NDArray[np.float64])

    async with open_nursery() as nursery:
        ref = await nursery.start_actor(kernel, name="typing_double", paused=False)
        assert_type(ref, KernelActorRef[np.void, np.void])
        typed_ref = ref
        assert_type(await typed_ref.ask((1, 2.0)), np.void)
        assert_type(await typed_ref.ask_batch(np.zeros(4, REQ)), npt.NDArray[np.void])
        assert_type(await typed_ref.ask_batch([(1, 2.0)]), npt.NDArray[np.void])
        assert_type(await typed_ref.ask_many([(1, 2.0), (2, 3.0)]), list[np.void])
        await typed_ref.tell((1, 2.0))
        await typed_ref.tell_many([(1, 2.0)])
        # The handle's own faces keep the kernel's record types.
        assert_type(typed_ref.session, PersistentKernelSession[np.void, np.void] | None)
        assert_type(typed_ref.kernel.reply_dtype, np.dtype[np.void])
        await typed_ref.pause()
        await typed_ref.resume()
        annotated: KernelActorRef[np.void, np.void] = await nursery.start_actor(kernel)
        spec: PersistentKernelSpec[np.void, np.void] = kernel  # what a backend receives
        print(annotated, spec, isinstance(annotated, KernelActorRef))
        as_actor: ActorRef[Any, np.void] = typed_ref
        assert_type(await as_actor.ask((1, 2.0)), np.void)
        runner = PersistentKernelActor(kernel, backend="cpu")
        assert_type(runner, PersistentKernelActor[np.void, np.void])
        on_cpu = await nursery.start_actor(runner)
        assert_type(on_cpu, KernelActorRef[np.void, np.void])
        assert_type(await on_cpu.ask((1, 2.0), priority=np.int64(5)), np.void)
        assert_type(await on_cpu.ask_batch([(1, 2.0)], priority=np.int64(5)), npt.NDArray[np.void])
        mistyped: npt.NDArray[np.float64] = await on_cpu.ask_batch([])  # expect-error: assignment
        print(mistyped)

        await ref.tell([1, 2.0])  # expect-error: arg-type
        await ref.ask(None)  # expect-error: arg-type
        wrong: int = await typed_ref.ask((1, 2.0))  # expect-error: assignment
        print(wrong)


# -- a kernel made with @persistent_kernel keeps its record types --------------------------


@persistent_kernel(request_dtype=REQ, reply_dtype=REP, capacity=64)
def decorated(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return double(requests)


@persistent_kernel(request_dtype=F8, reply_dtype=np.dtype(np.float32), name="halve")
def halved(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return (values / 2).astype(np.float32)


@persistent_kernel(request_dtype=[("id", "<u8")], reply_dtype="<f8")
def loosely_typed(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return np.zeros(len(requests))


async def decorated_kernels() -> None:
    assert_type(decorated, PersistentKernel[np.void, np.void])
    assert_type(halved, PersistentKernel[np.float64, np.float32])
    assert_type(loosely_typed, PersistentKernel[Any, Any])
    assert_type(decorated.add_body("metal", double), PersistentKernel[np.void, np.void])
    async with open_persistent_kernel(decorated, "cpu") as session:
        assert_type(session, PersistentKernelSession[np.void, np.void])
        assert_type(await session.request((1, 2.0)), np.void)
        assert_type(await session.request_batch([(1, 2.0)]), npt.NDArray[np.void])
        assert_type(await session.receive_batch(), npt.NDArray[np.void])
        await session.request(None)  # expect-error: arg-type
        wrong: float = await session.request((1, 2.0))  # expect-error: assignment
        print(wrong)
    async with open_persistent_kernel(halved, "cpu") as numbers:
        assert_type(await numbers.request(2.0), np.float32)
        assert_type(await numbers.request_batch(np.zeros(4)), npt.NDArray[np.float32])
        batch = await numbers.request_batch([1.0])
        halves: npt.NDArray[np.float64] = batch  # expect-error: assignment
        print(halves)
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(decorated)
        assert_type(ref, KernelActorRef[np.void, np.void])
        assert_type(await ref.ask((1, 2.0)), np.void)
        assert_type(await ref.ask_batch(np.zeros(4, REQ)), npt.NDArray[np.void])
        assert_type(await ref.ask_many([(1, 2.0)]), list[np.void])
        await ref.ask(None)  # expect-error: arg-type
        # with a backend: PersistentKernelActor keeps the kernel's record types
        halver = await nursery.start_actor(PersistentKernelActor(halved, backend="cpu"))
        assert_type(halver, KernelActorRef[np.float64, np.float32])
        assert_type(await halver.ask(2.0), np.float32)
        assert_type(await halver.ask_batch(np.zeros(4)), npt.NDArray[np.float32])
        doubles: npt.NDArray[np.float64] = await halver.ask_batch([1.0])  # expect-error: assignment
        print(doubles)
    decorated(np.zeros(1, REQ))  # expect-error: operator
    persistent_kernel(request_dtype=REQ)  # expect-error: call-overload
    persistent_kernel(request_dtype=REQ, reply_dtype=REP)(42)  # expect-error: arg-type


async def placed_kernel(elsewhere: Placement) -> None:
    async with open_nursery() as nursery:
        # A kernel placed elsewhere has the handle its placement makes.
        remote = await nursery.start_actor(kernel, placement=elsewhere)
        assert_type(remote, ActorRef[Any, Any])


# -- meshes and broadcast streams ----------------------------------------------------------


async def meshes() -> None:
    async with open_nursery() as nursery:
        mesh = await nursery.start_mesh(Doubler, shape={"gpu": 4})
        assert_type(mesh, ActorMesh[int, int])
        assert_type(await mesh.call(1), list[int])
        assert_type(await mesh.scatter([1, 2, 3, 4]), list[int])
        assert_type(await mesh.call_one(1), int)
        assert_type(await mesh.call(1, priority=np.int64(5)), list[int])
        assert_type(await mesh.call_one(1, priority=np.uint8(200)), int)
        await mesh.broadcast(1, priority=np.int64(5))
        await mesh.call(1, priority=5.0)  # expect-error: arg-type
        assert_type(mesh.choose(), ActorRef[int, int])
        assert_type(mesh.slice(gpu=slice(0, 2)), ActorMesh[int, int])
        assert_type(mesh.members, list[ActorRef[int, int]])
        async for point, reply in mesh.stream(3):
            assert_type(point, tuple[int, ...])
            assert_type(reply, int)
        await mesh.broadcast("x")  # expect-error: arg-type
        wrong: str = (await mesh.call(1))[0]  # expect-error: assignment
        print(wrong)
        kernels = await nursery.start_mesh(kernel, devices="all")
        assert_type(await kernels.call((1, 2.0)), list[np.void])
        try:
            await mesh.call(1, timeout=1.0)
        except MeshError as error:
            assert_type(error.failures, dict[tuple[int, ...], Exception])


def broadcast_streams() -> None:
    send, subscribe = create_broadcast_stream[int](16)
    receive = subscribe()
    send.send_nowait(1)
    assert_type(receive.receive_nowait(), int)
    send.send_nowait("x")  # expect-error: arg-type
