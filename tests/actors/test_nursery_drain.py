"""Leaving a nursery drains it to quiescence: actors that message each other finish.

The body's end refuses messages from outside, lets the nursery's own actors go on
sending to each other, and stops all of them together once every mailbox is empty and
no handler runs. ``shutdown_timeout`` bounds it and says what was left. Errors have one
shape on both event loops: one is raised bare, several are grouped.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import numpy as np
import pytest

from pdc_core import (
    Actor,
    ActorCrashed,
    ActorRef,
    ActorState,
    ActorStopped,
    KernelStopTimeout,
    PersistentKernel,
    PersistentKernelActor,
    ShutdownTimeout,
    open_nursery,
)

LIMIT = 10  # seconds: no test may hang
N = 200
REQUEST = np.dtype([("x", "<f8")])
REPLY = np.dtype([("y", "<f8")])


class Forward(Actor[Any, None]):
    """Tells every message to the next actor (set after start), then records it."""

    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen
        self.next: ActorRef[Any, Any] | None = None

    async def handle(self, message: Any) -> None:
        await anyio.lowlevel.checkpoint()  # let the others run between messages
        if self.next is not None:
            await self.next.tell(message)
        self.seen.append(message)


@pytest.mark.parametrize("order", ["sink first", "source first"])
async def test_a_pipeline_exits_cleanly_in_either_start_order(order: str) -> None:
    seen: dict[str, list[Any]] = {"a": [], "b": [], "c": []}
    actors = {name: Forward(seen[name]) for name in "abc"}
    refs: dict[str, ActorRef[Any, Any]] = {}
    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            for name in "cba" if order == "sink first" else "abc":
                refs[name] = await nursery.start_actor(actors[name], name=name)
            actors["a"].next = refs["b"]
            actors["b"].next = refs["c"]
            for i in range(N):
                await refs["a"].tell(i)
    assert seen == {name: list(range(N)) for name in "abc"}
    assert all(ref.state is ActorState.STOPPED for ref in refs.values())


async def test_fan_out_and_fan_in_finish() -> None:
    totals: list[int] = []

    class Sink(Actor[int, None]):
        async def handle(self, message: int) -> None:
            totals.append(message)

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            sink = await nursery.start_actor(Sink, name="sink")

            async def square(message: int) -> None:
                await sink.tell(message * message)

            workers = [await nursery.start_actor(square, name=f"w{i}") for i in range(3)]

            async def scatter(message: int) -> None:
                for worker in workers:
                    await worker.tell(message)

            source = await nursery.start_actor(scatter, name="source")
            for i in range(50):
                await source.tell(i)
    assert sorted(totals) == sorted(3 * [i * i for i in range(50)])


async def test_a_cycle_that_quiesces_ends_and_asks_between_actors_work() -> None:
    bounces: list[int] = []
    peers: dict[str, ActorRef[int, Any]] = {}

    async def ping(message: int) -> None:
        bounces.append(message)
        if message:
            await peers["pong"].tell(message - 1)

    async def pong(message: int) -> None:
        bounces.append(message)
        if message:
            assert await peers["echo"].ask(message) == message  # a round trip while draining
            await peers["ping"].tell(message - 1)

    async def echo(message: int) -> int:
        return message

    with anyio.fail_after(LIMIT):
        async with open_nursery() as nursery:
            peers["echo"] = await nursery.start_actor(echo, name="echo")
            peers["ping"] = await nursery.start_actor(ping, name="ping")
            peers["pong"] = await nursery.start_actor(pong, name="pong")
            await peers["ping"].tell(100)
    assert bounces == list(range(100, -1, -1))


async def test_a_cycle_that_never_quiesces_is_bounded_by_shutdown_timeout() -> None:
    peers: dict[str, ActorRef[int, Any]] = {}

    async def left(message: int) -> None:
        await peers["right"].tell(message + 1)

    async def right(message: int) -> None:
        await peers["left"].tell(message + 1)

    with anyio.fail_after(LIMIT), pytest.raises(ShutdownTimeout) as timed_out:  # noqa: PT012
        async with open_nursery(shutdown_timeout=0.2) as nursery:
            peers["left"] = await nursery.start_actor(left, name="left")
            peers["right"] = await nursery.start_actor(right, name="right")
            await peers["left"].tell(0)
    left_over = timed_out.value.left
    assert set(left_over) == {"left", "right"}
    assert sum(left_over.values()) >= 1  # the message going round
    assert all(ref.state is ActorState.STOPPED for ref in peers.values())


async def test_outside_senders_are_refused_while_it_drains_and_after() -> None:
    release = anyio.Event()
    outside: list[BaseException] = []

    async def slow(message: Any) -> None:
        await release.wait()

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg, open_nursery() as nursery:
            ref = await nursery.start_actor(slow, name="slow")
            await ref.tell("in hand")

            async def from_outside() -> None:
                await anyio.wait_all_tasks_blocked()  # the body has ended: draining
                try:
                    await ref.tell("too late")
                except ActorStopped as exc:
                    outside.append(exc)
                release.set()

            tg.start_soon(from_outside)
    assert len(outside) == 1
    assert "'slow'" in str(outside[0])
    with pytest.raises(ActorStopped):
        await ref.tell("after the block")


async def test_one_error_is_raised_bare() -> None:
    async def crash(message: Any) -> None:
        raise KeyError("in the actor")

    with pytest.raises(ActorCrashed) as crashed:  # noqa: PT012
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(crash, name="crash")
            await ref.tell("x")
            await anyio.sleep_forever()  # cancelled by the crash
    assert isinstance(crashed.value.cause, KeyError)


async def test_several_errors_are_grouped_on_both_loops() -> None:
    crashed = anyio.Event()

    async def crash(message: Any) -> None:
        raise KeyError("in the actor")

    caught: list[BaseException] = []
    try:
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(crash, name="crash")
            await ref.tell("x")
            try:
                await anyio.sleep_forever()
            finally:  # the body fails too, while it is being cancelled by the crash
                crashed.set()
                raise ValueError("in the body")
    except* ActorCrashed as group:
        caught.extend(group.exceptions)
    except* ValueError as group:
        caught.extend(group.exceptions)
    assert crashed.is_set()
    assert sorted(type(error).__name__ for error in caught) == ["ActorCrashed", "ValueError"]


async def test_a_stop_timeout_under_an_enclosing_cancellation_is_one_bare_crash() -> None:
    """A persistent-kernel actor whose stop times out while an enclosing scope cancels
    the nursery: ActorCrashed, bare, on both loops (trio used to group it)."""
    pytest.importorskip("pdc_cpu", reason="needs the cpu backend")
    entered = threading.Event()
    release = threading.Event()

    def hold(requests: Any) -> Any:
        entered.set()
        release.wait(LIMIT)  # bounded: a failed test must not keep the worker
        return np.zeros(len(requests), REPLY)

    kernel = PersistentKernel("held", REQUEST, REPLY, capacity=4, bodies={"cpu": hold})
    try:
        with anyio.fail_after(LIMIT), pytest.raises(ActorCrashed) as crashed:  # noqa: PT012
            with anyio.CancelScope() as outer:
                async with open_nursery() as nursery:
                    actor = PersistentKernelActor(kernel, "cpu", stop_timeout=0.05)
                    ref = await nursery.start_actor(actor)
                    await ref.tell((1.0,))
                    while not entered.is_set():  # noqa: ASYNC110 - set by the worker thread
                        await anyio.sleep(0.001)
                    outer.cancel()
                    await anyio.sleep_forever()
        assert isinstance(crashed.value.cause, KernelStopTimeout)
    finally:
        release.set()
